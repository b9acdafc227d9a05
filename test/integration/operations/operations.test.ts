/**
 * Issue 5 against the governed gateway: cancellation of a running statement when the client closes
 * the stream (checked in pg_stat_activity), the audit's `cancelled`, statement timeouts as a clear
 * refusal, and the operations endpoints an operator reads.
 */
import http from 'node:http';
import pg from 'pg';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { searchAudit } from '../../../src/audit/writer';
import { getSource, putSource } from '../../../src/control/sources';

let env: GovernedEnv;
let admin: pg.Client;
const SLOW = 'SELECT count(*) FROM track a, track b, track c';

beforeAll(async () => {
  env = await startGovernedEnv();
  admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
}, 60_000);
afterAll(async () => {
  await admin?.end();
  await env?.close();
});

async function activeSlow(): Promise<number> {
  const r = await admin.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND query = $1", [SLOW]);
  return r.rows[0].n;
}

test('closing the SSE stream cancels the statement in PostgreSQL within one second; the audit says cancelled', async () => {
  const body = JSON.stringify({ jsonrpc: '2.0', id: 'slow', method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: SLOW } } });
  const u = new URL(env.url);
  const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${env.apiKey}`, 'content-length': Buffer.byteLength(body) } });
  req.on('error', () => undefined);
  req.end(body);
  let seen = false;
  for (let i = 0; i < 100 && !seen; i++) {
    seen = (await activeSlow()) > 0;
    if (!seen) await new Promise((r) => setTimeout(r, 50));
  }
  expect(seen).toBe(true);
  const closedAt = Date.now();
  req.destroy();
  let gone = false;
  while (!gone && Date.now() - closedAt < 1000) {
    gone = (await activeSlow()) === 0;
    if (!gone) await new Promise((r) => setTimeout(r, 25));
  }
  expect(gone).toBe(true);
  await new Promise((r) => setTimeout(r, 300));
  const events = (await searchAudit(env.db, { limit: 50 })).events.filter((e) => e.kind === 'tool_call' && e.fingerprint);
  expect(events.find((e) => e.decision === 'cancelled')).toMatchObject({ decision: 'cancelled', reasonCode: 'cancelled', sourceId: 'chinook' });
  // The pool is healthy afterwards.
  const after = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1 AS ok' }, env.apiKey);
  expect(after.body.result.structuredContent.rows).toEqual([{ ok: 1 }]);
}, 30_000);

test('a statement over the source timeout is refused as unavailable/statement_timeout', async () => {
  const src = (await getSource(env.db, 'chinook'))!;
  await putSource(env.db, { id: src.id, type: 'postgres', name: src.name, description: src.description, settings: { ...src.settings, statement_timeout_ms: 300 } });
  env.gateway.store.invalidate('sources');
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: SLOW }, env.apiKey);
  expect(r.body.result.isError).toBe(true);
  expect(r.body.result.structuredContent).toMatchObject({ status: 'unavailable', code: 'statement_timeout' });
  await putSource(env.db, { id: src.id, type: 'postgres', name: src.name, description: src.description, settings: src.settings });
  env.gateway.store.invalidate('sources');
}, 30_000);

test('/healthz, /readyz and /metrics tell an operator what happened', async () => {
  const base = env.url.replace(/\/mcp$/, '');
  expect(await (await fetch(`${base}/healthz`)).json()).toEqual({ status: 'ok' });
  const ready = await fetch(`${base}/readyz`);
  expect([ready.status, await ready.json()]).toEqual([200, { status: 'ready' }]);
  await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT * FROM employee' }, env.apiKey);
  await callTool(env, 'interlock_query', { source_id: 'chinook', sql: "INSERT INTO playlist (playlist_id, name) VALUES (9500, 'm')" }, env.apiKey);
  const text = await (await fetch(`${base}/metrics`)).text();
  expect(text).toMatch(/interlock_tool_calls_total\{tool="interlock_query",source="chinook",decision="refused",reason="source_role_denied"\} \d+/);
  expect(text).toMatch(/interlock_tool_calls_total\{tool="interlock_query",source="chinook",decision="cancelled",reason="cancelled"\} 1/);
  expect(text).toMatch(/interlock_mcp_requests_total\{method="tools\/call",dialect="handshake",status="200"\} \d+/);
  expect(text).toMatch(/interlock_source_circuit_state\{source="chinook"\} 0/);
  expect(text).toMatch(/interlock_approvals_pending [1-9]/);
  expect(text).toMatch(/interlock_tool_call_duration_seconds_bucket/);
});
