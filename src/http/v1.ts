/**
 * The HTTP query proxy under /v1 (issue 6, Build 3), for callers that do not speak MCP. Bearer
 * agent API keys, as on POST /mcp; every route is one governed tool call through runToolCall
 * (identity, argument validation, source, authorization, policy, rate limit, write safety,
 * execution, redaction, audit with details.route "v1"), so its answers are those of POST /mcp:
 *
 *   POST /v1/sources/{id}/query {sql, params?, max_rows?}  interlock_query
 *   GET  /v1/sources                                      interlock_list_sources
 *   GET  /v1/access[?source_id=]                          interlock_describe_access
 *   GET  /v1/sources/{id}/describe                        interlock_describe_source
 *   POST /v1/sources/{id}/discover {query, …}             interlock_discover
 *   GET  /v1/assets/{asset_id}/related[?limit=]           interlock_related_documents
 *
 * 200 carries the tool's structuredContent (for a query `{rows, row_count, truncated, cached,
 * masked_columns?}`); 202 a queued write `{error: "approval_required", code, message,
 * approval_id, approval_state}`; refusals their HTTP status (401/403/404/429/503) with `{error,
 * code, message}` from spec/errors-v1.json (401 with WWW-Authenticate, naming the protected resource
 * metadata when auth.issuers is configured; 429 with Retry-After);
 * invalid arguments or SQL 400; the opaque failure 500. spec/openapi-v1.yaml describes all of it.
 */
import express, { type Express, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import { newRequestId, runToolCall, type DispatchDeps } from '../protocol/dispatch';
import { bearerToken } from '../pipeline/01-identity';
import { defaultOriginPolicy, type OriginPolicy } from '../transport/http-headers';
import { hostOriginGuard, httpOutcome, isObject, jsonBody, keylessLimit, routerErrorHandler, sendError, sendJsonText } from './common';
import { clientAddressKey } from '../transport/client-limits';
import { armWriteDeadline, DEFAULT_ANSWER_WRITE_TIMEOUT_MS, whenResponseDone } from '../transport/channel';

/** Options of mountV1. */
export interface V1Options {
  /** Host/Origin guard (default: loopback names only). */
  originPolicy?: OriginPolicy;
  logger?: Logger;
}

/** The MCP protocol version recorded for /v1 calls (they are rendered like the latest handshake version). */
export const V1_PROTOCOL_VERSION = '2025-11-25';

/** Mounts the /v1 routes on `app`. */
export function mountV1(app: Express, deps: DispatchDeps, opts: V1Options = {}): void {
  const router = express.Router({ caseSensitive: true, strict: true });
  router.use('/v1', hostOriginGuard(opts.originPolicy ?? defaultOriginPolicy()));
  router.use('/v1', keylessLimit(deps, 'v1', { keyCheckedDownstream: true }));

  /** Runs one tool call and answers it. */
  const call = async (req: Request, res: Response, tool: string, args: Record<string, unknown>) => {
    const requestId = newRequestId();
    res.setHeader('X-Request-Id', requestId);
    const controller = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) controller.abort('client closed the connection');
    });
    const ran = await runToolCall(deps, {
      name: tool,
      args,
      apiKey: bearerToken(req.headers.authorization),
      clientAddress: clientAddressKey(req.socket.remoteAddress),
      requestId,
      signal: controller.signal,
      dialect: 'handshake',
      protocolVersion: V1_PROTOCOL_VERSION,
      route: 'v1',
      // The stream slot is held until the answer has left or the socket closed (red-team F1).
      holdSlot: (release) => whenResponseDone(res, release),
    });
    if (!ran) return sendError(res, 'unknown_route', 'This operation is not served by this gateway', { requestId });
    const http = httpOutcome(ran.outcome, requestId, deps.authSurface);
    res.status(http.status).set(http.headers);
    const o = ran.outcome;
    sendJsonText(res, http.error ? http.error : o.kind === 'result' ? (o.structuredContent ?? {}) : {});
    armWriteDeadline(res, deps.answerWriteTimeoutMs ?? DEFAULT_ANSWER_WRITE_TIMEOUT_MS);
  };

  router.post('/v1/sources/:id/query', ...jsonBody(), async (req: Request, res: Response) => {
    const body = req.body as unknown;
    if (!isObject(body)) return sendError(res, 'invalid_body', 'The body must be a JSON object {sql, params?, max_rows?}');
    const args: Record<string, unknown> = { ...body, source_id: req.params.id };
    await call(req, res, 'interlock_query', args);
  });
  router.get('/v1/sources', (req, res) => call(req, res, 'interlock_list_sources', {}));
  router.get('/v1/access', (req, res) => {
    const sid = req.query.source_id;
    if (sid !== undefined && typeof sid !== 'string') return sendError(res, 'invalid_parameter', 'source_id must be given once');
    return call(req, res, 'interlock_describe_access', sid === undefined ? {} : { source_id: sid });
  });
  router.get('/v1/sources/:id/describe', (req, res) => call(req, res, 'interlock_describe_source', { source_id: req.params.id }));
  router.post('/v1/sources/:id/discover', ...jsonBody(), async (req: Request, res: Response) => {
    const body = req.body as unknown;
    if (!isObject(body)) return sendError(res, 'invalid_body', 'The body must be a JSON object {query, …}');
    await call(req, res, 'interlock_discover', { ...body, source_id: req.params.id });
  });
  router.get('/v1/assets/:asset_id/related', (req, res) => {
    const args: Record<string, unknown> = { asset_id: req.params.asset_id };
    const limit = req.query.limit;
    if (limit !== undefined) {
      if (typeof limit !== 'string' || !/^[0-9]{1,4}$/.test(limit)) return sendError(res, 'invalid_parameter', 'limit must be a whole number');
      args.limit = Number(limit);
    }
    return call(req, res, 'interlock_related_documents', args);
  });

  const allow: Array<[string, string]> = [
    ['/v1/sources/:id/query', 'POST'],
    ['/v1/sources', 'GET'],
    ['/v1/access', 'GET'],
    ['/v1/sources/:id/describe', 'GET'],
    ['/v1/sources/:id/discover', 'POST'],
    ['/v1/assets/:asset_id/related', 'GET'],
  ];
  for (const [path, methods] of allow) {
    router.all(path, (_req, res) => sendError(res, 'method_not_allowed', `Method not allowed: this route accepts ${methods}`, { headers: { Allow: methods } }));
  }
  router.use('/v1', (_req, res) => sendError(res, 'unknown_route', 'No such /v1 route'));
  router.use(routerErrorHandler(opts.logger ?? deps.logger));
  app.use(router);
}
