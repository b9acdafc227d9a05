/**
 * The plan of a queued write for the console (issue 14, item 1): `EXPLAIN` without ANALYZE, run
 * as the source's writer role (the role that would execute it), inside a READ ONLY transaction that
 * is rolled back, with a 5 s statement timeout; the statement goes over the extended protocol, so
 * it is exactly one statement, on a connection that holds the pinned session settings. EXPLAIN alone plans the statement and runs
 * nothing but the IMMUTABLE functions the planner folds (called with constants), so the write's
 * function and shape guards run first and a trip gives no plan (red team rt43a A9); the read-only
 * transaction is a second guard (it does not stop effects outside it, such as dblink's). Errors come back as operator text (this
 * is the operators' console, never an agent's answer).
 */
import type pg from 'pg';
import type { ApprovalRecord } from '../control/approvals';
import type { ControlDb } from '../control/db';
import { connectSourceClient, getSource, type SourceRecord } from '../control/sources';
import { REQUESTER_PROBLEMS, requesterProblem, requesterWarning, type RequesterWarning } from '../approvals/requester';
import { recheckCause } from '../approvals/causes';
import { approvalRunPlan } from '../approvals/execute';
import { rowViewStatements, type RowRulePlan } from '../pipeline/row-rules';
import { GUARD_SQLSTATE } from '../sources/postgres/read';

/**
 * A plan, or why there is none. `rowRules` true: the plan is of the statement the approved run
 * executes under the requester's row rules (the rewrite, its row views and bound attributes).
 */
export type PlanResult = { ok: true; lines: string[]; rowRules?: true } | { ok: false; reason: string };

/** Binds the row-rule settings transaction-locally, names and values as parameters (as the approved run does). */
export const PLAN_BIND_LOCAL_SETTINGS = 'SELECT pg_catalog.set_config(s.name, s.value, true) FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.text[])) AS s(name, value)';

/** Operator text for a failure: PostgreSQL's SQLSTATE and message, or the pinned-settings mismatch. */
function reasonOf(err: unknown): string {
  const e = err as { code?: string; message?: string };
  const sqlstate = e.code && /^[0-9A-Z]{5}$/.test(e.code) ? `SQLSTATE ${e.code}: ` : '';
  return `${sqlstate}${e.message ?? 'the plan could not be made'}`;
}

/** Why a write is not planned when its guard trips (operator text; red team rt43a A9). */
export const STALE_PLAN_REASON =
  'not planned (catalog_stale): a function or operator of a name the write looks up, or a relation whose whole rows it uses, changed on the source since the catalogue its approval is checked against was scanned, and planning could run the changed code as the writer. Approving it now fails catalog_stale and rescans the source; requeue it to review it against the new definitions.';

/**
 * EXPLAIN (FORMAT TEXT) of `sql` with `params` as the writer of `source`, on a connection verified to
 * hold the pinned session settings, the statement sent over the extended protocol (issue 22 items 2, 3).
 * With `rules` (the requester's row-rule plan, hnu42 finding 2): the plan of `rules.sql`, the statement
 * the approved run executes, after its row views are made (idempotent; made or not, everything is
 * rolled back) and its attributes bound, the transaction then set read only before EXPLAIN.
 * With `guard` (the write's function and shape guards, execute.ts approvalRunPlan; task hw): sent in
 * the same transaction right before EXPLAIN, which is not sent when it trips (GUARD_SQLSTATE):
 * `{ ok: false, reason: STALE_PLAN_REASON }` — the planner folds IMMUTABLE functions called with
 * constants, so planning a write whose function was replaced since the scan would run the unreviewed
 * body as the writer (red team rt43a A9).
 */
export async function explainAsWriter(source: SourceRecord, sql: string, params: unknown[], rules: RowRulePlan | null = null, guard: { text: string; values: string[] } | null = null): Promise<PlanResult> {
  if (source.type !== 'postgres') return { ok: false, reason: 'only PostgreSQL sources have a plan' };
  if (!source.settings.writer) return { ok: false, reason: 'the source has no writer role configured' };
  let c: pg.Client;
  try {
    c = await connectSourceClient(source.settings, 'writer', { connectionTimeoutMillis: 5_000, application_name: 'interlock-console-plan' });
  } catch (err) {
    return { ok: false, reason: reasonOf(err) };
  }
  try {
    if (rules) await c.query('BEGIN');
    else await c.query('BEGIN READ ONLY');
    // JIT off too: the write's guard is estimated past jit_above_cost and compiling it took seconds (red team rt44a).
    await c.query("SET LOCAL statement_timeout = '5s'; SELECT pg_catalog.set_config(name, 'off', true) FROM pg_catalog.pg_settings WHERE name OPERATOR(pg_catalog.=) 'jit'");
    if (rules) {
      const reader = (source.settings.reader as { user?: unknown } | undefined)?.user;
      if (typeof reader !== 'string' || reader === '') return { ok: false, reason: 'the source has no reader role to grant the row views to' };
      // Built from quoted names; the extended protocol, like every non-constant text on a source connection.
      for (const v of rules.views) for (const ddl of rowViewStatements(v, reader)) await c.query({ text: ddl, queryMode: 'extended' } as pg.QueryConfig);
      if (rules.settings.length > 0) await c.query({ text: PLAN_BIND_LOCAL_SETTINGS, values: [rules.settings.map((x) => x[0]), rules.settings.map((x) => x[1])], queryMode: 'extended' } as pg.QueryConfig);
      await c.query('SET TRANSACTION READ ONLY');
    }
    if (guard) {
      try {
        await c.query({ text: guard.text, values: guard.values, queryMode: 'extended' } as pg.QueryConfig);
      } catch (err) {
        if ((err as { code?: string }).code === GUARD_SQLSTATE) return { ok: false, reason: STALE_PLAN_REASON };
        throw err;
      }
    }
    // The agent's text goes over the extended protocol even without parameters (issue 22 item 3):
    // one Parse holds one statement, so `…; COMMIT; DELETE …` is a syntax error, never three commands.
    const r = await c.query<{ 'QUERY PLAN': string }>({ text: `EXPLAIN ${rules ? rules.sql : sql}`, values: params, queryMode: 'extended' } as pg.QueryConfig);
    return { ok: true, lines: r.rows.map((x) => x['QUERY PLAN']), ...(rules ? { rowRules: true as const } : {}) };
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

/**
 * The plan of pending approval `a` as approving it now would run it (hnu42 finding 2): the approval's
 * re-check (src/approvals/execute.ts approvalRunPlan) gives the requester's row-rule rewrite, whose
 * statement is planned (`rowRules: true`); without row rules, the stored statement. A re-check that
 * refuses the write (other than for the requester's key or identity, which `requester` shows and
 * which leaves the stored statement planned, behind the guard of the rest of the re-check, unless
 * that refuses it too: rt43a A9b) gives no plan: `reason` says approving will not run it.
 * A re-check that throws gives no plan either (never a plan that ignores the rules).
 */
async function planAsApproved(db: ControlDb, a: ApprovalRecord, source: SourceRecord): Promise<PlanResult> {
  let run: Awaited<ReturnType<typeof approvalRunPlan>>;
  try {
    run = await approvalRunPlan(db, a);
  } catch (err) {
    return { ok: false, reason: `the approval could not be re-checked now, so the statement it would run is not known: ${reasonOf(err)}` };
  }
  if (run.denied !== null) {
    if (run.denied in REQUESTER_PROBLEMS) {
      // The stored statement, behind the write's guard (red team rt43a A9b); not planned when the
      // rest of the re-check refuses it too.
      if ('otherwise' in run && run.otherwise !== undefined) return { ok: false, reason: `approving now would not run it (${run.otherwise}): ${recheckCause(run.otherwise).message}` };
      return explainAsWriter(source, a.sql, a.params, null, 'guard' in run ? (run.guard ?? null) : null);
    }
    return { ok: false, reason: `approving now would not run it (${run.denied}): ${recheckCause(run.denied).message}` };
  }
  return explainAsWriter(source, a.sql, a.params, run.plan, run.guard);
}

/** The plan review of approval `a` (see ApprovalPlanReview); runs EXPLAIN as the writer for a pending one. */
export async function reviewApprovalPlan(db: ControlDb, a: ApprovalRecord): Promise<ApprovalPlanReview> {
  // Approvals outlive their source (a removed source keeps its decided approvals): only a pending
  // one needs the source, for the writer's plan.
  const source = a.state === 'pending' ? await getSource(db, a.sourceId) : null;
  const [plan, problem] = await Promise.all([source ? planAsApproved(db, a, source) : null, a.state === 'pending' ? requesterProblem(db, a) : null]);
  return { destructive: isDestructive(a.classification), estimate: plan && plan.ok ? planRowEstimate(plan.lines) : null, plan, requester: requesterWarning(problem) };
}
