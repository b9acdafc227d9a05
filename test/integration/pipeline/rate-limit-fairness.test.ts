/**
 * Red-team F2: one identity must not lock a source for every identity. Two replicas share one
 * control database (per identity 5, per source 8 calls a minute; budgets under 32 are exact across
 * replicas). A hostile identity sends 40 calls, 10 at a time, across both replicas: 5 answered, 35
 * rate_limited for the identity. The source budget spent is its 5 admitted calls only, so an honest
 * identity on the same source gets the 3 calls left, then rate_limited naming the source.
 */
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { startGovernedGateway, type GovernedGateway } from '../../../src/gateway';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from '../../../src/control/config';
import { createLogger } from '../../../src/observability/logger';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { grantRole } from '../../../src/control/grants';
import { DEMO_ROLE } from '../../../src/demo/provision';

jest.setTimeout(60_000);

let env: GovernedEnv;
let second: GovernedGateway;
let honestKey: string;
const limits = { per_identity: { points: 5, window_seconds: 60 }, per_source: { points: 8, window_seconds: 60 } };

beforeAll(async () => {
  env = await startGovernedEnv({ config: { rate_limits: limits } });
  const config = { ...structuredClone(DEFAULT_CONFIG as ResolvedGatewayConfig), rate_limits: limits };
  second = await startGovernedGateway({ db: env.db, config, host: '127.0.0.1', port: 0, logger: createLogger('silent') });
  const honest = await createIdentity(env.db, 'honest-agent');
  await grantRole(env.db, { identityId: honest.id, roleName: DEMO_ROLE.name, sourceId: 'chinook' });
  honestKey = (await createApiKey(env.db, honest.id)).secret;
}, 60_000);
afterAll(async () => {
  await second?.close(1000);
  await env?.close();
});

/** 'ok', or the refusal's code and the scope its message names. */
async function outcome(target: { url: string }, key: string): Promise<string> {
  const r = await callTool(target, 'interlock_query', { source_id: 'chinook', sql: 'select 1 as one' }, key);
  expect(r.status).toBe(200);
  const sc = r.body.result.structuredContent;
  if (!r.body.result.isError) {
    expect(sc).toMatchObject({ rows: [{ one: 1 }] });
    return 'ok';
  }
  expect(sc.code).toBe('rate_limited');
  return sc.message.includes("source 'chinook'") ? 'rate_limited:source' : sc.message.includes('this identity') ? 'rate_limited:identity' : `other:${sc.message}`;
}

test('a hostile identity bursting far past its budget leaves the rest of the source to other identities', async () => {
  const hostile: string[] = [];
  for (let i = 0; i < 40; i += 10) hostile.push(...(await Promise.all(Array.from({ length: 10 }, (_, j) => outcome(j % 2 ? second : env, env.apiKey)))));
  expect(hostile.filter((o) => o === 'ok')).toHaveLength(5);
  expect(hostile.filter((o) => o === 'rate_limited:identity')).toHaveLength(35);
  const honest: string[] = [];
  for (let i = 0; i < 5; i++) honest.push(await outcome(i % 2 ? second : env, honestKey));
  expect(honest).toEqual(['ok', 'ok', 'ok', 'rate_limited:source', 'rate_limited:source']);
});
