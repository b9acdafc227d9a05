/**
 * Which failures say a source is unhealthy (issue 10, Build 4). Pure functions, no I/O.
 *
 * The circuit breaker counts only these, so that no agent can open a source's circuit for the
 * others with statements of its own making. Counted: the link or the server is in trouble —
 * connection exceptions (08), operator intervention such as shutdown, crash shutdown, "cannot
 * connect now" or a dropped database (57, except 57014 query_canceled), system errors (58),
 * configuration file errors (F0), data or index corruption (XX001, XX002), authentication and
 * unknown-database failures (28, 3D: only ever raised while connecting), and any FATAL or PANIC.
 * Not counted: errors the statement caused — data exceptions (22), syntax or access rules (42),
 * feature not supported (0A), XX000 internal_error (PostgreSQL raises it for bad arguments to input
 * functions such as array_in), program limits (54), transaction rollbacks (40), and every other
 * class. Insufficient resources (53) raised as an ERROR by a running statement are the statement's
 * too (red team rt49b D2): a read of a partitioned table with thousands of partitions asks the
 * server's shared lock table for more entries than it holds (53200 "out of shared memory"), a
 * statement's temporary files pass temp_file_limit (53400) or fill the disk (53100); one identity
 * repeating such a read opened the circuit for every identity. Class 53 still counts while
 * connecting (53300 too many connections; every connect-phase failure counts, errors.ts
 * classifyFailure) and as FATAL or PANIC. SQLSTATEs per PostgreSQL 15's errcodes appendix.
 */
/** SQLSTATE classes that describe the source (server or link), not the statement. */
export const SOURCE_HEALTH_CLASSES: ReadonlySet<string> = new Set(['08', '28', '3D', '57', '58', 'F0']);

/** Individual SQLSTATEs of a counted class that are the statement's own, or of an uncounted class that are the source's. */
// 57014 query_canceled: a timeout or our own cancel.
const NOT_HEALTH_CODES: ReadonlySet<string> = new Set(['57014']);
const HEALTH_CODES: ReadonlySet<string> = new Set(['XX001', 'XX002']); // data_corrupted, index_corrupted

/**
 * True when a server error with SQLSTATE `sqlState` (5 characters) and `severity` (ERROR, FATAL,
 * PANIC…) says the source is unhealthy; false when the statement caused it.
 */
export function serverErrorCountsAgainstSource(sqlState: string, severity?: string): boolean {
  if (severity === 'FATAL' || severity === 'PANIC') return true;
  const code = sqlState.toUpperCase();
  if (NOT_HEALTH_CODES.has(code)) return false;
  if (HEALTH_CODES.has(code)) return true;
  return SOURCE_HEALTH_CLASSES.has(code.slice(0, 2));
}

/** Error code of failures the gateway raises itself on a connection (the wire budget, a parser fault): never the source's health. */
export const LOCAL_WIRE_ERROR_CODE = 'EINTERLOCK_WIRE';

/** True for an error the gateway raised itself on a connection (see LOCAL_WIRE_ERROR_CODE). */
export function isLocalWireError(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === LOCAL_WIRE_ERROR_CODE;
}
