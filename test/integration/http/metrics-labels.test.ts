/**
 * Issue 10, Build 7: metric labels come only from closed sets. After one request of each class has
 * created its series, floods of client-chosen names — notifications with 64 KiB method names,
 * unknown request methods, unknown tools, unknown source ids (with and without a key) — must not
 * add a single series, and /metrics keeps answering 200.
 */
import { randomBytes } from 'node:crypto';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';

jest.setTimeout(120_000);

let env: GovernedEnv;
let base: string;

beforeAll(async () => {
  // Refused calls spend rate-limit points (Build 6): lift the limits so every flood call is answered as itself.
  env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100_000, window_seconds: 60 }, per_source: { points: 100_000, window_seconds: 60 } } } });
  base = env.url.replace(/\/mcp$/, '');
});
afterAll(async () => {
  await env?.close();
});

const HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' };

async function post(body: unknown, key: string | null = null): Promise<number> {
  const headers: Record<string, string> = { ...HEADERS };
  if (key) headers.authorization = `Bearer ${key}`;
  const r = await fetch(env.url, { method: 'POST', headers, body: JSON.stringify(body) });
  await r.arrayBuffer();
  return r.status;
}

/** Series of the gateway's own metrics (process metrics, whose series depend on the runtime, are left out). */
async function seriesCount(): Promise<{ status: number; count: number; text: string }> {
  const r = await fetch(`${base}/metrics`);
  const text = await r.text();
  const count = text.split('\n').filter((l) => l.startsWith('interlock_') && !l.startsWith('interlock_process_')).length;
  return { status: r.status, count, text };
}

const rnd = () => randomBytes(6).toString('hex');

/** One request of each flood class. */
async function oneOfEach(i: number, longName: string): Promise<void> {
  const name = `${longName}${i}`;
  expect(await post({ jsonrpc: '2.0', method: name })).toBe(202);
  expect(await post({ jsonrpc: '2.0', method: `notifications/${rnd()}` })).toBe(202);
  expect(await post({ jsonrpc: '2.0', id: i, method: `x/${rnd()}` })).toBe(200);
  expect((await callTool(env, `no_such_tool_${rnd()}`, {}, env.apiKey)).body.error.code).toBe(-32602);
  const unknownSource = await callTool(env, 'interlock_query', { source_id: `s${rnd()}`, sql: 'SELECT 1' }, env.apiKey);
  expect(unknownSource.body.result.structuredContent).toMatchObject({ status: 'not_found', code: 'unknown_source' });
  const described = await callTool(env, 'interlock_describe_source', { source_id: `s${rnd()}` }, env.apiKey);
  expect(described.body.result.structuredContent).toMatchObject({ code: 'unknown_source' });
  const keyless = await callTool(env, 'interlock_query', { source_id: `s${rnd()}`, sql: 'SELECT 1' }, null);
  expect(keyless.body.result.structuredContent).toMatchObject({ status: 'unauthorized' });
}

test('flooding unknown methods, tools and source ids adds no metric series; /metrics answers 200', async () => {
  const longName = `notifications/${'n'.repeat(64 * 1024)}`;
  await oneOfEach(0, longName);
  const before = await seriesCount();
  expect(before.status).toBe(200);
  expect(before.text).toMatch(/interlock_mcp_requests_total\{method="other",dialect="handshake",status="202"\} \d+/);
  expect(before.text).toMatch(/interlock_tool_calls_total\{tool="interlock_query",source="other",decision="refused",reason="unknown_source"\} \d+/);
  // No label value longer than a spec name ever appears.
  expect(before.text).not.toMatch(/n{200}/);

  const rounds = 150;
  for (let i = 1; i <= rounds; i += 10) await Promise.all(Array.from({ length: 10 }, (_, k) => oneOfEach(i + k, longName)));

  const after = await seriesCount();
  expect(after.status).toBe(200);
  expect(after.count).toBe(before.count);
  expect(after.text).not.toMatch(/n{200}/);
  expect(after.text).not.toMatch(/source="s[0-9a-f]{12}"/);
  // The known source keeps its own label.
  await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1 AS one' }, env.apiKey);
  expect((await seriesCount()).text).toMatch(/interlock_tool_calls_total\{tool="interlock_query",source="chinook",decision="allowed",reason=""\} 1/);
});
