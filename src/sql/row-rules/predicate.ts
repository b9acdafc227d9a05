/**
 * Row-rule predicates (issue 27, docs/row-rules.md): the text an operator writes in a role's
 * `rows` (spec/role-v1.schema.json), parsed with the real PostgreSQL parser, checked against a
 * small grammar, and rendered by InterLock itself into the SQL of a row view's WHERE clause.
 *
 * Allowed: the table's own columns (one unqualified name), `identity.<attr>` (an attribute of the
 * caller), constants (numbers, strings, booleans, NULL), comparisons `= <> != < <= > >=`, `IN (…)`
 * lists, `= ANY(identity.<attr>)`, `IS [NOT] NULL`, `AND`/`OR`/`NOT`, and the immutable
 * built-ins `lower`, `upper`, `btrim` and `COALESCE`. Anything else (sub-selects, casts, other
 * functions, operators, parameters, qualified columns) is refused with a message naming it.
 *
 * Nothing of the operator's text is spliced: the rendered SQL is rebuilt from the checked tree
 * (identifiers quoted, strings as E'' literals, operators as `OPERATOR(pg_catalog.…)`, functions
 * `pg_catalog.`-qualified). `identity.<attr>` becomes `current_setting('interlock.attr.<attr>',
 * true)` cast to the compared column's type (its array type under `ANY`), whose value the gateway
 * binds per call with `set_config` as a bound parameter (src/pipeline/row-rules.ts).
 */
import { parseSql, SqlParseFailure } from '../parser';

/** Name pattern of an identity attribute usable in a row rule (lower case; also a GUC name part). */
export const ATTRIBUTE_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/** Prefix of the custom settings that carry scalar attribute values (`interlock.attr.<attr>`). */
export const ATTRIBUTE_SETTING_PREFIX = 'interlock.attr.';
/** Prefix of the custom settings that carry list attribute values for `= ANY(…)` (`interlock.attrs.<attr>`). */
export const LIST_SETTING_PREFIX = 'interlock.attrs.';

const COMPARISONS = new Set(['=', '<>', '!=', '<', '<=', '>', '>=']);
const FUNCTIONS = new Set(['lower', 'upper', 'btrim']);

/** A checked predicate tree (internal shape; build it with parseRowPredicate). */
export type PredicateNode =
  | { k: 'col'; name: string }
  | { k: 'attr'; name: string }
  | { k: 'const'; sql: string }
  | { k: 'cmp'; op: string; l: PredicateNode; r: PredicateNode }
  | { k: 'any'; l: PredicateNode; attr: string }
  | { k: 'in'; not: boolean; l: PredicateNode; items: PredicateNode[] }
  | { k: 'bool'; op: 'AND' | 'OR' | 'NOT'; args: PredicateNode[] }
  | { k: 'null'; not: boolean; arg: PredicateNode }
  | { k: 'fn'; name: string; args: PredicateNode[] }
  | { k: 'coalesce'; args: PredicateNode[] };

/** A checked row predicate: its tree, the table columns and the identity attributes it uses (sorted). */
export interface RowPredicate {
  /** The operator's text, as written. */
  text: string;
  tree: PredicateNode;
  columns: string[];
  /** Attributes used as one value (bound to `interlock.attr.<attr>`). */
  attributes: string[];
  /** Attributes used as a list under `= ANY(…)` (bound to `interlock.attrs.<attr>`). */
  listAttributes: string[];
}

/** Thrown for a predicate outside the grammar; `message` says what and is safe to show operators. */
export class RowPredicateError extends Error {}

const MAX_NODES = 200;

/**
 * Parses and checks one predicate. Throws RowPredicateError (the parser's own message for a syntax
 * error, else which construct is not allowed). Requires the parser to be loaded (initSqlParser).
 */
export function parseRowPredicate(text: string): RowPredicate {
  if (typeof text !== 'string' || text.trim() === '') throw new RowPredicateError('the row predicate is empty');
  if (text.includes('\u0000')) throw new RowPredicateError('the row predicate contains a NUL byte');
  let parsed;
  try {
    parsed = parseSql(`SELECT 1 WHERE ${text}`);
  } catch (err) {
    if (err instanceof SqlParseFailure) throw new RowPredicateError(`the row predicate does not parse: ${err.message}`);
    throw err;
  }
  const stmts = parsed.stmts ?? [];
  const sel = stmts.length === 1 ? (stmts[0].stmt as Record<string, Record<string, unknown>>)?.SelectStmt : undefined;
  const keys = sel ? Object.keys(sel).filter((k) => !['targetList', 'whereClause', 'limitOption', 'op'].includes(k)) : ['?'];
  if (!sel || keys.length > 0 || !sel.whereClause) throw new RowPredicateError('the row predicate must be one boolean expression (no ;, FROM, GROUP BY, …)');
  const columns = new Set<string>();
  const attributes = new Set<string>();
  const lists = new Set<string>();
  let nodes = 0;
  const walk = (n: unknown): PredicateNode => {
    if (++nodes > MAX_NODES) throw new RowPredicateError(`the row predicate is too large (over ${MAX_NODES} nodes)`);
    const [type, v] = single(n);
    switch (type) {
      case 'ColumnRef': {
        const fields = (v.fields as unknown[]).map((f) => (single(f)[0] === 'String' ? String((single(f)[1] as { sval: string }).sval) : null));
        if (fields.length === 1 && fields[0] !== null) {
          columns.add(fields[0]);
          return { k: 'col', name: fields[0] };
        }
        if (fields.length === 2 && fields[0] === 'identity' && fields[1] !== null) {
          if (!ATTRIBUTE_NAME.test(fields[1])) throw new RowPredicateError(`identity attribute names are lower-case letters, digits and _ (got ${JSON.stringify(fields[1])})`);
          return { k: 'attr', name: fields[1] };
        }
        throw new RowPredicateError('a row predicate names columns of its own table unqualified, and caller attributes as identity.<name>');
      }
      case 'A_Const':
        return { k: 'const', sql: constant(v) };
      case 'A_Expr': {
        const op = opName(v.name);
        if (v.kind === 'AEXPR_OP' && COMPARISONS.has(op) && v.lexpr && v.rexpr) return { k: 'cmp', op: op === '!=' ? '<>' : op, l: scalar(v.lexpr), r: scalar(v.rexpr) };
        if (v.kind === 'AEXPR_OP_ANY' && op === '=') {
          const r = walk(v.rexpr);
          if (r.k !== 'attr') throw new RowPredicateError('= ANY(…) takes an identity attribute holding a list, e.g. region = ANY(identity.regions)');
          lists.add(r.name);
          return { k: 'any', l: scalar(v.lexpr), attr: r.name };
        }
        if (v.kind === 'AEXPR_IN' && (op === '=' || op === '<>')) {
          const items = ((single(v.rexpr)[1] as { items?: unknown[] }).items ?? []).map(scalar);
          return { k: 'in', not: op === '<>', l: scalar(v.lexpr), items };
        }
        throw new RowPredicateError(`operator ${op || v.kind} is not allowed in a row predicate`);
      }
      case 'BoolExpr': {
        const op = v.boolop === 'AND_EXPR' ? 'AND' : v.boolop === 'OR_EXPR' ? 'OR' : 'NOT';
        return { k: 'bool', op, args: (v.args as unknown[]).map(scalar) };
      }
      case 'NullTest':
        return { k: 'null', not: v.nulltesttype === 'IS_NOT_NULL', arg: scalar(v.arg) };
      case 'CoalesceExpr':
        return { k: 'coalesce', args: (v.args as unknown[]).map(scalar) };
      case 'FuncCall': {
        const name = (v.funcname as unknown[]).map((f) => String((single(f)[1] as { sval?: string }).sval));
        const fn = name.length === 1 ? name[0] : name.length === 2 && name[0] === 'pg_catalog' ? name[1] : '';
        const extra = Object.keys(v).filter((k) => !['funcname', 'args', 'funcformat', 'location'].includes(k));
        if (!FUNCTIONS.has(fn) || extra.length > 0) throw new RowPredicateError(`function ${name.join('.')} is not allowed in a row predicate (allowed: lower, upper, btrim, coalesce)`);
        return { k: 'fn', name: fn, args: ((v.args as unknown[]) ?? []).map(scalar) };
      }
      default:
        throw new RowPredicateError(`${describe(type)} is not allowed in a row predicate`);
    }
  };
  /** A value position: an attribute here is used as one value. */
  const scalar = (n: unknown): PredicateNode => {
    const out = walk(n);
    if (out.k === 'attr') attributes.add(out.name);
    return out;
  };
  const tree = walk(sel.whereClause);
  if (tree.k === 'attr' || tree.k === 'col' || tree.k === 'const') throw new RowPredicateError('the row predicate must be a condition (a comparison, IN, IS NULL, AND, OR or NOT), not a bare value');
  return { text, tree, columns: [...columns].sort(), attributes: [...attributes].sort(), listAttributes: [...lists].sort() };
}

function single(n: unknown): [string, Record<string, unknown>] {
  const keys = n && typeof n === 'object' ? Object.keys(n) : [];
  if (keys.length !== 1) throw new RowPredicateError('the row predicate has an unexpected shape');
  return [keys[0], (n as Record<string, Record<string, unknown>>)[keys[0]]];
}

function opName(name: unknown): string {
  const list = Array.isArray(name) ? name : [];
  return list.length === 1 ? String((single(list[0])[1] as { sval?: string }).sval ?? '') : '';
}

function describe(type: string): string {
  const names: Record<string, string> = { SubLink: 'a sub-select', TypeCast: 'a cast', ParamRef: 'a parameter', CaseExpr: 'CASE', A_ArrayExpr: 'an ARRAY constructor', RowExpr: 'a row constructor' };
  return names[type] ?? `the construct ${type}`;
}

/** SQL text of a checked constant (numbers re-checked, strings as E'' literals). */
function constant(v: Record<string, unknown>): string {
  if (v.isnull) return 'NULL';
  if ('ival' in v) return String(Number((v.ival as { ival?: number }).ival ?? 0));
  if ('fval' in v) {
    const f = String((v.fval as { fval?: string }).fval);
    if (!/^-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$/.test(f)) throw new RowPredicateError('numbers in a row predicate must be plain decimals');
    return f;
  }
  if ('boolval' in v) return (v.boolval as { boolval?: boolean }).boolval ? 'true' : 'false';
  if ('sval' in v) return stringLiteral(String((v.sval as { sval?: string }).sval ?? ''));
  throw new RowPredicateError('only numbers, strings, booleans and NULL are constants in a row predicate');
}

/** A string as an escape-string literal, whatever standard_conforming_strings is. */
export function stringLiteral(s: string): string {
  return "E'" + s.replace(/\\/g, '\\\\').replace(/'/g, "''") + "'";
}

/** A quoted SQL identifier. */
export function quoteIdent(s: string): string {
  return '"' + s.replace(/"/g, '""') + '"';
}

/**
 * The type a value bound for a column of `dataType` (format_type text) is cast to: the type
 * without its modifier, so that a long attribute is never truncated to match (`character
 * varying(40)` → `character varying`; `character(n)` → `bpchar`). Null for types a row rule cannot
 * compare with a bound value (bit strings, arrays, anything not plainly named).
 */
export function bindType(dataType: string): string | null {
  const t = dataType.replace(/\(\s*[0-9]+(?:\s*,\s*[0-9]+)?\s*\)/g, '').replace(/\s+/g, ' ').trim();
  if (t === 'character') return 'bpchar';
  if (/^bit( varying)?$/.test(t) || t.endsWith('[]')) return null;
  return /^[a-z_][a-z0-9_ ]*$|^"[^"]+"(?:\."[^"]+")?$|^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$/.test(t) ? t : null;
}

/** Where a rendered predicate gets the types of its table's columns. */
export type ColumnTypes = (column: string) => string | undefined;

/**
 * The schema of the own operator `op` of column `column`'s type (both operands of that type, outside
 * pg_catalog: src/pipeline/row-rules.ts takes it from the scanned catalogue, never from a search
 * path), or null for pg_catalog's.
 */
export type OwnOperator = (column: string, op: string) => string | null;

/** Thrown by renderRowPredicate when the table lacks a column the rule names or has an unusable type. */
export class RowPredicateTableError extends Error {}

/**
 * The built-in types format_type prints as one bare name (its SQL-keyword names, `integer`, `bigint`,
 * `boolean`, `character varying` …, the grammar already reads as pg_catalog's).
 */
const BUILTIN_BARE_TYPES = new Set(['text', 'int2', 'int4', 'int8', 'bool', 'float4', 'float8', 'numeric', 'date', 'time', 'timetz', 'timestamp', 'timestamptz', 'interval', 'uuid', 'json', 'jsonb', 'bpchar', 'varchar', 'name', 'oid', 'bytea', 'inet', 'cidr', 'macaddr', 'macaddr8', 'money', 'xml', 'tsvector', 'tsquery']);

/**
 * `type` (bindType's spelling) with pg_catalog named when it is one of BUILTIN_BARE_TYPES, so the
 * row view's casts resolve no type through the search path of the role that creates the view (red
 * team rt47b J3b); a user type keeps the name format_type printed for the scan's path.
 */
function pinnedType(type: string): string {
  return BUILTIN_BARE_TYPES.has(type) ? `pg_catalog.${type}` : type;
}

/**
 * Renders a checked predicate as SQL for a WHERE clause over its table (columns unqualified), with
 * each `identity.<attr>` as `current_setting('interlock.attr.<attr>', true)` cast to the type of
 * the column it is compared with (text elsewhere; an array of it under `ANY`). Throws
 * RowPredicateTableError for a column the table lacks or a column type that cannot take a bound value.
 * `onBind(attr, type)` is told the type each attribute's value is cast to (the element type for a list
 * under `ANY`), so the caller can check the value before it is bound (attributeFitsType).
 *
 * Operators are pg_catalog's (`OPERATOR(pg_catalog.op)`), except where `ownOperator(column, op)`
 * names the schema of the column type's own `op` (both operands of the column's type, e.g.
 * citext's `=` in the extension's schema, red team rt48d R8: pg_catalog's `=` compared a citext
 * column as text, case-sensitively, and its `<>` let through rows citext's own would not): that
 * operator is named by that schema, `OPERATOR("schema".op)`, whenever both operands are of the
 * column's type — a bound attribute (cast to it), a string constant or NULL (of unknown type), or
 * another column of that type.
 */
export function renderRowPredicate(p: RowPredicate, types: ColumnTypes, onBind?: (attr: string, type: string) => void, ownOperator?: OwnOperator): string {
  const colType = (name: string): string => {
    const dt = types(name);
    if (dt === undefined) throw new RowPredicateTableError(`the table has no column ${JSON.stringify(name)} named by its row rule`);
    const t = bindType(dt);
    if (t === null) throw new RowPredicateTableError(`column ${JSON.stringify(name)} has a type (${dt}) a row rule cannot compare with an attribute`);
    return t;
  };
  const setting = (attr: string, type: string) => `(pg_catalog.current_setting(${stringLiteral(ATTRIBUTE_SETTING_PREFIX + attr)}, true)::${pinnedType(type)})`;
  const typeOf = (n: PredicateNode): string | null => (n.k === 'col' ? colType(n.name) : null);
  /** `OPERATOR(…op)` for a comparison of column `col`'s values with operands of its type (null: none). */
  const operator = (col: string | null, op: string): string => {
    const schema = col !== null && ownOperator ? ownOperator(col, op) : null;
    return `OPERATOR(${schema === null ? 'pg_catalog' : quoteIdent(schema)}.${op})`;
  };
  /** Whether `n`, compared with column `col`, is a value of col's type: an attribute (cast to it), a string or NULL constant, or a column of the same type. */
  const ofType = (n: PredicateNode, col: string): boolean =>
    n.k === 'attr' || (n.k === 'const' && (n.sql === 'NULL' || n.sql.startsWith("E'"))) || (n.k === 'col' && colType(n.name) === colType(col));
  /** The column a comparison's own operator is looked up for: one side a column, the other of its type. */
  const compared = (n: { l: PredicateNode; r: PredicateNode }): string | null =>
    n.l.k === 'col' && ofType(n.r, n.l.name) ? n.l.name : n.r.k === 'col' && ofType(n.l, n.r.name) ? n.r.name : null;
  const r = (n: PredicateNode, ctx: string | null): string => {
    switch (n.k) {
      case 'col':
        colType(n.name);
        return quoteIdent(n.name);
      case 'attr':
        onBind?.(n.name, ctx ?? 'text');
        return setting(n.name, ctx ?? 'text');
      case 'const':
        return n.sql;
      case 'cmp':
        return `(${r(n.l, typeOf(n.r))} ${operator(compared(n), n.op)} ${r(n.r, typeOf(n.l))})`;
      case 'any': {
        const t = typeOf(n.l);
        onBind?.(n.attr, t ?? 'text');
        return `(${r(n.l, null)} ${operator(n.l.k === 'col' ? n.l.name : null, '=')} ANY ((pg_catalog.current_setting(${stringLiteral(LIST_SETTING_PREFIX + n.attr)}, true)::${pinnedType(t ?? 'text')}[])))`;
      }
      case 'in': {
        const t = typeOf(n.l);
        // Not IN (…), whose `=` would be looked up on the search path (red team rt47b J3b). The items
        // are cast to the column's type (an array of it) only when the left side is a column.
        return `(${r(n.l, null)} ${operator(n.l.k === 'col' ? n.l.name : null, n.not ? '<>' : '=')} ${n.not ? 'ALL' : 'ANY'} (ARRAY[${n.items.map((i) => r(i, t)).join(', ')}]${t === null ? '' : `::${pinnedType(t)}[]`}))`;
      }
      case 'bool':
        return n.op === 'NOT' ? `(NOT ${r(n.args[0], null)})` : `(${n.args.map((a) => r(a, null)).join(` ${n.op} `)})`;
      case 'null':
        return `(${r(n.arg, null)} IS ${n.not ? 'NOT ' : ''}NULL)`;
      case 'fn':
        return `pg_catalog.${n.name}(${n.args.map((a) => r(a, null)).join(', ')})`;
      case 'coalesce':
        return `COALESCE(${n.args.map((a) => r(a, null)).join(', ')})`;
    }
  };
  return r(p.tree, null);
}

/** A NUL or an unpaired UTF-16 surrogate: text PostgreSQL cannot hold (neither as text nor in jsonb). */
const UNSTORABLE_TEXT = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/**
 * Whether a JavaScript number is an attribute value: finite, and no larger in magnitude than
 * Number.MAX_SAFE_INTEGER (2^53 − 1). Beyond that a number is not the one its JSON text wrote
 * (JSON.parse rounds 9007199254740993 to 9007199254740992), so binding it would compare another
 * value with the column (red team rt48b finding B1: a token's 64-bit tenant id read another
 * tenant's rows). Such ids must be strings (an IdP's string claim, `"…"` on the CLI or in a file).
 */
export function attributeNumberUsable(value: number): boolean {
  return Number.isFinite(value) && Math.abs(value) <= Number.MAX_SAFE_INTEGER;
}

/**
 * The text bound to `interlock.attr.<attr>` for an attribute value used as one value: a string as
 * is, a number (attributeNumberUsable) or a boolean as PostgreSQL reads it. Null (the caller lacks
 * the attribute) for anything else: null, an object, a list, a number beyond ±(2^53 − 1) (rounded
 * when it was parsed: rt48b B1), and a string with a NUL or an unpaired surrogate
 * (red team rt27m finding 4: such a token claim failed the queueing of a write with
 * `tool_execution_failed` when the control database refused to store it, instead of the
 * `row_rule_attribute_missing` refusal; PostgreSQL could not bind it either).
 */
export function attributeText(value: unknown): string | null {
  if (typeof value === 'string') return UNSTORABLE_TEXT.test(value) ? null : value;
  return typeof value === 'number' && attributeNumberUsable(value) ? String(value) : typeof value === 'boolean' ? String(value) : null;
}

/**
 * The text bound to `interlock.attrs.<attr>` for an attribute used as a list under `= ANY(…)`: an
 * array literal with every element quoted (a single value counts as a one-element list). Null
 * when an element is not a string, finite number or boolean, or the value is null or an object.
 */
export function attributeListText(value: unknown): string | null {
  const items = (Array.isArray(value) ? value : [value]).map(attributeText);
  if (items.some((i) => i === null)) return null;
  return '{' + items.map((i) => '"' + i!.replace(/\\/g, '\\\\').replace(/"/g, '\\"') + '"').join(',') + '}';
}

const INTEGER_RANGES: Record<string, readonly [bigint, bigint]> = {
  smallint: [-32768n, 32767n],
  int2: [-32768n, 32767n],
  integer: [-2147483648n, 2147483647n],
  int4: [-2147483648n, 2147483647n],
  bigint: [-9223372036854775808n, 9223372036854775807n],
  int8: [-9223372036854775808n, 9223372036854775807n],
};

/**
 * Whether an attribute value (a scalar, or each element of a list) can be cast to `type` as
 * PostgreSQL's input function would take it, for the types whose input is simple to decide here:
 * the integer types (digits, in range), `numeric`, `boolean` and `uuid`. Any other type answers
 * true (the server decides). An operator's value of the wrong type then refuses the caller with
 * `row_rule_attribute_missing` instead of failing the agent's statement (issue 27).
 */
export function attributeFitsType(value: unknown, type: string): boolean {
  const items = Array.isArray(value) ? value : [value];
  return items.every((v) => {
    const text = attributeText(v);
    if (text === null) return false;
    // What PostgreSQL's integer, numeric and boolean inputs skip (C isspace): ASCII white space only.
    // JavaScript's trim() also removes U+00A0, U+FEFF, U+2003 …, which the server refuses, so such a
    // value failed the agent's statement (22P02) instead of refusing the caller (red team rt48b B3).
    const t = text.replace(/^[ \t\n\v\f\r]+|[ \t\n\v\f\r]+$/g, '');
    const range = INTEGER_RANGES[type];
    if (range) {
      if (!/^[+-]?[0-9]+$/.test(t)) return false;
      const n = BigInt(t);
      return n >= range[0] && n <= range[1];
    }
    if (type === 'numeric') return /^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$/.test(t) || /^[+-]?(?:nan|infinity|inf)$/i.test(t);
    if (type === 'boolean') return /^(?:t|tr|tru|true|f|fa|fal|fals|false|y|ye|yes|n|no|on|of|off|1|0)$/i.test(t) && !/^o$/i.test(t);
    // uuid's input skips no white space at all.
    if (type === 'uuid') return /^\{?[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\}?$/i.test(text);
    return true;
  });
}
