/**
 * nodes.ts — the raw parse tree's nodes: the fail-closed field allow-list, unwrapping, small node
 * readers and the walker's refusal (PostgreSQL: parse_node.c).
 *
 * Every node the walker handles is checked here against the fields it understands (`FIELD_LIST`);
 * a node type or field outside the list is refused as `statement_not_allowed`, so a parser upgrade
 * that adds a field fails closed. Nothing here reads the catalogue or the walk's state.
 */
import { clipText } from '../../errors/cut-text';
import type { RefusalCode } from '../types';

/** A raw parse-tree node or node body (libpg-query JSON). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type N = Record<string, any>;

/** Thrown inside the walker; converted to a refusal result by `analyzeSql`. */
export class Refusal extends Error {
  constructor(
    readonly code: RefusalCode,
    message: string,
  ) {
    super(message);
    this.name = 'Refusal';
  }
}

/** Cuts a name taken from the input before it goes into a message. */
export function q(name: unknown): string {
  const s = String(name);
  return '"' + clipText(s, 64).replace(/[\u0000-\u001f\u007f"]/g, '?') + '"';
}

// ---------------------------------------------------------------------------------------------
// Field allow-list per node type. A field outside its type's list is refused (fail closed).
// ---------------------------------------------------------------------------------------------
/** The fields the walker understands, per node type (space-separated). */
const FIELD_LIST: Record<string, string> = {
  SelectStmt:
    'distinctClause intoClause targetList fromClause whereClause groupClause groupDistinct havingClause windowClause valuesLists sortClause limitOffset limitCount limitOption lockingClause withClause op all larg rarg',
  InsertStmt: 'relation cols selectStmt onConflictClause returningClause withClause override',
  UpdateStmt: 'relation targetList whereClause fromClause returningClause withClause',
  DeleteStmt: 'relation usingClause whereClause returningClause withClause',
  MergeStmt: 'relation sourceRelation joinCondition mergeWhenClauses returningClause withClause',
  MergeWhenClause: 'matchKind commandType override condition targetList values',
  OnConflictClause: 'action infer targetList whereClause location',
  InferClause: 'indexElems whereClause conname location',
  IndexElem: 'name expr indexcolname collation opclass ordering nulls_ordering',
  ExplainStmt: 'query options',
  DefElem: 'defnamespace defname arg defaction location',
  ResTarget: 'name indirection val location',
  RangeVar: 'schemaname relname inh relpersistence alias location',
  Alias: 'aliasname colnames',
  JoinExpr: 'jointype isNatural larg rarg usingClause join_using_alias quals alias rtindex',
  RangeSubselect: 'lateral subquery alias',
  RangeFunction: 'lateral ordinality is_rowsfrom functions alias coldeflist',
  RangeTableSample: 'relation method args repeatable location',
  ColumnDef: 'colname typeName is_local is_not_null inhcount collClause location',
  FuncCall: 'funcname args agg_order agg_filter over agg_within_group agg_star agg_distinct func_variadic funcformat location',
  WindowDef: 'name refname partitionClause orderClause frameOptions startOffset endOffset location',
  SortBy: 'node sortby_dir sortby_nulls useOp location',
  A_Expr: 'kind name lexpr rexpr rexpr_list_start rexpr_list_end location',
  BoolExpr: 'boolop args location',
  NullTest: 'arg nulltesttype argisrow location',
  BooleanTest: 'arg booltesttype location',
  TypeCast: 'arg typeName location',
  TypeName: 'names setof pct_type typmods typemod arrayBounds location',
  CollateClause: 'arg collname location',
  A_Const: 'ival fval boolval sval bsval isnull location',
  ParamRef: 'number location',
  ColumnRef: 'fields location',
  A_Indirection: 'arg indirection',
  A_Indices: 'is_slice lidx uidx',
  A_ArrayExpr: 'elements list_start list_end location',
  RowExpr: 'args row_format colnames location',
  CoalesceExpr: 'args location',
  MinMaxExpr: 'op args location',
  SQLValueFunction: 'op typmod location',
  CaseExpr: 'arg args defresult location',
  CaseWhen: 'expr result location',
  SubLink: 'subLinkType subLinkId testexpr operName subselect location',
  GroupingFunc: 'args location',
  GroupingSet: 'kind content location',
  NamedArgExpr: 'arg name argnumber location',
  XmlExpr: 'op name named_args arg_names args xmloption indent location',
  XmlSerialize: 'xmloption expr typeName indent location',
  MultiAssignRef: 'source colno ncolumns',
  SetToDefault: 'location',
  MergeSupportFunc: 'location',
  List: 'items',
  CommonTableExpr: 'ctename aliascolnames ctematerialized ctequery search_clause cycle_clause location',
  WithClause: 'ctes recursive location',
  CTESearchClause: 'search_col_list search_breadth_first search_seq_column location',
  CTECycleClause: 'cycle_col_list cycle_mark_column cycle_mark_value cycle_mark_default cycle_path_column location',
  ReturningClause: 'options exprs',
  JsonValueExpr: 'raw_expr formatted_expr format',
  JsonFormat: 'format_type encoding location',
  JsonOutput: 'typeName returning',
  JsonReturning: 'format typid typmod',
  JsonKeyValue: 'key value',
  JsonObjectConstructor: 'exprs output absent_on_null unique location',
  JsonArrayConstructor: 'exprs output absent_on_null location',
  JsonArrayQueryConstructor: 'query output format absent_on_null location',
  JsonAggConstructor: 'output agg_filter agg_order over location',
  JsonObjectAgg: 'constructor arg absent_on_null unique',
  JsonArrayAgg: 'constructor arg absent_on_null',
  JsonParseExpr: 'expr output unique_keys location',
  JsonScalarExpr: 'expr output location',
  JsonSerializeExpr: 'expr output location',
  JsonIsPredicate: 'expr format item_type unique_keys location',
  JsonFuncExpr: 'op column_name context_item pathspec passing output on_empty on_error wrapper quotes location',
  JsonArgument: 'val name',
  JsonBehavior: 'btype expr coerce location',
  String: 'sval',
  Integer: 'ival',
  Float: 'fval',
  Boolean: 'boolval',
  BitString: 'bsval',
  A_Star: '',
};
const FIELDS: Record<string, ReadonlySet<string>> = Object.fromEntries(
  Object.entries(FIELD_LIST).map(([k, v]) => [k, new Set(v.split(' ').filter(Boolean))]),
);
/** `Object.prototype.hasOwnProperty`, for `hasOwn.call(node, type)`. */
export const hasOwn = Object.prototype.hasOwnProperty;

/** Refuses a node that carries a field this walker does not understand. */
export function checkFields(type: string, n: N): void {
  const allowed = FIELDS[type];
  if (!allowed) throw new Refusal('statement_not_allowed', `unsupported SQL construct: ${type}`);
  for (const k in n) {
    if (!allowed.has(k)) throw new Refusal('statement_not_allowed', `unsupported SQL construct: ${type}.${k}`);
  }
}

/** The single key of a wrapped node (`{ SelectStmt: {...} }` → `SelectStmt`), or undefined for `{}`. */
export function nodeType(node: N): string | undefined {
  let t: string | undefined;
  for (const k in node) {
    if (t !== undefined) throw new Refusal('statement_not_allowed', 'malformed parse tree');
    t = k;
  }
  return t;
}

/** Unwraps `{ Type: body }`, checking the type and fields. */
export function unwrap(node: N | undefined, type: string): N {
  if (!node || !hasOwn.call(node, type)) throw new Refusal('statement_not_allowed', `unsupported SQL construct in place of ${type}`);
  const body = node[type] as N;
  checkFields(type, body);
  return body;
}

/** The `String` values of a name list (`funcname`, `names`, aliases); anything else is refused as an unsupported `what`. */
export function strings(list: N[] | undefined, what: string): string[] {
  const out: string[] = [];
  if (list) for (const x of list) {
    if (!x || !hasOwn.call(x, 'String')) throw new Refusal('statement_not_allowed', `unsupported ${what}`);
    out.push(String(x.String.sval ?? ''));
  }
  return out;
}

/** The names of a column reference's fields (every field must be a `String`). */
export function strs(fields: N[]): string[] {
  return fields.map((f) => {
    if (!f || !hasOwn.call(f, 'String')) throw new Refusal('statement_not_allowed', 'malformed column reference');
    return String(f.String.sval);
  });
}

/** Value of a bare string constant (`'english'`), else null (casts, parameters, columns, expressions). */
export function constString(node: N): string | null {
  const c = node && hasOwn.call(node, 'A_Const') ? (node.A_Const as N) : null;
  return c && c.sval && typeof c.sval.sval === 'string' ? c.sval.sval : null;
}

/** An integer constant (ORDER BY 1 / GROUP BY 2), else null. */
export function integerConst(node: N): number | null {
  const c = node && hasOwn.call(node, 'A_Const') ? (node.A_Const as N) : null;
  if (!c) return null;
  if (c.ival && typeof c.ival === 'object') return typeof c.ival.ival === 'number' ? c.ival.ival : 0;
  return null;
}

/** A bare (single-field) column name, else null. */
export function bareName(node: N): string | null {
  const cr = node && hasOwn.call(node, 'ColumnRef') ? (node.ColumnRef as N) : null;
  if (!cr || !cr.fields || cr.fields.length !== 1 || !hasOwn.call(cr.fields[0], 'String')) return null;
  return String(cr.fields[0].String.sval);
}
