/**
 * Running an approved write under the requester's row rules (issue 27, docs/row-rules.md
 * "Writes"). The plan (src/pipeline/row-rules.ts planRowRules, made at approval time) names the
 * row views the rewritten statement uses: read views for every reference that reads a ruled
 * table, and a check-option view for the target. They are created first by the writer role
 * (idempotent `CREATE OR REPLACE VIEW`); then the rewritten statement runs in one transaction with
 * the requester's attributes bound transaction-locally (src/sources/postgres/write.ts), so
 * PostgreSQL lets UPDATE and DELETE reach only permitted rows and refuses, for the whole
 * statement, an inserted or updated row its target view does not accept: the transaction rolls
 * back and nothing is changed.
 */
import type { SourceRecord } from '../governance/store';
import type { RowRulePlan } from '../pipeline/row-rules';
import { rowViewProvisioner } from '../pipeline/row-views';
import { parseSql } from '../sql/parser';
import type { WriteGuard } from '../sources/postgres/hook-guard';

/** What runs the statements: the source connector's writer (PostgresSourceConnector.write). */
export interface RowWriter {
  /**
   * `opts.searchPath`: the catalogue's scanned lookup path, pinned on the writer's connections (task
   * hrt42); `opts.countChanges`: count the rows changed by the server (hnu42a); `opts.guard`: the
   * function and shape guard run in the write's transaction right before the statement (task hw),
   * which resolves `functionsChanged` (nothing written, rolled back) when it trips. `commitResolved`: the
   * COMMIT's answer was lost and the server, asked afterwards, said the transaction committed.
   */
  write(sql: string, params: unknown[], opts?: { settings?: ReadonlyArray<readonly [string, string]>; countChanges?: boolean; searchPath?: readonly string[]; guard?: WriteGuard }): Promise<{ rowCount: number; functionsChanged?: true; commitResolved?: true }>;
}

/** An approved write's guard and the LOCK sent before it (src/sources/postgres/hook-guard.ts). */
export type { WriteGuard };

/** How the statement runs: `searchPath`, the scanned lookup path (task hrt42); `guard`, the write's function and shape guard (task hw; null or absent: none). */
export interface PlannedWriteRun {
  searchPath?: readonly string[];
  guard?: WriteGuard | null;
}

const PLAIN_WRITES = new Set(['InsertStmt', 'UpdateStmt', 'DeleteStmt', 'MergeStmt']);

/**
 * True when `sql`'s command tag counts every row the statement itself changes: one INSERT, UPDATE,
 * DELETE or MERGE without a WITH clause. False for anything else, unparsable text included (fail
 * closed): a data-modifying CTE's rows are not in the tag, which counts only the statement on top
 * (`WITH x AS (UPDATE … RETURNING 1) SELECT 1 WHERE false` says 0; hnu42 finding 1), so such a write
 * is run with the server's count of the rows it changed (RowWriter `countChanges`). Needs the parser loaded.
 */
export function commandTagCountsEveryChange(sql: string): boolean {
  try {
    const stmts = parseSql(sql).stmts ?? [];
    if (stmts.length !== 1 || !stmts[0]!.stmt) return false;
    const [kind, node] = Object.entries(stmts[0]!.stmt)[0] ?? [];
    return typeof kind === 'string' && PLAIN_WRITES.has(kind) && !(node as { withClause?: unknown } | undefined)?.withClause;
  } catch {
    return false;
  }
}

/**
 * Outcome: the rows changed (never fewer than the server changed for a statement whose command tag
 * does not count them all: commandTagCountsEveryChange), or an approvalFailures code (spec/errors-v1.json): `row_rules_unavailable`
 * (a view could not be created; `err` unset), `row_rule_violation` (a written row outside the rule),
 * `catalog_stale` (the write's guard tripped: the statement was not run and its transaction rolled
 * back; `err` unset; task hw), or null when the statement failed otherwise (`err` is what the
 * writer threw; the caller classifies it).
 */
export type PlannedWriteOutcome = { ok: true; rowCount: number; commitResolved?: true } | { ok: false; code: 'row_rules_unavailable' | 'row_rule_violation' | 'catalog_stale' | null; err?: unknown };

/**
 * True when a ruled write failed because a row it wrote (or an ON CONFLICT row it would update) is
 * outside its target view: the check option (SQLSTATE 44000), or "conflicting row is not visible
 * through view" (SQLSTATE 55000, with that message only).
 */
export function isRowRuleViolation(err: unknown): boolean {
  const e = (err ?? {}) as { sqlState?: string; cause?: { code?: unknown; message?: unknown } };
  const state = e.sqlState ?? (typeof e.cause?.code === 'string' ? e.cause.code : undefined);
  if (state === '44000') return true;
  return state === '55000' && typeof e.cause?.message === 'string' && /is not visible through view "/.test(e.cause.message);
}

/**
 * Runs `sql` (the stored statement) with `params` on `writer`, rewritten by `plan` when one is
 * given (null: as is), on writer connections whose lookup path is `run.searchPath` (the scanned one,
 * task hrt42), with `run.guard` checked in the statement's transaction right before it (task hw;
 * a trip is `catalog_stale`). `log` receives an operator-only reason when a view cannot be created.
 * Never throws for a failed statement: see PlannedWriteOutcome.
 */
export async function runPlannedWrite(writer: RowWriter, source: SourceRecord, sql: string, params: unknown[], plan: RowRulePlan | null, log?: (view: string, err: unknown) => void, run: PlannedWriteRun = {}): Promise<PlannedWriteOutcome> {
  const searchPath = run.searchPath;
  if (plan) {
    const views = rowViewProvisioner(
      async (_s, ddl) => {
        await writer.write(ddl, [], { searchPath });
      },
      (_id, view, err) => log?.(view, err),
    );
    // One view at a time: concurrent GRANTs on the same schema fail ("tuple concurrently updated").
    for (const v of plan.views) if (!(await views.ensure(source, [v]))) return { ok: false, code: 'row_rules_unavailable' };
  }
  try {
    const text = plan ? plan.sql : sql;
    const countChanges = !commandTagCountsEveryChange(text);
    const r = await writer.write(text, params, { ...(plan ? { settings: plan.settings } : {}), ...(countChanges ? { countChanges } : {}), searchPath, ...(run.guard ? { guard: run.guard } : {}) });
    if (r.functionsChanged) return { ok: false, code: 'catalog_stale' };
    return { ok: true, rowCount: r.rowCount, ...(r.commitResolved ? { commitResolved: true as const } : {}) };
  } catch (err) {
    return { ok: false, code: plan && isRowRuleViolation(err) ? 'row_rule_violation' : null, err };
  }
}
