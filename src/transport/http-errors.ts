/**
 * The JSON error body `{error, code, message}` of every route other than POST /mcp
 * (spec/openapi-v1.yaml components.schemas.ErrorBody) and the HTTP-level codes it may carry. It
 * lives in the transport layer so that the app itself (unknown routes, the Host guard in front of
 * every route, body errors) answers in the same shape as the route modules of src/http/.
 */
import type { Response } from 'express';
import { HTTP_ERROR_CODES } from '../../generated/errors-v1';

/**
 * Codes of HTTP-level failures (not tool outcomes), generated from spec/errors-v1.json `httpErrors`
 * and `operatorRefusals`: code -> `{error, status}`. spec/openapi-v1.yaml lists the same set in
 * components.schemas.ErrorBody (a test checks they agree).
 */
export { HTTP_ERROR_CODES };

/** One HTTP-level error code. */
export type HttpErrorCode = keyof typeof HTTP_ERROR_CODES;

/** The JSON error body of every non-MCP route. */
export interface ErrorBody {
  error: string;
  code: string;
  message: string;
  request_id?: string;
  retry_after_ms?: number;
  details?: string[];
}

/** Sends an HTTP-level error in the shared shape. */
export function sendError(res: Response, code: HttpErrorCode, message: string, extra: { details?: string[]; requestId?: string; headers?: Record<string, string>; status?: number } = {}): void {
  const info = HTTP_ERROR_CODES[code];
  const body: ErrorBody = { error: info.error, code, message };
  if (extra.requestId) body.request_id = extra.requestId;
  if (extra.details?.length) body.details = extra.details;
  if (extra.headers) res.set(extra.headers);
  res.status(extra.status ?? info.status).json(body);
}


/** The Retry-After header value for a wait of `ms` milliseconds: whole seconds, rounded up, at least 1 (RFC 9110 §10.2.3 delay-seconds). */
export function retryAfterSeconds(ms: number): string {
  return String(Math.max(1, Math.ceil(ms / 1000)));
}

/**
 * Sends the 429 refusal of a client limit (code rate_limited of spec/errors-v1.json) in the
 * ErrorBody shape, with Retry-After in whole seconds (at least 1) and retry_after_ms.
 */
export function sendRateLimited(res: Response, retryAfterMs: number, message: string): void {
  const body = rateLimitedBody(retryAfterMs, message);
  res.status(429).set('Retry-After', retryAfterSeconds(body.retry_after_ms!)).json(body);
}

/** The 429 `rate_limited` ErrorBody of a wait of `retryAfterMs` (rounded up to a whole ms, at least 1). */
export function rateLimitedBody(retryAfterMs: number, message: string): ErrorBody {
  return { error: 'rate_limited', code: 'rate_limited', message, retry_after_ms: Math.max(1, Math.ceil(retryAfterMs)) };
}
