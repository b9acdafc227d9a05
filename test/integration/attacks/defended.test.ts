/**
 * Red-team attacks that InterLock DEFENDS today, through the whole governed gateway on real
 * PostgreSQL (Chinook demo: demo-agent / demo-analyst; e-mail partially and phone fully masked;
 * employee not readable; playlist writes go through approval). Each test asserts the safe outcome
 * (refused, queued, masked) AND that the source database did not change.
 *
 * Attacks that succeed are in found.test.ts.
 */
import { approveAndExecute } from '../../../src/approvals/execute';
import { listApprovals } from '../../../src/control/approvals';
import { addPolicy } from '../../../src/control/policies';
import { disableIdentity } from '../../../src/control/identities';
import { revokeApiKey, createApiKey, listApiKeys } from '../../../src/control/keys';
import { revokeGrant, grantRole } from '../../../src/control/grants';
import { upsertRole } from '../../../src/control/roles';
import { startAttackEnv, query, classify, callTool, sourceState, readerSessions, narrowIdentity, leaks, type AttackEnv, type Answer } from './harness';

let a: AttackEnv;
beforeAll(async () => {
  a = await startAttackEnv();
}, 120_000);
afterAll(async () => a?.close());

/** Runs every statement; returns those whose answer kind is not in `allowed`. */
async function offenders(sqls: string[], allowed: Answer['kind'][]): Promise<Array<{ sql: string; kind: string; detail: string }>> {
  const bad: Array<{ sql: string; kind: string; detail: string }> = [];
  for (const sql of sqls) {
    const r = await query(a, sql);
    if (!allowed.includes(r.kind)) bad.push({ sql, kind: r.kind, detail: r.raw.slice(0, 240) });
  }
  return bad;
}

/** Case, comment, whitespace and quoting variants of a statement (keywords and identifiers). */
function variants(sql: string): string[] {
  const upper = sql.replace(/\b[a-z_]+\b/g, (w) => w.toUpperCase());
  const mixed = sql.replace(/\b[a-z_]+\b/g, (w, i: number) => (i % 2 ? w.toUpperCase() : w));
  return [sql, upper, mixed, sql.replace(/ /g, '\n\t'), sql.replace(/ /g, ' /* x */ '), sql.replace(/ /g, ' --c\n ')];
}

async function approvalCount(): Promise<number> {
  return (await listApprovals(a.env.db, {})).length;
}

// ---------------------------------------------------------------------------------------------
// Class 1 — stacked statements and transaction control
// ---------------------------------------------------------------------------------------------
test('class 1: stacked statements and transaction control are refused in every variant', async () => {
  const before = await sourceState(a);
  const base = [
    'SELECT 1; DROP TABLE playlist',
    'SELECT 1; COMMIT; DELETE FROM playlist',
    'ROLLBACK; DELETE FROM playlist',
    'END; DELETE FROM playlist',
    'BEGIN READ WRITE; DELETE FROM playlist; COMMIT',
    'SET TRANSACTION READ WRITE; DELETE FROM playlist',
    'START TRANSACTION',
    'COMMIT',
    'SAVEPOINT s',
    'PREPARE TRANSACTION \'x\'',
    '/* c */ DROP TABLE playlist',
    '--c\nDROP TABLE playlist',
    'SELECT $$;$$; DELETE FROM playlist',
    'SELECT $x$ $$ ; $x$; DELETE FROM playlist',
    "SELECT ';'; DELETE FROM playlist",
    'SELECT 1 /* ; */ ; DELETE FROM playlist',
    'SELECT 1;;DELETE FROM playlist',
  ];
  const bad = await offenders(base.flatMap(variants), ['refused', 'invalid']);
  expect(bad).toEqual([]);
  // NUL byte truncation trick and empty statements
  for (const sql of ['SELECT 1\u0000; DELETE FROM playlist', ' ', ';', '-- only a comment']) {
    expect(['invalid', 'refused']).toContain((await query(a, sql)).kind);
  }
  expect(await sourceState(a)).toBe(before);
}, 120_000);

// ---------------------------------------------------------------------------------------------
// Class 2 — writes hidden in read-shaped statements
// ---------------------------------------------------------------------------------------------
test('class 2: writes hidden in CTEs, EXPLAIN ANALYZE, SELECT INTO, ON CONFLICT, MERGE never run on the call', async () => {
  const before = await sourceState(a);
  const queuedOrRefused = [
    'WITH d AS (DELETE FROM playlist RETURNING *) SELECT * FROM d',
    'WITH d AS (DELETE FROM playlist_track RETURNING *) SELECT count(*) FROM d',
    "WITH i AS (INSERT INTO playlist (playlist_id, name) VALUES (9001, 'x') RETURNING *) SELECT * FROM i",
    "WITH u AS (UPDATE playlist SET name = 'pwned' RETURNING *) SELECT 1",
    "WITH m AS (MERGE INTO playlist p USING (VALUES (1)) v(id) ON p.playlist_id = v.id WHEN MATCHED THEN UPDATE SET name = 'x' RETURNING p.*) SELECT * FROM m",
    'WITH a AS (SELECT 1), d AS (DELETE FROM playlist RETURNING 1) SELECT * FROM a',
    'WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 2), d AS (DELETE FROM playlist RETURNING 1) SELECT * FROM r',
    "INSERT INTO playlist (playlist_id, name) VALUES (9002, 'x') ON CONFLICT (playlist_id) DO UPDATE SET name = 'y'",
    "INSERT INTO playlist (playlist_id, name) VALUES (1, 'x') ON CONFLICT DO NOTHING RETURNING *",
    "MERGE INTO playlist p USING (SELECT 1 AS id) s ON p.playlist_id = s.id WHEN MATCHED THEN DELETE",
    "UPDATE playlist SET name = 'x'",
    'DELETE FROM playlist',
    'DELETE FROM playlist_track USING playlist WHERE playlist.playlist_id = playlist_track.playlist_id',
    "INSERT INTO playlist SELECT 9003, 'x'",
    "INSERT INTO playlist (playlist_id, name) VALUES (9004, 'x') RETURNING (SELECT phone FROM customer LIMIT 1)",
  ];
  const bad = await offenders(queuedOrRefused.flatMap((s) => [s, s.toUpperCase().replace(/'X'|'Y'|'PWNED'/g, "'x'")]), ['queued', 'refused', 'invalid']);
  expect(bad).toEqual([]);
  const refused = [
    'EXPLAIN ANALYZE DELETE FROM playlist',
    'EXPLAIN (ANALYZE, BUFFERS) UPDATE playlist SET name = \'x\'',
    'EXPLAIN (ANALYZE) SELECT 1',
    'EXPLAIN (ANALYSE) SELECT 1',
    'EXPLAIN (analyze true, costs off) SELECT 1',
    'EXPLAIN (ANALYZE false) SELECT 1',
    'EXPLAIN ANALYZE VERBOSE SELECT 1',
    'EXPLAIN DELETE FROM playlist',
    'EXPLAIN WITH d AS (DELETE FROM playlist RETURNING *) SELECT * FROM d',
    'EXPLAIN (FORMAT JSON) SELECT * FROM employee',
    'SELECT * INTO newt FROM playlist',
    'SELECT 1 INTO TEMP tmp1',
    'CREATE TABLE x AS SELECT 1',
    'CREATE TEMP TABLE t1 (a int)',
    'CREATE MATERIALIZED VIEW mv AS SELECT 1',
    'TRUNCATE playlist',
    "INSERT INTO employee (employee_id, last_name, first_name) VALUES (999, 'x', 'y')",
    "UPDATE customer SET email = 'x' WHERE customer_id = 1",
    "WITH d AS (UPDATE customer SET phone = 'x' RETURNING *) SELECT * FROM d",
    'DELETE FROM invoice WHERE invoice_id = 1',
  ];
  expect(await offenders(refused, ['refused', 'invalid'])).toEqual([]);
  expect(await sourceState(a)).toBe(before);
}, 120_000);

// ---------------------------------------------------------------------------------------------
// Class 3 — side effects and privileges from SELECT (names hidden by case, quoting, schema, nesting)
// ---------------------------------------------------------------------------------------------
const DANGEROUS: Array<[string, string]> = [
  ['nextval', "'playlist_playlist_id_seq'"],
  ['setval', "'playlist_playlist_id_seq', 100"],
  ['currval', "'playlist_playlist_id_seq'"],
  ['set_config', "'statement_timeout', '0', false"],
  ['set_config', "'default_transaction_read_only', 'off', false"],
  ['pg_advisory_lock', '1'],
  ['pg_try_advisory_lock', '1'],
  ['pg_advisory_xact_lock', '1'],
  ['pg_advisory_lock_shared', '1'],
  ['pg_sleep', '1'],
  ['pg_sleep_for', "'1 second'"],
  ['pg_read_file', "'/etc/passwd'"],
  ['pg_read_binary_file', "'/etc/passwd'"],
  ['pg_stat_file', "'/etc/passwd'"],
  ['pg_ls_dir', "'.'"],
  ['pg_ls_logdir', ''],
  ['lo_import', "'/etc/hosts'"],
  ['lo_from_bytea', "0, 'x'"],
  ['lo_create', '0'],
  ['lo_unlink', '1'],
  ['loread', '0, 1'],
  ['dblink_exec', "'dbname=postgres', 'DELETE FROM playlist'"],
  ['dblink', "'dbname=postgres', 'SELECT 1'"],
  ['pg_terminate_backend', 'pg_backend_pid()'],
  ['pg_cancel_backend', '1'],
  ['pg_reload_conf', ''],
  ['txid_current', ''],
  ['pg_current_xact_id', ''],
  ['pg_notify', "'x', 'y'"],
  ['query_to_xml', "'select * from employee', true, true, ''"],
  ['query_to_xml_and_xmlschema', "'select 1', true, true, ''"],
  ['table_to_xml', "'employee', true, true, ''"],
  ['cursor_to_xml', "'c', 1, true, true, ''"],
  ['database_to_xml', "true, true, ''"],
  ['schema_to_xml', "'public', true, true, ''"],
  ['ts_stat', "'select to_tsvector(last_name) from employee'"],
  ['ts_rewrite', "'a'::tsquery, 'select ''a''::tsquery, ''b''::tsquery'"],
  ['pg_stat_get_activity', 'NULL'],
  ['inet_server_addr', ''],
  ['inet_client_addr', ''],
  ['inet_server_port', ''],
  ['current_query', ''],
  ['pg_relation_size', "'employee'"],
  ['pg_database_size', "'postgres'"],
  ['pg_lock_status', ''],
  ['setseed', '0.5'],
  ['pg_export_snapshot', ''],
  ['pg_create_restore_point', "'x'"],
  ['pg_switch_wal', ''],
  ['pg_logical_emit_message', "true, 'x', 'y'"],
  ['pg_replication_origin_create', "'x'"],
  ['pg_show_all_settings', ''],
  ['pg_config', ''],
  ['pg_hba_file_rules', ''],
  ['system', "'id'"],
];

test('class 3: dangerous functions are refused however the name is written or nested', async () => {
  const before = await sourceState(a);
  const wrappers = [
    (x: string) => `SELECT ${x}`,
    (x: string) => `SELECT * FROM (SELECT ${x}) q`,
    (x: string) => `WITH c AS (SELECT ${x} AS v) SELECT v FROM c`,
    (x: string) => `SELECT album_id FROM album WHERE album_id = (SELECT ${x})::text::int`,
    (x: string) => `SELECT CASE WHEN album_id > 0 THEN ${x} END FROM album`,
    (x: string) => `SELECT 1 UNION ALL SELECT ${x}`,
    (x: string) => `SELECT coalesce(${x}, ${x})`,
    (x: string) => `SELECT * FROM album, LATERAL (SELECT ${x}) l`,
    (x: string) => `SELECT count(*) FILTER (WHERE ${x} IS NOT NULL) FROM album`,
    (x: string) => `SELECT row_number() OVER (PARTITION BY ${x}) FROM album`,
    (x: string) => `SELECT album_id FROM album ORDER BY ${x}`,
    (x: string) => `SELECT album_id FROM album GROUP BY album_id HAVING ${x} IS NULL`,
    (x: string) => `SELECT album_id FROM album LIMIT (SELECT 1 WHERE ${x} IS NULL)`,
    (x: string) => `SELECT a.album_id FROM album a JOIN artist r ON ${x} IS NOT NULL`,
    (x: string) => `SELECT ARRAY[${x}]`,
    (x: string) => `SELECT jsonb_build_object('k', ${x})`,
    (x: string) => `SELECT (${x})::text`,
    (x: string) => `VALUES (${x})`,
    (x: string) => `SELECT * FROM ROWS FROM (${x}) AS f`,
    (x: string) => `SELECT * FROM ${x} AS f`,
    (x: string) => `INSERT INTO playlist (playlist_id, name) VALUES (9100, (${x})::text)`,
  ];
  const spell = (fn: string, i: number): string[] => {
    const up = fn.toUpperCase();
    return [fn, `pg_catalog.${fn}`, `"pg_catalog"."${fn}"`, `"${fn}"`, `public.${fn}`, i % 2 ? up : `PG_CATALOG.${up}`, `pg_catalog . ${fn}`];
  };
  const sqls: string[] = [];
  DANGEROUS.forEach(([fn, args], i) => {
    for (const name of spell(fn, i)) sqls.push(wrappers[(i + sqls.length) % wrappers.length](`${name}(${args})`));
    for (const w of wrappers) sqls.push(w(`${fn}(${args})`));
  });
  const bad = await offenders(sqls, ['refused', 'invalid']);
  expect(bad).toEqual([]);
  const sessions = await readerSessions(a);
  expect(sessions.advisoryLocks).toBe(0);
  expect(await sourceState(a)).toBe(before);
}, 300_000);

test('class 3: functions reached through operators, casts, domains, VARIADIC and named arguments stay harmless', async () => {
  const before = await sourceState(a);
  const refused = [
    "SELECT pg_catalog.set_config(VARIADIC ARRAY['statement_timeout', '0'])",
    "SELECT set_config(setting_name => 'statement_timeout', new_value => '0', is_local => false)",
    "SELECT pg_advisory_lock(key => 1)",
    'SELECT * FROM customer TABLESAMPLE tsm_system_rows(1)',
    'SELECT * FROM customer TABLESAMPLE tsm_system_time(1000)',
    "SELECT 'x' OPERATOR(public.===) 'y'",
    "SELECT 1 OPERATOR(pg_catalog.+) 1 FROM employee",
    'SELECT * FROM XMLTABLE(\'/a\' PASSING \'<a/>\' COLUMNS x int)',
    "SELECT * FROM JSON_TABLE('[1]', '$[*]' COLUMNS (x int PATH '$'))",
  ];
  expect(await offenders(refused, ['refused', 'invalid'])).toEqual([]);
  // Casts and type input functions that only compute (no side effects): allowed, and nothing changes.
  for (const sql of ["SELECT '(1,x,2)'::album AS r", "SELECT 'playlist'::regclass::text AS r", "SELECT '1 day'::interval AS r"]) {
    expect(['rows', 'invalid', 'refused']).toContain((await query(a, sql)).kind);
  }
  expect(await sourceState(a)).toBe(before);
});

test('class 3: XML external entities are not resolved (no file contents come back)', async () => {
  const xxe = [
    `SELECT '<!DOCTYPE f [<!ENTITY x SYSTEM "file:///etc/passwd">]><f>&x;</f>'::xml AS x`,
    `SELECT xmlparse(document '<!DOCTYPE f [<!ENTITY x SYSTEM "file:///etc/passwd">]><f>&x;</f>') AS x`,
    `SELECT xpath('/f/text()', xmlparse(document '<!DOCTYPE f [<!ENTITY x SYSTEM "file:///etc/passwd">]><f>&x;</f>'))::text AS x`,
    `SELECT xmlserialize(document xmlparse(document '<!DOCTYPE f [<!ENTITY x SYSTEM "file:///etc/hostname">]><f>&x;</f>') AS text) AS x`,
  ];
  for (const sql of xxe) {
    const r = await query(a, sql);
    expect(r.raw).not.toMatch(/root:x:0:0/);
  }
});

// ---------------------------------------------------------------------------------------------
// Class 4 — procedural and deferred execution; Class 5 — locks and session state
// ---------------------------------------------------------------------------------------------
test('classes 4 and 5: DO, CALL, PREPARE/EXECUTE, COPY, cursors, LISTEN/NOTIFY, LOCK, SET, utility statements are refused', async () => {
  const before = await sourceState(a);
  const base = [
    'DO $$BEGIN DELETE FROM playlist; END$$',
    "DO LANGUAGE plpgsql 'BEGIN DELETE FROM playlist; END'",
    'CALL p_commit()',
    'PREPARE x AS DELETE FROM playlist',
    'EXECUTE x',
    'DEALLOCATE ALL',
    "COPY playlist TO PROGRAM 'id'",
    "COPY (SELECT 1) TO '/tmp/x.out'",
    'COPY playlist TO STDOUT',
    "COPY playlist FROM PROGRAM 'id'",
    'COPY playlist FROM STDIN',
    'DECLARE c CURSOR WITH HOLD FOR SELECT 1',
    'FETCH ALL FROM c',
    'MOVE NEXT IN c',
    'CLOSE c',
    'SELECT * FROM playlist FOR UPDATE',
    'SELECT * FROM playlist FOR NO KEY UPDATE NOWAIT',
    'SELECT * FROM (SELECT * FROM playlist FOR KEY SHARE) s',
    'WITH l AS (SELECT * FROM playlist FOR SHARE) SELECT * FROM l',
    'SELECT 1 FROM album WHERE album_id IN (SELECT playlist_id FROM playlist FOR UPDATE SKIP LOCKED)',
    'LOCK TABLE playlist IN ACCESS EXCLUSIVE MODE',
    'SET ROLE postgres',
    'SET SESSION AUTHORIZATION postgres',
    'SET search_path = evil',
    'SET LOCAL statement_timeout = 0',
    'SET statement_timeout TO DEFAULT',
    'RESET ALL',
    'RESET ROLE',
    'SHOW ALL',
    'SHOW data_directory',
    'LISTEN x',
    'NOTIFY x',
    "NOTIFY x, 'payload'",
    'UNLISTEN *',
    'DISCARD ALL',
    'VACUUM playlist',
    'ANALYZE playlist',
    'CLUSTER playlist',
    'REINDEX TABLE playlist',
    'CHECKPOINT',
    "LOAD 'auto_explain'",
    'CREATE EXTENSION dblink',
    "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    'CREATE VIEW v AS SELECT * FROM employee',
    'GRANT SELECT ON employee TO PUBLIC',
    'REVOKE ALL ON playlist FROM PUBLIC',
    "ALTER SYSTEM SET statement_timeout = '0'",
    "ALTER ROLE CURRENT_USER SET statement_timeout = '0'",
    "COMMENT ON TABLE playlist IS 'x'",
    "SECURITY LABEL ON TABLE playlist IS 'x'",
    'REFRESH MATERIALIZED VIEW mv',
    "IMPORT FOREIGN SCHEMA public FROM SERVER s INTO public",
    'SET CONSTRAINTS ALL DEFERRED',
    'DROP OWNED BY CURRENT_USER',
  ];
  const bad = await offenders(base.flatMap((s) => [s, s.toLowerCase(), `/* x */ ${s}`]), ['refused', 'invalid']);
  expect(bad).toEqual([]);
  expect(await sourceState(a)).toBe(before);
}, 120_000);

test('class 5: reader sessions keep read-only, their timeouts and search_path; no advisory locks after all the attempts', async () => {
  for (let i = 0; i < 12; i++) {
    const r = await query(a, `SELECT current_setting('statement_timeout') AS st, current_setting('default_transaction_read_only') AS ro, current_setting('transaction_read_only') AS tro, current_setting('lock_timeout') AS lt, current_setting('search_path') AS sp, ${i} AS i`);
    expect(r.kind).toBe('rows');
    expect(r.rows[0]).toMatchObject({ st: '15s', ro: 'on', tro: 'on', lt: '2s' });
    expect(String(r.rows[0].sp)).not.toMatch(/evil/);
  }
  expect((await readerSessions(a)).advisoryLocks).toBe(0);
});

// ---------------------------------------------------------------------------------------------
// Authorization — relations the role does not allow, however they are reached
// ---------------------------------------------------------------------------------------------
test('authorization: employee (not granted) and system catalogues are refused in every shape', async () => {
  const sqls = [
    'SELECT * FROM employee',
    'TABLE employee',
    'SELECT * FROM ONLY employee',
    'SELECT * FROM employee*',
    'SELECT * FROM "employee"',
    'SELECT * FROM public.employee',
    'SELECT * FROM "public"."employee"',
    'SELECT * FROM U&"\\0065mployee"',
    'SELECT * FROM U&"!0065mployee" UESCAPE \'!\'',
    'SELECT * FROM PUBLIC.EMPLOYEE',
    'SELECT first_name FROM employee LIMIT 1',
    'SELECT count(*) FROM employee',
    'SELECT e FROM employee e',
    'WITH e AS (SELECT * FROM employee) SELECT * FROM e',
    'WITH e AS MATERIALIZED (SELECT * FROM employee) SELECT count(*) FROM e',
    'WITH a AS (SELECT * FROM employee), employee AS (SELECT 1) SELECT * FROM a',
    'WITH employee AS (SELECT * FROM employee) SELECT * FROM employee',
    'SELECT * FROM (WITH employee AS (SELECT 1 AS x) SELECT * FROM album) s, employee',
    '(WITH employee AS (SELECT 1 AS employee_id) SELECT employee_id FROM employee) UNION ALL SELECT employee_id FROM employee',
    'SELECT * FROM album, LATERAL (SELECT first_name FROM employee LIMIT 1) e',
    'SELECT * FROM album CROSS JOIN LATERAL (SELECT first_name FROM employee WHERE employee_id = album.artist_id) e',
    'SELECT name FROM artist UNION SELECT first_name FROM employee',
    'SELECT name FROM artist INTERSECT SELECT first_name FROM employee',
    'SELECT CASE WHEN true THEN (SELECT first_name FROM employee LIMIT 1) END',
    "SELECT coalesce((SELECT max(first_name) FROM employee), 'x')",
    'SELECT a.title FROM album a JOIN employee e ON e.employee_id = a.artist_id',
    'SELECT a.title FROM album a NATURAL JOIN employee',
    'SELECT 1 IN (SELECT employee_id FROM employee)',
    'SELECT ARRAY(SELECT first_name FROM employee)',
    'SELECT (SELECT e FROM employee e LIMIT 1)::text',
    'SELECT to_jsonb(e) FROM employee e',
    'SELECT * FROM customer c WHERE c.support_rep_id IN (SELECT employee_id FROM employee)',
    'SELECT * FROM customer c WHERE c.support_rep_id = ANY (SELECT employee_id FROM employee)',
    'SELECT * FROM track ORDER BY (SELECT max(employee_id) FROM employee)',
    'SELECT * FROM track LIMIT (SELECT count(*) FROM employee)',
    'SELECT * FROM track GROUP BY track_id HAVING count(*) < (SELECT count(*) FROM employee)',
    'SELECT row_number() OVER (PARTITION BY (SELECT 1 FROM employee LIMIT 1)) FROM album',
    'SELECT * FROM employee TABLESAMPLE SYSTEM (50)',
    'SELECT * FROM ROWS FROM (jsonb_to_record((SELECT to_jsonb(e) FROM employee e LIMIT 1)) AS (first_name text)) x',
    'MERGE INTO playlist p USING employee e ON p.playlist_id = e.employee_id WHEN MATCHED THEN DO NOTHING',
    'INSERT INTO playlist (playlist_id, name) SELECT employee_id + 9000, first_name FROM employee',
    'UPDATE playlist SET name = e.first_name FROM employee e WHERE e.employee_id = playlist.playlist_id',
    'DELETE FROM playlist USING employee e WHERE e.employee_id = playlist.playlist_id',
    'EXPLAIN SELECT * FROM employee',
    'SELECT * FROM pg_catalog.pg_authid',
    'SELECT * FROM pg_shadow',
    'SELECT * FROM pg_settings',
    'SELECT * FROM pg_stat_activity',
    'SELECT * FROM pg_roles',
    'SELECT * FROM pg_user_mappings',
    'SELECT * FROM pg_largeobject',
    'SELECT * FROM information_schema.tables',
    'SELECT * FROM information_schema.columns',
    'SELECT * FROM "pg_catalog"."pg_class"',
    'SELECT * FROM U&"\\0070g_class"',
    'SELECT * FROM pg_toast.pg_toast_2619',
    'SELECT * FROM pg_temp.x',
    'SELECT * FROM other_db.public.customer',
    'SELECT relname FROM pg_class',
  ];
  const bad = await offenders(sqls, ['refused', 'invalid']);
  expect(bad).toEqual([]);
}, 120_000);

test('authorization: a CTE named like a denied table shadows it only where PostgreSQL does', async () => {
  // PostgreSQL resolves these to the CTE, so they read nothing of employee: allowed.
  const ok = await query(a, 'WITH RECURSIVE employee AS (SELECT 1 AS x UNION ALL SELECT x + 1 FROM employee WHERE x < 3) SELECT * FROM employee');
  expect(ok.rows).toEqual([{ x: 1 }, { x: 2 }, { x: 3 }]);
  const ok2 = await query(a, 'WITH employee AS (SELECT title FROM album LIMIT 1) SELECT * FROM employee');
  expect(ok2.kind).toBe('rows');
  expect(ok2.raw).not.toMatch(/Adams|Edwards|Peacock/);
});

test('regression: a WHERE clause containing EXISTS (or the text EXISTS) is still analysed', async () => {
  // Seen during the review as an uncommitted edit of src/sql/analyzer.ts (WHERE skipped when its parse
  // tree contained "EXISTS"): denied tables were read, advisory locks taken, statement_timeout set to
  // 0 on pooled connections and a large object written (read-only transactions do not stop
  // lo_from_bytea). These must stay refused.
  const before = await sourceState(a);
  const sqls = [
    "SELECT 1 AS x FROM album WHERE EXISTS (SELECT 1 FROM employee WHERE first_name LIKE 'A%') LIMIT 1",
    "SELECT 1 AS x FROM album WHERE NOT EXISTS (SELECT 1 FROM employee) LIMIT 1",
    "SELECT 1 AS x FROM album WHERE 'EXISTS' <> '' AND pg_try_advisory_lock(4242) LIMIT 1",
    "SELECT 1 AS x FROM album WHERE EXISTS (SELECT 1) AND set_config('statement_timeout', '0', false) IS NOT NULL LIMIT 1",
    "SELECT 1 AS x FROM album WHERE EXISTS (SELECT 1) AND lo_from_bytea(0, 'written by an agent') > 0 LIMIT 1",
    "SELECT 1 AS x FROM customer WHERE EXISTS (SELECT 1) AND phone LIKE '+55%'",
  ];
  expect(await offenders(sqls, ['refused', 'invalid'])).toEqual([]);
  expect((await readerSessions(a)).advisoryLocks).toBe(0);
  expect(await sourceState(a)).toBe(before);
});

// ---------------------------------------------------------------------------------------------
// Class 6 — redaction: direct flows of masked values are masked
// ---------------------------------------------------------------------------------------------
test('class 6: masked values never appear in cleartext through aliases, expressions, casts, aggregates, rows, JSON, CTEs, unions', async () => {
  const sqls = [
    'SELECT * FROM customer',
    'SELECT phone, email FROM customer',
    'SELECT email AS x, phone AS email, customer_id AS phone FROM customer',
    'SELECT U&"\\0070hone" FROM customer',
    'SELECT "phone" FROM "public"."customer"',
    'SELECT customer.phone FROM public.customer',
    'SELECT c.phone FROM customer c',
    'SELECT (c).phone FROM customer c',
    'SELECT (c.*).phone FROM customer c',
    'SELECT c FROM customer c',
    'SELECT c::text FROM customer c',
    'SELECT row_to_json(c) FROM customer c',
    'SELECT to_jsonb(c) - \'email\' - \'phone\' FROM customer c',
    'SELECT jsonb_build_object(\'p\', phone) FROM customer',
    'SELECT json_agg(phone) FROM customer',
    'SELECT array_agg(email) FROM customer',
    'SELECT string_agg(phone, \',\') FROM customer',
    'SELECT max(phone), min(email) FROM customer',
    'SELECT ROW(phone, email) FROM customer',
    'SELECT ARRAY[phone] FROM customer',
    'SELECT phone || \'\' FROM customer',
    'SELECT lower(email), upper(phone), reverse(email), substr(phone, 1, 20) FROM customer',
    'SELECT phone::bytea, encode(convert_to(phone, \'UTF8\'), \'base64\') FROM customer',
    'SELECT phone COLLATE "C" FROM customer',
    'SELECT coalesce(phone, email), nullif(phone, \'x\'), greatest(phone, email) FROM customer',
    'SELECT CASE WHEN customer_id > 0 THEN phone END FROM customer',
    'SELECT (SELECT phone FROM customer WHERE customer_id = 1)',
    'SELECT x FROM (SELECT phone FROM customer) s(x)',
    'WITH w AS (SELECT phone AS p, email AS e FROM customer) SELECT p, e FROM w',
    'WITH RECURSIVE r(p, n) AS (SELECT phone, 1 FROM customer WHERE customer_id = 1 UNION ALL SELECT p, n + 1 FROM r WHERE n < 2) SELECT * FROM r',
    'SELECT phone FROM customer UNION ALL SELECT \'x\'',
    'SELECT \'x\' UNION ALL SELECT phone FROM customer',
    'VALUES ((SELECT phone FROM customer LIMIT 1))',
    'SELECT t.p FROM customer c, LATERAL (SELECT c.phone AS p) t',
    'SELECT * FROM customer c, LATERAL jsonb_each_text(to_jsonb(c)) e',
    'SELECT * FROM customer c, LATERAL unnest(ARRAY[c.phone, c.email]) u',
    'SELECT format(\'%s\', phone), concat(phone), concat_ws(\',\', phone) FROM customer',
    'SELECT translate(phone, \'0123456789\', \'abcdefghij\') FROM customer',
    'SELECT xmlelement(name x, phone) FROM customer',
    'SELECT json_build_array(phone)::text FROM customer',
    'SELECT to_tsvector(\'simple\', email)::text FROM customer',
    'SELECT regexp_replace(phone, \'[0-9]\', \'#\', \'g\') FROM customer',
    'SELECT split_part(email, \'@\', 2) FROM customer',
    'EXPLAIN (VERBOSE) SELECT phone FROM customer',
  ];
  // Chinook's (unmasked) fax is sometimes the phone number itself: only check phones that appear nowhere else.
  const phones = (await a.admin.query("SELECT phone, email FROM customer c WHERE phone IS NOT NULL AND NOT EXISTS (SELECT 1 FROM customer d WHERE position(c.phone in coalesce(d.fax, '')) > 0) ORDER BY customer_id LIMIT 10")).rows;
  expect(phones.length).toBeGreaterThan(3);
  for (const sql of sqls) {
    const r = await query(a, sql);
    for (const p of phones) {
      if (leaks(r.raw, p.phone) || r.raw.includes(p.email)) throw new Error(`${sql} leaked ${p.phone} / ${p.email}: ${r.raw.slice(0, 300)}`);
    }
  }
}, 120_000);

test('class 6: predicates, joins, grouping, ordering and limits on masked columns are refused', async () => {
  const sqls = [
    "SELECT 1 FROM customer WHERE email LIKE 'l%'",
    "SELECT 1 FROM customer WHERE phone = '+55 (12) 3923-5555'",
    "SELECT 1 FROM customer WHERE lower(email) ~ 'luis'",
    "SELECT 1 FROM customer WHERE (SELECT email) LIKE 'l%'",
    "SELECT 1 FROM customer c WHERE c::text LIKE '%luisg%'",
    "SELECT 1 FROM customer c WHERE to_jsonb(c)->>'phone' LIKE '+55%'",
    "SELECT 1 FROM customer c JOIN invoice i ON i.billing_address = c.email",
    'SELECT * FROM customer c1 JOIN customer c2 USING (email)',
    'SELECT * FROM customer NATURAL JOIN (SELECT email FROM customer) s',
    'SELECT email, count(*) FROM customer GROUP BY email',
    'SELECT count(*) FROM customer GROUP BY substr(phone, 1, 3)',
    'SELECT count(*) FROM customer GROUP BY ROLLUP (phone)',
    "SELECT 1 FROM customer GROUP BY customer_id HAVING max(phone) > '+5'",
    'SELECT customer_id FROM customer ORDER BY phone',
    'SELECT customer_id FROM customer ORDER BY 1, length(email)',
    'SELECT phone AS p FROM customer ORDER BY p',
    'SELECT DISTINCT ON (phone) customer_id FROM customer',
    'SELECT customer_id FROM customer LIMIT (SELECT length(phone) FROM customer WHERE customer_id = 1)',
    'SELECT customer_id FROM customer OFFSET (SELECT length(phone) FROM customer WHERE customer_id = 1)',
    "SELECT customer_id FROM customer WHERE customer_id IN (SELECT customer_id FROM customer WHERE phone LIKE '+55%')",
    "SELECT customer_id FROM customer WHERE customer_id = ANY (SELECT customer_id FROM customer WHERE email > 'm')",
    "WITH c AS (SELECT email e FROM customer) SELECT 1 FROM c WHERE e LIKE 'a%'",
    "SELECT 1 FROM (SELECT phone AS p FROM customer) s WHERE p LIKE '+55%'",
    "SELECT 1 FROM customer c, LATERAL (SELECT 1 WHERE c.phone LIKE '+55%') s",
    "SELECT phone FROM customer UNION SELECT 'x' ORDER BY 1",
    "SELECT * FROM customer TABLESAMPLE SYSTEM (50) REPEATABLE (1) WHERE email LIKE 'l%'",
    "MERGE INTO playlist p USING customer c ON p.name = c.phone WHEN MATCHED THEN DO NOTHING",
    "UPDATE playlist SET name = 'x' FROM customer c WHERE c.phone LIKE '+55%'",
  ];
  const bad = await offenders(sqls, ['refused', 'invalid']);
  expect(bad).toEqual([]);
}, 120_000);

test('class 6: the partial e-mail mask keeps at most the first character and the top-level domain', async () => {
  const r = await query(a, 'SELECT customer_id, email FROM customer ORDER BY customer_id');
  const real = new Map((await a.admin.query('SELECT customer_id, email FROM customer')).rows.map((x) => [x.customer_id, x.email as string]));
  for (const row of r.rows) {
    const e = real.get(row.customer_id)!;
    expect(row.email).not.toBe(e);
    expect(String(row.email)).toMatch(/^(.\*\*\*@\*\*\*\.[a-z.]+|\*\*\*.{0,4})$/);
  }
});

test('class 6: cached results are stored after redaction (the cache never holds a masked value)', async () => {
  await query(a, 'SELECT customer_id, phone, email FROM customer WHERE customer_id = 1');
  const again = await query(a, 'SELECT customer_id, phone, email FROM customer WHERE customer_id = 1');
  expect(again.sc.cached).toBe(true);
  const cacheText = JSON.stringify(a.env.gateway.cache.values());
  expect(leaks(cacheText, a.secret.phone)).toBe(false);
  expect(cacheText).not.toContain(a.secret.email);
});

// ---------------------------------------------------------------------------------------------
// Resource exhaustion
// ---------------------------------------------------------------------------------------------
test('resources: obvious huge generators are refused; wide rows are capped by bytes; the portal caps rows', async () => {
  for (const sql of ['SELECT generate_series(1, 1e9)', 'SELECT * FROM generate_series(1, 100000000)', "SELECT repeat('x', 1e9)", "SELECT lpad('x', 2000000000)", "SELECT generate_series(1, '1e12'::bigint)", 'SELECT generate_series(-1e10, 0)']) {
    expect((await query(a, sql)).kind).toBe('refused');
  }
  const wide = await query(a, "SELECT repeat('x', 3000000) AS x FROM generate_series(1, 5)");
  expect(wide.kind).toBe('rows');
  expect(wide.sc.truncated).toBe(true);
  expect(wide.raw.length).toBeLessThan(9 * 1024 * 1024);
  const huge = await query(a, "SELECT repeat(repeat('x', 10000000), 30) AS x");
  expect(huge.raw.length).toBeLessThan(9 * 1024 * 1024);
  const many = await query(a, 'SELECT g FROM generate_series(1, 5000000) AS g', { max_rows: 10000 });
  expect(many.rows.length).toBeGreaterThan(0);
  expect(many.rows.length).toBeLessThanOrEqual(10000); // the source's own max_rows may cap it lower
  expect(many.sc.truncated).toBe(true);
  expect((await query(a, 'SELECT 1 AS x', { max_rows: 10001 })).kind).not.toBe('rows');
  expect((await query(a, 'SELECT 1 AS alive')).rows).toEqual([{ alive: 1 }]);
}, 120_000);

test('resources: deep nesting and oversize statements are refused without hurting the gateway', async () => {
  const deep = [
    'SELECT ' + '('.repeat(30000) + '1' + ')'.repeat(30000),
    'SELECT 1' + '+1'.repeat(30000),
    'SELECT ' + 'NOT '.repeat(20000) + 'true',
    'SELECT ' + 'ARRAY['.repeat(10000) + '1' + ']'.repeat(10000),
    'SELECT ' + '(SELECT '.repeat(5000) + '1' + ')'.repeat(5000),
    'SELECT ' + 'coalesce('.repeat(3000) + '1' + ')'.repeat(3000),
    'SELECT * FROM ' + '(SELECT * FROM '.repeat(3000) + 'album' + ') s'.repeat(3000),
    'SELECT ' + 'x'.repeat(99990),
  ];
  for (const sql of deep) {
    const t = Date.now();
    const r = await query(a, sql);
    expect(['invalid', 'refused', 'transport']).toContain(r.kind);
    expect(Date.now() - t).toBeLessThan(5_000);
  }
  const wideOr = await query(a, 'SELECT 1 AS x FROM album WHERE ' + 'album_id = 1 OR '.repeat(5000) + 'false');
  expect(['rows', 'invalid', 'refused']).toContain(wideOr.kind);
  const tooLong = await query(a, 'SELECT 1 AS x' + ' '.repeat(100_001));
  expect(tooLong.kind).not.toBe('rows');
  expect((await query(a, 'SELECT 2 AS alive')).rows).toEqual([{ alive: 2 }]);
}, 120_000);

// ---------------------------------------------------------------------------------------------
// Upstream text never reaches the agent
// ---------------------------------------------------------------------------------------------
test('errors: failing statements answer a SQLSTATE class only, never driver text, host, port, role or database', async () => {
  const port = new URL(a.env.sourceUrl).port || '5432';
  const sqls = [
    'SELECT 1/0',
    "SELECT 'abc'::int",
    "SELECT phone::int FROM customer",
    "SELECT CAST(email AS int) FROM customer",
    "SELECT 'x'::regclass",
    "SELECT current_setting('data_directory')",
    "SELECT current_setting('no.such_setting')",
    "SELECT jsonb_path_query('{}', 'bad path')",
    "SELECT repeat(repeat('x', 10000000), 200)",
    'SELEC 1',
    "SELECT 'unterminated",
    'SELECT "' + 'a'.repeat(500) + '" FROM customer',
  ];
  for (const sql of sqls) {
    const r = await query(a, sql);
    const text = r.kind === 'rows' ? '' : r.raw;
    expect(text).not.toContain(a.env.demo.readerRole);
    expect(text).not.toContain(a.env.demo.databaseName);
    expect(text).not.toMatch(/127\.0\.0\.1|localhost|ECONNREFUSED|ETIMEDOUT/);
    expect(text).not.toMatch(new RegExp(`[^0-9]${port}[^0-9]`));
    expect(text).not.toContain('luisg');
    expect(text).not.toContain(a.secret.phone);
    expect(text.length).toBeLessThan(2_000);
  }
}, 60_000);

// ---------------------------------------------------------------------------------------------
// Parameters
// ---------------------------------------------------------------------------------------------
test('parameters are values, never SQL', async () => {
  const before = await sourceState(a);
  for (const p of ["1; DELETE FROM playlist", "1' OR '1'='1", '$$; DELETE FROM playlist; $$', '\\x00', "' UNION SELECT phone FROM customer --"]) {
    const r = await query(a, 'SELECT title FROM album WHERE title = $1', { params: [p] });
    expect(r.kind).toBe('rows');
    expect(r.rows).toEqual([]);
  }
  expect((await query(a, 'SELECT $1::text AS x', { params: ['a', 'b'] })).kind).toBe('invalid');
  expect((await query(a, 'SELECT $2::text AS x', { params: ['a'] })).kind).toBe('invalid');
  expect(await sourceState(a)).toBe(before);
});

// ---------------------------------------------------------------------------------------------
// Writes: queued, never executed on the call; approvals are exact, once, never self-approved
// ---------------------------------------------------------------------------------------------
test("writes: every write to a writable table is queued and nothing changes on the agent's call", async () => {
  const before = await sourceState(a);
  const n0 = await approvalCount();
  const writes = [
    "INSERT INTO playlist (playlist_id, name) VALUES (9200, 'queued')",
    "INSERT INTO playlist_track (playlist_id, track_id) VALUES (1, 1)",
    "UPDATE playlist SET name = 'renamed' WHERE playlist_id = 1",
    'DELETE FROM playlist_track WHERE playlist_id = 1',
    "MERGE INTO playlist p USING (VALUES (1, 'm')) v(id, n) ON p.playlist_id = v.id WHEN MATCHED THEN UPDATE SET name = v.n WHEN NOT MATCHED THEN INSERT VALUES (v.id, v.n)",
    "WITH x AS (INSERT INTO playlist VALUES (9201, 'cte') RETURNING *) SELECT * FROM x",
  ];
  for (const w of writes) {
    const r = await query(a, w);
    expect(r.kind).toBe('queued');
    expect(r.sc.approval_state).toBe('pending');
  }
  expect(await approvalCount()).toBe(n0 + writes.length);
  expect(await sourceState(a)).toBe(before);
});

test('approvals: self-approval is forbidden (by name and by id); concurrent approvals execute exactly once', async () => {
  const before = (await a.admin.query('SELECT count(*)::int AS n FROM playlist')).rows[0].n;
  const w = await query(a, "INSERT INTO playlist (playlist_id, name) VALUES (9300, 'once')");
  expect(w.kind).toBe('queued');
  const id = w.sc.approval_id as string;
  await expect(approveAndExecute(a.env.db, id, { operator: 'demo-agent' })).rejects.toThrow(/self_approval_forbidden/);
  await expect(approveAndExecute(a.env.db, id, { operator: a.env.demo.identityId })).rejects.toThrow(/self_approval_forbidden/);
  const results = await Promise.allSettled(Array.from({ length: 25 }, (_, i) => approveAndExecute(a.env.db, id, { operator: `ops-${i}`, connectors: a.env.gateway.connectors })));
  const executed = results.filter((r) => r.status === 'fulfilled' && r.value.state === 'executed');
  expect(executed.length).toBe(1);
  await expect(approveAndExecute(a.env.db, id, { operator: 'ops-late', connectors: a.env.gateway.connectors })).rejects.toThrow();
  const after = (await a.admin.query('SELECT count(*)::int AS n FROM playlist')).rows[0].n;
  expect(after).toBe(before + 1);
  await a.admin.query('DELETE FROM playlist WHERE playlist_id = 9300');
}, 60_000);

test('approvals: the stored statement and parameters are what runs, re-checked against the current grants', async () => {
  const w = await query(a, 'INSERT INTO playlist (playlist_id, name) VALUES ($1, $2)', { params: [9400, "x'); DELETE FROM playlist; --"] });
  expect(w.kind).toBe('queued');
  const before = (await a.admin.query('SELECT count(*)::int AS n FROM playlist')).rows[0].n;
  const r = await approveAndExecute(a.env.db, w.sc.approval_id, { operator: 'ops-params', connectors: a.env.gateway.connectors });
  expect(r.state).toBe('executed');
  const rows = (await a.admin.query('SELECT name FROM playlist WHERE playlist_id = 9400')).rows;
  expect(rows).toEqual([{ name: "x'); DELETE FROM playlist; --" }]);
  expect((await a.admin.query('SELECT count(*)::int AS n FROM playlist')).rows[0].n).toBe(before + 1);
  await a.admin.query('DELETE FROM playlist WHERE playlist_id = 9400');

  // A write queued by an identity that later loses its write grant fails at approval time.
  const narrow = await narrowIdentity(a, 'writer-revoked', ['playlist']);
  await upsertRole(a.env.db, { name: 'writer-revoked-w', statements: [{ effect: 'allow', action: 'write', resource: 'public.playlist' }, { effect: 'allow', action: 'read', resource: 'public.playlist' }] });
  await grantRole(a.env.db, { identityId: narrow.id, roleName: 'writer-revoked-w', sourceId: 'chinook' });
  a.env.gateway.store.invalidate('*');
  const q2 = await query(a, "INSERT INTO playlist (playlist_id, name) VALUES (9401, 'late')", {}, narrow.apiKey);
  expect(q2.kind).toBe('queued');
  await revokeGrant(a.env.db, { identityId: narrow.id, roleName: 'writer-revoked-w', sourceId: 'chinook' });
  const r2 = await approveAndExecute(a.env.db, q2.sc.approval_id, { operator: 'ops-recheck', connectors: a.env.gateway.connectors });
  expect(r2.state).toBe('failed');
  expect((await a.admin.query('SELECT count(*)::int AS n FROM playlist WHERE playlist_id = 9401')).rows[0].n).toBe(0);
}, 60_000);

test('approvals: agents have no tool to list, approve or reject approvals', async () => {
  const r = await fetch(a.env.url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }) });
  const names = ((await r.json()) as any).result.tools.map((t: { name: string }) => t.name) as string[];
  // interlock_approval_status only reads the caller's own approvals (issue 14); nothing decides one.
  expect(names.filter((n) => /approv|reject|admin|grant|role|policy/i.test(n))).toEqual(['interlock_approval_status']);
  for (const name of ['interlock_approve', 'approve', 'interlock_admin']) {
    const c = await callTool(a.env, name, { approval_id: 'apr_x' }, a.env.apiKey);
    expect(c.body.error?.code).toBe(-32602);
  }
  for (const path of ['/approvals', '/admin/approvals', '/mcp/approvals', '/api/approvals', '/console/api/approvals/apr_x/approve', '/console/api/session']) {
    const res = await fetch(new URL(path, a.env.url), { method: 'POST', headers: { authorization: `Bearer ${a.env.apiKey}`, 'content-type': 'application/json' }, body: '{}' });
    expect(res.status).toBeGreaterThanOrEqual(400);
  }
});

// ---------------------------------------------------------------------------------------------
// Transport — authentication and governance cannot be skipped
// ---------------------------------------------------------------------------------------------
const BASE_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
async function post(body: unknown, headers: Record<string, string>, raw?: string): Promise<{ status: number; text: string; json: any }> {
  const r = await fetch(a.env.url, { method: 'POST', headers, body: raw ?? JSON.stringify(body) });
  const text = await r.text();
  let json: any = null;
  try {
    json = JSON.parse(text.startsWith('event:') || text.includes('\ndata: ') ? text.split('\n').filter((l) => l.startsWith('data: ')).at(-1)!.slice(6) : text);
  } catch {
    json = null;
  }
  return { status: r.status, text, json };
}
const callBody = (id: unknown, name: string, args: Record<string, unknown>, extraParams: Record<string, unknown> = {}) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args, ...extraParams } });
const modernMeta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };

test('transport: no key, a wrong key, a revoked key or a disabled identity never reach governed data', async () => {
  const args = { source_id: 'chinook', sql: 'SELECT customer_id, phone FROM customer LIMIT 1' };
  const h = { ...BASE_HEADERS, 'mcp-protocol-version': '2025-11-25' };
  const attempts: Array<Record<string, string>> = [
    h,
    { ...h, authorization: 'Bearer ' },
    { ...h, authorization: 'Bearer ilk_' + 'A'.repeat(43) },
    { ...h, authorization: `Basic ${Buffer.from(`x:${a.env.apiKey}`).toString('base64')}` },
    { ...h, authorization: `Bearer ${a.env.apiKey}x` },
    { ...h, authorization: `Bearer ${a.env.apiKey.toUpperCase()}` },
    { ...h, authorization: `Bearer ${a.env.apiKey} ${a.env.apiKey}` },
    { ...h, authorization: `Token ${a.env.apiKey}` },
    { ...h, 'x-api-key': a.env.apiKey },
  ];
  for (const headers of attempts) {
    const r = await post(callBody(1, 'interlock_query', args), headers);
    expect(r.json?.result?.structuredContent?.status ?? r.json?.error?.code).toBeDefined();
    expect(r.json?.result?.structuredContent?.rows).toBeUndefined();
    expect(r.text).not.toContain('customer_id');
  }
  // Revoked key and disabled identity.
  const narrow = await narrowIdentity(a, 'revoked-one', ['album']);
  const key2 = await createApiKey(a.env.db, narrow.id);
  const probe = (key: string) => callTool(a.env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1 AS x FROM album LIMIT 1' }, key).then(classify);
  expect((await probe(narrow.apiKey)).kind).toBe('rows');
  const first = (await listApiKeys(a.env.db, { identityId: narrow.id })).find((k) => narrow.apiKey.startsWith(k.prefix))!;
  await revokeApiKey(a.env.db, first.id);
  const eventually = async (key: string) => {
    for (let i = 0; i < 40; i++) {
      const r = await probe(key);
      if (r.kind !== 'rows') return r;
      await new Promise((res) => setTimeout(res, 100));
    }
    return probe(key);
  };
  expect((await eventually(narrow.apiKey)).kind).toBe('refused');
  expect((await probe(key2.secret)).kind).toBe('rows');
  await disableIdentity(a.env.db, narrow.id);
  expect((await eventually(key2.secret)).kind).toBe('refused');
}, 60_000);

test('transport: batches, bad ids, notifications and posted responses never execute a tool call', async () => {
  const h = { ...BASE_HEADERS, 'mcp-protocol-version': '2025-11-25', authorization: `Bearer ${a.env.apiKey}` };
  const n0 = await approvalCount();
  const write = { source_id: 'chinook', sql: "INSERT INTO playlist (playlist_id, name) VALUES (9500, 'smuggled')" };
  const batch = await post([callBody(1, 'interlock_query', write), callBody(2, 'interlock_query', write)], h);
  expect(batch.status).toBe(400);
  expect(batch.json.error.code).toBe(-32600);
  for (const id of [null, 1.5, true, { a: 1 }, [1], 2 ** 60]) {
    const r = await post(callBody(id, 'interlock_query', write), h);
    expect(r.status).toBe(400);
  }
  // A tools/call sent as a notification (no id) is accepted (202) but never dispatched.
  const note = await post({ jsonrpc: '2.0', method: 'tools/call', params: { name: 'interlock_query', arguments: write } }, h);
  expect(note.status).toBe(202);
  // A "response" carrying a method, a wrong jsonrpc version, method in a different case.
  for (const body of [
    { jsonrpc: '2.0', id: 3, result: {}, method: 'tools/call', params: { name: 'interlock_query', arguments: write } },
    { jsonrpc: '1.0', id: 3, method: 'tools/call', params: { name: 'interlock_query', arguments: write } },
    { jsonrpc: '2.0', id: 3, method: 'Tools/Call', params: { name: 'interlock_query', arguments: write } },
    { jsonrpc: '2.0', id: 3, method: 'tools/call ', params: { name: 'interlock_query', arguments: write } },
    { jsonrpc: '2.0', id: 3, method: 'tools/call', params: [{ name: 'interlock_query', arguments: write }] },
  ]) {
    const r = await post(body, h);
    expect(r.json?.result).toBeUndefined();
  }
  await new Promise((r) => setTimeout(r, 300));
  expect(await approvalCount()).toBe(n0);
});

test('transport: modern-dialect Mcp-Name / Mcp-Method / envelope tricks cannot swap the tool that runs', async () => {
  const h = { ...BASE_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', authorization: `Bearer ${a.env.apiKey}` };
  const args = { source_id: 'chinook', sql: 'SELECT customer_id, phone FROM customer LIMIT 1' };
  const params = { _meta: modernMeta };
  const b64 = (s: string) => `=?base64?${Buffer.from(s).toString('base64')}?=`;
  const cases: Array<{ headers: Record<string, string>; raw?: string; body?: unknown }> = [
    { headers: { ...h, 'mcp-name': 'interlock_list_sources' }, body: callBody(1, 'interlock_query', args, params) },
    { headers: { ...h, 'mcp-name': b64('interlock_list_sources') }, body: callBody(1, 'interlock_query', args, params) },
    { headers: { ...h, 'mcp-name': '=?BASE64?aW50ZXJsb2NrX3F1ZXJ5?=' }, body: callBody(1, 'interlock_query', args, params) },
    { headers: { ...h, 'mcp-name': '=?base64?aW50ZXJsb2NrX3F1ZXJ5?' }, body: callBody(1, 'interlock_query', args, params) },
    { headers: { ...h, 'mcp-name': b64('interlock_query\u0000') }, body: callBody(1, 'interlock_query', args, params) },
    { headers: { ...h }, body: callBody(1, 'interlock_query', args, params) },
    { headers: { ...h, 'mcp-name': 'interlock_query', 'mcp-method': 'tools/list' }, body: callBody(1, 'interlock_query', args, params) },
    { headers: { ...h, 'mcp-name': 'interlock_query' }, body: callBody(1, 'interlock_query', args, { _meta: { ...modernMeta, 'io.modelcontextprotocol/protocolVersion': '2025-11-25' } }) },
    { headers: { ...h, 'mcp-name': 'interlock_query' }, body: callBody(1, 'interlock_query', args) },
    // Duplicate JSON keys: the header names the first value, JSON.parse keeps the last.
    { headers: { ...h, 'mcp-name': 'interlock_list_sources' }, raw: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"interlock_list_sources","_meta":${JSON.stringify(modernMeta)},"arguments":${JSON.stringify(args)},"name":"interlock_query"}}` },
  ];
  for (const c of cases) {
    const r = await post(c.body, c.headers, c.raw);
    expect(r.status).toBeGreaterThanOrEqual(400);
    expect(r.text).not.toContain('"rows"');
  }
  // The correct form works, and is governed: the phone comes back masked.
  const ok = await post(callBody(1, 'interlock_query', args, params), { ...h, 'mcp-name': b64('interlock_query') });
  expect(ok.status).toBe(200);
  expect(ok.text).not.toContain(a.secret.phone);
  // Missing key in the modern dialect is a 401 with WWW-Authenticate.
  const { authorization: _drop, ...noAuth } = h;
  const unauth = await fetch(a.env.url, { method: 'POST', headers: { ...noAuth, 'mcp-name': 'interlock_query' }, body: JSON.stringify(callBody(1, 'interlock_query', args, params)) });
  expect(unauth.status).toBe(401);
  expect(unauth.headers.get('www-authenticate')).toMatch(/Bearer/);
});

test('transport: Host / Origin / method / media-type guards and the deprecated routes', async () => {
  const body = JSON.stringify(callBody(1, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1 AS x' }));
  const h = { ...BASE_HEADERS, 'mcp-protocol-version': '2025-11-25', authorization: `Bearer ${a.env.apiKey}` };
  const origin = new URL(a.env.url).origin;
  const bad: Array<[Record<string, string>, number]> = [
    [{ ...h, origin: 'http://evil.example' }, 403],
    [{ ...h, origin: 'null' }, 403],
    [{ ...h, origin: origin + '.evil.example' }, 403],
    [{ ...h, 'content-type': 'text/plain' }, 415],
    [{ ...h, 'content-type': 'application/x-www-form-urlencoded' }, 415],
    [{ ...h, accept: 'application/json' }, 406],
    [{ ...h, 'mcp-protocol-version': '2099-01-01' }, 400],
  ];
  for (const [headers, status] of bad) {
    const r = await fetch(a.env.url, { method: 'POST', headers, body });
    expect(r.status).toBe(status);
  }
  // Host header spoofing (DNS rebinding): raw request with a foreign Host.
  const http = await import('node:http');
  const u = new URL(a.env.url);
  const status = await new Promise<number>((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { ...h, host: 'evil.example' } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end(body);
  });
  expect(status).toBe(403);
  expect((await fetch(a.env.url, { method: 'GET', headers: h })).status).toBe(405);
  // Path aliases (express routing is case-insensitive and ignores a trailing slash) reach the same
  // governed handler: without a key they never return data; the deprecated custom routes are gone.
  const { authorization: _auth, ...anon } = h;
  for (const path of ['/mcp/tools/call', '/mcp/sse', '/mcp/tools/list', '/MCP', '/mcp/', '/Mcp//', '/mcp;x']) {
    const r = await fetch(new URL(path, a.env.url), { method: 'POST', headers: anon, body });
    expect(await r.text()).not.toContain('"rows"');
  }
  // The deprecated custom routes, when served, run the same governed pipeline: masked, never raw.
  const legacy = await fetch(new URL('/mcp/tools/call', a.env.url), { method: 'POST', headers: h, body: JSON.stringify({ name: 'interlock_query', arguments: { source_id: 'chinook', sql: 'SELECT customer_id, phone, email FROM customer WHERE customer_id = 1' } }) });
  const legacyText = await legacy.text();
  expect(leaks(legacyText, a.secret.phone)).toBe(false);
  expect(legacyText).not.toContain(a.secret.email);
});

test('HTTP surfaces besides POST /mcp: /v1 proxy is governed; agent keys cannot use the operators\' /admin/v1 API', async () => {
  const w = await query(a, "INSERT INTO playlist (playlist_id, name) VALUES (9700, 'pending')");
  expect(w.kind).toBe('queued');
  const id = w.sc.approval_id as string;
  const before = await sourceState(a);
  const admin = (path: string, init: RequestInit = {}) => fetch(new URL(path, a.env.url), init);
  const agentAuth = { authorization: `Bearer ${a.env.apiKey}`, 'content-type': 'application/json' };
  for (const [path, method] of [['/admin/v1/whoami', 'GET'], ['/admin/v1/approvals', 'GET'], [`/admin/v1/approvals/${id}/approve`, 'POST'], ['/admin/v1/keys', 'POST'], ['/admin/v1/grants', 'POST'], ['/admin/v1/audit', 'GET']] as const) {
    for (const headers of [agentAuth, { 'content-type': 'application/json' }, { ...agentAuth, authorization: `Bearer ilo_${'A'.repeat(43)}` }, { ...agentAuth, authorization: `Bearer ${a.env.apiKey.replace(/^ilk_/, 'ilo_')}` }]) {
      const r = await admin(path, { method, headers, body: method === 'POST' ? JSON.stringify({ identity: 'demo-agent', role: 'attacker', source: 'chinook' }) : undefined });
      expect([401, 403, 404]).toContain(r.status);
      expect(await r.text()).not.toMatch(/"approvals"|"events"|"keys"|secret/);
    }
  }
  const [appr] = (await listApprovals(a.env.db, {})).filter((x) => x.id === id);
  expect(appr.state).toBe('pending');
  // /v1 query proxy (when served): no key → 401; masked results; writes queued; denied tables refused.
  const v1 = (body: unknown, headers: Record<string, string> = agentAuth) => admin('/v1/sources/chinook/query', { method: 'POST', headers, body: JSON.stringify(body) });
  const probe = await v1({ sql: 'SELECT 1 AS x' });
  if (probe.status !== 404) {
    expect((await v1({ sql: 'SELECT 1 AS x' }, { 'content-type': 'application/json' })).status).toBe(401);
    const masked = await v1({ sql: 'SELECT customer_id, phone, email FROM customer WHERE customer_id = 1' });
    const text = await masked.text();
    expect(leaks(text, a.secret.phone)).toBe(false);
    expect(text).not.toContain(a.secret.email);
    expect((await v1({ sql: "DELETE FROM playlist WHERE playlist_id = 1" })).status).toBe(202);
    expect((await v1({ sql: 'SELECT * FROM employee' })).status).toBe(403);
    expect((await v1({ sql: 'SELECT 1; DELETE FROM playlist' })).status).toBeGreaterThanOrEqual(400);
    expect((await v1({ sql: 'SELECT 1 AS x', request: { operation: 'get_document' } })).status).toBeGreaterThanOrEqual(400);
    const other = await admin('/v1/sources/other_source/query', { method: 'POST', headers: agentAuth, body: JSON.stringify({ sql: 'SELECT 1' }) });
    expect(other.status).toBe(404);
  }
  expect(await sourceState(a)).toBe(before);
});

// ---------------------------------------------------------------------------------------------
// Isolation between identities
// ---------------------------------------------------------------------------------------------
test("isolation: another identity sees only its own sources, roles and resources, and cannot use demo-agent's access", async () => {
  const narrow = await narrowIdentity(a, 'iso-album', ['album']);
  const list = classify(await callTool(a.env, 'interlock_list_sources', {}, narrow.apiKey));
  expect(Object.keys(list.sc)).toEqual(['chinook']);
  const access = await callTool(a.env, 'interlock_describe_access', {}, narrow.apiKey);
  const entry = access.body.result.structuredContent.chinook;
  expect(entry.roles).toEqual(['iso-album-role']);
  const text = JSON.stringify(access.body);
  expect(text).not.toContain('demo-analyst');
  expect(text).not.toContain('public.customer');
  expect(text).not.toContain('public.employee');
  const describe = await callTool(a.env, 'interlock_describe_source', { source_id: 'chinook' }, narrow.apiKey);
  expect(JSON.stringify(describe.body)).not.toMatch(/"employee"|"customer"|birth_date/);
  for (const sql of ['SELECT * FROM customer', 'SELECT customer_id FROM customer', 'SELECT * FROM invoice', 'SELECT * FROM playlist']) {
    expect((await query(a, sql, {}, narrow.apiKey)).kind).toBe('refused');
  }
  const write = await query(a, "INSERT INTO playlist (playlist_id, name) VALUES (9600, 'x')", {}, narrow.apiKey);
  expect(write.kind).toBe('refused');
  for (const src of ['CHINOOK', 'chinook ', ' chinook', 'chinook\u0000', 'chinook/../chinook', '*']) {
    const r = classify(await callTool(a.env, 'interlock_query', { source_id: src, sql: 'SELECT 1 AS x' }, narrow.apiKey));
    expect(r.kind).not.toBe('rows');
  }
});

test('isolation: a cached result is never served to an identity with different access or masks', async () => {
  const reader = await narrowIdentity(a, 'iso-cust', ['customer']);
  await addPolicy(a.env.db, { name: 'mask-city-for-iso', applies_to: { identities: ['iso-cust'] }, rule: { type: 'mask_columns', columns: ['public.customer.city'], method: 'full' } });
  a.env.gateway.store.invalidate('*');
  const sql = 'SELECT customer_id, city FROM customer WHERE customer_id = 2';
  const first = await query(a, sql); // demo-agent: city visible, result cached
  expect(first.rows[0].city).toBe('Stuttgart');
  const again = await query(a, sql);
  expect(again.sc.cached).toBe(true);
  const other = await query(a, sql, {}, reader.apiKey);
  expect(other.rows[0].city).toBe('***');
  const sql2 = 'SELECT customer_id, city FROM customer WHERE customer_id = 3';
  const masked = await query(a, sql2, {}, reader.apiKey); // cached masked first
  expect(masked.rows[0].city).toBe('***');
  const unmasked = await query(a, sql2);
  expect(unmasked.rows[0].city).not.toBe('***');
  const narrow = await narrowIdentity(a, 'iso-nocust', ['album']);
  expect((await query(a, sql, {}, narrow.apiKey)).kind).toBe('refused');
});

// ---------------------------------------------------------------------------------------------
// Legitimate analytics keep working (false positives are defects too)
// ---------------------------------------------------------------------------------------------
test('legitimate analytics SQL runs', async () => {
  const legit = [
    'SELECT country, count(*) AS n FROM customer GROUP BY country ORDER BY n DESC',
    'WITH t AS (SELECT album_id, count(*) AS n FROM track GROUP BY album_id) SELECT * FROM t ORDER BY n DESC LIMIT 5',
    'SELECT invoice_id, total, sum(total) OVER (ORDER BY invoice_id) AS running FROM invoice LIMIT 5',
    'SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY total) AS median FROM invoice',
    'TABLE genre',
    'VALUES (1), (2)',
    'EXPLAIN SELECT * FROM track WHERE album_id = 1',
    "SELECT '{\"a\":{\"b\":1}}'::jsonb #>> '{a,b}' AS v",
    'SELECT generate_series(1, 10) AS g',
    'SELECT a.title, t.name FROM album a, LATERAL (SELECT name FROM track WHERE track.album_id = a.album_id LIMIT 1) t LIMIT 3',
    'SELECT DISTINCT ON (album_id) album_id, name FROM track ORDER BY album_id, milliseconds DESC LIMIT 3',
    'SELECT album_id, sum(milliseconds) FROM track GROUP BY GROUPING SETS ((album_id), ()) LIMIT 3',
    'SELECT total::int AS t FROM invoice LIMIT 1',
    "SELECT name FROM artist WHERE name ILIKE '%ac%'",
    'SELECT now() AS n',
    '/* comment */ SELECT "name" FROM "genre" -- trailing',
    'SELECT c.country, count(*) AS n FROM customer c JOIN invoice i USING (customer_id) GROUP BY c.country ORDER BY n DESC LIMIT 3',
    "SELECT date_trunc('month', invoice_date) AS m, sum(total) FROM invoice GROUP BY 1 ORDER BY 1 LIMIT 3",
    'SELECT customer_id, first_name, email, phone FROM customer LIMIT 3',
    'SELECT t.name FROM track t WHERE t.genre_id IN (SELECT genre_id FROM genre WHERE name = $1) LIMIT 2',
    'SELECT count(*) FILTER (WHERE total > 5) AS n FROM invoice',
    'SELECT string_agg(name, \', \' ORDER BY name) AS s FROM genre',
    'SELECT mode() WITHIN GROUP (ORDER BY genre_id) AS m FROM track',
    'SELECT round(avg(total)::numeric, 2) AS a FROM invoice',
    "SELECT to_char(invoice_date, 'YYYY-MM') AS ym, count(*) FROM invoice GROUP BY 1 ORDER BY 1 LIMIT 2",
    'WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) SELECT * FROM n',
    'SELECT ntile(4) OVER (ORDER BY total) AS q FROM invoice LIMIT 3',
    "SELECT * FROM generate_series('2021-01-01'::date, '2021-03-01'::date, '1 month'::interval) AS m",
  ];
  const bad: string[] = [];
  for (const sql of legit) {
    const r = await query(a, sql, sql.includes('$1') ? { params: ['Rock'] } : {});
    if (r.kind !== 'rows') bad.push(`${sql} → ${r.raw.slice(0, 200)}`);
  }
  expect(bad).toEqual([]);
}, 60_000);

// Keep last (slow): a statement timeout must not open the source's circuit for other identities.
test('resources: a long-running read is stopped by statement_timeout; the gateway stays responsive and the circuit stays closed for others', async () => {
  // Four small relations cross-joined: billions of rows without temporary files (a cross join of two
  // generate_series spills its materialised sets and now meets the demo reader's temp_file_limit first).
  const slow = query(a, 'SELECT count(*) AS n FROM album AS a1, album AS a2, album AS a3, album AS a4');
  await new Promise((r) => setTimeout(r, 200));
  const t = Date.now();
  const alive = await query(a, 'SELECT 3 AS alive');
  expect(Date.now() - t).toBeLessThan(2_000);
  expect(alive.rows).toEqual([{ alive: 3 }]);
  const r = await slow;
  expect(r.kind).toBe('refused');
  expect(r.code).toBe('statement_timeout');
  // Red-team finding V6, fixed during the review (9142129): one agent's own statement timeout used
  // to open the source's circuit for every identity. Another identity must still be served.
  const bystander = await narrowIdentity(a, 'bystander-timeout', ['album']);
  const after = await query(a, 'SELECT title FROM album WHERE album_id = 1', {}, bystander.apiKey);
  expect(after.code).not.toBe('circuit_open');
  expect(after.kind).toBe('rows');
}, 60_000);
