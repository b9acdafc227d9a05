/**
 * stmt.ts — statements and query levels (PostgreSQL: analyze.c, transformTopLevelStmt,
 * transformStmt, transformSelectStmt, transformValuesClause, transformSetOperationStmt,
 * transformExplainStmt): the one entry point of the walker (`createWalkState` +
 * `analyzeStatement`), the dispatch of a query level (`query`, PostgreSQL's parse_sub_analyze:
 * the door every sub-select, CTE body and INSERT … SELECT comes back through), SELECT with its
 * clauses in PostgreSQL's order, VALUES, UNION/INTERSECT/EXCEPT, and EXPLAIN without ANALYZE.
 * It fills the doors (`Doors`, state.ts) that the families below use to recurse.
 */
import { alternative, type Lin, LIN_NONE } from '../lineage';
import type { PreparedCatalog } from '../prepared-catalog';
import { groupItem, sortBy, sortTarget, windowDef } from './clause';
import { withClause } from './cte';
import { del, insert, mergeStmt, update } from './dml';
import { ex } from './expr';
import { fromItem } from './from';
import { checkFields, type N, nodeType, q, Refusal, unwrap } from './nodes';
import { type CteEnv, type Ctx, type Doors, EMPTY_SCOPE_ITEMS, enter, leave, newWalkState, type NsItem, type OutCol, type QueryOut, type Scope, type WalkState, WORK_BUDGET } from './state';
import { targetList } from './target';
import { addFilter, consume, consumeAll } from './uses';

/** Friendly names for refused top-level statement types. */
const STATEMENT_NAMES: Record<string, string> = {
  TransactionStmt: 'transaction control',
  VariableSetStmt: 'SET/RESET',
  VariableShowStmt: 'SHOW',
  CopyStmt: 'COPY',
  DoStmt: 'DO',
  CallStmt: 'CALL',
  PrepareStmt: 'PREPARE',
  ExecuteStmt: 'EXECUTE',
  DeallocateStmt: 'DEALLOCATE',
  LockStmt: 'LOCK',
  ListenStmt: 'LISTEN',
  NotifyStmt: 'NOTIFY',
  UnlistenStmt: 'UNLISTEN',
  DeclareCursorStmt: 'DECLARE CURSOR',
  FetchStmt: 'FETCH/MOVE',
  ClosePortalStmt: 'CLOSE',
  VacuumStmt: 'VACUUM/ANALYZE',
  ClusterStmt: 'CLUSTER',
  ReindexStmt: 'REINDEX',
  GrantStmt: 'GRANT/REVOKE',
  GrantRoleStmt: 'GRANT/REVOKE role',
  CreateTableAsStmt: 'CREATE TABLE AS / SELECT INTO',
  CreateExtensionStmt: 'CREATE EXTENSION',
  DiscardStmt: 'DISCARD',
  CheckPointStmt: 'CHECKPOINT',
  LoadStmt: 'LOAD',
  SecLabelStmt: 'SECURITY LABEL',
  CommentStmt: 'COMMENT',
  TruncateStmt: 'TRUNCATE',
  DropStmt: 'DROP',
  CreateStmt: 'CREATE TABLE',
  AlterTableStmt: 'ALTER TABLE',
  AlterSystemStmt: 'ALTER SYSTEM',
  CreateRoleStmt: 'CREATE ROLE',
  AlterRoleStmt: 'ALTER ROLE',
  AlterRoleSetStmt: 'ALTER ROLE SET',
  CreateFunctionStmt: 'CREATE FUNCTION',
  ViewStmt: 'CREATE VIEW',
  RuleStmt: 'CREATE RULE',
  CreateTrigStmt: 'CREATE TRIGGER',
  RefreshMatViewStmt: 'REFRESH MATERIALIZED VIEW',
  ConstraintsSetStmt: 'SET CONSTRAINTS',
  ReassignOwnedStmt: 'REASSIGN OWNED',
  DropOwnedStmt: 'DROP OWNED',
};

/** Short agent-facing name of a refused statement node type. */
export function statementName(type: string): string {
  if (STATEMENT_NAMES[type]) return STATEMENT_NAMES[type];
  if (/^(Create|Alter|Drop|Define|Rename|Import)/.test(type)) return 'DDL (' + type.replace(/Stmt$/, '') + ')';
  return type.replace(/Stmt$/, '');
}

/** EXPLAIN options that only shape the plan's text (ANALYZE runs the statement and is refused). */
const EXPLAIN_OPTIONS = new Set(['verbose', 'costs', 'settings', 'generic_plan', 'buffers', 'wal', 'timing', 'summary', 'format', 'memory', 'serialize']);

/** The doors of every walk: the expression dispatcher, a query level, a whole statement. */
const DOORS: Doors = { expr: ex, query, top: analyzeStatement };

/**
 * A fresh state for one statement over `cat` (the walker's only constructor). `budget`: work
 * budget in steps (`WORK_BUDGET`); `viewBody`: the statement is a view's definition (views.ts).
 */
export function createWalkState(cat: PreparedCatalog, budget: number = WORK_BUDGET, viewBody = false): WalkState {
  return newWalkState(cat, budget, viewBody, DOORS);
}

/**
 * The walker's entry point: analyses one top-level statement (`type`: its node type, `body`: the
 * node) and returns its output columns; the findings are left in `st`. Throws `Refusal` when the
 * statement is refused (`st` then holds what was recorded so far, and `workUsed(st)` the work).
 */
export function analyzeStatement(st: WalkState, type: string, body: N): QueryOut {
  if (type === 'ExplainStmt') {
    checkFields('ExplainStmt', body);
    for (const o of body.options ?? []) {
      const d = unwrap(o, 'DefElem');
      const opt = String(d.defname ?? '').toLowerCase();
      if (opt === 'analyze' || opt === 'analyse') throw new Refusal('statement_not_allowed', 'EXPLAIN ANALYZE executes the statement and is not allowed');
      if (!EXPLAIN_OPTIONS.has(opt)) throw new Refusal('statement_not_allowed', `EXPLAIN option ${q(opt)} is not allowed`);
    }
    const inner = body.query as N;
    const t = inner ? nodeType(inner) : undefined;
    if (t !== 'SelectStmt') throw new Refusal('statement_not_allowed', 'EXPLAIN is only allowed for read statements');
    // The plan shows no values: the inner statement's outputs are not used (its filters are).
    query(st, inner, null, null);
    if (st.hasWrite) throw new Refusal('statement_not_allowed', 'EXPLAIN is only allowed for read statements');
    return { cols: [{ name: 'QUERY PLAN', lin: LIN_NONE }] };
  }
  st.topBody = body;
  return query(st, { [type]: body }, null, null);
}

/** Analyses a wrapped query node at a new query level. */
export function query(st: WalkState, node: N, parent: Scope | null, ctes: CteEnv | null): QueryOut {
  const type = nodeType(node);
  enter(st);
  try {
    switch (type) {
      case 'SelectStmt':
        checkFields(type, node.SelectStmt);
        return select(st, node.SelectStmt, parent, ctes);
      case 'InsertStmt':
        checkFields(type, node.InsertStmt);
        return insert(st, node.InsertStmt, parent, ctes);
      case 'UpdateStmt':
        checkFields(type, node.UpdateStmt);
        return update(st, node.UpdateStmt, parent, ctes);
      case 'DeleteStmt':
        checkFields(type, node.DeleteStmt);
        return del(st, node.DeleteStmt, parent, ctes);
      case 'MergeStmt':
        checkFields(type, node.MergeStmt);
        return mergeStmt(st, node.MergeStmt, parent, ctes);
      default:
        throw new Refusal('statement_not_allowed', `${statementName(type ?? 'empty')} is not allowed here`);
    }
  } finally {
    leave(st);
  }
}

/** SELECT: INTO/locking refused; WITH, FROM, WHERE, WINDOW, select list, DISTINCT [ON], GROUP BY, HAVING, ORDER BY, LIMIT/OFFSET. */
function select(st: WalkState, s: N, parent: Scope | null, outerCtes: CteEnv | null): QueryOut {
  if (s.intoClause) throw new Refusal('statement_not_allowed', 'SELECT INTO creates a table and is not allowed');
  if (s.lockingClause && s.lockingClause.length) throw new Refusal('statement_not_allowed', 'FOR UPDATE/SHARE row locks are not allowed');
  const ctes = s.withClause ? withClause(st, s.withClause, parent, outerCtes) : outerCtes;
  const op = s.op ?? 'SETOP_NONE';
  if (op !== 'SETOP_NONE') return setOperation(st, s, parent, ctes);
  if (s.valuesLists) return values(st, s, parent, ctes);

  // FROM
  const items: NsItem[] = [];
  const fromCtx = { parent, ctes };
  for (const f of s.fromClause ?? []) {
    const r = fromItem(st, f, fromCtx, items);
    for (const it of r) items.push(it);
  }
  const scope: Scope = { parent, items };
  const windows = s.windowClause && s.windowClause.length ? new Map<string, Lin>() : null;
  const ctx: Ctx = { scope, ctes, windows };

  if (s.whereClause) addFilter(st, ex(st, s.whereClause, ctx));
  if (windows) {
    for (const w of s.windowClause) {
      const def = unwrap(w, 'WindowDef');
      const lin = windowDef(st, def, ctx);
      if (def.name !== undefined) windows.set(String(def.name), lin);
    }
  }
  const outs = targetList(st, s.targetList ?? [], ctx, s === st.topBody);

  const distinct: N[] = s.distinctClause ?? [];
  if (distinct.length === 1 && nodeType(distinct[0] ?? {}) === undefined) {
    // Plain DISTINCT compares every output value.
    for (const o of outs) addFilter(st, o.lin);
  } else {
    for (const d of distinct) {
      if (!d || nodeType(d) === undefined) throw new Refusal('statement_not_allowed', 'unsupported DISTINCT form');
      addFilter(st, sortTarget(st, d, ctx, outs));
    }
  }
  for (const g of s.groupClause ?? []) groupItem(st, g, ctx, outs);
  if (s.havingClause) addFilter(st, ex(st, s.havingClause, ctx));
  for (const sb of s.sortClause ?? []) sortBy(st, sb, ctx, outs);
  if (s.limitOffset) addFilter(st, ex(st, s.limitOffset, ctx));
  if (s.limitCount) addFilter(st, ex(st, s.limitCount, ctx));
  return { cols: outs };
}

/** `VALUES (...), (...)`: columns column1..N, lineage per position over all rows. */
function values(st: WalkState, s: N, parent: Scope | null, ctes: CteEnv | null): QueryOut {
  if (s.targetList || s.fromClause || s.whereClause || s.groupClause || s.havingClause || s.windowClause || s.distinctClause) {
    throw new Refusal('statement_not_allowed', 'unsupported VALUES form');
  }
  const ctx: Ctx = { scope: { parent, items: EMPTY_SCOPE_ITEMS }, ctes, windows: null };
  let lins: Lin[] | null = null;
  for (const row of s.valuesLists) {
    const l = unwrap(row, 'List');
    // A VALUES row is a constructed row: every value in it counts as used.
    const cur = (l.items ?? []).map((e: N) => {
      const lin = ex(st, e, ctx);
      consume(st, lin);
      return lin;
    });
    if (!lins) lins = cur;
    else {
      if (cur.length !== lins.length) throw new Refusal('invalid_sql', 'VALUES lists must all be the same length');
      lins = lins.map((x, i) => alternative(x, cur[i]));
    }
  }
  const outs: OutCol[] = (lins ?? []).map((lin, i) => ({ name: `column${i + 1}`, lin }));
  outputOnlyClauses(st, s, parent, ctes, outs);
  return { cols: outs };
}

/** ORDER BY / LIMIT / OFFSET of a set operation or VALUES: resolved against the output columns. */
function outputOnlyClauses(st: WalkState, s: N, parent: Scope | null, ctes: CteEnv | null, outs: OutCol[]): void {
  if (!s.sortClause && !s.limitCount && !s.limitOffset) return;
  const item: NsItem = {
    refname: null,
    schema: null,
    cols: outs.map((o) => ({ name: o.name, lin: o.lin, reads: null })),
    relVisible: false,
    colsVisible: true,
    base: null,
  };
  const ctx: Ctx = { scope: { parent, items: [item] }, ctes, windows: null };
  for (const sb of s.sortClause ?? []) sortBy(st, sb, ctx, outs);
  if (s.limitOffset) addFilter(st, ex(st, s.limitOffset, ctx));
  if (s.limitCount) addFilter(st, ex(st, s.limitCount, ctx));
}

/** UNION / INTERSECT / EXCEPT [ALL]: both branches, lineage merged per position. */
function setOperation(st: WalkState, s: N, parent: Scope | null, ctes: CteEnv | null): QueryOut {
  if (!['SETOP_UNION', 'SETOP_INTERSECT', 'SETOP_EXCEPT'].includes(s.op)) throw new Refusal('statement_not_allowed', 'unsupported set operation');
  if (s.targetList || s.fromClause || s.whereClause || s.groupClause || s.havingClause || s.windowClause || s.valuesLists || s.distinctClause) {
    throw new Refusal('statement_not_allowed', 'unsupported set operation form');
  }
  const l = query(st, { SelectStmt: s.larg }, parent, ctes);
  const r = query(st, { SelectStmt: s.rarg }, parent, ctes);
  if (l.cols.length !== r.cols.length) throw new Refusal('invalid_sql', 'each UNION/INTERSECT/EXCEPT query must have the same number of columns');
  const outs = l.cols.map((c, i) => ({ name: c.name, lin: alternative(c.lin, r.cols[i].lin) }));
  // INTERSECT and EXCEPT compare the branches' values, UNION (without ALL) removes duplicates:
  // every value of both branches is used. UNION ALL only concatenates: a column stays an output
  // use when it is still one column's value unchanged, otherwise its sources count as used.
  if (s.op !== 'SETOP_UNION' || !s.all) {
    consumeAll(st, l.cols);
    consumeAll(st, r.cols);
  } else {
    for (const o of outs) if (!o.lin.pass) consume(st, o.lin);
  }
  outputOnlyClauses(st, s, parent, ctes, outs);
  return { cols: outs };
}
