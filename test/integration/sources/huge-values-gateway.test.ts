/**
 * Huge values through the governed gateway (issue 10, Build 1 and 2, "Done when"): one agent sends
 * statements whose single value passes V8's longest string (about 512 M characters; the driver used
 * to throw ERR_STRING_TOO_LONG while decoding the row and the process exited), built three ways —
 * a `$1` parameter to repeat, `||` concatenation, and the string_agg aggregate — on POST /mcp, and
 * once on POST /v1/sources/{id}/query. In each case the first call gets the contract answer
 * (`result_too_large`, status forbidden), a second identity's concurrent reads are answered, and
 * the gateway keeps serving afterwards. A value that fits partly gives rows with `truncated: true`.
 * Bounded: the source's statement_timeout is 60 s; the statements run one after another.
 */
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { grantRole } from '../../../src/control/grants';
import { getSource, putSource } from '../../../src/control/sources';
import { DEMO_ROLE } from '../../../src/demo/provision';

jest.setTimeout(180_000);

let env: GovernedEnv;
let otherKey: string;

beforeAll(async () => {
  env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100_000, window_seconds: 60 }, per_source: { points: 100_000, window_seconds: 60 } } } });
  const src = await getSource(env.db, 'chinook');
  if (!src || src.type !== 'postgres') throw new Error('no chinook source');
  await putSource(env.db, { id: src.id, type: src.type, name: src.name, description: src.description, enabled: true, settings: { ...src.settings, statement_timeout_ms: 60_000 } });
  const other = await createIdentity(env.db, 'bystander-agent');
  await grantRole(env.db, { identityId: other.id, roleName: DEMO_ROLE.name, sourceId: 'chinook' });
  otherKey = (await createApiKey(env.db, other.id)).secret;
});
afterAll(async () => {
  await env?.close();
});

/** The bystander's reads while `hostile` runs; each must be answered with its rows. */
async function bystanderAnswered(hostile: Promise<unknown>): Promise<number> {
  let done = false;
  void hostile.finally(() => (done = true));
  let answered = 0;
  do {
    const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT count(*)::int AS n FROM genre' }, otherKey);
    expect(r.status).toBe(200);
    expect(r.body.result.structuredContent).toMatchObject({ rows: [{ n: 25 }] });
    expect(r.body.result.isError).toBeUndefined();
    expect(r.body.result.structuredContent.rows).toEqual([{ n: 25 }]);
    answered++;
    await new Promise((r) => setTimeout(r, 100));
  } while (!done);
  return answered;
}

describe.each([
  ['a $1 parameter to repeat', "SELECT repeat('x', $1::int) AS v", [600_000_000]],
  ['|| concatenation', "SELECT repeat('x', $1::int) || repeat('y', $1::int) AS v", [300_000_000]],
  ['the string_agg aggregate', "SELECT string_agg(repeat('z', 1000000), '') AS v FROM generate_series(1, 600) AS g", []],
])('a value past 512 M characters built with %s', (_how, sql, params) => {
  test('POST /mcp: result_too_large; the bystander is answered; the gateway keeps serving', async () => {
    const hostile = callTool(env, 'interlock_query', { source_id: 'chinook', sql, params }, env.apiKey);
    expect(await bystanderAnswered(hostile)).toBeGreaterThan(0);
    const r = await hostile;
    expect(r.status).toBe(200);
    expect(r.body.result.isError).toBe(true);
    expect(r.body.result.structuredContent).toMatchObject({ status: 'forbidden', code: 'result_too_large' });
    const after = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1 AS one' }, env.apiKey);
    expect(after.body.result.structuredContent.rows).toEqual([{ one: 1 }]);
  });
});

test('POST /v1/sources/{id}/query answers result_too_large with HTTP 403', async () => {
  const base = env.url.replace(/\/mcp$/, '');
  const hostile = fetch(`${base}/v1/sources/chinook/query`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${env.apiKey}` },
    body: JSON.stringify({ sql: "SELECT repeat('x', $1::int) AS v", params: [600_000_000] }),
  });
  expect(await bystanderAnswered(hostile)).toBeGreaterThan(0);
  const r = await hostile;
  expect(r.status).toBe(403);
  expect(await r.json()).toMatchObject({ error: 'forbidden', code: 'result_too_large' });
});

test('rows that fit before a huge one are answered, truncated', async () => {
  const sql = "SELECT g, CASE WHEN g < 3 THEN 'small' ELSE repeat('x', $1::int) END AS v FROM generate_series(1, 4) AS g";
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql, params: [50_000_000] }, env.apiKey);
  expect(r.body.result.structuredContent).toMatchObject({ rows: [{ g: 1, v: 'small' }, { g: 2, v: 'small' }], row_count: 2, truncated: true });
});
