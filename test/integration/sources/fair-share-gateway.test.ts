/**
 * Fair sharing through the governed gateway (issue 10, Build 5): with pool_size 2 and
 * max_concurrent_per_identity 2, one identity's two slow statements fill the pool; its third call is
 * refused `concurrency_limited` (status rate_limited, retry_after_ms) and another identity's read,
 * after waiting connect_timeout_ms for a pooled connection, is refused `source_busy` (status
 * unavailable, retry_after_ms) — never the opaque failure. /metrics shows the pool gauges labelled
 * by the registered source id. The slow statement is the test's own fixture: a STABLE SQL function
 * created by the superuser in the source database (agents may not call pg_sleep themselves).
 * The demo reader role's temp_file_limit ends a statement that spills too much (53400), which
 * never counts against the source (breaker threshold 2 here).
 */
import pg from 'pg';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { grantRole } from '../../../src/control/grants';
import { getSource, putSource } from '../../../src/control/sources';
import { scanSource } from '../../../src/control/scan';
import { DEMO_ROLE } from '../../../src/demo/provision';

jest.setTimeout(60_000);

let env: GovernedEnv;
let otherKey: string;

beforeAll(async () => {
  env = await startGovernedEnv();
  const admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
  await admin.query("CREATE FUNCTION public.slow_count(seconds float8) RETURNS int LANGUAGE sql STABLE AS 'SELECT count(*)::int FROM pg_catalog.pg_sleep(seconds)'");
  await admin.end();
  const src = await getSource(env.db, 'chinook');
  if (!src || src.type !== 'postgres') throw new Error('no chinook source');
  await putSource(env.db, {
    id: src.id,
    type: src.type,
    name: src.name,
    description: src.description,
    enabled: true,
    settings: { ...src.settings, trusted_functions: ['public.slow_count'], pool_size: 2, max_concurrent_per_identity: 2, identity_wait_ms: 200, connect_timeout_ms: 300, breaker: { failure_threshold: 2 } },
  });
  await scanSource(env.db, 'chinook');
  const other = await createIdentity(env.db, 'polite-agent');
  await grantRole(env.db, { identityId: other.id, roleName: DEMO_ROLE.name, sourceId: 'chinook' });
  otherKey = (await createApiKey(env.db, other.id)).secret;
});
afterAll(async () => {
  await env?.close();
});

async function metric(name: string): Promise<string[]> {
  const text = await (await fetch(env.url.replace(/\/mcp$/, '/metrics'))).text();
  return text.split('\n').filter((l) => l.startsWith(`${name}{`));
}

test('concurrency_limited for the greedy identity, source_busy for the others, pool gauges on /metrics', async () => {
  const slowSql = 'SELECT public.slow_count(1.5) AS n';
  const first = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1 AS one' }, env.apiKey);
  expect(first.body.result.structuredContent.rows).toEqual([{ one: 1 }]);
  const slow = [1, 2].map(() => callTool(env, 'interlock_query', { source_id: 'chinook', sql: slowSql }, env.apiKey));
  await new Promise((r) => setTimeout(r, 400));
  expect(await metric('interlock_source_pool_size')).toEqual(['interlock_source_pool_size{source="chinook"} 2']);
  expect(await metric('interlock_source_pool_in_use')).toEqual(['interlock_source_pool_in_use{source="chinook"} 2']);

  const greedy = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 2 AS two' }, env.apiKey);
  expect(greedy.status).toBe(200);
  expect(greedy.body.result.isError).toBe(true);
  expect(greedy.body.result.structuredContent).toMatchObject({ status: 'rate_limited', code: 'concurrency_limited', retry_after_ms: 1000 });

  const polite = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 3 AS three' }, otherKey);
  expect(polite.body.result.isError).toBe(true);
  expect(polite.body.result.structuredContent).toMatchObject({ status: 'unavailable', code: 'source_busy', retry_after_ms: 1000 });

  for (const r of await Promise.all(slow)) expect(r.body.result.structuredContent.rows).toEqual([{ n: 1 }]);
  const after = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 3 AS three' }, otherKey);
  expect(after.body.result.structuredContent.rows).toEqual([{ three: 3 }]);
  expect(await metric('interlock_source_pool_in_use')).toEqual(['interlock_source_pool_in_use{source="chinook"} 0']);
  expect(await metric('interlock_source_pool_waiters')).toEqual(['interlock_source_pool_waiters{source="chinook"} 0']);
  expect(await metric('interlock_source_circuit_state')).toEqual(['interlock_source_circuit_state{source="chinook"} 0']);
});

test('modern dialect: source_busy and concurrency_limited are JSON-RPC errors with their HTTP status and Retry-After', async () => {
  const headers = (name: string, key: string) => ({
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': '2026-07-28',
    'mcp-method': 'tools/call',
    'mcp-name': name,
    authorization: `Bearer ${key}`,
  });
  const body = (sql: string) =>
    JSON.stringify({
      jsonrpc: '2.0',
      id: 7,
      method: 'tools/call',
      params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql }, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } },
    });
  const slow = [1, 2].map(() => fetch(env.url, { method: 'POST', headers: headers('interlock_query', env.apiKey), body: body('SELECT public.slow_count(1.5) AS n') }));
  await new Promise((r) => setTimeout(r, 400));
  const greedy = await fetch(env.url, { method: 'POST', headers: headers('interlock_query', env.apiKey), body: body('SELECT 1') });
  expect(greedy.status).toBe(429);
  expect(greedy.headers.get('retry-after')).toBe('1');
  expect(((await greedy.json()) as { error: unknown }).error).toMatchObject({ code: -32602, data: { status: 'rate_limited', code: 'concurrency_limited', retry_after_ms: 1000 } });
  const polite = await fetch(env.url, { method: 'POST', headers: headers('interlock_query', otherKey), body: body('SELECT 1') });
  expect(polite.status).toBe(503);
  expect(polite.headers.get('retry-after')).toBe('1');
  expect(((await polite.json()) as { error: unknown }).error).toMatchObject({ code: -32603, data: { status: 'unavailable', code: 'source_busy', retry_after_ms: 1000 } });
  for (const r of await Promise.all(slow)) expect(r.status).toBe(200);
});

test('the demo reader role carries temp_file_limit; a statement past it is the statement\'s failure, not the source\'s', async () => {
  const admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
  try {
    const r = await admin.query("SELECT unnest(setconfig) AS s FROM pg_db_role_setting WHERE setrole = $1::regrole", [env.demo.readerRole]);
    expect(r.rows.map((x: { s: string }) => x.s)).toContain('temp_file_limit=256MB');
  } finally {
    await admin.end();
  }
  for (let i = 0; i < 3; i++) {
    const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT count(DISTINCT g)::int AS n FROM generate_series(1, $1::int) AS g', params: [40_000_000] }, env.apiKey);
    expect(r.body.result.isError).toBe(true);
    expect(r.body.result.structuredContent).toMatchObject({ code: 'statement_failed' });
    expect(r.body.result.content[0].text).toContain('53400');
  }
  expect(await metric('interlock_source_circuit_state')).toEqual(['interlock_source_circuit_state{source="chinook"} 0']);
});
