/**
 * Names pinned to pg_catalog in the statements InterLock itself sends on source connections (red
 * team rt47b J3b). Those statements run on the connection role's own search_path, where an insider
 * with CREATE on a schema of that path (public) may create a better-matching operator
 * (`public.= (oid, integer)` beats pg_catalog's `= (oid, oid)` for `typrelid = 0`: CVE-2018-1058's
 * pattern), a type (a domain `public.text`, used for `::text` once the path names pg_catalog after
 * public), a function, a collation or a table: it would run as the reader during every scan, or as
 * the writer during an approved write's guard, and could forge the catalogue facts read. Setting
 * search_path to pg_catalog for these statements is not an option: format_type and pg_get_viewdef
 * print names relative to the path, and the catalogue records that output.
 *
 * So the statements are written readably (`c.relkind = 'r'`, `x::oid`) and qualifySql rewrites the
 * text once, with PostgreSQL's own parser (libpg-query: each node's `location`, and its scanner's
 * tokens): every binary and prefix operator becomes `OPERATOR(pg_catalog.op)` (also `= ANY (…)`), an
 * `x IN (SELECT …)` becomes `x OPERATOR(pg_catalog.=) ANY (SELECT …)`, and `pg_catalog.` is put before
 * every one-part type name, function name, collation and relation (not a CTE of the statement). It
 * then parses its result and requires the same parse tree as the input with exactly those names
 * qualified (a rewritten operator takes the precedence of a generic operator, so `a = b || c` would
 * change meaning: the source must parenthesise such an operand, and this check says so), and that
 * unqualifiedNames finds nothing left. The constructs that look an operator up by name and have no
 * qualified spelling — `x IN (list)`, `NOT IN`, LIKE / ILIKE / SIMILAR TO, BETWEEN, NULLIF,
 * IS [NOT] DISTINCT FROM, `CASE x WHEN`, JOIN … USING, NATURAL JOIN, `NOT IN (SELECT …)`,
 * `ORDER BY … USING` — are refused: write them by hand (`= ANY (ARRAY[…]::"char"[])`,
 * `<> ALL (…)`, `~~` / `!~~`, `coalesce(a <> b, (a IS NULL) <> (b IS NULL))`, …).
 *
 * Small constant statements (a set_config, a BEGIN) are qualified by hand in their own text
 * (OPERATOR(pg_catalog.=), ::pg_catalog.text), where the one-statement test keeps their text constant.
 */
import { loadModule, parseSync, scanSync } from 'libpg-query';

let ready = false;

/** Loads the parser's WASM module (idempotent; the same module src/sql/parser.ts loads). qualifySql needs it. */
export async function loadSqlQualifier(): Promise<void> {
  if (ready) return;
  await loadModule();
  ready = true;
}

type Node = Record<string, unknown>;
interface Edit {
  at: number;
  end: number;
  text: string;
}

/** Operator kinds of A_Expr that have a qualified spelling (`a OPERATOR(s.op) b`, `a OPERATOR(s.op) ANY (…)`). */
const OPERATOR_KINDS = new Set(['AEXPR_OP', 'AEXPR_OP_ANY', 'AEXPR_OP_ALL']);

/**
 * The object-identifier types whose text input resolves a one-part name through the search path
 * (`'pg_class'::regclass`); regnamespace and regrole name schemas and roles, which no path qualifies.
 */
const PATH_INPUT_TYPES = new Set(['regclass', 'regtype', 'regproc', 'regprocedure', 'regoper', 'regoperator', 'regcollation', 'regconfig', 'regdictionary']);

const strs = (list: unknown): string[] => (Array.isArray(list) ? list.map((n) => ((n as { String?: { sval?: string } }).String?.sval ?? '')) : []);

/** Every CTE name any WITH of `tree` defines (a RangeVar naming one is not a catalogue relation). */
function cteNames(tree: unknown): Set<string> {
  const names = new Set<string>();
  const walk = (n: unknown): void => {
    if (Array.isArray(n)) return n.forEach(walk);
    if (!n || typeof n !== 'object') return;
    const cte = (n as { CommonTableExpr?: { ctename?: string } }).CommonTableExpr;
    if (cte?.ctename) names.add(cte.ctename);
    Object.values(n).forEach(walk);
  };
  walk(tree);
  return names;
}

/**
 * The node type of a field libpg-query's JSON holds unwrapped (a field of one node type, not `Node`):
 * TypeCast's, ColumnDef's and CreateDomainStmt's `typeName`, a statement's target `relation`, a
 * ViewStmt's `view`, an IntoClause's `rel`. Other nodes come wrapped: `{ "A_Expr": {…} }`.
 */
const UNWRAPPED: Record<string, string> = { typeName: 'TypeName', relation: 'RangeVar', view: 'RangeVar', rel: 'RangeVar' };

/** The node type of `value` found under key `k`: the wrapper key itself (`A_Expr`), or UNWRAPPED's type of a field; null otherwise. */
const nodeKind = (k: string, value: unknown): string | null =>
  value && typeof value === 'object' && !Array.isArray(value) ? (/^[A-Z]/.test(k) ? k : (UNWRAPPED[k] ?? null)) : null;

/** Calls `visit(kind, node)` for every node of `tree` (kind: its type, e.g. `A_Expr`, `TypeName`). */
function eachNode(tree: unknown, visit: (kind: string, node: Node) => void): void {
  const walk = (n: unknown): void => {
    if (Array.isArray(n)) return n.forEach(walk);
    if (!n || typeof n !== 'object') return;
    for (const [k, v] of Object.entries(n as Node)) {
      const kind = nodeKind(k, v);
      if (kind !== null) visit(kind, v as Node);
      // An option's value (`WITH (check_option = cascaded)`) parses as a TypeName: a word, not a type.
      if (kind === 'DefElem' && (v as { arg?: { TypeName?: unknown } }).arg?.TypeName) walk({ ...(v as Node), arg: undefined });
      else walk(v);
    }
  };
  walk(tree);
}

/**
 * What in `sql` still resolves an operator, type, function, collation or relation through the
 * search_path, as one line each (`kind name @offset`); empty when nothing does. The parse-tree check
 * of red team rt47b J3b (test/unit/sources/qualified-statements.test.ts runs it over every statement
 * InterLock sends on a source connection): an A_Expr that is not an operator with a qualified name
 * (IN lists, LIKE, BETWEEN, NULLIF, IS DISTINCT FROM, …), a CaseExpr with an argument, a JoinExpr
 * with USING or NATURAL, an ANY/ALL/row-comparison SubLink without a qualified operator, a TypeName,
 * FuncCall or CollateClause of one part, a RangeVar without a schema that names no CTE of the
 * statement, an ORDER BY … USING operator of one part, a string of a one-part name cast to regclass,
 * regtype, regproc, regoper, … (its text input resolves it on the path: red team rt48c K2). Throws the parser's error for text that does
 * not parse. Requires loadSqlQualifier (or src/sql/parser's initSqlParser).
 */
export function unqualifiedNames(sql: string): string[] {
  const tree = parseSync(sql);
  const ctes = cteNames(tree);
  const found: string[] = [];
  const at = (n: Node) => `@${typeof n.location === 'number' ? n.location : '?'}`;
  eachNode(tree, (kind, n) => {
    switch (kind) {
      case 'A_Expr': {
        const name = strs(n.name);
        if (!OPERATOR_KINDS.has(String(n.kind)) || name.length < 2) found.push(`operator ${String(n.kind)} ${name.join('.')} ${at(n)}`);
        break;
      }
      case 'CaseExpr':
        if (n.arg) found.push(`CASE x WHEN ${at(n)}`);
        break;
      case 'JoinExpr':
        if (n.usingClause || n.isNatural) found.push(`JOIN USING/NATURAL ${at(n)}`);
        break;
      case 'SubLink': {
        const t = String(n.subLinkType);
        if ((t === 'ANY_SUBLINK' || t === 'ALL_SUBLINK' || t === 'ROWCOMPARE_SUBLINK') && strs(n.operName).length < 2) found.push(`sublink ${t} ${strs(n.operName).join('.') || 'IN'} ${at(n)}`);
        break;
      }
      case 'TypeName':
        if (strs(n.names).length < 2) found.push(`type ${strs(n.names).join('.')} ${at(n)}`);
        break;
      case 'FuncCall':
        if (strs(n.funcname).length < 2) found.push(`function ${strs(n.funcname).join('.')} ${at(n)}`);
        break;
      case 'CollateClause':
        if (strs(n.collname).length < 2) found.push(`collation ${strs(n.collname).join('.')} ${at(n)}`);
        break;
      case 'RangeVar':
        if (!n.schemaname && !ctes.has(String(n.relname))) found.push(`relation ${String(n.relname)} ${at(n)}`);
        break;
      case 'SortBy':
        if (n.useOp && strs(n.useOp).length < 2) found.push(`ORDER BY USING ${strs(n.useOp).join('.')} ${at(n)}`);
        break;
      case 'TypeCast': {
        // `'pg_class'::regclass`: the text input looks the name up on the search path (red team rt48c K2).
        const type = strs((n.typeName as Node | undefined)?.names).at(-1) ?? '';
        const text = (n.arg as { A_Const?: { sval?: { sval?: string } } } | undefined)?.A_Const?.sval?.sval;
        if (PATH_INPUT_TYPES.has(type) && typeof text === 'string' && !text.includes('.')) found.push(`${type} input '${text}' ${at(n)}`);
        break;
      }
    }
  });
  return found;
}

/** The keys of a parse tree that hold offsets into the text (PostgreSQL 18 adds list starts and ends). */
const LOCATION_KEYS = new Set(['location', 'stmt_location', 'stmt_len', 'list_start', 'list_end', 'rexpr_list_start', 'rexpr_list_end']);

/** The tree without locations, with the names qualifySql qualifies already qualified when `expect` (the tree its output must parse to). */
function normalised(tree: unknown, ctes: Set<string>, expect: boolean): unknown {
  const q = (list: unknown): unknown => (Array.isArray(list) && list.length === 1 ? [{ String: { sval: 'pg_catalog' } }, ...list] : list);
  const walk = (n: unknown, kind: string | null, plain: boolean): unknown => {
    if (Array.isArray(n)) return n.map((x) => walk(x, null, plain));
    if (!n || typeof n !== 'object') return n;
    const out: Node = {};
    for (const [k, v] of Object.entries(n as Node)) {
      if (LOCATION_KEYS.has(k)) continue;
      // An option's value is a word, not a type (as eachNode).
      out[k] = walk(v, nodeKind(k, v), plain || (kind === 'DefElem' && k === 'arg'));
    }
    if (!expect || plain) return out;
    if (kind === 'A_Expr' && OPERATOR_KINDS.has(String(out.kind))) out.name = q(out.name);
    if (kind === 'SubLink' && (out.subLinkType === 'ANY_SUBLINK' || out.subLinkType === 'ALL_SUBLINK')) out.operName = out.operName === undefined ? q([{ String: { sval: '=' } }]) : q(out.operName);
    if (kind === 'TypeName') out.names = q(out.names);
    if (kind === 'FuncCall') out.funcname = q(out.funcname);
    if (kind === 'CollateClause') out.collname = q(out.collname);
    if (kind === 'RangeVar' && !out.schemaname && !ctes.has(String(out.relname))) out.schemaname = 'pg_catalog';
    return out;
  };
  return walk(tree, null, false);
}

/** The path (keys, indexes) to the first place where `a` and `b` differ; null when they are equal. */
function difference(a: unknown, b: unknown): Array<string | number> | null {
  if (a === b) return null;
  if (!a || !b || typeof a !== 'object' || typeof b !== 'object' || Array.isArray(a) !== Array.isArray(b)) return [];
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  for (const k of keys) {
    const d = difference((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]);
    if (d !== null) return [Array.isArray(a) ? Number(k) : k, ...d];
  }
  return null;
}

/** Qualified texts per input text (statements are few and made once; at most 2,048 kept). */
const cache = new Map<string, string>();

/**
 * `sql` with every operator, type, function, collation and relation it names pinned to pg_catalog
 * (see the module comment): same statement, same rows, whatever the role's search_path. Cached per
 * text. Throws an Error naming what it could not qualify (a construct without a qualified spelling,
 * or an operand whose grouping the rewrite would change) — a fault of InterLock's own statement,
 * found by the tests that run it. Requires loadSqlQualifier (or initSqlParser) to have resolved.
 */
export function qualifySql(sql: string): string {
  const hit = cache.get(sql);
  if (hit !== undefined) return hit;
  const tree = parseSync(sql);
  const ctes = cteNames(tree);
  const tokens = scanSync(sql).tokens;
  const tokenAt = new Map(tokens.map((t, i) => [t.start, i]));
  const token = (loc: unknown) => {
    const i = typeof loc === 'number' ? tokenAt.get(loc) : undefined;
    if (i === undefined) throw new Error(`qualifySql: no token at ${String(loc)}`);
    return { i, t: tokens[i] };
  };
  const edits: Edit[] = [];
  const prefix = (loc: unknown) => edits.push({ at: Number(loc), end: Number(loc), text: 'pg_catalog.' });
  eachNode(tree, (kind, n) => {
    if (kind === 'A_Expr' && OPERATOR_KINDS.has(String(n.kind)) && strs(n.name).length === 1) {
      const { t } = token(n.location);
      edits.push({ at: t.start, end: t.end, text: `OPERATOR(pg_catalog.${strs(n.name)[0]})` });
    } else if (kind === 'SubLink' && (n.subLinkType === 'ANY_SUBLINK' || n.subLinkType === 'ALL_SUBLINK') && strs(n.operName).length < 2) {
      const { t } = token(n.location);
      if (strs(n.operName).length === 1) edits.push({ at: t.start, end: t.end, text: `OPERATOR(pg_catalog.${strs(n.operName)[0]})` });
      else if (t.text.toUpperCase() === 'IN') edits.push({ at: t.start, end: t.end, text: 'OPERATOR(pg_catalog.=) ANY' });
      // NOT IN (SELECT …): left for unqualifiedNames to name (write `<> ALL (SELECT …)`).
    } else if (kind === 'TypeName' && strs(n.names).length === 1) prefix(token(n.location).t.start);
    else if (kind === 'FuncCall' && strs(n.funcname).length === 1) {
      // unnest(a, b) in FROM is the grammar's ROWS FROM (unnest(a), unnest(b)) only unqualified.
      if (strs(n.funcname)[0] === 'unnest' && Array.isArray(n.args) && n.args.length > 1) throw new Error('qualifySql: write ROWS FROM (unnest(a), unnest(b)) for unnest(a, b)');
      prefix(token(n.location).t.start);
    } else if (kind === 'RangeVar' && !n.schemaname && !ctes.has(String(n.relname))) prefix(token(n.location).t.start);
    else if (kind === 'CollateClause' && strs(n.collname).length === 1) {
      const { i } = token(n.location); // the COLLATE keyword; the name is the next token
      prefix(tokens[i + 1].start);
    }
  });
  // The parser's locations are byte offsets into the UTF-8 text (the statements' comments hold `…`, `—`).
  edits.sort((a, b) => a.at - b.at);
  const bytes = Buffer.from(sql, 'utf8');
  const pieces: Buffer[] = [];
  let done = 0;
  for (const e of edits) {
    if (e.at < done) throw new Error(`qualifySql: overlapping rewrites at ${e.at}`);
    pieces.push(bytes.subarray(done, e.at), Buffer.from(e.text, 'utf8'));
    done = e.end;
  }
  pieces.push(bytes.subarray(done));
  const out = Buffer.concat(pieces).toString('utf8');
  const left = unqualifiedNames(out);
  if (left.length > 0) throw new Error(`qualifySql: no qualified spelling for ${left.join(', ')} (offsets in the qualified text)`);
  const path = difference(normalised(tree, ctes, true), normalised(parseSync(out), ctes, false));
  if (path !== null) {
    // The deepest node on the differing path that has a location: where the source needs parentheses.
    let n: unknown = tree;
    let at = -1;
    for (const k of path) {
      n = (n as Record<string, unknown>)?.[k];
      const loc = (n as { location?: unknown } | undefined)?.location;
      if (typeof loc === 'number') at = loc;
    }
    const near = at < 0 ? '' : ` near "${Buffer.from(sql, 'utf8').subarray(Math.max(0, at - 40), at + 40).toString('utf8').replace(/\s+/g, ' ')}"`;
    throw new Error(`qualifySql: the qualified text parses to another statement (an operand of a rewritten operator needs parentheses)${near}`);
  }
  if (cache.size < 2048) cache.set(sql, out);
  return out;
}
