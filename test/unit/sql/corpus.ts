/**
 * The sql-safety.md sample corpus (classes 1–5) and its legitimate list, as data shared by the unit
 * corpus test and the integration test that replays verdicts against real PostgreSQL.
 * Each sample carries the exact expected verdict.
 */
import fc from 'fast-check';
import { scanSync } from 'libpg-query';
import type { RefusalCode } from '../../../src/sql/analyze';

export type Expected = { code: RefusalCode } | { kind: 'write' };

export interface Sample {
  cls: 1 | 2 | 3 | 4 | 5;
  sql: string;
  expect: Expected;
}

const NA: Expected = { code: 'statement_not_allowed' };
const FN: Expected = { code: 'function_not_allowed' };
const W: Expected = { kind: 'write' };

/** Every sample of sql-safety.md classes 1–5, verbatim, plus close relatives. */
export const CORPUS: Sample[] = [
  // Class 1 — stacked statements and transaction control
  { cls: 1, sql: 'SELECT 1; DROP TABLE t', expect: NA },
  { cls: 1, sql: 'SELECT 1; COMMIT; DELETE FROM t', expect: NA },
  { cls: 1, sql: 'ROLLBACK; DELETE FROM t', expect: NA },
  { cls: 1, sql: 'END; DELETE FROM t', expect: NA },
  { cls: 1, sql: 'BEGIN READ WRITE; DELETE FROM t; COMMIT', expect: NA },
  { cls: 1, sql: 'SET TRANSACTION READ WRITE; DELETE FROM t', expect: NA },
  { cls: 1, sql: '/* c */ DROP TABLE t', expect: NA },
  { cls: 1, sql: '--c\nDROP TABLE t', expect: NA },
  { cls: 1, sql: 'SELECT $$;$$; DELETE FROM t', expect: NA },
  { cls: 1, sql: 'SELECT $x$;$x$; DELETE FROM t', expect: NA },
  { cls: 1, sql: 'BEGIN', expect: NA },
  { cls: 1, sql: 'COMMIT', expect: NA },
  { cls: 1, sql: 'SAVEPOINT a', expect: NA },
  { cls: 1, sql: 'SET TRANSACTION READ WRITE', expect: NA },
  { cls: 1, sql: 'START TRANSACTION READ WRITE', expect: NA },
  { cls: 1, sql: 'SELECT 1;;DELETE FROM t', expect: NA },
  // Class 2 — writes hidden in read-shaped statements
  { cls: 2, sql: 'WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d', expect: W },
  { cls: 2, sql: "WITH d AS (INSERT INTO t VALUES (1, 'x') RETURNING *) SELECT * FROM d", expect: W },
  { cls: 2, sql: 'WITH d AS (UPDATE t SET a = 1 RETURNING *) SELECT * FROM d', expect: W },
  { cls: 2, sql: 'WITH d AS (MERGE INTO t USING t AS s ON t.a = s.a WHEN MATCHED THEN DELETE) SELECT 1', expect: W },
  { cls: 2, sql: 'WITH d AS (DELETE FROM t) SELECT 1', expect: W },
  { cls: 2, sql: 'WITH x AS (SELECT 1), d AS (DELETE FROM t RETURNING a) SELECT * FROM x', expect: W },
  { cls: 2, sql: 'EXPLAIN ANALYZE DELETE FROM t', expect: NA },
  { cls: 2, sql: 'EXPLAIN (ANALYZE, BUFFERS) UPDATE t SET a = 1', expect: NA },
  { cls: 2, sql: 'EXPLAIN (ANALYZE false) SELECT 1', expect: NA },
  { cls: 2, sql: 'EXPLAIN ANALYSE SELECT * FROM t', expect: NA },
  { cls: 2, sql: 'EXPLAIN DELETE FROM t', expect: NA },
  { cls: 2, sql: 'EXPLAIN WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d', expect: NA },
  { cls: 2, sql: 'SELECT * INTO newt FROM t', expect: NA },
  { cls: 2, sql: 'CREATE TABLE x AS SELECT 1', expect: NA },
  { cls: 2, sql: 'SELECT 1 INTO TEMP x', expect: NA },
  { cls: 2, sql: 'SELECT 1 INTO x UNION SELECT 2', expect: NA },
  { cls: 2, sql: 'SELECT * FROM t WHERE a IN (WITH x AS (UPDATE t SET a = 1 RETURNING a) SELECT a FROM x)', expect: W },
  { cls: 2, sql: 'DELETE FROM t', expect: W },
  { cls: 2, sql: 'UPDATE t SET a = 1', expect: W },
  { cls: 2, sql: "INSERT INTO t VALUES (1, 'x')", expect: W },
  { cls: 2, sql: 'MERGE INTO t USING t AS s ON t.a = s.a WHEN MATCHED THEN UPDATE SET b = s.b', expect: W },
  // Class 3 — side effects and privileges from SELECT
  { cls: 3, sql: "SELECT nextval('s')", expect: FN },
  { cls: 3, sql: "SELECT setval('s', 100)", expect: FN },
  { cls: 3, sql: 'SELECT sidefx()', expect: FN },
  { cls: 3, sql: "SELECT pg_read_file('/etc/passwd')", expect: FN },
  { cls: 3, sql: "SELECT * FROM pg_read_file('/etc/passwd')", expect: FN },
  { cls: 3, sql: "SELECT lo_import('/etc/hosts')", expect: FN },
  { cls: 3, sql: "SELECT lo_from_bytea(0, 'x')", expect: FN },
  { cls: 3, sql: "SELECT dblink_exec('dbname=postgres', 'DELETE FROM t')", expect: FN },
  { cls: 3, sql: 'SELECT pg_advisory_lock(1)', expect: FN },
  { cls: 3, sql: 'SELECT pg_sleep(60)', expect: FN },
  { cls: 3, sql: "SELECT set_config('statement_timeout', '0', false)", expect: FN },
  { cls: 3, sql: 'SELECT generate_series(1, 1e9)', expect: FN },
  { cls: 3, sql: "SELECT repeat('x', 1e9)", expect: FN },
  { cls: 3, sql: "SELECT currval('s')", expect: FN },
  { cls: 3, sql: 'SELECT lastval()', expect: FN },
  { cls: 3, sql: 'SELECT pg_try_advisory_lock(1)', expect: FN },
  { cls: 3, sql: 'SELECT pg_advisory_xact_lock(1)', expect: FN },
  { cls: 3, sql: 'SELECT pg_sleep_for(\'1 minute\')', expect: FN },
  { cls: 3, sql: "SELECT pg_read_binary_file('/etc/passwd')", expect: FN },
  { cls: 3, sql: "SELECT pg_ls_dir('.')", expect: FN },
  { cls: 3, sql: "SELECT pg_stat_file('postgresql.conf')", expect: FN },
  { cls: 3, sql: 'SELECT pg_terminate_backend(1)', expect: FN },
  { cls: 3, sql: 'SELECT pg_cancel_backend(1)', expect: FN },
  { cls: 3, sql: 'SELECT pg_reload_conf()', expect: FN },
  { cls: 3, sql: 'SELECT txid_current()', expect: FN },
  { cls: 3, sql: 'SELECT pg_current_xact_id()', expect: FN },
  { cls: 3, sql: "SELECT pg_notify('c', 'x')", expect: FN },
  { cls: 3, sql: "SELECT query_to_xml('DELETE FROM t', true, true, '')", expect: FN },
  { cls: 3, sql: "SELECT table_to_xml('customer', true, true, '')", expect: FN },
  { cls: 3, sql: "SELECT cursor_to_xml('c', 1, true, true, '')", expect: FN },
  { cls: 3, sql: "SELECT ts_stat('SELECT 1')", expect: FN },
  { cls: 3, sql: 'SELECT pg_switch_wal()', expect: FN },
  { cls: 3, sql: 'SELECT setseed(0.5)', expect: FN },
  { cls: 3, sql: 'SELECT inet_server_addr()', expect: FN },
  { cls: 3, sql: 'SELECT pg_stat_get_activity(NULL)', expect: FN },
  { cls: 3, sql: 'SELECT no_such_function(1)', expect: FN },
  { cls: 3, sql: 'SELECT U&"\\0070g_sleep"(1)', expect: FN },
  { cls: 3, sql: "SELECT pg_get_viewdef('customer_view')", expect: FN },
  { cls: 3, sql: "SELECT obj_description('t'::regclass)", expect: FN },
  { cls: 3, sql: "SELECT repeat(repeat('x', 1000), 100000000)", expect: FN },
  // Class 4 — procedural and deferred execution
  { cls: 4, sql: 'DO $$BEGIN DELETE FROM t; END$$', expect: NA },
  { cls: 4, sql: 'CALL p_commit()', expect: NA },
  { cls: 4, sql: 'PREPARE x AS DELETE FROM t', expect: NA },
  { cls: 4, sql: 'EXECUTE x', expect: NA },
  { cls: 4, sql: 'DEALLOCATE x', expect: NA },
  { cls: 4, sql: "COPY t TO PROGRAM 'id'", expect: NA },
  { cls: 4, sql: "COPY (SELECT 1) TO 'x.out'", expect: NA },
  { cls: 4, sql: 'COPY t TO STDOUT', expect: NA },
  { cls: 4, sql: 'COPY t FROM STDIN', expect: NA },
  { cls: 4, sql: 'DECLARE c CURSOR FOR SELECT 1', expect: NA },
  { cls: 4, sql: 'FETCH c', expect: NA },
  { cls: 4, sql: 'CLOSE c', expect: NA },
  { cls: 4, sql: 'CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$SELECT 1$$', expect: NA },
  { cls: 4, sql: 'CREATE RULE r AS ON SELECT TO t DO INSTEAD NOTHING', expect: NA },
  { cls: 4, sql: "LOAD 'auto_explain'", expect: NA },
  // Class 5 — locks and session state
  { cls: 5, sql: 'SELECT * FROM t FOR UPDATE', expect: NA },
  { cls: 5, sql: 'SELECT * FROM t FOR SHARE', expect: NA },
  { cls: 5, sql: 'SELECT * FROM t FOR NO KEY UPDATE', expect: NA },
  { cls: 5, sql: 'SELECT * FROM t FOR KEY SHARE SKIP LOCKED', expect: NA },
  { cls: 5, sql: 'SELECT * FROM (SELECT * FROM t FOR UPDATE) x', expect: NA },
  { cls: 5, sql: 'SELECT 1 WHERE EXISTS (SELECT 1 FROM t FOR UPDATE)', expect: NA },
  { cls: 5, sql: 'SELECT 1 FROM t, LATERAL (SELECT * FROM t FOR SHARE) z', expect: NA },
  { cls: 5, sql: 'VALUES (1) FOR UPDATE', expect: NA },
  { cls: 5, sql: 'SELECT 1 UNION SELECT 2 FOR UPDATE', expect: NA },
  { cls: 5, sql: 'LOCK TABLE t IN ACCESS EXCLUSIVE MODE', expect: NA },
  { cls: 5, sql: 'SET ROLE postgres', expect: NA },
  { cls: 5, sql: 'SET search_path = evil', expect: NA },
  { cls: 5, sql: 'SET LOCAL statement_timeout = 0', expect: NA },
  { cls: 5, sql: 'SET SESSION AUTHORIZATION postgres', expect: NA },
  { cls: 5, sql: 'RESET ALL', expect: NA },
  { cls: 5, sql: 'RESET ROLE', expect: NA },
  { cls: 5, sql: 'LISTEN x', expect: NA },
  { cls: 5, sql: 'NOTIFY x', expect: NA },
  { cls: 5, sql: 'UNLISTEN *', expect: NA },
  { cls: 5, sql: 'DISCARD ALL', expect: NA },
  { cls: 5, sql: 'SHOW search_path', expect: NA },
  { cls: 5, sql: 'VACUUM t', expect: NA },
  { cls: 5, sql: 'ANALYZE t', expect: NA },
  { cls: 5, sql: 'CLUSTER t', expect: NA },
  { cls: 5, sql: 'REINDEX TABLE t', expect: NA },
  { cls: 5, sql: 'GRANT SELECT ON t TO PUBLIC', expect: NA },
  { cls: 5, sql: 'REVOKE SELECT ON t FROM PUBLIC', expect: NA },
  { cls: 5, sql: 'CREATE EXTENSION dblink', expect: NA },
  { cls: 5, sql: 'CHECKPOINT', expect: NA },
  { cls: 5, sql: "SECURITY LABEL ON TABLE t IS 'x'", expect: NA },
  { cls: 5, sql: "COMMENT ON TABLE t IS 'x'", expect: NA },
  { cls: 5, sql: 'TRUNCATE t', expect: NA },
  { cls: 5, sql: 'DROP TABLE t', expect: NA },
  { cls: 5, sql: "ALTER SYSTEM SET work_mem = '1GB'", expect: NA },
  { cls: 5, sql: 'REFRESH MATERIALIZED VIEW mv', expect: NA },
];

/**
 * Dangerous calls for the nesting generator (class 3): each is refused wherever it appears.
 * Written unqualified; the generator also schema-qualifies and quotes them.
 */
export const DANGEROUS_CALLS: Array<{ fn: string; args: string }> = [
  { fn: 'nextval', args: "'s'" },
  { fn: 'setval', args: "'s', 100" },
  { fn: 'sidefx', args: '' },
  { fn: 'pg_read_file', args: "'/etc/passwd'" },
  { fn: 'lo_import', args: "'/etc/hosts'" },
  { fn: 'lo_from_bytea', args: "0, 'x'" },
  { fn: 'dblink_exec', args: "'dbname=postgres', 'DELETE FROM t'" },
  { fn: 'pg_advisory_lock', args: '1' },
  { fn: 'pg_sleep', args: '60' },
  { fn: 'set_config', args: "'statement_timeout', '0', false" },
  { fn: 'txid_current', args: '' },
  { fn: 'pg_notify', args: "'c', 'x'" },
  { fn: 'query_to_xml', args: "'DELETE FROM t', true, true, ''" },
  { fn: 'pg_terminate_backend', args: '1' },
];

/** Schemas a dangerous call may be qualified with (dblink/sidefx live in public; rest in pg_catalog). */
export const CALL_SCHEMA: Record<string, string> = { sidefx: 'public', dblink_exec: 'public' };

/** Statements that write, for embedding in read-shaped wrappers (class 2). */
export const HIDDEN_WRITES: string[] = [
  'DELETE FROM t RETURNING a, b',
  "INSERT INTO t VALUES (1, 'x') RETURNING a, b",
  'UPDATE t SET a = a + 1 RETURNING a, b',
  'INSERT INTO public.t SELECT a, b FROM t RETURNING *',
  'DELETE FROM "t" WHERE a IN (SELECT a FROM t) RETURNING *',
];

/** The legitimate list at the end of sql-safety.md, each construct at least once, plus more. */
export const LEGIT: string[] = [
  // CTEs
  'WITH top AS (SELECT customer_id, sum(total) AS s FROM invoice GROUP BY customer_id) SELECT c.first_name, top.s FROM top JOIN customer c USING (customer_id) ORDER BY top.s DESC LIMIT 5',
  'WITH RECURSIVE chain(employee_id, reports_to, depth) AS (SELECT employee_id, reports_to, 0 FROM employee WHERE reports_to IS NULL UNION ALL SELECT e.employee_id, e.reports_to, c.depth + 1 FROM employee e JOIN chain c ON e.reports_to = c.employee_id) SELECT * FROM chain',
  // window functions
  'SELECT name, milliseconds, rank() OVER (PARTITION BY album_id ORDER BY milliseconds DESC) FROM track',
  'SELECT row_number() OVER w, name FROM track WINDOW w AS (PARTITION BY album_id ORDER BY track_id)',
  'SELECT sum(total) OVER (ORDER BY invoice_date ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM invoice',
  // WITHIN GROUP
  'SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY total) FROM invoice',
  'SELECT mode() WITHIN GROUP (ORDER BY billing_country) FROM invoice',
  // TABLE t, VALUES
  'TABLE t',
  'VALUES (1),(2)',
  "SELECT * FROM (VALUES (1, 'a'), (2, 'b')) AS v(id, label)",
  // EXPLAIN without ANALYZE
  'EXPLAIN SELECT * FROM t',
  "EXPLAIN (FORMAT JSON, VERBOSE, COSTS false) SELECT a FROM t WHERE b = 'x'",
  // JSON operators
  `SELECT '{"a":1}'::jsonb -> 'a', '{"a":{"b":2}}'::jsonb #>> '{a,b}', '{"a":1}'::jsonb ? 'a', '{"a":1}'::jsonb @> '{"a":1}'`,
  "SELECT jsonb_build_object('id', artist_id, 'name', name) FROM artist",
  `SELECT key, value FROM jsonb_each('{"a":1}'::jsonb) AS j`,
  // generate_series
  'SELECT generate_series(1, 10)',
  'SELECT * FROM generate_series(1, 10)',
  'SELECT g FROM generate_series(1, 10) AS g',
  // LATERAL
  'SELECT a.title, x.name FROM album a, LATERAL (SELECT name FROM track WHERE track.album_id = a.album_id ORDER BY milliseconds DESC LIMIT 1) x',
  'SELECT a.title, x.n FROM album a CROSS JOIN LATERAL (SELECT count(*) AS n FROM track t WHERE t.album_id = a.album_id) x',
  // DISTINCT ON
  'SELECT DISTINCT ON (customer_id) customer_id, invoice_date, total FROM invoice ORDER BY customer_id, invoice_date DESC',
  // GROUPING SETS
  'SELECT billing_country, billing_city, sum(total) FROM invoice GROUP BY GROUPING SETS ((billing_country), (billing_country, billing_city), ())',
  'SELECT billing_country, sum(total) FROM invoice GROUP BY ROLLUP (billing_country)',
  'SELECT billing_country, billing_state, count(*) FROM invoice GROUP BY CUBE (billing_country, billing_state)',
  // casts
  'SELECT CAST(total AS text), total::numeric(10,2), invoice_date::date FROM invoice',
  "SELECT '2024-01-01'::date + 1, interval '1 day' * 2",
  // ILIKE
  "SELECT first_name FROM customer WHERE email ILIKE '%@gmail.com'",
  // now()
  'SELECT now()',
  "SELECT invoice_id FROM invoice WHERE invoice_date > now() - interval '30 days'",
  // comments
  '/* a comment */ SELECT 1 -- trailing',
  'SELECT /* inline */ a -- x\nFROM t',
  // quoted identifiers
  'SELECT "first_name", "Customer".email FROM customer AS "Customer"',
  'SELECT "Id", id FROM "MixedCase"',
  // more everyday SQL
  'SELECT count(*) FROM track',
  'SELECT album_id, count(*) FILTER (WHERE milliseconds > 300000) FROM track GROUP BY album_id HAVING count(*) > 10',
  'SELECT * FROM artist NATURAL JOIN album',
  'SELECT name FROM artist UNION SELECT title FROM album',
  'SELECT name FROM artist INTERSECT SELECT name FROM genre EXCEPT SELECT name FROM media_type ORDER BY 1',
  'SELECT current_date, current_timestamp, localtime',
  "SELECT coalesce(company, 'n/a'), nullif(state, ''), greatest(1, 2) FROM customer",
  "SELECT CASE WHEN total > 10 THEN 'big' ELSE 'small' END FROM invoice",
  'SELECT EXISTS (SELECT 1 FROM invoice i WHERE i.customer_id = c.customer_id) FROM customer c',
  'SELECT (SELECT max(total) FROM invoice i WHERE i.customer_id = c.customer_id) AS max_total FROM customer c',
  "SELECT array_agg(name ORDER BY name), string_agg(name, ', ') FROM genre",
  "SELECT name FROM track WHERE genre_id IN (SELECT genre_id FROM genre WHERE name = 'Rock') AND unit_price BETWEEN 0.5 AND 1.5",
  "SELECT extract(year FROM invoice_date), date_trunc('month', invoice_date) FROM invoice",
  "SELECT to_char(invoice_date, 'YYYY-MM'), lower(billing_city), upper(billing_country), length(billing_address) FROM invoice",
  "SELECT substring(name from 1 for 3), position('a' in name), trim(both ' ' from name), name || '!' FROM artist",
  'SELECT $1::int + 1',
  'SELECT track_id FROM track t TABLESAMPLE BERNOULLI (10) REPEATABLE (42)',
  'SELECT x FROM unnest(ARRAY[1,2,3]) AS x',
  'SELECT * FROM unnest(ARRAY[1,2,3]) WITH ORDINALITY AS u(v, n)',
  'SELECT random(), gen_random_uuid()',
  "SELECT a FROM t WHERE b ~ '^x' AND b !~* 'y' AND b SIMILAR TO 'z%'",
  'SELECT t.*, c.customer_id FROM t CROSS JOIN customer c LIMIT 1',
  'SELECT e.first_name, m.first_name AS manager FROM employee e LEFT JOIN employee m ON e.reports_to = m.employee_id',
  'SELECT name FROM genre g WHERE NOT EXISTS (SELECT FROM track WHERE track.genre_id = g.genre_id)',
  'SELECT public.t.a FROM public.t',
  'SELECT ARRAY(SELECT name FROM genre), ROW(1, 2)',
  'SELECT b COLLATE "C" FROM t ORDER BY 1',
  'SELECT count(DISTINCT customer_id) FROM invoice',
  'SELECT a FROM t ORDER BY a FETCH FIRST 3 ROWS ONLY',
  "SELECT 'x' IS DISTINCT FROM 'y', 1 = ANY(ARRAY[1,2]), 2 > ALL(ARRAY[1])",
  "SELECT format('%s-%s', a, b), regexp_replace(b, 'x', 'y', 'g'), split_part(b, ',', 1) FROM t",
  'SELECT md5(b) FROM t',
  "SELECT a, b FROM t WHERE (a, b) IN (SELECT 1, 'x')",
  'SELECT json_agg(t) FROM t',
  'SELECT to_jsonb(a) FROM t',
  'SELECT t.x, s.t.y FROM s.t',
];

// ---------------------------------------------------------------------------------------------
// Generators of variants (used by the unit corpus test and the integration replay)
// ---------------------------------------------------------------------------------------------
export const SEPARATORS = [' ', '\n', '\t', '  ', '\r\n', ' /* c */ ', ' /**/', ' --c\n', ' /* nested /* x */ y */ ', '\n--\n'];

/**
 * Keyword pairs PostgreSQL's grammar resolves with one token of lookahead (WITH ORDINALITY,
 * NOT IN, NULLS FIRST, …). libpg-query 18.1.5 fails to parse them when a comment separates the two
 * words (the server accepts it); that discrepancy only causes a refusal, so variants keep these
 * pairs separated by a plain space.
 */
export const LOOKAHEAD_PAIRS = new Set(
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
export function variantOf(sql: string): fc.Arbitrary<string> {
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

/** Positions where a dangerous call `%C%` is embedded (class 3 nesting). */
export const CALL_CONTEXTS: string[] = [
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

/** A dangerous call spelled in any case, quoted, schema-qualified, with gaps. */
export const callArb: fc.Arbitrary<string> = fc
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

/** Read-shaped wrappers around a hidden write `%W%` and the verdict each must get (class 2). */
export const WRITE_CONTEXTS: Array<[string, 'write' | 'statement_not_allowed']> = [
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
