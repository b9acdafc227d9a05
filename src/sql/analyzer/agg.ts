/**
 * agg.ts — aggregates and window calls (PostgreSQL: parse_agg.c, transformAggregateCall,
 * transformWindowFuncCall): the modifiers of an aggregate call (ORDER BY and FILTER inside it,
 * OVER), and the plain `count(col)` rule (it reveals only how many values are not null, so it is a
 * count use, not a non-output use). The call itself is resolved and judged by func.ts.
 */
import { type Lin, merge } from '../lineage';
import { checkFields, hasOwn, type N, q, Refusal, unwrap } from './nodes';
import { sortOperator } from './oper';
import { windowDef } from './clause';
import type { Ctx, WalkState } from './state';
import { calc } from './uses';

/**
 * A plain `count(col)`: one positional argument, no `*`, DISTINCT, WITHIN GROUP, VARIADIC or ORDER
 * BY. `builtInCount`: the name is `count` and every candidate is the built-in one (func.ts).
 */
export function isPlainCount(fc: N, args: readonly N[], builtInCount: boolean): boolean {
  return (
    builtInCount &&
    args.length === 1 &&
    !hasOwn.call(args[0], 'NamedArgExpr') &&
    !fc.agg_star &&
    !fc.agg_distinct &&
    !fc.agg_within_group &&
    !fc.func_variadic &&
    !(fc.agg_order && fc.agg_order.length)
  );
}

/** The modifiers of a function call (`agg_order`, `agg_filter`, `over`): their lineage merged into `lin`, each consumed. */
export function aggregateModifiers(st: WalkState, fc: N, ctx: Ctx, lin: Lin): Lin {
  for (const o of fc.agg_order ?? []) {
    const sb = unwrap(o, 'SortBy');
    lin = merge(lin, calc(st, st.doors.expr(st, sb.node, ctx)));
    sortOperator(st, sb);
  }
  if (fc.agg_filter) lin = merge(lin, calc(st, st.doors.expr(st, fc.agg_filter, ctx)));
  if (fc.over) lin = merge(lin, calc(st, over(st, fc.over, ctx)));
  return lin;
}

/** `OVER w` (a named window) or `OVER (…)` (an inline definition): the window's lineage. */
export function over(st: WalkState, w: N, ctx: Ctx): Lin {
  checkFields('WindowDef', w);
  if (w.name !== undefined && !w.partitionClause && !w.orderClause && w.refname === undefined) {
    // OVER w
    const base = ctx.windows?.get(String(w.name));
    if (!base) throw new Refusal('invalid_sql', `window ${q(w.name)} does not exist`);
    return base;
  }
  return windowDef(st, w, ctx);
}
