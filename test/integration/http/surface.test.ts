/**
 * Issue 10, Build 8: the HTTP surface. Only the exact path /mcp is the MCP endpoint (`/mcp/`,
 * `/MCP` are unknown routes answered 404 in the documented shape, errors included, never 500);
 * every error of every route has its documented shape in spec/openapi-v1.yaml; the Host/Origin
 * guard covers every route including /healthz, /readyz and /metrics; and config ops_listen moves
 * the operations endpoints to their own listener.
 */
import http from 'node:http';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { validateComponent, validateResponse } from './openapi';

jest.setTimeout(120_000);

let env: GovernedEnv;
let base: URL;

beforeAll(async () => {
  env = await startGovernedEnv();
  base = new URL(env.url);
});
afterAll(async () => {
  await env?.close();
});

interface Raw {
  status: number;
  headers: Record<string, string>;
  body: string;
  json: any;
}

/** One HTTP request with full control of the headers (fetch cannot set Host). */
function raw(target: URL, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: target.hostname, port: target.port, method, path, headers: { ...(body !== undefined ? { 'content-length': String(Buffer.byteLength(body)) } : {}), ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        const h: Record<string, string> = {};
        for (const [k, v] of Object.entries(res.headers)) if (typeof v === 'string') h[k] = v;
        resolve({ status: res.statusCode ?? 0, headers: h, body: text, json });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** raw() plus validation against the OpenAPI document (the path must be a documented one). */
async function checked(target: URL, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<Raw> {
  const r = await raw(target, method, path, headers, body);
  expect(validateResponse({ method, url: path, status: r.status, headers: r.headers, body: r.body })).toEqual([]);
  return r;
}

const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
const PING = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' });

test('only the exact path /mcp is the MCP endpoint; aliases are unknown routes, body errors included (never 500)', async () => {
  const ok = await checked(base, 'POST', '/mcp', MCP_HEADERS, PING);
  expect([ok.status, ok.json]).toEqual([200, { jsonrpc: '2.0', id: 1, result: {} }]);
  const bodies = [PING, '{"jsonrpc":', 'x'.repeat(1_200_000), '[]'];
  for (const path of ['/mcp/', '/MCP', '/Mcp', '/mcp//', '/MCP/']) {
    for (const body of bodies) {
      for (const headers of [MCP_HEADERS, { 'content-type': 'text/plain' }, { 'content-type': 'application/json; charset=klingon' }]) {
        const r = await raw(base, 'POST', path, headers, body);
        expect([path, r.status, r.json]).toEqual([path, 404, { error: 'not_found', code: 'unknown_route', message: expect.any(String) }]);
        expect(validateComponent('NotFoundBody', r.json)).toEqual([]);
      }
    }
    const get = await raw(base, 'GET', path);
    expect([path, get.status, get.json?.code]).toEqual([path, 404, 'unknown_route']);
  }
  // The canonical endpoint answers body errors in its JSON-RPC shape, as documented.
  const big = await checked(base, 'POST', '/mcp', MCP_HEADERS, 'x'.repeat(1_200_000));
  expect([big.status, big.json.error.code, big.json.id]).toEqual([413, -32600, null]);
  const bad = await checked(base, 'POST', '/mcp', MCP_HEADERS, '{"jsonrpc":');
  expect([bad.status, bad.json.error.code]).toEqual([400, -32700]);
  const badCharset = await checked(base, 'POST', '/mcp', { ...MCP_HEADERS, 'content-type': 'application/json; charset=klingon' }, PING);
  // The charset parameter is ignored: the body is read as UTF-8 (src/transport/body.ts).
  expect([badCharset.status, badCharset.json.result, badCharset.json.error]).toEqual([200, {}, undefined]);
});

test('unknown paths, and aliases of the other routes, answer 404 unknown_route in the ErrorBody shape', async () => {
  for (const [method, path] of [['GET', '/nope'], ['POST', '/nope'], ['GET', '/v1/sources/'], ['GET', '/V1/sources'], ['GET', '/mcp/tools/list/'], ['GET', '/MCP/tools/list'], ['GET', '/Healthz'], ['GET', '/metrics/']] as const) {
    const r = await raw(base, method, path, { authorization: `Bearer ${env.apiKey}` });
    expect([method, path, r.status, r.json?.error, r.json?.code]).toEqual([method, path, 404, 'not_found', 'unknown_route']);
    expect(validateComponent('NotFoundBody', r.json)).toEqual([]);
  }
});

test('the Host/Origin guard covers every route, the operations endpoints included, in each route\'s documented shape', async () => {
  const evil = { host: 'evil.example:80' };
  for (const path of ['/healthz', '/readyz', '/metrics', '/mcp/tools/list', '/v1/sources']) {
    const r = await checked(base, 'GET', path, evil);
    expect([path, r.status, r.json.code]).toEqual([path, 403, 'host_not_allowed']);
    const o = await checked(base, 'GET', path, { origin: 'http://evil.example' });
    expect([path, o.status, o.json.code]).toEqual([path, 403, 'origin_not_allowed']);
  }
  const unknown = await raw(base, 'GET', '/nope', evil);
  expect([unknown.status, unknown.json.code]).toEqual([403, 'host_not_allowed']);
  const mcp = await checked(base, 'POST', '/mcp', { ...MCP_HEADERS, ...evil }, PING);
  expect([mcp.status, mcp.json.error.code]).toEqual([403, -32600]);
  // The operations endpoints still answer their own clients.
  const own = { host: `127.0.0.1:${base.port}` };
  expect((await checked(base, 'GET', '/healthz', own)).json).toEqual({ status: 'ok' });
  expect((await checked(base, 'GET', '/readyz', own)).json).toEqual({ status: 'ready' });
  expect((await checked(base, 'GET', '/metrics', own)).status).toBe(200);
});

test('ops_listen serves /healthz, /readyz and /metrics on their own listener, guarded, and no longer beside /mcp', async () => {
  const other = await startGovernedEnv({ config: { ops_listen: { host: '127.0.0.1', port: 0 } } });
  try {
    expect(other.gateway.opsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const ops = new URL(other.gateway.opsUrl!);
    const main = new URL(other.url);
    expect(ops.port).not.toBe(main.port);
    expect((await checked(ops, 'GET', '/healthz')).json).toEqual({ status: 'ok' });
    expect((await checked(ops, 'GET', '/readyz')).json).toEqual({ status: 'ready' });
    const m = await checked(ops, 'GET', '/metrics');
    expect(m.status).toBe(200);
    expect(m.body).toMatch(/^# HELP /m);
    for (const path of ['/healthz', '/readyz', '/metrics']) {
      const r = await raw(main, 'GET', path);
      expect([path, r.status, r.json.code]).toEqual([path, 404, 'unknown_route']);
      const g = await checked(ops, 'GET', path, { host: 'evil.example' });
      expect([path, g.status, g.json.code]).toEqual([path, 403, 'host_not_allowed']);
    }
    const mcpOnOps = await raw(ops, 'POST', '/mcp', MCP_HEADERS, PING);
    expect([mcpOnOps.status, mcpOnOps.json.code]).toEqual([404, 'unknown_route']);
    const mcpOnMain = await raw(main, 'POST', '/mcp', MCP_HEADERS, PING);
    expect(mcpOnMain.status).toBe(200);
  } finally {
    await other.close();
  }
});
