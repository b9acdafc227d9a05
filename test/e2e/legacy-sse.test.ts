/**
 * The deprecated handshake-era HTTP+SSE transport at /mcp/sse, driven by the official SDK v1
 * client (`SSEClientTransport`), on the real governed gateway with Chinook: initialize, ping,
 * tools/list (the full catalogue, aliases included), governed tool calls (allowed, masked,
 * refused without a key), the deprecation headers on the stream and on every POST, stream binding
 * (unknown stream id, another credential), malformed messages, and cancellation of an in-flight
 * query when the client closes the stream. Every HTTP response and every JSON-RPC answer is
 * validated against spec/openapi-v1.yaml.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { startGovernedEnv, type GovernedEnv } from '../helpers/governed';
import { INTERLOCK_TOOL_NAMES } from '../helpers/clients';
import { searchAudit } from '../../src/audit/writer';
import { DEPRECATION_HEADERS } from '../../src/http/deprecation';
import { covered, operations, validateComponent, validateResponse } from '../integration/http/openapi';

jest.setTimeout(180_000);

let env: GovernedEnv;
let base: string;
const problems: string[] = [];
const seen: Array<{ method: string; status: number; headers: Headers }> = [];

beforeAll(async () => {
  env = await startGovernedEnv();
  base = env.url.replace(/\/mcp$/, '');
});
afterAll(async () => {
  await env?.close();
});
afterEach(() => {
  expect(problems.splice(0)).toEqual([]);
});

/** Connects the SDK v1 client over /mcp/sse, recording and validating every HTTP response and JSON-RPC answer. */
async function connect(key: string | null): Promise<{ client: Client; transport: SSEClientTransport }> {
  const recording = async (input: string | URL | Request, init: RequestInit = {}) => {
    const res = await fetch(input, init);
    const method = (init.method ?? 'GET').toUpperCase();
    seen.push({ method, status: res.status, headers: res.headers });
    problems.push(...validateResponse({ method, url: String(input), status: res.status, headers: res.headers, body: '' }));
    return res;
  };
  const transport = new SSEClientTransport(new URL(`${base}/mcp/sse`), {
    requestInit: key ? { headers: { Authorization: `Bearer ${key}` } } : undefined,
    fetch: recording,
    eventSourceInit: { fetch: recording } as never,
  });
  const client = new Client({ name: 'legacy-sse-e2e', version: '1.0.0' }, { capabilities: {} });
  await client.connect(transport);
  const onmessage = transport.onmessage!;
  transport.onmessage = (m) => {
    if ('id' in m && ('result' in m || 'error' in m)) problems.push(...validateComponent('JsonRpcResponse', m));
    onmessage(m);
  };
  return { client, transport };
}

/** Opens a raw stream and returns the announced message URL and a reader of the following events. */
async function rawStream(headers: Record<string, string> = {}) {
  const controller = new AbortController();
  const res = await fetch(`${base}/mcp/sse`, { headers: { accept: 'text/event-stream', ...headers }, signal: controller.signal });
  problems.push(...validateResponse({ method: 'GET', url: `${base}/mcp/sse`, status: res.status, headers: res.headers, body: '' }));
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  const nextEvent = async (): Promise<{ event: string; data: string }> => {
    for (;;) {
      const i = buf.indexOf('\n\n');
      if (i >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        if (block.startsWith(':')) continue;
        const event = /^event: (.*)$/m.exec(block)?.[1] ?? 'message';
        const data = /^data: (.*)$/m.exec(block)?.[1] ?? '';
        return { event, data };
      }
      const { value, done } = await reader.read();
      if (done) throw new Error('stream ended');
      buf += decoder.decode(value, { stream: true });
    }
  };
  const endpoint = await nextEvent();
  return { res, endpoint, nextEvent, close: () => controller.abort() };
}

async function post(url: string, body: string, headers: Record<string, string> = {}) {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  const text = await res.text();
  problems.push(...validateResponse({ method: 'POST', url, status: res.status, headers: res.headers, body: text }));
  return { status: res.status, headers: res.headers, json: text ? JSON.parse(text) : undefined };
}

test('SDK v1 SSEClientTransport: initialize, ping, the full catalogue, governed calls; deprecation headers everywhere', async () => {
  const { client } = await connect(env.apiKey);
  expect(client.getServerVersion()).toMatchObject({ name: expect.any(String) });
  await client.ping();
  const names: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await client.listTools(cursor ? { cursor } : undefined);
    names.push(...page.tools.map((t) => t.name));
    cursor = page.nextCursor;
  } while (cursor);
  expect(new Set(names)).toEqual(new Set(INTERLOCK_TOOL_NAMES));

  const sources = await client.callTool({ name: 'interlock_list_sources', arguments: {} });
  expect(sources.structuredContent).toHaveProperty('chinook');
  const masked = await client.callTool({ name: 'agentgate_query', arguments: { source_id: 'chinook', sql: 'SELECT email FROM customer ORDER BY customer_id LIMIT 1' } });
  expect(masked.structuredContent).toMatchObject({ masked_columns: ['email'], rows: [{ email: expect.stringContaining('***') }] });
  const invalid = await client.callTool({ name: 'interlock_query', arguments: { source_id: 'chinook', sql: 7 } });
  expect(invalid).toMatchObject({ isError: true, structuredContent: { code: 'invalid_arguments' } });
  await expect(client.callTool({ name: 'no_such_tool', arguments: {} })).rejects.toThrow(/Unknown tool/);
  await client.close();

  const anonymous = await connect(null);
  const refused = await anonymous.client.callTool({ name: 'interlock_list_sources', arguments: {} });
  expect(refused).toMatchObject({ isError: true, structuredContent: { status: 'unauthorized', code: 'missing_api_key' } });
  await anonymous.client.close();

  // The stream (GET 200) and every POST (202) carried the deprecation headers.
  expect(seen.some((s) => s.method === 'GET' && s.status === 200)).toBe(true);
  expect(seen.filter((s) => s.method === 'POST').every((s) => s.status === 202)).toBe(true);
  for (const s of seen) {
    expect(s.headers.get('deprecation')).toBe(DEPRECATION_HEADERS.Deprecation);
    expect(s.headers.get('sunset')).toBe(DEPRECATION_HEADERS.Sunset);
    expect(s.headers.get('link')).toBe(DEPRECATION_HEADERS.Link);
  }
  await env.gateway.gateway.flushAudit();
  const audit = await searchAudit(env.db, { kind: 'tool_call', limit: 100 });
  const sse = audit.events.filter((e) => e.details.route === 'mcp-sse');
  expect(sse.map((e) => e.decision).sort()).toEqual(['allowed', 'allowed', 'invalid']);
  // The keyless refusal is counted in the aggregated event of this address (issue 10, Build 6), not a row of its own.
  const aggregated = audit.events.filter((e) => e.details.aggregated === true);
  expect(aggregated).toHaveLength(1);
  expect(aggregated[0].details).toMatchObject({ client_address: '127.0.0.1', count: 1, reasons: { missing_api_key: 1 }, routes: { 'mcp-sse': 1 } });
  expect(sse.find((e) => e.tool === 'agentgate_query')).toMatchObject({ canonicalTool: 'interlock_query', dialect: 'handshake', protocolVersion: '2025-11-25' });
});

test('raw protocol: the endpoint event, answers on the stream, stream binding, malformed messages', async () => {
  const s = await rawStream({ authorization: `Bearer ${env.apiKey}` });
  expect(s.res.headers.get('content-type')).toMatch(/^text\/event-stream/);
  expect(s.endpoint.event).toBe('endpoint');
  expect(s.endpoint.data).toMatch(/^\/mcp\/sse\/messages\?stream=[A-Za-z0-9_-]{22}$/);
  const url = `${base}${s.endpoint.data}`;
  const auth = { authorization: `Bearer ${env.apiKey}` };

  const init = await post(url, JSON.stringify({ jsonrpc: '2.0', id: 'i1', method: 'initialize', params: { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } }), auth);
  expect(init.status).toBe(202);
  expect(init.json).toBeUndefined();
  const initAnswer = JSON.parse((await s.nextEvent()).data);
  expect(initAnswer).toMatchObject({ jsonrpc: '2.0', id: 'i1', result: { protocolVersion: '2025-03-26', capabilities: { tools: {} } } });
  expect(initAnswer.result).not.toHaveProperty('resultType');

  expect((await post(url, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }), auth)).status).toBe(202);
  await post(url, JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'resources/list' }), auth);
  expect(JSON.parse((await s.nextEvent()).data)).toMatchObject({ id: 2, error: { code: -32601 } });
  await post(url, JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: 7 } } }), auth);
  // 2025-03-26 negotiated on this stream: argument errors are JSON-RPC -32602, as on POST /mcp.
  expect(JSON.parse((await s.nextEvent()).data)).toMatchObject({ id: 3, error: { code: -32602 } });

  expect((await post(url, '[{"jsonrpc":"2.0","id":1,"method":"ping"}]', auth)).json).toMatchObject({ code: 'invalid_body' });
  expect((await post(url, '{"jsonrpc":"1.0"}', auth)).json).toMatchObject({ code: 'invalid_body' });
  expect((await post(url, '{', auth)).json).toMatchObject({ code: 'invalid_json' });
  // Another credential, or none, cannot post to a stream opened with a key; nor can an unknown id.
  expect((await post(url, JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'ping' }))).status).toBe(404);
  expect((await post(url, JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'ping' }), { authorization: 'Bearer ilk_other' })).json).toMatchObject({ code: 'unknown_stream' });
  expect((await post(`${base}/mcp/sse/messages?stream=nope`, JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'ping' }), auth)).status).toBe(404);
  await post(url, JSON.stringify({ jsonrpc: '2.0', id: 6, method: 'ping' }), auth);
  expect(JSON.parse((await s.nextEvent()).data)).toEqual({ jsonrpc: '2.0', id: 6, result: {} });
  s.close();
  // Once the stream is closed its id is gone.
  await new Promise((r) => setTimeout(r, 100));
  expect((await post(url, JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'ping' }), auth)).status).toBe(404);
});

test('closing the stream cancels the in-flight query (audited as cancelled)', async () => {
  const s = await rawStream({ authorization: `Bearer ${env.apiKey}` });
  const url = `${base}${s.endpoint.data}`;
  const slow = 'SELECT count(*) AS n FROM track a, track b, track c';
  expect((await post(url, JSON.stringify({ jsonrpc: '2.0', id: 'slow', method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: slow } } }), { authorization: `Bearer ${env.apiKey}` })).status).toBe(202);
  await new Promise((r) => setTimeout(r, 500));
  const started = Date.now();
  s.close();
  let decision: string | undefined;
  while (!decision && Date.now() - started < 10_000) {
    await new Promise((r) => setTimeout(r, 200));
    const page = await searchAudit(env.db, { kind: 'tool_call', limit: 20 });
    decision = page.events.find((e) => e.details.route === 'mcp-sse' && e.fingerprint && e.relations?.includes('public.track'))?.decision;
  }
  expect(decision).toBe('cancelled');
  expect(Date.now() - started).toBeLessThan(10_000);
});

test('every /mcp/sse operation of spec/openapi-v1.yaml was exercised', () => {
  const hit = new Set([...covered].map((c) => c.split(' ')[0]));
  expect(operations('/mcp/sse').filter((op) => !hit.has(op))).toEqual([]);
});
