/**
 * Complexity bounds (issue 10, Build 3): statements over a source's limits on CTEs, range-table
 * entries, join and subquery depth, set-operation arms or parse-tree size are refused as
 * `statement_too_complex` before the walk (and so before anything is sent); every query of the
 * bench corpus and of the SQL-safety corpus's legitimate set stays within the defaults.
 */
import { analyzeSql, complexityLimitsFromSettings, DEFAULT_COMPLEXITY_LIMITS, initSqlParser, prepareCatalog } from '../../../src/sql/analyze';
import { complexityRefusal, measureComplexity, type ComplexityLimits } from '../../../src/sql/complexity';
import { parseSql } from '../../../src/sql/parser';
import { validateSourceDefinition } from '../../../generated/validators';
import { ANALYTICAL_QUERIES } from '../../../bench/lib/corpus';
import { CATALOG } from './helpers';
import { LEGIT } from './corpus';

beforeAll(async () => {
  await initSqlParser();
});

const cat = prepareCatalog(CATALOG);
const measure = (sql: string) => measureComplexity(parseSql(sql).stmts![0].stmt);

/** The statement of issue 10: 3,000 chained CTEs (~94 KB). */
export function cteChain(n: number): string {
  return `WITH ${Array.from({ length: n }, (_, i) => (i === 0 ? 'c0 AS (SELECT 1 AS x)' : `c${i} AS (SELECT x FROM c${i - 1})`)).join(', ')} SELECT * FROM c${n - 1}`;
}

describe('measureComplexity counts each dimension', () => {
  test.each([
    ['SELECT 1', { ctes: 0, rangeTableEntries: 0, joinDepth: 0, subqueryDepth: 1, setOperationArms: 0, notMaterializedCtes: 0 }],
    ['SELECT * FROM track t JOIN album a USING (album_id) JOIN artist r USING (artist_id)', { ctes: 0, rangeTableEntries: 5, joinDepth: 2, subqueryDepth: 1, setOperationArms: 0, notMaterializedCtes: 0 }],
    ['WITH a AS (SELECT 1), b AS (SELECT * FROM a) SELECT * FROM b', { ctes: 2, rangeTableEntries: 2, joinDepth: 0, subqueryDepth: 2, setOperationArms: 0, notMaterializedCtes: 0 }],
    ['SELECT 1 UNION SELECT 2 UNION ALL SELECT 3 EXCEPT SELECT 4', { ctes: 0, rangeTableEntries: 0, joinDepth: 0, subqueryDepth: 1, setOperationArms: 4, notMaterializedCtes: 0 }],
    ['SELECT (SELECT (SELECT 1))', { ctes: 0, rangeTableEntries: 0, joinDepth: 0, subqueryDepth: 3, setOperationArms: 0, notMaterializedCtes: 0 }],
    ['INSERT INTO t (a) SELECT a FROM t', { ctes: 0, rangeTableEntries: 2, joinDepth: 0, subqueryDepth: 1, setOperationArms: 0, notMaterializedCtes: 0 }],
    ['SELECT * FROM (SELECT * FROM t JOIN t u USING (a)) s JOIN t v USING (a)', { ctes: 0, rangeTableEntries: 6, joinDepth: 1, subqueryDepth: 2, setOperationArms: 0, notMaterializedCtes: 0 }],
    ['WITH a AS NOT MATERIALIZED (SELECT 1), b AS MATERIALIZED (SELECT * FROM a) SELECT * FROM b', { ctes: 2, rangeTableEntries: 2, joinDepth: 0, subqueryDepth: 2, setOperationArms: 0, notMaterializedCtes: 1 }],
  ])('%s', (sql, expected) => {
    const m = measure(sql);
    expect({ ...m, parseTreeNodes: undefined }).toEqual({ ...expected, parseTreeNodes: undefined });
    expect(m.parseTreeNodes).toBeGreaterThan(0);
  });

  test('the node count stops early once past the limit', () => {
    const tree = parseSql(cteChain(500)).stmts![0].stmt;
    expect(measureComplexity(tree, 100).parseTreeNodes).toBe(101);
    expect(measureComplexity(tree).parseTreeNodes).toBeGreaterThan(2_000);
  });

  test('deep nesting is measured without recursion (no stack overflow)', () => {
    // A synthetic tree 200,000 levels deep (deeper than any parser output).
    let t: unknown = { A_Const: { ival: { ival: 1 } } };
    for (let i = 0; i < 200_000; i++) t = { A_Expr: { kind: 'AEXPR_OP', lexpr: t } };
    expect(measureComplexity(t).parseTreeNodes).toBeGreaterThan(200_000);
  });
});

describe('real analytical SQL stays within the defaults', () => {
  const corpus = [...ANALYTICAL_QUERIES.map((q) => q.sql), ...LEGIT];

  test('all 100 bench corpus queries and the legitimate safety corpus pass the complexity check', () => {
    expect(ANALYTICAL_QUERIES).toHaveLength(100);
    const over = corpus.filter((sql) => complexityRefusal(measure(sql), DEFAULT_COMPLEXITY_LIMITS) !== null);
    expect(over).toEqual([]);
  });

  test('their maxima (documented in complexity.ts) leave a wide margin under every default', () => {
    const max = { ctes: 0, rangeTableEntries: 0, joinDepth: 0, subqueryDepth: 0, setOperationArms: 0, parseTreeNodes: 0 };
    for (const sql of corpus) {
      const m = measure(sql);
      for (const k of Object.keys(max) as Array<keyof typeof max>) max[k] = Math.max(max[k], m[k]);
    }
    expect(max).toEqual({ ctes: 2, rangeTableEntries: 7, joinDepth: 3, subqueryDepth: 2, setOperationArms: 3, parseTreeNodes: 65 });
    expect(max.ctes * 8).toBeLessThanOrEqual(DEFAULT_COMPLEXITY_LIMITS.maxCtes);
    expect(max.rangeTableEntries * 8).toBeLessThanOrEqual(DEFAULT_COMPLEXITY_LIMITS.maxRangeTableEntries);
    expect(max.joinDepth * 8).toBeLessThanOrEqual(DEFAULT_COMPLEXITY_LIMITS.maxJoinDepth);
    expect(max.subqueryDepth * 8).toBeLessThanOrEqual(DEFAULT_COMPLEXITY_LIMITS.maxSubqueryDepth);
    expect(max.setOperationArms * 8).toBeLessThanOrEqual(DEFAULT_COMPLEXITY_LIMITS.maxSetOperationArms);
    expect(max.parseTreeNodes * 8).toBeLessThanOrEqual(DEFAULT_COMPLEXITY_LIMITS.maxParseTreeNodes);
  });
});

describe('analyzeSql refuses statements over a limit as statement_too_complex', () => {
  const refusal = (sql: string, complexity?: ComplexityLimits) => {
    const r = analyzeSql(sql, cat, complexity ? { complexity } : undefined);
    return r.ok ? { ok: true } : { code: r.code, message: r.message };
  };
  const deepSubqueries = (n: number) => `SELECT ${'(SELECT '.repeat(n)}1${')'.repeat(n)}`;
  const unionChain = (n: number) => Array.from({ length: n }, (_, i) => `SELECT ${i}`).join(' UNION ALL ');
  const joinChain = (n: number) => `SELECT 1 FROM t t0 ${Array.from({ length: n }, (_, i) => `JOIN t t${i + 1} ON true`).join(' ')}`;
  const fromList = (n: number) => `SELECT 1 FROM ${Array.from({ length: n }, (_, i) => `t t${i}`).join(', ')}`;
  const wideList = (n: number) => `SELECT ${Array.from({ length: n }, (_, i) => `${i}`).join(', ')}`;

  test.each([
    ['3,000 chained CTEs (issue 10, ~94 KB)', cteChain(3000), 'more than 64 WITH items (CTEs) (source setting complexity.max_ctes)'],
    ['65 CTEs', cteChain(65), 'more than 64 WITH items (CTEs) (source setting complexity.max_ctes)'],
    ['40 nested scalar sub-selects', deepSubqueries(40), 'more than 32 levels of nested queries (source setting complexity.max_subquery_depth)'],
    ['a 1,000-arm UNION ALL', unionChain(1000), 'more than 256 UNION/INTERSECT/EXCEPT arms (source setting complexity.max_set_operation_arms)'],
    ['65 nested JOINs', joinChain(65), 'more than 64 levels of nested JOINs (source setting complexity.max_join_depth)'],
    ['300 FROM items', fromList(300), 'more than 256 FROM items and joins (source setting complexity.max_range_table_entries)'],
    ['a 10,000-item select list', wideList(10_000), 'more than 20000 parse-tree nodes (source setting complexity.max_parse_tree_nodes)'],
  ])('%s', (_name, sql, what) => {
    expect(refusal(sql)).toEqual({ code: 'statement_too_complex', message: `statement too complex: ${what}; split it into smaller statements` });
  });

  test('just under each default is analysed normally', () => {
    for (const sql of [cteChain(64), deepSubqueries(30), unionChain(256), joinChain(63), fromList(255), wideList(3000)]) expect(refusal(sql)).toEqual({ ok: true });
  });

  test('a doubling chain of NOT MATERIALIZED CTEs (red-team F1: ~1.5 KB, 2^N inlined copies) is refused; the same chain without the hint is analysed', () => {
    const doubling = (n: number, hint: string) =>
      `WITH a0 AS ${hint}(SELECT 1 AS x), ${Array.from({ length: n }, (_, i) => `a${i + 1} AS ${hint}(SELECT x FROM a${i} UNION ALL SELECT x FROM a${i})`).join(', ')} SELECT count(*) FROM a${n}`;
    const message = 'statement too complex: WITH … AS NOT MATERIALIZED is not allowed (inlining a CTE into each of its references multiplies the work); drop NOT MATERIALIZED';
    expect(refusal(doubling(15, 'NOT MATERIALIZED '))).toEqual({ code: 'statement_too_complex', message });
    expect(refusal('WITH a AS NOT MATERIALIZED (SELECT 1 AS x) SELECT x FROM a')).toEqual({ code: 'statement_too_complex', message });
    expect(refusal(`SELECT * FROM (${doubling(3, 'NOT MATERIALIZED ')}) s`)).toEqual({ code: 'statement_too_complex', message });
    expect(refusal(doubling(15, ''))).toEqual({ ok: true });
    expect(refusal(doubling(15, 'MATERIALIZED '))).toEqual({ ok: true });
  });

  test('the 3,000-CTE chain is refused even when it hides inside EXPLAIN, a sub-select or a write', () => {
    const chain = cteChain(3000);
    for (const sql of [`EXPLAIN ${chain}`, `SELECT * FROM (${chain}) s`, `INSERT INTO t (a) ${chain}`]) expect(refusal(sql)).toMatchObject({ code: 'statement_too_complex' });
  });

  test('statement types that are never allowed keep their own code', () => {
    expect(refusal(`CREATE VIEW v AS ${cteChain(100)}`)).toMatchObject({ code: 'statement_not_allowed' });
  });

  test('per-source limits: lower and higher than the defaults', () => {
    const low = complexityLimitsFromSettings({ complexity: { max_ctes: 1 } });
    expect(low).toEqual({ ...DEFAULT_COMPLEXITY_LIMITS, maxCtes: 1 });
    expect(refusal('WITH a AS (SELECT 1), b AS (SELECT 2) SELECT * FROM a, b', low)).toEqual({
      code: 'statement_too_complex',
      message: 'statement too complex: more than 1 WITH items (CTEs) (source setting complexity.max_ctes); split it into smaller statements',
    });
    const high = complexityLimitsFromSettings({ complexity: { max_set_operation_arms: 2000 } });
    expect(refusal(unionChain(300))).toMatchObject({ code: 'statement_too_complex' });
    expect(refusal(unionChain(300), high)).toEqual({ ok: true });
  });

  test('settings without complexity, or with invalid values, take the defaults', () => {
    expect(complexityLimitsFromSettings(undefined)).toEqual(DEFAULT_COMPLEXITY_LIMITS);
    expect(complexityLimitsFromSettings({ host: 'x' })).toEqual(DEFAULT_COMPLEXITY_LIMITS);
    expect(complexityLimitsFromSettings({ complexity: { max_ctes: 0, max_join_depth: 'x', max_subquery_depth: 2.5 } })).toEqual(DEFAULT_COMPLEXITY_LIMITS);
  });
});

describe('the source schema carries the limits (spec/source-v1.schema.json)', () => {
  const source = (complexity: unknown) => ({
    id: 'sales',
    type: 'postgres',
    name: 'Sales',
    settings: { host: 'db', port: 5432, database: 'sales', reader: { user: 'r', password: 'p' }, tls: { mode: 'off' }, complexity },
  });

  test('every limit is a setting; unknown keys and non-positive values are rejected', () => {
    expect(validateSourceDefinition(source({ max_ctes: 16, max_range_table_entries: 100, max_join_depth: 20, max_subquery_depth: 10, max_set_operation_arms: 50, max_parse_tree_nodes: 5000 }))).toBe(true);
    expect(validateSourceDefinition(source({ max_cte: 16 }))).toBe(false);
    expect(validateSourceDefinition(source({ max_ctes: 0 }))).toBe(false);
  });
});
