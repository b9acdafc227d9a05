/**
 * Issue 6, "Done when": the same governed calls through every HTTP surface give the same governed
 * answers — POST /mcp (handshake and modern dialects), the SDK v1 SSEClientTransport on the
 * deprecated /mcp/sse, a plain HTTP client on the deprecated /mcp/tools/call, and the /v1 proxy —
 * over allowed, masked, refused (role, unknown source, no key, bad key, statement rules) and
 * queued cases, on the real governed gateway with Chinook. Every HTTP response (and every SSE
 * JSON-RPC message) is validated against spec/openapi-v1.yaml. Also: the deprecated agentgate_*
 * aliases answer like their successors in both dialects of POST /mcp.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import type { ResolvedGatewayConfig } from '../../../src/control/config';
import { searchAudit } from '../../../src/audit/writer';
import { listApprovals } from '../../../src/control/approvals';
import { checkedFetch, validateComponent, validateResponse } from './openapi';

jest.setTimeout(180_000);

let env: GovernedEnv;
let base: string;

beforeAll(async () => {
  const limits = { per_identity: { points: 100_000, window_seconds: 60 }, per_source: { points: 100_000, window_seconds: 60 } };
  env = await startGovernedEnv({ config: { rate_limits: limits } as Partial<ResolvedGatewayConfig> });
  base = env.url.replace(/\/mcp$/, '');
});
afterAll(async () => {
  await env?.close();
});

/** A governed answer reduced to what every surface must agree on. */
type Norm =
  | { kind: 'rows'; rows: unknown[]; truncated: boolean; masked_columns?: string[] }
  | { kind: 'refusal'; status: string; code: string }
  | { kind: 'queued'; state: string };

/** The refusal status name → HTTP status (spec/errors-v1.json statuses). */
const HTTP: Record<string, number> = { unauthorized: 401, forbidden: 403, not_found: 404, rate_limited: 429, unavailable: 503 };

/** From a handshake tool result (structuredContent carries rows, a refusal or a queued write). */
function fromToolResult(r: { structuredContent?: Record<string, unknown>; isError?: boolean }): Norm {
  const sc = r.structuredContent ?? {};
  if (r.isError) return { kind: 'refusal', status: String(sc.status), code: String(sc.code) };
  if (sc.status === 'queued') return { kind: 'queued', state: String(sc.approval_state) };
  return { kind: 'rows', rows: sc.rows as unknown[], truncated: sc.truncated as boolean, ...(sc.masked_columns ? { masked_columns: sc.masked_columns as string[] } : {}) };
}

/** What a surface answers for one interlock_query call. */
type Surface = (key: string | null, args: Record<string, unknown>) => Promise<Norm>;

let problems: string[] = [];

async function mcpPost(key: string | null, body: Record<string, unknown>, modern: boolean, name: string) {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
  if (modern) Object.assign(headers, { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': name });
  else headers['mcp-protocol-version'] = '2025-11-25';
  if (key) headers.authorization = `Bearer ${key}`;
  const r = await checkedFetch(`${base}/mcp`, { method: 'POST', headers, body: JSON.stringify(body) });
  const ct = r.headers.get('content-type') ?? '';
  const msg = ct.startsWith('text/event-stream') ? JSON.parse(r.text.split('\n').filter((l) => l.startsWith('data: ')).at(-1)!.slice(6)) : r.json;
  problems.push(...r.problems, ...validateComponent('JsonRpcResponse', msg));
  return { status: r.status, msg };
}

const handshakeMcp: Surface = async (key, args) => {
  const { status, msg } = await mcpPost(key, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: args } }, false, 'interlock_query');
  expect(status).toBe(200);
  return fromToolResult(msg.result);
};

const modernMcp: Surface = async (key, args) => {
  const meta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
  const { status, msg } = await mcpPost(key, { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'interlock_query', arguments: args, _meta: meta } }, true, 'interlock_query');
  if (msg.error) {
    const data = msg.error.data as { status: string; code: string };
    expect(status).toBe(HTTP[data.status]);
    return { kind: 'refusal', status: data.status, code: data.code };
  }
  expect(status).toBe(200);
  return fromToolResult(msg.result);
};

const legacyToolsCall: Surface = async (key, args) => {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (key) headers.authorization = `Bearer ${key}`;
  const r = await checkedFetch(`${base}/mcp/tools/call`, { method: 'POST', headers, body: JSON.stringify({ name: 'interlock_query', arguments: args }) });
  problems.push(...r.problems);
  const b = r.json;
  if (r.status === 202) {
    expect(b).toMatchObject({ error: 'approval_required', approval_id: expect.stringMatching(/^apr_/), isError: false, structuredContent: { status: 'queued', approval_id: b.approval_id } });
    return { kind: 'queued', state: b.approval_state };
  }
  if (r.status !== 200) {
    expect(b.isError).toBe(true);
    expect(r.status).toBe(HTTP[b.error]);
    expect(b.structuredContent).toMatchObject({ status: b.error, code: b.code });
    return { kind: 'refusal', status: b.error, code: b.code };
  }
  return fromToolResult(b);
};

const v1: Surface = async (key, args) => {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (key) headers.authorization = `Bearer ${key}`;
  const { source_id, ...body } = args;
  const r = await checkedFetch(`${base}/v1/sources/${encodeURIComponent(String(source_id))}/query`, { method: 'POST', headers, body: JSON.stringify(body) });
  problems.push(...r.problems);
  const b = r.json;
  if (r.status === 202) return { kind: 'queued', state: b.approval_state };
  if (r.status !== 200) {
    expect(r.status).toBe(HTTP[b.error]);
    return { kind: 'refusal', status: b.error, code: b.code };
  }
  return { kind: 'rows', rows: b.rows, truncated: b.truncated, ...(b.masked_columns ? { masked_columns: b.masked_columns } : {}) };
};

/** The SDK v1 client over the deprecated HTTP+SSE transport; one connection per credential. */
const sseClients = new Map<string, Client>();
async function sseClient(key: string | null): Promise<Client> {
  const k = key ?? '';
  let c = sseClients.get(k);
  if (c) return c;
  const recording = async (input: string | URL | Request, init: RequestInit = {}) => {
    const res = await fetch(input, init);
    const method = (init.method ?? 'GET').toUpperCase();
    // The stream's and the POSTs' HTTP envelopes (status, headers; a 202 has no body).
    problems.push(...validateResponse({ method, url: String(input), status: res.status, headers: res.headers, body: '' }));
    return res;
  };
  const transport = new SSEClientTransport(new URL(`${base}/mcp/sse`), {
    requestInit: key ? { headers: { Authorization: `Bearer ${key}` } } : undefined,
    fetch: recording,
    eventSourceInit: { fetch: recording } as never,
  });
  c = new Client({ name: 'equivalence-sse', version: '1.0.0' }, { capabilities: {} });
  await c.connect(transport);
  const onmessage = transport.onmessage!;
  transport.onmessage = (m) => {
    if ('id' in m && ('result' in m || 'error' in m)) problems.push(...validateComponent('JsonRpcResponse', m));
    onmessage(m);
  };
  sseClients.set(k, c);
  return c;
}
afterAll(async () => {
  for (const c of sseClients.values()) await c.close();
});

const sse: Surface = async (key, args) => {
  const c = await sseClient(key);
  const r = await c.callTool({ name: 'interlock_query', arguments: args });
  return fromToolResult(r as { structuredContent?: Record<string, unknown>; isError?: boolean });
};

const SURFACES: Array<[string, Surface]> = [
  ['POST /mcp (handshake)', handshakeMcp],
  ['POST /mcp (modern)', modernMcp],
  ['SDK v1 SSE client on /mcp/sse', sse],
  ['POST /mcp/tools/call', legacyToolsCall],
  ['POST /v1/sources/{id}/query', v1],
];

const BAD_KEY = 'ilk_' + 'A'.repeat(43);

/** The cases: arguments, which key, and the expected governed answer (checked on every surface). */
const CASES: Array<{ name: string; key: 'agent' | 'none' | 'bad'; args: Record<string, unknown>; expect: (n: Norm) => void }> = [
  {
    name: 'allowed read',
    key: 'agent',
    args: { source_id: 'chinook', sql: 'SELECT artist_id, name FROM artist ORDER BY artist_id LIMIT 3' },
    expect: (n) => expect(n).toEqual({ kind: 'rows', rows: [{ artist_id: 1, name: 'AC/DC' }, { artist_id: 2, name: 'Accept' }, { artist_id: 3, name: 'Aerosmith' }], truncated: false }),
  },
  {
    name: 'truncated read',
    key: 'agent',
    args: { source_id: 'chinook', sql: 'SELECT genre_id FROM genre ORDER BY genre_id', max_rows: 2 },
    expect: (n) => expect(n).toEqual({ kind: 'rows', rows: [{ genre_id: 1 }, { genre_id: 2 }], truncated: true }),
  },
  {
    name: 'masked columns',
    key: 'agent',
    args: { source_id: 'chinook', sql: 'SELECT customer_id, email, phone FROM customer ORDER BY customer_id LIMIT 2' },
    expect: (n) => {
      expect(n).toMatchObject({ kind: 'rows', truncated: false, masked_columns: ['email', 'phone'] });
      const rows = (n as { rows: Array<Record<string, string>> }).rows;
      expect(rows).toHaveLength(2);
      for (const r of rows) {
        expect(r.phone).toBe('***');
        expect(r.email).toMatch(/\*\*\*/);
      }
    },
  },
  { name: 'refused by the source role', key: 'agent', args: { source_id: 'chinook', sql: 'SELECT * FROM employee' }, expect: (n) => expect(n).toEqual({ kind: 'refusal', status: 'forbidden', code: 'source_role_denied' }) },
  { name: 'refused function', key: 'agent', args: { source_id: 'chinook', sql: 'SELECT pg_sleep(0)' }, expect: (n) => expect(n).toEqual({ kind: 'refusal', status: 'forbidden', code: 'function_not_allowed' }) },
  { name: 'unknown source', key: 'agent', args: { source_id: 'nope', sql: 'SELECT 1' }, expect: (n) => expect(n).toEqual({ kind: 'refusal', status: 'not_found', code: 'unknown_source' }) },
  { name: 'no API key', key: 'none', args: { source_id: 'chinook', sql: 'SELECT 1' }, expect: (n) => expect(n).toEqual({ kind: 'refusal', status: 'unauthorized', code: 'missing_api_key' }) },
  { name: 'bad API key', key: 'bad', args: { source_id: 'chinook', sql: 'SELECT 1' }, expect: (n) => expect(n).toEqual({ kind: 'refusal', status: 'unauthorized', code: 'invalid_api_key' }) },
  {
    name: 'queued write',
    key: 'agent',
    args: { source_id: 'chinook', sql: 'INSERT INTO playlist (playlist_id, name) VALUES ($1, $2)', params: [9100, 'equivalence'] },
    expect: (n) => expect(n).toEqual({ kind: 'queued', state: 'pending' }),
  },
];

describe.each(CASES)('$name', (c) => {
  test('every surface gives the same governed answer, and every response conforms to spec/openapi-v1.yaml', async () => {
    problems = [];
    const key = c.key === 'agent' ? env.apiKey : c.key === 'bad' ? BAD_KEY : null;
    const answers: Array<[string, Norm]> = [];
    for (const [label, surface] of SURFACES) answers.push([label, await surface(key, c.args)]);
    for (const [label, n] of answers) {
      try {
        c.expect(n);
      } catch (err) {
        throw new Error(`${label}: ${(err as Error).message}`);
      }
    }
    // Same answer everywhere (the first surface is the reference).
    for (const [label, n] of answers.slice(1)) expect({ label, n }).toEqual({ label, n: answers[0][1] });
    expect(problems).toEqual([]);
  });
});

test('every surface is audited through the same pipeline, labelled by route', async () => {
  await env.gateway.gateway.flushAudit();
  const page = await searchAudit(env.db, { kind: 'tool_call', limit: 1000 });
  const routes = new Map<string, number>();
  for (const e of page.events) {
    // Keyless refusals are aggregated per client address per minute (issue 10, Build 6): count their calls by route.
    if (e.details.aggregated === true) {
      for (const [route, n] of Object.entries(e.details.routes as Record<string, number>)) routes.set(route, (routes.get(route) ?? 0) + n);
      continue;
    }
    const route = String(e.details.route ?? 'mcp');
    routes.set(route, (routes.get(route) ?? 0) + 1);
  }
  // Every call counted once: each surface saw every case once (the SSE and the two /mcp dialects share 'mcp-sse' / 'mcp').
  expect(routes.get('v1')).toBe(CASES.length);
  expect(routes.get('mcp-tools-call')).toBe(CASES.length);
  expect(routes.get('mcp-sse')).toBe(CASES.length);
  expect(routes.get('mcp')).toBe(2 * CASES.length);
  // Each surface queued its own approval for the one queued case (writes never run on the agent's call).
  const pending = await listApprovals(env.db, { state: 'pending' });
  expect(pending.filter((a) => a.sql.startsWith('INSERT INTO playlist')).length).toBe(SURFACES.length);
});

describe('deprecated agentgate_* aliases behave like their successors', () => {
  const ALIASES: Array<[string, string, Record<string, unknown>]> = [
    ['agentgate_query', 'interlock_query', { source_id: 'chinook', sql: 'SELECT name FROM genre ORDER BY genre_id LIMIT 2' }],
    ['agentgate_list_sources', 'interlock_list_sources', {}],
    ['agentgate_describe_source', 'interlock_describe_source', { source_id: 'chinook' }],
    ['agentgate_discover', 'interlock_discover', { source_id: 'chinook', query: 'playlist' }],
    ['agentgate_related_documents', 'interlock_related_documents', { asset_id: 'chinook:nothing' }],
  ];
  // Request ids differ per call (also inside the opaque failure's text); the cache flag depends on order.
  const strip = (v: unknown): unknown => JSON.parse(JSON.stringify(v, (k, x) => (k === 'request_id' || k === 'cached' ? undefined : typeof x === 'string' ? x.replace(/req_[A-Za-z0-9_-]{18}/g, 'req_') : x)));
  test.each(ALIASES)('%s = %s (handshake and modern)', async (alias, successor, args) => {
    problems = [];
    const meta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
    for (const modern of [false, true]) {
      const call = (name: string) => mcpPost(env.apiKey, { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name, arguments: args, ...(modern ? { _meta: meta } : {}) } }, modern, name);
      const a = await call(alias);
      const s = await call(successor);
      expect(a.status).toBe(s.status);
      expect(strip(a.msg)).toEqual(strip(s.msg));
    }
    expect(problems).toEqual([]);
  });
});
