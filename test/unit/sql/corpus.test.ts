/**
 * sql-safety.md corpus (classes 1–5) and legitimate list, with generated variants: keyword and
 * identifier case, comments, whitespace, quoting, schema qualification, nesting and dollar quoting.
 * The invariant under test: no sample or variant is ever classified as a plain read; every
 * legitimate statement (and each of its variants) is a read with the same analysis.
 */
import fc from 'fast-check';
import { parseSync } from 'libpg-query';
import { analyzeSql, initSqlParser, SqlAnalysis } from '../../../src/sql/analyze';
import { deniedFunctionReason } from '../../../src/sql/function-policy';
import { CALL_CONTEXTS, callArb, CORPUS, DANGEROUS_CALLS, HIDDEN_WRITES, LEGIT, Sample, variantOf, WRITE_CONTEXTS } from './corpus';
import { CATALOG, genericScan } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

const RUNS = Number(process.env.SQL_FC_RUNS ?? 60);

function verdict(r: SqlAnalysis): string {
  return r.ok ? r.kind : r.code;
}

function expectVerdict(sql: string, s: Sample['expect']): void {
  const r = analyzeSql(sql, CATALOG);
  const want = 'code' in s ? s.code : s.kind;
  if (verdict(r) !== want) throw new Error(`${JSON.stringify(sql)}: expected ${want}, got ${verdict(r)}${r.ok ? '' : ' (' + r.message + ')'}`);
}

describe('sql-safety.md corpus, classes 1–5, verbatim', () => {
  test.each(CORPUS.map((s) => [s.cls, s.sql, s.expect] as const))('class %i: %s', (_cls, sql, expect) => {
    expectVerdict(sql, expect);
  });

  test('no sample is ever a read', () => {
    const reads = CORPUS.filter((s) => {
      const r = analyzeSql(s.sql, CATALOG);
      return r.ok && r.kind === 'read';
    });
    expect(reads.map((s) => s.sql)).toEqual([]);
  });

  test('NUL bytes are refused before parsing (the parser would truncate at them)', () => {
    for (const sql of ['select 1 \u0000; drop table t', '\u0000', 'SELECT a FROM t WHERE b = \'\u0000\'']) {
      expect(analyzeSql(sql, CATALOG)).toEqual({ ok: false, code: 'invalid_sql', message: 'SQL must not contain NUL bytes' });
    }
  });

  test('lone UTF-16 surrogates are refused (parser and driver would encode them differently)', () => {
    for (const sql of ['SELECT 1 -- \ud800', "SELECT '\udc00'", 'SELECT "\ud83d" FROM t']) {
      expect(analyzeSql(sql, CATALOG)).toEqual({ ok: false, code: 'invalid_sql', message: 'SQL must be valid Unicode' });
    }
    expect(analyzeSql("SELECT '\ud83d\ude00'", CATALOG)).toMatchObject({ ok: true, kind: 'read' });
  });

  test('empty input and comment-only input are invalid', () => {
    for (const sql of ['', '   ', ';', '-- only a comment', '/* x */']) {
      const r = analyzeSql(sql, CATALOG);
      expect(r.ok ? 'ok' : r.code).toBe('invalid_sql');
    }
  });

  test('syntax errors are invalid_sql with a short message that does not echo the input', () => {
    const secret = 'S'.repeat(500);
    const r = analyzeSql(`SELECT '${secret}' FROM WHERE`, CATALOG);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.code).toBe('invalid_sql');
    expect(r.message.length).toBeLessThan(200);
    expect(r.message).not.toContain(secret.slice(0, 40));
    const r2 = analyzeSql(`SELECT "${'q'.repeat(300)}`, CATALOG);
    expect(r2.ok ? 'ok' : r2.code).toBe('invalid_sql');
    expect(r2.ok ? '' : r2.message).not.toContain('q'.repeat(40));
  });

  test('over-long and absurdly nested statements are refused, not crashed on', () => {
    expect(analyzeSql('SELECT ' + '1+'.repeat(200_000) + '1', CATALOG)).toMatchObject({ ok: false, code: 'invalid_sql' });
    const deep = 'SELECT ' + 'coalesce('.repeat(3000) + '1' + ')'.repeat(3000);
    expect(analyzeSql(deep, CATALOG)).toMatchObject({ ok: false, code: 'invalid_sql' });
    const deepSub = 'SELECT ' + '(SELECT '.repeat(1500) + '1' + ')'.repeat(1500);
    // Nested query levels are a complexity limit (issue 10, Build 3), checked before the walk.
    expect(analyzeSql(deepSub, CATALOG)).toMatchObject({ ok: false, code: 'statement_too_complex' });
  });
});

describe('generated variants of every sample keep their verdict', () => {
  test.each(CORPUS.map((s) => [s.sql, s] as const))('%s', (_sql, s) => {
    fc.assert(
      fc.property(variantOf(s.sql), (v) => {
        expectVerdict(v, s.expect);
      }),
      { numRuns: Math.max(10, Math.floor(RUNS / 3)) },
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Class 3 nesting: a dangerous call, spelled in any way, anywhere in a statement.
// ---------------------------------------------------------------------------------------------


describe('class 3: dangerous calls are refused in every position and spelling', () => {
  test.each(CALL_CONTEXTS.map((c) => [c]))('%s', (ctx) => {
    fc.assert(
      fc.property(callArb, (call) => {
        const sql = ctx.split('%C%').join(call);
        const r = analyzeSql(sql, CATALOG);
        if (r.ok || r.code !== 'function_not_allowed') {
          throw new Error(`${sql}: expected function_not_allowed, got ${verdict(r)}${r.ok ? '' : ' ' + r.message}`);
        }
      }),
      { numRuns: Math.max(14, Math.floor(RUNS / 2)) },
    );
  });

  test('the contexts themselves are fine with a harmless call (so refusals above are about the call)', () => {
    for (const ctx of CALL_CONTEXTS) {
      const sql = ctx.split('%C%').join(ctx.includes('FROM %C%') || ctx.includes('ROWS FROM (%C%)') || ctx.includes(', %C% AS f') ? 'generate_series(1, 2)' : 'lower(\'x\')');
      const r = analyzeSql(sql, CATALOG);
      expect([sql, r.ok ? 'ok' : r.code + ' ' + r.message]).toEqual([sql, 'ok']);
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Class 2 nesting: a write hidden anywhere is classified write (or refused), never read.
// ---------------------------------------------------------------------------------------------

describe('class 2: hidden writes', () => {
  test.each(WRITE_CONTEXTS)('%s', (ctx, want) => {
    fc.assert(
      fc.property(fc.constantFrom(...HIDDEN_WRITES).chain((w) => variantOf(ctx.split('%W%').join(w))), (sql) => {
        const r = analyzeSql(sql, CATALOG);
        if (verdict(r) !== want) throw new Error(`${sql}: expected ${want}, got ${verdict(r)}${r.ok ? '' : ' ' + r.message}`);
        if (r.ok) expect(r.writes.map((w) => `${w.schema}.${w.table}`)).toContain('public.t');
      }),
      { numRuns: Math.max(10, Math.floor(RUNS / 3)) },
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Independent oracle: a structural scan of the parse tree that knows nothing about scopes.
// ---------------------------------------------------------------------------------------------
const DML = ['InsertStmt', 'UpdateStmt', 'DeleteStmt', 'MergeStmt'];

describe('structural oracle agrees with the classifier', () => {
  const all: string[] = [
    ...CORPUS.map((s) => s.sql),
    ...LEGIT,
    ...CALL_CONTEXTS.flatMap((c) => DANGEROUS_CALLS.map((d) => c.split('%C%').join(`${d.fn}(${d.args})`))),
    ...WRITE_CONTEXTS.flatMap(([c]) => HIDDEN_WRITES.map((w) => c.split('%W%').join(w))),
  ];
  test.each(all.map((s) => [s]))('%s', (sql) => {
    const r = analyzeSql(sql, CATALOG);
    let tree: unknown;
    try {
      tree = parseSync(sql);
    } catch {
      expect(r.ok).toBe(false);
      return;
    }
    const { types, functions } = genericScan(tree);
    if (DML.some((t) => types.has(t))) expect(r.ok && r.kind === 'read').toBe(false);
    if ([...functions].some((f) => deniedFunctionReason(f) !== null)) expect(r.ok).toBe(false);
    // Every function call in the tree went through the function policy.
    if (r.ok) expect([...functions].filter((f) => !r.functions.some((x) => x.name === f))).toEqual([]);
    if (r.ok && r.kind === 'read') {
      const allowedTop = ['SelectStmt', 'ExplainStmt'];
      expect(allowedTop).toContain(r.statement);
      expect(types.has('IntoClause') || types.has('LockingClause')).toBe(false);
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Legitimate SQL keeps working, and token-level variants give the same analysis.
// ---------------------------------------------------------------------------------------------
describe('legitimate SQL (sql-safety.md list and more) is a read', () => {
  test.each(LEGIT.map((s) => [s]))('%s', (sql) => {
    const r = analyzeSql(sql, CATALOG);
    expect(r.ok ? r.kind : `${r.code}: ${r.message}`).toBe('read');
  });

  test.each(LEGIT.map((s) => [s]))('variants of %s analyse identically', (sql) => {
    const base = analyzeSql(sql, CATALOG);
    fc.assert(
      fc.property(variantOf(sql), (v) => {
        expect(analyzeSql(v, CATALOG)).toEqual(base);
      }),
      { numRuns: Math.max(5, Math.floor(RUNS / 6)) },
    );
  });

  test('now() and friends are allowed but make the statement not cacheable', () => {
    for (const sql of ['SELECT now()', 'SELECT current_date', "SELECT 'now'::timestamptz", 'SELECT random()', 'SELECT clock_timestamp()', 'SELECT localtimestamp']) {
      const r = analyzeSql(sql, CATALOG);
      expect([sql, r.ok && r.kind, r.ok && r.cacheable]).toEqual([sql, 'read', false]);
    }
    for (const sql of ['SELECT lower(b) FROM t', 'SELECT count(*) FROM track', "SELECT '2024-01-01'::date"]) {
      const r = analyzeSql(sql, CATALOG);
      expect([sql, r.ok && r.cacheable]).toEqual([sql, true]);
    }
  });
});
