/**
 * An agent's read on one reader connection (sql-safety layers 4 and 6; issue 10 Build 1): the
 * portal read (portal-read.ts) under the call's wire budget (wire-budget.ts), the caller's abort,
 * the client-side watchdog, and the decision whether the connection may be reused.
 *
 * When the wire budget trips on a DataRow, the call answers at once with the rows kept so far and
 * `truncated: true`, or with `result_too_large` when not even one row was kept; any other message
 * over the budget fails the call opaquely. Either way the statement is cancelled and the
 * connection destroyed without reading further: pg never holds more than the budget.
 *
 * Values are decoded by the value mapping (values.ts). When a result has a column whose type the
 * source's decoders do not know yet (an enum array, say), the read loads that type from pg_type on
 * the same connection and runs once more under a fresh budget: once per type per source.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import type { StatementCanceller } from './cancel';
import { SourceError, isConnectionLost, isFatalServerError, isServerError, localFailure, type FailurePhase } from './errors';
import { isStaleStatementError, PortalRead, type ReadOptions, type ReadResult } from './portal-read';
import { samePath, SessionSettingsMismatch } from './session-settings';
import { guardOf, type SourcePools } from './pools';
import type { Resolved } from './settings';
import { readWireBudget, type WireTrip } from './wire-budget';
import { sourceTypesOf, type SourceTypes } from './values';
import type { ClientInternals } from './wire';

/**
 * The SQLSTATE a read's guard raises to say "do not run the statement" (22012 division_by_zero:
 * see standaloneGuardSql in hierarchy.ts). Any other failure of a guard fails the read.
 */
export const GUARD_SQLSTATE = '22012';

/** Extra time the client waits past statement_timeout before it cancels and drops a connection itself (ms). */
export const WATCHDOG_GRACE_MS = 2_000;

/** What a statement run needs of its connector. */
export interface StatementContext {
  s: Resolved;
  pools: SourcePools;
  canceller: StatementCanceller;
  logger?: Logger;
  /** Classifies (and logs) a raw failure. */
  fail(err: unknown, phase: FailurePhase, extra?: { cancelledByCaller?: boolean; watchdogFired?: boolean }): SourceError;
}

/**
 * The failure of a statement the client-side watchdog ended (it outlived statement_timeout and the
 * cancel). Who kept the backend decides whether it counts against the circuit: a source that still
 * answers a fresh connection (SourcePools.probe) is healthy and the statement was the cause (not
 * counted, red-team F2); one that does not answer counts. Used by reads and writes.
 */
export async function watchdogFailure(ctx: StatementContext, what: string): Promise<SourceError> {
  const se = ctx.fail(new Error(what), 'query', { watchdogFired: true });
  const healthy = await ctx.pools.probe().catch(() => false);
  return healthy ? se : new SourceError('statement_timeout', { cause: se, sourceFailure: true });
}

/** Loads `oids` into the source's decoders on a reader connection of its own (checked out and released here). */
async function loadTypes(ctx: StatementContext, types: SourceTypes, oids: number[], signal?: AbortSignal): Promise<void> {
  const client = await ctx.pools.checkout('reader', signal);
  let ok = false;
  try {
    await types.load(client, oids);
    ok = true;
  } finally {
    client.release(!ok);
  }
}

/**
 * Why `client` may not run a read analysed on lookup path `want` (ReadOptions.searchPath), or null
 * when it may (or no path was asked for): its path at connect differs. `stale`: the connection was
 * verified before `began` (the read's start), so it predates a change and another may be taken.
 */
function pathMismatch(client: pg.PoolClient, want: readonly string[] | undefined, began: number): { got: readonly string[] | null; stale: boolean } | null {
  if (!want) return null;
  const pinned = client as unknown as { searchPath?: readonly string[] | null; verifiedAt?: number };
  const got = pinned.searchPath ?? null;
  if (got && samePath(got, want)) return null;
  return { got, stale: got !== null && (pinned.verifiedAt ?? 0) < began };
}

/**
 * Runs one approved read: checks out a reader connection (on the analysed lookup path when
 * `opts.searchPath` is given: readFrom) and runs the portal read on it under the
 * wire budget. `opts.settings` (row-rule attribute values, issue 27) are bound by the read itself,
 * transaction-locally in the statement's own round trip (PortalRead, BIND_SETTINGS_SQL): there is no
 * separate query, and nothing of them stays on the connection after the read.
 */
export function runRead(ctx: StatementContext, sql: string, values: unknown[], opts: ReadOptions): Promise<ReadResult> {
  return readFrom(ctx, sql, values, opts, performance.now());
}

/** performance.now() when a pooled connection was verified after connecting (pinned-client.ts; 0 if unknown). */
export function connectedAt(client: pg.PoolClient): number {
  return (client as unknown as { verifiedAt?: number }).verifiedAt ?? 0;
}

/**
 * runRead on a connection whose lookup path is `opts.searchPath` (red team rt42 G3): a connection
 * verified before `began` with another path is dropped and another taken (each pass drops one, so
 * this ends); one verified since, with another path, is dropped too and the read resolves
 * `searchPathChanged` with no rows, its statement not run (one that reported no path fails it
 * `session_settings_mismatch`): the source's reader now resolves
 * unqualified names elsewhere than the scan did, although new connections start with the scanned
 * path pinned (task hrt42), so the source changed since the scan (a schema of that path dropped, or
 * the reader's USAGE on it revoked: current_schemas leaves it out; a pooler that drops startup
 * options, whose connections take the role's path). The catalogue is stale, not the source
 * misconfigured: the pipeline answers `catalog_stale` and the gateway rescans, after which reads run
 * on the path the rescan recorded (task flake47: before, the read failed `session_settings_mismatch`,
 * counted against the circuit, on every call until someone rescanned the source — e.g. after a
 * gateway rescan had seen a `"$user"` schema that was dropped right after, red team rt43b H1/H2).
 *
 * A pooled connection the server ended while it sat idle (task hidle: pg_terminate_backend,
 * idle_session_timeout, a restart, a pooler in between dropping it) is still in the pool until its
 * FATAL or the socket's end is read, which happens asynchronously: a read that takes it in between
 * sends its statement into a closed session and reads the FATAL (57P01, 57P05) or a reset as its
 * own answer. When the connection was lost so (errors.ts isConnectionLost: a session-ending FATAL,
 * ECONNRESET, EPIPE) before the server answered any message of the read (its wire meter counted no
 * answer: no ParseComplete, BindComplete, RowDescription, DataRow, CommandComplete or
 * ReadyForQuery; the server flushes those before a FATAL), the server ran nothing of it; when the
 * connection also predates the read (it sat in the pool), the read runs again on another
 * connection. A plain end of the socket with nothing before it is not retried: a server busy with
 * the statement has flushed nothing yet either (test/integration/sources/read.test.ts, a connection
 * cut mid-query). Safe because a read is read-only (reader role, read-only session, nothing committed),
 * and only when nothing came back, so no caller ever sees a row twice or a result that started on
 * one connection and ended on another; a read whose rows had started fails as before. Every
 * further pass needs a connection verified before `deadSince` (the first loss: others idle then may
 * have been ended with it) and drops it (so this ends: at most pool_size + 1 passes); a connection
 * opened since that is lost before any answer fails the read `source_unavailable` (nothing was run;
 * counts against the circuit). The lost connections themselves are never counted: the breaker sees
 * only the read's final outcome (connector.ts runs the whole of runRead inside it). A read that runs
 * user functions (`opts.retryIfLost` false, red team rt43a B1) is never run again: "nothing answered"
 * does not prove the server ran nothing (a reset after the statement arrived, a backend terminated
 * mid-statement), and a trusted function's effect outside the transaction must not happen twice; it
 * fails `source_unavailable` as a loss on a fresh connection does.
 */
function readFrom(ctx: StatementContext, sql: string, values: unknown[], opts: ReadOptions, began: number, deadSince: number | null = null, passes = 0): Promise<ReadResult> {
  const signal = opts.signal;
  // New connections start on the analysed path (startup search_path, task hrt42); a changed path retires the old ones.
  ctx.pools.pinSearchPath(opts.searchPath);
  return ctx.pools.checkout('reader', signal, opts.poolWait).then((client) => {
    const wrong = pathMismatch(client, opts.searchPath, began);
    if (wrong) {
      client.release(true);
      if (wrong.stale) return readFrom(ctx, sql, values, opts, began);
      const expected = (opts.searchPath ?? []).join(', ');
      // A connection that did not say its path is not one the pinned settings hold on.
      if (wrong.got === null) return Promise.reject(ctx.fail(new SessionSettingsMismatch([{ name: 'search_path (current_schemas)', expected, actual: null }]), 'connect'));
      // A connection opened since the read began, on the pinned path, holds another one: the source changed since the scan.
      ctx.logger?.debug({ expected, actual: wrong.got.join(', ') }, 'a new reader connection resolves names on another path (current_schemas) than the catalogue scan recorded: the read was not run (catalog_stale) and the source is rescanned');
      const changed: ReadResult = { fields: [], rows: [], rowsArray: [], truncated: false, truncatedBy: null, bytes: 2, searchPathChanged: true };
      return changed;
    }
    return new Promise<ReadResult>((resolve, reject) => {
      let settled = false;
      let timer: NodeJS.Timeout | null = null;
      const guard = guardOf(client);
      const onClientError = (err: unknown) => {
        // The socket died: pg fails the active query right after; finish() handles it.
        ctx.logger?.debug({ err }, 'reader connection error');
      };
      const settle = () => {
        settled = true;
        if (timer) clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        client.removeListener('error', onClientError);
        guard.disarm();
      };
      /** The statement ended on the wire (result, error, or lost connection). */
      const finish = (err: unknown) => {
        if (settled) return;
        if (err !== null && !reparsed && q.usedNamedStatement && isStaleStatementError(err)) {
          // The connection's prepared statement went stale (a catalogue change altered its result
          // columns): parse the approved text again, once, on the same connection.
          reparsed = true;
          q = new PortalRead(sql, values, opts.maxRows, opts.maxBytes, finish, types, true, opts.guard, opts.settings, opts.functionGuard);
          client.query(q as unknown as pg.Submittable);
          return;
        }
        if (err === null && q.unexpected === null && q.unknownTypes.length > 0 && !typesLoaded) {
          // Types new to this source: load their decoders on the same connection, then decode the
          // kept rows' text again (the statement ran once: a volatile function's value, the
          // statement's cost and its time budget are those of one execution). Only when not even
          // one row's text fitted the byte cap (nothing kept to decode) is the statement read again.
          typesLoaded = true;
          const read = q;
          types.load(client, read.unknownTypes).then(
            () => {
              if (settled) return;
              if (read.rowCount === 0 && read.overByteCap) {
                guard.arm(readWireBudget(opts.maxBytes), overBudget);
                q = new PortalRead(sql, values, opts.maxRows, opts.maxBytes, finish, types, false, opts.guard, opts.settings, opts.functionGuard);
                client.query(q as unknown as pg.Submittable);
                return;
              }
              read.redecode();
              read.unknownTypes = [];
              finish(null);
            },
            (loadErr: unknown) => finish(loadErr),
          );
          return;
        }
        if (err !== null && !reparsed && !typesLoaded && guard.meter.answered === 0 && isConnectionLost(err)) {
          // The connection was lost before the server answered anything of this read (see readFrom).
          settle();
          client.release(true);
          const since = deadSince ?? began;
          if (opts.retryIfLost !== false && connectedAt(client) < since && passes < ctx.s.poolSize) {
            ctx.logger?.info({ err, pool: 'reader', pass: passes + 1 }, 'pooled source connection had ended while idle; the read runs on another');
            resolve(readFrom(ctx, sql, values, opts, began, deadSince ?? performance.now(), passes + 1));
            return;
          }
          reject(ctx.fail(new SourceError('source_unavailable', { cause: err, sourceFailure: true }), 'query'));
          return;
        }
        settle();
        if (err !== null && q.functionsChanged && q.unexpected === null && (err as { code?: unknown }).code === GUARD_SQLSTATE && isServerError(err) && !isFatalServerError(err)) {
          // The function guard said no (task hf5): a user function changed since the scan; the
          // statement was not executed and the connection is clean.
          client.release(false);
          resolve({ fields: [], rows: [], rowsArray: [], truncated: false, truncatedBy: null, bytes: 2, functionsChanged: true });
          return;
        }
        if (err !== null && q.guardTripped && q.unexpected === null && (err as { code?: unknown }).code === GUARD_SQLSTATE && isServerError(err) && !isFatalServerError(err)) {
          // The guard said no: the statement was not executed (the server skipped it). The
          // connection is clean (a plain statement error, then ReadyForQuery).
          client.release(false);
          resolve({ fields: [], rows: [], rowsArray: [], truncated: false, truncatedBy: null, bytes: 2, guardTripped: true });
          return;
        }
        if (err === null && q.unexpected === null) {
          const tx = (client as unknown as ClientInternals).getTransactionStatus?.();
          client.release(tx !== 'I');
          // Not even the first row's JSON fits the byte cap: the same answer as on the wire.
          if (q.rowCount === 0 && q.overByteCap) reject(new SourceError('result_too_large'));
          else resolve(q.result());
          return;
        }
        const se = err === null ? ctx.fail(localFailure(`unexpected protocol traffic (${q.unexpected})`), 'query') : ctx.fail(err, 'query');
        // Keep the connection only after a plain statement error from the server.
        const keep = err !== null && q.unexpected === null && isServerError(err) && !isFatalServerError(err) && se.code === 'execution_failed' && !se.sourceFailure;
        client.release(!keep);
        reject(se);
      };
      /** The caller gave up (abort) or the client-side watchdog fired: answer now, cancel, then drop. */
      const giveUp = (how: 'cancelled' | 'watchdog') => {
        if (settled) return;
        settle();
        const released = ctx.canceller.cancelAndDrop(client, 'reader', q.ended);
        const holding = (se: SourceError) => Object.assign(se, { connectionReleased: released });
        if (how === 'cancelled') return reject(holding(ctx.fail(new SourceError('cancelled'), 'query')));
        void watchdogFailure(ctx, 'client-side watchdog: no answer within statement_timeout').then((se) => reject(holding(se)));
      };
      /** The wire budget tripped: answer with what fits, cancel the statement and destroy the connection. */
      const overBudget = (trip: WireTrip) => {
        if (settled) return;
        settle();
        ctx.canceller.dropNow(client, 'reader');
        ctx.logger?.info({ message_code: trip.code, message_bytes: trip.messageBytes, data_row_bytes: trip.totalBytes, reason: trip.reason, rows: q.rowCount }, 'read ended by its wire budget');
        if (trip.code === 'D' && trip.reason === 'budget') {
          if (q.rowCount === 0) return reject(new SourceError('result_too_large'));
          if (q.unknownTypes.length === 0) return resolve(q.truncatedResult());
          // Types new to this source, and this connection is gone: load them on another one and
          // decode the kept rows' text again.
          const cut = q;
          void loadTypes(ctx, types, cut.unknownTypes, signal).then(
            () => {
              cut.redecode();
              if (cut.rowCount > 0) resolve(cut.truncatedResult());
              else reject(new SourceError('result_too_large'));
            },
            (err: unknown) => reject(ctx.fail(err, 'query')),
          );
          return;
        }
        reject(localFailure('a protocol message exceeded the call\'s byte budget'));
      };
      const onAbort = () => giveUp('cancelled');
      let reparsed = false;
      let typesLoaded = false;
      const types = sourceTypesOf(ctx.pools);
      let q = new PortalRead(sql, values, opts.maxRows, opts.maxBytes, finish, types, false, opts.guard, opts.settings, opts.functionGuard);
      client.on('error', onClientError);
      if (signal?.aborted) {
        settle();
        client.release();
        reject(new SourceError('cancelled'));
        return;
      }
      signal?.addEventListener('abort', onAbort, { once: true });
      if (ctx.s.statementTimeout > 0) timer = setTimeout(() => giveUp('watchdog'), ctx.s.statementTimeout + WATCHDOG_GRACE_MS);
      guard.arm(readWireBudget(opts.maxBytes), overBudget);
      client.query(q as unknown as pg.Submittable);
    });
  });
}
