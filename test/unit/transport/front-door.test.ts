/**
 * The front door's framing (frameHeaders: the strict subset it refuses from) and its handover on a
 * plain node:http server with a stub refuser (src/transport/front-door.ts): bytes it does not
 * refuse reach node:http untouched, a socket reset in the front door ends nothing but that socket,
 * closeAllConnections ends its connections.
 */
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import { EARLY_BODY_MAX } from '../../../src/transport/early-refusal';
import { frameHeaders, frontDoorOf, installFrontDoor, type FrontDoorRefuser } from '../../../src/transport/front-door';

const BASE = ['Host: 127.0.0.1', 'Content-Type: application/json', 'Accept: application/json, text/event-stream', 'Authorization: Bearer k', 'Content-Length: 2', 'MCP-Protocol-Version: 2026-07-28', 'Mcp-Method: tools/call', 'Mcp-Name: interlock_query'];
const block = (lines: string[]) => lines.join('\r\n');

test('frameHeaders: the strict subset, as node:http gives the headers it reads', () => {
  expect(frameHeaders(block([...BASE, 'X-Other: a', 'Connection: keep-alive']))).toEqual({
    host: '127.0.0.1',
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    authorization: 'Bearer k',
    'content-length': '2',
    'mcp-protocol-version': '2026-07-28',
    'mcp-method': 'tools/call',
    'mcp-name': 'interlock_query',
    connection: 'keep-alive',
  });
  expect(frameHeaders(block(BASE.map((l) => l.replace(': ', ':  \t')).concat('Empty:')))?.host).toBe('127.0.0.1');
  const out = [
    [...BASE, 'Content-Length: 2'], // a duplicate of a header it reads
    [...BASE, 'accept: */*'],
    [...BASE, 'X-Folded: a', ' b'], // obs-fold
    [...BASE, 'X-Name: caf\u00e9'], // not ASCII
    [...BASE, 'X-Ctl: a\u0001b'],
    [...BASE, 'X-Lf: a\nb'], // a bare LF
    [...BASE, 'Bad Name: x'],
    [...BASE, 'Transfer-Encoding: chunked'],
    [...BASE, 'Content-Encoding: gzip'],
    [...BASE, 'Origin: http://x'],
    [...BASE, 'Expect: 100-continue'],
    [...BASE, 'Upgrade: h2c'],
    [...BASE, 'Connection: close'],
    [...BASE.filter((l) => !l.startsWith('Content-Length')), `Content-Length: ${EARLY_BODY_MAX + 1}`],
    [...BASE.filter((l) => !l.startsWith('Content-Length')), 'Content-Length: +2'],
    BASE.filter((l) => !l.startsWith('Content-Length')),
    [...BASE, ...Array.from({ length: 100 }, (_, i) => `X-${i}: a`)],
  ];
  for (const lines of out) expect(frameHeaders(block(lines))).toBeNull();
});

/** A server answering every request with its method, target and body, behind a front door that refuses nothing (every connection adopted, then handed over). */
async function serverWithDoor(): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    let b = '';
    req.on('data', (d) => (b += d));
    req.on('end', () => res.end(`${req.method} ${req.url} ${b}`));
  });
  const refuser: FrontDoorRefuser = { shedding: () => true, take: () => null, answer: () => '', pauseMs: () => 0, writeTimeoutMs: 0, expired: () => undefined };
  installFrontDoor(server, refuser, { headersTimeout: 5000, requestTimeout: 10_000, connectionsCheckingInterval: 1000 });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { server, port: (server.address() as { port: number }).port };
}

function exchange(port: number, parts: string[], until: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', async () => {
      for (const p of parts) {
        s.write(p);
        await new Promise((r) => setTimeout(r, 5));
      }
    });
    let out = '';
    s.on('data', (d) => {
      out += d;
      if (until.test(out)) {
        s.destroy();
        resolve(out.replace(/Date: [^\r]*/g, 'Date: -'));
      }
    });
    s.on('error', reject);
  });
}

test('handover: the bytes it read (in pieces, pipelined) reach node:http untouched, at a request boundary', async () => {
  const { server, port } = await serverWithDoor();
  try {
    const one = 'POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc';
    const two = 'GET /two HTTP/1.1\r\nHost: x\r\n\r\n';
    const got = await exchange(port, [one.slice(0, 7), one.slice(7, 30), one.slice(30) + two.slice(0, 4), two.slice(4)], /GET \/two $/);
    expect(got.match(/\r\n\r\n[^H]*/g)).toEqual(['\r\n\r\nPOST /mcp abc', '\r\n\r\nGET /two ']);
    expect(frontDoorOf(server)!.adopted).toBe(1);
    expect(frontDoorOf(server)!.size).toBe(0);
  } finally {
    server.close();
  }
});

test('a socket reset in the front door ends that socket only; closeAllConnections ends front-door connections', async () => {
  const { server, port } = await serverWithDoor();
  try {
    const half = connect(port, '127.0.0.1');
    await new Promise((r) => half.once('connect', r));
    half.write('POST /mcp HTTP/1.1\r\nHost');
    await new Promise((r) => setTimeout(r, 20));
    half.resetAndDestroy();
    const idle = connect(port, '127.0.0.1');
    idle.on('error', () => undefined);
    idle.resume();
    await new Promise((r) => idle.once('connect', r));
    await new Promise((r) => setTimeout(r, 20));
    expect(frontDoorOf(server)!.size).toBe(1);
    const closed = new Promise((r) => idle.once('close', r));
    server.closeAllConnections();
    await closed;
    expect(frontDoorOf(server)!.size).toBe(0);
    // Still serving.
    expect(await exchange(port, ['GET /after HTTP/1.1\r\nHost: x\r\n\r\n'], /GET \/after $/)).toMatch(/GET \/after $/);
  } finally {
    server.close();
  }
});
