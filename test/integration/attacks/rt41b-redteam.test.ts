/**
 * Red team rt41b: user-function governance (task hfn, src/sql/function-reads.ts) and the front door
 * (h29a, src/transport/front-door.ts), attacked on real PostgreSQL through the governed pipeline.
 *
 * User functions (the database owner writes the functions; the agent's role reads public.* but not
 * public.staff.ssn, and a policy masks public.staff.salary):
 *  - F1 (high, fixed): a parameter default (`a text DEFAULT emp_ssn(1)`) runs in the caller's
 *    statement; the string body `SELECT $1` looked pure, so `SELECT echo_default()` answered the SSN.
 *  - F2 (high, fixed): an unpinned SECURITY DEFINER body resolves names on the session path, whose
 *    `$user` is the owner inside it: `SELECT title FROM dept` read the owner's schema's `dept` (an
 *    ungranted table holding SSNs) while the analysis resolved `public.dept` (granted).
 *  - F3 (high, fixed by hcast): a user cast WITH FUNCTION (`CREATE CAST (tag AS text) WITH FUNCTION tag_text`)
 *    runs a function that reads the denied column on `'x'::tag::text`, at the top level and in a
 *    body; neither counts it.
 *  - F4 (medium, fixed): a function whose parameter or result type is a domain whose CHECK calls a
 *    data-reading function: the coercion runs the CHECK (an error/no-error oracle on the SSN).
 *  - F5 (low, fixed by hf5): CREATE OR REPLACE after the scan: the server ran the new body, the
 *    analysis the scanned one, until a rescan. Now the read checks the functions' pg_proc versions
 *    right before the statement: catalog_stale, and the gateway rescans.
 *  - F7 (medium, fixed by hcast): a user type's default btree operator class: ORDER BY, DISTINCT and GROUP BY
 *    sort with its FUNCTION 1 (support function), not with the `<` operator's function the analysis
 *    follows; a comparison that reads the denied column leaks through the order.
 *  - F8 (low, fixed): the refusal of a call whose function reads a masked column named the column even
 *    when the caller's roles deny describing it (src/pipeline/04-policy.ts).
 *  - F9 (low, fixed): the reason an opaque function is refused named the relations of its body the
 *    scan does not catalogue or whose view lineage is unknown (`reads hr_secret.payroll_seq, which is
 *    not in the source catalogue`), which the caller may not describe.
 * Front door:
 *  - F6 (low, fixed): server.closeIdleConnections() (server.close() and shutdown call it) left the
 *    front door's connections that had sent nothing yet, where node:http destroys such idle
 *    connections at once: shutdown waited for them, and a request sent on one after close() was
 *    handed to node:http and served.
 */
import pg from 'pg';
import { connect } from 'node:net';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { governAsHrAnalyst } from '../../helpers/hr-analyst';
import { upsertRole } from '../../../src/control/roles';
import { scanSource } from '../../../src/control/scan';
import { loadCatalog, saveCatalog } from '../../../src/control/catalog';
import { RawClient } from '../../helpers/raw-client';
import { shed } from '../../helpers/capacity-load';
import { frontDoorOf } from '../../../src/transport/front-door';

const MODERN = '2026-07-28';
const TAIL = "A function's result cannot be masked or checked column by column, so the call is refused. Read the columns you may use directly (interlock_describe_access lists them), or ask an operator.";
/** The refusal of a function whose body may read what the caller may not (no column named: not describable here). */
const denied = (fn: string) => ({ code: 'source_role_denied', message: `The function ${fn} reads a relation or column that no source role granted to this identity allows reading. ${TAIL}` });
/** The same refusal when the caller may describe some column of `table` but not the refused one: the table is named, with why (task hnu43 item 4). */
const deniedIn = (fn: string, table: string) => ({
  code: 'source_role_denied',
  message: `The function ${fn} reads table ${table}. InterLock does not know which of its columns a function's body uses, so a call counts as reading every column of it, and a column of it is one no source role granted to this identity allows reading. ${TAIL}`,
});
/** The catalog_stale refusal's text (spec/errors-v1.json). */
const STALE = 'A user function this statement runs (directly, or through an operator, a cast, an operator class, a view or a default) was created, replaced, altered or dropped on the source since its catalogue was last scanned, a relation whose whole rows it uses (a row value, its row type, or *) gained, lost or changed a column since then, a view it reads was redefined since then, or the snapshot predates facts InterLock now needs, so what the statement may read is not known; nothing was run. The gateway has started a rescan of the source: try again in a few seconds.';
const opaque = (fn: string, why: string) => ({ code: 'function_not_allowed', message: `The function ${fn} ${why}, so InterLock cannot tell what it reads; it is refused unless an operator lists it in the source's trusted_functions.` });

describe('user functions', () => {
  let env: GovernedEnv;
  let admin: pg.Client;

  /** The refusal's code and message, or the rows when the call was served. */
  async function outcome(sql: string): Promise<unknown> {
    const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql }, env.apiKey);
    expect(r.status).toBe(200);
    const res = r.body.result;
    if (res.isError) return { code: res.structuredContent.code, message: res.structuredContent.message };
    return res.structuredContent.rows;
  }

  type Statement = { effect: 'allow' | 'deny'; action: 'read' | 'describe'; resource: string };
  const SSN_DENY: Statement = { effect: 'deny', action: 'read', resource: 'public.staff.ssn' };
  /** Role hr: read and describe public.*, then `extra`. */
  async function setHr(extra: Statement[]): Promise<void> {
    const base: Statement[] = [
      { effect: 'allow', action: 'read', resource: 'public.*' },
      { effect: 'allow', action: 'describe', resource: 'public.*' },
    ];
    await upsertRole(env.db, { name: 'hr', statements: [...base, ...extra] });
    env.gateway.store.invalidate('*');
  }

  beforeAll(async () => {
    env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } } } });
    admin = new pg.Client({ connectionString: env.sourceUrl });
    await admin.connect();
    const owner = admin.escapeIdentifier((await admin.query('SELECT current_user AS u')).rows[0].u);
    await admin.query(`
      SET search_path = public;
      CREATE TABLE staff (emp_id int PRIMARY KEY, name text, ssn text, salary numeric);
      INSERT INTO staff VALUES (1, 'Ada', '123-45-6789', 98000), (2, 'Bob', '987-65-4321', 120000);
      CREATE TABLE dept (dept_id int PRIMARY KEY, title text);
      INSERT INTO dept VALUES (10, 'Research');
      CREATE FUNCTION emp_ssn(i int) RETURNS text LANGUAGE sql STABLE AS $$ SELECT ssn FROM staff WHERE emp_id = i $$;
      CREATE FUNCTION echo_default(a text DEFAULT emp_ssn(1)) RETURNS text LANGUAGE sql STABLE AS $$ SELECT $1 $$;
      CREATE FUNCTION echo_default2(a int, b text DEFAULT emp_ssn(1)) RETURNS text LANGUAGE sql STABLE AS $$ SELECT b $$;
      CREATE FUNCTION emp_sal(i int) RETURNS numeric LANGUAGE sql STABLE AS $$ SELECT salary FROM staff WHERE emp_id = i $$;
      CREATE SCHEMA hr_secret;
      CREATE SEQUENCE hr_secret.payroll_seq;
      CREATE FUNCTION peek() RETURNS bigint LANGUAGE sql STABLE AS $$ SELECT last_value FROM hr_secret.payroll_seq $$;
      -- Held: overloads, VARIADIC, polymorphic, SETOF in FROM with LATERAL, whole-row through a CTE,
      -- a partition's child, an aggregate's SQL transition function.
      CREATE FUNCTION ovl(i int) RETURNS text LANGUAGE sql STABLE AS $$ SELECT 'pure' $$;
      CREATE FUNCTION ovl(t text) RETURNS text LANGUAGE sql STABLE AS $$ SELECT ssn FROM staff LIMIT 1 $$;
      CREATE FUNCTION vari(VARIADIC a int[]) RETURNS text LANGUAGE sql STABLE AS $$ SELECT ssn FROM staff LIMIT 1 $$;
      CREATE FUNCTION poly(a anyelement) RETURNS text LANGUAGE sql STABLE AS $$ SELECT ssn FROM staff LIMIT 1 $$;
      CREATE FUNCTION setof_ssn() RETURNS TABLE (s text) LANGUAGE sql STABLE AS $$ SELECT ssn FROM staff $$;
      CREATE FUNCTION via_cte() RETURNS text LANGUAGE sql STABLE AS $$ WITH x AS (SELECT s FROM staff s) SELECT (x.s).ssn FROM x LIMIT 1 $$;
      CREATE TABLE pstaff (emp_id int, ssn text) PARTITION BY RANGE (emp_id);
      CREATE TABLE pstaff_1 PARTITION OF pstaff FOR VALUES FROM (0) TO (100);
      CREATE FUNCTION child_ssn() RETURNS text LANGUAGE sql STABLE AS $$ SELECT ssn FROM pstaff_1 LIMIT 1 $$;
      CREATE FUNCTION agg_sf(s int, x int) RETURNS int LANGUAGE sql STABLE AS $$ SELECT coalesce(s, 0) + (SELECT count(*)::int FROM staff WHERE ssn LIKE '1%') $$;
      CREATE AGGREGATE leak_agg(int) (SFUNC = agg_sf, STYPE = int);
      CREATE FUNCTION twice(int) RETURNS int LANGUAGE sql STABLE AS $$ SELECT $1 * 2 $$;
      CREATE FUNCTION twice_t(int) RETURNS text LANGUAGE sql STABLE AS $$ SELECT ($1 * 2)::text $$;
      -- F2: the owner's own schema (what "$user" names inside SECURITY DEFINER) holds another dept.
      CREATE SCHEMA ${owner};
      CREATE TABLE ${owner}.dept AS SELECT emp_id AS dept_id, ssn AS title FROM staff;
      CREATE FUNCTION dept_titles() RETURNS SETOF text LANGUAGE sql STABLE SECURITY DEFINER AS $$ SELECT title FROM dept $$;
      CREATE FUNCTION dept_titles_invoker() RETURNS SETOF text LANGUAGE sql STABLE AS $$ SELECT title FROM dept $$;
      -- F3: a user cast whose function reads the denied column.
      CREATE TYPE tag AS ENUM ('x');
      CREATE FUNCTION tag_text(t tag) RETURNS text LANGUAGE sql STABLE AS $$ SELECT string_agg(ssn, ',' ORDER BY emp_id) FROM staff $$;
      CREATE CAST (tag AS text) WITH FUNCTION tag_text(tag);
      CREATE FUNCTION via_cast(t tag) RETURNS text LANGUAGE sql STABLE AS $$ SELECT t::text $$;
      -- F4: a domain whose CHECK reads the denied column, as a result and as a parameter type.
      CREATE FUNCTION ssn_is(i int, s text) RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT EXISTS (SELECT 1 FROM staff WHERE emp_id = i AND ssn = s) $$;
      CREATE DOMAIN probe AS int CHECK (ssn_is(1, '123-45-6789'));
      CREATE FUNCTION ret_probe(i int) RETURNS probe LANGUAGE sql STABLE AS $$ SELECT i $$;
      CREATE FUNCTION arg_probe(p probe) RETURNS int LANGUAGE sql STABLE AS $$ SELECT 1 $$;
      -- F7: a user type whose default btree operator class's comparison (FUNCTION 1) reads the denied
      -- column; its operators are pure. ORDER BY / DISTINCT / GROUP BY sort with FUNCTION 1.
      CREATE TYPE tag2 AS ENUM ('a', 'b');
      CREATE FUNCTION tag2_cmp(x tag2, y tag2) RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN x::text = y::text THEN 0 WHEN ((SELECT ssn FROM public.staff WHERE emp_id = 1) LIKE '1%') = (x::text < y::text) THEN 1 ELSE -1 END $$;
      CREATE FUNCTION tag2_lt(tag2, tag2) RETURNS bool LANGUAGE sql IMMUTABLE AS $$ SELECT $1::text < $2::text $$;
      CREATE FUNCTION tag2_le(tag2, tag2) RETURNS bool LANGUAGE sql IMMUTABLE AS $$ SELECT $1::text <= $2::text $$;
      CREATE FUNCTION tag2_eq(tag2, tag2) RETURNS bool LANGUAGE sql IMMUTABLE AS $$ SELECT $1::text = $2::text $$;
      CREATE FUNCTION tag2_ge(tag2, tag2) RETURNS bool LANGUAGE sql IMMUTABLE AS $$ SELECT $1::text >= $2::text $$;
      CREATE FUNCTION tag2_gt(tag2, tag2) RETURNS bool LANGUAGE sql IMMUTABLE AS $$ SELECT $1::text > $2::text $$;
      CREATE OPERATOR < (LEFTARG = tag2, RIGHTARG = tag2, FUNCTION = tag2_lt);
      CREATE OPERATOR <= (LEFTARG = tag2, RIGHTARG = tag2, FUNCTION = tag2_le);
      CREATE OPERATOR = (LEFTARG = tag2, RIGHTARG = tag2, FUNCTION = tag2_eq);
      CREATE OPERATOR >= (LEFTARG = tag2, RIGHTARG = tag2, FUNCTION = tag2_ge);
      CREATE OPERATOR > (LEFTARG = tag2, RIGHTARG = tag2, FUNCTION = tag2_gt);
      CREATE OPERATOR CLASS tag2_ops DEFAULT FOR TYPE tag2 USING btree AS OPERATOR 1 <, OPERATOR 2 <=, OPERATOR 3 =, OPERATOR 4 >=, OPERATOR 5 >, FUNCTION 1 tag2_cmp(tag2, tag2);
      -- hcast: a user type whose cast and operator class run only pure (or built-in) code stays usable.
      CREATE TYPE tag3 AS ENUM ('p', 'q');
      CREATE FUNCTION tag3_text(t tag3) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT upper(t::name::text) $$;
      CREATE CAST (tag3 AS text) WITH FUNCTION tag3_text(tag3);
      CREATE FUNCTION tag3_cmp(x tag3, y tag3) RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT enum_cmp(x, y) $$;
      CREATE FUNCTION tag3_lt(tag3, tag3) RETURNS bool LANGUAGE sql IMMUTABLE AS $$ SELECT enum_cmp($1, $2) < 0 $$;
      CREATE FUNCTION tag3_eq(tag3, tag3) RETURNS bool LANGUAGE sql IMMUTABLE AS $$ SELECT enum_cmp($1, $2) = 0 $$;
      CREATE OPERATOR < (LEFTARG = tag3, RIGHTARG = tag3, FUNCTION = tag3_lt);
      CREATE OPERATOR = (LEFTARG = tag3, RIGHTARG = tag3, FUNCTION = tag3_eq);
      CREATE OPERATOR CLASS tag3_ops DEFAULT FOR TYPE tag3 USING btree AS OPERATOR 1 <, OPERATOR 3 =, FUNCTION 1 tag3_cmp(tag3, tag3);
      CREATE TABLE pure_things (id int, v tag3);
      INSERT INTO pure_things VALUES (1, 'q'), (2, 'p');
      CREATE TABLE things (id int, v tag2);
      INSERT INTO things VALUES (1, 'a'), (2, 'b');
      CREATE VIEW things_sorted AS SELECT id FROM things ORDER BY v;
      GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${admin.escapeIdentifier(env.demo.readerRole)};`);
    await governAsHrAnalyst(env, 'hr');
  }, 120_000);
  afterAll(async () => {
    await admin?.end();
    await env?.close();
  });

  test('F1 (high): a parameter default that calls a data-reading function counts', async () => {
    expect(await outcome('SELECT echo_default()')).toEqual(deniedIn('public.echo_default', 'public.staff'));
    expect(await outcome('SELECT echo_default2(1)')).toEqual(deniedIn('public.echo_default2', 'public.staff'));
    // Pure functions keep working.
    expect(await outcome('SELECT twice(2) AS t')).toEqual([{ t: 4 }]);
  });

  test("F2 (high): an unpinned SECURITY DEFINER body's names also resolve in the owner's schema", async () => {
    expect(await outcome('SELECT * FROM dept_titles()')).toEqual(denied('public.dept_titles'));
    // The same body without SECURITY DEFINER reads public.dept, which the caller may read.
    expect(await outcome('SELECT * FROM dept_titles_invoker() AS t')).toEqual([{ t: 'Research' }]);
  });

  test('F3 (high): a user cast WITH FUNCTION that reads the denied column counts (explicit and inside a body)', async () => {
    for (const sql of ["SELECT 'x'::tag::text AS t", "SELECT CAST('x'::tag AS text) AS t", "SELECT via_cast('x') AS t"]) {
      expect(await outcome(sql)).toMatchObject({ code: 'source_role_denied' });
    }
  });

  test('F4 (medium): a parameter or result type whose domain CHECK runs user code makes the function opaque', async () => {
    expect(await outcome('SELECT ret_probe(1)')).toEqual(opaque('public.ret_probe', 'uses a type whose input runs user code'));
    expect(await outcome('SELECT arg_probe(1)')).toEqual(opaque('public.arg_probe', 'uses a type whose input runs user code'));
  });

  /** Rescans the source as an operator would and drops the gateway's cached snapshot. */
  async function rescan(): Promise<void> {
    await scanSource(env.db, 'chinook');
    env.gateway.store.invalidate('*');
  }

  /** The outcome once the gateway's rescan after a refusal has landed: the first answer must be catalog_stale. */
  async function afterRescan(sql: string): Promise<unknown> {
    const first = await outcome(sql);
    expect(first).toEqual({ code: 'catalog_stale', message: STALE });
    // The gateway rescans on its own (one scan at a time); poll until the new snapshot is in use.
    for (let i = 0; i < 200; i++) {
      const o = await outcome(sql);
      if ((o as { code?: string }).code !== 'catalog_stale') return o;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`still catalog_stale: ${sql}`);
  }

  /**
   * A call served before `change` (run as the owner) is refused catalog_stale after it, then judged on
   * the changed function once the gateway has rescanned (`denied(fn)`); `undo` restores the function.
   */
  async function changedFunction(sql: string, fn: string, served: unknown, change: string, undo: string, table?: string): Promise<void> {
    expect(await outcome(sql)).toEqual(served);
    await admin.query(change);
    try {
      expect(await afterRescan(sql)).toEqual(table ? deniedIn(fn, table) : denied(fn));
    } finally {
      await admin.query(undo);
    }
    // A rescan the gateway started before the undo may land after ours: rescan until the undo is seen.
    let last: unknown;
    for (let i = 0; i < 20 && JSON.stringify(last) !== JSON.stringify(served); i++) {
      await rescan();
      last = await outcome(sql);
    }
    expect(last).toEqual(served);
  }

  test('F5 (low): a function replaced after the scan is refused catalog_stale, then judged on its new body once rescanned', async () => {
    await changedFunction('SELECT twice_t(1) AS t', 'public.twice_t', [{ t: '2' }],
      'CREATE OR REPLACE FUNCTION public.twice_t(int) RETURNS text LANGUAGE sql STABLE AS $$ SELECT ssn FROM public.staff WHERE emp_id = $1 $$',
      'CREATE OR REPLACE FUNCTION public.twice_t(int) RETURNS text LANGUAGE sql STABLE AS $$ SELECT ($1 * 2)::text $$', 'public.staff');
  });

  test('hf5: ALTER FUNCTION … SECURITY DEFINER after the scan (the body now resolves in the owner\'s schema) is refused until rescanned', async () => {
    await changedFunction('SELECT * FROM dept_titles_invoker() AS t', 'public.dept_titles_invoker', [{ t: 'Research' }],
      'ALTER FUNCTION public.dept_titles_invoker() SECURITY DEFINER', 'ALTER FUNCTION public.dept_titles_invoker() SECURITY INVOKER');
  });

  test('hf5: ALTER FUNCTION … SET search_path after the scan is refused until rescanned', async () => {
    // Pinned to the owner's schema, the body's dept is the owner's (its title holds the SSN).
    const owner = admin.escapeIdentifier((await admin.query('SELECT current_user AS u')).rows[0].u);
    await changedFunction('SELECT * FROM dept_titles_invoker() AS t', 'public.dept_titles_invoker', [{ t: 'Research' }],
      `ALTER FUNCTION public.dept_titles_invoker() SET search_path = ${owner}`, 'ALTER FUNCTION public.dept_titles_invoker() RESET search_path');
  });

  test('hf5: a function dropped and created again under the same name, called only through a view, is refused until rescanned', async () => {
    await admin.query('CREATE FUNCTION public.dbl(int) RETURNS int LANGUAGE sql STABLE AS $$ SELECT $1 * 2 $$; CREATE VIEW public.dept_dbl AS SELECT dept_id, public.dbl(dept_id) AS d FROM public.dept; GRANT SELECT ON public.dept_dbl TO ' + admin.escapeIdentifier(env.demo.readerRole));
    await rescan();
    expect(await outcome('SELECT d FROM dept_dbl')).toEqual([{ d: 20 }]);
    // A view keeps the function's oid: drop both, then recreate them with a body reading the SSN.
    await admin.query('DROP VIEW public.dept_dbl; DROP FUNCTION public.dbl(int)');
    await admin.query("CREATE FUNCTION public.dbl(int) RETURNS int LANGUAGE sql STABLE AS $$ SELECT count(*)::int FROM public.staff WHERE ssn LIKE '1%' $$; CREATE VIEW public.dept_dbl AS SELECT dept_id, public.dbl(dept_id) AS d FROM public.dept; GRANT SELECT ON public.dept_dbl TO " + admin.escapeIdentifier(env.demo.readerRole));
    try {
      // Another text than above: a result stored before the change (computed under the old body) is not asked for.
      expect(await afterRescan('SELECT d AS d2 FROM dept_dbl')).toEqual({ code: 'source_role_denied', message: expect.any(String) });
    } finally {
      await admin.query('DROP VIEW public.dept_dbl; DROP FUNCTION public.dbl(int)');
      await rescan();
    }
  });

  test('hf5: support functions of gist, gin, brin and spgist operator classes count like btree/hash ones (an opaque one is refused)', async () => {
    // A user C-level function (LANGUAGE internal, superuser-made) as a brin and a gin support function of a user type.
    await admin.query(`
      CREATE TYPE tag4 AS ENUM ('m', 'n');
      CREATE FUNCTION tag4_opcinfo(internal) RETURNS internal LANGUAGE internal AS 'brin_minmax_opcinfo';
      CREATE OPERATOR CLASS tag4_brin FOR TYPE tag4 USING brin AS FUNCTION 1 tag4_opcinfo(internal);
      CREATE TYPE tag5 AS ENUM ('m', 'n');
      CREATE FUNCTION tag5_extract(tag5, internal) RETURNS internal LANGUAGE internal AS 'ginarrayextract';
      CREATE OPERATOR CLASS tag5_gin FOR TYPE tag5 USING gin AS FUNCTION 2 tag5_extract(tag5, internal);
      CREATE TABLE brin_things (id int, v tag4, w tag5);
      INSERT INTO brin_things VALUES (1, 'm', 'n');
      GRANT SELECT ON brin_things TO ${admin.escapeIdentifier(env.demo.readerRole)};`);
    try {
      await rescan();
      expect(await outcome('SELECT v FROM brin_things')).toEqual(opaque('public.tag4_opcinfo', 'runs code InterLock cannot analyse (LANGUAGE internal)'));
      expect(await outcome('SELECT w FROM brin_things')).toEqual(opaque('public.tag5_extract', 'runs code InterLock cannot analyse (LANGUAGE internal)'));
      // Columns of other types stay readable.
      expect(await outcome('SELECT id FROM brin_things')).toEqual([{ id: 1 }]);
    } finally {
      await admin.query('DROP TABLE brin_things; DROP TYPE tag4 CASCADE; DROP TYPE tag5 CASCADE; DROP FUNCTION IF EXISTS tag4_opcinfo(internal)');
      await rescan();
    }
  });

  test("F7 (medium): a user type's default btree operator class's comparison function (reading the denied column) counts on ORDER BY, DISTINCT, GROUP BY", async () => {
    // Served before hcast: [{v:'b'},{v:'a'}], the order telling whether staff 1's SSN starts with 1.
    for (const sql of ['SELECT v FROM things ORDER BY v', 'SELECT DISTINCT v FROM things', 'SELECT v FROM things GROUP BY v', 'SELECT id FROM things ORDER BY v']) {
      expect(await outcome(sql)).toMatchObject({ code: 'source_role_denied' });
    }
    // A view that sorts by the column without returning it: the sort runs inside the view.
    expect(await outcome('SELECT id FROM things_sorted')).toMatchObject({ code: 'source_role_denied' });
  });

  test('hf5: a snapshot scanned before the type facts (no typeCode) is stale: refused catalog_stale, rescanned, then judged with them', async () => {
    const { typeCode: _dropped, ...old } = (await loadCatalog(env.db, 'chinook'))!;
    await saveCatalog(env.db, 'chinook', { ...old, scannedAt: new Date().toISOString() });
    env.gateway.store.invalidate('*');
    // Before hf5 such a snapshot served the sort (tag2's comparison function reads the denied SSN) uncounted.
    expect(await afterRescan('SELECT v FROM things ORDER BY v')).toMatchObject({ code: 'source_role_denied' });
    expect((await loadCatalog(env.db, 'chinook'))!.typeCode).toEqual(expect.any(Array));
  });

  test('hcast: a user type whose attached cast and operator-class functions are pure stays usable', async () => {
    expect(await outcome('SELECT v FROM pure_things ORDER BY v')).toEqual([{ v: 'p' }, { v: 'q' }]);
    expect(await outcome("SELECT 'p'::tag3::text AS t")).toEqual([{ t: 'P' }]);
    expect(await outcome('SELECT DISTINCT v::text AS t FROM pure_things ORDER BY 1')).toEqual([{ t: 'P' }, { t: 'Q' }]);
  });

  test('held: overloads, VARIADIC, polymorphic, LATERAL SETOF, whole-row through a CTE, a partition child, an aggregate', async () => {
    await setHr([SSN_DENY, { effect: 'deny', action: 'read', resource: 'public.pstaff.ssn' }]);
    for (const [sql, fn, table] of [
      ['SELECT ovl(1)', 'public.ovl', 'public.staff'],
      ['SELECT vari(1)', 'public.vari', 'public.staff'],
      ['SELECT poly(1)', 'public.poly', 'public.staff'],
      ['SELECT * FROM dept d, LATERAL setof_ssn() x', 'public.setof_ssn', 'public.staff'],
      ['SELECT via_cte()', 'public.via_cte', 'public.staff'],
      ['SELECT child_ssn()', 'public.child_ssn', 'public.pstaff_1'],
    ]) {
      expect([sql, await outcome(sql)]).toEqual([sql, deniedIn(fn, table)]);
    }
    expect(await outcome('SELECT leak_agg(1)')).toEqual(opaque('public.leak_agg', 'runs code InterLock cannot analyse (LANGUAGE internal)'));
  });

  test('F9 (low): an opaque reason does not name a relation of the body the caller may not describe', async () => {
    expect(await outcome('SELECT peek()')).toEqual(opaque('public.peek', 'reads a relation that is not in the source catalogue'));
  });

  test("F8 (low): the masked-column refusal names the column only when the caller may describe it", async () => {
    await setHr([{ effect: 'deny', action: 'describe', resource: 'public.staff.salary' }]);
    try {
      expect(await outcome('SELECT emp_sal(1)')).toEqual({
        code: 'policy_denied',
        message: "The function public.emp_sal reads a column that a policy masks for this identity. A function's result cannot be masked, so the call is refused; select the column itself to see it masked.",
      });
      // A caller who may describe it is told which column.
      await setHr([]);
      expect(await outcome('SELECT emp_sal(1)')).toEqual({
        code: 'policy_denied',
        message: "The function public.emp_sal reads table public.staff. InterLock does not know which of its columns a function's body uses, so a call counts as reading every column of it, and column public.staff.salary (which the body need not use) is one a policy masks for this identity. A function's result cannot be masked, so the call is refused; select the column itself to see it masked.",
      });
    } finally {
      await setHr([SSN_DENY]);
    }
  });
});

describe('front door', () => {
  let env: GovernedEnv;
  let port = 0;

  beforeAll(async () => {
    env = await startGovernedEnv({
      config: {
        listen: { headers_timeout_ms: 20_000, request_timeout_ms: 30_000 } as never,
        admission: { enabled: true, initial_limit: 1, min_limit: 1, max_limit: 1, queue_size: 0, queue_timeout_ms: 250, tolerance: 2, max_event_loop_delay_ms: 60_000, max_audit_queue: 1000, pause_refused_connections: false },
      },
    });
    port = Number(new URL(env.url).port);
    // Warm up: the key's identity is remembered by the limiter (refusals from the headers need it).
    const c = await RawClient.open(port);
    expect((await c.send(frontDoorCall('warm', []))).status).toBe(200);
    c.close();
  }, 60_000);
  afterAll(async () => {
    await env?.close();
  });

  /** A modern tools/call of interlock_query: header lines `extra` after the usual ones, `length` replacing the Content-Length line, `line` the request line. */
  function frontDoorCall(id: string, extra: string[], length?: (n: number) => string, line = 'POST /mcp HTTP/1.1'): string {
    const b = JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: 'SELECT 1 AS x' }, _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} } } });
    const n = Buffer.byteLength(b);
    const lines = [line, `Host: 127.0.0.1:${port}`, 'Content-Type: application/json', 'Accept: application/json, text/event-stream', `Authorization: Bearer ${env.apiKey}`, length ? length(n) : `Content-Length: ${n}`];
    return [...lines, `MCP-Protocol-Version: ${MODERN}`, 'Mcp-Method: tools/call', 'Mcp-Name: interlock_query', ...extra].join('\r\n') + '\r\n\r\n' + b;
  }

  /** Writes `bytes` on a new connection and resolves with the statuses of every answer until the connection ends. */
  function statuses(bytes: string): Promise<string[]> {
    return new Promise((resolve) => {
      const s = connect(port, '127.0.0.1', () => s.write(bytes));
      let out = '';
      s.on('data', (d) => (out += d.toString('latin1')));
      s.on('error', () => undefined);
      s.on('close', () => resolve([...out.matchAll(/HTTP\/1\.1 (\d+)/g)].map((m) => m[1])));
      setTimeout(() => s.end(), 700).unref();
    });
  }

  test('held: framing variants are refused at the front door only when node:http frames them the same way; the rest is handed over', async () => {
    const door = frontDoorOf(env.gateway.server)!;
    const cases: Array<[string, string, number, string[]]> = [
      ['plain', frontDoorCall('a', []), 1, ['429']],
      ['a second Content-Length in other case', frontDoorCall('b', ['content-length: 9999']), 0, ['400']],
      ['Content-Length with +', frontDoorCall('c', [], (n) => `Content-Length: +${n}`), 0, ['400']],
      ['a space before the colon', frontDoorCall('d', [], (n) => `Content-Length : ${n}`), 0, ['400']],
      ['Transfer-Encoding beside Content-Length', frontDoorCall('e', ['Transfer-Encoding: chunked']), 0, ['400']],
      ['obs-fold', frontDoorCall('f', ['X-Foo: a', ' b']), 0, ['400']],
      ['a bare LF hiding a header', frontDoorCall('g', ['X-Foo: a\nContent-Length: 3']), 0, ['400']],
      ['Content-Length with leading zeros', frontDoorCall('h', [], (n) => `Content-Length: 000${n}`), 1, ['429']],
      ['Content-Length list', frontDoorCall('k', [], (n) => `Content-Length: ${n}, ${n}`), 0, ['400']],
      ['NUL in a header', frontDoorCall('m', ['X-Foo: a\u0000b']), 0, ['400']],
      ['GET', frontDoorCall('i', [], undefined, 'GET /mcp HTTP/1.1'), 0, ['405']],
      ['a query string', frontDoorCall('j', [], undefined, 'POST /mcp?x=1 HTTP/1.1'), 0, ['429']],
      ['Connection: close', frontDoorCall('n', ['Connection: close']), 0, ['429']],
      ['a second Host', frontDoorCall('p', ['host: evil.example']), 0, ['429']],
      ['a second Authorization', frontDoorCall('q', ['authorization: Bearer il_nope']), 0, ['429']],
      ['a refusal, then another path pipelined', frontDoorCall('l', []) + 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', 1, ['429', '200']],
    ];
    for (const [what, bytes, refused, want] of cases) {
      const slot = shed(env);
      const before = door.refused;
      const got = await statuses(bytes);
      slot.release();
      expect([what, door.refused - before, got]).toEqual([what, refused, want]);
      while (env.gateway.capacity!.shedding()) await new Promise((r) => setTimeout(r, 50));
    }
  }, 60_000);

  test('F6 (low): closeIdleConnections ends front-door connections that have sent nothing, as node:http does', async () => {
    const door = frontDoorOf(env.gateway.server)!;
    const slot = shed(env);
    try {
      const adopted0 = door.adopted;
      const c = await RawClient.open(port);
      while (door.adopted === adopted0) await new Promise((r) => setImmediate(r));
      expect(door.size).toBe(1);
      env.gateway.server.closeIdleConnections();
      expect(door.size).toBe(0);
      await c.ended;
    } finally {
      slot.release();
    }
  });
});
