/**
 * PostgreSQL source connector: executes what the governance pipeline already approved.
 * It never parses or classifies SQL (src/sql/** does); it only runs statements safely. This file
 * composes the concerns, each in its own module:
 * - settings.ts: settings, defaults, TLS options and startup options (sql-safety layer 4: reader
 *   connections START read-only and time-limited through the `options` startup parameter);
 * - pools.ts: the reader pool and the separate writer pool (layer 5), a wire guard on every connection;
 * - wire-budget.ts: memory per call bounded while the bytes arrive (issue 10, Build 1);
 * - portal-read.ts and read.ts: one read as one round trip, row and byte caps (layer 6);
 * - write.ts: approved writes (`BEGIN; <statement>; COMMIT`) and connections lent to the catalog scanner;
 * - cancel.ts: CancelRequest, pg_cancel_backend fall-back, cancel-then-drop;
 * - breaker.ts and health.ts: the circuit breaker, counting only source health (issue 10, Build 4);
 * - fair-share.ts: the per-identity cap on concurrent statements (issue 10, Build 5);
 * - errors.ts: the failure vocabulary and opaque messages.
 */
import type tls from 'node:tls';
import type pg from 'pg';
import type { Logger } from 'pino';
import { SourceBreaker, type BreakerState } from './breaker';
import { StatementCanceller } from './cancel';
import { SourceError, classifyFailure, internalCause, localFailure, type FailurePhase } from './errors';
import { IdentitySlots } from './fair-share';
import { SourcePools, type PoolStats } from './pools';
import type { ReadGuard, ReadOptions, ReadResult } from './portal-read';
import { functionGuard, type GuardedNames } from './function-guard';
import { withShapeGuard } from './shape-guard';
import { withViewGuard, type ViewUses } from './view-guard';
import { type TypeUses, withTypeGuard } from './type-guard';
import { withHookGuard, type WriteGuard } from './hook-guard';
import { runRead, type StatementContext } from './read';
import { resolveSettings, tlsOptions, type PostgresSourceSettings, type Resolved } from './settings';
import { encodeParams } from './wire';
import { readRelationTrees, standaloneGuard, MAX_HIERARCHY_ROWS } from './hierarchy';
import { readReferentialKeys, readViewDefinitions, MAX_REFERENTIAL_KEY_ROWS } from './referential-keys';
import type { ReferencingKey, RelationName, SourceCatalog } from '../../sql/catalog-types';
import type { LiveRelationTree } from '../../sql/hierarchy';
import { lendReader, runWrite } from './write';
import { writerMissingPrivileges, type WritePrivilege } from './writer-privileges';

export { SourceError, type SourceErrorCode } from './errors';
export { type BreakerState } from './breaker';
export { CANCEL_ATTEMPTS, CANCEL_RETRY_MS, CANCEL_TIMEOUT_MS, sendCancelRequest } from './cancel';
export { type PoolStats } from './pools';
export { type ReadField, type ReadOptions, type ReadResult } from './portal-read';
export { WATCHDOG_GRACE_MS } from './read';
export { DEFAULT_SETTINGS, resolveSettings, startupOptions, tlsOptions, type PostgresSourceSettings, type PostgresTlsSettings } from './settings';

/** Constructor options: an operational logger and a breaker state observer (metrics). */
export interface ConnectorOptions {
  logger?: Logger;
  onBreakerChange?(state: BreakerState): void;
}

/**
 * A PostgreSQL source: a reader pool, an optional writer pool, one circuit breaker and per-identity
 * slots. All methods reject only with SourceError. Pools are created lazily on first use.
 */
export class PostgresSourceConnector {
  readonly sourceId: string;
  private readonly s: Resolved;
  private readonly ssl: tls.ConnectionOptions | false;
  private readonly logger?: Logger;
  private readonly breaker: SourceBreaker;
  private readonly pools: SourcePools;
  private readonly slots: IdentitySlots;
  private readonly ctx: StatementContext;
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
    const fail = (err: unknown, phase: FailurePhase, extra: { cancelledByCaller?: boolean; watchdogFired?: boolean } = {}) => this.fail(err, phase, extra);
    this.breaker = new SourceBreaker(`source:${sourceId}`, this.s.failureThreshold, this.s.resetTimeout, (err) => fail(err, 'query'), this.logger, opts.onBreakerChange);
    this.pools = new SourcePools(this.s, this.ssl, sourceId, fail, this.logger);
    this.slots = new IdentitySlots(this.s.maxConcurrentPerIdentity, this.s.identityWaitMs);
    this.ctx = { s: this.s, pools: this.pools, canceller: new StatementCanceller(this.s, this.ssl, sourceId, this.logger), logger: this.logger, fail };
  }

  /** The circuit's state: 'closed' (normal), 'open' (refusing at once), 'half_open' (next call is the probe). */
  breakerState(): BreakerState {
    return this.breaker.state();
  }

  /** Reader pool occupancy (for the pool gauges of /metrics). */
  poolStats(): PoolStats & { identityWaiting: number } {
    return { ...this.pools.readerStats(), identityWaiting: this.slots.waiting() };
  }

  /**
   * Runs an approved read (sql-safety layers 4 and 6) as the reader role.
   *
   * @param sql the statement, sent unchanged over the extended protocol (one statement only: the server refuses more)
   * @param params values for $1…$n (encoded as pg encodes query values)
   * @param opts.maxRows rows to return at most (the portal fetches maxRows + 1; the extra row sets `truncated`)
   * @param opts.maxBytes cap on the UTF-8 size of `JSON.stringify(rows)`; rows past it are dropped and `truncated` set
   *   (the call's wire budget, readWireBudget(maxBytes), bounds the bytes received before decoding: a row past
   *   it ends the read with `truncated`, or with 'result_too_large' when no row fits)
   * @param opts.signal aborting it cancels the statement in PostgreSQL (CancelRequest), drops the connection and
   *   rejects with 'cancelled'
   * @param opts.identityId the calling identity: at most max_concurrent_per_identity of its reads run at once on
   *   this source; beyond, it waits up to identity_wait_ms, then rejects 'concurrency_limited' (retryAfterMs set)
   * @returns fields, rows (objects), rowsArray, truncated, bytes
   * @throws SourceError: 'circuit_open' (without touching the network), 'upstream_tls_refused', 'statement_timeout',
   *   'source_busy' (no pooled connection freed within connect_timeout_ms), 'concurrency_limited', 'result_too_large',
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
    const identityId = opts.identityId;
    if (identityId === undefined) return this.guard(() => runRead(this.ctx, sql, values, opts));
    // A free slot is taken without a promise (issue 28 item 3); else the call waits for one.
    const free = this.slots.tryAcquire(identityId);
    if (free) return this.holding(free, sql, values, opts);
    // The wait for the identity's own slot is reported (ReadOptions.poolWait.slotMs): admission by
    // capacity's per-identity limit samples it (issue 29, h29i).
    const asked = opts.poolWait ? performance.now() : 0;
    const waited = () => {
      if (opts.poolWait) opts.poolWait.slotMs = (opts.poolWait.slotMs ?? 0) + (performance.now() - asked);
    };
    return this.slots.acquire(identityId, opts.signal).then(
      (release) => {
        waited();
        return this.holding(release, sql, values, opts);
      },
      (err: unknown) => {
        waited();
        throw err;
      },
    );
  }

  /** Runs the read while holding an identity slot, given back by `release` once the connection is. */
  private holding(release: () => void, sql: string, values: unknown[], opts: ReadOptions): Promise<ReadResult> {
    const run = this.guard(() => runRead(this.ctx, sql, values, opts));
    // A call that gave up before its statement ended keeps its slot until the connection is back
    // (cancel acknowledged or the connection dropped), so cancelling cannot take more connections.
    void run.then(release, (err: unknown) => {
      const held = (err as SourceError | undefined)?.connectionReleased;
      if (held) void held.then(release, release);
      else release();
    });
    return run;
  }

  /**
   * The ancestors and descendants of `relations` as the server has them now (issue 22 item 1; see
   * hierarchy.ts): with `opts.probe`, a standalone probe first, then the walk only for relations
   * that may sit in a tree (without: the walk at once), as reads with the caller's identity, so the fair share
   * and breaker apply.
   * @throws as `read`, or Error when the answer was incomplete
   */
  relationTrees(relations: readonly RelationName[], opts: { signal?: AbortSignal; identityId?: string; probe?: boolean } = {}): Promise<Map<string, LiveRelationTree>> {
    const { probe, ...readOpts } = opts;
    return readRelationTrees((sql, params) => this.read(sql, params, { maxRows: MAX_HIERARCHY_ROWS, maxBytes: 4 * 1024 * 1024, ...readOpts }), relations, { probe });
  }

  /**
   * The foreign keys with a writing referential action as the server has them now (rtfk finding 1;
   * src/sources/postgres/referential-keys.ts), keyed by the referenced relation, read as a read of
   * `opts.identityId` (fair share and breaker apply).
   * @throws as `read`, or Error when the answer was incomplete or malformed
   */
  referentialKeys(opts: { signal?: AbortSignal; identityId?: string } = {}): Promise<Map<string, ReferencingKey[]>> {
    return readReferentialKeys((sql, params) => this.read(sql, params, { maxRows: MAX_REFERENTIAL_KEY_ROWS, maxBytes: 16 * 1024 * 1024, ...opts }));
  }

  /**
   * The printed definitions of `views` as the server has them now (rtfk3 finding V3;
   * src/sources/postgres/referential-keys.ts readViewDefinitions), keyed by `relKey`, read as a read
   * of `opts.identityId` (fair share and breaker apply).
   * @throws as `read`, or Error when the answer was incomplete or malformed
   */
  viewDefinitions(views: readonly RelationName[], opts: { signal?: AbortSignal; identityId?: string } = {}): Promise<Map<string, string>> {
    return readViewDefinitions((sql, params) => this.read(sql, params, { maxRows: views.length + 1, maxBytes: 16 * 1024 * 1024, ...opts }), views);
  }

  /**
   * The write privileges the source's writer role lacks on `relations` (writer-privileges.ts), read
   * as a read of `opts.identityId` (fair share and breaker apply); null when no writer role is
   * configured. A queued write whose target its writer may not modify is refused before it waits
   * for an operator (task hnu42a finding 3).
   * @throws as `read`, or Error for a malformed answer
   */
  async writerMissingPrivileges(relations: readonly RelationName[], opts: { signal?: AbortSignal; identityId?: string } = {}): Promise<Map<string, WritePrivilege[]> | null> {
    if (!this.s.writer) return null;
    return writerMissingPrivileges((sql, params) => this.read(sql, params, { maxRows: relations.length + 1, maxBytes: 16 * 1024 * 1024, ...opts }), this.s.writer.user, relations);
  }

  /**
   * The server's `server_version_num` now (e.g. 180004), read as a read of `opts.identityId` (fair
   * share and breaker apply): an approved MERGE into a row-ruled table runs only on PostgreSQL 17 or
   * later (issue 27, src/approvals/execute.ts).
   * @throws as `read`, or Error when the answer is not a positive integer
   */
  async serverVersionNum(opts: { signal?: AbortSignal; identityId?: string } = {}): Promise<number> {
    const r = await this.read("SELECT pg_catalog.current_setting('server_version_num')", [], { maxRows: 1, maxBytes: 4096, ...opts });
    const v = Number(r.rowsArray[0]?.[0]);
    if (!Number.isInteger(v) || v <= 0) throw new Error('server_version_num answer malformed');
    return v;
  }

  /**
   * A read guard (ReadOptions.guard) that lets the read's statement run only when every relation
   * of `relations` provably stands alone on the server (hierarchy.ts standaloneGuardSql); when one
   * may sit in a tree the read resolves with `guardTripped` and no rows, its statement not run.
   */
  standaloneGuard(relations: readonly RelationName[]): { text: string; values: string[] } {
    return standaloneGuard(relations);
  }

  /**
   * A read guard (ReadOptions.functionGuard, tasks hf5, hg1) that lets the read's statement run only
   * while the functions and operators of every name its analysis `names` (`userFunctions`,
   * `resolvedNames`) looks up are the ones `catalog` recorded (function-guard.ts) and the relations
   * `rowShapes` still have the scanned columns (shape-guard.ts, task hrt42), and the casts and
   * domain constraints of the types it involves (`names.typeUses`) are the scanned ones
   * (type-guard.ts, task hcast), and the views and materialized views it goes through have the
   * scanned definitions and the stored generated columns it reads their scanned expressions
   * (view-guard.ts, red team rt49 V1, V2), and with `opts.relationKinds` that the tables it reads
   * are still tables (not replaced by views of their names, rt49 R1); one statement, null for none.
   */
  functionGuard(catalog: SourceCatalog, names: (GuardedNames & { typeUses?: TypeUses } & ViewUses) | undefined, rowShapes?: ReadonlyArray<{ schema: string; name: string }>, opts?: { relationKinds?: boolean }): ReadGuard | null {
    return withViewGuard(catalog, withShapeGuard(catalog, withTypeGuard(catalog, functionGuard(catalog, names), names?.typeUses), rowShapes), names, opts?.relationKinds === true);
  }

  /**
   * An approved write's guard (task hhook): `guard` (its function and shape guards, or null)
   * followed by the write-hook guard of `relations` (hook-guard.ts: every relation the write
   * touches, src/sql/referential-reach.ts `touched`), which lets the statement run only while each
   * has the scanned fingerprint of the code its writes run (`CatalogRelation.hookVersion`: triggers
   * and their functions, rules, row-level security, defaults, generated expressions, constraints,
   * indexes, children, column domains). `incomplete`: the walk met a relation the catalogue does not
   * record; the guard then always trips. `targets` (the write's targets): locked ROW EXCLUSIVE
   * before the guard runs (`lock`, hook-guard.ts lockSql; red team rt44a L1). `guard` itself when
   * `relations` is empty and complete.
   */
  hookGuard(catalog: SourceCatalog, guard: ReadGuard | null, relations: readonly RelationName[], incomplete = false, targets: readonly RelationName[] = []): WriteGuard | null {
    return withHookGuard(catalog, guard, relations, incomplete, targets);
  }

  /**
   * Runs an approved write (sql-safety layer 5) as the writer role: `BEGIN; <statement>; COMMIT` on one
   * connection, the statement over the extended protocol; any error rolls back.
   *
   * `opts.settings` (name, value pairs) are set transaction-locally before the statement: a row-ruled
   * write's identity attributes (issue 27), read by the row views' rules. `opts.countChanges`: count
   * every row the statement changes in its transaction, not only its command tag's (runWrite).
   * `opts.guard` (task hw; `functionGuard` of the write's analysis and the catalogue the approval
   * analysed with): run in the write's transaction right before the statement; when the functions,
   * operators or row shapes are not the scanned ones the statement is not run, the transaction is
   * rolled back and the write resolves `{ rowCount: 0, functionsChanged: true }`.
   *
   * @returns rowCount of the statement (and `functionsChanged` when the guard refused it; `commitResolved`
   *   when COMMIT's answer was lost and the server, asked on a new connection, said the transaction
   *   committed: write.ts commitStatus)
   * @throws SourceError: as `read`; 'execution_failed' also when no writer role is configured, or when the
   *   statement ended the transaction itself; 'outcome_unknown' when COMMIT was sent, no answer came
   *   and the server could not say (in time) whether the transaction committed. An abort after COMMIT was sent is ignored (the outcome is then
   *   the real one, never a false 'cancelled').
   */
  write(sql: string, params: unknown[], opts: { signal?: AbortSignal; settings?: ReadonlyArray<readonly [string, string]>; countChanges?: boolean; searchPath?: readonly string[]; guard?: WriteGuard } = {}): Promise<{ rowCount: number; functionsChanged?: true; commitResolved?: true }> {
    if (opts.signal?.aborted) return Promise.reject(new SourceError('cancelled'));
    if (!this.s.writer) return Promise.reject(localFailure('no writer role is configured for this source'));
    let values: unknown[];
    try {
      if (typeof sql !== 'string') throw localFailure('sql must be a string');
      values = encodeParams(params);
    } catch (err) {
      return Promise.reject(err);
    }
    // The writer resolves names on the scanned path, as the analysis did (startup search_path, task hrt42).
    this.ctx.pools.pinSearchPath(opts.searchPath);
    return this.guard(() => runWrite(this.ctx, sql, values, opts.signal, opts.settings, opts.countChanges === true, opts.guard));
  }

  /**
   * Lends a reader connection (read-only, time-limited) to trusted internal code such as the catalog
   * scanner, through the breaker. `fn` must leave the session as it found it: the connection is
   * destroyed instead of reused when `fn` throws, leaves a transaction open, or changes a reported
   * session parameter. Errors are classified like a read's.
   */
  withReader<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    return this.guard(() => lendReader(this.ctx, fn));
  }

  /** Shuts the breaker down and ends both pools (waits for connections in use to be returned). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.breaker.shutdown();
    await this.pools.close();
  }

  // ---------------------------------------------------------------------------------------------

  /** Runs `fn` through the breaker, mapping the breaker's own rejections to SourceErrors. */
  private guard<T>(fn: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(localFailure('the source connector is closed'));
    return this.breaker.run(fn);
  }

  private fail(err: unknown, phase: FailurePhase, extra: { cancelledByCaller?: boolean; watchdogFired?: boolean } = {}): SourceError {
    const se = classifyFailure(err, { phase, tlsConfigured: this.s.tls.mode !== 'off', ...extra });
    const cause = internalCause(se) ?? err;
    if (se.sourceFailure) this.logger?.warn({ err: cause, code: se.code, sql_state: se.sqlState, phase }, 'source failure');
    else if (se.code === 'execution_failed') this.logger?.debug({ err: cause, code: se.code, sql_state: se.sqlState, phase }, 'statement failed');
    return se;
  }
}
