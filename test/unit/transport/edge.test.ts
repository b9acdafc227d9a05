/**
 * The HTTP edge (issue 13): requests for exactly /mcp are served by the node:http MCP handler
 * without Express's router, every other request still reaches the Express app. Exact statuses,
 * headers and bodies, on raw sockets so that the request target is sent exactly as written.
 */
import net from 'node:net';
import zlib from 'node:zlib';
import type { Socket } from 'node:net';
import { listenGateway, type RunningGateway } from '../../../src/server';
import { interlockToolBindings } from '../../../src/tools/registry';
import { StaticIdentityResolver } from '../../../src/pipeline/01-identity';
import { listSourcesHandler, StaticSourceDirectory } from '../../../src/tools/handlers/list-sources';
import { MemoryAuditSink } from '../../../src/audit/types';
import { createLogger } from '../../../src/observability/logger';

const KEY = 'ilk_test_edge_0123456789abcdefghijklmnop';
const LIMIT = 4096;
const KEYLESS_POINTS = 6;

let gw: RunningGateway;
const observed: Array<[string, string, number]> = [];
// Socket-level writes of the server (each _write/_writev call is one system call or fewer).
let writes = 0;

beforeAll(async () => {
  gw = await listenGateway({
    tools: interlockToolBindings({ interlock_list_sources: listSourcesHandler(new StaticSourceDirectory([{ id: 'demo', name: 'Demo', type: 'postgres', active: true, grantees: ['id-edge'] }])) }),
    identityResolver: new StaticIdentityResolver({ [KEY]: { id: 'id-edge', name: 'edge' } }),
    audit: new MemoryAuditSink(),
    logger: createLogger('silent'),
    bodyLimitBytes: LIMIT,
    clientLimits: { keyless: { points: KEYLESS_POINTS, windowSeconds: 3600 }, streamsPerAddress: 8, streamsPerIdentity: 8 },
    observeRequest: (m, d, s) => observed.push([m, d, s]),
    port: 0,
  });
  gw.server.on('connection', (socket: Socket) => {
    const s = socket as Socket & { _write: (...a: unknown[]) => void; _writev: (...a: unknown[]) => void };
    const w = s._write.bind(s);
    const wv = s._writev.bind(s);
    s._write = (...a: unknown[]) => {
      writes++;
      w(...a);
    };
    s._writev = (...a: unknown[]) => {
      writes++;
      wv(...a);
    };
  });
});
afterAll(async () => gw.close(1000));

interface RawResponse {
  status: number;
  headers: Record<string, string>;
  /** Header names in the order they were sent. */
  names: string[];
  body: string;
}

/** Sends one request exactly as given (Connection: close) and parses the raw answer. */
function send(method: string, target: string, opts: { headers?: Record<string, string>; body?: Buffer | string; host?: string } = {}): Promise<RawResponse> {
  const body = opts.body === undefined ? undefined : Buffer.isBuffer(opts.body) ? opts.body : Buffer.from(opts.body);
  const h: Record<string, string> = { Host: opts.host ?? `127.0.0.1:${gw.port}`, Connection: 'close', ...(opts.headers ?? {}) };
  if (body) h['Content-Length'] = String(body.length);
  const head = `${method} ${target} HTTP/1.1\r\n${Object.entries(h).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
  return exchange(body ? Buffer.concat([Buffer.from(head, 'latin1'), body]) : Buffer.from(head, 'latin1'));
}

/** Writes `data` on a new connection and parses the answer (the request must say Connection: close). */
function exchange(data: Buffer | string): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(gw.port, '127.0.0.1');
    const parts: Buffer[] = [];
    socket.on('data', (d) => parts.push(d));
    socket.on('error', reject);
    socket.on('end', () => {
      const text = Buffer.concat(parts).toString('utf8');
      const split = text.indexOf('\r\n\r\n');
      const [statusLine, ...lines] = text.slice(0, split).split('\r\n');
      const headers: Record<string, string> = {};
      const names: string[] = [];
      for (const l of lines) {
        const i = l.indexOf(':');
        names.push(l.slice(0, i));
        headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
      }
      resolve({ status: Number(statusLine.split(' ')[1]), headers, names, body: text.slice(split + 4) });
    });
    // write, not end: a half-closed client makes node:http abort a request still being read.
    socket.write(data);
  });
}

const JSON_HEADERS = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${KEY}` };
const ping = (id: number | string = 1) => JSON.stringify({ jsonrpc: '2.0', id, method: 'ping' });
const INVALID = { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Invalid request' } };
const UNKNOWN_ROUTE = { error: 'not_found', code: 'unknown_route', message: 'No such route (paths are exact and case-sensitive; the MCP endpoint is POST /mcp)' };

describe('routing: exactly /mcp is the MCP endpoint, everything else reaches Express', () => {
  test.each(['/mcp', '/mcp?x=1&y', `http://127.0.0.1:PORT/mcp`])('POST %s answers ping with X-Request-Id and the JSON headers in Express\'s order', async (target) => {
    const r = await send('POST', target.replace('PORT', String(gw.port)), { headers: JSON_HEADERS, body: ping(7) });
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body)).toEqual({ jsonrpc: '2.0', id: 7, result: {} });
    expect(r.headers['x-request-id']).toMatch(/^req_[A-Za-z0-9_-]{18}$/);
    expect(r.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(Number(r.headers['content-length'])).toBe(Buffer.byteLength(r.body));
    expect(r.names).toEqual(['X-Request-Id', 'Content-Type', 'Content-Length', 'Date', 'Connection']);
  });

  test.each(['/mcp/', '/MCP', '/Mcp', '/mcpx', '//mcp', '/mcp/x', '/mc%70'])('POST %s is an unknown route: 404 in the ErrorBody shape', async (target) => {
    const r = await send('POST', target, { headers: JSON_HEADERS, body: ping() });
    expect(r.status).toBe(404);
    expect(r.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(r.headers['x-request-id']).toBeUndefined();
    expect(JSON.parse(r.body)).toEqual(UNKNOWN_ROUTE);
  });

  test('other paths keep the Host/Origin guard in the ErrorBody shape; /mcp answers it in JSON-RPC', async () => {
    const health = await send('GET', '/healthz');
    expect([health.status, JSON.parse(health.body)]).toEqual([200, { status: 'ok' }]);
    const foreign = await send('GET', '/healthz', { host: 'evil.example' });
    expect([foreign.status, JSON.parse(foreign.body)]).toEqual([403, { error: 'forbidden', code: 'host_not_allowed', message: 'Forbidden: the Host header names a host this server does not serve' }]);
    const unknown = await send('GET', '/nope', { host: 'evil.example' });
    expect([unknown.status, JSON.parse(unknown.body).code]).toEqual([403, 'host_not_allowed']);
    const origin = await send('GET', '/nope', { headers: { Origin: 'http://evil.example' } });
    expect([origin.status, JSON.parse(origin.body).code]).toEqual([403, 'origin_not_allowed']);
    const mcp = await send('POST', '/mcp', { headers: JSON_HEADERS, body: ping(), host: 'evil.example' });
    expect(mcp.status).toBe(403);
    expect(JSON.parse(mcp.body)).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Forbidden: the Host header names a host this server does not serve' } });
    expect(mcp.headers['x-request-id']).toMatch(/^req_/);
  });

  test('GET and HEAD /mcp: 405 with Allow: POST; HEAD has the same Content-Length and no body', async () => {
    const get = await send('GET', '/mcp', { headers: JSON_HEADERS });
    const expected = { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Method not allowed: the MCP endpoint accepts POST only' } };
    expect([get.status, get.headers.allow, JSON.parse(get.body)]).toEqual([405, 'POST', expected]);
    expect(get.names).toEqual(['X-Request-Id', 'Allow', 'Content-Type', 'Content-Length', 'Date', 'Connection']);
    const head = await send('HEAD', '/mcp', { headers: JSON_HEADERS });
    expect([head.status, head.headers.allow, head.headers['content-length'], head.body]).toEqual([405, 'POST', String(Buffer.byteLength(JSON.stringify(expected))), '']);
  });

  test('a notification gets 202 with Content-Length 0 and no Content-Type', async () => {
    const r = await send('POST', '/mcp', { headers: JSON_HEADERS, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) });
    expect([r.status, r.headers['content-length'], r.headers['content-type'], r.body]).toEqual([202, '0', undefined, '']);
  });
});

describe('the body on the fast path (body-parser\'s reader)', () => {
  test('over the limit: 413 JSON-RPC -32600 "body too large", no X-Request-Id, also when chunked', async () => {
    const big = `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"${'x'.repeat(LIMIT)}"}}`;
    const tooLarge = { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Invalid request: body too large' } };
    const r = await send('POST', '/mcp', { headers: JSON_HEADERS, body: big });
    expect([r.status, JSON.parse(r.body), r.headers['x-request-id']]).toEqual([413, tooLarge, undefined]);
    const chunked = `${big.length.toString(16)}\r\n${big}\r\n0\r\n\r\n`;
    const rc = await sendRawBody(chunked);
    expect([rc.status, JSON.parse(rc.body)]).toEqual([413, tooLarge]);
    const gz = await send('POST', '/mcp', { headers: { ...JSON_HEADERS, 'Content-Encoding': 'gzip' }, body: zlib.gzipSync(big) });
    expect([gz.status, JSON.parse(gz.body)]).toEqual([413, tooLarge]);
  });

  test('gzip, deflate and br bodies are inflated; an unsupported encoding is 415; a broken gzip stream 400; the body is UTF-8 whatever the charset parameter', async () => {
    for (const [enc, data] of [['gzip', zlib.gzipSync(ping(2))], ['deflate', zlib.deflateSync(ping(2))], ['br', zlib.brotliCompressSync(ping(2))]] as const) {
      const r = await send('POST', '/mcp', { headers: { ...JSON_HEADERS, 'Content-Encoding': enc }, body: data });
      expect([enc, r.status, JSON.parse(r.body)]).toEqual([enc, 200, { jsonrpc: '2.0', id: 2, result: {} }]);
    }
    const compress = await send('POST', '/mcp', { headers: { ...JSON_HEADERS, 'Content-Encoding': 'compress' }, body: ping() });
    expect([compress.status, JSON.parse(compress.body)]).toEqual([415, INVALID]);
    const broken = await send('POST', '/mcp', { headers: { ...JSON_HEADERS, 'Content-Encoding': 'gzip' }, body: 'not gzip' });
    expect([broken.status, JSON.parse(broken.body)]).toEqual([400, INVALID]);
    // Content-Type is matched on its media type, parameters ignored (decision 13), and JSON is UTF-8
    // (RFC 8259): a charset parameter neither refuses the body nor changes how its bytes are read.
    // Decoded as UTF-7, "+AGk-" would be "i"; as latin1, the two bytes of "é" would be "Ã©".
    const message = JSON.stringify({ jsonrpc: '2.0', id: 'é+AGk-', method: 'ping' });
    for (const cs of ['utf-8', 'latin1', 'UTF-7', 'utf-16', 'bogus-9', '"iso-8859-1"']) {
      const r = await send('POST', '/mcp', { headers: { ...JSON_HEADERS, 'Content-Type': `application/json; charset=${cs}` }, body: Buffer.from('\ufeff' + message, 'utf8') });
      expect([cs, r.status, JSON.parse(r.body)]).toEqual([cs, 200, { jsonrpc: '2.0', id: 'é+AGk-', result: {} }]);
    }
    // A malformed UTF-8 sequence becomes U+FFFD (the message is still JSON).
    const bad = await send('POST', '/mcp', { headers: JSON_HEADERS, body: Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":"a'), Buffer.from([0xff]), Buffer.from('b","method":"ping"}')]) });
    expect([bad.status, JSON.parse(bad.body)]).toEqual([200, { jsonrpc: '2.0', id: 'a\ufffdb', result: {} }]);
  });
});

/** Sends a chunked POST /mcp whose chunked body text is given verbatim. */
function sendRawBody(chunkedBody: string): Promise<RawResponse> {
  const head = Object.entries({ ...JSON_HEADERS, Host: `127.0.0.1:${gw.port}`, Connection: 'close', 'Transfer-Encoding': 'chunked' }).map(([k, v]) => `${k}: ${v}\r\n`).join('');
  return exchange(`POST /mcp HTTP/1.1\r\n${head}\r\n${chunkedBody}`);
}

test('every one-message answer leaves in one socket write (headers and body together)', async () => {
  for (const body of [ping(3), JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'tools/list' }), JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {} } })]) {
    const before = writes;
    const r = await send('POST', '/mcp', { headers: JSON_HEADERS, body });
    expect(r.status).toBe(200);
    expect(writes - before).toBe(1);
  }
});

test('observeRequest sees answered requests with closed labels; the keyless budget refuses with 429 before the body is read', async () => {
  observed.length = 0;
  await send('POST', '/mcp', { headers: JSON_HEADERS, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }) });
  await send('GET', '/mcp', { headers: JSON_HEADERS });
  await send('POST', '/mcp', { headers: JSON_HEADERS, body: 'x'.repeat(LIMIT + 1) });
  await new Promise((r) => setImmediate(r));
  expect(observed).toEqual([['tools/list', 'handshake', 200], ['-', '-', 405]]);

  const keyless = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };
  const statuses: number[] = [];
  for (let i = 0; i <= KEYLESS_POINTS; i++) statuses.push((await send('POST', '/mcp', { headers: keyless, body: ping(i) })).status);
  expect(statuses).toEqual([...Array<number>(KEYLESS_POINTS).fill(200), 429]);
  const refused = await send('POST', '/mcp', { headers: keyless, body: 'x'.repeat(LIMIT + 1) });
  expect(refused.status).toBe(429);
  expect(refused.headers['x-request-id']).toBeUndefined();
  expect(refused.names).toEqual(['Retry-After', 'Content-Type', 'Content-Length', 'Date', 'Connection']);
  expect(Number(refused.headers['retry-after'])).toBeGreaterThanOrEqual(1);
  const body = JSON.parse(refused.body);
  expect(body).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32602, message: expect.stringMatching(/^Too many requests without a valid API key from this address; wait \d+ ms before trying again\.$/), data: { status: 'rate_limited', code: 'rate_limited', message: body.error.message, retry_after_ms: expect.any(Number) } } });
  // A Bearer token that resolves to nobody spends the same budget (after admission: X-Request-Id).
  const junk = await send('POST', '/mcp', { headers: { ...keyless, Authorization: 'Bearer junk' }, body: ping() });
  expect([junk.status, junk.headers['x-request-id']?.startsWith('req_'), JSON.parse(junk.body).error.data.code]).toEqual([429, true, 'rate_limited']);
  // A valid key is not limited by the keyless budget.
  expect((await send('POST', '/mcp', { headers: JSON_HEADERS, body: ping() })).status).toBe(200);
  await new Promise((r) => setImmediate(r));
  expect(observed.slice(2).map((o) => o.join(' '))).toEqual([...Array<string>(KEYLESS_POINTS).fill('ping handshake 200'), '- - 429', '- - 429', 'ping handshake 429', 'ping handshake 200']);
});
