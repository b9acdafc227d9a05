/**
 * expr.ts — expressions (PostgreSQL: parse_expr.c, transformExpr → transformExprRecurse): one
 * dispatcher over the raw expression nodes, column references (one to three parts, composite
 * fields, whole-row values) and sub-selects used as values (sublinks). Returns each value's
 * lineage and records reads, parameters and uses on the way; SQL/JSON nodes go to json.ts,
 * function calls to func.ts, operators to oper.ts, type names to type.ts.
 *
 * The families below it in the import order (clause, agg, func, json) reach `ex` through the door
 * `st.doors.expr`; the ones above (from, target, cte, dml, stmt) import it.
 */
import { deniedValueFunctionReason } from '../function-policy';
import { derive, type Lin, LIN_ANY, LIN_NONE, merge, type RelRef, tableKey, wholeRow } from '../lineage';
import { funcCall } from './func';
import { jsonExpr, requireSyntaxVersion } from './json';
import { bareName, checkFields, hasOwn, type N, nodeType, q, Refusal, strings, strs, unwrap } from './nodes';
import { builtInOperator, checkOperator, operatorUse } from './oper';
import { columnsAtLevel, findItem, hasColumn, reached, starColumns } from './relation';
import { charge, type Col, type Ctx, enter, leave, type NsItem, type Scope, type WalkState } from './state';
import { typeName } from './type';
import { calc, consume, consumeAll, perRowQuery, readAll, use } from './uses';

/** A date/time literal that names the current time (`'now'::timestamptz`): the result is not cacheable. */
const TIME_LITERAL = /^\s*(now|today|tomorrow|yesterday)\s*$/i;

/** The `A_Expr` kinds the walker understands (operators, IN, LIKE, BETWEEN, …). */
const A_EXPR_KINDS = new Set([
  'AEXPR_OP',
  'AEXPR_OP_ANY',
  'AEXPR_OP_ALL',
  'AEXPR_DISTINCT',
  'AEXPR_NOT_DISTINCT',
  'AEXPR_NULLIF',
  'AEXPR_IN',
  'AEXPR_LIKE',
  'AEXPR_ILIKE',
  'AEXPR_SIMILAR',
  'AEXPR_BETWEEN',
  'AEXPR_NOT_BETWEEN',
  'AEXPR_BETWEEN_SYM',
  'AEXPR_NOT_BETWEEN_SYM',
]);

/**
 * A column reference's lineage. `output`: the reference is an entire item of the statement's own
 * select list, where a whole-row value is an output (opaque) rather than a use of its columns.
 */
export function columnRef(st: WalkState, cr: N, ctx: Ctx, output = false): Lin {
  checkFields('ColumnRef', cr);
  const fields: N[] = cr.fields ?? [];
  const last = fields[fields.length - 1];
  if (!last) throw new Refusal('statement_not_allowed', 'malformed column reference');
  if (hasOwn.call(last, 'A_Star')) {
    // `t.*` / `*` used as a value (function argument, ROW(...), comparison): a whole-row value.
    const cols = starColumns(st, fields, ctx);
    return wholeRowOf(st, cols, fields.length === 1 ? null : findItem(st, strs(fields.slice(0, -1)), ctx.scope), output);
  }
  const names = strs(fields);
  if (names.length > 3) throw new Refusal('unknown_column', 'cross-database references are not supported');
  if (names.length === 1) {
    const name = names[0];
    for (let s: Scope | null = ctx.scope; s; s = s.parent) {
      const hits = columnsAtLevel(st, name, s);
      if (hits.length) reached(st, s);
      if (hits.length === 1) return use(st, hits[0]);
      if (hits.length > 1) {
        // Ambiguous (PostgreSQL refuses to run it): treat as reading every candidate.
        let lin = LIN_NONE;
        for (const h of hits) lin = merge(lin, use(st, h));
        return calc(st, lin);
      }
    }
    const item = findItem(st, [name], ctx.scope);
    if (item) return wholeRowOf(st, item.cols, item, output);
    throw new Refusal('unknown_column', `unknown column ${q(name)}`);
  }
  // [rel, col] / [schema, rel, col], else [col, field] / [rel, col, field] (composite field selection).
  const relNames = names.slice(0, -1);
  const colName = names[names.length - 1];
  const item = findItem(st, relNames, ctx.scope);
  if (item) {
    const hits = item.cols.filter((c) => c.name === colName);
    if (hits.length === 0) throw new Refusal('unknown_column', `unknown column ${q(relNames.join('.') + '.' + colName)}`);
    if (hits.length === 1) return use(st, hits[0]);
    let lin = LIN_NONE;
    for (const h of hits) lin = merge(lin, use(st, h));
    return calc(st, lin); // ambiguous (PostgreSQL refuses it): every candidate counts as used
  }
  // Field of a composite column: `a.f` (column a) or `t.a.f` (column a of t).
  const compositeExists = names.length === 2 ? hasColumn(st, names[0], ctx.scope) : !!findItem(st, [names[0]], ctx.scope);
  if (!compositeExists) throw new Refusal('unknown_column', `unknown column ${q(names.join('.'))} (no such FROM item or column)`);
  const inner = columnRef(st, { fields: fields.slice(0, -1) }, ctx);
  return calc(st, inner); // a field taken out of a composite value
}

/**
 * A whole-row value over `cols` (of `item` when known). Its lineage carries every column; unless
 * it is an entire item of the statement's select list (`output`), every column is also a
 * non-output use (`row_to_json(c)`, `c = c2`, `count(c)`, `SELECT c` in a sub-select, …).
 */
function wholeRowOf(st: WalkState, cols: readonly Col[], item: NsItem | null, output = false): Lin {
  const lins: Lin[] = [];
  charge(st, cols.length);
  for (const c of cols) lins.push(use(st, c));
  let w = wholeRow(lins);
  if (item?.base) {
    // Every column of the base relation, also those hidden by nothing here (defensive).
    readAll(st, item.base);
    const k = tableKey(item.base.schema, item.base.name);
    if (!w.opq || !w.opq.has(k)) {
      const opq = new Map<string, RelRef>(w.opq ?? []);
      opq.set(k, { schema: item.base.schema, table: item.base.name });
      w = { src: w.src, pass: false, opq };
    }
  }
  if (!output) consume(st, w);
  return w;
}

/** The merged lineage of a list of expressions (onto `lin`). */
function exList(st: WalkState, list: N[] | undefined, ctx: Ctx, lin: Lin = LIN_NONE): Lin {
  if (list) for (const e of list) lin = merge(lin, ex(st, e, ctx));
  return lin;
}

/**
 * Lineage of a sub-select used as an expression; its query level sees the current one. The value
 * carries, as derived lineage, every column the sub-select consumed (`perRowQuery`: its filters
 * decide the value as much as its select list does) as well as its test expression and select
 * list. A scalar sub-select stays passthrough only when it consumed nothing.
 */
function subLink(st: WalkState, sl: N, ctx: Ctx): Lin {
  checkFields('SubLink', sl);
  const kind = String(sl.subLinkType);
  let lin = LIN_NONE;
  if (sl.testexpr) lin = merge(lin, ex(st, sl.testexpr, ctx));
  if (sl.operName && !st.ops) checkOperator(st, sl.operName);
  consume(st, lin);
  const { out: sub, control } = perRowQuery(st, sl.subselect, ctx.scope, ctx.ctes);
  if (st.ops) {
    st.ops.noteOutputs(sl, sub.cols.map((c) => c.lin));
    if (kind === 'ANY_SUBLINK' || kind === 'ALL_SUBLINK' || kind === 'ROWCOMPARE_SUBLINK') operatorUse(st, { kind: 'sublink', sublink: sl });
  }
  if (sub.cols.length) st.sublinkNames.set(sl, sub.cols[0].name);
  switch (kind) {
    case 'EXISTS_SUBLINK':
      // The result depends on the sub-select's rows (its filters: `control`); its select list
      // counts as used too (conservative: `EXISTS (SELECT c.phone INTERSECT …)` is caught by
      // INTERSECT, `EXISTS (SELECT *)` lists every column).
      consumeAll(st, sub.cols);
      return derive(sub.cols.reduce((a, c) => merge(a, c.lin), control));
    case 'EXPR_SUBLINK':
      // A scalar sub-select's single value flows on unchanged (passthrough chains survive) when
      // nothing else decides it; otherwise it is derived from its filters too.
      if (sub.cols.length === 1) return control === LIN_NONE ? sub.cols[0].lin : merge(sub.cols[0].lin, control);
      return calc(st, sub.cols.reduce((a, c) => merge(a, c.lin), control));
    case 'ARRAY_SUBLINK':
    case 'MULTIEXPR_SUBLINK':
    case 'ANY_SUBLINK':
    case 'ALL_SUBLINK':
    case 'ROWCOMPARE_SUBLINK':
      return calc(st, sub.cols.reduce((a, c) => merge(a, c.lin), merge(lin, control)));
    default:
      throw new Refusal('statement_not_allowed', `unsupported sub-select kind ${kind}`);
  }
}

/** Lineage of an expression; records reads, functions, parameters on the way. */
export function ex(st: WalkState, node: N | undefined, ctx: Ctx): Lin {
  const lin = exNode(st, node, ctx);
  if (st.ops && node) st.ops.note(node, lin);
  return lin;
}

/**
 * The dispatcher (PostgreSQL: transformExprRecurse): one case per expression node, each a call or
 * a line; every case checks the node's fields first. Counts one step and one nesting level.
 */
function exNode(st: WalkState, node: N | undefined, ctx: Ctx): Lin {
  if (!node) return LIN_NONE;
  const type = nodeType(node);
  if (type === undefined) return LIN_NONE;
  const n = node[type] as N;
  enter(st);
  try {
    switch (type) {
      case 'ColumnRef':
        return columnRef(st, n, ctx);
      case 'A_Const':
        checkFields(type, n);
        if (n.sval && typeof n.sval.sval === 'string' && TIME_LITERAL.test(n.sval.sval)) st.cacheable = false;
        return LIN_NONE;
      case 'ParamRef':
        checkFields(type, n);
        if (typeof n.number === 'number' && n.number > st.maxParam) st.maxParam = n.number;
        return LIN_NONE;
      case 'A_Expr':
        return exAExpr(st, n, ctx);
      case 'List':
        checkFields(type, n);
        return calc(st, exList(st, n.items, ctx));
      case 'A_ArrayExpr':
        checkFields(type, n);
        return calc(st, exList(st, n.elements, ctx));
      case 'BoolExpr':
      case 'RowExpr':
      case 'CoalesceExpr':
      case 'MinMaxExpr':
      case 'GroupingFunc':
        checkFields(type, n);
        return calc(st, exList(st, n.args, ctx));
      case 'NullTest':
      case 'BooleanTest':
        checkFields(type, n);
        return calc(st, ex(st, n.arg, ctx));
      case 'TypeCast':
      case 'XmlSerialize':
        checkFields(type, n);
        typeName(st, n.typeName);
        return calc(st, ex(st, type === 'TypeCast' ? n.arg : n.expr, ctx));
      case 'CollateClause':
        checkFields(type, n);
        strings(n.collname, 'collation name');
        return ex(st, n.arg, ctx); // same value, different collation: passthrough survives
      case 'FuncCall':
        return funcCall(st, n, ctx).lin;
      case 'A_Indirection':
        return exIndirection(st, n, ctx);
      case 'SQLValueFunction':
        return exValueFunction(st, n);
      case 'CaseExpr':
        return exCase(st, n, ctx);
      case 'SubLink':
        return subLink(st, n, ctx);
      case 'NamedArgExpr':
        checkFields(type, n);
        return ex(st, n.arg, ctx);
      case 'XmlExpr':
        return exXml(st, n, ctx);
      case 'MultiAssignRef':
        checkFields(type, n);
        return calc(st, ex(st, n.source, ctx));
      case 'MergeSupportFunc':
        requireSyntaxVersion(st, type); // an older server calls a function named merge_action (rt46a J1)
        checkFields(type, n);
        return LIN_NONE;
      case 'SetToDefault':
        checkFields(type, n);
        return LIN_NONE;
      case 'JsonObjectConstructor':
      case 'JsonArrayConstructor':
      case 'JsonArrayQueryConstructor':
      case 'JsonObjectAgg':
      case 'JsonArrayAgg':
      case 'JsonParseExpr':
      case 'JsonSerializeExpr':
      case 'JsonScalarExpr':
      case 'JsonIsPredicate':
      case 'JsonFuncExpr':
        return jsonExpr(st, type, n, ctx);
      case 'CurrentOfExpr':
        throw new Refusal('statement_not_allowed', 'WHERE CURRENT OF (cursors) is not allowed');
      default:
        throw new Refusal('statement_not_allowed', `unsupported SQL construct: ${type}`);
    }
  } finally {
    leave(st);
  }
}

/** An operator form (`A_Expr`: operators, IN, LIKE, BETWEEN, NULLIF, IS [NOT] DISTINCT FROM, ANY/ALL): computed on both operands. */
function exAExpr(st: WalkState, n: N, ctx: Ctx): Lin {
  checkFields('A_Expr', n);
  const kind = String(n.kind);
  if (!A_EXPR_KINDS.has(kind)) throw new Refusal('statement_not_allowed', `unsupported operator form ${kind}`);
  const between = kind.startsWith('AEXPR_BETWEEN') || kind.startsWith('AEXPR_NOT_BETWEEN');
  if (!between && !st.ops) checkOperator(st, n.name);
  const value = calc(st, merge(ex(st, n.lexpr, ctx), ex(st, n.rexpr, ctx)));
  if (st.ops) operatorUse(st, { kind: 'expr', expr: n });
  // In a view's definition, an operator whose function is not analysed may read any relation (views.ts).
  return st.viewBody && !between && !builtInOperator(st, n.name) ? merge(value, LIN_ANY) : value;
}

/** Subscripts and field selection (`A_Indirection`): `(c).col` on a FROM item is `c.col`; otherwise computed on the value and the subscripts. */
function exIndirection(st: WalkState, n: N, ctx: Ctx): Lin {
  checkFields('A_Indirection', n);
  let ind: N[] = n.indirection ?? [];
  let lin: Lin | null = null;
  // `(c).col` where `c` is a FROM item (not a column): the same as `c.col`.
  const argName = bareName(n.arg);
  if (argName !== null && ind.length && hasOwn.call(ind[0], 'String') && !hasColumn(st, argName, ctx.scope) && findItem(st, [argName], ctx.scope)) {
    lin = columnRef(st, { fields: [{ String: { sval: argName } }, ind[0]] }, ctx);
    ind = ind.slice(1);
    if (ind.length === 0) return lin;
  }
  // Subscripts and field selection compute on the value (and on the subscripts).
  lin = calc(st, lin ?? ex(st, n.arg, ctx));
  for (const i of ind) {
    const t = nodeType(i);
    if (t === 'String' || t === 'A_Star') continue;
    if (t !== 'A_Indices') throw new Refusal('statement_not_allowed', 'unsupported indirection');
    const ai = i.A_Indices as N;
    checkFields('A_Indices', ai);
    lin = merge(lin, calc(st, merge(ex(st, ai.lidx, ctx), ex(st, ai.uidx, ctx))));
  }
  return lin;
}

/** An SQL value function (`CURRENT_DATE`, `CURRENT_USER`, …): those naming the connection or server are refused; never cacheable. */
function exValueFunction(st: WalkState, n: N): Lin {
  checkFields('SQLValueFunction', n);
  const why = deniedValueFunctionReason(String(n.op));
  if (why) throw new Refusal('function_not_allowed', why);
  st.cacheable = false;
  return LIN_NONE;
}

/** CASE (simple or searched): derived from every condition and result; a simple CASE compares with `=`. */
function exCase(st: WalkState, n: N, ctx: Ctx): Lin {
  checkFields('CaseExpr', n);
  let lin = ex(st, n.arg, ctx);
  for (const w of n.args ?? []) {
    const cw = unwrap(w, 'CaseWhen');
    lin = merge(lin, merge(ex(st, cw.expr, ctx), ex(st, cw.result, ctx)));
    if (st.ops && n.arg) operatorUse(st, { kind: 'case', arg: n.arg, when: cw.expr }); // simple CASE: arg = expr
  }
  return calc(st, merge(lin, ex(st, n.defresult, ctx)));
}

/** An XML function (`XmlExpr`: xmlelement, xmlforest, …): derived from its arguments and named arguments. */
function exXml(st: WalkState, n: N, ctx: Ctx): Lin {
  checkFields('XmlExpr', n);
  let lin = exList(st, n.args, ctx);
  for (const na of n.named_args ?? []) {
    const rt = unwrap(na, 'ResTarget');
    lin = merge(lin, ex(st, rt.val, ctx));
  }
  return calc(st, lin);
}
