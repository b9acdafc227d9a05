/**
 * A floor below node:http's (issue 29, bench/11-refusal-cost.ts with BENCH_NET_FLOOR=1): the same
 * refusal as bench/lib/refusal-floor-server.ts (HTTP 429, Retry-After: 1, a JSON-RPC error echoing
 * the request's id, the headers node:http adds: Date, Connection: keep-alive, Keep-Alive), written
 * by a plain `node:net` server that frames each request itself (the end of the head, Content-Length)
 * and answers with one `socket.write` of a head made from constant text, the cached Date and the
 * body. No IncomingMessage, no ServerResponse, no http parser: what a Node.js process pays for the
 * TCP read and write and a JSON.parse of the body alone. Not a server to use (no chunked bodies, no
 * header validation, no timeouts); pipelined requests are answered in order.
 *
 * Prints "READY <url>" when listening (127.0.0.1, a free port). Run as a bench child.
 */
import net from 'node:net';
import type { AddressInfo } from 'node:net';

const MESSAGE = 'The gateway is at capacity; wait retry_after_ms milliseconds before trying again.';
const SUFFIX = `,"error":{"code":-32602,"message":"${MESSAGE}","data":{"status":"rate_limited","code":"rate_limited","message":"${MESSAGE}","retry_after_ms":1000,"request_id":"req_floorfloorfl"}}}`;
const CRLF2 = Buffer.from('\r\n\r\n');

let dateAt = 0;
let date = '';
/** The Date header's value, made once per second (as node:http caches it). */
function httpDate(): string {
  const now = Date.now();
  if (now - dateAt >= 1000) {
    dateAt = now - (now % 1000);
    date = new Date(dateAt).toUTCString();
  }
  return date;
}

/** Content-Length of a request head (latin1 text), or 0. */
function contentLength(head: string): number {
  const m = /\r\ncontent-length:[ \t]*(\d+)/i.exec(head);
  return m ? Number(m[1]) : 0;
}

const server = net.createServer((socket) => {
  socket.setNoDelay(true);
  let buf: Buffer = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    let out = '';
    for (;;) {
      const end = buf.indexOf(CRLF2);
      if (end < 0) break;
      const length = contentLength(buf.toString('latin1', 0, end));
      if (buf.length < end + 4 + length) break;
      let id: unknown = null;
      try {
        id = (JSON.parse(buf.toString('utf8', end + 4, end + 4 + length)) as { id?: unknown }).id ?? null;
      } catch {
        id = null;
      }
      buf = buf.subarray(end + 4 + length);
      const body = `{"jsonrpc":"2.0","id":${JSON.stringify(id)}${SUFFIX}`;
      out += `HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nRetry-After: 1\r\nDate: ${httpDate()}\r\nConnection: keep-alive\r\nKeep-Alive: timeout=60\r\n\r\n${body}`;
    }
    if (out) socket.write(out);
  });
  socket.on('error', () => socket.destroy());
});
server.listen(0, '127.0.0.1', () => {
  console.log(`READY http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
