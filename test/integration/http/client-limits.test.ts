/**
 * Issue 10, Build 6 on the governed gateway: the keyless budget per client address (before any
 * audit write or other work, on /mcp, the deprecated routes and /v1), keyless refusals audited as
 * one aggregated event per address per minute, SSE streams and in-flight calls capped per client
 * address and per identity (429 with Retry-After), and every tools/call with an identity spending a
 * rate-limit point whatever its outcome. Every response of a documented path is validated against
 * spec/openapi-v1.yaml.
 */
import http from 'node:http';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { searchAudit } from '../../../src/audit/writer';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { checkedFetch, type CheckedResponse } from './openapi';

jest.setTimeout(120_000);

const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' };
const MODERN = { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call' };
const META = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };

let problems: string[] = [];
async function checked(url: string, init: RequestInit = {}): Promise<CheckedResponse> {
  const r = await checkedFetch(url, init);
  problems.push(...r.problems);
  return r;
}
afterEach(() => {
  expect(problems.splice(0)).toEqual([]);
});

function toolCall(name: string, args: Record<string, unknown>, id: number | string = 1) {
  return JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });
}

/** Opens GET /mcp/sse; resolves with the status and, for a 200, a close function. */
function openSse(base: string, key: string | null): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string; close: () => void }> {
  const u = new URL(`${base}/mcp/sse`);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'GET', headers: key ? { authorization: `Bearer ${key}` } : {} }, (res) => {
      if (res.statusCode === 200) {
        res.once('data', () => resolve({ status: 200, headers: res.headers, body: '', close: () => req.destroy() }));
        return;
      }
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body, close: () => undefined }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('keyless budget, aggregated audit and stream caps', () => {
  let env: GovernedEnv;
  let base: string;
  let keyB: string;

  beforeAll(async () => {
    env = await startGovernedEnv({
      config: {
        client_limits: { keyless: { points: 6, window_seconds: 600 }, streams_per_address: 3, streams_per_identity: 2 },
        rate_limits: { per_identity: { points: 10_000, window_seconds: 60 }, per_source: { points: 10_000, window_seconds: 60 } },
      },
    });
    base = env.url.replace(/\/mcp$/, '');
    const b = await createIdentity(env.db, 'limits-b');
    keyB = (await createApiKey(env.db, b.id)).secret;
  });
  afterAll(async () => {
    await env?.close();
  });

  test('SSE streams and in-flight calls are capped per identity and per client address: 429 with Retry-After', async () => {
    const a1 = await openSse(base, env.apiKey);
    const a2 = await openSse(base, env.apiKey);
    expect([a1.status, a2.status]).toEqual([200, 200]);
    const a3 = await openSse(base, env.apiKey);
    expect(a3.status).toBe(429);
    expect(a3.headers['retry-after']).toMatch(/^[1-9][0-9]*$/);
    expect(JSON.parse(a3.body)).toMatchObject({ error: 'rate_limited', code: 'rate_limited', retry_after_ms: expect.any(Number) });
    expect(JSON.parse(a3.body).message).toMatch(/identity/);
    // A second identity at the same address: the address cap (3) is what refuses now.
    const b1 = await openSse(base, keyB);
    expect(b1.status).toBe(200);
    const b2 = await checked(`${base}/mcp/sse`, { headers: { authorization: `Bearer ${keyB}` } });
    expect([b2.status, b2.json.code]).toEqual([429, 'rate_limited']);
    expect(b2.json.message).toMatch(/client address/);
    // A request-scoped stream (tools/call) needs a slot too: refused while the address is full.
    const handshake = await callTool(env, 'interlock_list_sources', {}, env.apiKey);
    expect(handshake.body.result).toMatchObject({ isError: true, structuredContent: { status: 'rate_limited', code: 'rate_limited' } });
    const modern = await checked(env.url, { method: 'POST', headers: { ...MCP_HEADERS, ...MODERN, 'mcp-name': 'interlock_list_sources', authorization: `Bearer ${env.apiKey}` }, body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {}, _meta: META } }) });
    expect(modern.status).toBe(429);
    expect(modern.headers.get('retry-after')).toMatch(/^[1-9][0-9]*$/);
    expect(modern.json.error.data).toMatchObject({ status: 'rate_limited', code: 'rate_limited' });
    // Closing a stream frees its slot.
    a1.close();
    await new Promise((r) => setTimeout(r, 200));
    const ok = await callTool(env, 'interlock_list_sources', {}, env.apiKey);
    expect(ok.body.result.isError).toBeUndefined();
    const a4 = await openSse(base, env.apiKey);
    expect(a4.status).toBe(200);
    for (const s of [a2, a4, b1]) s.close();
    await new Promise((r) => setTimeout(r, 200));
  });

  test('requests without a valid key spend the address budget before any other work; over it 429 on every route; keys still work', async () => {
    // 6 tokens: two keyless tools/call, one invalid-key call, one keyless notification, one keyless /v1 call, one /mcp/tools/list.
    const k1 = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1' }, null);
    expect(k1.body.result.structuredContent).toMatchObject({ status: 'unauthorized', code: 'missing_api_key' });
    const k2 = await callTool(env, 'interlock_describe_source', { source_id: 'x' }, null);
    expect(k2.body.result.structuredContent).toMatchObject({ code: 'missing_api_key' });
    const bad = await callTool(env, 'interlock_list_sources', {}, 'ilk_not_a_key_000000000000000000000000000000');
    expect(bad.body.result.structuredContent).toMatchObject({ code: 'invalid_api_key' });
    const note = await checked(env.url, { method: 'POST', headers: MCP_HEADERS, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) });
    expect(note.status).toBe(202);
    expect((await checked(`${base}/v1/sources`)).status).toBe(401);
    expect((await checked(`${base}/mcp/tools/list`)).status).toBe(200);
    // Budget spent: every keyless request is refused with 429 and Retry-After, in each route's shape.
    const mcp = await checked(env.url, { method: 'POST', headers: MCP_HEADERS, body: toolCall('interlock_query', { source_id: 'chinook', sql: 'SELECT 1' }) });
    expect(mcp.status).toBe(429);
    expect(mcp.headers.get('retry-after')).toMatch(/^[1-9][0-9]*$/);
    expect(mcp.json).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32602, data: { status: 'rate_limited', code: 'rate_limited', retry_after_ms: expect.any(Number) } } });
    const notif = await checked(env.url, { method: 'POST', headers: MCP_HEADERS, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) });
    expect(notif.status).toBe(429);
    const v1 = await checked(`${base}/v1/sources`);
    expect([v1.status, v1.json.code]).toEqual([429, 'rate_limited']);
    const legacy = await checked(`${base}/mcp/tools/list`);
    expect([legacy.status, legacy.json.code, legacy.headers.get('deprecation')]).toEqual([429, 'rate_limited', expect.any(String)]);
    const legacyCall = await checked(`${base}/mcp/tools/call`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'interlock_list_sources', arguments: {} }) });
    expect(legacyCall.status).toBe(429);
    const sse = await checked(`${base}/mcp/sse`);
    expect(sse.status).toBe(429);
    // A token that is not an API key by its form is charged before the body, like no token: 429 at the edge.
    const bad2 = await callTool(env, 'interlock_list_sources', {}, 'ilk_not_a_key_000000000000000000000000000000');
    expect([bad2.status, bad2.body.error?.data?.code]).toEqual([429, 'rate_limited']);
    // A well-formed key that does not resolve spends the same budget after step 1: refused as rate_limited.
    const bad3 = await callTool(env, 'interlock_list_sources', {}, `ilk_${'0'.repeat(43)}`);
    expect(bad3.body.result.structuredContent).toMatchObject({ status: 'rate_limited', code: 'rate_limited' });
    // A valid key from the same address is unaffected.
    const ok = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1 AS one' }, env.apiKey);
    expect(ok.body.result.structuredContent.rows).toEqual([{ one: 1 }]);

    // Audit: no row per keyless refusal; one aggregated event for this address with every count.
    await env.gateway.gateway.flushAudit();
    const all = (await searchAudit(env.db, { kind: 'tool_call', limit: 1000 })).events;
    expect(all.filter((e) => e.identityId).length).toBeGreaterThan(0);
    // One aggregated event per address per minute: two when the test straddles a minute boundary.
    const fresh = all.filter((e) => !e.identityId);
    expect(fresh.length === 1 || fresh.length === 2).toBe(true);
    for (const agg of fresh) {
      expect(agg).toMatchObject({ decision: 'refused', identityId: null, tool: '*' });
      expect(agg.details).toMatchObject({ aggregated: true, client_address: '127.0.0.1', window_seconds: 60 });
    }
    const sum = (k: 'reasons' | 'routes') => {
      const out: Record<string, number> = {};
      for (const agg of fresh) for (const [n, c] of Object.entries((agg.details as Record<string, Record<string, number>>)[k])) out[n] = (out[n] ?? 0) + c;
      return out;
    };
    expect(fresh.reduce((n, agg) => n + Number((agg.details as { count: number }).count), 0)).toBe(12);
    expect(sum('reasons')).toEqual({ missing_api_key: 3, invalid_api_key: 1, rate_limited: 8 });
    expect(sum('routes')).toEqual({ mcp: 7, v1: 2, 'mcp-legacy': 3 });
  });
});

describe('every tools/call with an identity spends a rate-limit point, whatever its outcome', () => {
  let env: GovernedEnv;
  beforeAll(async () => {
    env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 5, window_seconds: 600 }, per_source: { points: 10_000, window_seconds: 60 } } } });
  });
  afterAll(async () => {
    await env?.close();
  });

  test('unknown sources, denied statements, parse errors and invalid arguments are charged; then rate_limited', async () => {
    const answers = [
      await callTool(env, 'interlock_describe_source', { source_id: 'no_such_source' }, env.apiKey),
      await callTool(env, 'interlock_query', { source_id: 'no_such_source', sql: 'SELECT 1' }, env.apiKey),
      await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT first_name FROM employee' }, env.apiKey),
      await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELEC nonsense' }, env.apiKey),
      await callTool(env, 'interlock_query', { source_id: 'chinook' }, env.apiKey),
    ].map((a) => a.body.result.structuredContent?.code ?? a.body.result.content?.[0]?.text ?? a.body.error?.code);
    expect(answers.slice(0, 3)).toEqual(['unknown_source', 'unknown_source', 'source_role_denied']);
    for (const a of answers) expect(a).not.toBe('rate_limited');
    // Five points spent by five refused calls: the sixth call is rate limited, refused or not.
    const sixth = await callTool(env, 'interlock_describe_source', { source_id: 'no_such_source' }, env.apiKey);
    expect(sixth.body.result.structuredContent).toMatchObject({ status: 'rate_limited', code: 'rate_limited', retry_after_ms: expect.any(Number) });
    const seventh = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1' }, env.apiKey);
    expect(seventh.body.result.structuredContent).toMatchObject({ code: 'rate_limited' });
  });
});

describe('a call that reaches the rate-limit step is charged exactly once', () => {
  let env: GovernedEnv;
  beforeAll(async () => {
    env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 5, window_seconds: 600 }, per_source: { points: 10_000, window_seconds: 60 } } } });
  });
  afterAll(async () => {
    await env?.close();
  });

  test('five successful calls over four tools spend the five points; the sixth is rate_limited', async () => {
    const ok = [
      await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1 AS one' }, env.apiKey),
      await callTool(env, 'interlock_list_sources', {}, env.apiKey),
      await callTool(env, 'interlock_describe_source', { source_id: 'chinook' }, env.apiKey),
      await callTool(env, 'interlock_describe_access', { source_id: 'chinook' }, env.apiKey),
      await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 2 AS two' }, env.apiKey),
    ];
    expect(ok.map((a) => a.body.result.isError ?? false)).toEqual([false, false, false, false, false]);
    const sixth = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 3 AS three' }, env.apiKey);
    expect(sixth.body.result.structuredContent).toMatchObject({ status: 'rate_limited', code: 'rate_limited', retry_after_ms: expect.any(Number) });
  });
});

describe('a Bearer token no tool call checks spends the keyless budget unless it resolves (red-team F4)', () => {
  let env: GovernedEnv;
  let base: string;
  beforeAll(async () => {
    env = await startGovernedEnv({ config: { client_limits: { keyless: { points: 3, window_seconds: 600 }, streams_per_address: 128, streams_per_identity: 64 } } });
    base = env.url.replace(/\/mcp$/, '');
  });
  afterAll(async () => {
    await env?.close();
  });

  test('ping and tools/list with junk keys are charged; the same requests with a valid key are not', async () => {
    const ping = (key: string) => checked(env.url, { method: 'POST', headers: { ...MCP_HEADERS, authorization: `Bearer ${key}` }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }) });
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await ping(`ilk_junk_${i}_000000000000000000000000000000`)).status);
    expect(statuses).toEqual([200, 200, 200, 429]);
    const legacy = await checked(`${base}/mcp/tools/list`, { headers: { authorization: 'Bearer ilk_junk_legacy_0000000000000000000000000' } });
    expect([legacy.status, legacy.json.code]).toEqual([429, 'rate_limited']);
    // A valid key from the same address is unaffected.
    expect((await ping(env.apiKey)).status).toBe(200);
    expect((await checked(`${base}/mcp/tools/list`, { headers: { authorization: `Bearer ${env.apiKey}` } })).status).toBe(200);
  });
});

describe('the legacy SSE transport charges a junk Bearer token like POST /mcp (red-team F4)', () => {
  let env: GovernedEnv;
  beforeAll(async () => {
    env = await startGovernedEnv({ config: { client_limits: { keyless: { points: 3, window_seconds: 600 }, streams_per_address: 128, streams_per_identity: 64 } } });
  });
  afterAll(async () => {
    await env?.close();
  });

  test('opening the stream spends one keyless token; every ping message on it spends another; then 429', async () => {
    const base = env.url.replace(/\/mcp$/, '');
    const junk = 'Bearer ilk_junk_sse_00000000000000000000000000000000';
    const controller = new AbortController();
    const stream = await fetch(`${base}/mcp/sse`, { headers: { authorization: junk, accept: 'text/event-stream' }, signal: controller.signal });
    expect(stream.status).toBe(200);
    const reader = stream.body!.getReader();
    let text = '';
    while (!/data: (\/mcp\/sse\/messages\?stream=\S+)/.test(text)) text += new TextDecoder().decode((await reader.read()).value);
    const endpoint = /data: (\/mcp\/sse\/messages\?stream=\S+)/.exec(text)![1];
    const ping = () => fetch(`${base}${endpoint}`, { method: 'POST', headers: { authorization: junk, 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }) });
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await ping();
      await r.arrayBuffer();
      statuses.push(r.status);
    }
    controller.abort();
    expect(statuses).toEqual([202, 202, 429]);
  });
});

describe('a Bearer token that is not an API key spends the keyless budget before the body is read (red-team F4)', () => {
  let env: GovernedEnv;
  beforeAll(async () => {
    env = await startGovernedEnv({ config: { client_limits: { keyless: { points: 3, window_seconds: 600 }, streams_per_address: 128, streams_per_identity: 64 } } });
  });
  afterAll(async () => {
    await env?.close();
  });

  test('tools/call with `Bearer junk`: charged once each (invalid_api_key), then 429 before admission; a valid key is unaffected', async () => {
    const codes: unknown[] = [];
    for (let i = 0; i < 3; i++) codes.push((await callTool(env, 'interlock_list_sources', {}, 'junk')).body.result?.structuredContent?.code);
    // Charged once each: a second charge per request would have refused the second call.
    expect(codes).toEqual(['invalid_api_key', 'invalid_api_key', 'invalid_api_key']);
    const over = await checked(env.url, { method: 'POST', headers: { ...MCP_HEADERS, authorization: 'Bearer junk' }, body: toolCall('interlock_list_sources', {}) });
    // Refused by the keyless gate before the body read and admission: no X-Request-Id.
    expect([over.status, over.headers.get('retry-after') !== null, over.headers.get('x-request-id'), over.json.error.code, over.json.error.data.code]).toEqual([429, true, null, -32602, 'rate_limited']);
    const v1 = await checked(`${env.url.replace(/\/mcp$/, '')}/v1/sources`, { headers: { authorization: 'Bearer junk' } });
    expect([v1.status, v1.json.code]).toEqual([429, 'rate_limited']);
    const ok = await callTool(env, 'interlock_list_sources', {}, env.apiKey);
    expect([ok.status, ok.body.result.isError]).toEqual([200, undefined]);
  });
});
