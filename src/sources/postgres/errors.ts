/**
 * Errors of the PostgreSQL source connector, and how raw driver failures are classified.
 *
 * Contract ("Unavailable or unknown source" and the opaque failure rule, spec/errors-v1.json):
 * a connector failure reaches the pipeline only as a `SourceError` whose `code` is one of
 * `circuit_open`, `source_unavailable`, `upstream_tls_refused`, `session_settings_mismatch`,
 * `statement_timeout` (refusals, status `unavailable`),
 * `cancelled` (tool error) or `execution_failed` (the opaque "tool execution failed").
 *
 * The `message` of a SourceError is SAFE to show an agent: it never holds a host name, address,
 * port, user name, database name or any driver / server text (server messages can quote values,
 * object names and addresses). The raw driver error is kept as the non-enumerable `cause` for the
 * operator's logs only; `toJSON()` leaves it (and the SQLSTATE) out, so `JSON.stringify(err)` is
 * safe as well.
 */
import { refusalInfo, toolErrorInfo } from '../../errors/vocabulary';
import { isLocalWireError, serverErrorCountsAgainstSource } from './health';
import { isSessionSettingsMismatch } from './session-settings';

/** The connector's failure vocabulary (see the module comment for the contract mapping). */
export type SourceErrorCode =
  | 'circuit_open'
  | 'source_unavailable'
  | 'upstream_tls_refused'
  | 'session_settings_mismatch'
  | 'statement_timeout'
  | 'source_busy'
  | 'concurrency_limited'
  | 'result_too_large'
  | 'cancelled'
  | 'outcome_unknown'
  | 'execution_failed';

/** The contract code each SourceErrorCode maps to (a refusal code or a tool-error code of spec/errors-v1.json). */
export const CONTRACT_CODE: Record<SourceErrorCode, string> = {
  circuit_open: 'circuit_open',
  source_unavailable: 'source_unavailable',
  upstream_tls_refused: 'upstream_tls_refused',
  session_settings_mismatch: 'session_settings_mismatch',
  statement_timeout: 'statement_timeout',
  source_busy: 'source_busy',
  concurrency_limited: 'concurrency_limited',
  result_too_large: 'result_too_large',
  cancelled: 'cancelled',
  /** An approved write whose COMMIT got no answer and whose transaction's status could not be learnt (write.ts); never a read's. */
  outcome_unknown: 'tool_execution_failed',
  execution_failed: 'tool_execution_failed',
};

/** The safe default message of a code, read from spec/errors-v1.json. */
export function defaultMessage(code: SourceErrorCode): string {
  switch (code) {
    case 'circuit_open':
    case 'source_unavailable':
    case 'upstream_tls_refused':
    case 'session_settings_mismatch':
    case 'statement_timeout':
    case 'source_busy':
    case 'concurrency_limited':
    case 'result_too_large':
      return refusalInfo(code).message;
    case 'cancelled':
      return toolErrorInfo('cancelled').message;
    default:
      return toolErrorInfo('tool_execution_failed').message;
  }
}

/** Options of a SourceError beyond its code. */
export interface SourceErrorOptions {
  /** Safe message override. Callers must only pass fixed text (never driver or server text). */
  message?: string;
  /** The raw failure, kept non-enumerable for logs only. */
  cause?: unknown;
  /** SQLSTATE of a statement error raised by the server (5 characters), when there was one. */
  sqlState?: string;
  /** True when this failure counts against the source's circuit breaker (see health.ts). */
  sourceFailure?: boolean;
  /** For `concurrency_limited` and `source_busy`: when a retry may succeed (ms). */
  retryAfterMs?: number;
}

/**
 * A connector failure. `code` is the machine key; `message` is safe prose (see module comment);
 * `sqlState` is the server's SQLSTATE for statement errors (e.g. "42703"; safe, but it can tell an
 * undefined object from a permission error, so the pipeline decides whether to show it);
 * `sourceFailure` says whether the breaker counted it; `cause` (non-enumerable) is the raw error.
 */
export class SourceError extends Error {
  readonly code: SourceErrorCode;
  readonly sqlState?: string;
  readonly sourceFailure: boolean;
  /** When a retry may succeed (ms), for `concurrency_limited` and `source_busy`. */
  readonly retryAfterMs?: number;
  /**
   * Settles once the failed statement's connection has left the pool, when the call gave up before
   * the statement ended (cancelled, watchdog): the connector holds the identity's slot until then.
   */
  connectionReleased?: Promise<void>;
  declare readonly cause?: unknown;

  constructor(code: SourceErrorCode, opts: SourceErrorOptions = {}) {
    super(opts.message ?? defaultMessage(code));
    this.name = 'SourceError';
    this.code = code;
    if (opts.sqlState !== undefined) this.sqlState = opts.sqlState;
    this.sourceFailure = opts.sourceFailure ?? false;
    if (opts.retryAfterMs !== undefined) this.retryAfterMs = opts.retryAfterMs;
    if (opts.cause !== undefined) {
      Object.defineProperty(this, 'cause', { value: opts.cause, enumerable: false, writable: false, configurable: true });
    }
  }

  /** The contract code (spec/errors-v1.json) this failure maps to. */
  get contractCode(): string {
    return CONTRACT_CODE[this.code];
  }

  /** Only the safe fields: `{name, code, message}`. */
  toJSON(): { name: string; code: SourceErrorCode; message: string } {
    return { name: this.name, code: this.code, message: this.message };
  }
}

/** PostgreSQL SQLSTATE class names (Appendix A of the PostgreSQL manual), keyed by the first two characters. */
export const SQLSTATE_CLASS_NAMES: Readonly<Record<string, string>> = {
  '00': 'successful_completion',
  '01': 'warning',
  '02': 'no_data',
  '03': 'sql_statement_not_yet_complete',
  '08': 'connection_exception',
  '09': 'triggered_action_exception',
  '0A': 'feature_not_supported',
  '0B': 'invalid_transaction_initiation',
  '0F': 'locator_exception',
  '0L': 'invalid_grantor',
  '0P': 'invalid_role_specification',
  '0Z': 'diagnostics_exception',
  '20': 'case_not_found',
  '21': 'cardinality_violation',
  '22': 'data_exception',
  '23': 'integrity_constraint_violation',
  '24': 'invalid_cursor_state',
  '25': 'invalid_transaction_state',
  '26': 'invalid_sql_statement_name',
  '27': 'triggered_data_change_violation',
  '28': 'invalid_authorization_specification',
  '2B': 'dependent_privilege_descriptors_still_exist',
  '2D': 'invalid_transaction_termination',
  '2F': 'sql_routine_exception',
  '34': 'invalid_cursor_name',
  '38': 'external_routine_exception',
  '39': 'external_routine_invocation_exception',
  '3B': 'savepoint_exception',
  '3D': 'invalid_catalog_name',
  '3F': 'invalid_schema_name',
  '40': 'transaction_rollback',
  '42': 'syntax_error_or_access_rule_violation',
  '44': 'with_check_option_violation',
  '53': 'insufficient_resources',
  '54': 'program_limit_exceeded',
  '55': 'object_not_in_prerequisite_state',
  '57': 'operator_intervention',
  '58': 'system_error',
  '72': 'snapshot_too_old',
  F0: 'config_file_error',
  HV: 'fdw_error',
  P0: 'plpgsql_error',
  XX: 'internal_error',
};

/** The class name of a SQLSTATE ("23505" → "integrity_constraint_violation"); "unknown_class" otherwise. */
export function sqlStateClassName(sqlState: string): string {
  return SQLSTATE_CLASS_NAMES[sqlState.slice(0, 2).toUpperCase()] ?? 'unknown_class';
}

/** SQLSTATE of query cancellation: by statement_timeout, by a cancel request, or a COPY failure. */
export const SQLSTATE_QUERY_CANCELED = '57014';


/** A server-side error (ErrorResponse) as pg-protocol reports it: a DatabaseError with a SQLSTATE. */
export interface ServerError {
  code: string;
  severity?: string;
  message: string;
}

/**
 * True for an error-shaped object. Duck-typed on purpose: errors raised by Node itself (sockets,
 * TLS, DNS) can come from another realm (e.g. a test sandbox), where `instanceof Error` is false.
 */
function isErrorLike(err: unknown): err is { message: string; code?: unknown; cause?: unknown } {
  return typeof err === 'object' && err !== null && typeof (err as { message?: unknown }).message === 'string';
}

/** True for a server ErrorResponse (pg's DatabaseError), i.e. an error with a 5-character SQLSTATE and a severity. */
export function isServerError(err: unknown): err is ServerError {
  if (!isErrorLike(err)) return false;
  const e = err as { code?: unknown; severity?: unknown };
  return typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code) && typeof e.severity === 'string';
}

/** True for a fatal server error (the server closes the session after it). */
export function isFatalServerError(err: unknown): boolean {
  return isServerError(err) && (err.severity === 'FATAL' || err.severity === 'PANIC');
}

/** pg's message when the server answers the SSL request with "no" (it runs with ssl off). */
const PG_TLS_UNSUPPORTED = 'The server does not support SSL connections';
/** Driver messages pg uses when the server refuses or breaks the SSL negotiation. */
const PG_TLS_MESSAGES = new Set([PG_TLS_UNSUPPORTED, 'There was an error establishing an SSL connection']);

/**
 * True when `err` (or an error in its `cause` chain) says the server does not accept TLS at all (it
 * answered the SSL request with "no": ssl is off there), as opposed to a failed handshake or
 * certificate check (task hnu41 item 5: a CA file cannot help then).
 */
export function isTlsUnsupported(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; isErrorLike(e) && depth < 5; e = e.cause, depth++) if ((e as { message: string }).message === PG_TLS_UNSUPPORTED) return true;
  return false;
}
/** Node/OpenSSL error codes of failed TLS handshakes and certificate checks. */
const TLS_CODE = /^(ERR_TLS_|ERR_SSL_|ERR_OSSL_|CERT_|UNABLE_TO_|DEPTH_ZERO_SELF_SIGNED_CERT$|SELF_SIGNED_CERT_IN_CHAIN$|HOSTNAME_MISMATCH$|INVALID_CA$|INVALID_PURPOSE$|EPROTO$)/;

/**
 * True when `err` (or an error in its `cause` chain) is a refused or failed TLS negotiation or
 * handshake: the server answered "no SSL", the handshake failed, or certificate / host-name
 * verification failed. Only meaningful for errors raised while connecting with TLS configured.
 */
export function isTlsFailure(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; isErrorLike(e) && depth < 5; e = e.cause, depth++) {
    const x = e as { message: string; code?: unknown; library?: unknown };
    if (PG_TLS_MESSAGES.has(x.message)) return true;
    if (typeof x.code === 'string' && TLS_CODE.test(x.code)) return true;
    if (typeof x.library === 'string' && /ssl/i.test(x.library)) return true;
  }
  return false;
}

/** What a Node socket / DNS error code means, in words (connectFailureText). */
const NETWORK_WORDS: Readonly<Record<string, string>> = {
  ECONNREFUSED: 'connection refused', ENOTFOUND: 'host name not found', EAI_AGAIN: 'host name not found (DNS did not answer)',
  EAI_FAIL: 'host name not found', EAI_NONAME: 'host name not found', ETIMEDOUT: 'no answer in time', EHOSTUNREACH: 'host unreachable',
  EHOSTDOWN: 'host unreachable', ENETUNREACH: 'network unreachable', ENETDOWN: 'network unreachable', ECONNRESET: 'connection reset',
  ECONNABORTED: 'connection aborted', EPIPE: 'connection closed', EADDRNOTAVAIL: 'address not available',
};

/**
 * Why a connection to a source could not be opened, in a fixed vocabulary for operators' messages
 * (scan, row views, admin API answers): the cause's class in words and, for a refusal by the
 * server, its SQLSTATE and condition class (e.g. "the server refused: 28P01
 * invalid_authorization_specification"). Never the driver's or server's text, a host, an address,
 * a port or a role name (Standards: no raw upstream error reaches a client; red team rths).
 */
export function connectFailureText(err: unknown): string {
  if (isSessionSettingsMismatch(err)) return 'the connection does not hold the pinned session settings';
  if (isServerError(err)) return `the server refused: ${err.code} ${sqlStateClassName(err.code)}`;
  if (isTlsUnsupported(err)) return 'the server does not support TLS connections';
  if (isTlsFailure(err)) return 'TLS negotiation or certificate verification failed';
  for (let e: unknown = err, depth = 0; isErrorLike(e) && depth < 5; e = e.cause, depth++) {
    const x = e as { message: string; code?: unknown };
    if (typeof x.code === 'string' && NETWORK_WORDS[x.code]) return NETWORK_WORDS[x.code];
    if (UNREACHABLE_MESSAGES.has(x.message)) return /timeout/.test(x.message) ? 'no answer within the connect timeout' : 'the server closed the connection';
  }
  return 'the connection failed';
}

/** Where a failure happened: while getting a connection, or while running the statement on one. */
export type FailurePhase = 'connect' | 'query';

/** Facts the connector knows about a failed call, beyond the raw error. */
export interface FailureContext {
  phase: FailurePhase;
  /** TLS is configured for the source (mode other than off). */
  tlsConfigured: boolean;
  /** The connector itself cancelled the statement because the caller's signal aborted. */
  cancelledByCaller?: boolean;
  /** The connector's client-side watchdog fired (the server did not end the statement in time). */
  watchdogFired?: boolean;
}

/** Retry hint of a `source_busy` answer (ms). */
export const SOURCE_BUSY_RETRY_MS = 1_000;

/** pg-pool's error when no pooled connection became free within the connect timeout (local saturation, not a source failure). */
const POOL_WAIT_TIMEOUT = 'timeout exceeded when trying to connect';

/** Node socket / DNS error codes of a server that cannot be reached (refused, unknown host, no route, reset, timed out). */
const UNREACHABLE_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EAI_FAIL', 'EAI_NONAME', 'ETIMEDOUT', 'EHOSTUNREACH', 'EHOSTDOWN',
  'ENETUNREACH', 'ENETDOWN', 'ECONNRESET', 'ECONNABORTED', 'EPIPE', 'EADDRNOTAVAIL',
]);
/** pg's messages when the server closes a connection that is being opened, or the connect timeout passes. */
const UNREACHABLE_MESSAGES: ReadonlySet<string> = new Set([
  'Connection terminated unexpectedly',
  'Connection terminated due to connection timeout',
  'Connection terminated',
  'connection timeout',
]);
/**
 * SQLSTATE classes / codes a server answers while a connection is opened when the source cannot be
 * used: 08 connection exception, 28 invalid authorization (28P01 password, 28000 no pg_hba entry or
 * role), 3D invalid catalog name (3D000: the database does not exist, e.g. dropped), 53 (53300 too
 * many connections), and 57P01/57P02/57P03 (admin or crash shutdown, cannot connect now).
 */
function isUnavailableServerCode(sqlState: string): boolean {
  const cls = sqlState.slice(0, 2);
  return cls === '08' || cls === '28' || cls === '3D' || sqlState === '53300' || sqlState === '57P01' || sqlState === '57P02' || sqlState === '57P03';
}

/**
 * True when a failure raised while opening a connection means the source's server cannot be used
 * now (see UNREACHABLE_CODES, UNREACHABLE_MESSAGES and isUnavailableServerCode); walks `cause`
 * up to 5 levels. Only meaningful for the connect phase.
 */
export function isSourceUnreachable(err: unknown): boolean {
  if (isServerError(err)) return isUnavailableServerCode(err.code);
  for (let e: unknown = err, depth = 0; isErrorLike(e) && depth < 5; e = e.cause, depth++) {
    const x = e as { message: string; code?: unknown };
    if (typeof x.code === 'string' && UNREACHABLE_CODES.has(x.code)) return true;
    if (UNREACHABLE_MESSAGES.has(x.message)) return true;
  }
  return false;
}

/**
 * SQLSTATEs of the FATAL a server sends when it ends a session that did nothing wrong: 57P01
 * admin_shutdown (pg_terminate_backend, a fast or smart shutdown), 57P02 crash_shutdown, 57P03
 * cannot_connect_now, 57P05 idle_session_timeout (PostgreSQL 14+).
 */
const SESSION_ENDED_CODES: ReadonlySet<string> = new Set(['57P01', '57P02', '57P03', '57P05']);
/** Node socket error codes of a connection the other side had closed before it read what was sent. */
const CONNECTION_LOST_CODES: ReadonlySet<string> = new Set(['ECONNRESET', 'EPIPE', 'ECONNABORTED']);

/**
 * True when `err`, the first thing a call on an open connection got back (its caller checks that
 * nothing else came first), says the session was gone before the server could run what the call
 * sent: a FATAL of SESSION_ENDED_CODES (the server flushes what it had buffered for a statement
 * before its FATAL, so a FATAL with nothing before it ended the session before the statement ran),
 * or a reset or broken socket (ECONNRESET, EPIPE, ECONNABORTED: the other side had closed without
 * reading what was sent, a server process gone or a middlebox that dropped the flow). Not pg's
 * "Connection terminated unexpectedly" (the socket's plain end): a server executing a statement has
 * not flushed anything yet either, so a connection cut mid-statement looks the same (task hidle).
 */
export function isConnectionLost(err: unknown): boolean {
  if (isServerError(err)) return isFatalServerError(err) && SESSION_ENDED_CODES.has(err.code);
  return isErrorLike(err) && typeof err.code === 'string' && CONNECTION_LOST_CODES.has(err.code);
}

/**
 * Classifies a raw failure into a SourceError (safe message, raw error kept as `cause`).
 *
 * - cancelled by the caller → `cancelled` (not a source failure).
 * - SQLSTATE 57014 not caused by our cancel (the server enforced statement_timeout) →
 *   `statement_timeout`, NOT a source failure: the server is up and did its job, and the cost is the
 *   statement's own (otherwise one agent's slow queries would open the circuit for every agent).
 * - the client-side watchdog fired (the server did not answer at all, even past statement_timeout;
 *   not counted here: read.ts counts it only when a fresh connection's probe gets no answer either)
 *   → `statement_timeout`, a source failure (the source is unresponsive).
 * - while connecting with TLS configured, a TLS failure → `upstream_tls_refused` (counts).
 * - a connection that does not hold the pinned session settings (pinned-client.ts; issue 22 item 2)
 *   → `session_settings_mismatch` (counts: the source is misconfigured for every caller, not the
 *   statement; the operator's log line names the setting and the server's value).
 * - while connecting, the server cannot be used (refused, DNS, no route, reset or terminated,
 *   connect timeout, authentication 28, unknown database 3D000, too many connections 53300,
 *   shutting down or starting up 57P01/57P02/57P03, class 08; isSourceUnreachable) →
 *   `source_unavailable` (status unavailable, retryable; counts). Waiting for a free pooled
 *   connection (local saturation) → `source_busy` (does not count). Anything else while
 *   connecting → opaque `execution_failed` (counts).
 * - while running: a server error that health.ts counts (08, 57 but 57014, 58, F0, XX001/2,
 *   FATAL/PANIC; not 53: rt49b D2) → opaque `execution_failed` (counts); any other server error is the statement's
 *   own (syntax, permission, constraint, read-only violation, lock timeout, XX000 from argument
 *   input, …) → `execution_failed` naming only the SQLSTATE class, with `sqlState` set (does not
 *   count); the gateway's own wire-guard failure → opaque (does not count); any other non-server
 *   error (socket closed, protocol error) → opaque `execution_failed` (counts).
 */
export function classifyFailure(err: unknown, ctx: FailureContext): SourceError {
  if (err instanceof SourceError) return err;
  if (ctx.cancelledByCaller) return new SourceError('cancelled', { cause: err });
  // The statement outlived statement_timeout and the cancel. Not counted here: read.ts probes the
  // source on a fresh connection and counts it only when the source does not answer (red-team F2).
  if (ctx.watchdogFired) return new SourceError('statement_timeout', { cause: err, sourceFailure: false });
  if (isSessionSettingsMismatch(err)) return new SourceError('session_settings_mismatch', { cause: err, sourceFailure: true });
  if (isServerError(err)) {
    if (err.code === SQLSTATE_QUERY_CANCELED) return new SourceError('statement_timeout', { cause: err, sourceFailure: false, sqlState: err.code });
    if (ctx.phase === 'connect' && isUnavailableServerCode(err.code)) return new SourceError('source_unavailable', { cause: err, sourceFailure: true });
    if (ctx.phase === 'connect' || serverErrorCountsAgainstSource(err.code, err.severity)) {
      return new SourceError('execution_failed', { cause: err, sourceFailure: true, sqlState: err.code });
    }
    return new SourceError('execution_failed', {
      cause: err,
      sourceFailure: false,
      sqlState: err.code,
      message: `${defaultMessage('execution_failed')}: the statement failed (${sqlStateClassName(err.code)})`,
    });
  }
  if (ctx.phase === 'connect') {
    if (ctx.tlsConfigured && isTlsFailure(err)) return new SourceError('upstream_tls_refused', { cause: err, sourceFailure: true });
    if (isErrorLike(err) && err.message === POOL_WAIT_TIMEOUT) return new SourceError('source_busy', { cause: err, sourceFailure: false, retryAfterMs: SOURCE_BUSY_RETRY_MS });
    if (isSourceUnreachable(err)) return new SourceError('source_unavailable', { cause: err, sourceFailure: true });
  }
  if (isLocalWireError(err)) return new SourceError('execution_failed', { cause: err, sourceFailure: false });
  return new SourceError('execution_failed', { cause: err, sourceFailure: true });
}

/** A fixed-text SourceError for a failure the connector detects itself (never counts against the source). */
export function localFailure(message: string, cause?: unknown): SourceError {
  return new SourceError('execution_failed', { message: `${defaultMessage('execution_failed')}: ${message}`, cause, sourceFailure: false });
}

/** The raw cause of a SourceError (for logs only), or the value itself. */
export function internalCause(err: unknown): unknown {
  return err instanceof SourceError ? err.cause : err;
}
