/**
 * Red-team F4 on a real listener (loopback, no database): stalled request bodies are capped per
 * client address before they are read (429 rate_limited, Retry-After, Connection: close, in each
 * route's shape) and cut by the request timeout (408), which gives their slots back.
 */
import net from 'node:net';
import { listenGateway, type RunningGateway } from '../../../src/server';
import { interlockToolBindings } from '../../../src/tools/registry';
import { StaticIdentityResolver } from '../../../src/pipeline/01-identity';
import { listSourcesHandler, StaticSourceDirectory } from '../../../src/tools/handlers/list-sources';
import { MemoryAuditSink } from '../../../src/audit/types';
import { createLogger } from '../../../src/observability/logger';

jest.setTimeout(30_000);

const KEY = 'ilk_test_bodycap_0123456789abcdefghijklm';
let gw: RunningGateway;

beforeAll(async () => {
  gw = await listenGateway({
    tools: interlockToolBindings({ interlock_list_sources: listSourcesHandler(new StaticSourceDirectory([{ id: 'demo', name: 'Demo', type: 'postgres', active: true, grantees: ['id-cap'] }])) }),
    identityResolver: new StaticIdentityResolver({ [KEY]: { id: 'id-cap', name: 'cap' } }),
    audit: new MemoryAuditSink(),
    logger: createLogger('silent'),
    clientLimits: { keyless: { points: 1000, windowSeconds: 60 }, streamsPerAddress: 8, streamsPerIdentity: 8, bodyReadsPerAddress: 2, bodyBytesInFlight: 64 * 1024 * 1024 },
    requestTimeoutMs: 1500,
    headersTimeoutMs: 1000,
    originPolicy: { allowedHosts: ['127.0.0.1'], allowedOrigins: ['https://app.example'] },
    port: 0,
  });
});
afterAll(async () => gw.close(1000));

const HEAD = (path: string, length: number, extra = '') =>
  `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${gw.port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer junk\r\nContent-Length: ${length}\r\n${extra}\r\n`;

/** Opens a raw connection, writes `data`, collects what comes back; `done` settles when the server closes it. */
function raw(data: string): { socket: net.Socket; text: () => string; done: Promise<number> } {
  const socket = net.connect(gw.port, '127.0.0.1');
  let text = '';
  const t0 = Date.now();
  socket.on('data', (c: Buffer) => (text += c.toString()));
  socket.write(data);
  const done = new Promise<number>((resolve) => {
    socket.on('close', () => resolve(Date.now() - t0));
    socket.on('error', () => undefined);
  });
  return { socket, text: () => text, done };
}

async function until(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const reads = () => gw.gateway.deps.clientLimits!.bodyReads().reads;

test('two stalled 1 MiB bodies fill the address; the third request is refused before its body; the timeout cuts the stalled ones (408) and frees their slots', async () => {
  const stalled = [0, 1].map(() => raw(HEAD('/mcp', 1024 * 1024) + 'x'.repeat(1000)));
  await until(() => reads() === 2, 'two body reads in flight');

  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' });
  const third = raw(HEAD('/mcp', Buffer.byteLength(body)) + body);
  await third.done;
  const [head, json] = third.text().split('\r\n\r\n');
  expect(head.split('\r\n')[0]).toBe('HTTP/1.1 429 Too Many Requests');
  expect(head).toMatch(/\r\nRetry-After: 1\r\n/i);
  expect(head).toMatch(/\r\nConnection: close\r\n/i);
  expect(head).not.toMatch(/Access-Control-Allow-Origin/i);
  expect(JSON.parse(json)).toEqual({
    jsonrpc: '2.0',
    id: null,
    error: { code: -32602, message: expect.any(String), data: { status: 'rate_limited', code: 'rate_limited', message: 'Too many request bodies being received from this client address; wait 1000 ms before trying again.', retry_after_ms: 1000 } },
  });

  // From an allow-listed Origin the same refusal carries the CORS headers, so a browser client can read
  // the 429 and its Retry-After (issue 24 item 7).
  const fromApp = raw(HEAD('/mcp', Buffer.byteLength(body), 'Origin: https://app.example\r\n') + body);
  await fromApp.done;
  const [aHead, aJson] = fromApp.text().split('\r\n\r\n');
  expect(aHead.split('\r\n')[0]).toBe('HTTP/1.1 429 Too Many Requests');
  expect(aHead).toMatch(/\r\nAccess-Control-Allow-Origin: https:\/\/app\.example\r\n/i);
  expect(aHead).toMatch(/\r\nAccess-Control-Expose-Headers: [^\r]*Retry-After/i);
  expect(aHead).toMatch(/\r\nVary: Origin\r\n/i);
  expect(JSON.parse(aJson).error.data.code).toBe('rate_limited');
  // A foreign Origin gets no CORS headers (it is refused by the Origin guard or, here, before the body).
  const foreign = raw(HEAD('/mcp', Buffer.byteLength(body), 'Origin: https://evil.example\r\n') + body);
  await foreign.done;
  expect(foreign.text()).not.toMatch(/Access-Control-Allow-Origin/i);

  // Another route: the ErrorBody shape.
  const other = raw(HEAD('/v1/sources/demo/query', 2) + '{}');
  await other.done;
  const [oHead, oJson] = other.text().split('\r\n\r\n');
  expect(oHead.split('\r\n')[0]).toBe('HTTP/1.1 429 Too Many Requests');
  expect(JSON.parse(oJson)).toEqual({ error: 'rate_limited', code: 'rate_limited', message: 'Too many request bodies being received from this client address; wait 1000 ms before trying again.', retry_after_ms: 1000 });

  // The request timeout (1.5 s, checked every 250 ms) answers 408 and closes the stalled connections.
  const closedAfter = await Promise.all(stalled.map((s) => s.done));
  for (const s of stalled) expect(s.text().split('\r\n')[0]).toBe('HTTP/1.1 408 Request Timeout');
  for (const ms of closedAfter) expect(ms).toBeLessThan(4000);
  await until(() => reads() === 0, 'the body reads to be released');

  // The address is served again.
  const r = await fetch(gw.url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${KEY}` }, body, signal: AbortSignal.timeout(5000) });
  expect(r.status).toBe(200);
  expect(reads()).toBe(0);
});

test('a body that is read completely gives its slot back; requests without a body take none', async () => {
  for (let i = 0; i < 5; i++) {
    const r = await fetch(gw.url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: JSON.stringify({ jsonrpc: '2.0', id: i, method: 'ping' }), signal: AbortSignal.timeout(5000) });
    expect(r.status).toBe(200);
    await r.arrayBuffer();
  }
  const h = await fetch(gw.url.replace(/\/mcp$/, '/healthz'), { signal: AbortSignal.timeout(5000) });
  expect(h.status).toBe(200);
  expect(reads()).toBe(0);
});

/** Listeners added to requests and answers while `fn` runs, as `<class> <event>` → count (on, once, addListener and prepend* alike). */
async function listenersAdded(fn: () => Promise<void>): Promise<Record<string, number>> {
  const http = await import('node:http');
  const added: Record<string, number> = {};
  const restore: Array<() => void> = [];
  for (const [label, proto] of [['req', http.IncomingMessage.prototype], ['res', http.ServerResponse.prototype]] as const) {
    for (const m of ['on', 'addListener', 'prependListener'] as const) {
      const p = proto as unknown as Record<string, (...a: unknown[]) => unknown>;
      const had = Object.prototype.hasOwnProperty.call(p, m);
      const orig = p[m];
      // once() goes through on(); count each listener once, by the outermost call.
      let depth = 0;
      p[m] = function (this: unknown, ev: unknown, ...rest: unknown[]) {
        if (depth++ === 0) added[`${label} ${String(ev)}`] = (added[`${label} ${String(ev)}`] ?? 0) + 1;
        try {
          return orig.call(this, ev, ...rest);
        } finally {
          depth--;
        }
      };
      restore.push(() => (had ? (p[m] = orig) : delete p[m]));
    }
  }
  try {
    await fn();
  } finally {
    for (const r of restore) r();
  }
  return added;
}

test('POST /mcp gives its body read back without listeners of its own: a tools/call adds three to the request (data, end, close) and one close to the answer (issue 28 item 3)', async () => {
  const call = async () => {
    const r = await fetch(gw.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {} } }),
      signal: AbortSignal.timeout(5000),
    });
    expect(r.status).toBe(200);
    await r.arrayBuffer();
  };
  await call();
  const added = await listenersAdded(call);
  // node:http's own: 'finish' on the answer (resOnFinish); the rest is the MCP endpoint's.
  expect(added).toEqual({ 'req data': 1, 'req end': 1, 'req close': 1, 'res close': 1, 'res finish': 1 });
  await until(() => reads() === 0, 'the body read given back');
});

test('POST /mcp gives the body read back when the body is cut short, answered unread, or read by body-parser (gzip)', async () => {
  // Cut short: half the declared body, then the client goes away.
  const cut = raw(HEAD('/mcp', 100) + '{"jsonrpc":');
  await until(() => reads() === 1, 'the cut body holding a read');
  cut.socket.destroy();
  await until(() => reads() === 0, 'the cut body\'s read given back');
  // Answered before its body is read: a token in the URL (400).
  const q = raw(HEAD('/mcp?access_token=x', 100) + '{"jsonrpc":');
  await until(() => q.text().includes('HTTP/1.1 400'), 'the 400');
  expect(reads()).toBe(0);
  q.socket.destroy();
  // body-parser's reader (a gzip body).
  const zlib = await import('node:zlib');
  const gz = zlib.gzipSync(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'ping' }));
  const r = await fetch(gw.url, { method: 'POST', headers: { 'content-type': 'application/json', 'content-encoding': 'gzip', accept: 'application/json, text/event-stream' }, body: gz, signal: AbortSignal.timeout(5000) });
  expect(r.status).toBe(200);
  expect(await r.json()).toEqual({ jsonrpc: '2.0', id: 2, result: {} });
  await until(() => reads() === 0, 'the gzip body\'s read given back');
});
