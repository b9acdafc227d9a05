/**
 * Red team rt46a: value fidelity and masking through PostgreSQL's own types and protocol, as an
 * agent with the Chinook demo key (test/integration/attacks/harness.ts: customer.email partially and
 * customer.phone fully masked, employee unreadable) and, where needed, as an insider owning objects
 * (the source's superuser standing in for the database owner, or a role with CREATE on a schema of
 * the reader's path). Real PostgreSQL 15 on loopback; every wait bounded. Not repeated here: what
 * defended.test.ts (class 6 masks), fixed.test.ts (V2*), rt42* (scan drift), rt27* (row rules) and
 * rtc (the result cache) cover.
 *
 * Findings:
 *  J1 (high, fixed here) SQL/JSON syntax read differently by the analyser and the server. The
 *     analyser's grammar is PostgreSQL 18's (libpg-query 18): it reads `JSON_SCALAR(x)`,
 *     `JSON_ARRAY(x)`, `JSON_VALUE(x, p)`, `JSON_SERIALIZE(x)` and `JSON_ARRAYAGG(x)` as built-in
 *     constructs (derived values that read nothing), and the legacy `json_object(a, b)` as a call of
 *     `pg_catalog.json_object`. PostgreSQL 15 parses each as an ordinary call of a function of that
 *     name looked up on the search path. A function `public.json_scalar` (json_array, json_value,
 *     json_serialize, an aggregate json_arrayagg, json_object(text, text)) created by anyone with
 *     CREATE on a path schema, after the scan or before it, ran unseen: no function policy, no read
 *     check of its body, no mask, no function guard. `SELECT JSON_SCALAR(1)` answered every
 *     customer's phone (masked `full`) in clear. Without any hostile act, a scanned SQL function
 *     whose body calls an honest helper named json_value (common in code written for PostgreSQL
 *     < 17) was judged to read nothing and served the helper's masked reads in clear. Fixed
 *     (src/sql/legacy-syntax.ts): the constructs are refused `statement_not_allowed` unless the
 *     catalogue records a server that reads them as such (16 for the constructors and IS JSON, 17
 *     for JSON(), JSON_SCALAR, JSON_SERIALIZE, the query functions and MERGE_ACTION; unknown:
 *     refused); the legacy json_object call is judged by its unqualified name there (a later
 *     same-named function trips the guard, then counts as the user function it is); a user
 *     function's string body that uses them counts as calling the named function.
 *  P1 (low, fixed here) a number parameter beyond ±(2^53−1) was rounded when the request was read
 *     (JSON.parse): `SELECT $1::int8` with 9007199254740993 answered 9007199254740992, a write
 *     would be queued for another id, without notice. Now refused `invalid_arguments` (send such
 *     values as strings, which PostgreSQL reads exactly). Its rest (task low48): a decimal with
 *     more significant digits than a double keeps (0.12345678901234567891) was still rounded by the
 *     JSON reader to an ordinary-looking number and run; the body's text is now looked at
 *     (src/pipeline/json-numbers.ts) and such a parameter refused the same way, on /mcp and /v1.
 *  D1 (low, fixed here) the pinned DateStyle 'ISO, YMD' also decided how an agent's ambiguous
 *     date literal is read: '01/02/03' was 2001-02-03 through InterLock, 2003-01-02 in psql on this
 *     server (ISO, MDY); '01/02/2024' failed. Other rows selected, without notice. Now only the ISO
 *     output style is pinned (session-settings.ts `accepts`); the order is the server's
 *     postgresql.conf one; since stop 47 also a database or role default of the order applies
 *     (session-settings.ts `setOnConnect`; test/integration/sources/session-settings.test.ts).
 * Held (asserted below): masked values through casts, domains, arrays and subscripts, row
 * constructors and field selection, jsonb_populate_record, COLLATE, window functions, aggregate
 * ORDER BY, UNION implicit casts, set-returning functions in FROM, LATERAL, DISTINCT / GROUP BY /
 * ORDER BY by position, EXPLAIN estimates, renamed output columns around the in-SQL mask wrapper;
 * values (int8 beyond 2^53 bare and in arrays, numeric, NaN/±Infinity, -0, timestamps and
 * timestamptz under the pinned zone, intervals, BC dates, bytea, money, json and jsonb digits,
 * arrays with bounds, nested and quoted elements, records, box arrays, ranges) equal to
 * PostgreSQL's own text output; session settings an agent cannot change (SET, set_config in any
 * spelling or position); PostgreSQL 16+ literals (0x1F, 1_000, 0b101, 0o17) refused invalid_sql;
 * multi-statement strings, dollar quoting and comments at the wrapper boundary; a SQL_ASCII source's
 * non-UTF-8 bytes (the server fails the read, 22021: never served as U+FFFD).
 */
import { startAttackEnv, query, leaks, statementsAgent, classify, type AttackEnv, type Answer } from './harness';
import pg from 'pg';
import { scanSource } from '../../../src/control/scan';
import { PostgresSourceConnector } from '../../../src/sources/postgres/connector';
import type { SourceError } from '../../../src/sources/postgres/errors';
import { ADMIN_URL, urlFor } from '../../helpers/pg';

let a: AttackEnv;

beforeAll(async () => {
  a = await startAttackEnv();
}, 120_000);

afterAll(async () => {
  await a?.close();
});

/** Contact details of customers whose phone is in no fax (Chinook's unmasked fax sometimes repeats the phone), read as superuser. */
async function contacts(): Promise<Array<{ phone: string; email: string }>> {
  const r = await a.admin.query("SELECT phone, email FROM customer c WHERE phone IS NOT NULL AND NOT EXISTS (SELECT 1 FROM customer d WHERE position(c.phone in coalesce(d.fax, '')) > 0) ORDER BY customer_id");
  return r.rows;
}

/** The first masked fact `r` carries: a phone (also as its digits), an e-mail, its local part or its domain; null when none. */
function leakIn(r: Answer, cs: Array<{ phone: string; email: string }>): string | null {
  for (const c of cs) {
    if (leaks(r.raw, c.phone) || r.raw.includes(c.phone.replace(/\D/g, ''))) return c.phone;
    const at = c.email.indexOf('@');
    const local = c.email.slice(0, at);
    const domain = c.email.slice(at + 1, c.email.lastIndexOf('.'));
    if (r.raw.includes(c.email) || (local.length >= 4 && r.raw.includes(local)) || (domain.length >= 4 && r.raw.includes(domain))) return c.email;
  }
  return null;
}

/** Statements that try to carry a masked value out through PostgreSQL's types (M: held). */
const TYPE_TRICKS = [
  // casts, domains, other string types
  'SELECT customer_id, email::varchar(200) AS e FROM customer',
  'SELECT email::char(80) AS e FROM customer',
  'SELECT email::name AS e, phone::"char" AS p FROM customer',
  'SELECT phone::information_schema.character_data AS p, email::information_schema.sql_identifier AS e FROM customer',
  'SELECT email::text::varchar AS e FROM customer',
  'SELECT CAST(phone AS bpchar) AS p FROM customer',
  // arrays, subscripts, row constructors, field selection, whole rows
  'SELECT (ARRAY[email, phone])[2] AS x FROM customer',
  'SELECT (ARRAY[phone])[1:1] AS x FROM customer',
  'SELECT (ROW(phone, email)).f1 AS x FROM customer',
  'SELECT ARRAY[ROW(phone)] AS r FROM customer',
  'SELECT (jsonb_populate_record(NULL::customer, to_jsonb(c))).phone FROM customer c',
  'SELECT (s.c).phone FROM (SELECT c FROM customer c) s',
  'SELECT to_jsonb(c) AS j FROM customer c',
  'SELECT jsonb_build_array(c.*) AS j FROM customer c',
  'SELECT (array_agg(c))[1] AS r FROM customer c',
  'SELECT * FROM unnest(ARRAY(SELECT phone FROM customer)) u',
  'SELECT * FROM ROWS FROM (unnest(ARRAY(SELECT email FROM customer))) u',
  'SELECT * FROM jsonb_each_text((SELECT to_jsonb(c) FROM customer c LIMIT 1)) e',
  'SELECT * FROM jsonb_populate_recordset(NULL::customer, (SELECT jsonb_agg(c) FROM customer c)) r',
  'SELECT int4range(customer_id, customer_id + length(phone)) AS r FROM customer',
  // COLLATE, format, concat, string_agg, xml
  'SELECT email COLLATE "C" AS e, phone COLLATE "POSIX" AS p FROM customer',
  "SELECT format('%1$s', phone) AS f, concat(VARIADIC ARRAY[phone]) AS c, format('%s', VARIADIC ARRAY[email]) AS g FROM customer",
  "SELECT string_agg(DISTINCT phone, ',') AS s FROM customer",
  'SELECT xmlforest(phone, email) AS x FROM customer',
  // UNION with implicit casts, CTEs, sub-selects
  'SELECT fax AS x FROM customer UNION ALL SELECT phone FROM customer',
  'SELECT customer_id::text AS x FROM customer UNION ALL SELECT email FROM customer',
  'SELECT NULL::text AS x UNION ALL SELECT phone FROM customer',
  'SELECT email FROM customer UNION SELECT email FROM customer',
  'SELECT (SELECT email ORDER BY 1) AS e FROM customer',
  'WITH t AS MATERIALIZED (SELECT email, phone FROM customer) SELECT phone, email FROM t',
  'SELECT * FROM (SELECT email, phone FROM customer) AS q(phone, email)',
  'SELECT c.email AS phone, c.phone AS email FROM customer c',
  // window functions, aggregate ORDER BY, FILTER, ordered-set aggregates
  'SELECT first_value(phone) OVER w AS p FROM customer WINDOW w AS (ORDER BY customer_id)',
  'SELECT lag(email) OVER () AS p, nth_value(phone, 1) OVER (PARTITION BY country) AS n FROM customer',
  "SELECT string_agg(customer_id::text, ',' ORDER BY email) AS s FROM customer",
  'SELECT (array_agg(customer_id ORDER BY phone))[1] AS s FROM customer',
  'SELECT json_agg(customer_id ORDER BY email DESC) AS s FROM customer',
  'SELECT mode() WITHIN GROUP (ORDER BY email) AS m, percentile_disc(0.5) WITHIN GROUP (ORDER BY phone) AS p FROM customer',
  "SELECT count(*) FILTER (WHERE phone LIKE '+55%') AS n FROM customer",
  'SELECT count(DISTINCT phone) AS n FROM customer',
  'SELECT customer_id, count(*) OVER (PARTITION BY email) AS n FROM customer',
  // GROUP BY / DISTINCT / ORDER BY by position, whole rows as keys
  'SELECT email FROM customer ORDER BY 1',
  'SELECT email FROM customer GROUP BY 1',
  'SELECT DISTINCT email FROM customer',
  'SELECT DISTINCT customer_id, email FROM customer',
  'SELECT customer_id FROM customer c ORDER BY ROW(c.phone)',
  'SELECT customer_id FROM customer c WHERE c = c',
  'SELECT count(*) AS n FROM customer GROUP BY GROUPING SETS ((phone), ())',
  'SELECT customer_id, email FROM customer ORDER BY customer_id FETCH FIRST 1 ROWS WITH TIES',
  // LATERAL and set-returning functions over the masked value
  'SELECT l.x FROM customer c CROSS JOIN LATERAL (SELECT c.email AS x) l',
  "SELECT l.x FROM customer c CROSS JOIN LATERAL regexp_split_to_table(c.phone, '') AS l(x)",
  'SELECT l.n FROM customer c CROSS JOIN LATERAL generate_series(1, length(c.phone)) AS l(n)',
  // the planner's estimates
  "EXPLAIN SELECT 1 FROM customer WHERE email LIKE 'l%'",
  "EXPLAIN SELECT 1 FROM customer WHERE phone > '+5'",
  'EXPLAIN (VERBOSE, COSTS OFF) SELECT email, phone FROM customer',
  // the mask wrapper's boundary (names it refers to, comments, quoting)
  'SELECT email AS "a""b", customer_id AS "x)y" FROM customer',
  'SELECT customer_id AS "?column?", email || \'\' FROM customer',
  'SELECT email FROM customer -- a trailing comment',
  'SELECT email FROM customer; -- after the semicolon',
  "SELECT $a$ ) AS q; $a$ AS x, email FROM customer",
  'SELECT U&"\\0065mail", U&"\\0070hone" FROM customer',
  'TABLE customer',
  'SELECT * FROM customer c JOIN customer d USING (customer_id)',
];

test('M held: masked values do not come out through casts, arrays, rows, collations, windows, orderings, LATERAL, estimates or the wrapper boundary', async () => {
  const cs = await contacts();
  expect(cs.length).toBeGreaterThan(40);
  const bad: string[] = [];
  const kinds: Record<string, number> = {};
  for (const sql of TYPE_TRICKS) {
    const r = await query(a, sql);
    kinds[r.kind] = (kinds[r.kind] ?? 0) + 1;
    const l = leakIn(r, cs);
    if (l) bad.push(`${sql} → ${l}: ${r.raw.slice(0, 200)}`);
    if (!['rows', 'refused', 'invalid', 'failed'].includes(r.kind)) bad.push(`${sql} → ${r.kind}`);
  }
  expect(bad).toEqual([]);
  // Most are answered (masked), the rest refused: the bank exercises the masks, not only refusals.
  expect(kinds.rows).toBeGreaterThanOrEqual(10);
}, 180_000);

/** A LANGUAGE sql body that returns every customer's phone (the reader role may read customer; the agent sees phone masked). */
const PHONES_BODY = "$$ SELECT string_agg(phone, '|' ORDER BY customer_id) FROM public.customer $$";

describe('J1 (high, fixed): SQL/JSON syntax the analyser reads as a construct runs a same-named function on PostgreSQL 15', () => {
  // The insider (here the database owner; CREATE on public is enough) creates, after the scan,
  // functions named as the SQL/JSON constructs of PostgreSQL 16 and 17. PostgreSQL 15 parses the
  // agent's `JSON_SCALAR(1)` as `json_scalar(1)` and finds public.json_scalar on the path.
  const FUNCTIONS = ['json_scalar(anyelement)', 'merge_action()', 'json_array(anyelement)', 'json_value(text, text)', 'json(text)', 'json_serialize(anyelement)', 'json_arrayagg(anyelement)'];
  beforeAll(async () => {
    for (const f of FUNCTIONS.filter((x) => !x.startsWith('json_arrayagg'))) await a.admin.query(`CREATE FUNCTION public.${f} RETURNS text LANGUAGE sql STABLE AS ${PHONES_BODY}`);
    await a.admin.query(`CREATE FUNCTION public.rt46a_phones(text, anyelement) RETURNS text LANGUAGE sql STABLE AS ${PHONES_BODY}`);
    await a.admin.query('CREATE AGGREGATE public.json_arrayagg(anyelement) (SFUNC = public.rt46a_phones, STYPE = text)');
  });
  afterAll(async () => {
    await a.admin.query('DROP AGGREGATE IF EXISTS public.json_arrayagg(anyelement)');
    for (const f of FUNCTIONS.filter((x) => !x.startsWith('json_arrayagg'))) await a.admin.query(`DROP FUNCTION IF EXISTS public.${f}`);
    await a.admin.query('DROP FUNCTION IF EXISTS public.rt46a_phones(text, anyelement)');
  });

  // Before the fix the first five answered one row whose x was every phone, '|'-separated, in clear.
  // The last three were no leak (PostgreSQL 15 answered IS JSON with a syntax error and read
  // JSON('{…}') as a cast to the type json; merge_action() was already refused by a field check);
  // they are refused now like the rest.
  test.each([
    ['SELECT JSON_SCALAR(1) AS x'],
    ['SELECT JSON_ARRAY(1) AS x'],
    ["SELECT JSON_VALUE('a', 'b') AS x"],
    ['SELECT JSON_SERIALIZE(1) AS x'],
    ['SELECT JSON_ARRAYAGG(customer_id) AS x FROM customer'],
    ["SELECT 1 AS x WHERE 'a' IS JSON"],
    ['SELECT JSON(\'{"a": 1}\') AS x'],
    ['SELECT merge_action() AS x'],
  ])('%s is refused statement_not_allowed, nothing served', async (sql) => {
    const r = await query(a, sql);
    expect(leaks(r.raw, a.secret.phone)).toBe(false);
    expect({ kind: r.kind, code: r.code }).toEqual({ kind: 'refused', code: 'statement_not_allowed' });
  });

  test('the legacy json_object(a, b) is judged as PostgreSQL 15 resolves it: a same-named user function created since the scan trips the guard, then counts as the user function it is', async () => {
    // Before the fix: one row, x = every phone in clear (the analysis judged pg_catalog.json_object).
    await a.admin.query(`CREATE FUNCTION public.json_object(text, text) RETURNS text LANGUAGE sql STABLE AS ${PHONES_BODY}`);
    try {
      const first = await query(a, "SELECT json_object('a', 'b') AS x");
      expect(leaks(first.raw, a.secret.phone)).toBe(false);
      expect({ kind: first.kind, code: first.code }).toEqual({ kind: 'refused', code: 'catalog_stale' });
      await scanSource(a.env.db, 'chinook');
      a.env.gateway.store.invalidate('*');
      const after = await query(a, "SELECT json_object('a', 'b') AS x");
      expect(leaks(after.raw, a.secret.phone)).toBe(false);
      // Judged as the user function public.json_object, whose body reads customer (phone masked).
      expect({ kind: after.kind, code: after.code }).toEqual({ kind: 'refused', code: 'policy_denied' });
      expect(after.sc.message).toContain('public.json_object');
    } finally {
      await a.admin.query('DROP FUNCTION IF EXISTS public.json_object(text, text)');
      await scanSource(a.env.db, 'chinook');
      a.env.gateway.store.invalidate('*');
    }
    // The built-in legacy form still works where nothing shadows it.
    expect((await query(a, "SELECT json_object('{a,1}') AS x")).rows).toEqual([{ x: { a: '1' } }]);
  });

  test('honest objects, scanned: a view and a SQL function whose bodies call a helper named json_value do not carry its reads unmasked', async () => {
    // The owner's helper public.json_value(text, text) (reads customer.phone), a view and a SQL
    // function calling it, all scanned. The analysis read the bodies' json_value(…) as JSON_VALUE,
    // which reads nothing: before the fix the function answered every phone in clear to an agent
    // whose role reads public.* with phone masked (the view was answered masked: held).
    const key = await statementsAgent(a, 'rt46a-all', [{ effect: 'allow', action: 'read', resource: 'public.*' }]);
    await a.admin.query(`CREATE VIEW public.rt46a_v AS SELECT public.json_value('a', 'b') AS x`);
    await a.admin.query("CREATE FUNCTION public.rt46a_f() RETURNS text LANGUAGE sql STABLE AS $$ SELECT json_value('a', 'b') $$");
    try {
      await scanSource(a.env.db, 'chinook');
      a.env.gateway.store.invalidate('*');
      const v = await query(a, 'SELECT x FROM rt46a_v', {}, key);
      expect(leaks(v.raw, a.secret.phone)).toBe(false);
      expect(v.kind === 'refused' || (v.kind === 'rows' && v.rows.every((r) => r.x === '***'))).toBe(true);
      const f = await query(a, 'SELECT rt46a_f() AS x', {}, key);
      expect(leaks(f.raw, a.secret.phone)).toBe(false);
      expect(f.kind === 'refused' || (f.kind === 'rows' && f.rows.every((r) => r.x === '***'))).toBe(true);
    } finally {
      await a.admin.query('DROP VIEW IF EXISTS public.rt46a_v; DROP FUNCTION IF EXISTS public.rt46a_f()');
    }
  });
});

describe('P1: a number parameter JSON cannot hold exactly', () => {
  // The request body is JSON; a number beyond ±(2^53−1) reaches the gateway already rounded
  // (9007199254740993 is read as 9007199254740992), and the statement ran with the rounded value:
  // a different id than the agent wrote, answered (or queued as a write) without notice.
  test('an integer parameter beyond ±(2^53−1) is refused invalid_arguments, not run rounded', async () => {
    const r = await query(a, 'SELECT $1::int8 AS v', { params: [9007199254740993] });
    expect({ kind: r.kind, code: r.code }).toEqual({ kind: 'invalid', code: 'invalid_arguments' });
    expect(r.sc.message).toContain('as a string');
  });
  test('the same value as a string is exact; a safe integer stays a number', async () => {
    expect((await query(a, 'SELECT $1::int8 AS v', { params: ['9007199254740993'] })).rows).toEqual([{ v: '9007199254740993' }]);
    expect((await query(a, 'SELECT $1::int8 AS v', { params: [9007199254740991] })).rows).toEqual([{ v: 9007199254740991 }]);
    expect((await query(a, 'SELECT $1::numeric AS v', { params: [0.5] })).rows).toEqual([{ v: '0.5' }]);
  });

  // Task low48 item 1 (P1's open rest): a decimal with more significant digits than a double keeps
  // is rounded by JSON.parse to a number that looks ordinary (0.12345678901234567891 reads as
  // 0.12345678901234568), so only the body's text can tell. The body is sent as raw text here: a
  // JavaScript literal in the test would be rounded before it was sent.
  /** POSTs `args` (raw JSON text of the arguments object) as an interlock_query tools/call on POST /mcp. */
  async function rawQuery(args: string): Promise<Answer> {
    const body = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"interlock_query","arguments":${args}}}`;
    const r = await fetch(a.env.url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', authorization: `Bearer ${a.env.apiKey}` }, body });
    const text = await r.text();
    const json = (r.headers.get('content-type') ?? '').startsWith('text/event-stream') ? JSON.parse(text.split('\n').filter((l) => l.startsWith('data: ')).at(-1)!.slice(6)) : JSON.parse(text);
    return classify({ status: r.status, body: json });
  }
  const NUMERIC_READ = '{"source_id":"chinook","sql":"SELECT $1::numeric AS v","params":[%]}';
  test.each([['0.12345678901234567891'], ['12345678901234567890.123'], ['1.0000000000000000001'], ['9007199254740993'], ['1e-400']])(
    'a number parameter JSON rounds (%s) is refused invalid_arguments, never run with the rounded value',
    async (lit) => {
      const r = await rawQuery(NUMERIC_READ.replace('%', lit));
      expect({ kind: r.kind, status: r.status, code: r.code }).toEqual({ kind: 'invalid', status: 200, code: 'invalid_arguments' });
      expect(r.sc.message).toContain('params[0] is a number JSON cannot carry exactly');
      expect(r.sc.message).toContain('as a string');
    },
  );
  test('a number beyond the double range (1e400, read as Infinity) is refused invalid_arguments by the schema, with the same hint (rt48d R7)', async () => {
    const r = await rawQuery(NUMERIC_READ.replace('%', '1e400'));
    expect({ kind: r.kind, status: r.status, code: r.code }).toEqual({ kind: 'invalid', status: 200, code: 'invalid_arguments' });
    expect(r.sc.message).toMatch(/^params\[0\] is a number JSON cannot carry exactly/);
  });
  test('numbers a double carries exactly still run as numbers, whatever their spelling; the same digits as a string are exact', async () => {
    for (const [lit, v] of [['0.5', '0.5'], ['1.50', '1.5'], ['1.000000000000000000', '1'], ['1.5e3', '1500'], ['-12.25e-2', '-0.1225'], ['9007199254740991', '9007199254740991']]) {
      expect((await rawQuery(NUMERIC_READ.replace('%', lit))).rows).toEqual([{ v }]);
    }
    expect((await rawQuery(NUMERIC_READ.replace('%', '"12345678901234567890.123"'))).rows).toEqual([{ v: '12345678901234567890.123' }]);
    // A long digit run inside a string (the statement, another value) is not a number.
    expect((await rawQuery('{"source_id":"chinook","sql":"SELECT $1::numeric AS v, \'0.12345678901234567891\' AS w","params":[2]}')).rows).toEqual([{ v: '2', w: '0.12345678901234567891' }]);
  });
  test('a write with such a parameter is not queued; on /v1 too', async () => {
    const approvals = async () => (await a.env.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM approvals')).rows[0].n;
    const before = await approvals();
    const w = await rawQuery('{"source_id":"chinook","sql":"UPDATE playlist SET name = name WHERE playlist_id = $1 AND $2::numeric > 0","params":[1, 0.12345678901234567891]}');
    expect({ kind: w.kind, code: w.code }).toEqual({ kind: 'invalid', code: 'invalid_arguments' });
    expect(w.sc.message).toContain('params[1] is a number JSON cannot carry exactly');
    expect(await approvals()).toBe(before);
    const r = await fetch(`${new URL(a.env.url).origin}/v1/sources/chinook/query`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${a.env.apiKey}` }, body: '{"sql":"SELECT $1::numeric AS v","params":[0.12345678901234567891]}' });
    expect(r.status).toBe(400);
    expect(await r.json()).toMatchObject({ code: 'invalid_arguments' });
  });
});

/** The first text item of a served call: the rows' JSON exactly as the gateway wrote it (the harness's `rows` went through JSON.parse). */
function textOf(r: Answer): string {
  return String(JSON.parse(r.raw).result?.content?.[0]?.text);
}

test('V held: values arrive as PostgreSQL writes them (digits, NaN, -0, zones, BC, bytea, money, json verbatim, arrays, records, ranges)', async () => {
  const cases: Array<[string, string]> = [
    [
      "SELECT 9007199254740993::int8 AS a, -9007199254740991::int8 AS b, 12345678901234567890.123456789::numeric AS c, 'NaN'::numeric AS d, 'Infinity'::numeric AS e, 'NaN'::float8 AS f, '-0'::float8 AS g, 1e308::float8 AS h, 1.1::float4 AS i, 0.1::float8 AS j",
      '[{"a":"9007199254740993","b":-9007199254740991,"c":"12345678901234567890.123456789","d":"NaN","e":"Infinity","f":"NaN","g":-0,"h":1e+308,"i":1.1,"j":0.1}]',
    ],
    [
      "SELECT '2024-01-15 12:00'::timestamp AS a, '2024-01-15 12:00+05'::timestamptz AS b, '1 year 2 mons 3 days 04:05:06.7'::interval AS c, '4713-01-01 BC'::date AS d, 'infinity'::timestamptz AS e, '12:00+05:30'::timetz AS f, '\\x00ff'::bytea AS g, 12.34::money AS h",
      '[{"a":"2024-01-15 12:00:00","b":"2024-01-15 07:00:00+00","c":"1 year 2 mons 3 days 04:05:06.7","d":"4713-01-01 BC","e":"infinity","f":"12:00:00+05:30","g":"\\\\x00ff","h":"$12.34"}]',
    ],
    [
      `SELECT '{"a": 9007199254740993, "b": 1.0000000000000000001, "c": 1e400}'::json AS a, '{"a": 9007199254740993, "b": 1.0000000000000000001}'::jsonb AS b, ARRAY[9007199254740993, 1]::int8[] AS c, ARRAY['{"a":9007199254740993}'::jsonb] AS d, ARRAY['NaN'::float8, '-0'] AS e, ARRAY[1.10::numeric] AS f, '[0:1]={1,2}'::int[] AS g, ARRAY[['a','b'],['c','d']] AS h, ARRAY['{x}', 'NULL', NULL, 'a"b\\c', ' '] AS i`,
      '[{"a":{"a": 9007199254740993, "b": 1.0000000000000000001, "c": 1e400},"b":{"a": 9007199254740993, "b": 1.0000000000000000001},"c":["9007199254740993",1],"d":[{"a": 9007199254740993}],"e":["NaN",-0],"f":["1.10"],"g":"[0:1]={1,2}","h":[["a","b"],["c","d"]],"i":["{x}","NULL",null,"a\\"b\\\\c"," "]}]',
    ],
    [
      "SELECT ROW(1, 'a b', NULL, 9007199254740993::int8) AS r, ARRAY[ROW(1,'x')] AS ra, '(1,2),(3,4)'::box AS bx, ARRAY['(1,2),(3,4)'::box, '(5,6),(7,8)'] AS bxa, int8range(9007199254740993, 9007199254740995) AS rg, '{[1,3),[5,7)}'::int4multirange AS mr, 'a & b'::tsquery AS tq",
      '[{"r":"(1,\\"a b\\",,9007199254740993)","ra":"{\\"(1,x)\\"}","bx":"(3,4),(1,2)","bxa":["(3,4),(1,2)","(7,8),(5,6)"],"rg":"[9007199254740993,9007199254740995)","mr":"{[1,3),[5,7)}","tq":"\'a\' & \'b\'"}]',
    ],
  ];
  for (const [sql, text] of cases) expect(textOf(await query(a, sql))).toBe(text);
  // The json text is PostgreSQL's own, byte for byte (read as text by the superuser).
  const own = await a.admin.query({ text: `SELECT '{"a": 9007199254740993, "b": 1.0000000000000000001, "c": 1e400}'::json::text AS t`, rowMode: 'array' });
  expect(textOf(await query(a, cases[2]![0]))).toContain(`"a":${own.rows[0][0]}`);
});

test('S held: an agent cannot change a session setting (SET, set_config in any spelling or position); the pinned values hold', async () => {
  const tries: Array<[string, string]> = [
    ["SET TimeZone = 'America/New_York'", 'statement_not_allowed'],
    ["SET LOCAL extra_float_digits = -15", 'statement_not_allowed'],
    ["RESET DateStyle", 'statement_not_allowed'],
    ["SELECT set_config('TimeZone', 'America/New_York', false)", 'function_not_allowed'],
    ["SELECT \"pg_catalog\".\"set_config\"('extra_float_digits', '-15', false)", 'function_not_allowed'],
    ["SELECT * FROM pg_catalog.set_config('bytea_output', 'escape', false)", 'function_not_allowed'],
    ["SELECT 1 FROM (SELECT set_config('IntervalStyle', 'iso_8601', false)) s", 'function_not_allowed'],
    ["WITH s AS (SELECT SET_CONFIG('DateStyle', 'SQL, DMY', true)) SELECT * FROM s", 'function_not_allowed'],
    ["SELECT current_setting('lc_monetary') AS m", 'function_not_allowed'],
  ];
  for (const [sql, code] of tries) expect([sql, (await query(a, sql)).code]).toEqual([sql, code]);
  const r = await query(a, "SELECT current_setting('TimeZone') AS tz, current_setting('DateStyle') AS ds, current_setting('IntervalStyle') AS iv, current_setting('extra_float_digits') AS efd, current_setting('standard_conforming_strings') AS scs");
  // DateStyle: the ISO output style, the field order of the server (rt46a D1; ISO, MDY here).
  const server = (await a.admin.query('SHOW DateStyle')).rows[0].DateStyle;
  expect(r.rows).toEqual([{ tz: 'UTC', ds: server, iv: 'postgres', efd: '1', scs: 'on' }]);
  expect(server).toMatch(/^ISO, /);
});

test('L held: literals of newer grammars, stacked statements, dollar quoting and comments at the mask wrapper boundary', async () => {
  // PostgreSQL 16+ literals: the analyser (PostgreSQL 18 grammar) would read 0x1F as 31, PostgreSQL 15 as junk.
  for (const sql of ['SELECT 0x1F AS a', 'SELECT 1_000 AS a', 'SELECT 0b101 AS a', 'SELECT 0o17 AS a']) {
    const r = await query(a, sql);
    expect([sql, r.kind, r.code]).toEqual([sql, 'invalid', 'invalid_sql']);
  }
  expect((await query(a, 'SELECT 1; SELECT 2')).code).toBe('statement_not_allowed');
  expect((await query(a, 'SELECT $$;$$ AS a')).rows).toEqual([{ a: ';' }]);
  const masked = 'l***@***.br'; // customer 1's e-mail, partially masked
  const wrapped: Array<[string, Record<string, unknown>]> = [
    ['SELECT email FROM customer WHERE customer_id = 1 -- trailing', { email: masked }],
    ['SELECT email FROM customer WHERE customer_id = 1; -- after the semicolon', { email: masked }],
    ['SELECT email FROM customer WHERE customer_id = 1 /* x */ ;  /* y */', { email: masked }],
    ['SELECT $a$ ) AS q; $a$ AS x, email FROM customer WHERE customer_id = 1', { x: ' ) AS q; ', email: masked }],
    ["SELECT 'a\\' AS x, email FROM customer WHERE customer_id = 1", { x: 'a\\', email: masked }],
    ["SELECT E'\\'' AS x, email FROM customer WHERE customer_id = 1", { x: "'", email: masked }],
    ['SELECT email AS "a""b", customer_id AS "x)y" FROM customer WHERE customer_id = 1', { 'a"b': masked, 'x)y': 1 }],
  ];
  for (const [sql, row] of wrapped) expect([sql, (await query(a, sql)).rows]).toEqual([sql, [row]]);
});

test('D1 (low, fixed): an ambiguous date literal is read in the order the source server uses (DateStyle pins the output style only)', async () => {
  // The pinned DateStyle was 'ISO, YMD', there for output (ISO 8601 is the same in every order),
  // but its order part also decided how an agent's literal is read: '01/02/03' was 2001-02-03
  // through InterLock and is 2003-01-02 in psql on this server (ISO, MDY; a European server is
  // often DMY), and '01/02/2024' failed (22008) where psql reads 2024-01-02: a WHERE on such a
  // literal selected other rows, a queued UPDATE other rows, without notice. Now only 'ISO' is
  // pinned (the order is the server's postgresql.conf one) and any 'ISO, …' holds the pin.
  const own = await a.admin.query("SELECT '01/02/03'::date::text AS d, '01/02/2024'::date::text AS e");
  const r = await query(a, "SELECT '01/02/03'::date AS d, '01/02/2024'::date AS e");
  expect({ kind: r.kind, rows: r.rows }).toEqual({ kind: 'rows', rows: own.rows });
});

describe('E held: a SQL_ASCII source database', () => {
  // PostgreSQL converts nothing between a SQL_ASCII database and a client: bytes stored as they came
  // (here Latin-1 'café', \xe9) would reach the driver, which decodes UTF-8 and would replace what
  // is not UTF-8 by U+FFFD (a different value, without notice). Held: for the pinned client_encoding
  // UTF8 the server checks the bytes on the way out and fails the statement (22021, data_exception),
  // so the read fails instead of serving another value.
  const name = `rt46a_ascii_${process.pid}`;
  const reader = `${name}_reader`;
  let admin: pg.Client;
  let db: pg.Client;
  let c: PostgresSourceConnector;
  beforeAll(async () => {
    admin = new pg.Client({ connectionString: ADMIN_URL });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${name} TEMPLATE template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'`);
    await admin.query(`CREATE ROLE ${reader} LOGIN`);
    db = new pg.Client({ connectionString: urlFor(name) });
    await db.connect();
    await db.query(`CREATE TABLE t (v text); INSERT INTO t VALUES (E'caf\\xe9'); GRANT SELECT ON t TO ${reader}`);
    const u = new URL(ADMIN_URL);
    c = new PostgresSourceConnector('ascii', { host: u.hostname, port: Number(u.port || 5432), database: name, reader: { user: reader } });
  });
  afterAll(async () => {
    await c?.close();
    await db?.end();
    await admin?.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin?.query(`DROP ROLE IF EXISTS ${reader}`);
    await admin?.end();
  });

  test('a value that is not UTF-8 is not served as U+FFFD: the read fails data_exception', async () => {
    const stored = await db.query({ text: 'SELECT encode(convert_to(v, current_setting($1)), $2) AS hex FROM t', values: ['server_encoding', 'hex'] });
    expect(stored.rows).toEqual([{ hex: '636166e9' }]); // 'caf' and the Latin-1 byte \xe9, as stored
    const got = await c.read('SELECT v FROM t', [], { maxRows: 10, maxBytes: 1 << 20 }).then(
      (r) => r.rows,
      (e: SourceError) => e.code,
    );
    expect(got).toBe('execution_failed'); // the statement failed on the server (class 22), no value served
    // An ASCII value of the same table is served.
    await db.query("INSERT INTO t VALUES ('plain')");
    expect((await c.read("SELECT v FROM t WHERE v = 'plain'", [], { maxRows: 10, maxBytes: 1 << 20 })).rows).toEqual([{ v: 'plain' }]);
  });
});
