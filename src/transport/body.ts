/**
 * The request body reader of every JSON route (the MCP endpoint and the HTTP API): body-parser's
 * `raw()` reader — Content-Encoding gzip, deflate and br inflated, the size limit enforced on the
 * inflated bytes while they arrive (413 `entity.too.large`), an unknown encoding refused (415
 * `encoding.unsupported`) — then the bytes decoded as UTF-8 whatever the Content-Type's charset
 * parameter says. JSON exchanged between systems is UTF-8 (RFC 8259 §8.1) and the contract matches
 * Content-Type on its media type, ignoring parameters (decision 13), so `charset=latin1`,
 * `charset=utf-7` or an unknown charset neither changes how the body is read nor refuses it. One
 * leading byte order mark is dropped; a malformed UTF-8 sequence becomes U+FFFD (as the decoder
 * used before did).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import express from 'express';

/** A connect-style body reader: sets `req.body` to the decoded text (left undefined for a request without a body), or calls `next(err)` with body-parser's error. Three parameters, so Express mounts it as middleware (four would make it an error handler). */
export type BodyReader = (req: IncomingMessage & { body?: unknown }, res: ServerResponse, next: (err?: unknown) => void) => void;

/**
 * A BodyReader that also takes `onRead` (the body-read cap's release, src/transport/app.ts;
 * idempotent): called once the body has been read, or the request ended or closed first; on the
 * direct read from the reader's own listeners (none added for it, issue 28 item 3), on body-parser's
 * path from `end`/`close` listeners as src/transport/app.ts adds them for every other route.
 */
export type ReleasingBodyReader = (req: IncomingMessage & { body?: unknown }, res: ServerResponse, next: (err?: unknown) => void, onRead?: () => void) => void;

const UTF8 = new TextDecoder('utf-8');

/**
 * A body reader for requests of at most `limit` bytes (after inflation). A request with a
 * Content-Length within the limit, no Transfer-Encoding and no Content-Encoding (or `identity`) is
 * read directly from the stream (issue 29: body-parser's reader costs a refusal at capacity several
 * µs of its ~25 above node:http's floor): node:http's parser already frames such a body to exactly
 * Content-Length bytes, so what body-parser adds there is nothing but its own bookkeeping; the
 * result is the same (`req.body` the decoded text; a stream closed before its end is
 * `request.aborted`, 400, as raw-body names it). Every other request goes through body-parser.
 */
export function utf8BodyReader(limit: number): BodyReader {
  const read = releasingBodyReader(limit);
  return (req, res, next) => read(req, res, next);
}

/** utf8BodyReader's reader with the `onRead` hook (ReleasingBodyReader), for the MCP endpoint, which is no Express middleware. */
export function releasingBodyReader(limit: number): ReleasingBodyReader {
  const raw = express.raw({ type: () => true, limit }) as unknown as BodyReader;
  const slow: ReleasingBodyReader = (req, res, next, onRead) => {
    if (onRead) {
      req.once('end', onRead);
      req.once('close', onRead);
      res.once('close', onRead);
    }
    raw(req, res, (err) => {
      if (!err && Buffer.isBuffer(req.body)) req.body = UTF8.decode(req.body);
      next(err);
    });
  };
  return (req, res, next, onRead) => {
    const h = req.headers;
    const length = h['content-length'];
    const encoding = h['content-encoding'];
    if (length === undefined || h['transfer-encoding'] !== undefined || (encoding !== undefined && encoding.toLowerCase() !== 'identity') || !(Number(length) <= limit) || req.readableEnded || req.destroyed) return slow(req, res, next, onRead);
    readFramed(req, next, onRead);
  };
}

/**
 * The body of a request framed by its Content-Length (utf8BodyReader's direct read): `req.body` the
 * UTF-8 text, then `onRead` and `next()`; `onRead` and `next(err)` when the stream closes first.
 * Three plain listeners (`data`, `end`, `close`), removed at the end (issue 28 item 3: no `once`
 * wrappers, no `aborted` or `error` listener): node:http's IncomingMessage emits 'close' after
 * 'aborted' for a body cut short, and emits 'error' only to a stream that has an 'error' listener
 * (IncomingMessage#_destroy), so 'close' alone sees every way a body can fail to arrive.
 */
function readFramed(req: IncomingMessage & { body?: unknown }, next: (err?: unknown) => void, onRead: (() => void) | undefined): void {
  let first: Buffer | null = null;
  let more: Buffer[] | null = null;
  const onData = (c: Buffer): void => {
    if (first === null) first = c;
    else (more ??= [first]).push(c);
  };
  const done = (err?: Error): void => {
    req.off('data', onData);
    req.off('end', onEnd);
    req.off('close', onClose);
    onRead?.();
    if (err) return next(err);
    req.body = UTF8.decode(more ? Buffer.concat(more) : (first ?? EMPTY));
    next();
  };
  const onEnd = (): void => done();
  // raw-body's `request.aborted` (400), as body-parser's reader answers a body cut short.
  const onClose = (): void => done(Object.assign(new Error('request aborted'), { type: 'request.aborted', status: 400, statusCode: 400, expose: true }));
  req.on('data', onData);
  req.on('end', onEnd);
  req.on('close', onClose);
}

const EMPTY = Buffer.alloc(0);
