/**
 * clause.ts — the clauses of a query level other than FROM (PostgreSQL: parse_clause.c,
 * transformSortClause, transformDistinctOnClause, transformGroupClause, transformWindowDefinitions):
 * ORDER BY and DISTINCT ON items (output names and positions first), GROUP BY items and grouping
 * sets (input columns first), and window definitions. Every item orders, groups or partitions rows:
 * a filter use (uses.ts `addFilter`) or, in a window, a consumed value.
 *
 * Below expr.ts in the import order (a window definition is reached from a function's OVER), so
 * expressions are walked through the door `st.doors.expr`.
 */
import { type Lin, LIN_NONE, merge } from '../lineage';
import { bareName, checkFields, hasOwn, integerConst, type N, q, Refusal, unwrap } from './nodes';
import { sortOperator } from './oper';
import { columnsAtLevel } from './relation';
import { type Ctx, enter, leave, type OutCol, type WalkState } from './state';
import { addFilter, consume } from './uses';

/** ORDER BY and DISTINCT ON items: a bare name or position refers to an output column first. */
export function sortTarget(st: WalkState, node: N, ctx: Ctx, outs: readonly OutCol[]): Lin {
  const pos = integerConst(node);
  if (pos !== null) {
    if (pos < 1 || pos > outs.length) throw new Refusal('invalid_sql', `ORDER BY position ${pos} is not in select list`);
    return outs[pos - 1].lin;
  }
  const bare = bareName(node);
  if (bare !== null) {
    const hits = outs.filter((o) => o.name === bare);
    if (hits.length) return hits.reduce((a, o) => merge(a, o.lin), LIN_NONE);
  }
  return st.doors.expr(st, node, ctx);
}

/** One ORDER BY item (`SortBy`): a filter use, and its `USING` operator judged. */
export function sortBy(st: WalkState, node: N, ctx: Ctx, outs: readonly OutCol[]): void {
  const sb = unwrap(node, 'SortBy');
  addFilter(st, sortTarget(st, sb.node, ctx, outs));
  sortOperator(st, sb);
}

/** GROUP BY item: input columns first, then output names/positions (PostgreSQL's rule). */
export function groupItem(st: WalkState, node: N, ctx: Ctx, outs: readonly OutCol[]): void {
  if (hasOwn.call(node, 'GroupingSet')) {
    const gs = node.GroupingSet as N;
    checkFields('GroupingSet', gs);
    enter(st);
    try {
      for (const c of gs.content ?? []) groupItem(st, c, ctx, outs);
    } finally {
      leave(st);
    }
    return;
  }
  const pos = integerConst(node);
  if (pos !== null) {
    if (pos < 1 || pos > outs.length) throw new Refusal('invalid_sql', `GROUP BY position ${pos} is not in select list`);
    addFilter(st, outs[pos - 1].lin);
    return;
  }
  const bare = bareName(node);
  if (bare !== null) {
    const local = columnsAtLevel(st, bare, ctx.scope);
    if (local.length === 0) {
      const hits = outs.filter((o) => o.name === bare);
      if (hits.length) {
        addFilter(st, hits.reduce((a, o) => merge(a, o.lin), LIN_NONE));
        return;
      }
    }
  }
  addFilter(st, st.doors.expr(st, node, ctx));
}

/** A window definition (`WINDOW w AS (…)` or an inline `OVER (…)`): the lineage of its partition, order and frame values, consumed. */
export function windowDef(st: WalkState, def: N, ctx: Ctx): Lin {
  checkFields('WindowDef', def);
  let lin = LIN_NONE;
  if (def.refname !== undefined) {
    const base = ctx.windows?.get(String(def.refname));
    if (!base) throw new Refusal('invalid_sql', `window ${q(def.refname)} does not exist`);
    lin = merge(lin, base);
  }
  for (const p of def.partitionClause ?? []) lin = merge(lin, st.doors.expr(st, p, ctx));
  for (const o of def.orderClause ?? []) {
    const sb = unwrap(o, 'SortBy');
    lin = merge(lin, st.doors.expr(st, sb.node, ctx));
    sortOperator(st, sb);
  }
  if (def.startOffset) lin = merge(lin, st.doors.expr(st, def.startOffset, ctx));
  if (def.endOffset) lin = merge(lin, st.doors.expr(st, def.endOffset, ctx));
  // Partitioning and ordering compare values (row_number() OVER (ORDER BY email) ranks them).
  consume(st, lin);
  return lin;
}
