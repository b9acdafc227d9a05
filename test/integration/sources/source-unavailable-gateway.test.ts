/**
 * A source that cannot be reached answers `source_unavailable` (status unavailable, retryable; spec/errors-v1.json),
 * not the opaque `tool_execution_failed`, so an agent can tell the source is down: a source whose server
 * refuses the connection (a closed port), and a source whose database was dropped after it was registered
 * (3D000 while connecting). The answer carries no host, port, database or driver text.
 */
import pg from 'pg';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { getSource, putSource } from '../../../src/control/sources';
import { ADMIN_URL } from '../../helpers/pg';
import { freePort } from './cluster';

jest.setTimeout(120_000);

let env: GovernedEnv;
beforeAll(async () => {
  env = await startGovernedEnv();
});
afterAll(async () => {
  await env?.close();
});

const MESSAGE =
  "The source database cannot be reached now (its server refuses or drops connections, is shutting down or starting up, does not accept the gateway's credentials, or its database is missing); nothing was run. Try again later; an operator can see why in the gateway log.";

function expectUnavailable(r: { status: number; body: any }, leaks: string[]): void {
  expect(r.status).toBe(200);
  expect(r.body.result.isError).toBe(true);
  expect(r.body.result.structuredContent).toEqual({ status: 'unavailable', code: 'source_unavailable', message: MESSAGE, request_id: expect.stringMatching(/^req_/) });
  const text = JSON.stringify(r.body);
  for (const leak of leaks) expect(text).not.toContain(leak);
  expect(text).not.toMatch(/ECONNREFUSED|database "|3D000|127\.0\.0\.1|tool execution failed/);
}

test('the source database dropped after registration: source_unavailable, no database name', async () => {
  const ok = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1 AS one' }, env.apiKey);
  expect(ok.body.result.structuredContent.rows).toEqual([{ one: 1 }]);
  const src = await getSource(env.db, 'chinook');
  if (!src || src.type !== 'postgres') throw new Error('no chinook source');
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE "${src.settings.database}" WITH (FORCE)`);
  } finally {
    await admin.end();
  }
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 2 AS two' }, env.apiKey);
  expectUnavailable(r, [src.settings.database]);
});

test('the source server refuses the connection (closed port): source_unavailable, no host or port', async () => {
  const src = await getSource(env.db, 'chinook');
  if (!src || src.type !== 'postgres') throw new Error('no chinook source');
  const port = await freePort();
  await putSource(env.db, { id: src.id, type: src.type, name: src.name, description: src.description, enabled: true, settings: { ...src.settings, port } });
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 3 AS three' }, env.apiKey);
  expectUnavailable(r, [String(port)]);
});

test('modern dialect: HTTP 503, JSON-RPC -32603 with the same data', async () => {
  const args = { source_id: 'chinook', sql: 'SELECT 4 AS four' };
  const r = await fetch(env.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${env.apiKey}`, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'interlock_query' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: args, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } } }),
  });
  expect(r.status).toBe(503);
  expect(await r.json()).toEqual({ jsonrpc: '2.0', id: 1, error: { code: -32603, message: MESSAGE, data: { status: 'unavailable', code: 'source_unavailable', message: MESSAGE, request_id: expect.stringMatching(/^req_/) } } });
});
