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

/** Default of client_limits.answer_write_timeout_ms: how long a written answer may wait unread (red-team F1). */
export const DEFAULT_ANSWER_WRITE_TIMEOUT_MS = 30_000;

/**
 * Calls `fn` exactly once, when `res` has finished (its last byte handed to the kernel, 'finish')
 * or closed ('close': answered, client gone, or socket destroyed), whichever comes first; at once
 * when it already has. Used to hold a tool call's stream slot while its answer waits in memory
 * (red-team F1), so an identity has at most client_limits.streams_per_identity unread answers.
 */
export function whenResponseDone(res: ServerResponse, fn: () => void): void {
  let done = false;
  const once = () => {
    if (done) return;
    done = true;
    res.off('finish', once);
    res.off('close', once);
    fn();
  };
  if (res.writableFinished || res.destroyed || (res as { closed?: boolean }).closed) return once();
  res.once('finish', once);
  res.once('close', once);
}

/**
 * Write deadline of an answer already handed to `res` (red-team F1): when it has not finished
 * (every byte flushed to the kernel, so the client is reading) within `ms` milliseconds, calls
 * `onExpired` and destroys the response's socket, which frees the buffered answer and, through
 * whenResponseDone, the stream slot. Does nothing when `ms` ≤ 0 or the response has already
 * finished or closed, or has ended with every byte handed to the socket's kernel buffer. The timer is unref'd and cleared on 'finish' or 'close'. The audit event of a
 * tool call was committed before its answer was written, so a destroyed answer stays recorded.
 */
export function armWriteDeadline(res: ServerResponse, ms: number, onExpired?: () => void): void {
  if (!(ms > 0) || res.writableFinished || res.destroyed) return;
  // Ended and every byte already handed to the kernel (node:http writes a short answer at end()):
  // nothing waits in memory, so no timer (issue 29: a refusal at capacity arms none).
  if (res.writableEnded && res.socket && res.writableLength === 0) return;
  const timer = setTimeout(() => {
    if (res.writableFinished || res.destroyed) return;
    onExpired?.();
    res.destroy();
  }, ms);
  timer.unref();
  whenResponseDone(res, () => clearTimeout(timer));
}

/** Writes JSON-RPC messages to one response, switching to SSE on first use of `event`. */
export class ResponseChannel {
  private streaming = false;
  /** Hooks waiting for the response's 'close' (whenClosed); null before the first and after 'close'. */
  private closeHooks: Array<() => void> | null = null;
  private closeSeen = false;
  constructor(private readonly res: ServerResponse) {}

  /**
   * Calls `fn` once when the response has closed: 'close' comes a tick after 'finish' for an
   * answered request (node:http's resOnFinish), and alone when the client went away or the socket
   * was destroyed first; at once when it already has. However many hooks, the response gets one
   * plain 'close' listener (issue 28 item 3: not one `once` wrapper per hook). Hooks run in the
   * order added and must not throw.
   */
  whenClosed(fn: () => void): void {
    if (this.closeSeen || (this.res as { closed?: boolean }).closed) return fn();
    if (this.closeHooks) {
      this.closeHooks.push(fn);
      return;
    }
    this.closeHooks = [fn];
    this.res.on('close', () => {
      this.closeSeen = true;
      const hooks = this.closeHooks;
      this.closeHooks = null;
      if (hooks) for (const h of hooks) h();
    });
  }

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

  /**
   * Sends a final answer already serialised: `text` (a JSON document) as an application/json body
   * with `status` and `headers` (sendJsonText), or as the last event of an open stream. For answers
   * made from a template (the refusal at capacity, src/protocol/dispatch.ts), which `final` would
   * only serialise again.
   */
  finalText(status: number, text: string, headers?: Record<string, string>): void {
    if (this.closed) return;
    if (this.streaming) {
      this.res.write(`event: message\ndata: ${text}\n\n`);
      this.res.end();
      return;
    }
    sendJsonText(this.res, status, text, headers);
  }

  /**
   * Calls `fn` once when the response has finished or closed: at once when it already has
   * (whenResponseDone's test), else on 'close' (whenClosed: a tick after 'finish' for an answered
   * request, through the channel's one 'close' listener).
   */
  whenDone(fn: () => void): void {
    const res = this.res;
    if (res.writableFinished || res.destroyed) return fn();
    this.whenClosed(fn);
  }

  /** Destroys the socket when the answer written has not drained within `ms` (armWriteDeadline). */
  writeDeadline(ms: number, onExpired?: () => void): void {
    armWriteDeadline(this.res, ms, onExpired);
  }

  /**
   * Reads nothing more from this answer's connection for `ms` once the answer has been written
   * (issue 29: after a refusal at capacity, for its Retry-After). The connection stays open; a
   * client that waits as told loses nothing, one that retries at once on the same connection is
   * not read before then, so a closed loop of retries cannot spend the replica's CPU on refusals.
   * No-op without a socket or for ms ≤ 0.
   */
  pauseReadingAfter(ms: number): void {
    pauseReadingAfter(this.res, ms);
  }

  /** Answers with a status and no body (202 for notifications). */
  empty(status: number): void {
    if (this.closed) return;
    this.res.statusCode = status;
    this.res.end();
  }
}

/**
 * Reads nothing more from `res`'s connection for `ms` milliseconds once `res` has been written
 * (ResponseChannel.pauseReadingAfter; issue 29, after a refusal at capacity, for its Retry-After).
 * No-op without a socket or for ms ≤ 0.
 */
export function pauseReadingAfter(res: ServerResponse, ms: number): void {
  const socket = res.socket;
  if (!socket || !(ms > 0)) return;
  // After node:http's own 'finish' listener, which resumes the socket for the next request.
  res.once('finish', () => {
    if (socket.destroyed) return;
    socket.pause();
    setTimeout(() => {
      if (!socket.destroyed) socket.resume();
    }, ms).unref();
  });
}
