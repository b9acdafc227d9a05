/**
 * The row-rule rewrite (issue 27): every reference to a ruled relation, wherever it is in the
 * tree, is replaced by its view with the agent-visible name kept; what cannot be placed is refused.
 */
import { initSqlParser } from '../../../../src/sql/parser';
import { rewriteRowRules, RowRewriteRefusal, type RelationReference } from '../../../../src/sql/row-rules/rewrite';

beforeAll(async () => {
  await initSqlParser();
});

/** `t` (in public, on the path) is ruled; `ONLY t` reads another view. */
const resolve = (r: RelationReference, target = false): string | null => ((r.schema === null || r.schema === 'public') && r.name === 't' ? (target ? 'tw' : '') + (r.inh ? 'tv' : 'tv_only') : null);
const rw = (sql: string) => rewriteRowRules(sql, resolve);

describe('rewriteRowRules', () => {
  it.each([
    ['SELECT a FROM t', 'SELECT a FROM interlock_rows."tv" AS "t"'],
    ['SELECT t.a FROM public.t', 'SELECT t.a FROM interlock_rows."tv" AS "t"'],
    ['SELECT x.a FROM t x', 'SELECT x.a FROM interlock_rows."tv" x'],
    ['SELECT * FROM ONLY t', 'SELECT * FROM ONLY interlock_rows."tv_only" AS "t"'],
    ['SELECT * FROM "public" . "t" AS y(b)', 'SELECT * FROM interlock_rows."tv" AS y(b)'],
    ['TABLE t', 'TABLE interlock_rows."tv"'],
    ['SELECT * FROM u JOIN t ON u.id = t.id', 'SELECT * FROM u JOIN interlock_rows."tv" AS "t" ON u.id = t.id'],
    ['SELECT (SELECT count(*) FROM t) AS n', 'SELECT (SELECT count(*) FROM interlock_rows."tv" AS "t") AS n'],
    ['SELECT 1 WHERE EXISTS (SELECT 1 FROM t WHERE t.a = 1)', 'SELECT 1 WHERE EXISTS (SELECT 1 FROM interlock_rows."tv" AS "t" WHERE t.a = 1)'],
    ['SELECT a FROM u UNION SELECT a FROM t', 'SELECT a FROM u UNION SELECT a FROM interlock_rows."tv" AS "t"'],
    ['WITH c AS (SELECT * FROM t) SELECT * FROM c', 'WITH c AS (SELECT * FROM interlock_rows."tv" AS "t") SELECT * FROM c'],
    ['WITH RECURSIVE r(n) AS (SELECT a FROM t UNION ALL SELECT n + 1 FROM r, t WHERE n < 3) SELECT * FROM r', 'WITH RECURSIVE r(n) AS (SELECT a FROM interlock_rows."tv" AS "t" UNION ALL SELECT n + 1 FROM r, interlock_rows."tv" AS "t" WHERE n < 3) SELECT * FROM r'],
    ['SELECT * FROM u, LATERAL (SELECT * FROM t WHERE t.a = u.a) l', 'SELECT * FROM u, LATERAL (SELECT * FROM interlock_rows."tv" AS "t" WHERE t.a = u.a) l'],
    ["SELECT 'é' AS x, a FROM t /* ü */", 'SELECT \'é\' AS x, a FROM interlock_rows."tv" AS "t" /* ü */'],
    ['SELECT a FROM other.t', 'SELECT a FROM other.t'],
  ])('%s', (sql, expected) => {
    expect(rw(sql).sql).toBe(expected);
  });

  it('counts replacements and leaves unruled statements as they are', () => {
    expect(rw('SELECT * FROM t a, t b')).toEqual({ sql: 'SELECT * FROM interlock_rows."tv" a, interlock_rows."tv" b', replaced: 2 });
    expect(rw('SELECT * FROM u')).toEqual({ sql: 'SELECT * FROM u', replaced: 0 });
  });

  it('refuses a name that is both a CTE and a ruled relation, wherever the CTE is', () => {
    expect(() => rw('WITH t AS (SELECT 1 AS a) SELECT a FROM t')).toThrow(RowRewriteRefusal);
    expect(() => rw('SELECT * FROM (WITH t AS (SELECT 1) SELECT 1) s, t')).toThrow(/both a CTE/);
    // Qualified, it is the table and is rewritten.
    expect(rw('WITH t AS (SELECT 1 AS a) SELECT a FROM public.t').sql).toBe('WITH t AS (SELECT 1 AS a) SELECT a FROM interlock_rows."tv" AS "t"');
  });

  it('rewrites a ruled write target to its target view, keeping the name (issue 27 writes)', () => {
    expect(rw('UPDATE t SET a = 1').sql).toBe('UPDATE interlock_rows."twtv" AS "t" SET a = 1');
    expect(rw('INSERT INTO t SELECT * FROM t').sql).toBe('INSERT INTO interlock_rows."twtv" AS "t" SELECT * FROM interlock_rows."tv" AS "t"');
    expect(rw('DELETE FROM ONLY public.t x WHERE x.a = 1').sql).toBe('DELETE FROM ONLY interlock_rows."twtv_only" x WHERE x.a = 1');
    expect(rw('WITH d AS (DELETE FROM t RETURNING a) SELECT a FROM d').sql).toBe('WITH d AS (DELETE FROM interlock_rows."twtv" AS "t" RETURNING a) SELECT a FROM d');
  });
});
