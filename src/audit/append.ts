/**
 * The audit writer's statement on the wire (issue 13): one batch of audit rows stored under a
 * statement_timeout, in one round trip, through two named prepared statements that stay the same
 * whatever the batch (so PostgreSQL parses and plans them once per connection, not per batch):
 *
 *   Parse  interlock_audit_timeout  SELECT set_config('statement_timeout', $1, true)   (first use on a connection)
 *   Parse  interlock_audit_append_v2   SELECT interlock_audit_append_v2($1) AS b   (first use on a connection)
 *   Bind/Execute interlock_audit_timeout ('<ms>')
 *   Bind/Describe/Execute interlock_audit_append_v2 (the batch's canonical text, event-text.ts)
 *   Sync
 *
 * Everything before the Sync is one implicit transaction: set_config(…, true) lasts until its end,
 * and PostgreSQL starts the next Execute's statement timer with the new value, so the append runs
 * under `timeoutMs` and either commits at the Sync or not at all (an error skips to the Sync and
 * rolls back).
 *
 * On a pool whose connections start with a statement_timeout (the gateway's audit pool,
 * openAuditPool: startup option `-c statement_timeout=…`, registered with
 * setSessionStatementTimeout) a batch whose `timeoutMs` is at least that session value needs no
 * set_config: the session's own timeout already ends the append in time. Only then is the
 * interlock_audit_timeout Bind/Execute left out (issue 28: one statement fewer per batch); a batch
 * with less time left than the session value (its events waited in the queue) still sends it. The set of statements parsed on each connection is remembered per pg Connection
 * object (a reconnected client has a new one); a Parse counts only once PostgreSQL confirmed it
 * (ParseComplete), so a batch that failed before or during a Parse parses again next time.
 */
import type pg from 'pg';
import type { WireConnection } from '../sources/postgres/wire';
import { isFatalServerError, isServerError } from '../sources/postgres/errors';

const TIMEOUT_STATEMENT = { name: 'interlock_audit_timeout', text: "SELECT set_config('statement_timeout', $1, true)" };
const APPEND_STATEMENT = { name: 'interlock_audit_append_v2', text: 'SELECT interlock_audit_append_v2($1) AS b' };

/** Names of the statements PostgreSQL confirmed, per connection. */
const parsed = new WeakMap<object, Set<string>>();

/** The statement_timeout (ms) every connection of a pool starts with, per pool (setSessionStatementTimeout). */
const sessionTimeouts = new WeakMap<object, number>();

/**
 * Records that every connection of `pool` starts with statement_timeout `ms` (integer ≥ 1, set by
 * the pool's startup options and never changed at session level), so appendAuditBatch may leave
 * out the per-batch set_config when a batch has at least that much time left. Throws RangeError
 * for a value that is not a whole number ≥ 1.
 */
export function setSessionStatementTimeout(pool: pg.Pool, ms: number): void {
  if (!Number.isInteger(ms) || ms < 1) throw new RangeError(`session statement_timeout must be a whole number of ms ≥ 1, not ${ms}`);
  sessionTimeouts.set(pool, ms);
}

/** A named statement and its parameters (text, a Buffer for binary bytea, or null), run in place of the format-2 append. */
export interface AppendCall {
  statement: { name: string; text: string };
  values: unknown[];
}

/**
 * A pg Submittable storing one batch (see the module comment). `json` is the batch's canonical
 * text (eventsText of normalised rows, event-text.ts) for interlock_audit_append_v2, or the
 * statement and parameters of another append (format 3: chain.ts); `timeoutMs` (integer ≥ 1) the statement_timeout of the append,
 * or null to run it under the session's own statement_timeout (no set_config sent). `onDone` is
 * called once: with the batch id (decimal string) after ReadyForQuery, or with the error
 * (a PostgreSQL DatabaseError with its SQLSTATE in `code`, or a connection error without one).
 */
export class AuditAppend {
  private batchId: string | null = null;
  private error: unknown = null;
  private done = false;
  private described = false;
  private connection: WireConnection | null = null;
  /** Statements whose Parse this submission sent, in order; the k-th ParseComplete confirms the k-th. */
  private pendingParses: string[] = [];
  private readonly onParseComplete = () => {
    const name = this.pendingParses.shift();
    if (name && this.connection) parsedSet(this.connection).add(name);
  };
  /**
   * Set by pg's `Client.query` when the client has a `query_timeout` (the gateway's audit pool,
   * openAuditPool): its wrapper clears the client-side read-timeout timer, so it is called once, when
   * the submission ends (finish). Before h28k nothing called it: every batch's timer stayed armed for
   * the full query_timeout (commit timeout + 1 s), holding the batch (statement values, texts) that
   * long — promoted to the old generation — and then fired, making an Error for a batch long done.
   */
  callback?: (err: unknown, result?: unknown) => void;

  constructor(
    readonly json: string | AppendCall,
    readonly timeoutMs: number | null,
    private readonly onDone: (err: unknown, batchId?: string) => void,
  ) {}

  submit(connection: WireConnection): void {
    this.connection = connection;
    const known = parsedSet(connection);
    connection.on('parseComplete', this.onParseComplete);
    const s = connection.stream;
    s.cork?.();
    try {
      const call: AppendCall = typeof this.json === 'string' ? { statement: APPEND_STATEMENT, values: [this.json] } : this.json;
      for (const st of this.timeoutMs === null ? [call.statement] : [TIMEOUT_STATEMENT, call.statement]) {
        if (known.has(st.name)) continue;
        connection.parse({ name: st.name, text: st.text });
        this.pendingParses.push(st.name);
      }
      if (this.timeoutMs !== null) {
        connection.bind({ portal: '', statement: TIMEOUT_STATEMENT.name, values: [String(this.timeoutMs)] });
        connection.execute({ portal: '', rows: 0 });
      }
      connection.bind({ portal: '', statement: call.statement.name, values: call.values as Array<string | Buffer | null> });
      connection.describe({ type: 'P', name: '' });
      connection.execute({ portal: '', rows: 0 });
      connection.sync();
    } finally {
      s.uncork?.();
    }
  }

  handleRowDescription(): void {
    this.described = true;
  }

  handleDataRow(msg: { fields: Array<string | null> }): void {
    // Only the append is described: set_config's row (sent before it) is ignored.
    const v = msg.fields[0];
    if (this.described && typeof v === 'string' && /^[0-9]+$/.test(v)) this.batchId = v;
  }

  handlePortalSuspended(): void {}

  handleCommandComplete(): void {}

  handleEmptyQuery(): void {}

  handleCopyInResponse(connection: WireConnection): void {
    connection.sendCopyFail('not supported');
  }

  handleCopyData(): void {}

  handleError(err: unknown): void {
    // pg hands an ErrorResponse here and then forgets this submission (the ReadyForQuery that
    // follows is not passed on), as it does for a connection error: either way this is the end.
    this.error ??= err;
    this.finish();
  }

  handleReadyForQuery(): void {
    this.finish();
  }

  private finish(): void {
    if (this.done) return;
    this.done = true;
    this.connection?.removeListener('parseComplete', this.onParseComplete);
    const cb = this.callback;
    this.callback = undefined;
    cb?.(this.error, this.batchId);
    if (this.error) this.onDone(this.error);
    else if (this.batchId === null) this.onDone(new Error('interlock_audit_append_v2 returned no batch id'));
    else this.onDone(null, this.batchId);
  }
}

function parsedSet(connection: object): Set<string> {
  let s = parsed.get(connection);
  if (!s) parsed.set(connection, (s = new Set()));
  return s;
}

/**
 * Whether the client must not go back to the pool: a connection error (no SQLSTATE), a FATAL or
 * PANIC error (the server ends the session, e.g. 57P01 after pg_terminate_backend), or class 08.
 * Statement errors (a timeout 57014, a malformed row 22/23) leave the session usable.
 */
export function isConnectionError(err: unknown): boolean {
  if (!isServerError(err)) return true;
  return isFatalServerError(err) || err.code.startsWith('08') || err.code.startsWith('57P');
}

/**
 * Stores `json` (a batch's canonical text: eventsText of normalised rows) as one sealed format-2
 * audit batch (or runs the given format-3 append, chain.ts) under statement_timeout `timeoutMs`, in one
 * round trip over a connection of `pool` (or the given client), through the named statements above;
 * the set_config is left out when `pool` is registered with a session statement_timeout ≤ `timeoutMs`.
 * Resolves with the batch id; rejects with the driver's error (class 22/23 for a malformed row, 57014
 * past the timeout, a connection error when the store is down; such a client is discarded).
 */
export async function appendAuditBatch(pool: pg.Pool | pg.ClientBase, json: string | AppendCall, timeoutMs: number): Promise<string> {
  const ms = Math.max(1, Math.ceil(timeoutMs));
  const session = sessionTimeouts.get(pool);
  const isPool = typeof (pool as pg.Pool).totalCount === 'number';
  const client = isPool ? await (pool as pg.Pool).connect() : (pool as pg.ClientBase);
  let failure: unknown = undefined;
  // A checked-out client's socket error is emitted on the client (pool.query listens for it; with
  // connect() it is ours to catch): the submission is failed by pg itself, the client discarded.
  const onError = (err: Error) => void (failure ??= err);
  if (isPool) client.on('error', onError);
  try {
    return await new Promise<string>((resolve, reject) => {
      (client as unknown as { query(s: unknown): unknown }).query(new AuditAppend(json, session !== undefined && timeoutMs >= session ? null : ms, (err, id) => (err ? reject(err) : resolve(id!))));
    });
  } catch (err) {
    failure ??= err;
    throw err;
  } finally {
    if (isPool) {
      const broken = failure !== undefined && isConnectionError(failure);
      // A discarded client keeps the listener: its socket may still report the error afterwards.
      if (!broken) client.removeListener('error', onError);
      (client as pg.PoolClient).release(broken ? (failure as Error) : undefined);
    }
  }
}
