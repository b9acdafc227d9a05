/**
 * Complexity bounds of agent SQL, checked on the parse tree before anything is analysed or sent
 * (issue 10, Build 3). Some planner work in PostgreSQL cannot be interrupted: a chain of a few
 * thousand CTEs kept a backend busy for minutes and ignored `statement_timeout`, cancel and
 * `pg_terminate_backend` (shared/reference/hardening.md). Only refusing such statements before
 * they are sent is reliable, so the gateway counts, in one iterative pass over the raw
 * libpg-query tree:
 *
 * - `ctes`: `WITH` items (`CommonTableExpr`), over the whole statement;
 * - `rangeTableEntries`: FROM items (`RangeVar`, `RangeSubselect`, `RangeFunction`,
 *   `RangeTableFunc`, `RangeTableSample`, `JoinExpr`) and DML targets, over the whole statement;
 * - `joinDepth`: the deepest nesting of `JoinExpr` (a left-deep chain of n JOINs is depth n);
 * - `subqueryDepth`: the deepest nesting of query levels (a `SelectStmt` that is not an inner
 *   node of a set operation; the top statement is level 1);
 * - `setOperationArms`: leaf queries of UNION/INTERSECT/EXCEPT trees, over the whole statement;
 * - `parseTreeNodes`: every JSON object of the parse tree (nodes and their wrappers).
 *
 * The pass is linear in the tree's size, iterative (no recursion, whatever the nesting), and
 * stops as soon as the node limit is passed. Limits are per-source settings
 * (`settings.complexity` in spec/source-v1.schema.json); `DEFAULT_COMPLEXITY_LIMITS` holds the
 * defaults, chosen from the bench corpus (100 analytical queries) and the legitimate set of the
 * SQL-safety corpus with a wide margin (their maxima are in test/unit/sql/complexity.test.ts).
 */

/** Upper bounds on one statement's shape; a statement over any of them is `statement_too_complex`. */
export interface ComplexityLimits {
  /** Most `WITH` items in the whole statement. */
  maxCtes: number;
  /** Most FROM items, joins and DML targets in the whole statement. */
  maxRangeTableEntries: number;
  /** Deepest nesting of JOINs. */
  maxJoinDepth: number;
  /** Deepest nesting of query levels (sub-selects, CTE bodies, set-operation arms). */
  maxSubqueryDepth: number;
  /** Most leaf queries of UNION/INTERSECT/EXCEPT in the whole statement. */
  maxSetOperationArms: number;
  /** Most parse-tree nodes (JSON objects of libpg-query's tree). */
  maxParseTreeNodes: number;
}

/**
 * Defaults. The bench corpus (100 analytical queries) peaks at 2 CTEs, 7 range-table entries,
 * join depth 3, subquery depth 2, 2 set-operation arms and 65 parse-tree nodes; the legitimate set
 * of the SQL-safety corpus at 1, 5, 1, 2, 3 and 55. Hand-written or generated report queries (long
 * IN lists, wide CASE expressions, a few dozen joins) stay far below these; the 3,000-CTE
 * statement of issue 10 (~94 KB, ~18,000 nodes) is refused by `maxCtes`.
 */
export const DEFAULT_COMPLEXITY_LIMITS: Readonly<ComplexityLimits> = Object.freeze({
  maxCtes: 64,
  maxRangeTableEntries: 256,
  maxJoinDepth: 64,
  maxSubqueryDepth: 32,
  maxSetOperationArms: 256,
  maxParseTreeNodes: 20_000,
});

/** Measured shape of one statement (see the module comment for what each count means). */
export interface ComplexityMeasure {
  ctes: number;
  rangeTableEntries: number;
  joinDepth: number;
  subqueryDepth: number;
  setOperationArms: number;
  parseTreeNodes: number;
  /**
   * `WITH … AS NOT MATERIALIZED` items. PostgreSQL copies such a CTE's body into every reference, so
   * a chain of a dozen of them, each referencing the previous one twice, doubles the work at each
   * step (2^N copies from about 1 KB of SQL, gigabytes of backend memory that neither work_mem nor
   * statement_timeout bound in time). Always refused; without the hint a CTE referenced more than
   * once is materialised once.
   */
  notMaterializedCtes: number;
}

/** Source setting names (snake_case, as in spec/source-v1.schema.json) per limit. */
export const COMPLEXITY_SETTING: Readonly<Record<keyof ComplexityLimits, string>> = Object.freeze({
  maxCtes: 'max_ctes',
  maxRangeTableEntries: 'max_range_table_entries',
  maxJoinDepth: 'max_join_depth',
  maxSubqueryDepth: 'max_subquery_depth',
  maxSetOperationArms: 'max_set_operation_arms',
  maxParseTreeNodes: 'max_parse_tree_nodes',
});

const RTE_NODES = new Set(['RangeVar', 'RangeSubselect', 'RangeFunction', 'RangeTableFunc', 'RangeTableSample', 'JoinExpr']);
const DML = new Set(['InsertStmt', 'UpdateStmt', 'DeleteStmt', 'MergeStmt']);

/** A set-operation node of libpg-query's JSON (`op` other than SETOP_NONE). */
function isSetOp(sel: Record<string, unknown>): boolean {
  return sel.op !== undefined && sel.op !== 'SETOP_NONE';
}

/**
 * Measures a parsed statement (any libpg-query JSON subtree, normally `stmts[0].stmt`). Stops
 * counting once `parseTreeNodes` passes `stopAfterNodes` (the other counts are then partial, but
 * the node limit is already exceeded). Pure; linear; iterative.
 */
export function measureComplexity(tree: unknown, stopAfterNodes = Infinity): ComplexityMeasure {
  const m: ComplexityMeasure = { ctes: 0, rangeTableEntries: 0, joinDepth: 0, subqueryDepth: 0, setOperationArms: 0, parseTreeNodes: 0, notMaterializedCtes: 0 };
  // Each entry: a value, the query depth and join depth above it, and whether it is the bare body
  // of a set operation's arm (libpg-query writes larg/rarg without the SelectStmt wrapper).
  const stack: Array<[unknown, number, number, boolean]> = [[tree, 0, 0, false]];
  const select = (body: Record<string, unknown>, qd: number, jd: number, arm: boolean): void => {
    if (isSetOp(body)) {
      // larg/rarg are arms (or nested set operations); WITH, ORDER BY and LIMIT are not.
      for (const k of Object.keys(body)) stack.push([body[k], qd, jd, k === 'larg' || k === 'rarg']);
      return;
    }
    if (arm) m.setOperationArms++;
    const q = qd + 1;
    if (q > m.subqueryDepth) m.subqueryDepth = q;
    // Join depth counts nested joins: a sub-select inside a join starts again at 0.
    for (const k of Object.keys(body)) stack.push([body[k], q, 0, false]);
  };
  while (stack.length > 0) {
    const [v, qd, jd, arm] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (Array.isArray(v)) {
      for (const x of v) stack.push([x, qd, jd, false]);
      continue;
    }
    if (++m.parseTreeNodes > stopAfterNodes) return m;
    const o = v as Record<string, unknown>;
    if (arm) {
      select(o, qd, jd, true);
      continue;
    }
    const keys = Object.keys(o);
    // A node wrapper: { TypeName: { ...fields } }.
    if (keys.length === 1 && /^[A-Z]/.test(keys[0]) && o[keys[0]] !== null && typeof o[keys[0]] === 'object' && !Array.isArray(o[keys[0]])) {
      const type = keys[0];
      const body = o[type] as Record<string, unknown>;
      if (type === 'SelectStmt') {
        select(body, qd, jd, false);
        continue;
      }
      let j = jd;
      if (type === 'CommonTableExpr') {
        m.ctes++;
        if (body.ctematerialized === 'CTEMaterializeNever') m.notMaterializedCtes++;
      }
      else if (RTE_NODES.has(type)) m.rangeTableEntries++;
      else if (DML.has(type) && body.relation) m.rangeTableEntries++; // the bare RangeVar target
      if (type === 'JoinExpr') {
        j = jd + 1;
        if (j > m.joinDepth) m.joinDepth = j;
      }
      for (const k of Object.keys(body)) stack.push([body[k], qd, j, false]);
      continue;
    }
    for (const k of keys) stack.push([o[k], qd, jd, false]);
  }
  return m;
}

/**
 * Returns the agent-facing refusal message when `m` is over any of `limits`, else null. The
 * message names the limit, its setting and its value, never any part of the statement.
 */
export function complexityRefusal(m: ComplexityMeasure, limits: ComplexityLimits): string | null {
  if (m.notMaterializedCtes > 0) return 'statement too complex: WITH … AS NOT MATERIALIZED is not allowed (inlining a CTE into each of its references multiplies the work); drop NOT MATERIALIZED';
  const checks: Array<[keyof ComplexityLimits, number, string]> = [
    ['maxParseTreeNodes', m.parseTreeNodes, 'parse-tree nodes'],
    ['maxCtes', m.ctes, 'WITH items (CTEs)'],
    ['maxRangeTableEntries', m.rangeTableEntries, 'FROM items and joins'],
    ['maxJoinDepth', m.joinDepth, 'levels of nested JOINs'],
    ['maxSubqueryDepth', m.subqueryDepth, 'levels of nested queries'],
    ['maxSetOperationArms', m.setOperationArms, 'UNION/INTERSECT/EXCEPT arms'],
  ];
  for (const [key, value, what] of checks) {
    const limit = limits[key];
    if (value > limit) return `statement too complex: more than ${limit} ${what} (source setting complexity.${COMPLEXITY_SETTING[key]}); split it into smaller statements`;
  }
  return null;
}

/**
 * Limits of a source from its settings object (`settings.complexity`, snake_case keys as in
 * spec/source-v1.schema.json); missing or invalid values take the defaults.
 */
export function complexityLimitsFromSettings(settings: unknown): ComplexityLimits {
  const out: ComplexityLimits = { ...DEFAULT_COMPLEXITY_LIMITS };
  const c = settings !== null && typeof settings === 'object' ? (settings as Record<string, unknown>).complexity : undefined;
  if (c === null || typeof c !== 'object') return out;
  for (const key of Object.keys(COMPLEXITY_SETTING) as Array<keyof ComplexityLimits>) {
    const v = (c as Record<string, unknown>)[COMPLEXITY_SETTING[key]];
    if (typeof v === 'number' && Number.isInteger(v) && v >= 1) out[key] = v;
  }
  return out;
}
