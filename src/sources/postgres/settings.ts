/**
 * Settings of a PostgreSQL source: their shapes, defaults and checks, and what they become on the
 * wire (TLS options, the `options` startup parameter, application_name). Pure functions only.
 */
import net from 'node:net';
import tls from 'node:tls';
import { localFailure } from './errors';
import { pinnedStartupOptions } from './session-settings';

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
  /**
   * Statements one identity may run at the same time on this source (default: half the pool,
   * rounded up, and never more than pool_size - 1 when the pool has more than one connection).
   * A call beyond it waits up to `identity_wait_ms`, then is refused `concurrency_limited`
   * (status rate_limited, with retry_after_ms).
   */
  max_concurrent_per_identity?: number;
  /** Longest wait for a free per-identity slot (ms, default 2000). */
  identity_wait_ms?: number;
  breaker?: {
    /**
     * Consecutive source failures that open the circuit (default 5): failures to connect (refused,
     * DNS, timeout, authentication, TLS), lost connections, server-side faults (health.ts: SQLSTATE
     * classes 08, 57 but 57014, 58, F0, XX001/XX002, FATAL/PANIC; class 53 only while connecting), and a server that
     * does not answer at all. Not counted: the statement's own errors (XX000 from argument input
     * included), server-enforced statement timeouts, cancellations, the wire budget, local pool
     * saturation.
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
  identity_wait_ms: 2_000,
} as const;

/** Default per-identity cap for a pool of `poolSize` connections: ceil(poolSize / 2), below poolSize when poolSize > 1. */
export function defaultConcurrentPerIdentity(poolSize: number): number {
  return Math.max(1, Math.min(Math.ceil(poolSize / 2), poolSize - 1));
}


/** Settings with every default applied and checked (times in ms, sizes in connections). */
export interface Resolved {
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
  /** Statements one identity may run at once on this source (below poolSize by default). */
  maxConcurrentPerIdentity: number;
  /** Longest wait for one of the identity's own slots before the call is refused (ms). */
  identityWaitMs: number;
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
  const maxConcurrentPerIdentity = nonNegInt(s.max_concurrent_per_identity, defaultConcurrentPerIdentity(poolSize), 'max_concurrent_per_identity');
  if (maxConcurrentPerIdentity < 1) throw localFailure('invalid source settings (max_concurrent_per_identity)');
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
    maxConcurrentPerIdentity,
    identityWaitMs: nonNegInt(s.identity_wait_ms, DEFAULT_SETTINGS.identity_wait_ms, 'identity_wait_ms'),
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

/**
 * The `-c search_path=…` startup option pinning a connection's lookup path to `schemas` (task hrt42,
 * red team rt42 G3/G4): each schema quoted as an identifier, joined by commas; in the options
 * string a backslash and a space are escaped with a backslash (the server splits options on
 * unescaped whitespace). Startup options win over ALTER ROLE / ALTER DATABASE … SET search_path, and
 * no `"$user"` entry is left to pick up a schema created later.
 */
export function searchPathOption(schemas: readonly string[]): string {
  return '-c search_path=' + searchPathValue(schemas).replace(/[\\\s]/g, (c) => '\\' + c);
}

/** The search_path value naming `schemas`: each quoted as an identifier, joined by commas. */
export function searchPathValue(schemas: readonly string[]): string {
  return schemas.map((s) => '"' + s.replace(/"/g, '""') + '"').join(',');
}

/**
 * Most bytes the search_path startup option may take. The server refuses a startup packet over
 * 10 000 bytes (it resets the connection); the rest of it (user, database, application name, the
 * other options) stays far below the remainder. A longer path is set by the connection's first
 * statement instead (pinned-client.ts `pinnedPoolOptions`; red team rt42c P1).
 */
export const SEARCH_PATH_OPTION_MAX_BYTES = 4096;

/** True when the path pinned to `schemas` fits in the startup packet (SEARCH_PATH_OPTION_MAX_BYTES). */
export function searchPathFitsStartup(schemas: readonly string[]): boolean {
  return Buffer.byteLength(searchPathOption(schemas)) <= SEARCH_PATH_OPTION_MAX_BYTES;
}

/**
 * The `options` startup parameter: the pinned session settings (session-settings.ts, issue 22 item 2),
 * read-only (reader only) and the three timeouts, fixed for the connection's life.
 */
export function startupOptions(r: Pick<Resolved, 'statementTimeout' | 'lockTimeout' | 'idleInTxTimeout'>, readOnly: boolean, searchPath?: readonly string[] | null): string {
  return [
    pinnedStartupOptions(),
    ...(searchPath && searchPath.length > 0 && searchPathFitsStartup(searchPath) ? [searchPathOption(searchPath)] : []),
    `-c default_transaction_read_only=${readOnly ? 'on' : 'off'}`,
    `-c statement_timeout=${r.statementTimeout}`,
    `-c lock_timeout=${r.lockTimeout}`,
    `-c idle_in_transaction_session_timeout=${r.idleInTxTimeout}`,
  ].join(' ');
}


/** application_name of a source's connections: `interlock:<source id>:<kind>` (63 bytes at most). */
export function applicationName(sourceId: string, kind: string): string {
  return `interlock:${sourceId.replace(/[^A-Za-z0-9_.:-]/g, '_')}:${kind}`.slice(0, 63);
}
