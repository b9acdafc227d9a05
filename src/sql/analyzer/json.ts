/**
 * json.ts — SQL/JSON expressions (PostgreSQL: the JSON part of parse_expr.c, transformJson*):
 * JSON_OBJECT/JSON_ARRAY (also over a query), JSON_OBJECTAGG/JSON_ARRAYAGG, JSON()/JSON_SCALAR/
 * JSON_SERIALIZE, IS JSON, JSON_VALUE/JSON_QUERY/JSON_EXISTS. Every value is computed (derived);
 * JSON_TABLE is refused in FROM (from.ts).
 *
 * Below expr.ts in the import order, so sub-expressions are walked through the door `st.doors.expr`.
 */
import { readsAsAnalysed, sinceOf } from '../legacy-syntax';
import { type Lin, LIN_NONE, merge } from '../lineage';
import { over } from './agg';
import { checkFields, hasOwn, type N, Refusal, unwrap } from './nodes';
import { sortOperator } from './oper';
import type { Ctx, WalkState } from './state';
import { typeName } from './type';
import { calc, perRowQuery } from './uses';

/**
 * Refuses parse node `type` (an SQL/JSON construct or `MERGE_ACTION()`) unless the catalogue records
 * a server that reads it as the construct the analysis judges (red team rt46a J1, legacy-syntax.ts):
 * an older server calls a same-named function found on the search path instead. Throws
 * `statement_not_allowed`; the message does not name the server's version.
 */
export function requireSyntaxVersion(st: WalkState, type: string): void {
  if (readsAsAnalysed(st.cat.source.serverVersionNum, type)) return;
  throw new Refusal(
    'statement_not_allowed',
    `this syntax is not allowed on this source: its server reads it as a call of a function named ${sinceOf(type)!.call}, not as the SQL/JSON construct (call the function you mean by its schema-qualified name)`,
  );
}

/** A JSON node checked against its fields and returned as is (JSON nodes arrive bare as well as wrapped). */
function unwrapJson(n: N, type: string): N {
  checkFields(type, n);
  return n;
}

/** A JSON value expression (`expr [FORMAT JSON]`), wrapped or bare: its lineage. */
function jsonValue(st: WalkState, v: N | undefined, ctx: Ctx): Lin {
  if (!v) return LIN_NONE;
  const jv = hasOwn.call(v, 'JsonValueExpr') ? unwrapJson(v.JsonValueExpr, 'JsonValueExpr') : (checkFields('JsonValueExpr', v), v);
  let lin = st.doors.expr(st, jv.raw_expr, ctx);
  if (jv.formatted_expr) lin = merge(lin, st.doors.expr(st, jv.formatted_expr, ctx));
  if (jv.format) checkFields('JsonFormat', jv.format);
  return lin;
}

/** A `RETURNING type [FORMAT …]` clause: the type is judged like any type name. */
function jsonOutput(st: WalkState, o: N | undefined): void {
  if (!o) return;
  checkFields('JsonOutput', o);
  typeName(st, o.typeName);
  if (o.returning) checkFields('JsonReturning', o.returning);
}

/** The shared part of JSON_OBJECTAGG/JSON_ARRAYAGG: RETURNING, FILTER, ORDER BY, OVER. */
function jsonAggCtor(st: WalkState, c: N | undefined, ctx: Ctx): Lin {
  if (!c) return LIN_NONE;
  checkFields('JsonAggConstructor', c);
  jsonOutput(st, c.output);
  let lin = LIN_NONE;
  if (c.agg_filter) lin = merge(lin, st.doors.expr(st, c.agg_filter, ctx));
  for (const o of c.agg_order ?? []) {
    const sb = unwrap(o, 'SortBy');
    lin = merge(lin, st.doors.expr(st, sb.node, ctx));
    sortOperator(st, sb);
  }
  if (c.over) lin = merge(lin, over(st, c.over, ctx));
  return lin;
}

/** `… ON EMPTY` / `… ON ERROR` of a JSON query function: the default expression's lineage. */
function jsonBehavior(st: WalkState, b: N | undefined, ctx: Ctx): Lin {
  if (!b) return LIN_NONE;
  checkFields('JsonBehavior', b);
  return st.doors.expr(st, b.expr, ctx);
}

/**
 * An SQL/JSON expression node (constructors, aggregates, parse/serialize, IS JSON,
 * JSON_VALUE/QUERY/EXISTS): its lineage, always derived. Called by expr.ts's dispatcher, which
 * counts the node and its nesting.
 */
export function jsonExpr(st: WalkState, type: string, n: N, ctx: Ctx): Lin {
  requireSyntaxVersion(st, type);
  switch (type) {
    case 'JsonObjectConstructor': {
      checkFields(type, n);
      jsonOutput(st, n.output);
      let lin = LIN_NONE;
      for (const kv of n.exprs ?? []) {
        const p = unwrap(kv, 'JsonKeyValue');
        lin = merge(lin, merge(st.doors.expr(st, p.key, ctx), jsonValue(st, p.value, ctx)));
      }
      return calc(st, lin);
    }
    case 'JsonArrayConstructor': {
      checkFields(type, n);
      jsonOutput(st, n.output);
      let lin = LIN_NONE;
      for (const v of n.exprs ?? []) lin = merge(lin, jsonValue(st, v, ctx));
      return calc(st, lin);
    }
    case 'JsonArrayQueryConstructor': {
      checkFields(type, n);
      jsonOutput(st, n.output);
      if (n.format) checkFields('JsonFormat', n.format);
      const { out: sub, control } = perRowQuery(st, n.query, ctx.scope, ctx.ctes);
      return calc(st, sub.cols.reduce((a, c) => merge(a, c.lin), control));
    }
    case 'JsonObjectAgg': {
      checkFields(type, n);
      const ctor = hasOwn.call(n, 'constructor') ? (n.constructor as N) : undefined;
      let lin = jsonAggCtor(st, ctor, ctx);
      if (n.arg) {
        checkFields('JsonKeyValue', n.arg);
        lin = merge(lin, merge(st.doors.expr(st, n.arg.key, ctx), jsonValue(st, n.arg.value, ctx)));
      }
      return calc(st, lin);
    }
    case 'JsonArrayAgg': {
      checkFields(type, n);
      const ctor = hasOwn.call(n, 'constructor') ? (n.constructor as N) : undefined;
      return calc(st, merge(jsonAggCtor(st, ctor, ctx), jsonValue(st, n.arg, ctx)));
    }
    case 'JsonParseExpr':
    case 'JsonSerializeExpr':
      checkFields(type, n);
      jsonOutput(st, n.output);
      return calc(st, jsonValue(st, n.expr, ctx));
    case 'JsonScalarExpr':
      checkFields(type, n);
      jsonOutput(st, n.output);
      return calc(st, st.doors.expr(st, n.expr, ctx));
    case 'JsonIsPredicate':
      checkFields(type, n);
      if (n.format) checkFields('JsonFormat', n.format);
      return calc(st, st.doors.expr(st, n.expr, ctx));
    case 'JsonFuncExpr': {
      checkFields(type, n);
      jsonOutput(st, n.output);
      let lin = merge(jsonValue(st, n.context_item, ctx), st.doors.expr(st, n.pathspec, ctx));
      for (const p of n.passing ?? []) {
        const a = unwrap(p, 'JsonArgument');
        lin = merge(lin, jsonValue(st, a.val, ctx));
      }
      lin = merge(lin, merge(jsonBehavior(st, n.on_empty, ctx), jsonBehavior(st, n.on_error, ctx)));
      return calc(st, lin);
    }
    default:
      throw new Refusal('statement_not_allowed', `unsupported SQL construct: ${type}`);
  }
}
