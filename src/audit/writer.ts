/**
 * The audit trail in the control database (issue 3, Build 10): one canonical event per tools/call
 * (kind tool_call) and per approval action (kind approval). Append-only: the table's trigger
 * refuses UPDATE, DELETE and TRUNCATE, and the gateway's role gets INSERT and SELECT only
 * (grantRuntimeRole). Never a key, never a redacted value: the pipeline redacts before it audits,
 * and every row is normalised before it is stored (event-text.ts), which also drops detail
 * fields whose names say they hold secrets.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { Logger } from 'pino';
import type { ControlDb } from '../control/db';
import { ValidationError } from '../control/errors';
import { iso } from '../control/ids';
import { controlPool } from '../control/targets';
import { appendAuditBatch, setSessionStatementTimeout } from './append';
import { ChainLane } from './chain';
import type { AuditKey } from './key';
import { eventsText, normalizeAuditRow } from './event-text';
import type { APPROVAL_ACTIONS, AuditKind, AuditRowInput, AuditSink, ToolCallAuditEvent } from './types';

export type { AuditKind, AuditRowInput } from './types';


/** Approval actions recorded in the trail (the `decision` column of kind approval). */
export type ApprovalAction = (typeof APPROVAL_ACTIONS)[number];

/** One stored audit event. `id` is a decimal string (bigserial; "p" + a number for a pending event, `unsealed`); times are ISO-8601 UTC. */
export interface AuditRecord {
  id: string;
  kind: AuditKind;
  time: string;
  requestId: string | null;
  identityId: string | null;
  keyId: string | null;
  tool: string | null;
  canonicalTool: string | null;
  dialect: string | null;
  protocolVersion: string | null;
  decision: string;
  reasonCode: string | null;
  sourceId: string | null;
  action: string | null;
  fingerprint: string | null;
  relations: string[] | null;
  rowCount: number | null;
  durationMs: number | null;
  approvalId: string | null;
  operator: string | null;
  details: Record<string, unknown>;
  /** Present (true) on a pending event: recorded, not chained yet (id "p…"; migration 20261211140000000). */
  unsealed?: true;
}

/** An approval action to record. */
export interface ApprovalAuditEvent {
  approvalId: string;
  action: ApprovalAction;
  /** Operator who acted (approve/reject), or "system:expiry". */
  operator?: string | null;
  identityId?: string | null;
  keyId?: string | null;
  sourceId?: string | null;
  requestId?: string | null;
  /** Stable code, e.g. "self_approval_forbidden", "statement_failed". */
  reasonCode?: string | null;
  fingerprint?: string | null;
  relations?: string[] | null;
  rowCount?: number | null;
  durationMs?: number | null;
  details?: Record<string, unknown>;
  /** Defaults to now. */
  time?: Date | string;
}

type Queryable = ControlDb | pg.ClientBase;
const q = (db: Queryable) => ('pool' in db ? db.pool : db);

const str = (v: unknown): string | null => (typeof v === 'string' && v.length > 0 ? v : null);
const int = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? Math.trunc(v) : null);
const strs = (v: unknown): string[] | null => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : null);


/** Columns taken out of ToolCallAuditEvent.details (the rest stays in the details column). */
const MAPPED_DETAILS = ['source_id', 'action', 'fingerprint', 'relations', 'row_count', 'approval_id'];

/** The stored row of a tool-call event: details.source_id, action, fingerprint, relations, row_count and approval_id become columns. */
export function toolCallRow(e: ToolCallAuditEvent): AuditRowInput {
  const d = (e.details ?? {}) as Record<string, unknown>;
  const rest: Record<string, unknown> = {};
  // Own enumerable string keys in Object.entries' order, each value read once (no pair arrays: h28e).
  const keys = Object.keys(d);
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i];
    if (!MAPPED_DETAILS.includes(k)) rest[k] = d[k];
  }
  return {
    kind: 'tool_call',
    time: e.time ?? null,
    request_id: e.requestId ?? null,
    identity_id: e.identityId ?? null,
    key_id: e.keyId ?? null,
    tool: e.tool ?? null,
    canonical_tool: e.canonicalTool ?? null,
    dialect: e.dialect ?? null,
    protocol_version: e.protocolVersion ?? null,
    decision: e.decision,
    reason_code: e.reasonCode ?? null,
    source_id: str(d.source_id),
    action: str(d.action),
    fingerprint: str(d.fingerprint),
    relations: strs(d.relations),
    row_count: int(d.row_count),
    duration_ms: typeof e.durationMs === 'number' && Number.isFinite(e.durationMs) ? e.durationMs : null,
    approval_id: str(d.approval_id),
    operator: null,
    details: rest,
  };
}

/**
 * Stores `rows` as one sealed, hash-chained batch (format 2: interlock_audit_append_v2 parses and
 * hashes the batch's canonical text, event-text.ts, built from the rows as normalised for
 * storage) and returns the batch id (decimal string). A row without a valid time gets the current
 * time. With a pooled client inside a transaction, the rows commit with the caller's other writes;
 * with the pool, the statement commits on its own (one commit). With `timeoutMs` the statement runs
 * under that statement_timeout (set_config(…, true) in the same implicit transaction and round
 * trip, through named statements prepared once per connection: append.ts), so it either
 * commits within it or not at all. Throws the driver error (class 22/23 for a malformed row, 57014
 * past the timeout, others when the store is down).
 */
export async function appendAuditRows(db: Queryable | pg.Pool, rows: AuditRowInput[], timeoutMs?: number): Promise<string> {
  const target = 'pool' in db ? db.pool : db;
  const batchText = eventsText(rows.map((r) => normalizeAuditRow(r)));
  if (timeoutMs === undefined) {
    const r = await target.query<{ b: string }>('SELECT interlock_audit_append_v2($1) AS b', [batchText]);
    return String(r.rows[0].b);
  }
  return appendAuditBatch(target, batchText, timeoutMs);
}

/** A copy of `row` that the database accepts whatever its content: the current time, no counts, details replaced by {audit_error: "malformed_event"} (strings are made storable by appendAuditRows). */
function minimalRow(row: AuditRowInput): AuditRowInput {
  return { ...row, time: null, row_count: null, duration_ms: null, details: { audit_error: 'malformed_event' } };
}

/** A row the database refuses (data exception 22, constraint 23, program limit 54 such as an index entry too large): retried alone, then without details. */
const isMalformed = (err: unknown) => /^(2[23]|54)/.test((err as { code?: string }).code ?? '');

/** Least time (ms) between two probes of GroupCommitAuditSink.recheckKeyRefusal (a rolled-back insert each). */
export const KEY_PROBE_INTERVAL_MS = 1000;

/** Thrown by GroupCommitAuditSink.record when the event could not be committed within the bound. */
export class AuditUnavailableError extends Error {
  constructor(readonly reason?: unknown) {
    super('audit event not committed within the bound');
  }
}

/** Options of GroupCommitAuditSink. */
export interface GroupCommitOptions {
  /** Most events per batch (default 500). */
  maxBatch?: number;
  /** How long record() waits for the commit before it rejects with AuditUnavailableError (ms, default 2000; config audit.commit_timeout_ms). */
  commitTimeoutMs?: number;
  /** Batches in flight at once, each lane its own chain (default 2; chain.ts). */
  lanes?: number;
  /**
   * While another lane has a batch in flight, an idle lane starts one only when at least this many
   * events wait (default 1: at once). Larger values make fewer, larger batches under load (less
   * control-database CPU per event) at the price of events waiting for the busy lane; with no
   * batch in flight an idle lane always starts at once.
   */
  laneStartEvents?: number;
  /**
   * When a second lane may start a batch while another lane has one in flight (issue 28, h28b):
   * a number (ms) — only once the newest batch in flight has been in flight that long (0: at once,
   * the policy before h28b); 'auto' (default) — only once it has been in flight
   * OVERLAP_FACTOR × the typical batch (an exponentially weighted mean of the last batches' wall
   * times, OVERLAP_FIRST_MS before the first), i.e. only while a commit stalls. Events that arrive
   * during an ordinary commit wait for it and share the next batch (fewer commits per event: the
   * control database's CPU per call); a stalled commit still lets the next batch commit beside it.
   */
  overlapAfterMs?: number | 'auto';
  /** The audit key that tags every lane's batches (chain format 5, chain.ts; src/audit/key.ts); absent or null: format 3, unkeyed. */
  key?: AuditKey | null;
}

/** 'auto' overlap: a batch in flight longer than this many typical batches counts as stalled. */
export const OVERLAP_FACTOR = 2;
/** 'auto' overlap before the first batch has committed (ms). */
export const OVERLAP_FIRST_MS = 2;

interface Waiter {
  event: ToolCallAuditEvent;
  /** Built when the writer takes the event (so a late details.delivered = false is kept). */
  row?: AuditRowInput;
  resolve: () => void;
  reject: (e: unknown) => void;
  taken: boolean;
  /** Date.now() after which the caller is answered audit_unavailable. */
  deadline: number;
  settled?: boolean;
  timer: NodeJS.Timeout;
}

/**
 * Whether `err` is the keyed trail's refusal of a batch (SQLSTATE 42501 raised by the trigger of
 * migration audit-keyed-chain_f1, whose message names `audit_keyed_trail`): 'no_key' for an unkeyed
 * (format-3) batch, 'key_not_registered' for a keyed chain whose key id the owner did not register,
 * 'key_retired' for a batch under a key id the owner retired (migration audit-key-retire_low47);
 * null for any other error.
 */
export function keyedTrailRefusal(err: unknown): KeyedTrailRefusal | null {
  const e = err as { code?: unknown; message?: unknown } | null;
  if (!e || e.code !== '42501' || typeof e.message !== 'string' || !e.message.includes('audit_keyed_trail')) return null;
  return e.message.includes('is retired') ? 'key_retired' : e.message.includes('is not registered') ? 'key_not_registered' : 'no_key';
}

/** Why the keyed trail refuses a writer's batches (keyedTrailRefusal). */
export type KeyedTrailRefusal = 'no_key' | 'key_not_registered' | 'key_retired';

/** The error line a writer logs once when the keyed trail starts refusing its batches (`keyId`: its key's id, null without a key). */
function keyedTrailRefusalLog(reason: KeyedTrailRefusal, keyId: string | null): string {
  const effect = 'every governed call is refused audit_unavailable, and /readyz reports audit_key_refused,';
  if (reason === 'no_key') return `the audit trail is keyed and refuses this gateway's unkeyed batches: ${effect} until the gateway runs with the audit key (audit.key / INTERLOCK_AUDIT_KEY; docs/operators.md "The audit key")`;
  if (reason === 'key_retired') return `the audit trail is keyed and this gateway's audit key (id ${keyId}) is retired (\`interlock audit retire-key\`): ${effect} until the gateway runs with a registered key that is not retired as audit.key (INTERLOCK_AUDIT_KEY), the retired one only in audit.previous_keys (docs/operators.md "The audit key")`;
  return `the audit trail is keyed and this gateway's audit key (id ${keyId}) is not registered: ${effect} until the owner runs \`interlock audit require-key\` with this key configured (docs/operators.md "The audit key")`;
}

/**
 * The durable audit writer (issue 11, Build 1–2; issue 28): `record` resolves only after the
 * event's batch has committed. Writer lanes (default two) drain one queue in arrival order: an idle
 * lane takes every waiting event (up to maxBatch) and stores them as its chain's next batch (chain
 * format 3, or 5 tagged with the audit key given as `key`, chain.ts: hashed here, one INSERT statement
 * and one commit), then settles those waiters
 * and takes the next batch. So up to `lanes` batches commit at once, each lane keeps its own chain in
 * order with one batch in flight, and a crash between two batches leaves open chains, never a gap.
 * At concurrency 1 that is one commit per call; under load events that arrive during a commit share
 * the next one. A second lane starts beside a busy one only once the batch in flight has lasted
 * twice the typical batch (overlapAfterMs 'auto', h28b): an ordinary commit is waited for (fewer,
 * larger batches), a stalled one is not.
 *
 * The event's row is built when a lane takes it, so details changed while it waits in the
 * queue (the dispatcher sets details.delivered = false when the client goes away) are stored.
 *
 * Fail closed: a waiter not committed within commitTimeoutMs rejects with AuditUnavailableError.
 * An event not yet taken by a lane is withdrawn; a batch runs under a statement_timeout that
 * ends at its earliest waiter's deadline, so a slow database commits it in time or not at all. Not
 * covered: a backend stalled before it starts the batch (paused process, frozen VM, healed
 * partition) has not started that timer and may commit the batch after its callers were answered
 * audit_unavailable (over-recording; docs/operators.md). A batch the database rejects as malformed (class
 * 22/23/54) is retried one event at a time, and an event still rejected is stored without its details.
 * The pool reconnects by itself: once the database is back the next batch succeeds. `close` seals
 * every lane's chain (a last batch of mark 'seal').
 */
export class GroupCommitAuditSink implements AuditSink {
  private queue: Waiter[] = [];
  private readonly lanes: ChainLane[];
  private readonly idle: ChainLane[];
  private inFlight = 0;
  private idleWaiters: Array<() => void> = [];
  private readonly timeoutMs: number;
  /** performance.now() at which each busy lane's batch started. */
  private readonly batchStarts = new Map<ChainLane, number>();
  /** Exponentially weighted mean of the last batches' wall times (ms; 0 before the first). */
  private typicalMs = 0;
  /** Armed while events wait for a busy lane's batch to count as stalled ('auto' or a number > 0). */
  private stallTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly pool: pg.Pool,
    private readonly logger?: Logger,
    private readonly opts: GroupCommitOptions = {},
  ) {
    this.timeoutMs = opts.commitTimeoutMs ?? 2000;
    this.lanes = Array.from({ length: Math.max(1, Math.trunc(opts.lanes ?? 2)) }, () => new ChainLane(pool, opts.key ?? null));
    this.idle = [...this.lanes];
  }

  /** Set while the keyed trail refuses this writer's batches (keyRefusal). */
  private refusedByKeyedTrail: KeyedTrailRefusal | null = null;

  /**
   * Why the database's keyed trail (migration audit-keyed-chain_f1, `audit_keyed_trail`) refuses this
   * writer's batches, or null: 'no_key' (the trail is keyed and this writer has no audit key: its
   * format-3 batches are refused) or 'key_not_registered' (its key's id is not among the ids the
   * owner registered with `interlock audit require-key`) or 'key_retired' (the owner retired its
   * key's id: `interlock audit retire-key`). Set by a batch refused so (SQLSTATE 42501
   * from the trail's trigger), cleared by the next batch that commits. The gateway reports it as not
   * ready (/readyz reason `audit_key_refused`): every governed call fails closed until it is fixed.
   */
  keyRefusal(): KeyedTrailRefusal | null {
    return this.refusedByKeyedTrail;
  }

  /** performance.now() of the last recheckKeyRefusal probe that ran (-Infinity: none yet). */
  private lastKeyProbe = -Infinity;
  /** The probe running, shared by concurrent callers. */
  private keyProbe: Promise<void> | null = null;

  /**
   * keyRefusal(), asked of the database again while it is set (red team rt47a H2): a refused gateway
   * is not ready, so a load balancer sends it no calls, and without a call no batch would ever clear the
   * refusal after the owner fixed it (`interlock audit require-key` registering its key, as the rotation
   * steps say): the replica stayed unready until restarted. At most once per KEY_PROBE_INTERVAL_MS, it
   * inserts the genesis this writer would (format 5 under its key, format 3 without one; no events) in
   * a transaction it rolls back, so nothing is stored (a batch id is used up, as by any failed append):
   * the trail's trigger refuses it (42501) while the refusal holds. Accepted, the refusal is cleared (and
   * logged, as after a batch). Any other error keeps it. Waits for the probe at most the commit bound
   * (commitTimeoutMs). Never throws. Called by the gateway's /readyz.
   */
  async recheckKeyRefusal(): Promise<KeyedTrailRefusal | null> {
    if (!this.refusedByKeyedTrail) return null;
    if (!this.keyProbe && performance.now() - this.lastKeyProbe >= KEY_PROBE_INTERVAL_MS) {
      this.lastKeyProbe = performance.now();
      this.keyProbe = this.probeKeyedTrail().finally(() => (this.keyProbe = null));
    }
    if (this.keyProbe) {
      // A busy pool or a slow database does not hold /readyz: past the bound it answers with the refusal as it stands.
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.keyProbe, new Promise<void>((r) => (timer = setTimeout(r, this.timeoutMs)))]).finally(() => clearTimeout(timer));
    }
    return this.refusedByKeyedTrail;
  }

  private async probeKeyedTrail(): Promise<void> {
    const key = this.opts.key ?? null;
    let c: pg.PoolClient | null = null;
    try {
      c = await this.pool.connect();
      await c.query('BEGIN');
      try {
        await c.query(
          `INSERT INTO audit_batches (committed_at, event_count, prev_hash, hash, format, chain_id, seq, mark, anchors${key ? ', mac_key_id' : ''})
           VALUES (now(), 0, NULL, $1::bytea, ${key ? 5 : 3}, $2::uuid, 0, NULL, '[]'${key ? ', $3::text' : ''})`,
          key ? [Buffer.alloc(32), randomUUID(), key.id] : [Buffer.alloc(32), randomUUID()],
        );
      } finally {
        await c.query('ROLLBACK');
      }
      if (this.refusedByKeyedTrail) {
        this.refusedByKeyedTrail = null;
        this.logger?.info({ component: 'audit' }, 'the keyed audit trail accepts this gateway\'s batches again');
      }
    } catch {
      // Refused again (42501), or the database did not answer: the refusal stays; the next probe asks again.
    } finally {
      c?.release();
    }
  }

  /** Events waiting for a lane plus taken events not yet settled (batches being committed): a queue depth for admission control and metrics. */
  pendingEvents(): number {
    return this.queue.length + this.inFlight;
  }

  /** Events waiting for the writer, not yet taken into a batch (issue 29: admission by capacity reads it as back-pressure). */
  get queueDepth(): number {
    return this.queue.length;
  }

  record(event: ToolCallAuditEvent): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = {
        event,
        resolve,
        reject,
        taken: false,
        deadline: Date.now() + this.timeoutMs,
        // Not yet taken by a lane: withdraw it. Taken: its batch runs under a statement_timeout
        // ending at the earliest deadline of the batch, so the batch's own result settles it in time.
        timer: setTimeout(() => {
          if (w.taken) return;
          this.queue = this.queue.filter((x) => x !== w);
          reject(new AuditUnavailableError());
        }, this.timeoutMs),
      };
      this.queue.push(w);
      this.pump();
    });
  }

  /** The typical batch's wall time (ms): an exponentially weighted mean of the last batches' (weight 1/8), 0 before the first batch settled. */
  get typicalBatchMs(): number {
    return this.typicalMs;
  }

  /** Gives waiting events to idle lanes. */
  private pump(): void {
    const atLeast = Math.max(1, Math.trunc(this.opts.laneStartEvents ?? 1));
    while (this.queue.length && this.idle.length) {
      if (this.idle.length < this.lanes.length) {
        if (this.queue.length < atLeast) return;
        const wait = this.overlapWaitMs();
        if (wait > 0) {
          // The batch in flight is not (yet) stalled: its lane takes these events when it returns.
          this.stallTimer ??= setTimeout(() => {
            this.stallTimer = null;
            this.pump();
          }, Math.ceil(wait)).unref();
          return;
        }
      }
      const lane = this.idle.pop()!;
      const taken = this.queue.splice(0, this.opts.maxBatch ?? 500);
      this.inFlight += taken.length;
      const started = performance.now();
      this.batchStarts.set(lane, started);
      void this.run(lane, taken).finally(() => {
        this.batchStarts.delete(lane);
        const ms = performance.now() - started;
        // One batch stuck until its timeout moves the mean by at most 3/8 of it.
        this.typicalMs = this.typicalMs === 0 ? ms : this.typicalMs + (Math.min(ms, 4 * this.typicalMs) - this.typicalMs) / 8;
        this.idle.push(lane);
        if (this.stallTimer) {
          clearTimeout(this.stallTimer);
          this.stallTimer = null;
        }
        if (this.queue.length) this.pump();
        else if (this.idle.length === this.lanes.length) for (const f of this.idleWaiters.splice(0)) f();
      });
    }
  }

  /** How much longer (ms) the newest batch in flight must last before an idle lane may start another beside it (≤ 0: now); see GroupCommitOptions.overlapAfterMs. */
  private overlapWaitMs(): number {
    const after = this.opts.overlapAfterMs ?? 'auto';
    const threshold = after === 'auto' ? (this.typicalMs > 0 ? OVERLAP_FACTOR * this.typicalMs : OVERLAP_FIRST_MS) : after;
    if (threshold <= 0) return 0;
    let newest = -Infinity;
    for (const t of this.batchStarts.values()) if (t > newest) newest = t;
    return newest + threshold - performance.now();
  }

  private async run(lane: ChainLane, taken: Waiter[]): Promise<void> {
    const now = Date.now();
    const batch: Waiter[] = [];
    try {
      for (const w of taken) {
        w.taken = true;
        if (w.deadline <= now) this.settle(w, new AuditUnavailableError());
        else {
          try {
            w.row = toolCallRow(w.event);
            batch.push(w);
          } catch (err) {
            // Only this event's details could not be read: its caller alone is refused.
            this.settle(w, err);
          }
        }
      }
      if (batch.length) await this.write(lane, batch);
    } catch (err) {
      // Never leave a taken caller waiting (its own timer does not settle it).
      for (const w of taken) this.settle(w, err);
    }
  }

  private settle(w: Waiter, err?: unknown): void {
    if (w.settled) return;
    w.settled = true;
    if (w.taken) this.inFlight--;
    clearTimeout(w.timer);
    if (err === undefined) w.resolve();
    else w.reject(err instanceof AuditUnavailableError ? err : new AuditUnavailableError(err));
  }

  private async write(lane: ChainLane, batch: Waiter[]): Promise<void> {
    const left = () => Math.min(...batch.map((w) => w.deadline)) - Date.now();
    try {
      await lane.append(batch.map((w) => w.row!), left());
      if (this.refusedByKeyedTrail) {
        this.refusedByKeyedTrail = null;
        this.logger?.info({ component: 'audit' }, 'the keyed audit trail accepts this gateway\'s batches again');
      }
      for (const w of batch) this.settle(w);
      return;
    } catch (err) {
      const keyed = keyedTrailRefusal(err);
      if (keyed) {
        // Not a slow database: the trail is keyed and refuses this writer until it is given a registered key (nu46).
        if (this.refusedByKeyedTrail !== keyed) {
          this.logger?.error({ component: 'audit', code: '42501', reason: keyed, keyId: this.opts.key?.id ?? null }, keyedTrailRefusalLog(keyed, this.opts.key?.id ?? null));
        }
        this.refusedByKeyedTrail = keyed;
        for (const w of batch) this.settle(w, err);
        return;
      }
      if (!isMalformed(err)) {
        this.logger?.error({ component: 'audit', code: (err as { code?: string }).code, events: batch.length }, 'audit batch not committed');
        for (const w of batch) this.settle(w, err);
        return;
      }
    }
    for (const w of batch) {
      try {
        const ms = () => w.deadline - Date.now();
        if (ms() <= 0) throw new AuditUnavailableError();
        await lane.append([w.row!], ms()).catch(async (err) => {
          if (!isMalformed(err) || ms() <= 0) throw err;
          this.logger?.warn({ component: 'audit', code: (err as { code?: string }).code, requestId: w.event.requestId }, 'malformed audit event; recording it without details');
          return lane.append([minimalRow(w.row!)], ms());
        });
        this.settle(w);
      } catch (err) {
        this.settle(w, err);
      }
    }
  }

  /**
   * Waits for every queued and in-flight event to settle, then seals each lane's chain (a batch of
   * mark 'seal', within `timeoutMs`, default the commit bound). A seal that fails is logged: that
   * chain stays open, which verify reports as open, not as tampering. Call once, after the last record.
   */
  async close(timeoutMs = this.timeoutMs): Promise<void> {
    while (this.queue.length || this.idle.length < this.lanes.length) await new Promise<void>((r) => this.idleWaiters.push(r));
    await Promise.all(
      this.lanes.filter((l) => l.started).map((l) =>
        l.append([], timeoutMs, 'seal').catch((err) => this.logger?.warn({ component: 'audit', code: (err as { code?: string }).code }, 'audit chain not sealed')),
      ),
    );
  }
}

/** A GroupCommitAuditSink on the control database's shared pool (tests, tools); the gateway uses its own pool (openAuditPool). */
export class DbAuditSink extends GroupCommitAuditSink {
  constructor(db: ControlDb, logger?: Logger, opts: GroupCommitOptions = {}) {
    super(db.pool, logger, { commitTimeoutMs: 30_000, ...opts });
  }
}

/**
 * The statement_timeout (ms) the audit pool's connections start with for a commit bound of
 * `commitTimeoutMs`: the bound less a slack of a tenth of it, at most 50 ms (at least 1 ms in
 * all). A batch whose events waited in the queue less than the slack (one or two commits under
 * load) runs under it with no per-batch set_config (append.ts); a batch with less time left sets
 * its own. The price: a batch stuck in a slow database is cancelled up to the slack before its
 * callers' deadline (they are answered audit_unavailable that much earlier, never later).
 */
export function auditSessionTimeoutMs(commitTimeoutMs: number): number {
  const bound = Math.max(1, Math.trunc(commitTimeoutMs));
  return Math.max(1, bound - Math.min(50, Math.floor(bound / 10)));
}

/**
 * How long an idle connection of the audit pool stays open, in ms (pg-pool's idleTimeoutMillis;
 * its default is 10 s). Task h28c: a connection closed after a quiet spell is reopened by the next
 * batch, which then pays the backend's start and the parse and plan of every append statement
 * size it meets again (up to 33, chain.ts), on the control database's CPU; 60 s keeps them across
 * short gaps in the traffic while a quiet gateway still lets its two connections go.
 */
export const AUDIT_IDLE_TIMEOUT_MS = 60_000;

/**
 * A pool for the audit writer: `max` connections (default 2), connection timeout equal to the
 * commit bound, idle connections closed after AUDIT_IDLE_TIMEOUT_MS, and two settings each
 * connection starts with (startup options): statement_timeout auditSessionTimeoutMs(bound) (so most
 * batches need no set_config of their own: append.ts) and plan_cache_mode force_generic_plan (task
 * h28c: each named append statement is planned once per connection, at its first batch; by
 * default PostgreSQL plans a prepared statement afresh for each of its first five executions,
 * which for the VALUES statements of 10–32 events cost the control database up to ~1.6 ms each;
 * an INSERT's plan does not depend on its parameters, so the generic plan is the same plan). A
 * client-side query timeout one second past the bound, idle errors logged. End it after the
 * gateway has flushed.
 */
export function openAuditPool(url: string, commitTimeoutMs: number, logger?: Logger, max = 2): pg.Pool {
  const session = auditSessionTimeoutMs(commitTimeoutMs);
  // query_timeout is a client-side backstop for a connection that stops answering altogether.
  const pool = controlPool(url, {
    max,
    application_name: 'interlock-audit',
    connectionTimeoutMillis: commitTimeoutMs,
    idleTimeoutMillis: AUDIT_IDLE_TIMEOUT_MS,
    query_timeout: commitTimeoutMs + 1000,
    options: `-c statement_timeout=${session} -c plan_cache_mode=force_generic_plan`,
  }); // several hosts: follows the primary (issue 29)
  setSessionStatementTimeout(pool, session);
  pool.on('error', (err) => logger?.warn({ component: 'audit', code: (err as { code?: string }).code }, 'idle audit connection failed'));
  return pool;
}

/** The stored row of an approval action (kind approval; decision = the action). */
export function approvalRow(e: ApprovalAuditEvent): AuditRowInput {
  return {
    kind: 'approval',
    time: e.time instanceof Date ? e.time.toISOString() : (e.time ?? null),
    request_id: e.requestId ?? null,
    identity_id: e.identityId ?? null,
    key_id: e.keyId ?? null,
    tool: null,
    canonical_tool: null,
    dialect: null,
    protocol_version: null,
    decision: e.action,
    reason_code: e.reasonCode ?? null,
    source_id: e.sourceId ?? null,
    action: 'write',
    fingerprint: e.fingerprint ?? null,
    relations: e.relations ?? null,
    row_count: e.rowCount ?? null,
    duration_ms: e.durationMs ?? null,
    approval_id: e.approvalId,
    operator: e.operator ?? null,
    details: e.details ?? {},
  };
}

/** Records one approval action as its own chained batch. Accepts a pooled client to record inside a transaction. */
export async function recordApprovalEvent(db: Queryable, e: ApprovalAuditEvent): Promise<void> {
  await appendAuditRows(db, [approvalRow(e)]);
}

/** A configuration change to record (kind config; issue 16): source update/remove, `interlock apply`. */
export interface ConfigAuditEvent {
  /** What changed: "source_updated", "source_removed", "applied". */
  decision: string;
  /** Operator who made the change (OS user name in direct mode, the token's operator remotely). */
  operator: string;
  sourceId?: string | null;
  /**
   * The identity the change is about (identity_created, grant_added, key_created, …), stored in
   * identity_id so `audit search --identity` finds it. Set only here, when the event is appended:
   * identity_id is part of the chained event text.
   */
  identityId?: string | null;
  /** The change (field names, counts, file digest); secret-named fields are dropped. */
  details?: Record<string, unknown>;
}

/** The stored row of a configuration change (kind config, action config). */
export function configRow(e: ConfigAuditEvent): AuditRowInput {
  return {
    kind: 'config',
    time: null,
    request_id: null,
    identity_id: e.identityId ?? null,
    key_id: null,
    tool: null,
    canonical_tool: null,
    dialect: null,
    protocol_version: null,
    decision: e.decision,
    reason_code: null,
    source_id: e.sourceId ?? null,
    action: 'config',
    fingerprint: null,
    relations: null,
    row_count: null,
    duration_ms: null,
    approval_id: null,
    operator: e.operator,
    details: e.details ?? {},
  };
}

/** Records one configuration change as its own chained batch. Accepts a pooled client to record inside a transaction. */
export async function recordConfigEvent(db: Queryable, e: ConfigAuditEvent): Promise<void> {
  await appendAuditRows(db, [configRow(e)]);
}

/** A stored audit_events row as the driver returns it (bigint row_count as a string). */
interface AuditRow extends Omit<AuditRowInput, 'time' | 'row_count'> {
  id: string;
  time: Date;
  row_count: string | null;
  batch_id: string;
  recorded_at: Date;
}

function toRecord(r: AuditRow): AuditRecord {
  return {
    id: String(r.id),
    kind: r.kind,
    time: iso(r.time)!,
    requestId: r.request_id,
    identityId: r.identity_id,
    keyId: r.key_id,
    tool: r.tool,
    canonicalTool: r.canonical_tool,
    dialect: r.dialect,
    protocolVersion: r.protocol_version,
    decision: r.decision,
    reasonCode: r.reason_code,
    sourceId: r.source_id,
    action: r.action,
    fingerprint: r.fingerprint,
    relations: r.relations,
    rowCount: r.row_count === null ? null : Number(r.row_count),
    durationMs: r.duration_ms,
    approvalId: r.approval_id,
    operator: r.operator,
    details: r.details,
  };
}

/** Filters of searchAudit. Times are Dates or ISO-8601 strings; `cursor` is a nextCursor from a previous page. */
export interface AuditSearch {
  identityId?: string;
  sourceId?: string;
  decision?: string;
  kind?: AuditKind;
  approvalId?: string;
  requestId?: string;
  since?: Date | string;
  until?: Date | string;
  /** Page size, 1–1000 (default 100). */
  limit?: number;
  cursor?: string | null;
}

/** One page of results, newest first; nextCursor is null on the last page. */
export interface AuditPage {
  events: AuditRecord[];
  nextCursor: string | null;
}

function toTime(v: Date | string | undefined, what: string): string | null {
  if (v === undefined) return null;
  const d = v instanceof Date ? v : new Date(v);
  if (Number.isNaN(d.getTime())) throw new ValidationError(`${what}: not a date/time ${JSON.stringify(String(v))} (use ISO-8601, e.g. 2026-11-29T12:00:00Z)`);
  return d.toISOString();
}

/**
 * The pending events (audit_pending_events, migration 20261211140000000: a token sign-in's events
 * stored while another transaction held the approval events' chain, not chained yet) as rows of
 * audit_events (id null), with `pending_id` their place among them.
 */
const PENDING_ROWS = 'SELECT r.*, p.id::text AS pending_id FROM audit_pending_events p CROSS JOIN LATERAL jsonb_populate_record(NULL::audit_events, p.event::jsonb) r';

/** A pending event as a record: id "p" + its place among the pending ones, `unsealed` true. */
function pendingRecord(r: AuditRow & { pending_id: string }): AuditRecord {
  return { ...toRecord(r), id: `p${r.pending_id}`, unsealed: true };
}

/**
 * Searches the trail, newest first, with keyset paging on the event id: pass the returned
 * nextCursor to get the next (older) page. `since` is inclusive, `until` exclusive. `sourceId`
 * matches an event's source_id, and a config event whose details.sources lists it (an
 * `interlock apply`'s `applied` event: the sources its changes concern). The first page (no
 * cursor) starts with the matching pending events (not chained yet: `unsealed` true, id "p…"),
 * newest first, within `limit`; the cursor pages through chained events only.
 * Throws ValidationError for a bad cursor, date or limit.
 */
export async function searchAudit(db: Queryable, s: AuditSearch = {}): Promise<AuditPage> {
  const limit = s.limit ?? 100;
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new ValidationError('limit must be a whole number from 1 to 1000');
  if (s.cursor != null && !/^[0-9]{1,19}$/.test(s.cursor)) throw new ValidationError(`invalid cursor ${JSON.stringify(s.cursor)}`);
  const where = `($1::text IS NULL OR identity_id = $1) AND ($2::text IS NULL OR source_id = $2 OR (kind = 'config' AND details->'sources' ? $2))
       AND ($3::text IS NULL OR decision = $3)
       AND ($4::text IS NULL OR kind = $4) AND ($5::text IS NULL OR approval_id = $5) AND ($6::text IS NULL OR request_id = $6)
       AND ($7::timestamptz IS NULL OR time >= $7) AND ($8::timestamptz IS NULL OR time < $8)`;
  const params = [s.identityId ?? null, s.sourceId ?? null, s.decision ?? null, s.kind ?? null, s.approvalId ?? null, s.requestId ?? null, toTime(s.since, 'since'), toTime(s.until, 'until')];
  const pending = s.cursor == null ? (await q(db).query<AuditRow & { pending_id: string }>(`SELECT * FROM (${PENDING_ROWS}) e WHERE ${where} ORDER BY e.pending_id::bigint DESC LIMIT $9`, [...params, limit])).rows.map(pendingRecord) : [];
  const room = limit - pending.length;
  if (room === 0) {
    // A page of pending events only: the next page starts at the newest chained event.
    const top = await q(db).query<{ next: string | null }>(`SELECT (max(id) + 1)::text AS next FROM audit_events WHERE ${where}`, params);
    return { events: pending, nextCursor: top.rows[0]?.next ?? null };
  }
  const r = await q(db).query<AuditRow>(`SELECT * FROM audit_events WHERE ${where} AND ($9::bigint IS NULL OR id < $9) ORDER BY id DESC LIMIT $10`, [...params, s.cursor ?? null, room + 1]);
  const rows = r.rows.slice(0, room).map(toRecord);
  return { events: [...pending, ...rows], nextCursor: r.rows.length > room ? rows[rows.length - 1].id : null };
}

/** The last `limit` events (1–1000), oldest first, like tail(1); pending events (`unsealed`, not chained yet) last. */
export async function tailAudit(db: Queryable, limit = 20): Promise<AuditRecord[]> {
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new ValidationError('limit must be a whole number from 1 to 1000');
  const pending = (await q(db).query<AuditRow & { pending_id: string }>(`SELECT * FROM (SELECT * FROM (${PENDING_ROWS}) e ORDER BY e.pending_id::bigint DESC LIMIT $1) t ORDER BY t.pending_id::bigint`, [limit])).rows.map(pendingRecord);
  const room = limit - pending.length;
  const r = room > 0 ? await q(db).query<AuditRow>('SELECT * FROM (SELECT * FROM audit_events ORDER BY id DESC LIMIT $1) t ORDER BY id', [room]) : { rows: [] as AuditRow[] };
  return [...r.rows.map(toRecord), ...pending];
}
