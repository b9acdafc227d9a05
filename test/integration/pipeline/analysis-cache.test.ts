/**
 * The analysis cache in the running gateway (issue 13): a repeated statement is served from it, and
 * every change of grants, policies or catalog clears it through the interlock_control NOTIFY — a
 * stale allow after a revoke would be a security bug, so each case ends with the refusal.
 */
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { revokeGrant, grantRole } from '../../../src/control/grants';
import { addPolicy, removePolicy } from '../../../src/control/policies';
import { loadCatalog, saveCatalog } from '../../../src/control/catalog';
import { DEMO_ROLE } from '../../../src/demo/provision';

let env: GovernedEnv;
const limits = { per_identity: { points: 100_000, window_seconds: 60 }, per_source: { points: 100_000, window_seconds: 60 } };
const SQL = 'SELECT name FROM track WHERE track_id = $1';

beforeAll(async () => {
  env = await startGovernedEnv({ config: { rate_limits: limits } as never });
}, 60_000);
afterAll(async () => {
  await env?.close();
});

const query = async (sql = SQL) => (await callTool(env, 'interlock_query', { source_id: 'chinook', sql, params: [1] }, env.apiKey)).body.result;

/** Waits (≤ 5 s) until the NOTIFY of a control change has cleared the cache. */
async function cleared(): Promise<void> {
  const until = Date.now() + 5000;
  while (env.gateway.analysisCache.size > 0) {
    if (Date.now() > until) throw new Error('analysis cache was not cleared by the control notification');
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function warm(): Promise<void> {
  const before = env.gateway.analysisCache.hits;
  const first = await query();
  if (first.isError) throw new Error(JSON.stringify(first));
  expect((await query()).isError).toBeFalsy();
  expect((await query()).isError).toBeFalsy();
  expect(env.gateway.analysisCache.hits).toBeGreaterThan(before);
  expect(env.gateway.analysisCache.size).toBeGreaterThan(0);
}

test('SECURITY: revoking the grant clears the cache and the next call is refused', async () => {
  await warm();
  await revokeGrant(env.db, { identityId: env.demo.identityId, roleName: DEMO_ROLE.name, sourceId: 'chinook' });
  await cleared();
  const r = await query();
  expect(r.isError).toBe(true);
  expect(r.structuredContent.code).toBe('unknown_source');
  await grantRole(env.db, { identityId: env.demo.identityId, roleName: DEMO_ROLE.name, sourceId: 'chinook' });
  // The refused call stopped at the source step, so the cache is already empty and cleared() cannot
  // tell when the grant's notification arrived: wait (≤ 5 s) for the call to be allowed again.
  let again = await query();
  for (const until = Date.now() + 5000; again.isError && Date.now() < until; again = await query()) await new Promise((r) => setTimeout(r, 50));
  expect(again.isError).toBeFalsy();
});

test('a new policy clears the cache and applies to the same statement', async () => {
  await warm();
  await addPolicy(env.db, { name: 'no-track', rule: { type: 'deny_relations', relations: ['public.track'] } });
  await cleared();
  expect((await query()).structuredContent.code).toBe('policy_denied');
  await removePolicy(env.db, 'no-track');
  await cleared();
  expect((await query()).isError).toBeFalsy();
});

test('a new catalog snapshot clears the cache; a relation gone from it is refused', async () => {
  await warm();
  const catalog = (await loadCatalog(env.db, 'chinook'))!;
  await saveCatalog(env.db, 'chinook', { ...catalog, relations: catalog.relations.filter((r) => r.name !== 'track'), scannedAt: new Date().toISOString() });
  await cleared();
  expect((await query()).structuredContent.code).toBe('source_role_denied');
  await saveCatalog(env.db, 'chinook', { ...catalog, scannedAt: new Date().toISOString() });
});
