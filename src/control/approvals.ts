/**
 * The approval queue (issue 3, Build 7). A write is stored with its exact statement, parameters,
 * identity, key, source and classification, and waits for an operator.
 *
 * States: pending → approved → executed | failed; pending → rejected | expired. The database
 * enforces this (trigger approvals_guard: illegal transitions and any change to the stored request
 * raise; rows cannot be deleted), and transitionApproval is a conditional UPDATE, so of any number
 * of racing callers exactly one moves a given approval out of a given state.
 */
import type pg from 'pg';
import { withTransaction, type ControlDb } from './db';
import { NotFoundError, ValidationError } from './errors';
import { appendAuditRows, approvalRow, recordApprovalEvent, toolCallRow } from '../audit/writer';
import { tagCallRow } from '../audit/call-tag';
import type { AuditKey } from '../audit/key';
import type { ToolCallAuditEvent } from '../audit/types';
import { iso, newApprovalId } from './ids';

/** Every approval state. */
export const APPROVAL_STATES = ['pending', 'approved', 'executed', 'failed', 'rejected', 'expired'] as const;
export type ApprovalState = (typeof APPROVAL_STATES)[number];

/** Default time a pending approval waits before it expires (config approvals.ttl_seconds). */
export const DEFAULT_APPROVAL_TTL_SECONDS = 86_400;

/** What happened when an approved write ran: a row count, or a stable error code (never driver text). */
export interface ApprovalOutcome {
  row_count?: number;
  /** snake_case code, e.g. "statement_failed", "authorization_changed". */
  error_code?: string;
  /** SQLSTATE of a failed statement, e.g. "23505". */
  sqlstate?: string;
}

/**
 * Why an approved write failed, for operators only (CLI, admin API, console; never agents):
 * PostgreSQL's SQLSTATE, message, detail and hint for a statement the source refused, or for a
 * re-check that refused it at approval time, `message` naming the reason. Issue 14, item 4.
 */
export interface ApprovalFailureCause {
  sqlstate?: string;
  message: string;
  detail?: string;
  hint?: string;
}

/** One approval. Times are ISO-8601 UTC. */
export interface ApprovalRecord {
  id: string;
  sourceId: string;
  identityId: string;
  /** Name of the requesting identity (joined for display and the self-approval check). */
  identityName: string;
  keyId: string | null;
  requestId: string;
  sql: string;
  params: unknown[];
  /** What the analyser said: writes, relations, fingerprint, … */
  classification: Record<string, unknown>;
  state: ApprovalState;
  createdAt: string;
  expiresAt: string;
  decidedBy: string | null;
  decidedAt: string | null;
  executedAt: string | null;
  outcome: ApprovalOutcome | null;
  /** Operator-only cause of a failed execution (null unless failed). */
  failure: ApprovalFailureCause | null;
  /** The failed approval this one was requeued from, or null. */
  requeuedFrom: string | null;
  /**
   * Issue 27: for a write queued by an identity from an access token, the values its token's
   * claims gave for the attributes the write's row rules read; at approval the identity record's
   * values win and these fill in the rest (src/approvals/execute.ts). Shown to operators. null: none.
   */
  claimAttributes: Record<string, unknown> | null;
}

/** A write to hold for approval. */
export interface NewApproval {
  sourceId: string;
  identityId: string;
  keyId: string | null;
  requestId: string;
  sql: string;
  params: unknown[];
  classification: Record<string, unknown>;
  /** Seconds until it expires (default DEFAULT_APPROVAL_TTL_SECONDS); ignored when expiresAt is given. */
  ttlSeconds?: number;
  expiresAt?: Date;
  /** The failed approval this one requeues (interlock approval requeue). */
  requeuedFrom?: string;
  /** The requester's claim-derived attribute values its row rules read (ApprovalRecord.claimAttributes); absent or empty: none. */
  claimAttributes?: Record<string, unknown> | null;
}

/** Fields set together with a transition. */
export interface TransitionFields {
  /** Who decided (operator name, or "system:expiry"). Recorded for approved/rejected/expired. */
  decidedBy?: string;
  /** Outcome of an execution (for executed/failed). */
  outcome?: ApprovalOutcome;
  /** Operator-only cause (for failed). */
  failure?: ApprovalFailureCause;
}

type Queryable = ControlDb | pg.ClientBase;
const q = (db: Queryable) => ('pool' in db ? db.pool : db);

interface ApprovalRow {
  id: string;
  source_id: string;
  identity_id: string;
  identity_name: string;
  key_id: string | null;
  request_id: string;
  sql: string;
  params: unknown[];
  classification: Record<string, unknown>;
  state: ApprovalState;
  created_at: Date;
  expires_at: Date;
  decided_by: string | null;
  decided_at: Date | null;
  executed_at: Date | null;
  outcome: ApprovalOutcome | null;
  failure: ApprovalFailureCause | null;
  requeued_from: string | null;
  claim_attributes: Record<string, unknown> | null;
}

const COLS = `a.id, a.source_id, a.identity_id, i.name AS identity_name, a.key_id, a.request_id, a.sql, a.params, a.classification,
  a.state, a.created_at, a.expires_at, a.decided_by, a.decided_at, a.executed_at, a.outcome, a.failure, a.requeued_from, a.claim_attributes`;

function toRecord(r: ApprovalRow): ApprovalRecord {
  return {
    id: r.id,
    sourceId: r.source_id,
    identityId: r.identity_id,
    identityName: r.identity_name,
    keyId: r.key_id,
    requestId: r.request_id,
    sql: r.sql,
    params: r.params,
    classification: r.classification,
    state: r.state,
    createdAt: iso(r.created_at)!,
    expiresAt: iso(r.expires_at)!,
    decidedBy: r.decided_by,
    decidedAt: iso(r.decided_at),
    executedAt: iso(r.executed_at),
    outcome: r.outcome,
    failure: r.failure,
    requeuedFrom: r.requeued_from,
    claimAttributes: r.claim_attributes ?? null,
  };
}

function assertOutcome(o: ApprovalOutcome): void {
  for (const k of Object.keys(o)) {
    if (!['row_count', 'error_code', 'sqlstate'].includes(k)) throw new ValidationError(`approval outcome: unknown field "${k}" (only row_count, error_code, sqlstate; never driver text)`);
  }
  if (o.row_count !== undefined && !(Number.isInteger(o.row_count) && o.row_count >= 0)) throw new ValidationError('approval outcome: row_count must be a non-negative integer');
  if (o.error_code !== undefined && !/^[a-z][a-z0-9_]{0,63}$/.test(o.error_code)) throw new ValidationError('approval outcome: error_code must be a snake_case code');
  if (o.sqlstate !== undefined && !/^[0-9A-Z]{5}$/.test(o.sqlstate)) throw new ValidationError('approval outcome: sqlstate must be a 5-character SQLSTATE');
}

/** Queues a write (state pending). Throws ValidationError for a bad TTL; a foreign-key error when the source or identity does not exist. */
export async function createApproval(db: Queryable, a: NewApproval): Promise<ApprovalRecord> {
  const ttl = a.ttlSeconds ?? DEFAULT_APPROVAL_TTL_SECONDS;
  if (!a.expiresAt && !(Number.isInteger(ttl) && ttl > 0)) throw new ValidationError('approval TTL must be a positive whole number of seconds');
  const id = newApprovalId();
  const r = await q(db).query<ApprovalRow>(
    `WITH ins AS (
       INSERT INTO approvals (id, source_id, identity_id, key_id, request_id, sql, params, classification, expires_at, requeued_from, claim_attributes)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, COALESCE($9::timestamptz, now() + make_interval(secs => $10::double precision)), $11, $12::jsonb)
       RETURNING *)
     SELECT ${COLS} FROM ins a JOIN identities i ON i.id = a.identity_id`,
    [id, a.sourceId, a.identityId, a.keyId, a.requestId, a.sql, JSON.stringify(a.params ?? []), JSON.stringify(a.classification ?? {}), a.expiresAt ?? null, ttl, a.requeuedFrom ?? null, a.claimAttributes && Object.keys(a.claimAttributes).length > 0 ? JSON.stringify(a.claimAttributes) : null],
  );
  return toRecord(r.rows[0]);
}

/** Caps on pending approvals (issue 24 item 2; config approvals.max_pending_per_identity / _per_source). */
export interface PendingCaps {
  /** Most pending (unexpired) approvals of one identity. */
  perIdentity: number;
  /** Most pending (unexpired) approvals on one source, all identities together. */
  perSource: number;
}

/** A write refused because a pending cap is reached (refusal approval_queue_full; nothing was stored). */
export class ApprovalQueueFullError extends Error {
  constructor(
    /** Which cap: the identity's or the source's. */
    readonly scope: 'identity' | 'source',
    readonly cap: number,
  ) {
    super(`${scope === 'identity' ? 'this identity' : 'this source'} already has ${cap} write(s) waiting for approval`);
    this.name = 'ApprovalQueueFullError';
  }
}

/**
 * Refuses the new approval `a` when its identity or source already has `caps` pending approvals
 * (ApprovalQueueFullError). Run inside the queueing transaction: transaction-scoped advisory locks
 * on the identity, then the source (always in that order, so no deadlock) make concurrent writers on
 * any replica count one after another, so a cap is never overrun. Bounded work: each count stops at
 * its cap (partial indexes approvals_pending_*_idx).
 */
async function assertQueueRoom(c: pg.ClientBase, a: NewApproval, caps: PendingCaps): Promise<void> {
  await c.query("SELECT pg_advisory_xact_lock(hashtextextended('interlock.approvals.identity:' || $1, 0)), pg_advisory_xact_lock(hashtextextended('interlock.approvals.source:' || $2, 0))", [a.identityId, a.sourceId]);
  const r = await c.query<{ i: number; s: number }>(
    `SELECT (SELECT count(*)::int FROM (SELECT 1 FROM approvals WHERE identity_id = $1 AND state = 'pending' AND expires_at > now() LIMIT $2) x) AS i,
            (SELECT count(*)::int FROM (SELECT 1 FROM approvals WHERE source_id = $3 AND state = 'pending' AND expires_at > now() LIMIT $4) y) AS s`,
    [a.identityId, caps.perIdentity, a.sourceId, caps.perSource],
  );
  if (r.rows[0].i >= caps.perIdentity) throw new ApprovalQueueFullError('identity', caps.perIdentity);
  if (r.rows[0].s >= caps.perSource) throw new ApprovalQueueFullError('source', caps.perSource);
}

/**
 * Queues a write and records its audit events in one transaction (issue 11): the approval event
 * (kind approval, decision "queued") and, when `toolCallEvent` is given, the call's tool-call event
 * built for the new approval id, as one chained batch. The approval row never exists without its
 * events, nor the events without the row. `timeoutMs` bounds each statement (statement_timeout).
 * With `caps`, a write over a pending cap stores nothing and throws ApprovalQueueFullError (issue 24
 * item 2). With `auditKey` (the gateway's signing key, src/audit/key.ts) the tool-call event carries
 * the key's tag (details.audit_tag, src/audit/call-tag.ts; red team rt46b G1), which verify checks on a
 * keyed trail. Returns the new approval. Errors as createApproval; a store failure rolls everything back.
 */
export async function queueApproval(db: ControlDb, a: NewApproval, toolCallEvent?: (approvalId: string) => ToolCallAuditEvent, timeoutMs?: number, caps?: PendingCaps, auditKey?: AuditKey | null): Promise<ApprovalRecord> {
  return withTransaction(db, async (c) => {
    // Fail closed: past the bound every statement of the transaction is cancelled and nothing commits.
    if (timeoutMs !== undefined) await c.query(`SET LOCAL statement_timeout = ${Math.max(1, Math.trunc(timeoutMs))}`);
    if (caps) await assertQueueRoom(c, a, caps);
    const rec = await createApproval(c, a);
    const rows = [
      approvalRow({
        approvalId: rec.id,
        action: 'queued',
        identityId: a.identityId,
        keyId: a.keyId,
        sourceId: a.sourceId,
        requestId: a.requestId,
        fingerprint: typeof a.classification.fingerprint === 'string' ? a.classification.fingerprint : null,
      }),
    ];
    if (toolCallEvent) rows.push(auditKey ? tagCallRow(auditKey, toolCallRow(toolCallEvent(rec.id))) : toolCallRow(toolCallEvent(rec.id)));
    await appendAuditRows(c, rows);
    return rec;
  });
}

/** The approval with id `id`, or null. */
export async function getApproval(db: Queryable, id: string): Promise<ApprovalRecord | null> {
  const r = await q(db).query<ApprovalRow>(`SELECT ${COLS} FROM approvals a JOIN identities i ON i.id = a.identity_id WHERE a.id = $1`, [id]);
  return r.rows[0] ? toRecord(r.rows[0]) : null;
}

/** The approval with id `id`; throws NotFoundError. */
export async function requireApproval(db: Queryable, id: string): Promise<ApprovalRecord> {
  const a = await getApproval(db, id);
  if (!a) throw new NotFoundError(`approval ${id} not found`);
  return a;
}

/** Filters of listApprovals and countApprovals. */
export interface ApprovalFilter {
  state?: ApprovalState;
  sourceId?: string;
  identityId?: string;
  /** Only approvals created at least this many seconds ago (the console's age filter). */
  minAgeSeconds?: number;
}

/** The WHERE clause of a filter over `approvals a` and its parameters ($1–$4). */
function filterSql(filter: ApprovalFilter): { where: string; params: unknown[] } {
  if (filter.state !== undefined && !APPROVAL_STATES.includes(filter.state)) throw new ValidationError(`unknown approval state "${filter.state}" (${APPROVAL_STATES.join(', ')})`);
  if (filter.minAgeSeconds !== undefined && !(Number.isInteger(filter.minAgeSeconds) && filter.minAgeSeconds >= 0)) throw new ValidationError('minimum age must be a whole number of seconds');
  return {
    where: `($1::text IS NULL OR a.state = $1) AND ($2::text IS NULL OR a.source_id = $2) AND ($3::text IS NULL OR a.identity_id = $3)
       AND ($4::int IS NULL OR a.created_at <= now() - make_interval(secs => $4::int))`,
    params: [filter.state ?? null, filter.sourceId ?? null, filter.identityId ?? null, filter.minAgeSeconds ?? null],
  };
}

/**
 * Approvals, newest first, optionally filtered; at most `limit` (default 100, max 1000) after
 * skipping `offset` (default 0), so a caller can page through the whole queue.
 */
export async function listApprovals(db: Queryable, filter: ApprovalFilter & { limit?: number; offset?: number } = {}): Promise<ApprovalRecord[]> {
  const { where, params } = filterSql(filter);
  const limit = Math.max(1, Math.min(1000, filter.limit ?? 100));
  const offset = Math.max(0, Math.trunc(filter.offset ?? 0));
  const r = await q(db).query<ApprovalRow>(
    `SELECT ${COLS} FROM approvals a JOIN identities i ON i.id = a.identity_id
     WHERE ${where}
     ORDER BY a.created_at DESC, a.id LIMIT $5 OFFSET $6`,
    [...params, limit, offset],
  );
  return r.rows.map(toRecord);
}

/**
 * How many approvals match `filter` apart from its state, per state (every state present, 0 when
 * none): the console's counts of the whole queue (issue 24 item 2).
 */
export async function countApprovals(db: Queryable, filter: Omit<ApprovalFilter, 'state'> = {}): Promise<Record<ApprovalState, number>> {
  const { where, params } = filterSql({ ...filter, state: undefined });
  const r = await q(db).query<{ state: ApprovalState; n: number }>(`SELECT a.state, count(*)::int AS n FROM approvals a WHERE ${where} GROUP BY a.state`, params);
  const out = Object.fromEntries(APPROVAL_STATES.map((st) => [st, 0])) as Record<ApprovalState, number>;
  for (const row of r.rows) out[row.state] = row.n;
  return out;
}

/**
 * Moves approval `id` from one of the states `from` to `to` with one conditional UPDATE (the row
 * lock makes concurrent callers queue; each re-checks the state after the winner commits), and
 * returns the updated approval, or null when it was not in one of `from` (someone else won, or it
 * does not exist). A move to 'approved' also requires expires_at to be in the future. Sets
 * decided_at/decided_by for approved, rejected and expired; executed_at and outcome for executed
 * and failed. Illegal transitions raise in the database (trigger approvals_guard).
 * Accepts a pooled client so callers can transition inside their own transaction.
 */
export async function transitionApproval(db: Queryable, id: string, from: ApprovalState[], to: ApprovalState, fields: TransitionFields = {}): Promise<ApprovalRecord | null> {
  if (!APPROVAL_STATES.includes(to) || from.some((s) => !APPROVAL_STATES.includes(s))) throw new ValidationError('unknown approval state');
  if (fields.outcome) assertOutcome(fields.outcome);
  const decision = to === 'approved' || to === 'rejected' || to === 'expired';
  const execution = to === 'executed' || to === 'failed';
  const r = await q(db).query<ApprovalRow>(
    `WITH upd AS (
       UPDATE approvals SET state = $3,
         decided_by = CASE WHEN $4 THEN $5 ELSE decided_by END,
         decided_at = CASE WHEN $4 THEN now() ELSE decided_at END,
         executed_at = CASE WHEN $6 THEN now() ELSE executed_at END,
         outcome = CASE WHEN $6 THEN $7::jsonb ELSE outcome END,
         failure = CASE WHEN $3 = 'failed' THEN $8::jsonb ELSE failure END
       WHERE id = $1 AND state = ANY($2::text[]) AND ($3 <> 'approved' OR expires_at > now())
       RETURNING *)
     SELECT ${COLS} FROM upd a JOIN identities i ON i.id = a.identity_id`,
    [id, from, to, decision, fields.decidedBy ?? null, execution, fields.outcome ? JSON.stringify(fields.outcome) : null, fields.failure ? JSON.stringify(fields.failure) : null],
  );
  return r.rows[0] ? toRecord(r.rows[0]) : null;
}

/** Default most approvals one sweep expires (config approvals.sweep_batch). */
export const DEFAULT_SWEEP_BATCH = 500;

/**
 * Expires at most `limit` (default DEFAULT_SWEEP_BATCH) pending approvals whose expires_at is at or
 * before `now`, oldest deadline first (decided_by "system:expiry"), with one UPDATE … RETURNING;
 * returns them. Safe with several replicas: rows another sweeper holds are skipped (SKIP LOCKED) and
 * the state re-check means each approval expires once.
 */
export async function expireApprovals(db: Queryable, now: Date = new Date(), limit = DEFAULT_SWEEP_BATCH): Promise<ApprovalRecord[]> {
  const r = await q(db).query<ApprovalRow>(
    `WITH due AS (
       SELECT id FROM approvals WHERE state = 'pending' AND expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED),
     upd AS (
       UPDATE approvals SET state = 'expired', decided_by = 'system:expiry', decided_at = $1
       WHERE id IN (SELECT id FROM due) AND state = 'pending'
       RETURNING *)
     SELECT ${COLS} FROM upd a JOIN identities i ON i.id = a.identity_id ORDER BY a.created_at`,
    [now, Math.max(1, Math.trunc(limit))],
  );
  return r.rows.map(toRecord);
}

/**
 * Expires overdue pending approvals (at most `limit` per call, see expireApprovals) and records one
 * audit event for each (kind approval, decision "expired", operator "system:expiry"), all in one
 * transaction and one chained audit batch; the webhook dispatcher turns each into approval.expired
 * and approval.decided. Returns the expired approvals. The gateway runs it every
 * approvals.sweep_interval_ms (issue 24 item 5); the CLI runs it before listing or deciding.
 */
export async function sweepExpiredApprovals(db: ControlDb, now: Date = new Date(), limit = DEFAULT_SWEEP_BATCH): Promise<ApprovalRecord[]> {
  return withTransaction(db, async (c) => {
    const expired = await expireApprovals(c, now, limit);
    if (expired.length > 0) {
      await appendAuditRows(
        c,
        expired.map((a) =>
          approvalRow({
            approvalId: a.id,
            action: 'expired',
            operator: 'system:expiry',
            identityId: a.identityId,
            keyId: a.keyId,
            sourceId: a.sourceId,
            requestId: a.requestId,
            fingerprint: typeof a.classification.fingerprint === 'string' ? a.classification.fingerprint : null,
            time: now,
          }),
        ),
      );
    }
    return expired;
  });
}
