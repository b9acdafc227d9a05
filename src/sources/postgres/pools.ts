/**
 * A source's connection pools: the reader pool (least-privilege, read-only, time-limited through
 * startup options) and the optional writer pool, created lazily. Every connection starts with the
 * pinned session settings and is verified to hold them before first use (pinned-client.ts). Every new connection gets a wire
 * guard (wire-budget.ts) in front of pg's parser. Checkout honours the caller's AbortSignal; a pool
 * wait that times out becomes `source_busy` (errors.ts) when the pool's connections are busy, and
 * `source_unavailable` (counts against the circuit) when none of them is connected and none connected
 * within the last two connect timeouts: every slot is held by a connect attempt the source has not answered (see
 * SourcePools.waitFailure).
 */
import tls from 'node:tls';
import pg from 'pg';
import type { Logger } from 'pino';
import { SourceError, localFailure } from './errors';
import { LOCAL_WIRE_ERROR_CODE } from './health';
import { pinnedPoolOptions, connectPinned } from './pinned-client';
import { samePath } from './session-settings';
import { applicationName, searchPathFitsStartup, searchPathValue, startupOptions, type Resolved } from './settings';
import { installWireGuard, type WireGuard } from './wire-budget';
import type { ClientInternals } from './wire';

/** Kind of pooled connection. */
export type PoolKind = 'reader' | 'writer';

/** Pool occupancy: `size` = most connections, `inUse` = checked out, `waiting` = callers waiting for one. */
export interface PoolStats {
  size: number;
  inUse: number;
  waiting: number;
}

/** An Error raised by the gateway on a connection it ends itself (never counted against the source). */
export function wireError(message: string): Error {
  return Object.assign(new Error(message), { code: LOCAL_WIRE_ERROR_CODE });
}

const guards = new WeakMap<object, WireGuard>();

/** Installs the wire guard on a connection that is ready for a query; `onDestroy` is told why the guard ended it. */
function attachGuard(client: pg.PoolClient, onDestroy?: (err: Error) => void): WireGuard {
  const stream = (client as unknown as ClientInternals).connection.stream;
  const guard = installWireGuard(stream, (err) => {
    onDestroy?.(err);
    stream.destroy?.(Object.assign(err, { code: LOCAL_WIRE_ERROR_CODE }));
  });
  guards.set(client, guard);
  return guard;
}

/** The wire guard of a pooled connection (installed when it connected; installed now if it was not). */
export function guardOf(client: pg.PoolClient): WireGuard {
  return guards.get(client) ?? attachGuard(client);
}

/** The reader and writer pools of one source. */
export class SourcePools {
  private readerPool: pg.Pool | null = null;
  private writerPool: pg.Pool | null = null;
  private closed = false;
  /** The lookup path new connections are pinned to (startup `search_path`, task hrt42); null: not pinned yet. */
  private path: readonly string[] | null = null;
  /** The caller's array `path` was last found equal to (pinSearchPath's identity check). */
  private pinnedFrom: readonly string[] | null = null;
  /** Per pool, its clients that completed connecting and have not ended (see checkout). */
  private readonly connected = new WeakMap<pg.Pool, Set<pg.PoolClient>>();
  /** Per pool, when (performance.now(), ms) a client last completed connecting (see waitFailure). */
  private readonly lastConnected = new WeakMap<pg.Pool, number>();

  /**
   * @param s resolved settings; `ssl` the TLS options or false; `fail` classifies a raw failure
   */
  constructor(
    private readonly s: Resolved,
    private readonly ssl: tls.ConnectionOptions | false,
    private readonly sourceId: string,
    private readonly fail: (err: unknown, phase: 'connect' | 'query') => SourceError,
    private readonly logger?: Logger,
  ) {}

  /**
   * Pins the lookup path of the source's new connections (reader and writer) to `path`, the
   * catalogue's scanned `current_schemas(false)` (task hrt42; red team rt42 G3/G4). When it differs
   * from the pinned one (first pin, or a rescan changed it) both pools are retired: new checkouts
   * open connections with the new startup option; the old pools end once nobody waits on them (a
   * connection still checked out is dropped when released; read.ts drops one on an older path). Absent: no change.
   */
  pinSearchPath(path: readonly string[] | undefined): void {
    // The array last pinned from (a catalogue snapshot's searchPath, never edited): nothing to compare
    // on every read of the same snapshot (issue 28, h28l).
    if (!path || this.closed || path === this.pinnedFrom) return;
    const cur = this.path;
    if (cur && samePath(cur, path)) {
      this.pinnedFrom = path;
      return;
    }
    this.pinnedFrom = path;
    this.path = Object.freeze([...path]);
    for (const old of [this.readerPool, this.writerPool]) {
      if (old) this.retire(old);
    }
    this.readerPool = null;
    this.writerPool = null;
  }

  /**
   * Ends a pool no new checkout uses. Its waiters are served first (pg-pool serves no waiter once
   * ending, so they would only time out), and it ends at the first release that leaves none waiting:
   * ending it only when nobody waited at the retirement left a pool retired with waiters, and its
   * connections, open until their idle timeout; a path flapping between rescans added one such pool
   * per change (red team rt42c P2).
   */
  private retire(old: pg.Pool): void {
    const end = () => void old.end().catch((err: unknown) => this.logger?.warn({ err }, 'pool end failed'));
    if (old.waitingCount === 0) return end();
    const onRelease = () => {
      if (old.waitingCount > 0) return;
      old.removeListener('release', onRelease);
      old.removeListener('remove', onRelease);
      // After pg-pool has put the released connection back (the event comes first).
      setImmediate(end);
    };
    old.on('release', onRelease);
    old.on('remove', onRelease);
  }

  /** Occupancy of the reader pool (a pool not created yet is empty). */
  readerStats(): PoolStats {
    const p = this.readerPool;
    return { size: this.s.poolSize, inUse: p ? p.totalCount - p.idleCount : 0, waiting: p ? p.waitingCount : 0 };
  }

  /**
   * Checks a connection out of a pool; an abort while waiting rejects at once with 'cancelled'.
   * pg-pool's callback form: its promise form adds three promises per checkout (issue 28 item 3).
   * `waited`: when given, the milliseconds from this call until the pool answered (a connection, a
   * timeout or an error; an abort ends the wait at the abort) are added to `waited.poolMs`: the wait
   * for the source's shared pool, which admission by capacity counts (issue 29, ReadOptions.poolWait).
   */
  checkout(kind: PoolKind, signal?: AbortSignal, waited?: { poolMs: number }): Promise<pg.PoolClient> {
    const pool = this.pool(kind);
    const asked = waited ? performance.now() : 0;
    return new Promise<pg.PoolClient>((resolve, reject) => {
      let done = false;
      const onAbort = () => {
        if (done) return;
        done = true;
        if (waited) waited.poolMs += performance.now() - asked;
        reject(new SourceError('cancelled'));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      pool.connect((err: Error | undefined, c: pg.PoolClient | undefined) => {
        signal?.removeEventListener('abort', onAbort);
        if (waited && !done) waited.poolMs += performance.now() - asked;
        if (err || !c) {
          if (done) return;
          done = true;
          reject(this.waitFailure(pool, err));
          return;
        }
        if (done) {
          c.release(); // the caller gave up while waiting; the connection itself is clean
          return;
        }
        done = true;
        resolve(c);
      });
    });
  }

  /**
   * The failure of a checkout. A wait for a free connection that timed out ('timeout exceeded when
   * trying to connect') is local saturation (`source_busy`, not counted) only while some connection
   * of the pool is connected: when none is, every slot is held by a connect attempt the source has
   * not answered within connect_timeout_ms, which is the source failing, not the pool being busy.
   * pg-pool hands a freed slot to a waiter by starting a new connect for it, and when that waiter's
   * own wait then times out the attempt's failure reaches no caller: against a source that accepts
   * TCP and never answers, every caller after the first round got `source_busy` and the circuit
   * never opened (CI at 2d26268, rt41a). Such a wait now gives `source_unavailable` (counts).
   */
  private waitFailure(pool: pg.Pool, err: Error | undefined): SourceError {
    const failure = this.fail(err ?? new Error('the pool gave no connection'), 'connect');
    if (failure.code !== 'source_busy' || (this.connected.get(pool)?.size ?? 0) > 0) return failure;
    // A connection made during the wait or just before it (within two connect timeouts) shows the
    // source answering: the slots are then held by replacements of connections the gateway itself
    // dropped (an agent's cancels or oversized results), not by attempts a silent source never
    // answered (red team rt42b). A source silent for longer counts again.
    if (performance.now() - (this.lastConnected.get(pool) ?? -Infinity) <= 2 * this.s.connectTimeout) return failure;
    return new SourceError('source_unavailable', { cause: err, sourceFailure: true });
  }

  /**
   * Health probe on a fresh, unpooled reader connection: connect and answer `SELECT 1` within
   * `timeoutMs` (default: the connect timeout, at most 1.5 s). True when the source answered. Used when
   * a statement outlived statement_timeout and its cancel (read.ts): a source that still answers is
   * healthy and the statement was the cause; one that does not counts against the circuit.
   */
  probe(timeoutMs = Math.min(1500, this.s.connectTimeout)): Promise<boolean> {
    // Concurrent timed-out calls share one probe (one fresh connection, not one each).
    return (this.probing ??= this.probeOnce(timeoutMs).finally(() => (this.probing = null)));
  }

  private probing: Promise<boolean> | null = null;

  private async probeOnce(timeoutMs: number): Promise<boolean> {
    if (this.closed) return true;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), timeoutMs);
    });
    // A connection whose pinned settings do not hold is no answer either (connectPinned ends it).
    const opened = connectPinned({ ...this.connectionConfig('reader'), connectionTimeoutMillis: timeoutMs });
    try {
      return await Promise.race([opened.then((c) => c.query('SELECT 1')).then(() => true, () => false), deadline]);
    } finally {
      if (timer) clearTimeout(timer);
      void opened.then((c) => c.end()).catch(() => undefined);
    }
  }

  /** Ends both pools (waits for connections in use to be returned). */
  async close(): Promise<void> {
    this.closed = true;
    const pools = [this.readerPool, this.writerPool].filter((p): p is pg.Pool => p !== null);
    this.readerPool = null;
    this.writerPool = null;
    await Promise.all(pools.map((p) => p.end().catch((err: unknown) => this.logger?.warn({ err }, 'pool end failed'))));
  }

  /** Connection parameters of the reader or writer role: the pinned session settings and timeouts, read-only for the reader. */
  private connectionConfig(kind: PoolKind): pg.ClientConfig {
    const who = kind === 'reader' ? this.s.reader : this.s.writer!;
    // A password *function*: pg then never falls back to PGPASSWORD or ~/.pgpass for a source.
    const password = who.password ?? '';
    return {
      host: this.s.host,
      port: this.s.port,
      database: this.s.database,
      user: who.user,
      password: () => password,
      ssl: this.ssl,
      options: startupOptions(this.s, kind === 'reader', this.path),
      application_name: applicationName(this.sourceId, kind),
    };
  }

  private pool(kind: PoolKind): pg.Pool {
    if (this.closed) throw localFailure('the source connector is closed');
    const existing = kind === 'reader' ? this.readerPool : this.writerPool;
    if (existing) return existing;
    // A path too long for the startup packet is set by the connection's first statement (rt42c P1).
    const latePath = this.path && !searchPathFitsStartup(this.path) ? searchPathValue(this.path) : undefined;
    const pool = new pg.Pool({
      ...this.connectionConfig(kind),
      // Every connection is verified to hold the pinned session settings before it is used (pinned-client.ts).
      ...pinnedPoolOptions(latePath),
      max: kind === 'reader' ? this.s.poolSize : Math.min(2, this.s.poolSize),
      idleTimeoutMillis: 30_000,
      connectionTimeoutMillis: this.s.connectTimeout,
      allowExitOnIdle: true,
      keepAlive: true,
    });
    // Every protocol byte of a new connection passes the wire guard from now on (it is at a message boundary: ready for a query).
    const connected = new Set<pg.PoolClient>();
    this.connected.set(pool, connected);
    pool.on('connect', (client) => {
      attachGuard(client, (err) => this.logger?.warn({ err: { message: err.message }, pool: kind }, 'connection ended by the wire guard'));
      connected.add(client);
      this.lastConnected.set(pool, performance.now());
      client.once('end', () => connected.delete(client));
    });
    pool.on('remove', (client) => connected.delete(client));
    // An idle pooled connection that dies (server restart, network) is dropped by the pool; log it only.
    pool.on('error', (err) => {
      delete (err as { client?: unknown }).client; // pg-pool attaches the whole client (connection parameters, cancel key): log the error alone
      this.logger?.warn({ err, pool: kind }, 'idle source connection failed');
    });
    if (kind === 'reader') this.readerPool = pool;
    else this.writerPool = pool;
    return pool;
  }
}
