/**
 * One HTTP response of the MCP endpoint: either a single application/json body, or one
 * request-scoped SSE stream (event: message, no event ids, X-Accel-Buffering: no) that carries
 * notifications and then the one JSON-RPC response (contract: Transport; decision 16).
 */
import type { Response } from 'express';
import { serializeMessage } from '../protocol/tool-results';

/** Writes JSON-RPC messages to one express Response, switching to SSE on first use of `event`. */
export class ResponseChannel {
  private streaming = false;
  constructor(private readonly res: Response) {}

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
  final(status: number, message: unknown, headers: Record<string, string> = {}, stream = false): void {
    if (this.closed) return;
    if (this.streaming) {
      this.event(message);
      this.res.end();
      return;
    }
    if (stream && status === 200) {
      // A one-event stream: headers and the event leave in one write.
      this.res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache, no-transform', 'X-Accel-Buffering': 'no' });
      this.res.end(`event: message\ndata: ${serializeMessage(message)}\n\n`);
      return;
    }
    this.res.status(status).set(headers).type('json').send(serializeMessage(message));
  }

  /** Answers with a status and no body (202 for notifications). */
  empty(status: number): void {
    if (this.closed) return;
    this.res.status(status).end();
  }
}
