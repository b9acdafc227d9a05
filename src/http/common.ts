/**
 * Shared pieces of the gateway's non-MCP HTTP routes (the deprecated /mcp/* routes, the /v1 query
 * proxy and the /admin/v1 API): the JSON error body `{error, code, message}`, the mapping of a
 * governed ToolOutcome to an HTTP answer, the Host/Origin guard and a JSON body parser whose
 * failures are answered in the same error shape. spec/openapi-v1.yaml (components ErrorBody,
 * QueuedBody) describes these bodies.
 *
 * `code` is a refusal or tool-error code of spec/errors-v1.json, or one of HTTP_ERROR_CODES below
 * for failures that are not tool outcomes (bad JSON, unknown route, …); `error` is the class: the
 * refusal status (unauthorized, forbidden, not_found, rate_limited, unavailable) for refusals,
 * "approval_required" for a queued write, and for the rest invalid_request, not_found,
 * method_not_allowed, unsupported_media_type, conflict, payload_too_large, internal_error.
 */
import express, { type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import type { Logger } from 'pino';
import { refusalInfo, toolErrorInfo } from '../errors/vocabulary';
import type { ToolOutcome } from '../tools/types';
import { hostAllowed, originAllowed, type OriginPolicy } from '../transport/http-headers';

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

/** A governed outcome as an HTTP answer: status, extra headers and the `{error, code, message}` part (null for a success). */
export interface HttpOutcome {
  status: number;
  headers: Record<string, string>;
  /** The error fields; null when the outcome is a successful result. */
  error: (ErrorBody & { approval_id?: string; approval_state?: string }) | null;
  /** For a queued write: approval id and state. */
  queued?: { approval_id: string; approval_state: string };
}

/**
 * Maps a ToolOutcome to HTTP (the /v1 proxy and the deprecated /mcp/tools/call share it):
 * result → 200 (a result flagged isError → 500 tool_execution_failed); queued → 202 with
 * error "approval_required", approval_id and approval_state; refusal → the refusal's HTTP status
 * with error = its status (401 adds WWW-Authenticate, 429 adds Retry-After); invalid arguments or
 * SQL → 400 invalid_request; the opaque failure → 500 internal_error (no upstream text, ever).
 */
export function httpOutcome(o: ToolOutcome, requestId: string): HttpOutcome {
  switch (o.kind) {
    case 'result':
      if (o.isError) return { status: 500, headers: {}, error: { error: 'internal_error', code: 'tool_execution_failed', message: toolErrorInfo('tool_execution_failed').message, request_id: requestId } };
      return { status: 200, headers: {}, error: null };
    case 'queued': {
      const info = refusalInfo('approval_required');
      return {
        status: 202,
        headers: {},
        error: { error: 'approval_required', code: 'approval_required', message: o.message ?? info.message, request_id: requestId, approval_id: o.approvalId, approval_state: o.approvalState },
        queued: { approval_id: o.approvalId, approval_state: o.approvalState },
      };
    }
    case 'refusal': {
      const info = refusalInfo(o.code);
      const headers: Record<string, string> = {};
      if (info.http === 401) headers['WWW-Authenticate'] = 'Bearer realm="interlock"';
      const body: ErrorBody = { error: info.status, code: info.code, message: o.message ?? info.message, request_id: requestId };
      if (typeof o.extra?.retry_after_ms === 'number') {
        body.retry_after_ms = o.extra.retry_after_ms;
        headers['Retry-After'] = String(Math.max(1, Math.ceil(o.extra.retry_after_ms / 1000)));
      } else if (info.http === 429) {
        headers['Retry-After'] = '1';
      }
      return { status: info.http, headers, error: body };
    }
    case 'tool_error': {
      const info = toolErrorInfo(o.code);
      if (info.class === 'invalid_params') return { status: 400, headers: {}, error: { error: 'invalid_request', code: info.code, message: o.message ?? info.message, request_id: requestId } };
      return { status: 500, headers: {}, error: { error: 'internal_error', code: info.code, message: info.message, request_id: requestId } };
    }
  }
}

/**
 * The Host/Origin guard of the MCP endpoint (decision 14) for these routes: a foreign Host or
 * Origin is refused with 403 before anything else (DNS-rebinding protection for a loopback bind).
 */
export function hostOriginGuard(policy: OriginPolicy): RequestHandler {
  return (req, res, next) => {
    const host = req.headers.host;
    if (!hostAllowed(host, policy)) return sendError(res, 'host_not_allowed', 'Forbidden: the Host header names a host this server does not serve');
    const origin = typeof req.headers.origin === 'string' ? req.headers.origin : undefined;
    if (!originAllowed(origin, host, req.protocol, policy)) return sendError(res, 'origin_not_allowed', 'Forbidden: the Origin is not allowed');
    next();
  };
}

/**
 * Parses a JSON request body (any method with a body): Content-Type must be application/json
 * (415 otherwise), the body valid JSON (400 invalid_json) and at most `limit` bytes (413). An empty
 * body is an empty object.
 */
export function jsonBody(limit = 1024 * 1024): RequestHandler[] {
  const parse = express.text({ type: () => true, limit });
  return [
    parse,
    (req, res, next) => {
      const raw = typeof req.body === 'string' ? req.body : '';
      if (raw.trim() === '') {
        req.body = {};
        return next();
      }
      const ct = (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
      if (ct !== 'application/json') return sendError(res, 'unsupported_media_type', 'Unsupported Media Type: send Content-Type: application/json');
      try {
        req.body = JSON.parse(raw);
      } catch {
        return sendError(res, 'invalid_json', 'The body is not valid JSON');
      }
      next();
    },
  ];
}

/** Error middleware for a router: body-parser failures in the shared shape; anything else 500 without detail. */
export function routerErrorHandler(logger: Logger | undefined): (err: unknown, req: Request, res: Response, next: NextFunction) => void {
  return (err, req, res, _next) => {
    if (res.headersSent) {
      res.end();
      return;
    }
    const e = err as { type?: string; status?: number };
    if (e.type === 'entity.too.large') return sendError(res, 'body_too_large', 'The body is too large');
    if (e.type === 'charset.unsupported' || e.type === 'encoding.unsupported') return sendError(res, 'unsupported_media_type', 'Unsupported body encoding');
    if (typeof e.status === 'number' && e.status >= 400 && e.status < 500) return sendError(res, 'invalid_body', 'The body could not be read');
    logger?.error({ err, path: req.path }, 'http route failed');
    sendError(res, 'internal_error', 'internal error');
  };
}

/** True for a plain JSON object. */
export function isObject(v: unknown): v is Record<string, unknown> {
  return !!v && typeof v === 'object' && !Array.isArray(v);
}
