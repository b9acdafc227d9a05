/**
 * The MCP endpoint as a plain `node:http` request handler (issue 13, "Lean request handling"):
 * every request for exactly `/mcp` goes through the keyless gate, the body read, admission
 * (src/transport/admission.ts), the unverified-key gate and the dispatcher, with no Express router
 * or middleware chain in between. Clients see the same bytes as when Express served the route:
 *
 *  - an `access_token` query parameter: 400 JSON-RPC -32600 (tokens only in the Authorization header);
 *  - keyless budget exhausted: 429 JSON-RPC -32602 `rate_limited`, Retry-After (whole seconds);
 *  - body errors (body-parser's reader, src/transport/body.ts; the bytes are read as UTF-8 whatever
 *    the charset parameter): 413 when over the limit, 415 for an unsupported Content-Encoding
 *    (gzip, deflate, br are inflated), 400 otherwise,
 *    each `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,…}}`, no X-Request-Id;
 *  - a modern tools/call that admission by capacity refuses from its headers alone (its token seen
 *    before): 429 rate_limited decided before the body is parsed (src/transport/early-refusal.ts);
 *  - then X-Request-Id on every answer, admission's replies (403, 405 with Allow, 406, 415, 400…),
 *    the dispatcher's answers, and 429 for a Bearer token that resolves to nobody once the
 *    address's keyless budget is spent.
 *
 * A tools/call is aborted when its client goes away before the answer is complete; the
 * observeRequest hook sees every answered request that passed the keyless gate and the body read
 * (method, dialect, status, seconds since admission; 0 for a refusal at capacity decided after the
 * body read, observed as soon as it is written).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { CallAbort } from './call-abort';
import { releasingBodyReader } from './body';
import { admit, type Admitted, type Reply } from './admission';
import { corsOrigin, corsResponseHeaders, type OriginPolicy } from './http-headers';
import { ResponseChannel, sendJsonText } from './channel';
import { errorResponse } from './jsonrpc';
import { answerKnownOverCapacity, dispatch, newRequestId, type DispatchDeps, type HttpContext } from '../protocol/dispatch';
import { bearerToken } from '../pipeline/01-identity';
import { clientAddressKey, keylessGate, limitMessage, unverifiedKeyGate, type LimitRefusal } from './client-limits';
import { MCP_PATH } from './http-guard';
import { retryAfterSeconds } from './http-errors';
import { earlyCall, earlyCapacityRefusal } from './early-refusal';

/** Request targets with this prefix are the MCP endpoint with a query string (`/mcp?…`). */
export const MCP_QUERY_PREFIX = `${MCP_PATH}?`;

/** What the MCP handler takes from GatewayAppOptions. */
export interface McpEndpointOptions {
  /** Largest accepted request body in bytes (default 1 MiB). */
  bodyLimitBytes?: number;
  /** Observer of every answered request: JSON-RPC method ('-' when unreadable), dialect, HTTP status, seconds. */
  observeRequest?: (method: string, dialect: string, status: number, seconds: number) => void;
}

/** A request after the body reader: `body` is the decoded text, or undefined for no body. */
type ReadRequest = IncomingMessage & { body?: unknown };

// A signal that never aborts, for the methods that run nothing abortable (all but tools/call).
const NEVER = new AbortController().signal;
const noAbort = (): void => undefined;
const DISPATCHED: Promise<void> = Promise.resolve();

/**
 * Answers a request error before admission (the body could not be read, or something escaped the
 * handler): 413 for `entity.too.large`, 415 for an unsupported content encoding, else
 * 400; always JSON-RPC -32600 with id null. Does nothing once headers were sent.
 */
export function sendMcpRequestError(res: ServerResponse, err: unknown): void {
  if (res.headersSent) return;
  const type = (err as { type?: unknown } | null)?.type;
  const status = type === 'entity.too.large' ? 413 : type === 'encoding.unsupported' ? 415 : 400;
  sendJsonText(res, status, JSON.stringify(errorResponse(null, { code: -32600, message: status === 413 ? 'Invalid request: body too large' : 'Invalid request' })));
}

/** 429 for a client-limit refusal at the MCP endpoint: JSON-RPC -32602, id null, data `{status, code: "rate_limited", message, retry_after_ms}`, Retry-After in whole seconds. */
export function sendMcpLimited(res: ServerResponse, r: LimitRefusal): void {
  const message = limitMessage(r);
  const body = errorResponse(null, { code: -32602, message, data: { status: 'rate_limited', code: 'rate_limited', message, retry_after_ms: r.retryAfterMs } });
  sendJsonText(res, 429, JSON.stringify(body), { 'Retry-After': retryAfterSeconds(r.retryAfterMs) });
}

const TOKEN_IN_QUERY = JSON.stringify(errorResponse(null, { code: -32600, message: 'Invalid request: send the access token in the Authorization header, never in the URL' }));

/** True when the request target's query string has an `access_token` parameter (RFC 6750 section 2.3, refused here). */
export function carriesTokenInQuery(url: string | undefined): boolean {
  const q = url ? url.indexOf('?') : -1;
  return q >= 0 && new URLSearchParams(url!.slice(q + 1)).has('access_token');
}

/** What graceful shutdown aborts: an in-flight call's cancellation. */
export interface Abortable {
  abort(reason?: unknown): void;
}

/**
 * Builds the handler of the MCP endpoint. `controllers` receives the abort controller of every
 * in-flight tools/call (graceful shutdown aborts them); the handler never throws and never rejects.
 * The handler's `bodyRead`, when given (the body-read cap's release, src/transport/app.ts;
 * idempotent), is called once the body has been read, or at once when the request is answered
 * without reading it (token in the URL, keyless budget spent, an unparseable Content-Type).
 */
export function mcpHandler(opts: McpEndpointOptions, deps: DispatchDeps, policy: OriginPolicy, controllers: Set<Abortable>): (req: IncomingMessage, res: ServerResponse, bodyRead?: () => void) => void {
  const readBody = releasingBodyReader(opts.bodyLimitBytes ?? 1024 * 1024);
  const observe = opts.observeRequest;
  // A modern tools/call refused at capacity from its headers alone, before the body is parsed (early-refusal.ts).
  const refuseEarly = earlyCapacityRefusal(deps, policy, observe, readBody);

  // Synchronous up to the refusal at capacity (no promise for a refused call); the rest is `serve`.
  const answer = (req: ReadRequest, res: ServerResponse): Promise<void> | undefined => {
    const requestId = newRequestId();
    res.setHeader('X-Request-Id', requestId);
    // Node already lower-cases header names and joins repeated ones (set-cookie, the only array, is not read).
    const headers = req.headers as Record<string, string | undefined>;
    const verdict = admit({ method: req.method ?? '', headers, body: typeof req.body === 'string' ? req.body : undefined, scheme: (req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http' }, policy);
    const ch = new ResponseChannel(res);
    const admitted = verdict.kind === 'admitted' ? verdict : null;
    const isCall = admitted !== null && admitted.message.type === 'request' && admitted.message.method === 'tools/call';
    const apiKey = admitted ? bearerToken(headers.authorization) : null;
    // Admission by capacity for a token seen before, decided before anything a served call needs is
    // built (issue 29 item 3): the same 429 answer, counted in the aggregate audit.
    const refused = isCall && apiKey !== null && deps.capacity !== undefined && answerKnownOverCapacity(admitted!, { requestId, apiKey, clientAddress: clientAddressKey(req.socket.remoteAddress), scope: req.socket, frontDoorCall: deps.closeRefusedConnections ? () => earlyCall(headers, policy) !== null : undefined }, ch, deps);
    if (refused) {
      // Observed once written (its bytes left with end(); nothing runs after it), without a 'close' listener.
      if (observe && res.writableEnded) observe(admitted!.message.method, admitted!.dialect, res.statusCode, 0);
      return undefined;
    }
    return serve(req, res, requestId, verdict, ch, isCall, apiKey);
  };

  // Synchronous up to dispatch: a tools/call's only promises are the dispatcher's and one `then` for a
  // failure (issue 28 item 3); the other methods wait for the unverified-key gate (serveOther).
  const serve = (req: ReadRequest, res: ServerResponse, requestId: string, verdict: Reply | Admitted, ch: ResponseChannel, isCall: boolean, apiKey: string | null): Promise<void> | undefined => {
    const admitted = verdict.kind === 'admitted' ? verdict : null;
    // A CallAbort, not an AbortController: the same cancellation for the pipeline at a fraction of the cost (call-abort.ts).
    const controller = isCall ? new CallAbort() : null;
    if (observe || controller) {
      const t0 = observe ? process.hrtime.bigint() : 0n;
      // 'close' follows 'finish' for an answered request, and comes alone when the client went away
      // first (then an in-flight tools/call is aborted); shares the channel's one 'close' listener.
      ch.whenClosed(() => {
        if (res.writableFinished) {
          if (observe) observe(admitted ? admitted.message.method : '-', admitted ? admitted.dialect : '-', res.statusCode, Number(process.hrtime.bigint() - t0) / 1e9);
        } else controller?.abort('client closed the stream');
        if (controller) controllers.delete(controller);
      });
    }
    if (!admitted) {
      if (verdict.kind !== 'reply') return undefined;
      if (verdict.body) ch.final(verdict.status, verdict.body, verdict.headers);
      else {
        if (verdict.headers) for (const name in verdict.headers) res.setHeader(name, verdict.headers[name]);
        ch.empty(verdict.status);
      }
      return undefined;
    }
    const clientAddress = clientAddressKey(req.socket.remoteAddress);
    if (!controller) return serveOther(req, res, requestId, admitted, ch, apiKey, clientAddress);
    controllers.add(controller);
    // Never rejects: nothing for the caller to catch.
    void dispatchOrFail(res, admitted, { requestId, apiKey, clientAddress, scope: req.socket, signal: controller.signal, abort: (r) => controller.abort(r) }, ch);
    return undefined;
  };

  // Every method but tools/call: the unverified-key gate first (a key that resolves to nobody spends the address's keyless budget).
  const serveOther = async (req: ReadRequest, res: ServerResponse, requestId: string, admitted: Admitted, ch: ResponseChannel, apiKey: string | null, clientAddress: string): Promise<void> => {
    const over = await unverifiedKeyGate(deps.clientLimits, deps.keylessAudit, deps.identityResolver, apiKey ?? undefined, clientAddress, 'mcp');
    if (over) return sendMcpLimited(res, over);
    return dispatchOrFail(res, admitted, { requestId, apiKey, clientAddress, scope: req.socket, signal: NEVER, abort: noAbort }, ch);
  };

  // dispatch, and the opaque -32603 (or 202 for a notification) when it throws or rejects (the 400
  // of sendMcpRequestError if even that throws, before anything was sent); never rejects.
  const dispatchOrFail = (res: ServerResponse, admitted: Admitted, http: HttpContext, ch: ResponseChannel): Promise<void> => {
    const failed = (err: unknown): void => {
      try {
        deps.logger.error({ requestId: http.requestId, err }, 'dispatch failed');
        const id = admitted.message.type === 'request' ? admitted.message.id : null;
        if (id !== null) ch.final(200, errorResponse(id, { code: -32603, message: 'Internal error' }));
        else ch.empty(202);
      } catch (e) {
        sendMcpRequestError(res, e);
      }
    };
    let done: Promise<void>;
    try {
      done = dispatch(admitted, http, ch, deps);
    } catch (err) {
      failed(err);
      return DISPATCHED;
    }
    return done.then(undefined, failed);
  };

  return (req, res, bodyRead) => {
    try {
      // Every answer to an allow-listed Origin carries the CORS headers, the limit refusals too (issue 24 item 7).
      const origin = corsOrigin(req.headers.origin, policy);
      if (origin !== null) {
        const cors = corsResponseHeaders(origin);
        for (const name in cors) res.setHeader(name, cors[name]);
      }
      // Access tokens only in the Authorization header, never in the URL (issue 26 item 3; MCP authorization).
      if (carriesTokenInQuery(req.url)) {
        sendJsonText(res, 400, TOKEN_IN_QUERY);
        return bodyRead?.();
      }
      // The keyless budget of the client address, before the body is even read (issue 10, Build 6).
      const refused = keylessGate(deps.clientLimits, deps.keylessAudit, req, 'mcp', deps.identityResolver);
      if (refused) {
        observe?.('-', '-', 429, 0);
        sendMcpLimited(res, refused);
        return bodyRead?.();
      }
      if (refuseEarly && refuseEarly(req, res, bodyRead)) return;
      readBody(req, res, (err) => {
        if (err) return sendMcpRequestError(res, err);
        let pending: Promise<void> | undefined;
        try {
          pending = answer(req, res);
        } catch (e) {
          return sendMcpRequestError(res, e);
        }
        pending?.catch((e: unknown) => sendMcpRequestError(res, e));
      }, bodyRead);
    } catch (err) {
      // body-parser throws synchronously on a Content-Type it cannot parse (400, as under Express).
      sendMcpRequestError(res, err);
      bodyRead?.();
    }
  };
}
