/**
 * One HTTP response of the MCP endpoint: either a single application/json body, or one
 * request-scoped SSE stream (event: message, no event ids, X-Accel-Buffering: no) that carries
 * notifications and then the one JSON-RPC response (contract: Transport; decision 16).
 *
 * Works on a plain `node:http` ServerResponse (POST /mcp is served without Express, issue 13), and
 * answers with the same bytes Express's `res.status().set().type('json').send()` gave: the given
 * headers, `Content-Type: application/json; charset=utf-8`, `Content-Length`, no body for HEAD.
 * Every one-message answer leaves in one `res.end`, so headers and body share one socket write.
 */
import type { ServerResponse } from 'node:http';
import { serializeMessage, serializeMessageForWire, type WirePair } from '../protocol/tool-results';

/** The Content-Type of every JSON answer (what Express's `res.type('json')` / `res.json()` set). */
export const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

/**
 * Sends `body` (a JSON document: text, its UTF-8 bytes, or a text followed by bytes) with `status`:
 * `headers` first, then Content-Type and Content-Length, in that order (Express's order); the body
 * is left out for a HEAD request, as Express does, but Content-Length still gives its size.
 * Headers and body leave in one socket write.
 */
export function sendJsonText(res: ServerResponse, status: number, body: string | Buffer | WirePair, headers?: Record<string, string>): void {
  res.statusCode = status;
  if (headers) for (const name in headers) res.setHeader(name, headers[name]);
  res.setHeader('Content-Type', JSON_CONTENT_TYPE);
  const pair = typeof body !== 'string' && !Buffer.isBuffer(body) ? body : null;
  res.setHeader('Content-Length', pair ? Buffer.byteLength(pair[0]) + pair[1].length : typeof body === 'string' ? Buffer.byteLength(body) : body.length);
  if (res.req?.method === 'HEAD') res.end();
  else if (!pair) res.end(body);
  else {
    // node:http corks the socket on write() until the next tick, and end() flushes: headers + head
    // and the bytes leave in one writev (test/unit/transport/edge.test.ts counts the writes).
    res.write(pair[0]);
    res.end(pair[1]);
  }
}

/** Writes JSON-RPC messages to one response, switching to SSE on first use of `event`. */
export class ResponseChannel {
  private streaming = false;
  constructor(private readonly res: ServerResponse) {}

  /** True once the response has switched to text/event-stream. */
  get isStreaming(): boolean {
    return this.streaming;
  }

  /** True when the client has gone away or the response has ended. */
  get closed(): boolean {
    return this.res.writableEnded || this.res.destroyed;
  }

  /** Opens the SSE stream (HTTP 200) if it is not open yet. */
  startStream(): void {
    if (this.streaming || this.res.headersSent) return;
    this.res.writeHead(200, {
      'Content-Type': 'text/event-stream',
      'Cache-Control': 'no-cache, no-transform',
      'X-Accel-Buffering': 'no',
      Connection: 'keep-alive',
    });
    this.res.flushHeaders();
    this.streaming = true;
  }

  /** Sends one JSON-RPC message as an SSE event (opening the stream if needed). */
  event(message: unknown): void {
    if (this.closed) return;
    this.startStream();
    this.res.write(`event: message\ndata: ${serializeMessage(message)}\n\n`);
  }

  /**
   * Sends the final JSON-RPC message. On an open stream it becomes the last event; otherwise a
   * JSON body with `status` (or, when `stream` is true and the status is 200, a one-event stream).
   */
  final(status: number, message: unknown, headers?: Record<string, string>, stream = false): void {
    if (this.closed) return;
    if (this.streaming) {
      this.event(message);
      this.res.end();
      return;
    }
    if (stream && status === 200) {
      // A one-event stream: headers and the event leave in one write.
      this.res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache, no-transform', 'X-Accel-Buffering': 'no' });
      this.res.end(Buffer.from(`event: message\ndata: ${serializeMessage(message)}\n\n`, 'utf8'));
      return;
    }
    sendJsonText(this.res, status, serializeMessageForWire(message), headers);
  }

  /** Answers with a status and no body (202 for notifications). */
  empty(status: number): void {
    if (this.closed) return;
    this.res.statusCode = status;
    this.res.end();
  }
}
