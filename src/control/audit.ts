/**
 * The audit trail in the control database (issue 3, Build 10): one canonical event per tools/call
 * (kind tool_call) and per approval action (kind approval). Append-only: the table's trigger
 * refuses UPDATE, DELETE and TRUNCATE, and the gateway's role gets INSERT and SELECT only
 * (grantRuntimeRole). Never a key, never a redacted value: the pipeline redacts before it audits,
 * and this module also drops detail fields whose names say they hold secrets.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import type { AuditSink, ToolCallAuditEvent } from '../pipeline/audit-types';
import type { ControlDb } from './db';
import { ValidationError } from './errors';
import { iso } from './ids';

/** Kinds of audit event. */
export type AuditKind = 'tool_call' | 'approval';

/** Approval actions recorded in the trail (the `decision` column of kind approval). */
export type ApprovalAction = 'queued' | 'approved' | 'rejected' | 'executed' | 'failed' | 'expired' | 'refused' | 'requeued';

/** One stored audit event. `id` is a decimal string (bigserial); times are ISO-8601 UTC. */
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

const SECRET_KEY = /^(api_?key|authorization|password|secret|token|bearer|key_?pepper)$/i;

/** A deep copy of `v` without fields whose names say they hold secrets (defence in depth). */
function scrub(v: unknown, depth = 0): unknown {
  if (depth > 20) return '[depth]';
  if (Array.isArray(v)) return v.map((x) => scrub(x, depth + 1));
  if (v && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
      if (SECRET_KEY.test(k)) continue;
      out[k] = scrub(x, depth + 1);
    }
    return out;
  }
  if (typeof v === 'bigint') return v.toString();
  return v;
}

const str = (v: unknown): string | null => (typeof v === 'string' && v.length > 0 ? v : null);
const int = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? Math.trunc(v) : null);
const strs = (v: unknown): string[] | null => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : null);

const INSERT_HEAD = `INSERT INTO audit_events (kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version,
  decision, reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details)`;
const INSERT = `${INSERT_HEAD}
  VALUES ($1, COALESCE($2::timestamptz, now()), $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)`;

/** Columns taken out of ToolCallAuditEvent.details (the rest stays in the details column). */
const MAPPED_DETAILS = ['source_id', 'action', 'fingerprint', 'relations', 'row_count', 'approval_id'];

/** The INSERT parameters for a tool-call event. */
export function toolCallParams(e: ToolCallAuditEvent): unknown[] {
  const d = (e.details ?? {}) as Record<string, unknown>;
  const rest: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(d)) if (!MAPPED_DETAILS.includes(k)) rest[k] = v;
  return [
    'tool_call',
    e.time ?? null,
    e.requestId ?? null,
    e.identityId ?? null,
    e.keyId ?? null,
    e.tool ?? null,
    e.canonicalTool ?? null,
    e.dialect ?? null,
    e.protocolVersion ?? null,
    e.decision,
    e.reasonCode ?? null,
    str(d.source_id),
    str(d.action),
    str(d.fingerprint),
    strs(d.relations),
    int(d.row_count),
    typeof e.durationMs === 'number' && Number.isFinite(e.durationMs) ? e.durationMs : null,
    str(d.approval_id),
    null,
    JSON.stringify(scrub(rest)),
  ];
}

/**
 * An AuditSink writing to audit_events. Maps details.source_id, action, fingerprint, relations,
 * row_count and approval_id into columns and keeps the other details as JSON. An event the
 * database rejects as malformed (SQLSTATE class 22 or 23) is recorded again without its details
 * (details.audit_error = "malformed_event") rather than lost; connection failures throw.
 */
export class DbAuditSink implements AuditSink {
  constructor(
    private readonly db: ControlDb,
    private readonly logger?: Logger,
  ) {}

  async record(event: ToolCallAuditEvent): Promise<void> {
    const params = toolCallParams(event);
    try {
      await this.db.pool.query(INSERT, params);
    } catch (err) {
      const code = (err as { code?: string }).code ?? '';
      if (!/^2[23]/.test(code)) throw err;
      this.logger?.warn({ component: 'audit', code, requestId: event.requestId }, 'malformed audit event; recording it without details');
      const noNul = (v: unknown): unknown => (typeof v === 'string' ? v.replace(/\u0000/g, '') : Array.isArray(v) ? v.map(noNul) : v);
      const minimal = params.map(noNul);
      minimal[1] = null; // time: the database's now()
      minimal[15] = null; // row_count
      minimal[16] = null; // duration_ms
      minimal[19] = JSON.stringify({ audit_error: 'malformed_event' });
      await this.db.pool.query(INSERT, minimal);
    }
  }
}

/**
 * An AuditSink that writes tool-call events in batches: events arriving within `maxDelayMs` (default
 * 5 ms) share one multi-row INSERT (at most `maxBatch`, default 200), so a busy gateway commits the
 * audit once per batch instead of once per call. Each `record` promise settles when its own row is
 * stored; if a batch fails, its events are retried one by one through DbAuditSink (which stores a
 * malformed event without its details rather than lose it). Nothing is dropped: graceful shutdown
 * awaits every pending promise.
 */
export class BatchingAuditSink implements AuditSink {
  private queue: Array<{ event: ToolCallAuditEvent; resolve: () => void; reject: (e: unknown) => void }> = [];
  private timer: NodeJS.Timeout | null = null;
  private readonly single: DbAuditSink;

  constructor(
    private readonly db: ControlDb,
    private readonly logger?: Logger,
    private readonly opts: { maxBatch?: number; maxDelayMs?: number } = {},
  ) {
    this.single = new DbAuditSink(db, logger);
  }

  record(event: ToolCallAuditEvent): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ event, resolve, reject });
      if (this.queue.length >= (this.opts.maxBatch ?? 200)) void this.flush();
      else this.timer ??= setTimeout(() => void this.flush(), this.opts.maxDelayMs ?? 5);
    });
  }

  private async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const batch = this.queue.splice(0, this.opts.maxBatch ?? 200);
    if (batch.length === 0) return;
    if (this.queue.length) this.timer = setTimeout(() => void this.flush(), 0);
    const rows: string[] = [];
    const params: unknown[] = [];
    for (const b of batch) {
      const p = toolCallParams(b.event);
      const n = params.length;
      rows.push(`(${p.map((_, i) => (i === 1 ? `COALESCE($${n + i + 1}::timestamptz, now())` : `$${n + i + 1}`)).join(', ')})`);
      params.push(...p);
    }
    try {
      await this.db.pool.query(`${INSERT_HEAD} VALUES ${rows.join(', ')}`, params);
      for (const b of batch) b.resolve();
    } catch (err) {
      this.logger?.warn({ component: 'audit', code: (err as { code?: string }).code, events: batch.length }, 'batched audit insert failed; storing the events one by one');
      for (const b of batch) this.single.record(b.event).then(b.resolve, b.reject);
    }
  }
}

/** Records one approval action (kind approval; decision = the action). Accepts a pooled client to record inside a transaction. */
export async function recordApprovalEvent(db: Queryable, e: ApprovalAuditEvent): Promise<void> {
  const time = e.time instanceof Date ? e.time.toISOString() : (e.time ?? null);
  await q(db).query(INSERT, [
    'approval',
    time,
    e.requestId ?? null,
    e.identityId ?? null,
    e.keyId ?? null,
    null,
    null,
    null,
    null,
    e.action,
    e.reasonCode ?? null,
    e.sourceId ?? null,
    'write',
    e.fingerprint ?? null,
    e.relations ?? null,
    e.rowCount ?? null,
    e.durationMs ?? null,
    e.approvalId,
    e.operator ?? null,
    JSON.stringify(scrub(e.details ?? {})),
  ]);
}

interface AuditRow {
  id: string;
  kind: AuditKind;
  time: Date;
  request_id: string | null;
  identity_id: string | null;
  key_id: string | null;
  tool: string | null;
  canonical_tool: string | null;
  dialect: string | null;
  protocol_version: string | null;
  decision: string;
  reason_code: string | null;
  source_id: string | null;
  action: string | null;
  fingerprint: string | null;
  relations: string[] | null;
  row_count: string | null;
  duration_ms: number | null;
  approval_id: string | null;
  operator: string | null;
  details: Record<string, unknown>;
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
 * Searches the trail, newest first, with keyset paging on the event id: pass the returned
 * nextCursor to get the next (older) page. `since` is inclusive, `until` exclusive.
 * Throws ValidationError for a bad cursor, date or limit.
 */
export async function searchAudit(db: Queryable, s: AuditSearch = {}): Promise<AuditPage> {
  const limit = s.limit ?? 100;
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new ValidationError('limit must be a whole number from 1 to 1000');
  if (s.cursor != null && !/^[0-9]{1,19}$/.test(s.cursor)) throw new ValidationError(`invalid cursor ${JSON.stringify(s.cursor)}`);
  const r = await q(db).query<AuditRow>(
    `SELECT * FROM audit_events
     WHERE ($1::text IS NULL OR identity_id = $1) AND ($2::text IS NULL OR source_id = $2) AND ($3::text IS NULL OR decision = $3)
       AND ($4::text IS NULL OR kind = $4) AND ($5::text IS NULL OR approval_id = $5) AND ($6::text IS NULL OR request_id = $6)
       AND ($7::timestamptz IS NULL OR time >= $7) AND ($8::timestamptz IS NULL OR time < $8)
       AND ($9::bigint IS NULL OR id < $9)
     ORDER BY id DESC LIMIT $10`,
    [s.identityId ?? null, s.sourceId ?? null, s.decision ?? null, s.kind ?? null, s.approvalId ?? null, s.requestId ?? null, toTime(s.since, 'since'), toTime(s.until, 'until'), s.cursor ?? null, limit + 1],
  );
  const rows = r.rows.slice(0, limit).map(toRecord);
  return { events: rows, nextCursor: r.rows.length > limit ? rows[rows.length - 1].id : null };
}

/** The last `limit` events (1–1000), oldest first, like tail(1). */
export async function tailAudit(db: Queryable, limit = 20): Promise<AuditRecord[]> {
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new ValidationError('limit must be a whole number from 1 to 1000');
  const r = await q(db).query<AuditRow>('SELECT * FROM (SELECT * FROM audit_events ORDER BY id DESC LIMIT $1) t ORDER BY id', [limit]);
  return r.rows.map(toRecord);
}
