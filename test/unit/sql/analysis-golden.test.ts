/**
 * The analyser's golden file (issue 25, item 1; scripts/analysis-golden.ts): every statement the
 * tests, the bench corpus and the conformance sql-gateway pack write down, analysed against its
 * deterministic catalogue, must analyse exactly as stored. A change that is meant to change
 * analyses regenerates the file (`npx tsx scripts/analysis-golden.ts --write`) and shows the diff.
 */
import { analyzeSql, initSqlParser } from '../../../src/sql/analyze';
import { CATALOG } from './helpers';
import { analyseForGolden, canonical, catalogFor, collectStatements, differences, readGolden, sqlLiterals, syntheticRelations, workDifferences, workForGolden, type GoldenFile } from '../../../scripts/analysis-golden';

beforeAll(async () => {
  await initSqlParser();
});

describe('analysis golden file', () => {
  const golden = readGolden();

  it('holds distinct statements sorted by text, each with where it was found', () => {
    expect(golden.version).toBe(1);
    expect(golden.entries.length).toBeGreaterThan(1500);
    const texts = golden.entries.map((e) => e.sql);
    expect(new Set(texts).size).toBe(texts.length);
    expect([...texts].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))).toEqual(texts);
    for (const e of golden.entries) expect(e.from.length).toBeGreaterThan(0);
    expect(golden.entries.some((e) => e.from.includes('conformance/sql/payloads.ts'))).toBe(true);
    expect(golden.entries.some((e) => e.from.includes('bench/lib/corpus.ts'))).toBe(true);
  });

  it('every stored analysis is what the analyser gives today', () => {
    expect(differences(golden)).toEqual([]);
  });

  it('every stored work count is what the walker uses today', () => {
    expect(workDifferences(golden)).toEqual([]);
    // Statements that reach the walker have a count; those refused before it (parse, kind, complexity) have none.
    expect(golden.entries.filter((e) => typeof e.work === 'number' && e.work > 0).length).toBeGreaterThan(1500);
    expect(golden.entries.find((e) => e.sql.startsWith('DROP '))?.work ?? null).toBeNull();
  });

  it('a changed work count is reported with both numbers', () => {
    const entry = golden.entries.find((e) => typeof e.work === 'number')!;
    const diff = workDifferences({ version: 1, entries: [{ ...entry, work: entry.work! + 1 }] });
    expect(diff).toEqual([{ sql: entry.sql, stored: entry.work! + 1, now: workForGolden(entry.sql) }]);
    expect(workForGolden(entry.sql)).toBe(entry.work);
  });

  it('a changed analysis is reported with both texts', () => {
    const entry = golden.entries.find((e) => (e.analysis as { ok: boolean }).ok)!;
    const altered: GoldenFile = { version: 1, entries: [{ ...entry, analysis: { ...(entry.analysis as object), cacheable: 'changed' } }] };
    const diff = differences(altered);
    expect(diff).toHaveLength(1);
    expect(diff[0]!.sql).toBe(entry.sql);
    expect(diff[0]!.now).toBe(JSON.stringify(analyseForGolden(entry.sql)));
    expect(diff[0]!.stored).not.toBe(diff[0]!.now);
  });
});

describe('golden harness', () => {
  it('takes string literals that read as SQL, and no others', () => {
    const text = "const a = 'SELECT 1 FROM t'; const b = `-- c\\nwith x as (select 1) select * from x`; const c = 'select'; const d = 'hello world'; const e = `SELECT ${'$'}{x}`;";
    expect(sqlLiterals('x.ts', text)).toEqual(['SELECT 1 FROM t', '-- c\nwith x as (select 1) select * from x']);
  });

  it('adds a text table for each unknown relation, with the columns the statement gives it', () => {
    expect(syntheticRelations('SELECT a, z.b FROM nosuch z JOIN other o ON o.c = z.d WHERE customer_id = 1', CATALOG)).toEqual([
      { schema: 'public', name: 'nosuch', kind: 'table', columns: ['a', 'b', 'customer_id', 'd'].map((name) => ({ name, dataType: 'text' })) },
      { schema: 'public', name: 'other', kind: 'table', columns: [{ name: 'c', dataType: 'text' }] },
    ]);
    expect(syntheticRelations('INSERT INTO s2.log (x, y) VALUES (1, 2)', CATALOG)).toEqual([
      { schema: 's2', name: 'log', kind: 'table', columns: ['x', 'y'].map((name) => ({ name, dataType: 'text' })) },
    ]);
    expect(syntheticRelations('WITH w AS (SELECT 1 AS k) SELECT k FROM w, customer', CATALOG)).toEqual([]);
    expect(syntheticRelations('SELEC nonsense', CATALOG)).toEqual([]);
  });

  it('analyses against the unit catalogue plus the synthetic tables, in canonical form', () => {
    const sql = 'SELECT n.v FROM notes n';
    expect(catalogFor(sql).relations.length).toBe(CATALOG.relations.length + 1);
    const a = analyseForGolden(sql) as { ok: boolean; reads: unknown };
    expect(a).toEqual(canonical(analyzeSql(sql, catalogFor(sql))));
    expect(a.ok).toBe(true);
    expect(a.reads).toEqual([{ columns: ['v'], schema: 'public', table: 'notes' }]);
    expect(Object.keys(a)).toEqual([...Object.keys(a)].sort());
  });

  it('collects each statement of the tree once, with its places', () => {
    const all = collectStatements();
    const bench = all.find((s) => s.sql === 'SELECT playlist_id, name FROM playlist ORDER BY name');
    expect(bench?.from).toContain('bench/lib/corpus.ts');
    expect(new Set(all.map((s) => s.sql)).size).toBe(all.length);
  });
});
