/**
 * PostgreSQL source connector: executes what the governance pipeline already approved.
 * It never parses or classifies SQL (src/sql/** does); it only runs statements safely.
 *
 * sql-safety.md layers implemented here:
 * - Layer 4 (reads): a reader pool whose connections START read-only and time-limited through
 *   connection startup parameters (`options: -c default_transaction_read_only=on -c
 *   statement_timeout=… -c lock_timeout=… -c idle_in_transaction_session_timeout=…`), so a read
 *   costs ONE round trip (Parse, Bind, Describe, Execute with a row limit, Sync, written at once),
 *   with no BEGIN/SET/ROLLBACK per call. The agent's SQL is sent unchanged as the text of an
 *   extended-protocol statement (PostgreSQL then refuses stacked commands); it is never wrapped.
 *   A connection that saw anything unexpected (any error other than a plain statement error, a
 *   cancellation, a timeout, a session parameter change, COPY, or a transaction left open) is
 *   destroyed, never reused.
 * - Layer 5 (writes): a separate writer pool (a separate, least-privilege role) runs
 *   `BEGIN; <statement>; COMMIT` with the same timeouts, rolling back on error.
 * - Layer 6 (result caps): the portal's row limit fetches maxRows + 1 rows (the extra row only
 *   sets `truncated`), and rows stop being kept once their JSON size would pass maxBytes.
 *
 * Faults (issue 5): a per-source circuit breaker (opossum), upstream TLS modes with no plaintext
 * fall-back, cancellation through the protocol's CancelRequest, and opaque failures (errors.ts).
 */
import net from 'node:net';
import tls from 'node:tls';
import pg from 'pg';
import CircuitBreaker from 'opossum';
import type { Logger } from 'pino';
import {
  SourceError,
  classifyFailure,
  internalCause,
  isFatalServerError,
  isServerError,
  localFailure,
  type FailurePhase,
} from './errors';

export { SourceError, type SourceErrorCode } from './errors';

// pg's own parameter encoder (Date, arrays, JSON, Buffers → wire values). pg exports ./lib/* for this.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { prepareValue } = require('pg/lib/utils') as { prepareValue(value: unknown): unknown };

/** TLS settings of a source. `ca` is a PEM bundle; `servername` is the name verify-full checks (default: host). */
export interface PostgresTlsSettings {
  /**
   * - `off`: plaintext.
   * - `require`: encrypted, server certificate NOT verified.
   * - `verify-ca`: encrypted, certificate chain verified against `ca` (or the system store), host name not checked.
   * - `verify-full`: as verify-ca, and the certificate must name `servername` (default: `host`).
   * Whatever the mode other than off, the connection never falls back to plaintext.
   */
  mode: 'off' | 'require' | 'verify-ca' | 'verify-full';
  /** PEM-encoded CA certificate(s) trusted for verify-ca / verify-full. */
  ca?: string;
  /** Host name the certificate must carry under verify-full (also sent as SNI). */
  servername?: string;
}

/**
 * Connection settings of one PostgreSQL source. Times are in milliseconds.
 * `reader` is the least-privilege role agents' reads run as; `writer` (optional) is a separate role
 * used only for approved writes.
 */
export interface PostgresSourceSettings {
  host: string;
  port: number;
  database: string;
  reader: { user: string; password?: string };
  writer?: { user: string; password?: string };
  tls?: PostgresTlsSettings;
  /** Server-side statement_timeout of every connection (ms, default 15000; 0 disables it and the client-side watchdog). */
  statement_timeout_ms?: number;
  /** Server-side lock_timeout (ms, default 2000). */
  lock_timeout_ms?: number;
  /** Server-side idle_in_transaction_session_timeout (ms, default 10000). */
  idle_in_transaction_timeout_ms?: number;
  /** Reader pool size (connections, default 5). The writer pool holds at most min(2, pool_size). */
  pool_size?: number;
  /** Time to open a connection or to wait for a free pooled one (ms, default 5000). */
  connect_timeout_ms?: number;
  breaker?: {
    /**
     * Consecutive source failures that open the circuit (default 5): failures to connect (refused,
     * DNS, timeout, authentication, TLS), lost connections, server-side faults (SQLSTATE classes
     * 08, 53, 57, 58, XX…), and a server that does not answer at all. Not counted: the statement's
     * own errors, server-enforced statement timeouts, cancellations, local pool saturation.
     */
    failure_threshold?: number;
    /** Time the circuit stays open before one half-open probe is let through (ms, default 10000). */
    reset_timeout_ms?: number;
  };
}

/** Defaults applied to omitted settings. */
export const DEFAULT_SETTINGS = {
  statement_timeout_ms: 15_000,
  lock_timeout_ms: 2_000,
  idle_in_transaction_timeout_ms: 10_000,
  pool_size: 5,
  connect_timeout_ms: 5_000,
  failure_threshold: 5,
  reset_timeout_ms: 10_000,
} as const;

/** Extra time the client waits past statement_timeout before it cancels and drops a connection itself (ms). */
export const WATCHDOG_GRACE_MS = 2_000;
/** Time allowed for a cancel request (connect, optional TLS, send) before falling back to pg_cancel_backend (ms). */
export const CANCEL_TIMEOUT_MS = 1_000;
/** Interval between repeated cancel requests while the cancelled statement still runs (ms). */
export const CANCEL_RETRY_MS = 250;
/** Most cancel requests sent for one statement. */
export const CANCEL_ATTEMPTS = 4;

/** A column of a read result: its name and the PostgreSQL type OID. */
export interface ReadField {
  name: string;
  dataTypeId: number;
}

/**
 * A read's result.
 * - `fields`: the columns in order.
 * - `rows`: one object per row keyed by column name (for duplicate names the later column wins).
 * - `rowsArray`: the same rows as arrays in column order (nothing lost to duplicate names).
 * - `truncated`: more rows existed than maxRows, or rows were dropped to stay within maxBytes.
 * - `bytes`: UTF-8 length of `JSON.stringify(rows)` (always ≤ maxBytes unless even `[]` is larger).
 */
export interface ReadResult {
  fields: ReadField[];
  rows: Record<string, unknown>[];
  rowsArray: unknown[][];
  truncated: boolean;
  bytes: number;
}

/** Options of a read: `maxRows` (integer ≥ 0), `maxBytes` (bytes of the rows' JSON), and the caller's cancellation signal. */
export interface ReadOptions {
  maxRows: number;
  maxBytes: number;
  signal?: AbortSignal;
}

/** Circuit state of a source. */
export type BreakerState = 'closed' | 'open' | 'half_open';

/** Constructor options: an operational logger and a breaker state observer (metrics). */
export interface ConnectorOptions {
  logger?: Logger;
  onBreakerChange?(state: BreakerState): void;
}

/** Settings with every default applied and checked. */
interface Resolved {
  host: string;
  port: number;
  database: string;
  reader: { user: string; password?: string };
  writer?: { user: string; password?: string };
  tls: PostgresTlsSettings;
  statementTimeout: number;
  lockTimeout: number;
  idleInTxTimeout: number;
  poolSize: number;
  connectTimeout: number;
  failureThreshold: number;
  resetTimeout: number;
}

function nonNegInt(v: unknown, dflt: number, field: string): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 2_147_483_647) {
    throw localFailure(`invalid source settings (${field})`);
  }
  return v;
}

function role(v: unknown, field: string): { user: string; password?: string } {
  const r = v as { user?: unknown; password?: unknown } | undefined;
  if (!r || typeof r.user !== 'string' || r.user === '') throw localFailure(`invalid source settings (${field}.user)`);
  if (r.password !== undefined && typeof r.password !== 'string') throw localFailure(`invalid source settings (${field}.password)`);
  return r.password === undefined ? { user: r.user } : { user: r.user, password: r.password };
}

/** Applies defaults and checks types; throws a SourceError naming only the bad field. */
export function resolveSettings(s: PostgresSourceSettings): Resolved {
  if (!s || typeof s.host !== 'string' || s.host === '') throw localFailure('invalid source settings (host)');
  if (!Number.isInteger(s.port) || s.port < 1 || s.port > 65535) throw localFailure('invalid source settings (port)');
  if (typeof s.database !== 'string' || s.database === '') throw localFailure('invalid source settings (database)');
  const mode = s.tls?.mode ?? 'off';
  if (!['off', 'require', 'verify-ca', 'verify-full'].includes(mode)) throw localFailure('invalid source settings (tls.mode)');
  if (s.tls?.ca !== undefined && typeof s.tls.ca !== 'string') throw localFailure('invalid source settings (tls.ca)');
  if (s.tls?.servername !== undefined && (typeof s.tls.servername !== 'string' || s.tls.servername === '')) {
    throw localFailure('invalid source settings (tls.servername)');
  }
  const poolSize = nonNegInt(s.pool_size, DEFAULT_SETTINGS.pool_size, 'pool_size');
  const failureThreshold = nonNegInt(s.breaker?.failure_threshold, DEFAULT_SETTINGS.failure_threshold, 'breaker.failure_threshold');
  if (poolSize < 1) throw localFailure('invalid source settings (pool_size)');
  if (failureThreshold < 1) throw localFailure('invalid source settings (breaker.failure_threshold)');
  return {
    host: s.host,
    port: s.port,
    database: s.database,
    reader: role(s.reader, 'reader'),
    writer: s.writer === undefined ? undefined : role(s.writer, 'writer'),
    tls: { mode, ca: s.tls?.ca, servername: s.tls?.servername },
    statementTimeout: nonNegInt(s.statement_timeout_ms, DEFAULT_SETTINGS.statement_timeout_ms, 'statement_timeout_ms'),
    lockTimeout: nonNegInt(s.lock_timeout_ms, DEFAULT_SETTINGS.lock_timeout_ms, 'lock_timeout_ms'),
    idleInTxTimeout: nonNegInt(s.idle_in_transaction_timeout_ms, DEFAULT_SETTINGS.idle_in_transaction_timeout_ms, 'idle_in_transaction_timeout_ms'),
    poolSize,
    connectTimeout: nonNegInt(s.connect_timeout_ms, DEFAULT_SETTINGS.connect_timeout_ms, 'connect_timeout_ms'),
    failureThreshold,
    resetTimeout: nonNegInt(s.breaker?.reset_timeout_ms, DEFAULT_SETTINGS.reset_timeout_ms, 'breaker.reset_timeout_ms'),
  };
}

/**
 * The TLS options given to pg (and to the cancel path) for a TLS setting, or `false` for off.
 * Explicit objects, never sslmode strings (pg 8 treats every sslmode string as verify-full).
 * The host name check is done by our own `checkServerIdentity` against `servername ?? host`
 * (pg overrides `servername` with the host for SNI, so it cannot carry the expected name).
 */
export function tlsOptions(t: PostgresTlsSettings, host: string): tls.ConnectionOptions | false {
  switch (t.mode) {
    case 'off':
      return false;
    case 'require':
      return { rejectUnauthorized: false };
    case 'verify-ca':
      return { rejectUnauthorized: true, ...(t.ca ? { ca: t.ca } : {}), checkServerIdentity: () => undefined };
    case 'verify-full': {
      const expected = t.servername ?? host;
      return {
        rejectUnauthorized: true,
        ...(t.ca ? { ca: t.ca } : {}),
        ...(t.servername && net.isIP(host) !== 0 ? { servername: t.servername } : {}),
        checkServerIdentity: (_hostname: string, cert: tls.PeerCertificate) => tls.checkServerIdentity(expected, cert),
      };
    }
  }
}

/** The `options` startup parameter: read-only (reader only) and the three timeouts, fixed for the connection's life. */
export function startupOptions(r: Pick<Resolved, 'statementTimeout' | 'lockTimeout' | 'idleInTxTimeout'>, readOnly: boolean): string {
  return [
    `-c default_transaction_read_only=${readOnly ? 'on' : 'off'}`,
    `-c statement_timeout=${r.statementTimeout}`,
    `-c lock_timeout=${r.lockTimeout}`,
    `-c idle_in_transaction_session_timeout=${r.idleInTxTimeout}`,
  ].join(' ');
}

function applicationName(sourceId: string, kind: string): string {
  return `interlock:${sourceId.replace(/[^A-Za-z0-9_.:-]/g, '_')}:${kind}`.slice(0, 63);
}

/** What pg's Connection offers below its typings (the methods the extended protocol needs). */
interface WireConnection {
  stream: NodeJS.WritableStream & { cork?(): void; uncork?(): void; remoteAddress?: string; remotePort?: number };
  parse(msg: { text: string; name?: string }): void;
  bind(msg: { portal: string; statement: string; values: unknown[] }): void;
  describe(msg: { type: 'P' | 'S'; name: string }): void;
  execute(msg: { portal: string; rows: number }): void;
  sync(): void;
  sendCopyFail(msg: string): void;
  on(ev: string, fn: (...a: unknown[]) => void): void;
  removeListener(ev: string, fn: (...a: unknown[]) => void): void;
}

/** Client internals used for cancellation. */
interface ClientInternals {
  processID: number | null;
  secretKey: number | null;
  connection: WireConnection;
  getTransactionStatus?(): string | null;
}

type FieldMsg = { name: string; dataTypeID: number; format?: string };

/**
 * One read as a pg Submittable: Parse (unnamed statement), Bind (unnamed portal, text results),
 * Describe portal, Execute with row limit `maxRows + 1`, Sync — written in one go, so the read is
 * one round trip and the unnamed portal is closed by the Sync. Rows past the cap are not parsed.
 */
class PortalRead {
  fields: ReadField[] = [];
  rows: Record<string, unknown>[] = [];
  rowsArray: unknown[][] = [];
  truncated = false;
  bytes = 2; // "[]"
  /** Why the connection must not be reused even though the statement succeeded (null: nothing odd). */
  unexpected: string | null = null;
  private names: string[] = [];
  private parsers: Array<(v: string) => unknown> = [];
  private full = false;
  private done = false;
  private markEnded!: () => void;
  /** Settles when the statement ended on the wire (ReadyForQuery, an error, or the connection's loss). */
  readonly ended: Promise<void> = new Promise<void>((r) => (this.markEnded = r));
  private connection: WireConnection | null = null;
  private readonly onParameterStatus = () => {
    this.unexpected ??= 'session parameter changed';
  };

  constructor(
    private readonly text: string,
    private readonly values: unknown[],
    private readonly maxRows: number,
    private readonly maxBytes: number,
    private readonly onDone: (err: unknown) => void,
  ) {}

  submit(connection: WireConnection): void {
    this.connection = connection;
    connection.on('parameterStatus', this.onParameterStatus);
    const s = connection.stream;
    s.cork?.();
    try {
      connection.parse({ text: this.text });
      connection.bind({ portal: '', statement: '', values: this.values });
      connection.describe({ type: 'P', name: '' });
      connection.execute({ portal: '', rows: this.maxRows + 1 });
      connection.sync();
    } finally {
      s.uncork?.();
    }
  }

  handleRowDescription(msg: { fields: FieldMsg[] }): void {
    this.fields = msg.fields.map((f) => ({ name: f.name, dataTypeId: f.dataTypeID }));
    this.names = msg.fields.map((f) => f.name);
    this.parsers = msg.fields.map((f) => pg.types.getTypeParser(f.dataTypeID, 'text') as (v: string) => unknown);
  }

  handleDataRow(msg: { fields: Array<string | null> }): void {
    if (this.full) return;
    if (this.rows.length >= this.maxRows) {
      this.truncated = true;
      this.full = true;
      return;
    }
    const n = this.names.length;
    const arr = new Array<unknown>(n);
    const obj: Record<string, unknown> = {};
    for (let i = 0; i < n; i++) {
      const raw = msg.fields[i];
      const v = raw === null || raw === undefined ? null : this.parsers[i](raw);
      arr[i] = v;
      const name = this.names[i];
      if (name === '__proto__') Object.defineProperty(obj, name, { value: v, enumerable: true, writable: true, configurable: true });
      else obj[name] = v;
    }
    let size: number;
    try {
      size = Buffer.byteLength(JSON.stringify(obj), 'utf8') + (this.rows.length > 0 ? 1 : 0);
    } catch {
      this.unexpected ??= 'row not serialisable';
      this.full = true;
      return;
    }
    if (this.bytes + size > this.maxBytes) {
      this.truncated = true;
      this.full = true;
      return;
    }
    this.bytes += size;
    this.rows.push(obj);
    this.rowsArray.push(arr);
  }

  handlePortalSuspended(): void {
    // Row limit reached: more rows exist than maxRows (the (maxRows+1)-th already set `truncated`).
    this.truncated = true;
  }

  handleCommandComplete(): void {}

  handleEmptyQuery(): void {}

  handleCopyInResponse(connection: WireConnection): void {
    this.unexpected ??= 'copy';
    connection.sendCopyFail('not supported');
  }

  handleCopyData(): void {
    this.unexpected ??= 'copy';
  }

  handleError(err: unknown): void {
    this.finish(err);
  }

  handleReadyForQuery(): void {
    this.finish(null);
  }

  private finish(err: unknown): void {
    if (this.done) return;
    this.done = true;
    this.connection?.removeListener('parameterStatus', this.onParameterStatus);
    this.markEnded();
    this.onDone(err);
  }

  result(): ReadResult {
    return { fields: this.fields, rows: this.rows, rowsArray: this.rowsArray, truncated: this.truncated, bytes: this.bytes };
  }
}

/** Encodes parameters as pg would; a value pg cannot encode is the caller's error (not a source failure). */
function encodeParams(params: unknown[]): unknown[] {
  if (!Array.isArray(params)) throw localFailure('params must be an array');
  try {
    return params.map((p) => prepareValue(p));
  } catch (err) {
    throw localFailure('a parameter could not be encoded', err);
  }
}

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

/**
 * A PostgreSQL source: a reader pool, an optional writer pool, and one circuit breaker.
 * All methods reject only with SourceError. Pools are created lazily on first use.
 */
export class PostgresSourceConnector {
  readonly sourceId: string;
  private readonly s: Resolved;
  private readonly ssl: tls.ConnectionOptions | false;
  private readonly logger?: Logger;
  private readonly breaker: CircuitBreaker<[() => Promise<unknown>], unknown>;
  private readerPool: pg.Pool | null = null;
  private writerPool: pg.Pool | null = null;
  private consecutiveFailures = 0;
  private closed = false;

  /**
   * @param sourceId the source's id (used in logs and application_name, never in error messages)
   * @param settings connection settings; checked here (throws SourceError 'execution_failed' naming the bad field)
   * @param opts.logger operational logger (failures are logged with their raw cause; the logs are the operator's)
   * @param opts.onBreakerChange called with 'open' | 'half_open' | 'closed' when the circuit changes
   */
  constructor(sourceId: string, settings: PostgresSourceSettings, opts: ConnectorOptions = {}) {
    this.sourceId = sourceId;
    this.s = resolveSettings(settings);
    this.ssl = tlsOptions(this.s.tls, this.s.host);
    this.logger = opts.logger?.child({ source_id: sourceId, component: 'postgres-connector' });
    this.breaker = new CircuitBreaker((fn: () => Promise<unknown>) => fn(), {
      name: `source:${sourceId}`,
      timeout: false, // the server's statement_timeout and the client watchdog bound each call
      resetTimeout: this.s.resetTimeout,
      errorThresholdPercentage: 100, // never opens on the rate: we open it on consecutive failures below
      volumeThreshold: 0,
      rollingPercentilesEnabled: false,
      errorFilter: (err: unknown) => !(err instanceof SourceError && err.sourceFailure),
    });
    this.breaker.on('failure', () => {
      this.consecutiveFailures++;
      if (this.consecutiveFailures >= this.s.failureThreshold && this.breaker.closed) this.breaker.open();
    });
    this.breaker.on('success', () => {
      this.consecutiveFailures = 0;
    });
    const notify = (state: BreakerState) => {
      if (state === 'open') this.logger?.warn({ breaker: state, consecutive_failures: this.consecutiveFailures }, 'source circuit opened');
      else this.logger?.info({ breaker: state }, `source circuit ${state === 'closed' ? 'closed' : 'half-open'}`);
      if (state !== 'half_open') this.consecutiveFailures = 0;
      try {
        opts.onBreakerChange?.(state);
      } catch (err) {
        this.logger?.error({ err }, 'onBreakerChange threw');
      }
    };
    this.breaker.on('open', () => notify('open'));
    this.breaker.on('halfOpen', () => notify('half_open'));
    this.breaker.on('close', () => notify('closed'));
  }

  /** The circuit's state: 'closed' (normal), 'open' (refusing at once), 'half_open' (next call is the probe). */
  breakerState(): BreakerState {
    if (this.breaker.opened) return 'open';
    if (this.breaker.halfOpen) return 'half_open';
    return 'closed';
  }

  /**
   * Runs an approved read (sql-safety layers 4 and 6) as the reader role.
   *
   * @param sql the statement, sent unchanged over the extended protocol (one statement only: the server refuses more)
   * @param params values for $1…$n (encoded as pg encodes query values)
   * @param opts.maxRows rows to return at most (the portal fetches maxRows + 1; the extra row sets `truncated`)
   * @param opts.maxBytes cap on the UTF-8 size of `JSON.stringify(rows)`; rows past it are dropped and `truncated` set
   * @param opts.signal aborting it cancels the statement in PostgreSQL (CancelRequest), drops the connection and
   *   rejects with 'cancelled'
   * @returns fields, rows (objects), rowsArray, truncated, bytes
   * @throws SourceError: 'circuit_open' (without touching the network), 'upstream_tls_refused', 'statement_timeout',
   *   'cancelled', or 'execution_failed' (opaque; for the statement's own errors the message names only the SQLSTATE
   *   class and `sqlState` is set)
   */
  read(sql: string, params: unknown[], opts: ReadOptions): Promise<ReadResult> {
    if (opts.signal?.aborted) return Promise.reject(new SourceError('cancelled'));
    let values: unknown[];
    try {
      if (typeof sql !== 'string') throw localFailure('sql must be a string');
      if (!Number.isInteger(opts.maxRows) || opts.maxRows < 0 || opts.maxRows > 2_147_483_646) throw localFailure('maxRows must be an integer ≥ 0');
      if (typeof opts.maxBytes !== 'number' || !(opts.maxBytes >= 0)) throw localFailure('maxBytes must be a number ≥ 0');
      values = encodeParams(params);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.guard(() => this.doRead(sql, values, opts));
  }

  /**
   * Runs an approved write (sql-safety layer 5) as the writer role: `BEGIN; <statement>; COMMIT` on one
   * connection, the statement over the extended protocol; any error rolls back.
   *
   * @returns rowCount of the statement
   * @throws SourceError: as `read`; 'execution_failed' also when no writer role is configured, or when the
   *   statement ended the transaction itself. An abort after COMMIT was sent is ignored (the outcome is then
   *   the real one, never a false 'cancelled').
   */
  write(sql: string, params: unknown[], opts: { signal?: AbortSignal } = {}): Promise<{ rowCount: number }> {
    if (opts.signal?.aborted) return Promise.reject(new SourceError('cancelled'));
    if (!this.s.writer) return Promise.reject(localFailure('no writer role is configured for this source'));
    let values: unknown[];
    try {
      if (typeof sql !== 'string') throw localFailure('sql must be a string');
      values = encodeParams(params);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.guard(() => this.doWrite(sql, values, opts.signal));
  }

  /**
   * Lends a reader connection (read-only, time-limited) to trusted internal code such as the catalog
   * scanner, through the breaker. `fn` must leave the session as it found it: the connection is
   * destroyed instead of reused when `fn` throws, leaves a transaction open, or changes a reported
   * session parameter. Errors are classified like a read's.
   */
  withReader<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    return this.guard(() => this.doWithReader(fn));
  }

  /** Shuts the breaker down and ends both pools (waits for connections in use to be returned). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.breaker.shutdown();
    const pools = [this.readerPool, this.writerPool].filter((p): p is pg.Pool => p !== null);
    this.readerPool = null;
    this.writerPool = null;
    await Promise.all(pools.map((p) => p.end().catch((err: unknown) => this.logger?.warn({ err }, 'pool end failed'))));
  }

  // ---------------------------------------------------------------------------------------------

  /** Runs `fn` through the breaker, mapping the breaker's own rejections to SourceErrors. */
  private guard<T>(fn: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(localFailure('the source connector is closed'));
    return (this.breaker.fire(fn) as Promise<T>).catch((err: unknown) => {
      if (err instanceof SourceError) throw err;
      const code = (err as { code?: unknown })?.code;
      if (code === 'EOPENBREAKER') throw new SourceError('circuit_open');
      if (code === 'ESHUTDOWN') throw localFailure('the source connector is closed');
      throw this.fail(err, 'query');
    });
  }

  private pool(kind: 'reader' | 'writer'): pg.Pool {
    if (this.closed) throw localFailure('the source connector is closed');
    const existing = kind === 'reader' ? this.readerPool : this.writerPool;
    if (existing) return existing;
    const who = kind === 'reader' ? this.s.reader : this.s.writer!;
    // A password *function*: pg then never falls back to PGPASSWORD or ~/.pgpass for a source.
    const password = who.password ?? '';
    const pool = new pg.Pool({
      host: this.s.host,
      port: this.s.port,
      database: this.s.database,
      user: who.user,
      password: () => password,
      ssl: this.ssl,
      options: startupOptions(this.s, kind === 'reader'),
      application_name: applicationName(this.sourceId, kind),
      max: kind === 'reader' ? this.s.poolSize : Math.min(2, this.s.poolSize),
      idleTimeoutMillis: 30_000,
      connectionTimeoutMillis: this.s.connectTimeout,
      allowExitOnIdle: true,
      keepAlive: true,
    });
    // An idle pooled connection that dies (server restart, network) is dropped by the pool; log it only.
    pool.on('error', (err) => {
      delete (err as { client?: unknown }).client; // pg-pool attaches the whole client (connection parameters, cancel key): log the error alone
      this.logger?.warn({ err, pool: kind }, 'idle source connection failed');
    });
    if (kind === 'reader') this.readerPool = pool;
    else this.writerPool = pool;
    return pool;
  }

  private fail(err: unknown, phase: FailurePhase, extra: { cancelledByCaller?: boolean; watchdogFired?: boolean } = {}): SourceError {
    const se = classifyFailure(err, { phase, tlsConfigured: this.s.tls.mode !== 'off', ...extra });
    const cause = internalCause(se) ?? err;
    if (se.sourceFailure) this.logger?.warn({ err: cause, code: se.code, sql_state: se.sqlState, phase }, 'source failure');
    else if (se.code === 'execution_failed') this.logger?.debug({ err: cause, code: se.code, sql_state: se.sqlState, phase }, 'statement failed');
    return se;
  }

  /** Checks a connection out of a pool; an abort while waiting rejects at once with 'cancelled'. */
  private checkout(kind: 'reader' | 'writer', signal?: AbortSignal): Promise<pg.PoolClient> {
    const pool = this.pool(kind);
    return new Promise<pg.PoolClient>((resolve, reject) => {
      let done = false;
      const onAbort = () => {
        if (done) return;
        done = true;
        reject(new SourceError('cancelled'));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      pool.connect().then(
        (c) => {
          signal?.removeEventListener('abort', onAbort);
          if (done) {
            c.release(); // the caller gave up while waiting; the connection itself is clean
            return;
          }
          done = true;
          resolve(c);
        },
        (err: unknown) => {
          signal?.removeEventListener('abort', onAbort);
          if (done) return;
          done = true;
          reject(this.fail(err, 'connect'));
        },
      );
    });
  }

  /**
   * Sends one cancel for the statement `client`'s backend runs: the protocol's CancelRequest to the
   * very server the connection is on (over TLS when TLS is configured), or, if that cannot be sent,
   * pg_cancel_backend from a separate connection of the same role. Never rejects.
   */
  private async sendCancel(client: pg.PoolClient, kind: 'reader' | 'writer'): Promise<void> {
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
    const fallback = new pg.Client({
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
   */
  private cancelAndDrop(client: pg.PoolClient, kind: 'reader' | 'writer', ended: Promise<void>): void {
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
    void (async () => {
      for (let attempt = 1; attempt <= CANCEL_ATTEMPTS && !over; attempt++) {
        await this.sendCancel(client, kind);
        await pause();
      }
      if (!over) this.logger?.warn({ attempts: CANCEL_ATTEMPTS }, 'statement did not end after cancel requests; dropping the connection');
      client.removeListener('error', onError);
      client.release(true);
    })();
  }

  private doRead(sql: string, values: unknown[], opts: ReadOptions): Promise<ReadResult> {
    const signal = opts.signal;
    return this.checkout('reader', signal).then(
      (client) =>
        new Promise<ReadResult>((resolve, reject) => {
          let settled = false;
          let timer: NodeJS.Timeout | null = null;
          const onClientError = (err: unknown) => {
            // The socket died: pg fails the active query right after; finish() handles it.
            this.logger?.debug({ err }, 'reader connection error');
          };
          const settle = () => {
            settled = true;
            if (timer) clearTimeout(timer);
            signal?.removeEventListener('abort', onAbort);
            client.removeListener('error', onClientError);
          };
          /** The statement ended on the wire (result, error, or lost connection). */
          const finish = (err: unknown) => {
            if (settled) return;
            settle();
            if (err === null && q.unexpected === null) {
              const tx = (client as unknown as ClientInternals).getTransactionStatus?.();
              client.release(tx !== 'I');
              resolve(q.result());
              return;
            }
            const se = err === null ? this.fail(localFailure(`unexpected protocol traffic (${q.unexpected})`), 'query') : this.fail(err, 'query');
            // Keep the connection only after a plain statement error from the server.
            const keep = err !== null && q.unexpected === null && isServerError(err) && !isFatalServerError(err) && se.code === 'execution_failed' && !se.sourceFailure;
            client.release(!keep);
            reject(se);
          };
          /** The caller gave up (abort) or the client-side watchdog fired: answer now, cancel, then drop. */
          const giveUp = (how: 'cancelled' | 'watchdog') => {
            if (settled) return;
            settle();
            this.cancelAndDrop(client, 'reader', q.ended);
            reject(
              how === 'cancelled'
                ? this.fail(new SourceError('cancelled'), 'query')
                : this.fail(new Error('client-side watchdog: no answer within statement_timeout'), 'query', { watchdogFired: true }),
            );
          };
          const onAbort = () => giveUp('cancelled');
          const q = new PortalRead(sql, values, opts.maxRows, opts.maxBytes, finish);
          client.on('error', onClientError);
          if (signal?.aborted) {
            settle();
            client.release();
            reject(new SourceError('cancelled'));
            return;
          }
          signal?.addEventListener('abort', onAbort, { once: true });
          if (this.s.statementTimeout > 0) timer = setTimeout(() => giveUp('watchdog'), this.s.statementTimeout + WATCHDOG_GRACE_MS);
          client.query(q as unknown as pg.Submittable);
        }),
    );
  }

  private doWrite(sql: string, values: unknown[], signal?: AbortSignal): Promise<{ rowCount: number }> {
    return this.checkout('writer', signal).then(
      (client) =>
        new Promise<{ rowCount: number }>((resolve, reject) => {
          const c = client as unknown as ClientInternals;
          let phase: 'begin' | 'statement' | 'commit' = 'begin';
          let settled = false;
          let gaveUp = false;
          let timer: NodeJS.Timeout | null = null;
          let markEnded!: () => void;
          const ended = new Promise<void>((r) => (markEnded = r));
          const onClientError = (err: unknown) => this.logger?.debug({ err }, 'writer connection error');
          const settle = () => {
            settled = true;
            if (timer) clearTimeout(timer);
            signal?.removeEventListener('abort', onAbort);
            client.removeListener('error', onClientError);
          };
          /** Abort or watchdog: answer now, stop the remaining steps, cancel, then drop the connection (its open transaction dies with it). */
          const giveUp = (how: 'cancelled' | 'watchdog') => {
            if (settled) return;
            if (how === 'cancelled' && phase === 'commit') return; // once COMMIT is sent, report the real outcome
            const inCommit = phase === 'commit';
            gaveUp = true;
            settle();
            this.cancelAndDrop(client, 'writer', ended);
            reject(
              how === 'cancelled'
                ? new SourceError('cancelled')
                : inCommit
                  ? new SourceError('execution_failed', { sourceFailure: true, message: 'tool execution failed: the source did not confirm the commit; the outcome is unknown' })
                  : this.fail(new Error('client-side watchdog'), 'query', { watchdogFired: true }),
            );
          };
          const onAbort = () => giveUp('cancelled');
          client.on('error', onClientError);
          signal?.addEventListener('abort', onAbort, { once: true });
          if (this.s.statementTimeout > 0) timer = setTimeout(() => giveUp('watchdog'), this.s.statementTimeout + 2 * WATCHDOG_GRACE_MS);
          const stopIfGivenUp = () => {
            if (gaveUp) throw new SourceError('cancelled');
          };
          const run = async (): Promise<number> => {
            await client.query('BEGIN');
            stopIfGivenUp();
            phase = 'statement';
            const r = await client.query({ text: sql, values, queryMode: 'extended' } as pg.QueryConfig);
            stopIfGivenUp();
            if (c.getTransactionStatus?.() !== 'T') throw localFailure('the statement ended its transaction');
            phase = 'commit';
            await client.query('COMMIT');
            if (c.getTransactionStatus?.() !== 'I') throw localFailure('the transaction did not end');
            return r.rowCount ?? 0;
          };
          const ran = run();
          ran.then(markEnded, markEnded);
          ran.then(
            (rowCount) => {
              if (settled) return;
              settle();
              client.release();
              resolve({ rowCount });
            },
            async (err: unknown) => {
              if (settled) return;
              const se = this.fail(err, 'query');
              const plain = isServerError(err) && !isFatalServerError(err) && se.code === 'execution_failed' && !se.sourceFailure;
              let keep = false;
              if (plain && phase !== 'commit') {
                try {
                  await client.query('ROLLBACK');
                  keep = c.getTransactionStatus?.() === 'I';
                } catch {
                  keep = false;
                }
              } else if (plain) {
                keep = c.getTransactionStatus?.() === 'I'; // a failed COMMIT rolls back by itself
              }
              if (settled) return;
              settle();
              client.release(!keep);
              reject(se);
            },
          );
        }),
    );
  }

  private async doWithReader<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await this.checkout('reader');
    const conn = (client as unknown as ClientInternals).connection;
    let changed = false;
    const onParam = () => {
      changed = true;
    };
    const onClientError = (err: unknown) => this.logger?.debug({ err }, 'reader connection error');
    client.on('error', onClientError);
    conn.on('parameterStatus', onParam);
    let result: T;
    try {
      result = await fn(client);
    } catch (err) {
      conn.removeListener('parameterStatus', onParam);
      client.removeListener('error', onClientError);
      client.release(true);
      throw err instanceof SourceError ? err : this.fail(err, 'query');
    }
    conn.removeListener('parameterStatus', onParam);
    client.removeListener('error', onClientError);
    const tx = (client as unknown as ClientInternals).getTransactionStatus?.();
    client.release(changed || tx !== 'I');
    return result;
  }
}
