/**
 * The deprecated custom routes of InterLock's earlier integration surface (contract: Legacy
 * Compatibility; issue 6, Build 2). Removed no earlier than 1.2.0; every response carries the
 * Deprecation, Sunset and Link headers of src/http/deprecation.ts.
 *
 *  - GET|POST /mcp/tools/list → `{tools: [...]}`, the catalogue POST /mcp serves.
 *  - POST /mcp/tools/call `{name, arguments}` → the tool result `{content, structuredContent?,
 *    isError?}`. A refusal answers with the refusal's HTTP status and adds `{error, code, message}`;
 *    a queued write answers 202 and adds `{error: "approval_required", approval_id, approval_state}`
 *    — the same fields, statuses and headers as the /v1 proxy (src/http/common.ts httpOutcome).
 *  - GET /mcp/sse: the handshake-era HTTP+SSE transport. The GET opens a text/event-stream and
 *    first sends an `endpoint` event naming `/mcp/sse/messages?stream=<id>` (a random 128-bit id
 *    per stream). JSON-RPC messages POSTed there are accepted with 202 and answered on that
 *    stream as `message` events: initialize, ping, tools/list, tools/call, server/discover and the
 *    notifications, exactly as in the handshake dialect of POST /mcp. When the GET carried an
 *    Authorization header, POSTs to its stream must carry the same one (else 404 unknown_stream).
 *    Closing the stream cancels its in-flight tool calls.
 *    REPLICAS: a stream lives in the memory of the replica that opened it, so the GET and every
 *    POST of one stream must reach the same replica (sticky routing on the stream id, or a single
 *    replica for these clients); a POST that reaches another replica is answered 404
 *    unknown_stream. POST /mcp has no such constraint.
 *
 * Every tool call goes through runToolCall (identity, argument validation, pipeline, audit), so the
 * answers are those of POST /mcp; the audit records details.route "mcp-tools-call" or "mcp-sse".
 */
import { createHash, randomBytes } from 'node:crypto';
import express, { type Express, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import protocol from '../../spec/protocol-v1.json';
import { newRequestId, runToolCall, unknownToolError, type DispatchDeps } from '../protocol/dispatch';
import { cacheable, complete, discoverResult, initializeResult, negotiateVersion } from '../protocol/envelopes';
import { renderOutcome, serializeMessage } from '../protocol/tool-results';
import { bearerToken } from '../pipeline/01-identity';
import { classifyMessage, errorResponse, resultResponse, type JsonRpcId } from '../transport/jsonrpc';
import { defaultOriginPolicy, type OriginPolicy } from '../transport/http-headers';
import { hostOriginGuard, httpOutcome, isObject, jsonBody, keylessLimit, routerErrorHandler, sendError, sendJsonText } from './common';
import { chargedUpFront, clientAddressKey, limitMessage, unverifiedKeyGate } from '../transport/client-limits';
import { sendRateLimited } from '../transport/http-errors';
import { armWriteDeadline, DEFAULT_ANSWER_WRITE_TIMEOUT_MS, whenResponseDone } from '../transport/channel';
import { setDeprecationHeaders } from './deprecation';
import { cutText } from '../errors/cut-text';

/** Options of mountLegacyRoutes. */
export interface LegacyRoutesOptions {
  /** Host/Origin guard (default: loopback names only, like POST /mcp's default). */
  originPolicy?: OriginPolicy;
  logger?: Logger;
  /** Interval of SSE keep-alive comments in ms (default 15 000). */
  heartbeatMs?: number;
  /** Most SSE streams open at once on this replica (default 1000); more are refused with 503. */
  maxStreams?: number;
}

/** The protocol version of /mcp/tools/call tool calls (the latest handshake version). */
export const LEGACY_CALL_VERSION = protocol.versions.initializeFallback;

/** The tool-result part of a rendered handshake outcome: content, structuredContent, isError. */
function toolResultFields(rendered: ReturnType<typeof renderOutcome>): Record<string, unknown> {
  if (rendered.kind !== 'result') return { content: [{ type: 'text', text: rendered.error.message }], isError: true };
  const r = rendered.result;
  const out: Record<string, unknown> = { content: r.content };
  if (r.structuredContent !== undefined) out.structuredContent = r.structuredContent;
  if (r.isError !== undefined) out.isError = r.isError;
  return out;
}

/** One open /mcp/sse stream. */
interface SseStream {
  id: string;
  res: Response;
  /** SHA-256 of the Authorization header the GET carried, or null when it carried none. */
  credential: string | null;
  /** Version negotiated by initialize on this stream. */
  version: string | null;
  /** In-flight tool calls by JSON-RPC id (for notifications/cancelled and stream close). */
  inflight: Map<string, AbortController>;
  heartbeat: NodeJS.Timeout;
}

function credentialOf(req: Request): string | null {
  const h = req.headers.authorization;
  return h ? createHash('sha256').update(h).digest('hex') : null;
}

function idKey(id: JsonRpcId): string {
  return `${typeof id}:${String(id)}`;
}

/**
 * Mounts /mcp/tools/list, /mcp/tools/call, /mcp/sse and /mcp/sse/messages on `app` (before /mcp).
 * `deps` are the dispatcher's dependencies (GatewayAppOptions.routes hands them over).
 */
export function mountLegacyRoutes(app: Express, deps: DispatchDeps, opts: LegacyRoutesOptions = {}): void {
  const logger = opts.logger ?? deps.logger;
  const router = express.Router({ caseSensitive: true, strict: true });
  const streams = new Map<string, SseStream>();
  const maxStreams = opts.maxStreams ?? 1000;
  const heartbeatMs = opts.heartbeatMs ?? 15_000;

  router.use(['/mcp/tools/list', '/mcp/tools/call', '/mcp/sse', '/mcp/sse/messages'], (_req, res, next) => {
    setDeprecationHeaders(res);
    next();
  });
  router.use(['/mcp/tools/list', '/mcp/tools/call', '/mcp/sse', '/mcp/sse/messages'], hostOriginGuard(opts.originPolicy ?? defaultOriginPolicy()));
  // Tool calls and the SSE stream check (and charge) keys themselves; the catalogue route checks none.
  router.use('/mcp/tools/list', keylessLimit(deps, 'mcp-legacy', { keyCheckedDownstream: false }));
  router.use(['/mcp/tools/call', '/mcp/sse', '/mcp/sse/messages'], keylessLimit(deps, 'mcp-legacy', { keyCheckedDownstream: true }));

  // ---- /mcp/tools/list ------------------------------------------------------------------------
  const list = (_req: Request, res: Response) => {
    res.json({ tools: deps.tools.list() });
  };
  router.get('/mcp/tools/list', list);
  router.post('/mcp/tools/list', ...jsonBody(), list);

  // ---- /mcp/tools/call ------------------------------------------------------------------------
  router.post('/mcp/tools/call', ...jsonBody(), async (req: Request, res: Response) => {
    const requestId = newRequestId();
    res.setHeader('X-Request-Id', requestId);
    const body = req.body as unknown;
    if (!isObject(body) || typeof body.name !== 'string') return sendError(res, 'invalid_body', 'The body must be a JSON object {name, arguments}', { requestId });
    const args = body.arguments === undefined ? {} : body.arguments;
    if (!isObject(args)) return sendError(res, 'invalid_body', 'arguments must be a JSON object', { requestId });
    const controller = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) controller.abort('client closed the connection');
    });
    const ran = await runToolCall(deps, {
      name: body.name,
      args,
      apiKey: bearerToken(req.headers.authorization),
      clientAddress: clientAddressKey(req.socket.remoteAddress),
      requestId,
      signal: controller.signal,
      dialect: 'handshake',
      protocolVersion: LEGACY_CALL_VERSION,
      route: 'mcp-tools-call',
      // The stream slot is held until the answer has left or the socket closed (red-team F1).
      holdSlot: (release) => whenResponseDone(res, release),
    });
    if (!ran) return sendError(res, 'unknown_tool', `Unknown tool: ${cutText(body.name, 128)}`, { requestId });
    const fields = toolResultFields(renderOutcome(ran.outcome, 'handshake', LEGACY_CALL_VERSION, requestId));
    const http = httpOutcome(ran.outcome, requestId, deps.authSurface);
    sendJsonText(res.status(http.status).set(http.headers), http.error ? { ...fields, ...http.error } : fields);
    armWriteDeadline(res, deps.answerWriteTimeoutMs ?? DEFAULT_ANSWER_WRITE_TIMEOUT_MS);
  });

  // ---- /mcp/sse (handshake-era HTTP+SSE transport) ---------------------------------------------
  router.get('/mcp/sse', async (req: Request, res: Response) => {
    if (streams.size >= maxStreams) return sendError(res, 'unavailable', 'Too many open SSE streams on this replica; use POST /mcp', { headers: { 'Retry-After': '5' } });
    // Stream caps per client address and per identity (issue 10, Build 6). A key that does not
    // resolve counts as keyless and spends the address's keyless budget.
    let release = () => undefined as void;
    if (deps.clientLimits) {
      const address = clientAddressKey(req.socket.remoteAddress);
      const token = bearerToken(req.headers.authorization);
      const identity = token ? await deps.identityResolver.resolve(token).catch(() => null) : null;
      if (token && !identity && !chargedUpFront(deps.identityResolver, token)) {
        const t = deps.clientLimits.takeKeyless(address);
        if (!t.ok) {
          deps.keylessAudit?.note(address, { reason: 'rate_limited', tool: '-', route: 'mcp-legacy' });
          return sendRateLimited(res, t.retryAfterMs, limitMessage(t));
        }
      }
      const slot = deps.clientLimits.openStream(address, identity?.id ?? null);
      if (!slot.ok) return sendRateLimited(res, slot.retryAfterMs, limitMessage(slot));
      if (res.destroyed) return slot.release();
      release = slot.release;
    }
    const id = randomBytes(16).toString('base64url');
    res.writeHead(200, {
      'Content-Type': 'text/event-stream',
      'Cache-Control': 'no-cache, no-transform',
      'X-Accel-Buffering': 'no',
      Connection: 'keep-alive',
    });
    res.flushHeaders();
    const stream: SseStream = {
      id,
      res,
      credential: credentialOf(req),
      version: null,
      inflight: new Map(),
      heartbeat: setInterval(() => {
        if (!res.writableEnded) res.write(': keep-alive\n\n');
      }, heartbeatMs),
    };
    stream.heartbeat.unref();
    streams.set(id, stream);
    res.write(`event: endpoint\ndata: /mcp/sse/messages?stream=${id}\n\n`);
    res.on('close', () => {
      release();
      clearInterval(stream.heartbeat);
      streams.delete(id);
      for (const c of stream.inflight.values()) c.abort('client closed the stream');
      stream.inflight.clear();
    });
  });

  router.post('/mcp/sse/messages', ...jsonBody(), async (req: Request, res: Response) => {
    const streamId = typeof req.query.stream === 'string' ? req.query.stream : '';
    const stream = streams.get(streamId);
    // A stream bound to a credential only accepts messages carrying the same one.
    if (!stream || (stream.credential !== null && stream.credential !== credentialOf(req))) {
      return sendError(res, 'unknown_stream', 'No open SSE stream has this id on this replica (the stream and its messages must reach the same replica)');
    }
    const body = req.body as unknown;
    if (Array.isArray(body)) return sendError(res, 'invalid_body', 'Batches are not accepted; send one JSON-RPC message per request');
    const msg = isObject(body) ? classifyMessage(body) : null;
    if (!msg) return sendError(res, 'invalid_body', 'Not a JSON-RPC 2.0 request, notification or response');
    // Anything but tools/call (which checks and charges the key itself) spends the address's keyless
    // budget unless its token resolves, as on POST /mcp (red-team F4).
    if (!(msg.type === 'request' && msg.method === 'tools/call')) {
      const over = await unverifiedKeyGate(deps.clientLimits, deps.keylessAudit, deps.identityResolver, bearerToken(req.headers.authorization) ?? undefined, clientAddressKey(req.socket.remoteAddress), 'mcp-legacy');
      if (over) return sendRateLimited(res, over.retryAfterMs, limitMessage(over));
    }
    res.status(202).end();
    if (msg.type === 'response') return;
    if (msg.type === 'notification') {
      if (msg.method === 'notifications/cancelled') {
        const rid = msg.params?.requestId;
        if (typeof rid === 'string' || typeof rid === 'number') stream.inflight.get(idKey(rid))?.abort('notifications/cancelled');
      }
      return;
    }
    void handleRequest(stream, msg.id, msg.method, msg.params ?? {}, bearerToken(req.headers.authorization), clientAddressKey(req.socket.remoteAddress)).catch((err: unknown) => {
      logger.error({ err }, 'SSE message failed');
      send(stream, errorResponse(msg.id, { code: -32603, message: 'Internal error' }));
    });
  });

  for (const path of ['/mcp/tools/list', '/mcp/tools/call', '/mcp/sse', '/mcp/sse/messages']) {
    const allow = path === '/mcp/tools/list' ? 'GET, POST' : path === '/mcp/sse' ? 'GET' : 'POST';
    router.all(path, (_req, res) => sendError(res, 'method_not_allowed', `Method not allowed: ${path} accepts ${allow}`, { headers: { Allow: allow } }));
  }
  router.use(routerErrorHandler(logger));
  app.use(router);

  function send(stream: SseStream, message: unknown): void {
    if (stream.res.writableEnded || stream.res.destroyed) return;
    stream.res.write(`event: message\ndata: ${serializeMessage(message)}\n\n`);
  }

  async function handleRequest(stream: SseStream, id: JsonRpcId, method: string, params: Record<string, unknown>, apiKey: string | null, clientAddress: string): Promise<void> {
    switch (method) {
      case 'initialize': {
        const ok = typeof params.protocolVersion === 'string' && isObject(params.capabilities) && isObject(params.clientInfo);
        if (!ok) return send(stream, errorResponse(id, { code: -32602, message: 'Invalid params: initialize needs protocolVersion (string), capabilities (object) and clientInfo (object)' }));
        stream.version = negotiateVersion(params.protocolVersion);
        return send(stream, resultResponse(id, initializeResult(params.protocolVersion, deps.instructions)));
      }
      case 'ping':
        return send(stream, resultResponse(id, {}));
      case 'server/discover':
        return send(stream, resultResponse(id, discoverResult(deps.instructions)));
      case 'tools/list':
        return send(stream, resultResponse(id, complete(cacheable('tools/list', { tools: deps.tools.list() }))));
      case 'tools/call':
        return callTool(stream, id, params, apiKey, clientAddress);
      default:
        return send(stream, errorResponse(id, { code: -32601, message: `Method not found: ${cutText(method, 100)}` }));
    }
  }

  async function callTool(stream: SseStream, id: JsonRpcId, params: Record<string, unknown>, apiKey: string | null, clientAddress: string): Promise<void> {
    const name = params.name;
    if (typeof name !== 'string') return send(stream, errorResponse(id, { code: -32602, message: 'Invalid params: params.name must be a string', data: { code: 'unknown_tool', message: 'params.name must be a string' } }));
    if (!deps.tools.get(name)) return send(stream, errorResponse(id, unknownToolError(name)));
    const args = params.arguments === undefined ? {} : params.arguments;
    if (!isObject(args)) return send(stream, errorResponse(id, { code: -32602, message: 'Invalid params: params.arguments must be an object', data: { code: 'invalid_arguments', message: 'params.arguments must be an object' } }));
    const meta = isObject(params._meta) ? params._meta : {};
    const progressToken = typeof meta.progressToken === 'string' || typeof meta.progressToken === 'number' ? meta.progressToken : undefined;
    const version = stream.version ?? protocol.versions.assumedWhenHeaderAbsent;
    const requestId = newRequestId();
    const controller = new AbortController();
    stream.inflight.set(idKey(id), controller);
    try {
      const ran = await runToolCall(deps, {
        name,
        args,
        apiKey,
        clientAddress,
        requestId,
        signal: controller.signal,
        dialect: 'handshake',
        protocolVersion: version,
        progressToken,
        notify: (m, p) => send(stream, { jsonrpc: '2.0', method: m, params: p }),
        route: 'mcp-sse',
      });
      const rendered = renderOutcome(ran!.outcome, 'handshake', version, requestId);
      send(stream, rendered.kind === 'result' ? resultResponse(id, rendered.result) : errorResponse(id, rendered.error));
    } finally {
      stream.inflight.delete(idKey(id));
    }
  }
}
