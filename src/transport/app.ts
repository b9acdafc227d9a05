/**
 * The gateway's HTTP application (express 5): POST /mcp (both dialects), 405 for other methods
 * there, /healthz. Routes other than /mcp are added by the operations and admin modules.
 * Contract: Transport ("The canonical MCP endpoint is POST /mcp"); decisions 13–16.
 *
 * Issue 10, Build 8: paths are exact and case-sensitive, so only `/mcp` is the MCP endpoint
 * (`/mcp/`, `/MCP` are unknown routes, 404 in the ErrorBody shape); the Host/Origin guard runs in
 * front of every route (POST /mcp answers it in the JSON-RPC shape through admission); every error
 * of every route has its documented shape in spec/openapi-v1.yaml.
 */
import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import { admit } from './admission';
import { ResponseChannel } from './channel';
import { defaultOriginPolicy, type OriginPolicy } from './http-headers';
import { errorResponse } from './jsonrpc';
import { dispatch, InflightRegistry, newRequestId, type DispatchDeps } from '../protocol/dispatch';
import { ToolRegistry } from '../tools/registry';
import type { IdentityResolver, ToolBinding } from '../tools/types';
import { MemoryAuditSink, type AuditSink } from '../pipeline/audit-types';
import { bearerToken } from '../pipeline/01-identity';
import { createLogger } from '../observability/logger';
import { errorBodyHandler, healthz, hostOriginGuard, MCP_PATH, unknownRoute } from './http-guard';
import { ClientLimits, clientAddressKey, keylessGate, limitMessage, unverifiedKeyGate, type ClientLimitSettings } from './client-limits';
import { KeylessAuditAggregator } from './keyless-audit';
import type { RateLimiter } from '../pipeline/05-rate-limit';

/** Options of createGatewayApp. */
export interface GatewayAppOptions {
  /** The served tools, in tools/list order. */
  tools: ToolBinding[];
  /** Resolves Bearer API keys (pipeline step 1). */
  identityResolver: IdentityResolver;
  /** Audit sink for every tools/call (default: in memory). */
  audit?: AuditSink;
  /** Host/Origin guard (default: loopback host names, no extra origins). */
  originPolicy?: OriginPolicy;
  logger?: Logger;
  /** Optional `instructions` for initialize and server/discover. */
  instructions?: string;
  /** Largest accepted request body in bytes (default 1 MiB). */
  bodyLimitBytes?: number;
  /**
   * Extra route modules (operations endpoints, deprecated routes, the /v1 proxy, the admin API),
   * mounted before /mcp. Each receives the app and the dispatcher's dependencies, so it can run tool
   * calls through the same pipeline and audit (runToolCall).
   */
  routes?: Array<(app: Express, deps: DispatchDeps) => void>;
  /** Observer of every finished tool call (metrics). */
  observe?: DispatchDeps['observe'];
  /**
   * Per-client-address and per-identity limits (issue 10, Build 6): the keyless budget, checked
   * before anything else on every request without a Bearer token, and the stream caps. When set,
   * keyless refusals are audited as aggregated events (src/transport/keyless-audit.ts). Default:
   * no client limits (tests); the governed gateway always sets them from config client_limits.
   */
  clientLimits?: ClientLimitSettings;
  /** The pipeline's tracked rate limiter (src/protocol/call-limits.ts), so every call with an identity is charged. */
  rateLimiter?: RateLimiter;
  /** Serve GET /healthz on this app (default true; false when the operations endpoints have their own listener). */
  healthz?: boolean;
  /** Observer of every answered /mcp request: JSON-RPC method ('-' when unreadable), dialect, HTTP status, seconds. */
  observeRequest?: (method: string, dialect: string, status: number, seconds: number) => void;
}

/** The app plus what graceful shutdown needs. */
export interface GatewayApp {
  app: Express;
  deps: DispatchDeps;
  /** Aborts every in-flight tool call (reason "shutdown"). */
  abortAll(): void;
  /** Resolves when every audit write started so far has settled. */
  flushAudit(): Promise<void>;
}

/** Builds the express app serving the MCP endpoint. */
export function createGatewayApp(opts: GatewayAppOptions): GatewayApp {
  const logger = opts.logger ?? createLogger();
  const policy = opts.originPolicy ?? defaultOriginPolicy();
  const deps: DispatchDeps = {
    tools: new ToolRegistry(opts.tools),
    identityResolver: opts.identityResolver,
    audit: opts.audit ?? new MemoryAuditSink(),
    logger,
    instructions: opts.instructions,
    inflight: new InflightRegistry(),
    pendingAudits: new Set(),
    observe: opts.observe,
    rateLimiter: opts.rateLimiter,
  };
  if (opts.clientLimits) {
    deps.clientLimits = new ClientLimits(opts.clientLimits);
    deps.keylessAudit = new KeylessAuditAggregator(deps.audit, { logger, pending: deps.pendingAudits });
  }
  const controllers = new Set<AbortController>();
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  // Exact paths only: no case-insensitive or trailing-slash aliases of any route.
  app.set('case sensitive routing', true);
  app.set('strict routing', true);
  // Route modules guard their own paths (so their answers carry their own headers, e.g. the
  // deprecated routes' Deprecation/Sunset/Link); this guard covers /healthz and every unknown path.
  for (const mount of opts.routes ?? []) mount(app, deps);
  app.use(hostOriginGuard(policy, [MCP_PATH]));
  if (opts.healthz !== false) app.get('/healthz', healthz);

  const bodyParser = express.text({ type: () => true, limit: opts.bodyLimitBytes ?? 1024 * 1024 });
  // The keyless budget of the client address, before the body is even read (issue 10, Build 6).
  const keyless = (req: Request, res: Response, next: NextFunction) => {
    const r = keylessGate(deps.clientLimits, deps.keylessAudit, req, 'mcp');
    if (!r) return next();
    opts.observeRequest?.('-', '-', 429, 0);
    const message = limitMessage(r);
    res.setHeader('Retry-After', String(Math.max(1, Math.ceil(r.retryAfterMs / 1000))));
    res.status(429).json(errorResponse(null, { code: -32602, message, data: { status: 'rate_limited', code: 'rate_limited', message, retry_after_ms: r.retryAfterMs } }));
  };
  app.all(MCP_PATH, keyless, bodyParser, async (req: Request, res: Response) => {
    const requestId = newRequestId();
    res.setHeader('X-Request-Id', requestId);
    const headers: Record<string, string | undefined> = {};
    for (const [k, v] of Object.entries(req.headers)) headers[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : v;
    const verdict = admit({ method: req.method, headers, body: typeof req.body === 'string' ? req.body : undefined, scheme: req.protocol }, policy);
    const ch = new ResponseChannel(res);
    if (opts.observeRequest) {
      const t0 = process.hrtime.bigint();
      const method = verdict.kind === 'admitted' ? verdict.message.method : '-';
      const dialect = verdict.kind === 'admitted' ? verdict.dialect : '-';
      res.on('finish', () => opts.observeRequest!(method, dialect, res.statusCode, Number(process.hrtime.bigint() - t0) / 1e9));
    }
    if (verdict.kind === 'reply') {
      if (verdict.body) ch.final(verdict.status, verdict.body, verdict.headers ?? {});
      else {
        if (verdict.headers) res.set(verdict.headers);
        ch.empty(verdict.status);
      }
      return;
    }
    const controller = new AbortController();
    controllers.add(controller);
    res.on('close', () => {
      if (!res.writableFinished) controller.abort('client closed the stream');
      controllers.delete(controller);
    });
    const apiKey = bearerToken(headers.authorization);
    if (verdict.message.type !== 'request' || verdict.message.method !== 'tools/call') {
      const over = await unverifiedKeyGate(deps.clientLimits, deps.keylessAudit, (k) => deps.identityResolver.resolve(k), apiKey ?? undefined, clientAddressKey(req.socket.remoteAddress), 'mcp');
      if (over) {
        controllers.delete(controller);
        const message = limitMessage(over);
        res.setHeader('Retry-After', String(Math.max(1, Math.ceil(over.retryAfterMs / 1000))));
        res.status(429).json(errorResponse(null, { code: -32602, message, data: { status: 'rate_limited', code: 'rate_limited', message, retry_after_ms: over.retryAfterMs } }));
        return;
      }
    }
    try {
      await dispatch(verdict, { requestId, apiKey, clientAddress: clientAddressKey(req.socket.remoteAddress), signal: controller.signal, abort: (r) => controller.abort(r) }, ch, deps);
    } catch (err) {
      logger.error({ requestId, err }, 'dispatch failed');
      const id = verdict.message.type === 'request' ? verdict.message.id : null;
      if (id !== null) ch.final(200, errorResponse(id, { code: -32603, message: 'Internal error' }));
      else ch.empty(202);
    }
  });

  app.use(unknownRoute);
  // Body-parser and other errors before dispatch: JSON-RPC on /mcp, the ErrorBody shape elsewhere; never upstream text.
  const elsewhere = errorBodyHandler(logger);
  app.use((err: unknown, req: Request, res: Response, next: NextFunction) => {
    const e = err as { status?: number; type?: string };
    if (res.headersSent) return;
    if (req.path !== MCP_PATH) return elsewhere(err, req, res, next);
    const status = e.type === 'entity.too.large' ? 413 : e.type === 'charset.unsupported' || e.type === 'encoding.unsupported' ? 415 : 400;
    res.status(status).json(errorResponse(null, { code: -32600, message: status === 413 ? 'Invalid request: body too large' : 'Invalid request' }));
  });

  return {
    app,
    deps,
    abortAll() {
      for (const c of controllers) c.abort('shutdown');
    },
    async flushAudit() {
      await deps.keylessAudit?.flush();
      while (deps.pendingAudits.size) await Promise.allSettled([...deps.pendingAudits]);
    },
  };
}
