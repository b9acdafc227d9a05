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

/** A connect-style body reader: sets `req.body` to the decoded text (left undefined for a request without a body), or calls `next(err)` with body-parser's error. */
export type BodyReader = (req: IncomingMessage & { body?: unknown }, res: ServerResponse, next: (err?: unknown) => void) => void;

const UTF8 = new TextDecoder('utf-8');

/** A body reader for requests of at most `limit` bytes (after inflation). */
export function utf8BodyReader(limit: number): BodyReader {
  const raw = express.raw({ type: () => true, limit }) as unknown as BodyReader;
  return (req, res, next) =>
    raw(req, res, (err) => {
      if (!err && Buffer.isBuffer(req.body)) req.body = UTF8.decode(req.body);
      next(err);
    });
}
