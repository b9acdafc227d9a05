/**
 * Middleware every route of the gateway shares (issue 10, Build 8): the Host/Origin guard in front
 * of every route (DNS-rebinding protection, decision 14) answered in the ErrorBody shape, the 404
 * for paths the gateway does not serve, and the last-resort error handler. Paths are matched
 * exactly (case-sensitive, no trailing-slash aliases), so `/mcp/` and `/MCP` are unknown routes.
 * POST /mcp itself answers Host and Origin failures in the JSON-RPC shape (src/transport/admission.ts),
 * so the guard leaves exactly that path to admission.
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Logger } from 'pino';
import { hostAllowed, originAllowed, type OriginPolicy } from './http-headers';
import { sendError } from './http-errors';

/** The canonical MCP endpoint path (contract: Transport). */
export const MCP_PATH = '/mcp';

/**
 * Refuses a foreign Host (403 host_not_allowed) or Origin (403 origin_not_allowed) on every path
 * except those in `except` (whose handlers answer these failures in their own shape).
 */
export function hostOriginGuard(policy: OriginPolicy, except: readonly string[] = []): RequestHandler {
  return (req, res, next) => {
    if (except.includes(req.path)) return next();
    const host = req.headers.host;
    if (!hostAllowed(host, policy)) return sendError(res, 'host_not_allowed', 'Forbidden: the Host header names a host this server does not serve');
    const origin = typeof req.headers.origin === 'string' ? req.headers.origin : undefined;
    if (!originAllowed(origin, host, req.protocol, policy)) return sendError(res, 'origin_not_allowed', 'Forbidden: the Origin is not allowed');
    next();
  };
}

/** GET /healthz: the process is alive (`{status: "ok"}`). */
export function healthz(_req: Request, res: Response): void {
  res.json({ status: 'ok' });
}

/** 404 unknown_route for every path no route serves. */
export function unknownRoute(_req: Request, res: Response): void {
  sendError(res, 'unknown_route', 'No such route (paths are exact and case-sensitive; the MCP endpoint is POST /mcp)');
}

/**
 * Last-resort error handler in the ErrorBody shape: body-reading failures as 413/415/400, anything
 * else 500 internal_error without detail (logged).
 */
export function errorBodyHandler(logger: Logger | undefined): (err: unknown, req: Request, res: Response, next: NextFunction) => void {
  return (err, req, res, _next) => {
    if (res.headersSent) {
      res.end();
      return;
    }
    const e = err as { type?: string; status?: number };
    if (e.type === 'entity.too.large') return sendError(res, 'body_too_large', 'The body is too large');
    if (e.type === 'encoding.unsupported') return sendError(res, 'unsupported_media_type', 'Unsupported body encoding');
    if (typeof e.status === 'number' && e.status >= 400 && e.status < 500) return sendError(res, 'invalid_body', 'The body could not be read');
    logger?.error({ err, path: req.path }, 'http route failed');
    sendError(res, 'internal_error', 'internal error');
  };
}
