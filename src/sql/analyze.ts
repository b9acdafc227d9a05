/**
 * SQL analysis for `interlock_query` (sql-safety.md layers 1–3 and class 6).
 *
 * `analyzeSql(sql, catalog)` decides, before anything runs, whether a statement is a read, a write,
 * or refused, and reports everything authorization and redaction need: every relation and column
 * touched, write targets, functions, output-column lineage, filter columns, and every column whose
 * value is used other than as a top-level passthrough output (`nonOutputUses`, `countUses`).
 *
 * What is refused (see `RefusalCode`):
 * - NUL bytes, lone UTF-16 surrogates, empty input, input over `maxLength`, syntax errors, nesting
 *   deeper than the walker allows, `$n` above 65535, numeric literals that are not plain decimal
 *   (`0x1F`, `0o17`, `0b1`, `1_000`: PostgreSQL 15 and older read them differently) → `invalid_sql`.
 * - Statements over the source's complexity limits (CTEs, range-table entries, join and subquery
 *   depth, set-operation arms, parse-tree nodes: complexity.ts), checked on the parse tree before
 *   the walk, and statements whose analysis would exceed the work budget (`WORK_BUDGET` steps:
 *   nodes visited, columns listed or scanned, lineage entries merged) → `statement_too_complex`. Every node is walked once (recursive terms too), so legitimate statements
 *   stay far below it; the budget caps the synchronous walk of any input (5–25 ms warm on the
 *   development machine, several times that cold or under heavy load; parsing is separate).
 * - More than one statement; any top-level statement other than SELECT/VALUES/TABLE, INSERT,
 *   UPDATE, DELETE, MERGE or EXPLAIN (without ANALYZE, of a read); SELECT INTO; FOR UPDATE/SHARE/
 *   NO KEY UPDATE/KEY SHARE anywhere; WHERE CURRENT OF; XMLTABLE/JSON_TABLE; RETURNING WITH (...);
 *   any parse-tree node or field the walker does not know → `statement_not_allowed` (fail closed).
 * - Built-in functions (`pg_catalog`, `information_schema`) that the classification of every
 *   pg_proc row refuses or does not classify (builtin-functions/, docs/function-policy.md), the
 *   `regconfig` form of text-search functions without a constant built-in configuration name,
 *   casts to transaction-id, snapshot, tuple-id and WAL-position types,
 *   deny-listed functions (any schema, any case; see function-policy.ts), volatile functions other
 *   than a few harmless built-ins (random(), gen_random_uuid(), clock_timestamp(), …), unknown
 *   functions, any same-named volatile candidate on the search path, operators whose resolved
 *   implementation is volatile or unknown (operators.ts, issue 22 item 5: each use, in every form —
 *   IN lists and sub-selects, = ANY/ALL, simple CASE, NULLIF, IS DISTINCT FROM, BETWEEN, row
 *   comparisons, JOIN ON/USING/NATURAL, ORDER BY USING, MERGE ON — is resolved by its operand types
 *   as PostgreSQL's lookup does; when the choice cannot be proven and a volatile candidate is
 *   reachable, refused; catalogues without resolution rows judge operators by name), TABLESAMPLE methods other than BERNOULLI/SYSTEM, casts to
 *   types that run user code (domains with CHECK constraints), allocation-sized built-ins
 *   (`generate_series` in every form, `repeat`, `lpad`/`rpad`, `array_fill`, `bit`, `bpchar`, and
 *   `bit(n)`/`char(n)` type modifiers: builtin-functions/sizing.ts, issue 22 item 4) with constant
 *   sizes over 10 million rows, characters, bits or elements, casts to object-identifier types (`regclass`,
 *   `regtype`, `regproc`, … and `aclitem`: they look names up in the system catalogues), SQL value
 *   functions naming the connection (`CURRENT_USER`, `SESSION_USER`, `USER`, `CURRENT_ROLE`,
 *   `CURRENT_CATALOG`, `CURRENT_SCHEMA`), `current_setting` except for a constant name in
 *   `SAFE_SETTINGS` → `function_not_allowed`.
 * - Relations that are not in the catalogue, system catalogues included (also when an unqualified
 *   name would resolve to `pg_catalog` first) → `unknown_relation`.
 * - Columns no FROM item in scope has (system columns such as `ctid` included) → `unknown_column`.
 *
 * Residual risks (for the execution layer: read-only transaction, least-privilege role, timeouts,
 * row and byte caps, opaque error messages):
 * - View bodies are expanded for lineage only (src/sql/views.ts: masks and denies follow base
 *   columns; unprovable lineage fails closed), not checked against the function policy: the
 *   operator's definition runs as written.
 * - Code reached only implicitly is not inspected: RLS policies, operators of
 *   user-defined types when the catalogue has no operator list, equality and ordering taken from a
 *   type's default operator class rather than by operator name (DISTINCT, GROUP BY, UNION, ORDER BY
 *   without USING, record comparisons of composite values), domain coercions of arguments to
 *   user functions, column defaults and triggers of writes.
 * - User-defined stable functions are allowed by the analyser; what their bodies may read is not in
 *   `reads` but in `functionReads` (task hfn, function-reads.ts: every column of every relation a
 *   SQL body names, following the functions it calls; `opaque` when the body cannot be analysed),
 *   which pipeline steps 3 and 4 check and the audit records. `functions` lists them too.
 * - A relation's row type used as a type (`NULL::employee`) counts as reading all its columns; a
 *   type name that exists nowhere is `unknown_relation` (type-names.ts), so both answer alike. Only
 *   catalogues without a type list (snapshots scanned before `types` existed) skip that check.
 * - Built-in functions follow the classification of every pg_proc row (builtin-functions/,
 *   docs/function-policy.md); the analyser decides per name, so a few reviewed names are allowed
 *   although an overload is refused (`MIXED_ALLOWED`): e.g. `age(xid)` is reachable only through a
 *   granted column of type `xid`.
 * - Resource exhaustion beyond the obvious constants (`generate_series(1, n)` with n from a table,
 *   nested `repeat`, cross joins, unbounded recursive CTEs) is classified as a read (the work
 *   budget bounds the analysis, not the execution).
 * - Error messages can carry values (`CAST(email AS int)` fails with the email in the message); the
 *   execution layer must never forward driver error text.
 * - Values can leak by inference through any use other than output (predicates, function
 *   arguments, set operations, …): `nonOutputUses` lists them all so that policy can refuse masked
 *   columns there. EXPLAIN output shows view definitions and filter constants of the plan.
 * - libpg-query 18 parses syntax a PostgreSQL 15 server rejects (and, rarely, the reverse, e.g.
 *   `WITH /* c *\/ ORDINALITY`); either way the mismatch ends in a refusal or a server error. The
 *   one known difference that changes meaning on older servers (non-decimal and `_`-separated
 *   numeric literals) is refused.
 */
import { createHash } from 'node:crypto';
import type { SourceCatalog } from './catalog-types';
import { analyzeStatement, createWalkState, Refusal, statementName, typeCodeRuns, typeUses, viewUserFunctions, WORK_BUDGET, workUsed } from './analyzer';
import { complexityRefusal, DEFAULT_COMPLEXITY_LIMITS, measureComplexity, type ComplexityLimits } from './complexity';
import { isAnyColumn, isPlaceholder } from './lineage';
import { PreparedCatalog, prepareCatalog } from './prepared-catalog';
import { fingerprintSql, initSqlParser as loadParser, parseSql, scanSql, SqlParseFailure } from './parser';
import { builtinFunctionDecision } from './builtin-functions/classes';
import type { ColumnRef, OutputColumn, SqlAnalysis, SqlAnalysisOk } from './types';

export { WORK_BUDGET } from './analyzer';
export { complexityLimitsFromSettings, DEFAULT_COMPLEXITY_LIMITS } from './complexity';
export type { ComplexityLimits } from './complexity';

/**
 * Loads the parser's WASM (idempotent) and builds the built-in function policy (about 0.1–0.4 s
 * once per process), so that neither happens on an agent's first call.
 */
export async function initSqlParser(): Promise<void> {
  await loadParser();
  builtinFunctionDecision('pg_catalog', 'abs');
}
export { prepareCatalog } from './prepared-catalog';
export type { PreparedCatalog } from './prepared-catalog';
export type {
  ColumnRef,
  FunctionUse,
  OutputColumn,
  ReadAccess,
  RefusalCode,
  SqlAnalysis,
  SqlAnalysisOk,
  SqlRefusal,
  WriteAccess,
} from './types';

/**
 * Default upper bound on statement length, in UTF-16 code units: the `sql` limit of the MCP tool
 * and HTTP API schemas. Parsing is linear but not free (0.5–2 ms per KB on this machine, more
 * on a busy one), so the limit also bounds the synchronous parse time.
 */
export const DEFAULT_MAX_SQL_LENGTH = 100_000;

/** Options of `analyzeSql`. */
export interface AnalyzeOptions {
  /** Longer statements are refused as `invalid_sql` (default `DEFAULT_MAX_SQL_LENGTH`). */
  maxLength?: number;
  /**
   * Work budget of the walk in steps (default `WORK_BUDGET`); above it the statement is refused
   * as `statement_not_allowed` ("statement too complex to analyse"). For tests and tuning.
   */
  workBudget?: number;
  /**
   * Complexity bounds checked on the parse tree before the walk (default
   * `DEFAULT_COMPLEXITY_LIMITS`; a source's own come from `complexityLimitsFromSettings`). Above
   * any of them the statement is refused as `statement_too_complex` (issue 10, Build 3).
   */
  complexity?: ComplexityLimits;
  /**
   * Called once with the walk's work in steps (see `workBudget`) when the statement reached the
   * walker, whether it was then accepted or refused there. For tests and tuning: the golden
   * analyses (scripts/analysis-golden.ts) pin it so a refactor of the walker is shown to do the
   * same work.
   */
  onWork?: (steps: number) => void;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** The wire protocol's limit on bind parameters; `$n` above it cannot be executed. */
const MAX_PARAMS = 65_535;

const TOP_ALLOWED = new Set(['SelectStmt', 'InsertStmt', 'UpdateStmt', 'DeleteStmt', 'MergeStmt', 'ExplainStmt']);

/**
 * Analyses one SQL statement against a source catalogue (raw or prepared with `prepareCatalog`).
 *
 * Returns `{ ok: true, kind, statement, reads, writes, functions, outputs, filterSources,
 * nonOutputUses, countUses, cacheable, fingerprint, paramCount }` for an allowed read or write, or `{ ok: false, code, message }` for a
 * refusal (codes and rules in the module comment and `RefusalCode`). Never throws for bad SQL; throws
 * `Error` only when `initSqlParser()` has not completed. Synchronous; about 30–100 µs for typical
 * statements after warm-up.
 *
 * Implements sql-safety.md layer 1 (NUL rejection, one statement, whole-tree walk, bare DML targets,
 * per-scope CTE names), layer 2 (read/write/refused classification), layer 3 (function policy),
 * and the analysis half of class 6 (lineage for redaction, filter and other non-output uses).
 */
export function analyzeSql(sql: string, catalog: SourceCatalog | PreparedCatalog, opts?: AnalyzeOptions): SqlAnalysis {
  if (typeof sql !== 'string') return refuse('invalid_sql', 'SQL must be a string');
  if (sql.includes('\u0000')) return refuse('invalid_sql', 'SQL must not contain NUL bytes');
  // A lone UTF-16 surrogate is encoded differently by the parser and by the driver: refuse it so
  // that what is analysed is byte for byte what the server receives.
  if (LONE_SURROGATE.test(sql)) return refuse('invalid_sql', 'SQL must be valid Unicode');
  const max = opts?.maxLength ?? DEFAULT_MAX_SQL_LENGTH;
  if (sql.length > max) return refuse('invalid_sql', `SQL is longer than ${max} characters`);
  if (sql.trim() === '') return refuse('invalid_sql', 'SQL is empty');
  let parsed;
  try {
    parsed = parseSql(sql);
    const literal = divergentNumericLiteral(sql);
    if (literal) return refuse('invalid_sql', literal);
  } catch (err) {
    if (err instanceof SqlParseFailure) return refuse('invalid_sql', err.message);
    throw err;
  }
  const stmts = parsed.stmts ?? [];
  if (stmts.length === 0) return refuse('invalid_sql', 'SQL contains no statement');
  if (stmts.length > 1) return refuse('statement_not_allowed', `exactly one statement is allowed (found ${stmts.length})`);
  const stmt = stmts[0].stmt;
  if (!stmt) return refuse('invalid_sql', 'SQL contains no statement');
  const keys = Object.keys(stmt);
  if (keys.length !== 1) return refuse('statement_not_allowed', 'malformed parse tree');
  const type = keys[0];
  if (!TOP_ALLOWED.has(type)) return refuse('statement_not_allowed', `${statementName(type)} statements are not allowed`);

  const limits = opts?.complexity ?? DEFAULT_COMPLEXITY_LIMITS;
  const tooComplex = complexityRefusal(measureComplexity(stmt, limits.maxParseTreeNodes), limits);
  if (tooComplex) return refuse('statement_too_complex', tooComplex);

  const cat = prepareCatalog(catalog);
  const a = createWalkState(cat, opts?.workBudget ?? WORK_BUDGET);
  let outs;
  try {
    outs = analyzeStatement(a, type, stmt[type] as Record<string, unknown>);
    typeCodeRuns(a);
    viewUserFunctions(a);
    typeUses(a);
  } catch (err) {
    if (err instanceof Refusal) {
      opts?.onWork?.(workUsed(a));
      return refuse(err.code, err.message);
    }
    if (err instanceof RangeError) return refuse('invalid_sql', 'statement nests too deeply');
    throw err;
  }
  opts?.onWork?.(workUsed(a));
  if (a.maxParam > MAX_PARAMS) return refuse('invalid_sql', `parameter numbers above $${MAX_PARAMS} are not allowed`);
  const reads = [...a.reads.values()].map(({ rel, cols }) => ({
    schema: rel.schema,
    table: rel.name,
    columns: rel.columnNames.filter((c) => cols.has(c)),
  }));
  // `ANY_COLUMN` (a view column with unprovable lineage, views.ts) becomes the `unprovable` flags.
  const outputs: OutputColumn[] = outs.cols.map((o) => {
    const all = o.lin.src ? [...o.lin.src.values()] : [];
    const sources = all.filter((c) => !isAnyColumn(c)).map((c) => ({ ...c }));
    const allRels = o.lin.opq ? [...o.lin.opq.values()] : [];
    const rels = allRels.filter((r) => !isAnyColumn(r as ColumnRef)).map((r) => ({ schema: r.schema, table: r.table }));
    const unprovable = sources.length !== all.length || rels.length !== allRels.length;
    const out: OutputColumn = { name: o.name, sources, passthrough: o.lin.pass && !unprovable && sources.length > 0, opaque: rels.length > 0 || unprovable, opaqueRelations: rels };
    if (unprovable) out.unprovable = true;
    return out;
  });
  let unprovableUses = false;
  const columns = (m: Map<string, ColumnRef>): ColumnRef[] => {
    const list: ColumnRef[] = [];
    for (const c of m.values()) {
      if (isAnyColumn(c)) unprovableUses = true;
      else list.push({ ...c });
    }
    return list;
  };
  const filterSources = columns(a.filter);
  const nonOutputUses = columns(a.nonOutput);
  const countUses = columns(a.countUses);
  const viewSources = [...a.viewSources.values()].map((c) => ({ ...c }));
  // Internal invariant: recursive-item placeholders never leave the walker. Fail closed if one did.
  const leaked =
    outputs.some((o) => o.sources.some((c) => isPlaceholder(c)) || o.opaqueRelations.some((r) => isPlaceholder(r))) ||
    [...filterSources, ...nonOutputUses, ...countUses].some((c) => isPlaceholder(c));
  if (leaked) return refuse('statement_too_complex', 'statement too complex to analyse (unresolved recursive query)');
  const result = {
    ok: true,
    kind: a.hasWrite ? 'write' : 'read',
    statement: type,
    reads,
    writes: a.writes,
    functions: [...a.functions.values()],
    outputs,
    filterSources,
    nonOutputUses,
    countUses,
    viewSources,
    viewUnprovable: a.viewUnprovable,
    unprovableUses,
    cacheable: a.cacheable && !a.hasWrite,
    // Present only when true, so stored analyses (the golden file) stay as they were.
    ...(a.userOperator ? { userOperators: true } : {}),
    ...(a.functionReads.size ? { functionReads: [...a.functionReads.values()] } : {}),
    ...(a.userFunctions.size ? { userFunctions: [...a.userFunctions.values()].sort((x, y) => (x.schema + '.' + x.name).localeCompare(y.schema + '.' + y.name)) } : {}),
    ...(a.typeOids.size || a.typeNames.size
      ? { typeUses: { oids: [...a.typeOids].sort((x, y) => x - y), names: bySchemaName(a.typeNames) } }
      : {}),
    ...(a.rowShapes.size ? { rowShapes: [...a.rowShapes.values()].sort((x, y) => (x.schema + '.' + x.name).localeCompare(y.schema + '.' + y.name)) } : {}),
    ...(a.functionNames.size || a.operatorNames.size || a.qualifiedFunctionNames.size || a.qualifiedOperatorNames.size
      ? {
          resolvedNames: {
            functions: [...a.functionNames].sort(),
            operators: [...a.operatorNames].sort(),
            // Present only when not empty, so stored analyses without qualified names stay as they were.
            ...(a.qualifiedFunctionNames.size ? { qualifiedFunctions: bySchemaName(a.qualifiedFunctionNames) } : {}),
            ...(a.qualifiedOperatorNames.size ? { qualifiedOperators: bySchemaName(a.qualifiedOperatorNames) } : {}),
          },
        }
      : {}),
    fingerprint: '',
    paramCount: a.maxParam,
  } as SqlAnalysisOk;
  // The fingerprint costs a second parse; compute it on first access (enumerable, cached).
  let fp: string | null = null;
  Object.defineProperty(result, 'fingerprint', {
    enumerable: true,
    configurable: false,
    get(): string {
      if (fp === null) fp = lazyFingerprint(sql);
      return fp;
    },
  });
  return result;
}

/** A digit followed by a letter or `_`: the only way to write a literal the two lexers read differently. */
const MAYBE_DIVERGENT = /[0-9][A-Za-z_]/;
const DECIMAL_INTEGER = /^[0-9]+$/;
const DECIMAL_NUMERIC = /^(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$/;
const PARAMETER = /^\$[0-9]+$/;

/**
 * The parser follows PostgreSQL 18's lexer, which reads `0x1F`, `0o17`, `0b101` and `1_000` as
 * numbers. PostgreSQL 15 refuses them ("trailing junk after numeric literal") and PostgreSQL 14
 * and older read `0x1F` as `0 AS x1F`: the same text would mean something else on the source.
 * Only plain decimal literals are accepted, so a lexer difference can only end in a refusal.
 * Returns the refusal message, or null.
 */
function divergentNumericLiteral(sql: string): string | null {
  if (!MAYBE_DIVERGENT.test(sql)) return null;
  for (const t of scanSql(sql)) {
    const ok =
      t.tokenName === 'ICONST' ? DECIMAL_INTEGER.test(t.text) : t.tokenName === 'FCONST' ? DECIMAL_NUMERIC.test(t.text) : t.tokenName === 'PARAM' ? PARAMETER.test(t.text) : true;
    if (!ok) return 'numeric literals must be plain decimal numbers (no 0x/0o/0b prefixes or _ separators: the source server reads them differently)';
  }
  return null;
}

function lazyFingerprint(sql: string): string {
  try {
    return fingerprintSql(sql);
  } catch {
    // Never seen for a statement that parsed; fall back to a key that cannot collide across texts.
    return 'sha256:' + createHash('sha256').update(sql).digest('hex');
  }
}

/**
 * Columns the statement uses to select, order, group or limit rows rather than to compute output
 * values (`filterSources` of an ok analysis; `[]` for a refusal). A masked column used here can
 * leak by inference (`WHERE ssn LIKE '1%'`, `ORDER BY salary`), so policy should refuse predicates
 * on masked columns. Implements the filter half of sql-safety.md class 6. Narrower than
 * `nonOutputUses` (function arguments, set operations, writes, …), which policy should check.
 */
export function filterColumns(analysis: SqlAnalysis): ColumnRef[] {
  return analysis.ok ? analysis.filterSources : [];
}

/** The values of a `schema\u0000name`-keyed map, sorted by schema then name (UTF-16 order, as the keys). */
function bySchemaName(m: ReadonlyMap<string, { schema: string; name: string }>): Array<{ schema: string; name: string }> {
  return [...m.keys()].sort().map((k) => {
    const v = m.get(k)!;
    return { schema: v.schema, name: v.name };
  });
}

function refuse(code: Exclude<SqlAnalysis, { ok: true }>['code'], message: string): SqlAnalysis {
  return { ok: false, code, message };
}

/** Loads the parser (idempotent) and analyses `sql`; convenience for callers outside hot paths. */
export async function analyzeSqlAsync(sql: string, catalog: SourceCatalog | PreparedCatalog, opts?: AnalyzeOptions): Promise<SqlAnalysis> {
  await initSqlParser();
  return analyzeSql(sql, catalog, opts);
}

/**
 * Views and materialized views of `catalog` whose column lineage cannot be proven (src/sql/views.ts:
 * no recorded definition, a definition that does not parse or is refused, an operator or an opaque function outside
 * `pg_catalog`, a cycle), as `schema.name`, sorted. Reads of their columns fail closed (masked for
 * callers with masks, refused for callers with read denies), so the catalogue scan reports them to
 * operators. Requires `initSqlParser()`; the expansion is cached per prepared catalogue.
 */
export function unprovableViews(catalog: SourceCatalog | PreparedCatalog): string[] {
  const cat = prepareCatalog(catalog);
  const out: string[] = [];
  const ident = (s: string): string => '"' + s.replace(/"/g, '""') + '"';
  for (const rel of cat.relations.values()) {
    if (rel.kind !== 'view' && rel.kind !== 'materialized_view') continue;
    const a = analyzeSql(`SELECT * FROM ${ident(rel.schema)}.${ident(rel.name)}`, cat);
    if (!a.ok || a.viewUnprovable) out.push(`${rel.schema}.${rel.name}`);
  }
  return out.sort();
}
