/**
 * Starting and stopping the gateway's HTTP server, with graceful shutdown (stop accepting, let
 * in-flight calls finish up to a deadline, abort the rest, flush the audit).
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createGatewayApp, type GatewayApp, type GatewayAppOptions } from './transport/app';

/** A listening gateway. `url` is the MCP endpoint, e.g. http://127.0.0.1:8787/mcp. */
export interface RunningGateway {
  url: string;
  port: number;
  server: Server;
  gateway: GatewayApp;
  /** Graceful stop: refuses new connections, waits up to `deadlineMs` (default 10 000) for in-flight calls, aborts the rest, flushes the audit. */
  close(deadlineMs?: number): Promise<void>;
}

/** Listens on host:port (port 0 picks a free port). Rejects when the port cannot be bound. */
export async function listenGateway(opts: GatewayAppOptions & { host?: string; port?: number }): Promise<RunningGateway> {
  const gateway = createGatewayApp(opts);
  const host = opts.host ?? '127.0.0.1';
  const server: Server = await new Promise((resolve, reject) => {
    const s = gateway.app.listen(opts.port ?? 0, host);
    s.once('listening', () => resolve(s));
    s.once('error', reject);
  });
  server.keepAliveTimeout = 65_000;
  const port = (server.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  let closing: Promise<void> | null = null;
  return {
    url: `http://${shownHost}:${port}/mcp`,
    port,
    server,
    gateway,
    close(deadlineMs = 10_000) {
      closing ??= (async () => {
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
      })();
      return closing;
    },
  };
}
