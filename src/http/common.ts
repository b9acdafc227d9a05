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
import type { RequestHandler, Response } from 'express';
import { jsonText } from '../sources/postgres/raw-json';
import { utf8BodyReader } from '../transport/body';
import { refusalInfo, toolErrorInfo } from '../errors/vocabulary';
import type { ToolOutcome } from '../tools/types';
import { retryAfterSeconds, sendError, sendRateLimited, type ErrorBody } from '../transport/http-errors';
import { clientAddressKey, keylessGate, limitMessage, unverifiedKeyGate } from '../transport/client-limits';
import { bearerToken } from '../pipeline/01-identity';
import { jsonNestsDeeperThan, MAX_JSON_DEPTH } from '../transport/json-depth';
import { parseClientJson } from '../pipeline/json-numbers';
import type { DispatchDeps } from '../protocol/dispatch';
import { challengeHeader, type AuthSurface } from '../auth/protected-resource';

export { HTTP_ERROR_CODES, sendError, type ErrorBody, type HttpErrorCode } from '../transport/http-errors';

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
 * With `surface` (auth.issuers configured, issue 26) a 401's challenge also names the RFC 9728
 * resource_metadata URL (and error="invalid_token" for a refused token), and a 403
 * insufficient_scope carries error="insufficient_scope" with the required scopes, as on POST /mcp.
 */
export function httpOutcome(o: ToolOutcome, requestId: string, surface?: AuthSurface): HttpOutcome {
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
      if (info.http === 401 || (surface && o.code === 'insufficient_scope')) headers['WWW-Authenticate'] = surface ? challengeHeader(surface, o.code, 'interlock') : 'Bearer realm="interlock"';
      const body: ErrorBody = { error: info.status, code: info.code, message: o.message ?? info.message, request_id: requestId };
      if (typeof o.extra?.retry_after_ms === 'number') {
        body.retry_after_ms = o.extra.retry_after_ms;
        headers['Retry-After'] = retryAfterSeconds(o.extra.retry_after_ms);
      } else if (info.http === 429) {
        headers['Retry-After'] = '1';
      }
      return { status: info.http, headers, error: body };
    }
    case 'tool_error': {
      const info = toolErrorInfo(o.code);
      if (info.class === 'invalid_params') return { status: 400, headers: {}, error: { error: 'invalid_request', code: info.code, message: o.message ?? info.message, ...(o.reason ? { reason: o.reason } : {}), ...(o.details ?? {}), request_id: requestId } };
      return { status: 500, headers: {}, error: { error: 'internal_error', code: info.code, message: info.message, request_id: requestId } };
    }
  }
}

/** The Host/Origin guard (decision 14), refusing with 403 before anything else (src/transport/http-guard.ts). */
export { hostOriginGuard } from '../transport/http-guard';

/**
 * Parses a JSON request body (any method with a body): Content-Type must be application/json
 * (415 otherwise), the body valid JSON (400 invalid_json, read as UTF-8 whatever the charset
 * parameter: src/transport/body.ts) and at most `limit` bytes (413). An empty body is an empty object.
 * A body nesting arrays and objects deeper than MAX_JSON_DEPTH (64) levels is refused as
 * 400 invalid_json before JSON.parse (src/transport/json-depth.ts, red-team F3).
 */
export function jsonBody(limit = 1024 * 1024): RequestHandler[] {
  const parse = utf8BodyReader(limit) as unknown as RequestHandler;
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
      if (jsonNestsDeeperThan(raw)) return sendError(res, 'invalid_json', `The body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels`);
      try {
        req.body = parseClientJson(raw); // as JSON.parse, numbers it cannot carry exactly recorded (src/pipeline/json-numbers.ts)
      } catch {
        return sendError(res, 'invalid_json', 'The body is not valid JSON');
      }
      next();
    },
  ];
}

/** Error middleware for a router: body-parser failures in the shared shape; anything else 500 without detail. */
export { errorBodyHandler as routerErrorHandler } from '../transport/http-guard';

/**
 * The keyless budget of the client address for a route module (issue 10, Build 6): a request
 * without a Bearer token, or with one the resolver rejects by its form, spends one token; with `keyCheckedDownstream` false, so does one whose
 * token does not resolve; over the budget → 429 RateLimitedBody with Retry-After,
 * counted as an aggregated keyless refusal of `route`.
 */
export function keylessLimit(deps: DispatchDeps, route: string, opts: { keyCheckedDownstream: boolean }): RequestHandler {
  return (req, res, next) => {
    const r = keylessGate(deps.clientLimits, deps.keylessAudit, req, route, deps.identityResolver);
    if (r) return sendRateLimited(res, r.retryAfterMs, limitMessage(r));
    // A route whose handler checks (and charges) the key itself is done here; on any other route a
    // Bearer token spends the same budget unless it resolves (red-team F4).
    if (opts.keyCheckedDownstream) return next();
    void unverifiedKeyGate(deps.clientLimits, deps.keylessAudit, deps.identityResolver, bearerToken(req.headers.authorization) ?? undefined, clientAddressKey(req.socket.remoteAddress), route).then(
      (over) => (over ? sendRateLimited(res, over.retryAfterMs, limitMessage(over)) : next()),
      next,
    );
  };
}

/**
 * Sends `body` as `application/json; charset=utf-8` like Express's res.json, but serialised by
 * jsonText, so query rows keep their value mapping (json/jsonb verbatim; issue 23 item 3).
 */
export function sendJsonText(res: Response, body: unknown): void {
  res.type('application/json').send(jsonText(body));
}

/** True for a plain JSON object. */
export function isObject(v: unknown): v is Record<string, unknown> {
  return !!v && typeof v === 'object' && !Array.isArray(v);
}
