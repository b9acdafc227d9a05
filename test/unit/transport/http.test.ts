import http from 'node:http';
import catalogue from '../../../generated/tool-catalogue.json';
import { startTestServer, type TestServer } from '../../helpers/server';
import type { ToolBinding, ToolOutcome } from '../../../src/tools/types';

const ENV = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
const BASE = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

let aborted: { reason: unknown } | null = null;
let fixedOutcome: ToolOutcome = { kind: 'result', content: [{ type: 'text', text: 'x' }] };
const probe = (name: string, handler: ToolBinding['handler'], governed = true): ToolBinding => ({ name, description: name, inputSchema: { type: 'object' }, governed, canonical: name, deprecated: false, validate: () => null, handler });
const extraTools = [
  probe('slow_probe', (_a, ctx) => new Promise((resolve) => {
    ctx.signal.addEventListener('abort', () => {
      aborted = { reason: ctx.signal.reason };
      resolve({ kind: 'tool_error', code: 'cancelled' });
    });
  })),
  probe('fixed_probe', async () => fixedOutcome),
  probe('throwing_probe', async () => {
    throw new Error('connect ECONNREFUSED 10.1.2.3:5432 user=secret_user');
  }),
];

let s: TestServer;
beforeAll(async () => {
  s = await startTestServer({ extraTools });
});
afterAll(async () => s.close());

async function post(body: unknown, headers: Record<string, string> = {}) {
  const r = await fetch(s.url, { method: 'POST', headers: { ...BASE, ...headers }, body: JSON.stringify(body) });
  const text = await r.text();
  const ct = r.headers.get('content-type') ?? '';
  const json = ct.startsWith('text/event-stream') ? JSON.parse(text.split('\n').find((l) => l.startsWith('data: '))!.slice(6)) : text ? JSON.parse(text) : null;
  return { status: r.status, ct, json, headers: r.headers };
}
const auth = () => ({ authorization: `Bearer ${s.apiKey}` });
const modernHeaders = (method: string, name?: string) => ({ 'mcp-protocol-version': '2026-07-28', 'mcp-method': method, ...(name ? { 'mcp-name': name } : {}) });

test('tools/list serves the generated catalogue (12 tools) with the complete envelope and cache hints', async () => {
  const r = await post({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
  expect(r.status).toBe(200);
  const names = r.json.result.tools.map((t: { name: string }) => t.name);
  expect(names.slice(0, 12)).toEqual(catalogue.tools.map((t) => t.name));
  expect(names.slice(0, 12)).toHaveLength(12);
  expect(r.json.result.resultType).toBe('complete');
  expect(r.json.result._meta['io.modelcontextprotocol/serverInfo'].name).toBe('interlock');
  expect(r.json.result.ttlMs).toBe(300000);
  expect(r.json.result.cacheScope).toBe('public');
  expect('nextCursor' in r.json.result).toBe(false);
  expect(r.headers.get('mcp-session-id')).toBeNull();
  const alias = r.json.result.tools.find((t: { name: string }) => t.name === 'agentgate_query');
  expect(alias.description).toMatch(/Deprecated: use interlock_query.*1\.2\.0/);
});

test('initialize answers the plain shape; an unknown version gets 2025-11-25; ping is exactly {}', async () => {
  const r = await post({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2099-01-01', capabilities: {}, clientInfo: { name: 't', version: '1' } } });
  expect(r.json).toEqual({ jsonrpc: '2.0', id: 0, result: { protocolVersion: '2025-11-25', capabilities: { tools: {} }, serverInfo: { name: 'interlock', version: '1.0.0-rc.1', title: 'InterLock governed data gateway' } } });
  const p = await post({ jsonrpc: '2.0', id: 'p', method: 'ping' }, { 'mcp-protocol-version': '2025-06-18' });
  expect(p.json).toEqual({ jsonrpc: '2.0', id: 'p', result: {} });
  const bad = await post({ jsonrpc: '2.0', id: 2, method: 'initialize', params: { protocolVersion: '2025-06-18' } });
  expect([bad.status, bad.json.error.code]).toEqual([200, -32602]);
});

test('notifications get 202 with an empty body', async () => {
  const r = await fetch(s.url, { method: 'POST', headers: BASE, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) });
  expect(r.status).toBe(202);
  expect(await r.text()).toBe('');
});

test('refusal: handshake = tool result isError with structuredContent; modern = HTTP 401 JSON-RPC error with WWW-Authenticate', async () => {
  const h = await post({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {} } }, { 'mcp-protocol-version': '2025-11-25' });
  expect(h.status).toBe(200);
  expect(h.json.result.isError).toBe(true);
  expect(h.json.result.structuredContent).toMatchObject({ status: 'unauthorized', code: 'missing_api_key' });
  const m = await post({ jsonrpc: '2.0', id: 6, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {}, _meta: ENV } }, { ...modernHeaders('tools/call', 'interlock_list_sources'), authorization: 'Bearer wrong' });
  expect(m.status).toBe(401);
  expect(m.headers.get('www-authenticate')).toMatch(/^Bearer/);
  expect(m.json.error.code).toBe(-32602);
  expect(m.json.error.data).toMatchObject({ status: 'unauthorized', code: 'invalid_api_key' });
  expect(m.json.id).toBe(6);
});

test('success: list_sources names only granted sources; the audit has one event per call', async () => {
  const before = s.audit.events.length;
  const r = await post({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {} } }, auth());
  expect(r.ct).toMatch(/^text\/event-stream/);
  expect(JSON.parse(r.json.result.content[0].text)).toEqual({ demo: { name: 'Demo source', type: 'postgres', description: 'granted to the test agent' } });
  await new Promise((res) => setTimeout(res, 20));
  expect(s.audit.events.length).toBe(before + 1);
  expect(s.audit.events.at(-1)).toMatchObject({ tool: 'interlock_list_sources', decision: 'allowed', identityId: 'id-test-agent' });
});

test('argument errors: isError result for 2025-11-25 and 2026-07-28, -32602 for older versions', async () => {
  const call = { jsonrpc: '2.0', id: 8, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: { bogus: 1 } } };
  const newer = await post(call, { ...auth(), 'mcp-protocol-version': '2025-11-25' });
  expect([newer.json.result.isError, newer.json.result.structuredContent.code]).toEqual([true, 'invalid_arguments']);
  const older = await post(call, { ...auth(), 'mcp-protocol-version': '2025-06-18' });
  expect([older.status, older.json.error.code]).toEqual([200, -32602]);
  const unknown = await post({ ...call, params: { name: 'no_such_tool', arguments: {} } }, auth());
  expect([unknown.status, unknown.json.error.code]).toEqual([200, -32602]);
});

test('an unknown tool is JSON-RPC -32602 with data {code: unknown_tool, message} in every supported version, both dialects', async () => {
  const expected = (id: number) => ({
    jsonrpc: '2.0',
    id,
    error: { code: -32602, message: 'Invalid params: Unknown tool: no_such_tool', data: { code: 'unknown_tool', message: 'No tool has that name; tools/list lists the tools this server serves.' } },
  });
  for (const version of ['2025-03-26', '2025-06-18', '2025-11-25']) {
    const r = await post({ jsonrpc: '2.0', id: 31, method: 'tools/call', params: { name: 'no_such_tool', arguments: {} } }, { ...auth(), 'mcp-protocol-version': version });
    expect([version, r.status, r.json]).toEqual([version, 200, expected(31)]);
  }
  const modern = await post({ jsonrpc: '2.0', id: 32, method: 'tools/call', params: { name: 'no_such_tool', arguments: {}, _meta: ENV } }, { ...auth(), ...modernHeaders('tools/call', 'no_such_tool') });
  expect([modern.status, modern.json]).toEqual([200, expected(32)]);
  // A long name is cut in the message; data stays the fixed pair.
  const long = 'x'.repeat(300);
  const cut = await post({ jsonrpc: '2.0', id: 33, method: 'tools/call', params: { name: long, arguments: {} } }, { ...auth(), 'mcp-protocol-version': '2025-11-25' });
  expect(cut.json.error.data).toEqual(expected(33).error.data);
  expect(cut.json.error.message.startsWith('Invalid params: Unknown tool: xxx')).toBe(true);
  expect(cut.json.error.message.length).toBeLessThan(long.length);
  // A name that is not a string, arguments that are not an object: the same data pair with their cause.
  const noName = await post({ jsonrpc: '2.0', id: 34, method: 'tools/call', params: { name: 7, arguments: {} } }, { ...auth(), 'mcp-protocol-version': '2025-11-25' });
  expect([noName.status, noName.json]).toEqual([200, { jsonrpc: '2.0', id: 34, error: { code: -32602, message: 'Invalid params: params.name must be a string', data: { code: 'unknown_tool', message: 'params.name must be a string' } } }]);
  const badArgs = await post({ jsonrpc: '2.0', id: 35, method: 'tools/call', params: { name: 'fixed_probe', arguments: [1], _meta: ENV } }, { ...auth(), ...modernHeaders('tools/call', 'fixed_probe') });
  expect([badArgs.status, badArgs.json]).toEqual([200, { jsonrpc: '2.0', id: 35, error: { code: -32602, message: 'Invalid params: params.arguments must be an object', data: { code: 'invalid_arguments', message: 'params.arguments must be an object' } } }]);
});

test('queued write is a result with isError false saying not to retry, in both dialects', async () => {
  fixedOutcome = { kind: 'queued', approvalId: 'apr_1', approvalState: 'pending' };
  for (const headers of [{ 'mcp-protocol-version': '2025-06-18' }, modernHeaders('tools/call', 'fixed_probe')]) {
    const r = await post({ jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'fixed_probe', arguments: {}, _meta: ENV } }, { ...auth(), ...headers });
    expect(r.status).toBe(200);
    expect(r.json.result.isError).toBe(false);
    expect(r.json.result.structuredContent).toMatchObject({ status: 'queued', approval_id: 'apr_1', approval_state: 'pending' });
    expect(r.json.result.content[0].text).toMatch(/NOT EXECUTED.*Do not retry/);
  }
});

test('modern unavailable refusal → HTTP 503 with -32603; not_found → 404 with -32602', async () => {
  fixedOutcome = { kind: 'refusal', code: 'circuit_open' };
  const a = await post({ jsonrpc: '2.0', id: 10, method: 'tools/call', params: { name: 'fixed_probe', arguments: {}, _meta: ENV } }, { ...auth(), ...modernHeaders('tools/call', 'fixed_probe') });
  expect([a.status, a.json.error.code, a.json.error.data.status]).toEqual([503, -32603, 'unavailable']);
  fixedOutcome = { kind: 'refusal', code: 'unknown_source' };
  const b = await post({ jsonrpc: '2.0', id: 11, method: 'tools/call', params: { name: 'fixed_probe', arguments: {}, _meta: ENV } }, { ...auth(), ...modernHeaders('tools/call', 'fixed_probe') });
  expect([b.status, b.json.error.code, b.json.error.data.status]).toEqual([404, -32602, 'not_found']);
});

test('modern rate_limited refusal → HTTP 429 with Retry-After in whole seconds, at least 1 (also for a wait under a second)', async () => {
  for (const [ms, header] of [[0, '1'], [250, '1'], [1000, '1'], [1001, '2'], [61_500, '62']] as const) {
    fixedOutcome = { kind: 'refusal', code: 'rate_limited', extra: { retry_after_ms: ms } };
    const r = await post({ jsonrpc: '2.0', id: 12, method: 'tools/call', params: { name: 'fixed_probe', arguments: {}, _meta: ENV } }, { ...auth(), ...modernHeaders('tools/call', 'fixed_probe') });
    expect([ms, r.status, r.headers.get('retry-after'), r.json.error.data.retry_after_ms]).toEqual([ms, 429, header, ms]);
  }
});

test('a thrown upstream error becomes the opaque failure with no host, address, port or user', async () => {
  const r = await post({ jsonrpc: '2.0', id: 12, method: 'tools/call', params: { name: 'throwing_probe', arguments: {} } }, auth());
  const text = JSON.stringify(r.json);
  expect(r.json.result.isError).toBe(true);
  expect(r.json.result.structuredContent.code).toBe('tool_execution_failed');
  for (const leak of ['10.1.2.3', '5432', 'secret_user', 'ECONNREFUSED']) expect(text).not.toContain(leak);
});

test('closing the SSE stream aborts the tool handler', async () => {
  aborted = null;
  const body = JSON.stringify({ jsonrpc: '2.0', id: 13, method: 'tools/call', params: { name: 'slow_probe', arguments: {} } });
  const u = new URL(s.url);
  await new Promise<void>((resolve) => {
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { ...BASE, ...auth(), 'content-length': Buffer.byteLength(body) } });
    req.on('error', () => resolve());
    req.end(body);
    setTimeout(() => {
      req.destroy();
      resolve();
    }, 150);
  });
  for (let i = 0; i < 50 && !aborted; i++) await new Promise((r) => setTimeout(r, 10));
  expect(aborted).toEqual({ reason: 'client closed the stream' });
  await new Promise((r) => setTimeout(r, 20));
  expect(s.audit.events.find((e) => e.tool === 'slow_probe')).toMatchObject({ decision: 'cancelled', reasonCode: 'cancelled' });
});

test('notifications/cancelled from the same caller aborts its in-flight request', async () => {
  aborted = null;
  const pending = post({ jsonrpc: '2.0', id: 'slow-1', method: 'tools/call', params: { name: 'slow_probe', arguments: {} } }, auth());
  await new Promise((r) => setTimeout(r, 100));
  const other = await fetch(s.url, { method: 'POST', headers: { ...BASE, authorization: 'Bearer someone-else' }, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'slow-1' } }) });
  expect(other.status).toBe(202);
  await new Promise((r) => setTimeout(r, 50));
  expect(aborted).toBeNull();
  const mine = await fetch(s.url, { method: 'POST', headers: { ...BASE, ...auth() }, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'slow-1' } }) });
  expect(mine.status).toBe(202);
  const r = await pending;
  expect(aborted).toEqual({ reason: 'notifications/cancelled' });
  expect(r.json.result.structuredContent.code).toBe('cancelled');
});
