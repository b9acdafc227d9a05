/**
 * The floor of any Node.js refusal (issue 29, bench/11-overload.ts): a bare `node:http` server that
 * reads a POST body, parses it as JSON-RPC and answers HTTP 429 with Retry-After: 1 and a JSON-RPC
 * error of the same shape and about the same size as InterLock's refusal at capacity, the body built
 * from a constant prefix and the request's id. Nothing else: no headers checked, no token, no audit,
 * no metrics. Its CPU per request is what a refusal cannot go below on the same machine.
 *
 * Prints "READY <url>" when listening (127.0.0.1, a free port). Run as a bench child
 * (startTsChild in bench/lib/env.ts).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

const MESSAGE = 'The gateway is at capacity; wait retry_after_ms milliseconds before trying again.';
/** The refusal's body after the id: the same fields as InterLock's modern-dialect refusal. */
const SUFFIX = `,"error":{"code":-32602,"message":"${MESSAGE}","data":{"status":"rate_limited","code":"rate_limited","message":"${MESSAGE}","retry_after_ms":1000,"request_id":"req_floorfloorfl"}}}`;

/** FLOOR_WRITE=raw: the answer written straight to the socket, past ServerResponse (bench/11-refusal-cost.ts BENCH_NET_FLOOR). */
const RAW = process.env.FLOOR_WRITE === 'raw';
let dateAt = 0;
let date = '';

/**
 * The same bytes node:http writes (status line, the three headers, Date, Connection, Keep-Alive, body), in one
 * corked socket write; then `res` is ended with nothing more to write, through node's internals (`_header`,
 * `_headerSent`: not a public API), so node's queue of responses on the connection moves on. A measurement of
 * what ServerResponse's header building costs, not a way to ship: keep-alive is assumed (HTTP/1.1 clients).
 */
function rawAnswer(res: http.ServerResponse, body: string): void {
  const now = Date.now();
  if (now - dateAt >= 1000) {
    dateAt = now - (now % 1000);
    date = new Date(dateAt).toUTCString();
  }
  const socket = res.socket!;
  socket.cork();
  socket.write(`HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nRetry-After: 1\r\nDate: ${date}\r\nConnection: keep-alive\r\nKeep-Alive: timeout=60\r\n\r\n${body}`);
  const internal = res as unknown as { _header: string; _headerSent: boolean };
  internal._header = 'raw';
  internal._headerSent = true;
  res.end();
  socket.uncork();
}

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    let id: unknown = null;
    try {
      id = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id?: unknown }).id ?? null;
    } catch {
      id = null;
    }
    const body = `{"jsonrpc":"2.0","id":${JSON.stringify(id)}${SUFFIX}`;
    if (RAW) return rawAnswer(res, body);
    res.writeHead(429, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(body), 'Retry-After': '1' });
    res.end(body);
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  console.log(`READY http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
