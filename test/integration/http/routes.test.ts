/**
 * The deprecated /mcp/tools/list and /mcp/tools/call routes and the /v1 proxy in detail, on the
 * real governed gateway: catalogue equality with POST /mcp, deprecation headers, request errors
 * (bad JSON, media type, size, unknown tool or route, wrong method), argument and SQL errors, the
 * Host guard, describe/access/discover/related, and rate limiting (429 with Retry-After). Every
 * response is validated against spec/openapi-v1.yaml, and every operation of the deprecated
 * routes and /v1 is exercised (here and in test/e2e/legacy-sse.test.ts for /mcp/sse).
 */
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import type { ResolvedGatewayConfig } from '../../../src/control/config';
import { HTTP_ERROR_CODES } from '../../../src/http/common';
import { DEPRECATION_HEADERS } from '../../../src/http/deprecation';
import { checkedFetch, covered, openapi, operations, type CheckedResponse } from './openapi';

jest.setTimeout(180_000);

let env: GovernedEnv;
let base: string;
const problems: string[] = [];

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

async function req(method: string, path: string, opts: { key?: string | null; body?: unknown; raw?: string; type?: string; headers?: Record<string, string> } = {}): Promise<CheckedResponse> {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.key) headers.authorization = `Bearer ${opts.key}`;
  let body: string | undefined;
  if (opts.raw !== undefined) body = opts.raw;
  else if (opts.body !== undefined) body = JSON.stringify(opts.body);
  if (body !== undefined) headers['content-type'] = opts.type ?? 'application/json';
  const r = await checkedFetch(`${base}${path}`, { method, headers, body });
  problems.push(...r.problems);
  return r;
}

test('spec and code agree on the HTTP-level error codes and the deprecation header values', () => {
  expect(Object.keys(HTTP_ERROR_CODES).sort()).toEqual([...(openapi.components.schemas.ErrorBody['x-http-error-codes'] as string[])].sort());
  const h = openapi.components.headers as Record<string, { schema: { const: string } }>;
  expect(DEPRECATION_HEADERS).toEqual({ Deprecation: h.Deprecation.schema.const, Sunset: h.Sunset.schema.const, Link: h.SuccessorLink.schema.const });
});

describe('deprecated /mcp/tools/list and /mcp/tools/call', () => {
  test('the catalogue equals tools/list on POST /mcp (GET and POST), with Deprecation, Sunset and Link', async () => {
    const mcp = await fetch(env.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    const tools = ((await mcp.json()) as { result: { tools: unknown[] } }).result.tools;
    for (const r of [await req('GET', '/mcp/tools/list'), await req('POST', '/mcp/tools/list'), await req('POST', '/mcp/tools/list', { body: {} })]) {
      expect(r.status).toBe(200);
      expect(r.json).toEqual({ tools });
      expect(r.headers.get('deprecation')).toBe(DEPRECATION_HEADERS.Deprecation);
      expect(r.headers.get('sunset')).toBe(DEPRECATION_HEADERS.Sunset);
      expect(r.headers.get('link')).toBe(DEPRECATION_HEADERS.Link);
    }
    const put = await fetch(`${base}/mcp/tools/list`, { method: 'PUT' });
    expect(put.status).toBe(405);
    expect(put.headers.get('allow')).toBe('GET, POST');
    expect(put.headers.get('deprecation')).toBe(DEPRECATION_HEADERS.Deprecation);
  });

  test('request errors: bad JSON, media type, size, body shape, unknown tool; argument and SQL errors', async () => {
    const key = env.apiKey;
    expect((await req('POST', '/mcp/tools/call', { key, raw: '{"name":' })).json).toMatchObject({ error: 'invalid_request', code: 'invalid_json' });
    expect((await req('POST', '/mcp/tools/call', { key, raw: 'name=x', type: 'text/plain' })).status).toBe(415);
    expect((await req('POST', '/mcp/tools/call', { key, body: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: 'x'.repeat(1_100_000) } } })).status).toBe(413);
    expect((await req('POST', '/mcp/tools/call', { key, body: { arguments: {} } })).json).toMatchObject({ code: 'invalid_body' });
    expect((await req('POST', '/mcp/tools/call', { key, body: { name: 'interlock_query', arguments: [1] } })).json).toMatchObject({ code: 'invalid_body' });
    const unknown = await req('POST', '/mcp/tools/call', { key, body: { name: 'no_such_tool', arguments: {} } });
    expect(unknown.status).toBe(404);
    expect(unknown.json).toMatchObject({ error: 'not_found', code: 'unknown_tool' });
    const badArgs = await req('POST', '/mcp/tools/call', { key, body: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: 5 } } });
    expect(badArgs.status).toBe(400);
    expect(badArgs.json).toMatchObject({ error: 'invalid_request', code: 'invalid_arguments', isError: true });
    const badSql = await req('POST', '/mcp/tools/call', { key, body: { name: 'agentgate_query', arguments: { source_id: 'chinook', sql: 'SELEC 1' } } });
    expect(badSql.status).toBe(400);
    expect(badSql.json).toMatchObject({ code: 'invalid_sql', isError: true });
    // Identity before arguments, as on POST /mcp.
    expect((await req('POST', '/mcp/tools/call', { body: { name: 'interlock_query', arguments: { source_id: 5 } } })).json).toMatchObject({ code: 'missing_api_key' });
    const listed = await req('POST', '/mcp/tools/call', { key, body: { name: 'interlock_list_sources' } });
    expect(listed.status).toBe(200);
    expect(listed.json.structuredContent).toHaveProperty('chinook');
    expect((await fetch(`${base}/mcp/tools/call`)).status).toBe(405);
  });

  test('a foreign Host is refused on every route family (DNS-rebinding protection)', async () => {
    const http = await import('node:http');
    const status = (path: string, method = 'GET') =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const r = http.request({ host: '127.0.0.1', port: env.gateway.port, path, method, headers: { host: 'evil.example', 'content-type': 'application/json' } }, (res) => {
          let body = '';
          res.on('data', (c) => (body += c));
          res.on('end', () => resolve({ status: res.statusCode!, body }));
        });
        r.on('error', reject);
        r.end(method === 'POST' ? '{}' : undefined);
      });
    for (const [path, method] of [['/mcp/tools/list', 'GET'], ['/mcp/tools/call', 'POST'], ['/mcp/sse', 'GET'], ['/v1/sources', 'GET'], ['/admin/v1/whoami', 'GET']]) {
      const r = await status(path, method);
      expect({ path, status: r.status, code: JSON.parse(r.body).code }).toEqual({ path, status: 403, code: 'host_not_allowed' });
    }
    const origin = await req('GET', '/v1/sources', { key: env.apiKey, headers: { origin: 'https://evil.example' } });
    expect(origin.json).toMatchObject({ error: 'forbidden', code: 'origin_not_allowed' });
  });
});

describe('/v1', () => {
  test('sources, access, describe; unknown source; parameters', async () => {
    const key = env.apiKey;
    expect((await req('GET', '/v1/sources', { key })).json).toHaveProperty('chinook.type', 'postgres');
    const access = await req('GET', '/v1/access', { key });
    expect(access.json.chinook).toMatchObject({ roles: ['demo-analyst'] });
    expect(Object.keys((await req('GET', '/v1/access?source_id=chinook', { key })).json)).toEqual(['chinook']);
    expect((await req('GET', '/v1/access?source_id=nope', { key })).json).toEqual({});
    expect((await req('GET', '/v1/access?source_id=a&source_id=b', { key })).json).toMatchObject({ code: 'invalid_parameter' });
    expect((await req('GET', '/v1/access?source_id=Bad!', { key })).json).toMatchObject({ code: 'invalid_arguments' });
    const described = await req('GET', '/v1/sources/chinook/describe', { key });
    expect(described.json.rows).toEqual(expect.arrayContaining([expect.objectContaining({ table_schema: 'public', table_name: 'artist', column_name: 'name', data_type: expect.any(String), is_nullable: true })]));
    expect((await req('GET', '/v1/sources/nope/describe', { key })).json).toMatchObject({ error: 'not_found', code: 'unknown_source' });
    expect((await req('GET', '/v1/sources', { key: null })).status).toBe(401);
  });

  test('query: body errors, arguments, refusals and results', async () => {
    const key = env.apiKey;
    expect((await req('POST', '/v1/sources/chinook/query', { key, body: [1] })).json).toMatchObject({ code: 'invalid_body' });
    expect((await req('POST', '/v1/sources/chinook/query', { key, raw: '{' })).json).toMatchObject({ code: 'invalid_json' });
    expect((await req('POST', '/v1/sources/chinook/query', { key, body: { sql: 'SELECT 1', extra: true } })).json).toMatchObject({ code: 'invalid_arguments' });
    expect((await req('POST', '/v1/sources/chinook/query', { key, body: { sql: 'SELECT $1::int AS n', params: [] } })).json).toMatchObject({ code: 'invalid_arguments' });
    const ok = await req('POST', '/v1/sources/chinook/query', { key, body: { sql: 'SELECT $1::int AS n', params: [41] } });
    expect(ok.json).toEqual({ rows: [{ n: 41 }], row_count: 1, truncated: false, cached: false });
    // The body is UTF-8 whatever the charset parameter (latin1 would read the bytes of "é" as "Ã©"; an unknown charset is not refused).
    for (const type of ['application/json; charset=latin1', 'application/json; charset=bogus-9']) {
      const text = await req('POST', '/v1/sources/chinook/query', { key, raw: JSON.stringify({ sql: 'SELECT $1::text AS t', params: ['é'] }), type });
      expect([type, text.status, text.json]).toEqual([type, 200, { rows: [{ t: 'é' }], row_count: 1, truncated: false, cached: type.endsWith('bogus-9') }]);
    }
    const again = await req('POST', '/v1/sources/chinook/query', { key, body: { sql: 'SELECT $1::int AS n', params: [41] } });
    expect(again.json.cached).toBe(true);
    expect(ok.headers.get('x-request-id')).toMatch(/^req_/);
    // Undescribed methods and paths (not validated: the document has no operation for them).
    const wrong = await fetch(`${base}/v1/sources/chinook/query`, { headers: { authorization: `Bearer ${key}` } });
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get('allow')).toBe('POST');
    const nothing = await fetch(`${base}/v1/nothing`, { headers: { authorization: `Bearer ${key}` } });
    expect(await nothing.json()).toMatchObject({ error: 'not_found', code: 'unknown_route' });
  });

  test('discover and related answer what the governed tool answers (validated, whichever it is)', async () => {
    const key = env.apiKey;
    const d = await req('POST', '/v1/sources/chinook/discover', { key, body: { query: 'playlist', limit: 3 } });
    expect([200, 403, 404, 500, 503]).toContain(d.status);
    expect((await req('POST', '/v1/sources/chinook/discover', { key, body: 'x' })).status).toBe(400);
    const rel = await req('GET', `/v1/assets/${encodeURIComponent('chinook:public.artist/1')}/related?limit=2`, { key });
    expect([200, 403, 404, 500]).toContain(rel.status);
    expect((await req('GET', '/v1/assets/x/related?limit=abc', { key })).json).toMatchObject({ code: 'invalid_parameter' });
    expect((await req('GET', '/v1/assets/x/related', { key: null })).status).toBe(401);
  });
});

describe('rate limits', () => {
  let limited: GovernedEnv;
  beforeAll(async () => {
    limited = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 2, window_seconds: 60 }, per_source: { points: 100, window_seconds: 60 } } } as Partial<ResolvedGatewayConfig> });
  });
  afterAll(async () => {
    await limited?.close();
  });

  test('429 with Retry-After and retry_after_ms on /v1 and /mcp/tools/call', async () => {
    const lbase = limited.url.replace(/\/mcp$/, '');
    const call = async (path: string, body: unknown) => {
      const r = await checkedFetch(`${lbase}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${limited.apiKey}` }, body: JSON.stringify(body) });
      problems.push(...r.problems);
      return r;
    };
    const statuses: number[] = [];
    let last: CheckedResponse | null = null;
    for (let i = 0; i < 3; i++) {
      last = await call('/v1/sources/chinook/query', { sql: `SELECT ${i} AS i` });
      statuses.push(last.status);
    }
    expect(statuses).toEqual([200, 200, 429]);
    expect(last!.json).toMatchObject({ error: 'rate_limited', code: 'rate_limited', retry_after_ms: expect.any(Number) });
    expect(Number(last!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    const legacy = await call('/mcp/tools/call', { name: 'interlock_query', arguments: { source_id: 'chinook', sql: 'SELECT 9' } });
    expect(legacy.status).toBe(429);
    expect(legacy.json).toMatchObject({ error: 'rate_limited', isError: true, structuredContent: { status: 'rate_limited' } });
    expect(legacy.headers.get('retry-after')).toMatch(/^[0-9]+$/);
  });
});

test('every operation of the deprecated routes (but /mcp/sse) and /v1 was exercised', () => {
  const hit = new Set([...covered].map((c) => c.split(' ')[0]));
  const ops = [...operations('/mcp/tools'), ...operations('/v1')];
  expect(ops.filter((op) => !hit.has(op))).toEqual([]);
});
