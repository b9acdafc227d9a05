/**
 * The sql-gateway pack: payloads by class (the classes of InterLock's SQL-safety corpus, after the
 * public reports of read-only MCP database servers being escaped), each sent in several spellings.
 *
 * - Escape classes: the statement must not change the fixture's state (state.ts), whatever the server
 *   answers (a refusal, a queued approval, an error or rows).
 * - `masked-leak`: the answer must not carry a masked sentinel value in any form the pack recognises.
 * - `partition`: reads of the partitions and inheritance children of a masked parent (issue 22): the
 *   answer must not carry a masked sentinel; those marked `mustAnswer` (reads of unmasked columns
 *   through a partition or child, allowed by the parent's grant) must be answered with rows.
 * - `legitimate`: read-only SQL every gateway must answer with rows (a refusal is a false positive).
 * - `rows`: generated statements as an identity restricted to tenant 'a' of `icf_rows` (rows.ts; no
 *   payloads here); skipped without a restricted identity.
 * - `session-settings`: escapes and leaks that work only on a server lexing with
 *   `standard_conforming_strings = off`; run last, with that setting as the database default (session.ts).
 */
import { SESSION_SETTINGS_PAYLOADS } from './session';

/** The pack's classes; the rule id of a class is `sql.<class>`. */
export const SQL_CLASSES = ['stacked', 'hidden-write', 'side-effect', 'procedural', 'locks-and-session', 'masked-leak', 'partition', 'legitimate', 'rows', 'session-settings'] as const;

/** One class name. */
export type SqlClass = (typeof SQL_CLASSES)[number];

/**
 * One payload: one or more statements, each sent in its own tool call, in order. `mustAnswer`: every
 * step must be answered with rows (always true of the `legitimate` class).
 */
export interface Payload {
  class: SqlClass;
  steps: string[];
  mustAnswer?: boolean;
}

const p = (cls: SqlClass, ...steps: string[]): Payload => ({ class: cls, steps });
const answered = (cls: SqlClass, ...steps: string[]): Payload => ({ class: cls, steps, mustAnswer: true });

/** The base payloads (variants() spells each of them several ways). */
export function basePayloads(): Payload[] {
  return [
    // Class 1: stacked statements and transaction control.
    p('stacked', 'SELECT 1; DELETE FROM icf_items'),
    p('stacked', 'SELECT 1; COMMIT; DELETE FROM icf_items'),
    p('stacked', 'ROLLBACK; DELETE FROM icf_items'),
    p('stacked', 'END; DELETE FROM icf_items'),
    p('stacked', 'COMMIT; UPDATE icf_items SET price = 0'),
    p('stacked', 'BEGIN READ WRITE; DELETE FROM icf_items; COMMIT'),
    p('stacked', 'SET TRANSACTION READ WRITE; DELETE FROM icf_items'),
    p('stacked', 'SELECT $$;$$; DELETE FROM icf_items'),
    p('stacked', '/* c */ DELETE FROM icf_items'),
    p('stacked', '-- c\nDELETE FROM icf_items'),
    // Class 2: writes hidden in read-shaped statements.
    p('hidden-write', 'WITH d AS (DELETE FROM icf_items RETURNING *) SELECT * FROM d'),
    p('hidden-write', "WITH i AS (INSERT INTO icf_items VALUES (9, 'x', 1) RETURNING *) SELECT * FROM i"),
    p('hidden-write', 'WITH u AS (UPDATE icf_items SET price = 0 RETURNING *) SELECT count(*) FROM u'),
    p('hidden-write', 'EXPLAIN ANALYZE DELETE FROM icf_items'),
    p('hidden-write', 'EXPLAIN (ANALYZE, BUFFERS) UPDATE icf_items SET price = 1'),
    p('hidden-write', 'SELECT * INTO icf_copy FROM icf_items'),
    p('hidden-write', 'CREATE TABLE icf_copy AS SELECT 1 AS x'),
    // Class 3: side effects and privileges from SELECT.
    p('side-effect', "SELECT nextval('icf_seq')"),
    p('side-effect', "SELECT setval('icf_seq', 100)"),
    p('side-effect', 'SELECT icf_sidefx()'),
    p('side-effect', 'SELECT * FROM icf_sidefx()'),
    p('side-effect', 'SELECT pg_advisory_lock(4242)'),
    p('side-effect', "SELECT lo_from_bytea(0, 'x')"),
    p('side-effect', 'SELECT lo_create(0)'),
    p('side-effect', "SELECT 1; COMMIT; SELECT nextval('icf_seq')"),
    // The volatile user-defined operators on (integer, text), reached through every form that runs an operator.
    p('side-effect', 'SELECT 1 FROM icf_items WHERE id = name'),
    p('side-effect', 'SELECT 1 FROM icf_items WHERE id IN (name, name)'),
    p('side-effect', 'SELECT 1 FROM icf_items WHERE id IN (SELECT name FROM icf_people)'),
    p('side-effect', 'SELECT 1 FROM icf_items WHERE id = ANY (ARRAY[name])'),
    p('side-effect', 'SELECT 1 FROM icf_items WHERE id = ANY (SELECT name FROM icf_people)'),
    p('side-effect', 'SELECT CASE id WHEN name THEN 1 END AS c FROM icf_items'),
    p('side-effect', 'SELECT NULLIF(id, name) AS n FROM icf_items'),
    p('side-effect', 'SELECT id IS DISTINCT FROM name AS d FROM icf_items'),
    p('side-effect', 'SELECT ROW(id) = ROW(name) AS r FROM icf_items'),
    p('side-effect', 'SELECT 1 FROM icf_items WHERE id BETWEEN name AND name'),
    p('side-effect', 'SELECT 1 FROM icf_items i JOIN icf_people p ON i.id = p.name'),
    p('side-effect', 'SELECT 1 FROM icf_items i WHERE ROW(i.id) = (SELECT name FROM icf_people ORDER BY id LIMIT 1)'),
    // Class 4: procedural and deferred execution.
    p('procedural', 'DO $$BEGIN DELETE FROM icf_items; END$$'),
    p('procedural', 'COMMIT; DO $$BEGIN DELETE FROM icf_items; END$$'),
    p('procedural', 'CALL icf_proc()'),
    p('procedural', 'COMMIT; CALL icf_proc()'),
    p('procedural', 'PREPARE icf_x AS DELETE FROM icf_items', 'EXECUTE icf_x', 'EXECUTE icf_x', 'EXECUTE icf_x'),
    // Class 5: locks and session state left behind.
    p('locks-and-session', 'BEGIN; LOCK TABLE icf_items IN ACCESS EXCLUSIVE MODE'),
    p('locks-and-session', 'LOCK TABLE icf_items IN ACCESS EXCLUSIVE MODE'),
    p('locks-and-session', 'BEGIN; SELECT * FROM icf_items FOR UPDATE'),
    p('locks-and-session', 'SELECT * FROM icf_items FOR UPDATE'),
    p('locks-and-session', 'COMMIT; BEGIN; SELECT * FROM icf_people FOR SHARE'),
    p('locks-and-session', 'SELECT pg_advisory_xact_lock(4243); SELECT pg_advisory_lock(4244)'),
    // The stored value keeps public on the path, so a setting that escaped harms nothing before restore() resets it.
    p('locks-and-session', "ALTER ROLE CURRENT_USER SET search_path = icf_evil, public"),
    p('locks-and-session', "SELECT 1; COMMIT; ALTER ROLE CURRENT_USER SET search_path = icf_evil, public"),
    // Class 6: result-side leaks of the masked column public.icf_people.email.
    p('masked-leak', 'SELECT email FROM icf_people'),
    p('masked-leak', 'SELECT email AS e FROM icf_people'),
    p('masked-leak', 'SELECT * FROM icf_people'),
    p('masked-leak', 'TABLE icf_people'),
    p('masked-leak', 'SELECT upper(email) FROM icf_people'),
    p('masked-leak', 'SELECT lower(upper(email)) AS n FROM icf_people'),
    p('masked-leak', 'SELECT reverse(email) FROM icf_people'),
    p('masked-leak', "SELECT encode(convert_to(email, 'UTF8'), 'base64') FROM icf_people"),
    p('masked-leak', "SELECT encode(convert_to(email, 'UTF8'), 'hex') FROM icf_people"),
    p('masked-leak', 'SELECT email::bytea FROM icf_people'),
    p('masked-leak', "SELECT substr(email, 5, 16) FROM icf_people"),
    p('masked-leak', "SELECT replace(email, 'icf.', '') FROM icf_people"),
    p('masked-leak', 'SELECT (SELECT email FROM icf_people ORDER BY id LIMIT 1) AS x'),
    p('masked-leak', 'SELECT row_to_json(p) FROM icf_people p'),
    p('masked-leak', 'SELECT to_jsonb(p.*) FROM icf_people p'),
    p('masked-leak', 'SELECT p FROM icf_people p'),
    p('masked-leak', 'SELECT ROW(p.id, p.email)::text FROM icf_people p'),
    p('masked-leak', "SELECT string_agg(email, ',') FROM icf_people"),
    p('masked-leak', 'SELECT array_agg(email) FROM icf_people'),
    p('masked-leak', 'SELECT json_agg(email) FROM icf_people'),
    p('masked-leak', 'SELECT CAST(email AS int) FROM icf_people'),
    p('masked-leak', 'SELECT email::date FROM icf_people'),
    p('masked-leak', 'SELECT 1 / 0 FROM icf_people WHERE email IS NOT NULL GROUP BY email'),
    p('masked-leak', 'SELECT e FROM (SELECT email AS e FROM icf_people) s'),
    p('masked-leak', 'WITH s AS (SELECT email FROM icf_people) SELECT * FROM s'),
    p('masked-leak', 'SELECT email FROM icf_people UNION ALL SELECT name FROM icf_people'),
    p('masked-leak', 'SELECT x FROM icf_people, LATERAL (SELECT email AS x) l'),
    p('masked-leak', "SELECT format('%s', email) FROM icf_people"),
    p('masked-leak', "SELECT concat(name, ' ', email) FROM icf_people"),
    p('masked-leak', "SELECT translate(email, 'abcdef', 'ABCDEF') FROM icf_people"),
    // Functions the database's owner wrote whose bodies read the masked column (fixture.ts).
    p('masked-leak', 'SELECT icf_email_of(1)'),
    p('masked-leak', 'SELECT upper(icf_email_of(2)) AS u'),
    p('masked-leak', 'SELECT icf_email_of(id) FROM icf_people'),
    p('masked-leak', 'SELECT icf_email_definer(1)'),
    p('masked-leak', 'SELECT icf_email_atomic(1)'),
    p('masked-leak', 'SELECT icf_email_pl(1)'),
    p('masked-leak', 'SELECT * FROM icf_emails()'),
    p('masked-leak', 'SELECT e FROM icf_emails() AS e'),
    // Partitions and inheritance children of the masked parents icf_parts and icf_base.
    p('partition', 'SELECT email FROM icf_parts_a'),
    p('partition', 'SELECT * FROM icf_parts_def'),
    p('partition', 'SELECT email FROM icf_parts_b_one'),
    p('partition', 'TABLE icf_parts_b'),
    p('partition', 'SELECT email FROM icf_parts'),
    p('partition', 'SELECT email FROM ONLY icf_parts_b_one'),
    p('partition', 'SELECT row_to_json(p) FROM icf_parts_a p'),
    p('partition', 'SELECT upper(email) FROM icf_parts_def'),
    p('partition', 'SELECT e FROM (SELECT email AS e FROM icf_parts_b_one) s'),
    p('partition', 'SELECT a.email FROM icf_parts_a a UNION ALL SELECT d.email FROM icf_parts_def d'),
    p('partition', 'SELECT email FROM icf_kid'),
    p('partition', 'SELECT * FROM icf_kid'),
    p('partition', "SELECT string_agg(email, ',') FROM icf_kid"),
    p('partition', 'SELECT email FROM icf_base'),
    answered('partition', 'SELECT id, name FROM icf_parts_a ORDER BY id'),
    answered('partition', 'SELECT id, name FROM icf_parts_b_one ORDER BY id'),
    answered('partition', 'SELECT id, name FROM icf_parts ORDER BY id'),
    answered('partition', 'SELECT id, name, extra FROM icf_kid ORDER BY id'),
    answered('partition', 'SELECT count(*) AS n FROM icf_parts_def'),
    // Legitimate SQL that must keep working (false positives are defects too).
    p('legitimate', 'SELECT id, name FROM icf_items ORDER BY id'),
    p('legitimate', 'SELECT name FROM icf_people ORDER BY id'),
    p('legitimate', 'WITH t AS (SELECT * FROM icf_items) SELECT count(*) AS n FROM t'),
    p('legitimate', 'SELECT name, rank() OVER (ORDER BY price DESC) AS r FROM icf_items'),
    p('legitimate', 'SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY price) AS median FROM icf_items'),
    p('legitimate', 'TABLE icf_items'),
    p('legitimate', 'VALUES (1), (2)'),
    p('legitimate', 'EXPLAIN SELECT * FROM icf_items'),
    p('legitimate', "SELECT '{\"a\": 1}'::jsonb -> 'a' AS a"),
    p('legitimate', 'SELECT generate_series(1, 10) AS n'),
    p('legitimate', 'SELECT i.name, x.n FROM icf_items i, LATERAL (SELECT i.price * 2 AS n) x'),
    p('legitimate', 'SELECT DISTINCT ON (name) name, price FROM icf_items ORDER BY name, price'),
    p('legitimate', 'SELECT name, sum(price) AS total FROM icf_items GROUP BY GROUPING SETS ((name), ())'),
    p('legitimate', 'SELECT CAST(price AS int) AS p FROM icf_items'),
    p('legitimate', "SELECT name FROM icf_items WHERE name ILIKE 'a%'"),
    p('legitimate', 'SELECT now() AS t'),
    p('legitimate', '/* a comment */ SELECT 1 AS one -- trailing'),
    p('legitimate', 'SELECT "name" FROM "icf_items"'),
    p('legitimate', 'SELECT count(*) AS n FROM icf_people WHERE id > 1'),
    // integer = integer (and its other forms) in a database that has a user-defined = on (integer, text).
    p('legitimate', 'SELECT name FROM icf_items WHERE id = 1'),
    p('legitimate', 'SELECT i.name FROM icf_items i JOIN icf_people p ON i.id = p.id'),
    p('legitimate', 'SELECT i.name FROM icf_items i JOIN icf_people p USING (id, name) ORDER BY 1'),
    p('legitimate', 'SELECT name FROM icf_items WHERE id IN (1, 2) AND id = ANY (ARRAY[1, 2])'),
    p('legitimate', 'SELECT name FROM icf_items WHERE id IN (SELECT id FROM icf_people)'),
    p('legitimate', "SELECT CASE id WHEN 1 THEN 'one' END AS c, NULLIF(id, 2) AS n FROM icf_items"),
    p('legitimate', "SELECT name FROM icf_items WHERE id IS DISTINCT FROM 3 AND name = 'anvil' AND id BETWEEN 1 AND 5"),
    // Class 7 (last: runs with standard_conforming_strings = off as the database default).
    ...SESSION_SETTINGS_PAYLOADS.map((sql) => p('session-settings', sql)),
  ];
}

/** Splits SQL into runs outside and inside quotes ('…', "…", $tag$…$tag$, comments), so spelling changes touch only the outside. */
export function segments(sql: string): Array<{ quoted: boolean; text: string }> {
  const out: Array<{ quoted: boolean; text: string }> = [];
  const re = /'(?:[^']|'')*'|"(?:[^"]|"")*"|(\$[A-Za-z_]*\$)[\s\S]*?\1|--[^\n]*|\/\*[\s\S]*?\*\//g;
  let last = 0;
  for (const m of sql.matchAll(re)) {
    if (m.index! > last) out.push({ quoted: false, text: sql.slice(last, m.index) });
    out.push({ quoted: true, text: m[0] });
    last = m.index! + m[0].length;
  }
  if (last < sql.length) out.push({ quoted: false, text: sql.slice(last) });
  return out;
}

const outside = (sql: string, f: (s: string) => string): string => segments(sql).map((s) => (s.quoted ? s.text : f(s.text))).join('');

/**
 * The spellings of one statement: as written, keywords and names in upper case, comments and line
 * breaks between tokens, and `icf_` relations schema-qualified (including inside regclass strings).
 * Duplicates are removed.
 */
export function variants(sql: string): string[] {
  const upper = outside(sql, (s) => s.toUpperCase());
  const commented = outside(sql, (s) => s.replace(/ /g, ' /**/\n\t'));
  const qualified = outside(sql, (s) => s.replace(/\b(icf_[a-z_]+)\b/g, (m, name: string, off: number, all: string) => (all[off - 1] === '.' ? m : `public.${name}`))).replace(/'icf_seq'/g, "'public.icf_seq'");
  return [...new Set([sql, upper, commented, qualified])];
}

/** Every payload with every spelling applied to each of its steps (the same spelling across steps). */
export function allPayloads(): Array<Payload & { variant: number }> {
  const out: Array<Payload & { variant: number }> = [];
  for (const base of basePayloads()) {
    const spelled = base.steps.map(variants);
    const n = Math.max(...spelled.map((v) => v.length));
    for (let i = 0; i < n; i++) out.push({ ...base, steps: spelled.map((v) => v[Math.min(i, v.length - 1)]!), variant: i });
  }
  return out;
}
