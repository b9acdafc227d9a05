/**
 * The gateway's HTTP application: POST /mcp (both dialects), 405 for other methods there, /healthz.
 * Requests for /mcp are served by the node:http handler of src/transport/mcp-endpoint.ts without
 * Express's router (issue 13); every other route is the Express app (express 5), to which the
 * operations and admin modules add theirs. Serve `GatewayApp.handler`, not `app`.
 * Contract: Transport ("The canonical MCP endpoint is POST /mcp"); decisions 13–16.
 *
 * Issue 10, Build 8: paths are exact and case-sensitive, so only `/mcp` is the MCP endpoint
 * (`/mcp/`, `/MCP` are unknown routes, 404 in the ErrorBody shape); the Host/Origin guard runs in
 * front of every route (POST /mcp answers it in the JSON-RPC shape through admission); every error
 * of every route has its documented shape in spec/openapi-v1.yaml.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import { corsOrigin, corsResponseHeaders, defaultOriginPolicy, type OriginPolicy } from './http-headers';
import { InflightRegistry, type DispatchDeps } from '../protocol/dispatch';
import { ToolRegistry } from '../tools/registry';
import type { IdentityResolver, ToolBinding } from '../tools/types';
import { MemoryAuditSink, type AuditSink } from '../audit/types';
import { errorBodyHandler, healthz, hostOriginGuard, MCP_PATH, unknownRoute } from './http-guard';
import { bodyReservation, clientAddressKey, ClientLimits, limitMessage, type ClientLimitSettings } from './client-limits';
import { MCP_QUERY_PREFIX, mcpHandler, sendMcpLimited, sendMcpRequestError, type Abortable } from './mcp-endpoint';
import { sendJsonText } from './channel';
import { rateLimitedBody, retryAfterSeconds } from './http-errors';
import { KeylessAuditAggregator } from './keyless-audit';
import { frontDoorRefuser, type FrontDoorRefuser } from './front-door';
import type { CapacityLimiter } from './capacity';
import type { RateLimiter } from '../pipeline/05-rate-limit';
import { mountProtectedResource, type AuthSurface } from '../auth/protected-resource';

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
  /** Operational logger; `listenGateway` (src/server.ts) creates the default one (src/observability/logger.ts). */
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
  /** Observer of a tool call refused at capacity, recording what `observe` would for its event (DispatchDeps.observeOverCapacity). */
  observeOverCapacity?: DispatchDeps['observeOverCapacity'];
  /**
   * Per-client-address and per-identity limits (issue 10, Build 6): the keyless budget, checked
   * before anything else on every request without a Bearer token, and the stream caps. When set,
   * keyless refusals are audited as aggregated events (src/transport/keyless-audit.ts). Default:
   * no client limits (tests); the governed gateway always sets them from config client_limits.
   */
  clientLimits?: ClientLimitSettings;
  /** The pipeline's tracked rate limiter (src/protocol/call-limits.ts), so every call with an identity is charged. */
  rateLimiter?: RateLimiter;
  /** Milliseconds a tool call's answer may wait unread before its socket is destroyed (DispatchDeps.answerWriteTimeoutMs). */
  answerWriteTimeoutMs?: number;
  /** Express `trust proxy` for the routes Express serves (config trust_proxy; issue 24, item 3): req.secure and req.ip believe X-Forwarded-* only from these proxies. Default false. */
  trustProxy?: boolean | number | string[];
  /** Serve GET /healthz on this app (default true; false when the operations endpoints have their own listener). */
  healthz?: boolean;
  /** Observer of every answered /mcp request: JSON-RPC method ('-' when unreadable), dialect, HTTP status, seconds. */
  observeRequest?: (method: string, dialect: string, status: number, seconds: number) => void;
  /** The OAuth resource-server surface (issue 26): serves the protected resource metadata and challenges 401s. */
  authSurface?: AuthSurface;
  /** Admission by capacity for governed tool calls (issue 29, src/transport/capacity.ts). Default: none. */
  capacity?: CapacityLimiter;
}

/** The app plus what graceful shutdown needs. */
export interface GatewayApp {
  /** The Express app: every route but the MCP endpoint's own requests (see `handler`). */
  app: Express;
  /**
   * The request listener to serve (`http.createServer(handler)`): requests for exactly `/mcp`
   * (with or without a query string) go straight to the MCP handler, everything else to `app`.
   */
  handler: (req: IncomingMessage, res: ServerResponse) => void;
  deps: DispatchDeps;
  /**
   * The MCP endpoint's refusal at capacity for a front door in front of node:http's parser
   * (src/transport/front-door.ts, installed by listenGateway on plain HTTP); null when admission by
   * capacity or the client limits are off.
   */
  frontDoor: FrontDoorRefuser | null;
  /** Aborts every in-flight tool call (reason "shutdown"). */
  abortAll(): void;
  /** Resolves when every audit write started so far has settled. */
  flushAudit(): Promise<void>;
}

/**
 * Builds the express app serving the MCP endpoint. The logger is passed in (the caller above
 * transport chooses it), so transport imports no observability module (issue 25, item 3).
 */
export function createGatewayApp(opts: GatewayAppOptions & { logger: Logger }): GatewayApp {
  const logger = opts.logger;
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
    observeOverCapacity: opts.observeOverCapacity,
    rateLimiter: opts.rateLimiter,
    answerWriteTimeoutMs: opts.answerWriteTimeoutMs,
    authSurface: opts.authSurface,
    capacity: opts.capacity,
  };
  if (opts.clientLimits) {
    deps.clientLimits = new ClientLimits(opts.clientLimits);
    deps.keylessAudit = new KeylessAuditAggregator(deps.audit, { logger, pending: deps.pendingAudits });
  }
  const controllers = new Set<Abortable>();
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  // Exact paths only: no case-insensitive or trailing-slash aliases of any route.
  app.set('case sensitive routing', true);
  app.set('strict routing', true);
  app.set('trust proxy', opts.trustProxy ?? false);
  // Route modules guard their own paths (so their answers carry their own headers, e.g. the
  // deprecated routes' Deprecation/Sunset/Link); this guard covers /healthz and every unknown path.
  for (const mount of opts.routes ?? []) mount(app, deps);
  if (opts.authSurface) mountProtectedResource(app, opts.authSurface, policy);
  app.use(hostOriginGuard(policy, [MCP_PATH]));
  if (opts.healthz !== false) app.get('/healthz', healthz);

  // POST /mcp (and every other method on exactly /mcp) is served by `serveMcp`, a plain node:http
  // handler (issue 13: no router, no middleware chain per call). `handler` sends the usual request
  // targets (`/mcp`, `/mcp?…`) straight to it; any other spelling Express still routes to /mcp
  // (e.g. an absolute-form target) reaches the same function through the route below.
  const serveMcp = mcpHandler(opts, deps, policy, controllers);
  app.all(MCP_PATH, (req: Request, res: Response) => serveMcp(req, res));

  app.use(unknownRoute);
  // Errors before an answer: JSON-RPC on /mcp (serveMcp answers its own; this covers anything that
  // escapes it), the ErrorBody shape elsewhere; never upstream text.
  const elsewhere = errorBodyHandler(logger);
  app.use((err: unknown, req: Request, res: Response, next: NextFunction) => {
    if (res.headersSent) return;
    if (req.path !== MCP_PATH) return elsewhere(err, req, res, next);
    sendMcpRequestError(res, err);
  });

  const bodyLimit = opts.bodyLimitBytes ?? 1024 * 1024;
  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    const url = req.url;
    const isMcp = url === MCP_PATH || (url !== undefined && url.startsWith(MCP_QUERY_PREFIX));
    const bodyRead = deps.clientLimits ? admitBody(deps.clientLimits, req, res, bodyLimit, isMcp ? policy : null) : null;
    if (bodyRead === false) return;
    // The MCP handler gives the body read back itself (once read, or the request answered unread): no listeners for it.
    if (isMcp) serveMcp(req, res, bodyRead ?? undefined);
    else {
      if (bodyRead) releaseWhenRead(req, res, bodyRead);
      app(req, res);
    }
  };

  return {
    app,
    handler,
    deps,
    frontDoor: frontDoorRefuser(deps, policy, opts.observeRequest, bodyLimit),
    abortAll() {
      for (const c of controllers) c.abort('shutdown');
    },
    async flushAudit() {
      await deps.keylessAudit?.flush();
      while (deps.pendingAudits.size) await Promise.allSettled([...deps.pendingAudits]);
    },
  };
}

/** Gives a body read back (`release`, idempotent) when the request's body has been read ('end') or the request or its answer closed first. */
function releaseWhenRead(req: IncomingMessage, res: ServerResponse, release: () => void): void {
  req.once('end', release);
  req.once('close', release);
  res.once('close', release);
}

/**
 * The body-read cap of every route (red-team F4), before a byte of the body is read: a request with
 * a body (bodyReservation) takes one of its client address's body reads and its reserved bytes of
 * the replica's total (ClientLimits.openBodyRead), given back when the body has been read or the
 * request is over. Refused: 429 rate_limited with Retry-After (POST /mcp: JSON-RPC -32602, id null,
 * data rate_limited, as the keyless budget; elsewhere the ErrorBody shape) and `Connection: close`,
 * so the unread body is not waited for. At /mcp (`mcpPolicy` given) the refusal carries the CORS
 * headers when the Origin is allow-listed, like every other answer there (issue 24 item 7), so a
 * browser client can read the 429 and its Retry-After. Returns false when it answered, null for a
 * request without a body (nothing taken), else the release (idempotent) that the caller must see
 * called once the body has been read or the request is over (releaseWhenRead, or the MCP handler's
 * `bodyRead`, issue 28 item 3).
 */
function admitBody(limits: ClientLimits, req: IncomingMessage, res: ServerResponse, bodyLimit: number, mcpPolicy: OriginPolicy | null): (() => void) | null | false {
  const bytes = bodyReservation(req.headers as Record<string, string | undefined>, bodyLimit);
  if (bytes === null) return null;
  const r = limits.openBodyRead(clientAddressKey(req.socket.remoteAddress), bytes);
  if (r.ok) return r.release;
  res.setHeader('Connection', 'close');
  if (mcpPolicy) {
    const origin = corsOrigin(req.headers.origin, mcpPolicy);
    if (origin !== null) {
      const cors = corsResponseHeaders(origin);
      for (const name in cors) res.setHeader(name, cors[name]);
    }
    sendMcpLimited(res, r);
  }
  else {
    const body = rateLimitedBody(r.retryAfterMs, limitMessage(r));
    sendJsonText(res, 429, JSON.stringify(body), { 'Retry-After': retryAfterSeconds(body.retry_after_ms!) });
  }
  return false;
}
