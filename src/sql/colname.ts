/**
 * Output column naming, following PostgreSQL's rules for unaliased select-list items
 * (ResTarget without AS). The analyser needs the same names PostgreSQL gives so that derived
 * tables, CTEs and ORDER BY resolve to the same columns, and so that redaction plans line up with
 * the result's field names.
 */

type AnyNode = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const SVF: Record<string, string> = {
  SVFOP_CURRENT_DATE: 'current_date',
  SVFOP_CURRENT_TIME: 'current_time',
  SVFOP_CURRENT_TIME_N: 'current_time',
  SVFOP_CURRENT_TIMESTAMP: 'current_timestamp',
  SVFOP_CURRENT_TIMESTAMP_N: 'current_timestamp',
  SVFOP_LOCALTIME: 'localtime',
  SVFOP_LOCALTIME_N: 'localtime',
  SVFOP_LOCALTIMESTAMP: 'localtimestamp',
  SVFOP_LOCALTIMESTAMP_N: 'localtimestamp',
  SVFOP_CURRENT_ROLE: 'current_role',
  SVFOP_CURRENT_USER: 'current_user',
  SVFOP_USER: 'user',
  SVFOP_SESSION_USER: 'session_user',
  SVFOP_CURRENT_CATALOG: 'current_catalog',
  SVFOP_CURRENT_SCHEMA: 'current_schema',
};

const XML: Record<string, string> = {
  IS_XMLCONCAT: 'xmlconcat',
  IS_XMLELEMENT: 'xmlelement',
  IS_XMLFOREST: 'xmlforest',
  IS_XMLPARSE: 'xmlparse',
  IS_XMLPI: 'xmlpi',
  IS_XMLROOT: 'xmlroot',
  IS_XMLSERIALIZE: 'xmlserialize',
};

const JSONF: Record<string, string> = {
  JSON_EXISTS_OP: 'json_exists',
  JSON_QUERY_OP: 'json_query',
  JSON_VALUE_OP: 'json_value',
};

const FIXED: Record<string, string> = {
  GroupingFunc: 'grouping',
  MergeSupportFunc: 'merge_action',
  A_ArrayExpr: 'array',
  RowExpr: 'row',
  CoalesceExpr: 'coalesce',
  XmlSerialize: 'xmlserialize',
  JsonParseExpr: 'json',
  JsonScalarExpr: 'json_scalar',
  JsonSerializeExpr: 'json_serialize',
  JsonObjectConstructor: 'json_object',
  JsonArrayConstructor: 'json_array',
  JsonArrayQueryConstructor: 'json_array',
  JsonObjectAgg: 'json_objectagg',
  JsonArrayAgg: 'json_arrayagg',
};

function lastString(list: AnyNode[] | undefined): string | undefined {
  let out: string | undefined;
  if (list) for (const f of list) if (f && f.String) out = f.String.sval ?? '';
  return out;
}

/**
 * Returns `[name, strength]` for an expression node (wrapped form, e.g. `{ ColumnRef: {...} }`);
 * strength 0 means "no name" (PostgreSQL then uses `?column?`). `sublinkName` supplies the first
 * output name of an EXPR sub-select, which only the analyser knows.
 */
function figure(node: AnyNode | undefined, sublinkName: (s: AnyNode) => string | undefined): [string, number] {
  if (!node) return ['', 0];
  const type = Object.keys(node)[0];
  const n = node[type] as AnyNode;
  switch (type) {
    case 'ColumnRef': {
      const f = lastString(n.fields);
      return f !== undefined ? [f, 2] : ['', 0];
    }
    case 'A_Indirection': {
      const f = lastString(n.indirection);
      return f !== undefined ? [f, 2] : figure(n.arg, sublinkName);
    }
    case 'FuncCall':
      return [lastString(n.funcname) ?? '', 2];
    case 'A_Expr':
      return n.kind === 'AEXPR_NULLIF' ? ['nullif', 2] : ['', 0];
    case 'TypeCast': {
      const inner = figure(n.arg, sublinkName);
      if (inner[1] <= 1 && n.typeName) return [lastString(n.typeName.names) ?? '', 1];
      return inner;
    }
    case 'CollateClause':
      return figure(n.arg, sublinkName);
    case 'SubLink':
      if (n.subLinkType === 'EXISTS_SUBLINK') return ['exists', 2];
      if (n.subLinkType === 'ARRAY_SUBLINK') return ['array', 2];
      if (n.subLinkType === 'EXPR_SUBLINK') {
        const s = sublinkName(n);
        return s !== undefined ? [s, 2] : ['', 0];
      }
      return ['', 0];
    case 'CaseExpr': {
      const d = figure(n.defresult, sublinkName);
      return d[1] <= 1 ? ['case', 1] : d;
    }
    case 'MinMaxExpr':
      return [n.op === 'IS_LEAST' ? 'least' : 'greatest', 2];
    case 'SQLValueFunction':
      return SVF[n.op] ? [SVF[n.op], 2] : ['', 0];
    case 'XmlExpr':
      return XML[n.op] ? [XML[n.op], 2] : ['', 0];
    case 'JsonFuncExpr':
      return JSONF[n.op] ? [JSONF[n.op], 2] : ['', 0];
    default:
      return FIXED[type] ? [FIXED[type], 2] : ['', 0];
  }
}

/**
 * PostgreSQL's name for an unaliased select-list expression: the column name for a column
 * reference, the function name for a call, the type name for a cast of a constant, `case`,
 * `array`, `row`, `coalesce`, … and `?column?` otherwise.
 */
export function figureColname(node: AnyNode | undefined, sublinkName: (s: AnyNode) => string | undefined = () => undefined): string {
  const [name, strength] = figure(node, sublinkName);
  return strength > 0 ? name : '?column?';
}
