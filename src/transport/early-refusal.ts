/**
 * The refusal at capacity decided in the request listener from the request's headers, before its
 * body is read or parsed (issue 29: "a refusal costs at most a tenth of a served call's CPU"; h29y).
 *
 * A modern-dialect tools/call names everything admission by capacity needs in its headers:
 * MCP-Protocol-Version (the dialect and version), Mcp-Method (`tools/call`), Mcp-Name (the tool),
 * Authorization (the bearer token, whose identity the limiter remembers: CapacityLimiter.noteToken).
 * When those say the call would be refused at once (refuseKnownFromHeaders: the replica at its limit
 * for that identity, or the identity at its own limit), the request is refused here: no admission
 * checks of the body, no JSON-RPC classification, no ResponseChannel, no setHeader per header. The
 * body (at most EARLY_BODY_MAX bytes, framed by Content-Length) is still read to its end, so the
 * connection stays in step for its next request (keep-alive, pipelining) and the answer can echo the
 * JSON-RPC id: the answer is the same bytes as the refusal decided after the body parse
 * (dispatch.ts modernOverCapacityAnswer): HTTP 429, X-Request-Id, Retry-After (whole seconds),
 * Content-Type, Content-Length, node's Date/Connection/Keep-Alive, and the JSON-RPC error -32602
 * with data {status, code: "rate_limited", message, retry_after_ms, request_id}.
 *
 * What differs from the normal path, by design: the body is not validated before the refusal (like
 * the keyless budget and the body-read cap, the other refusals decided before the body): a body that
 * is not JSON, or has no valid id, is refused with `"id":null` (JSON-RPC's id for an id that could
 * not be read), and one whose method or params.name disagree with Mcp-Method/Mcp-Name is refused at
 * capacity instead of 400 -32020. The refusal is counted when decided (audit aggregate, metrics,
 * the limiter's `refused`), so one whose body never arrives is still counted.
 *
 * Left to the normal path (mcp-endpoint.ts, where the same refusal is decided after the body parse):
 * a request with an Origin header (its answer carries the CORS headers), without Content-Length or
 * with Transfer-Encoding or Content-Encoding, a body over EARLY_BODY_MAX, the handshake dialect
 * (its method and tool are only in the body), a Host not served, a Content-Type or Accept that
 * admission refuses, a tool that needs declared client capabilities.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import protocol from '../../spec/protocol-v1.json';
import { acceptsRequired, decodeMirroredHeader, hostAllowed, mediaType, type OriginPolicy } from './http-headers';
import { armWriteDeadline, DEFAULT_ANSWER_WRITE_TIMEOUT_MS, JSON_CONTENT_TYPE, pauseReadingAfter } from './channel';
import { readableId, type JsonRpcId } from './jsonrpc';
import { answerExpired, modernOverCapacityAnswer, refuseKnownFromHeaders, type DispatchDeps } from '../protocol/dispatch';
import { bearerToken } from '../pipeline/01-identity';
import { clientAddressKey } from './client-limits';
import type { ReleasingBodyReader } from './body';

/** The largest body (bytes, by Content-Length) a refusal decided from the headers reads to find the JSON-RPC id; larger bodies take the normal path. */
export const EARLY_BODY_MAX = 16 * 1024;

const MODERN = new Set(protocol.versions.modern);
const H_VERSION = protocol.headers.protocolVersion.toLowerCase();
const H_METHOD = protocol.headers.method.toLowerCase();
const H_NAME = protocol.headers.name.toLowerCase();

/** A modern tools/call named by its headers alone (earlyCall): protocol version, tool (Mcp-Name, decoded) and bearer token. */
export interface HeaderCall {
  version: string;
  tool: string;
  apiKey: string;
}

/**
 * The call a POST's headers `h` (lower-case names, node's values) name, when they qualify for a
 * refusal decided from the headers: MCP-Protocol-Version of the modern dialect, Mcp-Method
 * `tools/call`, an Mcp-Name that decodes, a Bearer token, Content-Length ≤ EARLY_BODY_MAX, no
 * Origin, Transfer-Encoding or Content-Encoding, a Host served, admission's Content-Type and
 * Accept. Null otherwise. Shared by the early refusal and the front door (front-door.ts), so both
 * take exactly the same requests. Pure.
 */
export function earlyCall(h: Record<string, string | undefined>, policy: OriginPolicy): HeaderCall | null {
  const mpv = h[H_VERSION];
  const method = h[H_METHOD];
  const rawName = h[H_NAME];
  const length = h['content-length'];
  if (mpv === undefined || method === undefined || rawName === undefined || length === undefined || h.origin !== undefined) return null;
  if (h['transfer-encoding'] !== undefined || h['content-encoding'] !== undefined || !(Number(length) <= EARLY_BODY_MAX)) return null;
  const version = mpv.trim();
  if (!MODERN.has(version) || method.trim() !== 'tools/call') return null;
  const apiKey = bearerToken(h.authorization);
  const tool = apiKey === null ? null : decodeMirroredHeader(rawName);
  if (tool === null || !hostAllowed(h.host, policy) || mediaType(h['content-type']) !== protocol.http.requiredContentType || !acceptsRequired(h.accept)) return null;
  return { version, tool, apiKey: apiKey! };
}

/** The JSON-RPC id of a body's text (null when it is not JSON or has no valid id), as the refusals decided before the body parse echo it. */
export function bodyId(text: string): JsonRpcId | null {
  try {
    return readableId(JSON.parse(text));
  } catch {
    return null;
  }
}

/**
 * Builds the early refusal of the MCP endpoint: a function of one request (`req`, `res`, and the
 * body-read cap's release `bodyRead`, idempotent) that returns true when it has taken the request
 * (refused at capacity; it reads the body, gives `bodyRead` back once the body has ended or the
 * request closed, then writes the refusal and calls `observe`), false when it did nothing (the
 * caller serves the request as usual); `readBody` is the endpoint's body reader (body.ts
 * releasingBodyReader). Null when admission by capacity or the aggregate audit is
 * off (no early refusal then). With deps.closeRefusedConnections (a front door takes new
 * connections) the refusal carries `Connection: close`. Contract: Transport (429 with Retry-After for rate_limited).
 */
export function earlyCapacityRefusal(
  deps: DispatchDeps,
  policy: OriginPolicy,
  observe: ((method: string, dialect: string, status: number, seconds: number) => void) | undefined,
  readBody: ReleasingBodyReader,
): ((req: IncomingMessage, res: ServerResponse, bodyRead?: () => void) => boolean) | null {
  if (!deps.capacity || !deps.keylessAudit) return null;
  const capacity = deps.capacity;
  return (req, res, bodyRead) => {
    if (req.method !== 'POST') return false;
    const call = earlyCall(req.headers as Record<string, string | undefined>, policy);
    if (!call) return false;
    const { version } = call;
    // A fixed-shape literal, not a spread of `call` (see front-door.ts take).
    const early = refuseKnownFromHeaders(deps, { apiKey: call.apiKey, tool: call.tool, version: call.version, clientAddress: clientAddressKey(req.socket.remoteAddress), scope: req.socket });
    if (!early) return false;
    // The endpoint's own body reader: under these headers (Content-Length, no Transfer-Encoding or
    // Content-Encoding, at most EARLY_BODY_MAX) it reads the framed body directly. A body that never
    // arrives (the client gone) is answered nothing; the refusal is already counted.
    readBody(req, res, (err) => {
      if (err) return;
      const id = bodyId(String((req as { body?: unknown }).body));
      const retryAfterMs = early.refusal.retryAfterMs;
      const answer = modernOverCapacityAnswer(version, id, early.requestId, retryAfterMs)!;
      // One writeHead with the headers as a flat list, in the order the normal path sets them
      // (X-Request-Id, Retry-After, Content-Type, Content-Length): no setHeader per header.
      const head = ['X-Request-Id', early.requestId, 'Retry-After', answer.headers['Retry-After'], 'Content-Type', JSON_CONTENT_TYPE, 'Content-Length', String(Buffer.byteLength(answer.text))];
      // With a front door: the client's next connection starts there (dispatch.ts closeRefusedConnections).
      if (deps.closeRefusedConnections) head.splice(4, 0, 'Connection', 'close');
      res.writeHead(answer.status, head);
      res.end(answer.text);
      armWriteDeadline(res, deps.answerWriteTimeoutMs ?? DEFAULT_ANSWER_WRITE_TIMEOUT_MS, () => answerExpired(deps, early.requestId, early.canonical));
      if (capacity.settings.pauseRefusedConnections) pauseReadingAfter(res, retryAfterMs);
      if (observe && res.writableEnded) observe('tools/call', 'modern', answer.status, 0);
    }, bodyRead);
    return true;
  };
}
