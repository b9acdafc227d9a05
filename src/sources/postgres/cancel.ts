/**
 * Cancellation (issue 5): the protocol's CancelRequest to the very server a connection is on (over
 * TLS when TLS is configured, never plaintext then), pg_cancel_backend as a fall-back, and the
 * cancel-then-drop of a connection whose statement the gateway gave up on.
 */
import net from 'node:net';
import tls from 'node:tls';
import type pg from 'pg';
import type { Logger } from 'pino';
import { PinnedClient, verifyPinnedSettings } from './pinned-client';
import { pinnedStartupOptions } from './session-settings';
import { applicationName, type Resolved } from './settings';
import type { ClientInternals } from './wire';

/** Time allowed for a cancel request (connect, optional TLS, send) before falling back to pg_cancel_backend (ms). */
export const CANCEL_TIMEOUT_MS = 1_000;
/** Interval between repeated cancel requests while the cancelled statement still runs (ms). */
export const CANCEL_RETRY_MS = 250;
/** Most cancel requests sent for one statement. */
export const CANCEL_ATTEMPTS = 4;

const SSL_REQUEST = (() => {
  const b = Buffer.alloc(8);
  b.writeInt32BE(8, 0);
  b.writeInt32BE(80877103, 4);
  return b;
})();

/**
 * Sends the protocol's CancelRequest for backend `pid` (with its secret `key`) to the server at
 * `target`, over TLS when `tlsOpts` is set (SSLRequest first; never plaintext when TLS is
 * configured). Resolves once the server closed the cancel connection; rejects on error or timeout.
 */
export function sendCancelRequest(
  target: { host: string; port: number } | { path: string },
  tlsOpts: tls.ConnectionOptions | false,
  pid: number,
  key: number,
  timeoutMs: number = CANCEL_TIMEOUT_MS,
): Promise<void> {
  const packet = Buffer.alloc(16);
  packet.writeInt32BE(16, 0);
  packet.writeInt32BE(80877102, 4);
  packet.writeInt32BE(pid, 8);
  packet.writeUInt32BE(key >>> 0, 12);
  return new Promise<void>((resolve, reject) => {
    const raw = 'path' in target ? net.connect(target.path) : net.connect(target.port, target.host);
    let secure: tls.TLSSocket | null = null;
    let sent = false;
    let settled = false;
    const finish = (err?: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      secure?.destroy();
      raw.destroy();
      if (err) reject(err);
      else resolve();
    };
    const timer = setTimeout(() => finish(new Error('cancel request timed out')), timeoutMs);
    timer.unref?.();
    raw.on('error', (e) => finish(e));
    raw.on('close', () => finish(sent ? undefined : new Error('cancel connection closed early')));
    raw.once('connect', () => {
      if (!tlsOpts) {
        sent = true;
        raw.write(packet);
        return;
      }
      raw.write(SSL_REQUEST);
      raw.once('data', (b: Buffer) => {
        if (b[0] !== 0x53 /* 'S' */) {
          finish(new Error('server refused TLS for the cancel request'));
          return;
        }
        const host = 'host' in target ? target.host : 'localhost';
        secure = tls.connect({ ...tlsOpts, socket: raw, host, ...(tlsOpts.servername ? {} : net.isIP(host) === 0 ? { servername: host } : {}) });
        secure.on('error', (e) => finish(e));
        secure.once('secureConnect', () => {
          sent = true;
          secure!.write(packet);
        });
        secure.on('close', () => finish(sent ? undefined : new Error('cancel connection closed early')));
      });
    });
  });
}

/** Cancels statements of one source's connections. */
export class StatementCanceller {
  /**
   * @param s the source's resolved settings (host, port, roles, TLS)
   * @param ssl the TLS options of the source's connections, or false
   * @param sourceId used in application_name of the fall-back connection
   */
  constructor(
    private readonly s: Resolved,
    private readonly ssl: tls.ConnectionOptions | false,
    private readonly sourceId: string,
    private readonly logger?: Logger,
  ) {}

  /**
   * Sends one cancel for the statement `client`'s backend runs: the protocol's CancelRequest to the
   * very server the connection is on (over TLS when TLS is configured), or, if that cannot be sent,
   * pg_cancel_backend from a separate connection of the same role. Never rejects.
   */
  async sendCancel(client: pg.PoolClient, kind: 'reader' | 'writer'): Promise<void> {
    const c = client as unknown as ClientInternals;
    const pid = c.processID;
    const key = c.secretKey;
    if (pid === null || key === null) return;
    const sock = c.connection.stream;
    const target = this.s.host.startsWith('/')
      ? { path: `${this.s.host}/.s.PGSQL.${this.s.port}` }
      : { host: sock.remoteAddress ?? this.s.host, port: sock.remotePort ?? this.s.port };
    const cancelTls = this.ssl ? { ...this.ssl, ...(this.s.tls.servername || net.isIP(this.s.host) === 0 ? { servername: this.s.tls.servername ?? this.s.host } : {}) } : false;
    try {
      await sendCancelRequest(target, cancelTls, pid, key);
      return;
    } catch (err) {
      this.logger?.warn({ err, pid }, 'cancel request failed; trying pg_cancel_backend');
    }
    const who = kind === 'writer' && this.s.writer ? this.s.writer : this.s.reader;
    // Pinned and verified like every source connection (issue 22 item 2), though its text is fixed.
    const fallback = new PinnedClient({
      options: pinnedStartupOptions(),
      host: this.s.host,
      port: this.s.port,
      database: this.s.database,
      user: who.user,
      password: () => who.password ?? '',
      ssl: this.ssl,
      connectionTimeoutMillis: CANCEL_TIMEOUT_MS,
      query_timeout: CANCEL_TIMEOUT_MS,
      application_name: applicationName(this.sourceId, 'cancel'),
    });
    fallback.on('error', () => undefined);
    try {
      await fallback.connect();
      await verifyPinnedSettings(fallback);
      await fallback.query('SELECT pg_catalog.pg_cancel_backend($1)', [pid]);
    } catch (err) {
      this.logger?.error({ err, pid }, 'could not cancel the statement');
    } finally {
      await fallback.end().catch(() => undefined);
    }
  }

  /**
   * Cancels what `client` runs and then destroys the connection (never returned to the pool). The
   * connection is kept (and its pool slot held) until the server has answered — so a cancel that
   * PostgreSQL ignored (it drops one landing while the backend reads the next protocol message)
   * can be repeated: up to CANCEL_ATTEMPTS cancels, CANCEL_RETRY_MS apart, while `ended` is pending.
   * Resolves once the connection has left the pool (its statement ended or it was dropped), so the
   * caller's per-identity slot is given back only then (fair-share.ts).
   */
  cancelAndDrop(client: pg.PoolClient, kind: 'reader' | 'writer', ended: Promise<void>): Promise<void> {
    let over = false;
    void ended.then(() => (over = true));
    const onError = (err: unknown) => this.logger?.debug({ err }, 'connection error while cancelling');
    client.on('error', onError);
    const pause = () =>
      new Promise<void>((r) => {
        const t = setTimeout(r, CANCEL_RETRY_MS);
        t.unref?.();
        void ended.then(() => {
          clearTimeout(t);
          r();
        });
      });
    return (async () => {
      try {
        for (let attempt = 1; attempt <= CANCEL_ATTEMPTS && !over; attempt++) {
          await this.sendCancel(client, kind);
          await pause();
        }
        if (!over) this.logger?.warn({ attempts: CANCEL_ATTEMPTS }, 'statement did not end after cancel requests; dropping the connection');
      } finally {
        client.removeListener('error', onError);
        client.release(true);
      }
    })();
  }

  /**
   * Ends a connection at once (the wire budget tripped): one cancel for its statement (the backend
   * may still be computing further rows), then the socket is destroyed and the connection dropped
   * from its pool. Nothing more of what the server sends is read.
   */
  dropNow(client: pg.PoolClient, kind: 'reader' | 'writer'): void {
    const onError = (err: unknown) => this.logger?.debug({ err }, 'connection error while dropping');
    client.on('error', onError);
    void this.sendCancel(client, kind).finally(() => client.removeListener('error', onError));
    (client as unknown as ClientInternals).connection.stream.destroy?.();
    client.release(true);
  }
}
