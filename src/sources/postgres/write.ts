/**
 * Approved writes on the writer pool (sql-safety layer 5), and reader connections lent to trusted
 * internal code (the catalog scanner), each under a wire budget (wire-budget.ts).
 */
import type pg from 'pg';
import { SourceError, isConnectionLost, isFatalServerError, isServerError, localFailure } from './errors';
import { guardOf, wireError } from './pools';
import { GUARD_SQLSTATE, WATCHDOG_GRACE_MS, connectedAt, watchdogFailure, type StatementContext } from './read';
import type { WriteGuard } from './hook-guard';
import type { ClientInternals } from './wire';
import { MAPPED_PG_TYPES } from './values';

/** Most bytes of DataRows a write may send back (RETURNING), and the per-message cap during it. */
export const WRITE_WIRE_BUDGET = 16 * 1024 * 1024;
/** Most bytes of DataRows trusted internal code may read on one lent connection, and the per-message cap. */
export const LEND_WIRE_BUDGET = 256 * 1024 * 1024;

/**
 * Binds row-rule settings (issue 27) for the rest of the write's transaction only (`is_local`):
 * names and values are bound parameters, never spliced; they end with COMMIT or ROLLBACK.
 */
export const BIND_LOCAL_SETTINGS = 'SELECT pg_catalog.set_config(s.name, s.value, true) FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.text[])) AS s(name, value)';

/**
 * The rows inserted, updated and deleted so far in this session's pending statistics (the server's
 * per-transaction counters, `pg_stat_get_xact_tuples_*`), as text, and whether `track_counts` is on.
 * Read right before and right after a statement in its transaction, the difference is every row
 * the statement changed in a table on this server: its own, its data-modifying CTEs', and those its
 * triggers, referential actions and functions changed (hnu42 finding 1).
 */
export const XACT_CHANGES = `SELECT pg_catalog.current_setting('track_counts')::pg_catalog.bool AS counting,
  coalesce(pg_catalog.sum(pg_catalog.pg_stat_get_xact_tuples_inserted(c.oid) OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_xact_tuples_updated(c.oid)
    OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_xact_tuples_deleted(c.oid)), 0)::pg_catalog.text AS changed,
  EXISTS (SELECT 1 FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_class f ON f.oid OPERATOR(pg_catalog.=) l.relation
    WHERE l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() AND l.locktype OPERATOR(pg_catalog.=) 'relation' AND l.mode OPERATOR(pg_catalog.=) 'RowExclusiveLock'
      AND f.relkind OPERATOR(pg_catalog.=) 'f') AS foreign_written
  FROM pg_catalog.pg_class c WHERE c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 't', 'm']::pg_catalog."char"[])`;

/**
 * Sent before an approved write's guard (red team rt44a): every deferrable constraint and constraint
 * trigger of the transaction fires at the end of the statement instead of at COMMIT, so that the
 * guard run again after the statement comes after every trigger of the write (one statement: the
 * same outcome as checking at COMMIT); and JIT is off for the rest of the transaction (where the
 * server has the setting): the guard's catalogue walks are estimated past the default
 * jit_above_cost and compiling them took 3.3 s against 15–25 ms run without (measured here,
 * PostgreSQL 15), as for the scan (src/control/scan.ts). The approved statement runs without JIT too.
 */
export const PRE_GUARD = "SET CONSTRAINTS ALL IMMEDIATE; SELECT pg_catalog.set_config(name, 'off', true) FROM pg_catalog.pg_settings WHERE name OPERATOR(pg_catalog.=) 'jit'";

/** PRE_GUARD and the savepoint the write's LOCK (WriteGuard.lock) runs in, so that a lock refused can be undone. */
export const PRE_GUARD_SAVEPOINT = "SET CONSTRAINTS ALL IMMEDIATE; SELECT pg_catalog.set_config(name, 'off', true) FROM pg_catalog.pg_settings WHERE name OPERATOR(pg_catalog.=) 'jit'; SAVEPOINT interlock_lock";

/**
 * BEGIN and the new transaction's id, in one simple-protocol message (one round trip, as BEGIN alone
 * took): `txid_current()` (the 64-bit, epoch-extended id that PostgreSQL 13+ also gives as
 * `pg_current_xact_id()`; it exists on every supported server) assigns the transaction its id at
 * once. Kept so that a COMMIT whose answer never came can be asked about afterwards (COMMIT_STATUS).
 */
export const BEGIN_WITH_XID = 'BEGIN; SELECT pg_catalog.txid_current()::pg_catalog.text AS xid';

/**
 * Whether transaction $1 (a txid_current value) committed: 'committed', 'aborted', 'in progress', or
 * NULL when it is too old for the server to know (`txid_status`, PostgreSQL 10+; `pg_xact_status` on 13+).
 */
export const COMMIT_STATUS = 'SELECT pg_catalog.txid_status($1::bigint) AS status';

/**
 * Ends backend $1 when it still runs transaction $2 (a txid_current value; pg_stat_activity's
 * `backend_xid` is its low 32 bits), so that a recycled process id is never hit. The writer role may
 * end its own role's sessions (PostgreSQL: a member of the backend's role, or pg_signal_backend); a
 * role that may not gets an error (42501), which the caller ignores. Returns a row only when it ran.
 */
export const END_OLD_BACKEND = `SELECT pg_catalog.pg_terminate_backend(a.pid) AS ended FROM pg_catalog.pg_stat_activity a
  WHERE a.pid OPERATOR(pg_catalog.=) $1::int AND a.backend_xid IS NOT NULL
    AND a.backend_xid::pg_catalog.text::bigint OPERATOR(pg_catalog.=) ($2::bigint OPERATOR(pg_catalog.%) 4294967296)`;

/** What asking a fresh writer connection about a lost COMMIT learnt (null: nothing certain). */
export type CommitStatus = 'committed' | 'aborted' | null;

/** Most milliseconds commitStatus waits for a transaction the server says is 'in progress' to end. */
export const COMMIT_WAIT_MAX_MS = 3000;
/** The first pause (ms) before asking again about a transaction 'in progress'; each next one doubles. */
export const COMMIT_WAIT_FIRST_MS = 50;

/**
 * How long (ms) commitStatus waits for a transaction 'in progress' to end: the source's statement
 * timeout (the longest its own COMMIT could have been allowed; 5 s when it has none) capped at
 * COMMIT_WAIT_MAX_MS.
 */
export function commitWaitMs(statementTimeout: number): number {
  return Math.min(COMMIT_WAIT_MAX_MS, statementTimeout > 0 ? statementTimeout : 5000);
}

/**
 * Asks a writer connection of the pool (checked out anew; the lost one is gone) whether transaction
 * `xid` committed (task hcommit). 'committed' or 'aborted' as the server says. While it says
 * 'in progress' (task hfollow: the old backend has not yet noticed its client is gone, or is still
 * committing, so its transaction can still commit or abort) it asks again on the same connection
 * after 50 ms, 100 ms, … (doubling), for at most commitWaitMs(statement timeout) after the first
 * answer; once half of that has passed it ends the old backend `pid` (the lost connection's
 * process id, when known) if it still runs `xid` (END_OLD_BACKEND; not required: a writer role that
 * may not is only logged), which makes the status final (a backend ends a transaction it is
 * committing before it exits). Null when the server still says 'in progress' at the end of the wait,
 * says NULL (too old), or when no connection, no answer or an error came in time (the connection is
 * then dropped). The whole call is bounded by the source's connect timeout plus its statement
 * timeout (5 s when it has none) plus the wait plus WATCHDOG_GRACE_MS. Never throws.
 */
export async function commitStatus(ctx: StatementContext, xid: string, pid: number | null = null): Promise<CommitStatus> {
  const wait = commitWaitMs(ctx.s.statementTimeout);
  const bound = ctx.s.connectTimeout + (ctx.s.statementTimeout > 0 ? ctx.s.statementTimeout : 5000) + wait + WATCHDOG_GRACE_MS;
  const stop = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  let client: pg.PoolClient | undefined;
  let late = false;
  const deadline = new Promise<null>((resolve) => {
    timer = setTimeout(() => {
      late = true;
      stop.abort();
      resolve(null);
    }, bound);
  });
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        stop.signal.removeEventListener('abort', done);
        resolve();
      }
      stop.signal.addEventListener('abort', done, { once: true });
    });
  const ask = (async (): Promise<CommitStatus> => {
    const onError = (err: unknown) => ctx.logger?.debug({ err }, 'writer connection error (commit status)');
    try {
      client = await ctx.pools.checkout('writer', stop.signal);
    } catch {
      return null;
    }
    const c = client;
    c.on('error', onError);
    try {
      let first: number | null = null;
      let pauseMs = COMMIT_WAIT_FIRST_MS;
      let endTried = false;
      for (;;) {
        const r = await c.query({ text: COMMIT_STATUS, values: [xid], queryMode: 'extended' } as pg.QueryConfig);
        const status = (r.rows[0] as { status?: unknown } | undefined)?.status;
        const now = performance.now();
        first ??= now;
        const left = first + wait - now;
        if (status !== 'in progress' || late || left <= 0) {
          c.removeListener('error', onError);
          c.release(late || (c as unknown as ClientInternals).getTransactionStatus?.() !== 'I');
          return status === 'committed' || status === 'aborted' ? status : null;
        }
        if (!endTried && pid !== null && now - first >= wait / 2) {
          endTried = true;
          try {
            const e = await c.query({ text: END_OLD_BACKEND, values: [pid, xid], queryMode: 'extended' } as pg.QueryConfig);
            ctx.logger?.info({ pool: 'writer', xid, pid, ended: e.rows.length > 0 }, 'the transaction of a lost approved write was still in progress; asked the source to end its old session');
          } catch (err) {
            // Not required: a writer role that may not end its own sessions waits for the server.
            ctx.logger?.info({ err, pool: 'writer', xid, pid }, 'the old session of a lost approved write could not be ended; waiting for the source');
          }
          if (late) throw new Error('late');
          pauseMs = COMMIT_WAIT_FIRST_MS; // the session ends within moments of being told to
          continue;
        }
        await pause(Math.min(pauseMs, left));
        pauseMs *= 2;
        if (late) throw new Error('late');
      }
    } catch {
      c.removeListener('error', onError);
      c.release(true);
      return null;
    }
  })();
  try {
    return await Promise.race([ask, deadline]);
  } finally {
    if (timer) clearTimeout(timer);
    if (late) void ask.then(() => undefined, () => undefined);
  }
}

/**
 * Reads XACT_CHANGES on `client` (in the write's transaction): the count, or a local failure when the
 * server does not count, or when the transaction has written a foreign table (it holds a
 * RowExclusiveLock on one: no local statistic counts a foreign data wrapper's writes, so the count
 * would be short; red team rt42b W1). Thrown before COMMIT, the failure rolls the write back.
 */
async function xactChanges(client: pg.PoolClient): Promise<bigint> {
  const r = await client.query({ text: XACT_CHANGES, queryMode: 'extended' } as pg.QueryConfig);
  const row = r.rows[0] as { counting?: unknown; changed?: unknown; foreign_written?: unknown } | undefined;
  if (row?.counting !== true || typeof row.changed !== 'string') throw localFailure('the source does not count changed rows (track_counts is off), so the rows this write changes could not be known');
  if (row.foreign_written !== false) throw localFailure('the write changes a foreign table, whose changed rows the source does not count, so the rows this write changes could not be known');
  return BigInt(row.changed);
}

/**
 * What an approved write resolves: the rows it changed; `functionsChanged` when its guard tripped
 * (nothing written); `commitResolved` when its COMMIT got no answer (the connection was lost) and a
 * fresh connection learnt from the server that its transaction committed (commitStatus).
 */
export interface WriteResult {
  rowCount: number;
  functionsChanged?: true;
  commitResolved?: true;
}

/**
 * Runs one approved write on a writer connection: `BEGIN; [bind settings;] <statement>; COMMIT`,
 * rolling back on a statement error. `settings` (name, value pairs: a row-ruled write's identity
 * attributes, issue 27) are set transaction-locally right after BEGIN. The wire guard caps what the
 * statement may send back (RETURNING rows) at WRITE_WIRE_BUDGET; past it the write fails and its
 * connection (and transaction) is destroyed.
 *
 * `countChanges` (a statement whose command tag does not count every row it changes: a
 * data-modifying CTE, a SELECT on top; hnu42 finding 1): the row count is the larger of the
 * statement's own and the server's count of rows changed by it in its transaction (XACT_CHANGES,
 * read before and after it); when the server does not count (`track_counts` off) the write fails
 * before its statement runs, and one that wrote a foreign table fails after it, rolled back.
 *
 * `guard` (task hw: the function and shape guards of the write's analysis against the catalogue the
 * approval analysed with, function-guard.ts and shape-guard.ts via the connector's `functionGuard`):
 * run as one more statement in the write's transaction, after the settings and right before the
 * statement, after PRE_GUARD and `guard.lock` (the write's targets locked ROW EXCLUSIVE, in a
 * savepoint: a lock refused for privileges, 42501, or a relation kind, 42809, is skipped), and again
 * after the statement, before COMMIT (red team rt44a). When it raises GUARD_SQLSTATE (a function or
 * operator of a name the write looks up, a user function it runs, a whole-row relation's columns or
 * a touched relation's write hooks are not the scanned ones) the statement is never sent (or, after
 * it, is rolled back), the transaction is rolled back and the write resolves `{ rowCount: 0,
 * functionsChanged: true }` (nothing written; the connection is kept when the rollback left it
 * idle). Any other failure of the guard fails the write like a statement error.
 */
export function runWrite(
  ctx: StatementContext,
  sql: string,
  values: unknown[],
  signal?: AbortSignal,
  settings: ReadonlyArray<readonly [string, string]> = [],
  countChanges = false,
  guard?: WriteGuard,
): Promise<WriteResult> {
  return writeOn(ctx, sql, values, signal, settings, countChanges, guard, performance.now(), null, 0);
}

/**
 * runWrite on one writer connection. A pooled connection the server ended while it sat idle (task
 * hidle; see read.ts readFrom) fails the write's BEGIN, the first thing sent on it. A write whose
 * connection was lost (errors.ts isConnectionLost) while its BEGIN was in flight never sent its
 * statement (run() sends nothing after BEGIN until BEGIN's answer has come), and a transaction of a
 * lost session is rolled back by the server, so nothing of it ran or can commit: when that
 * connection predates the write it runs again, from BEGIN, on another connection (each further
 * pass needs a connection verified before the first loss, `deadSince`, and drops it); on a
 * connection opened since, it fails `source_unavailable` (nothing was run; counts against the
 * circuit; the approval records `source_unavailable`, "Nothing was changed"). A connection lost
 * once the statement was sent is never retried: the write fails as before (rolled back with its
 * session; never run twice). One lost while its COMMIT was in flight (or whose COMMIT the watchdog
 * gave up on) may have committed: the server is asked, on a new connection, about the transaction
 * id BEGIN read (commitStatus; task hcommit): committed resolves `commitResolved` with the
 * statement's row count, aborted rejects the lost connection's failure (nothing changed), anything
 * else rejects SourceError 'outcome_unknown' (an answer 'in progress' is asked again until final or
 * the wait ends, the old session ended half way: commitStatus, task hfollow).
 */
function writeOn(
  ctx: StatementContext,
  sql: string,
  values: unknown[],
  signal: AbortSignal | undefined,
  settings: ReadonlyArray<readonly [string, string]>,
  countChanges: boolean,
  guard: WriteGuard | undefined,
  began: number,
  deadSince: number | null,
  passes: number,
): Promise<WriteResult> {
  return ctx.pools.checkout('writer', signal).then(
    (client) =>
      new Promise<WriteResult>((resolve, reject) => {
        const c = client as unknown as ClientInternals;
        let phase: 'begin' | 'statement' | 'commit' = 'begin';
        /** The transaction's id (BEGIN_WITH_XID) and the rows the statement changed, known once COMMIT is sent. */
        let xid: string | null = null;
        let rowsChanged = 0;
        let settled = false;
        let gaveUp = false;
        let timer: NodeJS.Timeout | null = null;
        /** The lost connection's server process id (commitStatus may end it), read at checkout. */
        const pid = typeof c.processID === 'number' ? c.processID : null;
        let markEnded!: () => void;
        const ended = new Promise<void>((r) => (markEnded = r));
        const onClientError = (err: unknown) => ctx.logger?.debug({ err }, 'writer connection error');
        const wire = guardOf(client);
        const settle = () => {
          settled = true;
          wire.disarm();
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
          void ctx.canceller.cancelAndDrop(client, 'writer', ended);
          if (how === 'cancelled') reject(new SourceError('cancelled'));
          else if (inCommit) void resolveCommit(new SourceError('execution_failed', { sourceFailure: true, message: 'tool execution failed: the source did not confirm the commit' }), ended).then(resolve, reject);
          else void watchdogFailure(ctx, 'client-side watchdog').then(reject);
        };
        /**
         * COMMIT was sent and no answer came (connection lost, or the watchdog): asks a fresh writer
         * connection whether the transaction committed (commitStatus), after `first` (the lost
         * connection's end, so a server that already read the COMMIT has acted on it). Committed: the
         * write's result, `commitResolved`. Aborted: rejects `lost` (nothing changed). Otherwise
         * rejects SourceError 'outcome_unknown' (counted against the circuit).
         */
        const resolveCommit = async (lost: SourceError, first?: Promise<void>): Promise<WriteResult> => {
          if (first) await first;
          const status = xid === null ? null : await commitStatus(ctx, xid, pid);
          ctx.logger?.warn({ pool: 'writer', xid, status: status ?? 'unknown' }, 'the connection was lost while an approved write was committing; asked the source whether its transaction committed');
          if (status === 'committed') return { rowCount: rowsChanged, commitResolved: true };
          if (status === 'aborted') throw lost;
          throw new SourceError('outcome_unknown', { cause: lost.cause ?? lost, sourceFailure: true, message: 'tool execution failed: the source did not confirm the commit, and whether it committed could not be learnt; the outcome is unknown' });
        };
        const onAbort = () => giveUp('cancelled');
        client.on('error', onClientError);
        wire.arm(WRITE_WIRE_BUDGET, () => {
          if (settled) return;
          gaveUp = true;
          settle();
          ctx.canceller.dropNow(client, 'writer');
          reject(localFailure('the statement returned more than the write\'s byte budget'));
        });
        signal?.addEventListener('abort', onAbort, { once: true });
        if (ctx.s.statementTimeout > 0) timer = setTimeout(() => giveUp('watchdog'), ctx.s.statementTimeout + 2 * WATCHDOG_GRACE_MS);
        const stopIfGivenUp = () => {
          if (gaveUp) throw new SourceError('cancelled');
        };
        const run = async (): Promise<number | 'functions_changed'> => {
          const begun = (await client.query(BEGIN_WITH_XID)) as unknown as pg.QueryResult[];
          const id = (Array.isArray(begun) ? begun[1]?.rows[0] : undefined) as { xid?: unknown } | undefined;
          if (typeof id?.xid !== 'string' || !/^[0-9]+$/.test(id.xid)) throw localFailure('the transaction\'s id could not be read');
          xid = id.xid;
          stopIfGivenUp();
          phase = 'statement';
          if (settings.length > 0) {
            await client.query({ text: BIND_LOCAL_SETTINGS, values: [settings.map((x) => x[0]), settings.map((x) => x[1])], queryMode: 'extended' } as pg.QueryConfig);
            stopIfGivenUp();
          }
          /** Runs `guard`; true when it tripped (the transaction is then rolled back). */
          const tripped = async (g: WriteGuard): Promise<boolean> => {
            let hit = false;
            try {
              const r = await client.query({ text: g.text, values: g.values, queryMode: 'extended' } as pg.QueryConfig);
              if ((r.rowCount ?? 0) > 0 || r.rows.length > 0) throw localFailure('the write\'s function guard returned rows');
            } catch (err) {
              if (!(isServerError(err) && !isFatalServerError(err) && err.code === GUARD_SQLSTATE)) throw err;
              hit = true;
            }
            stopIfGivenUp();
            if (hit) {
              await client.query('ROLLBACK');
              if (c.getTransactionStatus?.() !== 'I') throw localFailure('the transaction did not end');
            }
            return hit;
          };
          if (guard) {
            // Red team rt44a: deferred triggers fire at the end of the statement (so before the guard
            // that follows it), and the targets are locked before the first guard reads the catalogue.
            // The lock (text made from the catalogue's names: the extended protocol) in a savepoint of its own.
            if (guard.lock) await client.query(PRE_GUARD_SAVEPOINT);
            else await client.query(PRE_GUARD);
            stopIfGivenUp();
            if (guard.lock) {
              try {
                await client.query({ text: guard.lock, queryMode: 'extended' } as pg.QueryConfig);
                await client.query('RELEASE SAVEPOINT interlock_lock');
              } catch (err) {
                // A view whose owner may not lock its base relations, a relation not lockable: the guard after the statement still sees what changed.
                if (!(isServerError(err) && !isFatalServerError(err) && (err.code === '42501' || err.code === '42809'))) throw err;
                await client.query('ROLLBACK TO SAVEPOINT interlock_lock');
              }
              stopIfGivenUp();
            }
            // The functions, operators and row shapes the approval analysed are still the scanned ones
            // (task hw), checked in this transaction right before the statement; else it is never sent.
            if (await tripped(guard)) return 'functions_changed';
          }
          const before = countChanges ? await xactChanges(client) : 0n;
          stopIfGivenUp();
          // RETURNING rows are not kept; the value mapping's decoders (values.ts) keep pg from parsing them (JSON.parse, Dates).
          const r = await client.query({ text: sql, values, queryMode: 'extended', types: MAPPED_PG_TYPES } as pg.QueryConfig);
          stopIfGivenUp();
          let rowCount = r.rowCount ?? 0;
          if (countChanges) {
            const changed = (await xactChanges(client)) - before;
            stopIfGivenUp();
            if (changed > BigInt(rowCount)) rowCount = changed > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(changed);
          }
          if (c.getTransactionStatus?.() !== 'T') throw localFailure('the statement ended its transaction');
          // Again after the statement (red team rt44a L2): a definition committed while it ran (a
          // trigger function replaced while it waited for a row lock) rolls everything back.
          if (guard && (await tripped(guard))) return 'functions_changed';
          rowsChanged = rowCount;
          phase = 'commit';
          await client.query('COMMIT');
          if (c.getTransactionStatus?.() !== 'I') throw localFailure('the transaction did not end');
          return rowCount;
        };
        const ran = run();
        ran.then(markEnded, markEnded);
        ran.then(
          (rowCount) => {
            if (settled) return;
            settle();
            client.release();
            resolve(rowCount === 'functions_changed' ? { rowCount: 0, functionsChanged: true } : { rowCount });
          },
          async (err: unknown) => {
            if (settled) return;
            if (phase === 'begin' && isConnectionLost(err)) {
              // Lost before BEGIN was answered: the statement was never sent (see writeOn).
              settle();
              client.release(true);
              const since = deadSince ?? began;
              if (connectedAt(client) < since && passes < ctx.s.poolSize) {
                ctx.logger?.info({ err, pool: 'writer', pass: passes + 1 }, 'pooled source connection had ended while idle; the write runs on another (its statement was never sent)');
                resolve(writeOn(ctx, sql, values, signal, settings, countChanges, guard, began, deadSince ?? performance.now(), passes + 1));
                return;
              }
              reject(ctx.fail(new SourceError('source_unavailable', { cause: err, sourceFailure: true }), 'query'));
              return;
            }
            const se = ctx.fail(err, 'query');
            const plain = isServerError(err) && !isFatalServerError(err) && se.code === 'execution_failed' && !se.sourceFailure;
            if (phase === 'commit' && !plain && !(err instanceof SourceError)) {
              // COMMIT was sent and its answer never came (the session was lost): the server may have
              // committed. Ask it (resolveCommit) rather than report "nothing was changed".
              settle();
              client.release(true);
              resolveCommit(se).then(resolve, reject);
              return;
            }
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

/**
 * Lends a reader connection to trusted internal code (the catalog scanner). The connection is
 * destroyed instead of reused when `fn` throws, leaves a transaction open, or changes a reported
 * session parameter. Its wire budget is LEND_WIRE_BUDGET for everything `fn` reads.
 */
export async function lendReader<T>(ctx: StatementContext, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await ctx.pools.checkout('reader');
  const guard = guardOf(client);
  const stream = (client as unknown as ClientInternals).connection.stream;
  guard.arm(LEND_WIRE_BUDGET, (trip) => stream.destroy?.(wireError(`a message took the lent connection past its byte budget (code ${trip.code})`)));
  const conn = (client as unknown as ClientInternals).connection;
  let changed = false;
  const onParam = () => {
    changed = true;
  };
  const onClientError = (err: unknown) => ctx.logger?.debug({ err }, 'reader connection error');
  client.on('error', onClientError);
  conn.on('parameterStatus', onParam);
  let result: T;
  try {
    result = await fn(client);
  } catch (err) {
    conn.removeListener('parameterStatus', onParam);
    client.removeListener('error', onClientError);
    guard.disarm();
    client.release(true);
    throw err instanceof SourceError ? err : ctx.fail(err, 'query');
  }
  conn.removeListener('parameterStatus', onParam);
  client.removeListener('error', onClientError);
  const tx = (client as unknown as ClientInternals).getTransactionStatus?.();
  guard.disarm();
  client.release(changed || tx !== 'I');
  return result;
}
