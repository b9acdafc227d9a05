/**
 * Starting and stopping the gateway's HTTP server (HTTPS with listen.tls, its certificate reloaded
 * on SIGHUP), with graceful shutdown (stop accepting, let in-flight calls finish up to a deadline,
 * abort the rest, flush the audit).
 */
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { createLogger } from './observability/logger';
import { createGatewayApp, type GatewayApp, type GatewayAppOptions } from './transport/app';
import { installFrontDoor } from './transport/front-door';
import { HTTP_ERROR_CODES } from './transport/http-errors';

/** A listening gateway. `url` is the MCP endpoint, e.g. http://127.0.0.1:8787/mcp. */
export interface RunningGateway {
  url: string;
  port: number;
  server: Server;
  gateway: GatewayApp;
  /** Graceful stop: refuses new connections, waits up to `deadlineMs` (default 10 000) for in-flight calls, aborts the rest, flushes the audit. */
  close(deadlineMs?: number): Promise<void>;
  /**
   * With listen.tls: reads the certificate and key files again and serves them to new connections
   * (what SIGHUP does). Resolves true when reloaded; false (logged, the current certificate kept)
   * when the files cannot be read or do not form a valid pair. Without TLS: false.
   */
  reloadTls(): Promise<boolean>;
}

/** Default of ListenOptions.requestTimeoutMs (config listen.request_timeout_ms). */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;
/** Default of ListenOptions.headersTimeoutMs (config listen.headers_timeout_ms). */
export const DEFAULT_HEADERS_TIMEOUT_MS = 20_000;

/** Where and how listenGateway listens. */
export interface ListenOptions {
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  /**
   * Longest time (ms) a client may take to send one whole request, headers and body: node:http
   * requestTimeout (its default, 300 s, let stalled 1 MiB bodies pile up: red-team F4). Past it
   * Node answers 408 and closes the connection. Default DEFAULT_REQUEST_TIMEOUT_MS.
   */
  requestTimeoutMs?: number;
  /** Longest time (ms) for a request's headers: node:http headersTimeout, at most requestTimeoutMs. Default DEFAULT_HEADERS_TIMEOUT_MS. */
  headersTimeoutMs?: number;
  /**
   * Serve over TLS (config listen.tls; issue 24, item 3): PEM certificate chain and key files, read
   * now and again on SIGHUP (RunningGateway.reloadTls). Absent: plain HTTP.
   */
  tls?: { cert_file: string; key_file: string };
  /**
   * A server already listening (the standby's, issue 29: started before the control database
   * answered) to serve from now on instead of opening a new one: its request listeners are
   * replaced by this gateway's handler, so the address never stops answering. host, port,
   * timeouts and tls are then those it was created with.
   */
  server?: Server;
}

/** Reads the PEM files of ListenOptions.tls. Throws the file system's error (at start) for a missing or unreadable file. */
function readTlsFiles(tls: { cert_file: string; key_file: string }): { cert: Buffer; key: Buffer } {
  return { cert: readFileSync(tls.cert_file), key: readFileSync(tls.key_file) };
}

/** The node:http server options for the timeouts of `opts`: headersTimeout ≤ requestTimeout, both checked at least every 5 s. */
export function serverTimeouts(opts: ListenOptions): { requestTimeout: number; headersTimeout: number; connectionsCheckingInterval: number } {
  const requestTimeout = opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  const headersTimeout = Math.min(opts.headersTimeoutMs ?? DEFAULT_HEADERS_TIMEOUT_MS, requestTimeout);
  // Node checks the timeouts every connectionsCheckingInterval (default 30 s, as long as the timeout itself).
  return { requestTimeout, headersTimeout, connectionsCheckingInterval: Math.max(100, Math.min(5000, Math.floor(headersTimeout / 4))) };
}

/**
 * Answers a request that reaches a listener bound by bindListener before a gateway took it over:
 * HTTP 503 with Retry-After: 1 and the ErrorBody `{error, code: "unavailable", message}`
 * (spec/errors-v1.json httpErrors), so a client that is early retries instead of hanging.
 */
export function startingHandler(_req: IncomingMessage, res: ServerResponse): void {
  const body = JSON.stringify({ error: HTTP_ERROR_CODES.unavailable.error, code: 'unavailable', message: 'InterLock is starting: try again in a moment' });
  res.writeHead(HTTP_ERROR_CODES.unavailable.status, { 'Content-Type': 'application/json; charset=utf-8', 'Retry-After': '1', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

/**
 * Binds `opts.host` (default 127.0.0.1) and `opts.port` (0 picks a free port) with the request
 * timeouts and, with `opts.tls`, the certificate of `opts`, serving `handler` (default
 * startingHandler). Resolves with the listening server; rejects with the listen error (code
 * EADDRINUSE for a taken port; a TLS file's read error) and leaves nothing listening. `interlock
 * demo` binds first and hands the server to the gateway (ListenOptions.server), so a start that
 * fails on its port has changed nothing (task nu48fix item 1).
 */
export function bindListener(opts: ListenOptions, handler: (req: IncomingMessage, res: ServerResponse) => void = startingHandler): Promise<Server> {
  return new Promise((resolve, reject) => {
    // The gateway's own listener: /mcp goes straight to the MCP handler, the rest to Express (issue 13).
    // With listen.tls the same handler behind node:https (issue 24, item 3).
    const s: Server = opts.tls ? createTlsServer({ ...serverTimeouts(opts), ...readTlsFiles(opts.tls) }, handler) : createServer(serverTimeouts(opts), handler);
    s.once('listening', () => resolve(s));
    s.once('error', reject);
    s.listen(opts.port ?? 0, opts.host ?? '127.0.0.1');
  });
}

/** Listens on host:port (port 0 picks a free port), with the request timeouts of `opts`. Rejects when the port cannot be bound. */
/** The SIGHUP handlers of the gateways running in this process (one process listener for all of them). */
const hangupHandlers = new Set<() => void>();
const onProcessHangup = (): void => {
  for (const h of hangupHandlers) h();
};

/** Adds a gateway's SIGHUP handler; the process listener is installed with the first one. */
function addHangupHandler(h: () => void): void {
  if (hangupHandlers.size === 0) process.on('SIGHUP', onProcessHangup);
  hangupHandlers.add(h);
}

/**
 * Removes a gateway's SIGHUP handler; the process listener goes with the last one (Node's default,
 * ending the process, applies again). A closing gateway keeps a handler of its own until its drain
 * is done; `interlock serve` and `demo` ignore SIGHUP from the first SIGTERM/SIGINT until they exit.
 */
function removeHangupHandler(h: () => void): void {
  hangupHandlers.delete(h);
  if (hangupHandlers.size === 0) process.removeListener('SIGHUP', onProcessHangup);
}

export async function listenGateway(opts: GatewayAppOptions & ListenOptions): Promise<RunningGateway> {
  const gateway = createGatewayApp({ ...opts, logger: opts.logger ?? createLogger() });
  const host = opts.host ?? '127.0.0.1';
  const server: Server = opts.server ? takeOver(opts.server, gateway.handler) : await bindListener({ ...opts, host }, gateway.handler);
  server.keepAliveTimeout = 65_000;
  // The front door (issue 29 (a)): refusals at capacity decided before node:http's parser, plain HTTP only.
  if (!opts.tls && gateway.frontDoor && gateway.deps.capacity?.settings.frontDoor !== false) {
    installFrontDoor(server, gateway.frontDoor, serverTimeouts(opts.server ? { requestTimeoutMs: opts.server.requestTimeout, headersTimeoutMs: opts.server.headersTimeout } : opts));
    gateway.deps.closeRefusedConnections = true;
  }
  const port = (server.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  let closing: Promise<void> | null = null;
  const reloadTls = async (): Promise<boolean> => {
    if (!opts.tls) return false;
    try {
      (server as TlsServer).setSecureContext(readTlsFiles(opts.tls));
      opts.logger?.info({ component: 'tls', cert_file: opts.tls.cert_file }, 'TLS certificate reloaded');
      return true;
    } catch (err) {
      opts.logger?.error({ component: 'tls', cert_file: opts.tls.cert_file, err: (err as Error).message }, 'TLS certificate reload failed; the current certificate stays');
      return false;
    }
  };
  // SIGHUP reloads the certificate. Without TLS it is only logged: Node's default for SIGHUP ends the
  // process at once (no drain, no audit flush), and `systemctl reload`, log rotators and a closed
  // terminal send it (red team rt49b D4).
  const onHangup = () => {
    if (opts.tls) void reloadTls();
    else opts.logger?.info({ component: 'server' }, 'SIGHUP received: nothing to reload (listen.tls is not set); the gateway keeps serving');
  };
  addHangupHandler(onHangup);
  return {
    url: `${opts.tls ? 'https' : 'http'}://${shownHost}:${port}/mcp`,
    port,
    server,
    gateway,
    reloadTls,
    close(deadlineMs = 10_000) {
      closing ??= (async () => {
        // SIGHUP stays handled until the drain and the audit flush are done (task lows49b): removing
        // the handler first let Node's default end the process mid-drain. It no longer reloads.
        const onHangupClosing = () => opts.logger?.info({ component: 'server' }, 'SIGHUP received while shutting down: ignored; the drain goes on');
        addHangupHandler(onHangupClosing);
        removeHangupHandler(onHangup);
        try {
          const closed = new Promise<void>((resolve) => server.close(() => resolve()));
          server.closeIdleConnections();
          const deadline = new Promise<void>((resolve) => setTimeout(resolve, deadlineMs).unref());
          await Promise.race([closed, deadline]);
          // Abort what is still running, then give the aborted calls a moment to write their
          // `cancelled` answers (and audit) before the remaining connections are cut.
          gateway.abortAll();
          await Promise.race([closed, new Promise<void>((resolve) => setTimeout(resolve, 500).unref())]);
          server.closeAllConnections();
          await closed;
          await gateway.flushAudit();
        } finally {
          removeHangupHandler(onHangupClosing);
        }
      })();
      return closing;
    },
  };
}

/** Makes `server` serve `handler` alone (its earlier request listeners removed); returns it. */
function takeOver(server: Server, handler: (req: IncomingMessage, res: ServerResponse) => void): Server {
  server.removeAllListeners('request');
  server.on('request', handler);
  return server;
}

let lastResort: { uncaught: (err: unknown) => void; rejected: (reason: unknown) => void } | null = null;

/**
 * Installs the process's last-resort handlers (issue 10, Build 2): an exception that escaped every
 * call (`uncaughtException`) or a promise rejection nobody handled (`unhandledRejection`) is logged
 * at error level, with its stack, and the process keeps serving. A call whose own code throws is
 * failed by the dispatcher with the opaque failure; these handlers only catch what escapes a call's
 * promise (e.g. a driver event handler). Idempotent; returns a function that removes the handlers.
 * Installed by `interlock serve` and `interlock demo` (bin/interlock.js), never by tests in-process.
 */
export function installLastResortHandlers(logger: Pick<Logger, 'error'>): () => void {
  if (!lastResort) {
    lastResort = {
      uncaught: (err: unknown) => {
        try {
          logger.error({ err, last_resort: 'uncaughtException' }, 'an error escaped every call; the gateway keeps serving');
        } catch {
          // logging itself failed: nothing more can be done without ending the process
        }
      },
      rejected: (reason: unknown) => {
        try {
          logger.error({ err: reason, last_resort: 'unhandledRejection' }, 'a rejected promise was not handled; the gateway keeps serving');
        } catch {
          // as above
        }
      },
    };
    process.on('uncaughtException', lastResort.uncaught);
    process.on('unhandledRejection', lastResort.rejected);
  }
  return () => {
    if (!lastResort) return;
    process.removeListener('uncaughtException', lastResort.uncaught);
    process.removeListener('unhandledRejection', lastResort.rejected);
    lastResort = null;
  };
}
