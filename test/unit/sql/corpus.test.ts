/**
 * sql-safety.md corpus (classes 1–5) and legitimate list, with generated variants: keyword and
 * identifier case, comments, whitespace, quoting, schema qualification, nesting and dollar quoting.
 * The invariant under test: no sample or variant is ever classified as a plain read; every
 * legitimate statement (and each of its variants) is a read with the same analysis.
 */
import fc from 'fast-check';
import { parseSync, scanSync } from 'libpg-query';
import { analyzeSql, initSqlParser, SqlAnalysis } from '../../../src/sql/analyze';
import { deniedFunctionReason } from '../../../src/sql/function-policy';
import { CALL_SCHEMA, CORPUS, DANGEROUS_CALLS, HIDDEN_WRITES, LEGIT, Sample } from './corpus';
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

// ---------------------------------------------------------------------------------------------
// Token-level variants: case, quoting, comments and whitespace between every pair of tokens.
// ---------------------------------------------------------------------------------------------
const SEPARATORS = [' ', '\n', '\t', '  ', '\r\n', ' /* c */ ', ' /**/', ' --c\n', ' /* nested /* x */ y */ ', '\n--\n'];

/**
 * Keyword pairs PostgreSQL's grammar resolves with one token of lookahead (WITH ORDINALITY,
 * NOT IN, NULLS FIRST, …). libpg-query 18.1.5 fails to parse them when a comment separates the two
 * words (the server accepts it); that discrepancy only causes a refusal, so variants keep these
 * pairs separated by a plain space.
 */
const LOOKAHEAD_PAIRS = new Set(
  ['with ordinality', 'with time', 'without time', 'not in', 'not like', 'not ilike', 'not similar', 'not between', 'nulls first', 'nulls last', 'format json'],
);

interface Tok {
  text: string;
  kind: 'keyword' | 'ident' | 'other';
}

function tokens(sql: string): Tok[] {
  return scanSync(sql)
    .tokens.filter((t) => t.tokenName !== 'C_COMMENT' && t.tokenName !== 'SQL_COMMENT')
    .map((t) => ({
      text: sql.slice(t.start, t.end),
      kind: t.keywordKind > 0 ? 'keyword' : t.tokenName === 'IDENT' && !sql.slice(t.start, t.end).startsWith('"') ? 'ident' : 'other',
    }));
}

function randomCase(s: string, bits: number[]): string {
  let i = 0;
  return s.replace(/[a-z]/gi, (ch) => (bits[i++ % bits.length] ? ch.toUpperCase() : ch.toLowerCase()));
}

/** Arbitrary token-level rewrite of `sql` that PostgreSQL parses to the same tree. */
function variantOf(sql: string): fc.Arbitrary<string> {
  const toks = tokens(sql);
  return fc
    .tuple(
      fc.array(fc.constantFrom(...SEPARATORS), { minLength: toks.length + 1, maxLength: toks.length + 1 }),
      fc.array(fc.integer({ min: 0, max: 1 }), { minLength: 1, maxLength: 16 }),
      fc.array(fc.boolean(), { minLength: toks.length, maxLength: toks.length }),
    )
    .map(([seps, bits, quote]) => {
      let out = seps[0].trimStart();
      toks.forEach((t, i) => {
        const next = toks[i + 1];
        if (next && LOOKAHEAD_PAIRS.has(`${t.text.toLowerCase()} ${next.text.toLowerCase()}`)) seps[i + 1] = ' ';
        let text = t.text;
        if (t.kind === 'keyword') text = randomCase(text, bits);
        else if (t.kind === 'ident') text = quote[i] ? `"${text.toLowerCase()}"` : randomCase(text, bits);
        out += text + (i === toks.length - 1 ? (seps[i + 1].includes('--') ? '\n' : ' ') : seps[i + 1]);
      });
      return out;
    });
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
    expect(analyzeSql(deepSub, CATALOG)).toMatchObject({ ok: false, code: 'invalid_sql' });
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
const CALL_CONTEXTS: string[] = [
  'SELECT %C%',
  'SELECT (SELECT %C%)',
  'SELECT a FROM t WHERE a = (%C%)::int',
  'WITH x AS (SELECT %C% AS v) SELECT * FROM x',
  'WITH x AS (SELECT %C% AS v) SELECT 1',
  'WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE (%C%) IS NULL) SELECT * FROM r',
  'SELECT * FROM t, LATERAL (SELECT %C% AS v) l',
  'SELECT 1 UNION ALL SELECT (%C%)::int',
  'SELECT a FROM t EXCEPT SELECT (%C%)::int',
  'SELECT CASE WHEN a > 0 THEN (%C%)::text END FROM t',
  'SELECT CASE WHEN (%C%) IS NULL THEN 1 ELSE 2 END',
  'SELECT coalesce((%C%)::text, b) FROM t',
  'SELECT count(*) FILTER (WHERE (%C%) IS NULL) FROM t',
  'SELECT a FROM t ORDER BY %C%',
  'SELECT a FROM t GROUP BY a HAVING count(%C%) > 0',
  'SELECT a FROM t GROUP BY ROLLUP (a, (%C%))',
  'VALUES (%C%)',
  'SELECT * FROM (VALUES (1), ((%C%)::int)) v(x)',
  'SELECT ARRAY(SELECT %C%)',
  'SELECT ARRAY[(%C%)::text]',
  'SELECT ROW(1, %C%)',
  'SELECT * FROM t WHERE EXISTS (SELECT %C%)',
  'SELECT * FROM t WHERE a IN (SELECT 1 FROM (SELECT %C%) s)',
  'SELECT * FROM t WHERE a = ANY (SELECT (%C%)::int)',
  'SELECT sum(a) OVER (PARTITION BY %C%) FROM t',
  'SELECT sum(a) OVER w FROM t WINDOW w AS (ORDER BY %C%)',
  'SELECT string_agg(b, \',\' ORDER BY %C%) FROM t',
  'EXPLAIN SELECT %C%',
  'SELECT lower((%C%)::text)',
  "SELECT jsonb_build_object('k', %C%)",
  'SELECT a FROM t LIMIT (SELECT count(%C%))',
  'SELECT a FROM t OFFSET (SELECT count(%C%))',
  'SELECT DISTINCT ON (%C%) a FROM t',
  'SELECT c.first_name FROM customer c JOIN invoice i ON i.customer_id = c.customer_id AND (%C%) IS NOT NULL',
  'SELECT * FROM %C% AS f',
  'SELECT * FROM ROWS FROM (%C%) AS f',
  'SELECT * FROM t, %C% AS f',
  'SELECT (%C%) IS DISTINCT FROM NULL',
  'SELECT 1 WHERE NOT (%C%) IS NULL AND true',
  "INSERT INTO t SELECT 1, (%C%)::text",
  'UPDATE t SET b = (%C%)::text',
  'DELETE FROM t WHERE (%C%) IS NULL',
  'WITH d AS (DELETE FROM t WHERE (%C%) IS NULL RETURNING *) SELECT * FROM d',
];

const callArb: fc.Arbitrary<string> = fc
  .tuple(
    fc.constantFrom(...DANGEROUS_CALLS),
    fc.constantFrom('plain', 'upper', 'mixed', 'quoted', 'qualified', 'quoted-qualified', 'upper-qualified'),
    fc.constantFrom('', ' ', '/* x */', '\n'),
  )
  .map(([c, spelling, gap]) => {
    const schema = CALL_SCHEMA[c.fn] ?? 'pg_catalog';
    const mixed = c.fn.replace(/./g, (ch, i: number) => (i % 2 ? ch.toUpperCase() : ch));
    const name = {
      plain: c.fn,
      upper: c.fn.toUpperCase(),
      mixed,
      quoted: `"${c.fn}"`,
      qualified: `${schema}.${c.fn}`,
      'quoted-qualified': `"${schema}"."${c.fn}"`,
      'upper-qualified': `${schema.toUpperCase()}.${c.fn.toUpperCase()}`,
    }[spelling]!;
    return `${name}${gap}(${c.args})`;
  });

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
const WRITE_CONTEXTS: Array<[string, 'write' | 'statement_not_allowed']> = [
  ['WITH d AS (%W%) SELECT * FROM d', 'write'],
  ['WITH d AS (%W%) SELECT 1', 'write'],
  ['WITH x AS (SELECT 1), d AS (%W%) SELECT * FROM x', 'write'],
  ['WITH RECURSIVE d AS (%W%) SELECT * FROM d', 'write'],
  ['WITH d AS (%W%) SELECT * FROM t WHERE a IN (SELECT a FROM d)', 'write'],
  ['WITH d AS (%W%) TABLE d', 'write'],
  ['WITH d AS (%W%) VALUES (1)', 'write'],
  ['WITH d AS (%W%) SELECT * FROM d UNION ALL SELECT 1, \'x\'', 'write'],
  ['SELECT * FROM (WITH d AS (%W%) SELECT * FROM d) s', 'write'],
  ['SELECT (WITH d AS (%W%) SELECT count(*) FROM d)', 'write'],
  ['SELECT 1 WHERE EXISTS (WITH d AS (%W%) SELECT 1 FROM d)', 'write'],
  ['SELECT * FROM t, LATERAL (WITH d AS (%W%) SELECT * FROM d) l', 'write'],
  ['WITH d AS (%W%) INSERT INTO t SELECT * FROM d', 'write'],
  ['WITH d AS (%W%) DELETE FROM t WHERE a IN (SELECT a FROM d)', 'write'],
  ['EXPLAIN WITH d AS (%W%) SELECT * FROM d', 'statement_not_allowed'],
  ['EXPLAIN ANALYZE WITH d AS (%W%) SELECT * FROM d', 'statement_not_allowed'],
  ['%W%', 'write'],
];

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
    for (const sql of ['SELECT now()', 'SELECT current_date', "SELECT 'now'::timestamptz", 'SELECT random()', 'SELECT clock_timestamp()', 'SELECT current_user']) {
      const r = analyzeSql(sql, CATALOG);
      expect([sql, r.ok && r.kind, r.ok && r.cacheable]).toEqual([sql, 'read', false]);
    }
    for (const sql of ['SELECT lower(b) FROM t', 'SELECT count(*) FROM track', "SELECT '2024-01-01'::date"]) {
      const r = analyzeSql(sql, CATALOG);
      expect([sql, r.ok && r.cacheable]).toEqual([sql, true]);
    }
  });
});
