/**
 * The JSON error body `{error, code, message}` of every route other than POST /mcp
 * (spec/openapi-v1.yaml components.schemas.ErrorBody) and the HTTP-level codes it may carry. It
 * lives in the transport layer so that the app itself (unknown routes, the Host guard in front of
 * every route, body errors) answers in the same shape as the route modules of src/http/.
 */
import type { Response } from 'express';

/**
 * Codes of HTTP-level failures (not tool outcomes). spec/openapi-v1.yaml lists the same set in
 * components.schemas.ErrorBody (a test checks they agree).
 */
export const HTTP_ERROR_CODES = {
  invalid_json: { error: 'invalid_request', status: 400 },
  invalid_body: { error: 'invalid_request', status: 400 },
  invalid_parameter: { error: 'invalid_request', status: 400 },
  validation_failed: { error: 'invalid_request', status: 400 },
  body_too_large: { error: 'payload_too_large', status: 413 },
  unsupported_media_type: { error: 'unsupported_media_type', status: 415 },
  host_not_allowed: { error: 'forbidden', status: 403 },
  origin_not_allowed: { error: 'forbidden', status: 403 },
  unknown_route: { error: 'not_found', status: 404 },
  unknown_tool: { error: 'not_found', status: 404 },
  unknown_stream: { error: 'not_found', status: 404 },
  not_found: { error: 'not_found', status: 404 },
  method_not_allowed: { error: 'method_not_allowed', status: 405 },
  missing_operator_token: { error: 'unauthorized', status: 401 },
  invalid_operator_token: { error: 'unauthorized', status: 401 },
  /** A stored source password would follow a changed endpoint (spec/errors-v1.json operatorRefusals; issue 24, item 1). */
  password_required: { error: 'invalid_request', status: 400 },
  forbidden: { error: 'forbidden', status: 403 },
  conflict: { error: 'conflict', status: 409 },
  unavailable: { error: 'unavailable', status: 503 },
  internal_error: { error: 'internal_error', status: 500 },
} as const;

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
