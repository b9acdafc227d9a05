/**
 * The plan of a queued write for the console (issue 14, item 1): `EXPLAIN` without ANALYZE, run
 * as the source's writer role (the role that would execute it), inside a READ ONLY transaction that
 * is rolled back, with a 5 s statement timeout; the statement goes over the extended protocol, so
 * it is exactly one statement, on a connection that holds the pinned session settings. EXPLAIN alone plans the statement and runs
 * nothing; the read-only transaction is a second guard. Errors come back as operator text (this
 * is the operators' console, never an agent's answer).
 */
import type pg from 'pg';
import type { ApprovalRecord } from '../control/approvals';
import type { ControlDb } from '../control/db';
import { connectSourceClient, getSource, type SourceRecord } from '../control/sources';
import { requesterProblem, requesterWarning, type RequesterWarning } from '../approvals/requester';

/** A plan, or why there is none. */
export type PlanResult = { ok: true; lines: string[] } | { ok: false; reason: string };

/** Operator text for a failure: PostgreSQL's SQLSTATE and message, or the pinned-settings mismatch. */
function reasonOf(err: unknown): string {
  const e = err as { code?: string; message?: string };
  const sqlstate = e.code && /^[0-9A-Z]{5}$/.test(e.code) ? `SQLSTATE ${e.code}: ` : '';
  return `${sqlstate}${e.message ?? 'the plan could not be made'}`;
}

/**
 * EXPLAIN (FORMAT TEXT) of `sql` with `params` as the writer of `source`, on a connection verified to
 * hold the pinned session settings, the statement sent over the extended protocol (issue 22 items 2, 3).
 */
export async function explainAsWriter(source: SourceRecord, sql: string, params: unknown[]): Promise<PlanResult> {
  if (source.type !== 'postgres') return { ok: false, reason: 'only PostgreSQL sources have a plan' };
  if (!source.settings.writer) return { ok: false, reason: 'the source has no writer role configured' };
  let c: pg.Client;
  try {
    c = await connectSourceClient(source.settings, 'writer', { connectionTimeoutMillis: 5_000, application_name: 'interlock-console-plan' });
  } catch (err) {
    return { ok: false, reason: reasonOf(err) };
  }
  try {
    await c.query('BEGIN READ ONLY');
    await c.query("SET LOCAL statement_timeout = '5s'");
    // The agent's text goes over the extended protocol even without parameters (issue 22 item 3):
    // one Parse holds one statement, so `…; COMMIT; DELETE …` is a syntax error, never three commands.
    const r = await c.query<{ 'QUERY PLAN': string }>({ text: `EXPLAIN ${sql}`, values: params, queryMode: 'extended' } as pg.QueryConfig);
    return { ok: true, lines: r.rows.map((x) => x['QUERY PLAN']) };
  } catch (err) {
    return { ok: false, reason: reasonOf(err) };
  } finally {
    await c.query('ROLLBACK').catch(() => undefined);
    await c.end().catch(() => undefined);
  }
}

/**
 * True when the approval's statement deletes, updates or merges rows (issue 24 item 6): its
 * statement type, or any write it makes (a data-modifying CTE too), by the analyser's classification.
 */
export function isDestructive(classification: Record<string, unknown>): boolean {
  const writes = (classification.writes as Array<{ operation?: string }> | undefined) ?? [];
  const kinds = [String(classification.statement ?? ''), ...writes.map((w) => w.operation ?? '')];
  return kinds.some((k) => /delete|update|merge/i.test(k));
}

const ROWS = /\(cost=[^)]*\brows=(\d+)/;
const MODIFY_NODE = /^(\s*)(?:->\s+)?(?:Insert|Update|Delete|Merge) on /;

/**
 * The planner's estimate of the rows a write changes, from its EXPLAIN (FORMAT TEXT) lines, or null
 * without a plan. PostgreSQL 14 and later plan a write without RETURNING as a ModifyTable node
 * estimated at rows=0 ("Delete on t (… rows=0 …)"), so the estimate of each Insert/Update/Delete/
 * Merge node is that of its first child (the rows it is fed), or its own when that is larger (a
 * RETURNING clause); the estimates of several such nodes (data-modifying CTEs) are added. A plan with
 * no such node: its top node's estimate. Used by the console, the admin API's approval review and
 * the CLI (one estimator).
 */
export function planRowEstimate(lines: string[] | undefined): number | null {
  if (!lines || lines.length === 0) return null;
  let total: number | null = null;
  for (let i = 0; i < lines.length; i++) {
    const m = MODIFY_NODE.exec(lines[i]);
    if (!m) continue;
    const own = Number(ROWS.exec(lines[i])?.[1] ?? 0);
    let child = 0;
    // The first child is the next line that is a plan node (an arrow) deeper than this node.
    for (let j = i + 1; j < lines.length; j++) {
      const arrow = /^(\s*)->\s/.exec(lines[j]);
      if (!arrow) continue;
      if (arrow[1].length > m[1].length) child = Number(ROWS.exec(lines[j])?.[1] ?? 0);
      break;
    }
    total = (total ?? 0) + Math.max(own, child);
  }
  if (total !== null) return total;
  const top = ROWS.exec(lines[0]);
  return top ? Number(top[1]) : null;
}

/**
 * What an operator reviews before approving (the console's detail, `GET /admin/v1/approvals/{id}/review`,
 * `interlock approval show|approve`): whether the write is destructive, its plan as the writer role
 * and the planner's row estimate. `plan` is null when the approval is not pending (only a pending
 * write is planned) or its source is gone; `estimate` is null without a plan.
 */
export interface ApprovalPlanReview {
  destructive: boolean;
  /** Rows the planner expects the write to change (planRowEstimate), null without a plan. */
  estimate: number | null;
  plan: PlanResult | null;
  /** Pending only: why approving will not run the write (requester key revoked or expired, identity disabled), else null. */
  requester: RequesterWarning | null;
}

/** The plan review of approval `a` (see ApprovalPlanReview); runs EXPLAIN as the writer for a pending one. */
export async function reviewApprovalPlan(db: ControlDb, a: ApprovalRecord): Promise<ApprovalPlanReview> {
  // Approvals outlive their source (a removed source keeps its decided approvals): only a pending
  // one needs the source, for the writer's plan.
  const source = a.state === 'pending' ? await getSource(db, a.sourceId) : null;
  const [plan, problem] = await Promise.all([source ? explainAsWriter(source, a.sql, a.params) : null, a.state === 'pending' ? requesterProblem(db, a) : null]);
  return { destructive: isDestructive(a.classification), estimate: plan && plan.ok ? planRowEstimate(plan.lines) : null, plan, requester: requesterWarning(problem) };
}
