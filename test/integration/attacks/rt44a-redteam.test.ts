/**
 * Red team rt44a: the write-hook guard (task hhook, src/sources/postgres/hook-guard.ts) and the rest
 * of an approved write's guard (write.ts runWrite), as an insider owning the written tables (here the
 * superuser, as in rt43a: a table owner or DBA, never the writer role). Each hook records
 * `current_user` in rt44_evidence (writable by PUBLIC): a row there proves code no reviewer saw ran
 * as the writer role and committed.
 *
 * Findings:
 *  L1 (high, fixed) the guard read the catalogue before the statement took its table locks: DDL the
 *     insider had run but not yet committed at approval (CREATE TRIGGER, holding its lock) passed
 *     the guard, the statement waited for the lock, and ran the trigger once the insider committed.
 *     Now the write's targets are locked (ROW EXCLUSIVE, views and descendants included) before the
 *     guard: DDL on them is either committed before the guard (seen) or waits for the write.
 *  L2 (high, fixed as far as a rollback goes) a trigger function (no table lock needed to replace)
 *     replaced while the statement waited on a row lock the insider held: its new body ran as the
 *     writer and committed. Now the guard runs again after the statement (after SET CONSTRAINTS ALL
 *     IMMEDIATE, so deferred triggers have fired): a change seen there rolls everything back. Left
 *     (L2r, test.failing): an effect outside the transaction (dblink, a sequence) of the body that ran.
 *  D1–D4 (high, fixed) functions reached through a hook's expression (a DEFAULT, a CHECK, an index
 *     expression, a row-level security policy) replaced after the write was queued: the fingerprint
 *     recorded the hook's own row, not what it calls. Now it includes every function and operator a
 *     hook depends on (pg_depend), to any depth of SQL-standard bodies.
 *  X2 (high, fixed) the same for the function a written column's domain CHECK calls.
 *  D5 (high, fixed after the red team: hook-guard.ts OPAQUE_REACH_SQL) a function a plpgsql trigger function calls, replaced after the
 *     write was queued: PostgreSQL records no dependency of a plpgsql body, so nothing ties it to the
 *     table.
 *  O1 (low, fixed) the table's owner changed to the writer role (needs membership in it): row-level
 *     security stops applying to the write. O2 (low, fixed) a view's check_option removed: a row
 *     outside the view is written. The fingerprint now holds relowner and the view options.
 * Held: an assignment cast created after queueing (X1, the type guard); a user operator class's
 * support function (D6, the function guard); a trigger on an existing partition, a partition attached
 * after queueing, a view's INSTEAD OF trigger (P1–P3). Controls: a deferred constraint trigger (C1), a
 * view whose owner may not lock its base table (C2: the lock is skipped, the guards still run).
 */
import pg from 'pg';
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { ADMIN_URL } from '../../helpers/pg';
import { approveAndExecute } from '../../../src/approvals/execute';
import { staleCatalogCause } from '../../../src/approvals/causes';
import { scanSource } from '../../../src/control/scan';
import { upsertRole } from '../../../src/control/roles';
import { createIdentity } from '../../../src/control/identities';
import { grantRole } from '../../../src/control/grants';
import { createApiKey } from '../../../src/control/keys';

jest.setTimeout(120_000);

const sc = (r: { body: any }) => r.body.result.structuredContent;

let env: GovernedEnv;
/** The insider's own session (a transaction held open across the approval). */
let insider: pg.Client;
/** API key of an identity that may write the rt44 tables (approval still needed). */
let key: string;
let dblinkConn: string;

beforeAll(async () => {
  env = await startGovernedEnv();
  const wr = `"${env.demo.writerRole}"`;
  const u = new URL(env.sourceUrl);
  dblinkConn = `host=${u.hostname} port=${u.port || 5432} user=${decodeURIComponent(u.username)} dbname=${u.pathname.slice(1)}`;
  await sourceQuery(
    env,
    `CREATE EXTENSION IF NOT EXISTS dblink;
     CREATE TABLE public.rt44_evidence (what text NOT NULL, who text NOT NULL);
     GRANT ALL ON public.rt44_evidence TO PUBLIC;
     CREATE FUNCTION public.rt44_dblog(what text, who text) RETURNS int LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp
       AS $f$ SELECT length(public.dblink_exec('${dblinkConn}', pg_catalog.format('INSERT INTO public.rt44_evidence VALUES (%L, %L)', what, who))) $f$;
     CREATE FUNCTION public.rt44_side() RETURNS int LANGUAGE plpgsql AS $f$ BEGIN RETURN 1; END $f$;
     CREATE FUNCTION public.rt44_imm(t text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $f$ BEGIN RETURN t; END $f$;
     CREATE FUNCTION public.rt44_ok() RETURNS boolean LANGUAGE plpgsql STABLE AS $f$ BEGIN RETURN true; END $f$;
     CREATE FUNCTION public.rt44_def() RETURNS text LANGUAGE plpgsql AS $f$ BEGIN RETURN 'plain'; END $f$;
     CREATE FUNCTION public.rt44_trg() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN PERFORM public.rt44_side(); RETURN NEW; END $f$;
     CREATE TABLE public.rt44_t (id int PRIMARY KEY, v text);
     CREATE TABLE public.rt44_def_t (id int PRIMARY KEY, v text DEFAULT public.rt44_def());
     CREATE TABLE public.rt44_chk_t (id int PRIMARY KEY, v text CHECK (public.rt44_ok()));
     CREATE TABLE public.rt44_idx_t (id int PRIMARY KEY, v text);
     CREATE INDEX rt44_idx ON public.rt44_idx_t (public.rt44_imm(v));
     CREATE TABLE public.rt44_pol_t (id int PRIMARY KEY, v text);
     ALTER TABLE public.rt44_pol_t ENABLE ROW LEVEL SECURITY;
     CREATE POLICY rt44_pol ON public.rt44_pol_t USING (public.rt44_ok());
     CREATE TABLE public.rt44_cal_t (id int PRIMARY KEY, v text);
     CREATE TRIGGER rt44_cal BEFORE INSERT OR UPDATE ON public.rt44_cal_t FOR EACH ROW EXECUTE FUNCTION public.rt44_trg();
     CREATE TABLE public.rt44_part (id int NOT NULL, v text) PARTITION BY LIST (id);
     CREATE TABLE public.rt44_part_1 PARTITION OF public.rt44_part FOR VALUES IN (1);
     CREATE TABLE public.rt44_part_2 (id int NOT NULL, v text);
     CREATE TABLE public.rt44_base (id int PRIMARY KEY, v text);
     CREATE FUNCTION public.rt44_hashfn(t text) RETURNS int LANGUAGE sql IMMUTABLE AS $f$ SELECT pg_catalog.hashtext(t) $f$;
     CREATE OPERATOR CLASS public.rt44_hash_ops FOR TYPE text USING hash AS OPERATOR 1 pg_catalog.= (text, text), FUNCTION 1 public.rt44_hashfn(text);
     CREATE TABLE public.rt44_opc_t (id int PRIMARY KEY, v text);
     CREATE INDEX rt44_opc_idx ON public.rt44_opc_t USING hash (v public.rt44_hash_ops);
     INSERT INTO public.rt44_opc_t VALUES (1, 'one');
     CREATE TABLE public.rt44_own_t (id int PRIMARY KEY, v text);
     INSERT INTO public.rt44_own_t VALUES (1, 'one'), (2, 'two');
     ALTER TABLE public.rt44_own_t ENABLE ROW LEVEL SECURITY;
     CREATE POLICY rt44_own_pol ON public.rt44_own_t USING (id = 1);
     CREATE VIEW public.rt44_cview AS SELECT id, v FROM public.rt44_base WHERE id < 10 WITH CHECK OPTION;
     CREATE TYPE public.rt44_mood AS ENUM ('calm', 'busy');
     CREATE FUNCTION public.rt44_dom_ok(t text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $f$ BEGIN RETURN true; END $f$;
     CREATE DOMAIN public.rt44_dom AS text CHECK (public.rt44_dom_ok(VALUE));
     CREATE TABLE public.rt44_cast_t (id int PRIMARY KEY, m public.rt44_mood, d public.rt44_dom);
     INSERT INTO public.rt44_cast_t VALUES (1, 'calm', 'one');
     CREATE TABLE public.rt44_def_log (id int PRIMARY KEY, v text);
     CREATE FUNCTION public.rt44_defer() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN INSERT INTO public.rt44_evidence VALUES ('deferred as reviewed', current_user::text); RETURN NULL; END $f$;
     CREATE CONSTRAINT TRIGGER rt44_defer AFTER INSERT ON public.rt44_def_log DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.rt44_defer();
     CREATE ROLE rt44_view_owner;
     GRANT SELECT ON public.rt44_base TO rt44_view_owner;
     CREATE VIEW public.rt44_tview AS SELECT id, v FROM public.rt44_base;
     ALTER VIEW public.rt44_tview OWNER TO rt44_view_owner;
     CREATE FUNCTION public.rt44_tview_upd() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN UPDATE public.rt44_base SET v = NEW.v WHERE id = OLD.id; RETURN NEW; END $f$;
     CREATE TRIGGER rt44_tview_upd INSTEAD OF UPDATE ON public.rt44_tview FOR EACH ROW EXECUTE FUNCTION public.rt44_tview_upd();
     GRANT SELECT, UPDATE ON public.rt44_base TO ${wr};
     GRANT SELECT, UPDATE ON public.rt44_tview TO ${wr};
     CREATE VIEW public.rt44_view AS SELECT id, v FROM public.rt44_base;
     INSERT INTO public.rt44_t VALUES (1, 'one'), (2, 'two');
     INSERT INTO public.rt44_chk_t VALUES (1, 'one');
     INSERT INTO public.rt44_idx_t VALUES (1, 'one');
     INSERT INTO public.rt44_pol_t VALUES (1, 'one');
     INSERT INTO public.rt44_cal_t VALUES (1, 'one');
     INSERT INTO public.rt44_base VALUES (1, 'one');
     GRANT SELECT, INSERT, UPDATE, DELETE ON public.rt44_opc_t, public.rt44_own_t, public.rt44_cview, public.rt44_cast_t, public.rt44_def_log, public.rt44_t, public.rt44_def_t, public.rt44_chk_t, public.rt44_idx_t, public.rt44_pol_t, public.rt44_cal_t, public.rt44_part, public.rt44_view TO ${wr};
     GRANT SELECT ON ALL TABLES IN SCHEMA public TO "${env.demo.readerRole}";`,
  );
  await rescan();
  await upsertRole(env.db, {
    name: 'rt44-writer',
    statements: ['rt44_opc_t', 'rt44_own_t', 'rt44_cview', 'rt44_cast_t', 'rt44_def_log', 'rt44_tview', 'rt44_t', 'rt44_def_t', 'rt44_chk_t', 'rt44_idx_t', 'rt44_pol_t', 'rt44_cal_t', 'rt44_part', 'rt44_view'].flatMap((t) => [
      { effect: 'allow' as const, action: 'read' as const, resource: `public.${t}` },
      { effect: 'allow' as const, action: 'write' as const, resource: `public.${t}` },
    ]),
  });
  const who = await createIdentity(env.db, 'rt44-agent');
  await grantRole(env.db, { identityId: who.id, roleName: 'rt44-writer', sourceId: env.demo.sourceId });
  key = (await createApiKey(env.db, who.id)).secret;
  insider = new pg.Client({ connectionString: env.sourceUrl });
  await insider.connect();
  await rescan();
});
afterAll(async () => {
  await insider?.end();
  await env?.close();
  await sourceQueryAdmin('DROP ROLE IF EXISTS rt44_view_owner');
});

/** Runs `sql` on the server's maintenance database as the superuser. */
async function sourceQueryAdmin(sql: string): Promise<void> {
  const c = new pg.Client({ connectionString: ADMIN_URL });
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

async function rescan(): Promise<void> {
  await scanSource(env.db, env.demo.sourceId);
  env.gateway.store.invalidate('*');
}

afterEach(async () => {
  await insider.query('ROLLBACK').catch(() => undefined);
  await sourceQuery(env, 'DELETE FROM public.rt44_evidence');
});

/** Queues `sql` as the rt44 agent; the approval id. */
async function queue(sql: string): Promise<string> {
  const r = await callTool(env, 'interlock_query', { source_id: env.demo.sourceId, sql, params: [] }, key);
  expect(sc(r)).toMatchObject({ status: 'queued', approval_state: 'pending' });
  return sc(r).approval_id;
}

const approve = (id: string) => approveAndExecute(env.db, id, { operator: 'ops-rt44' });

/** What unreviewed code recorded (what, as whom), in order. */
const evidence = async () => sourceQuery<{ what: string; who: string }>(env, 'SELECT what, who FROM public.rt44_evidence ORDER BY what');

/** A plpgsql body that records `what` as the current role, then returns `ret`. */
const recorder = (what: string, ret: string) => `BEGIN INSERT INTO public.rt44_evidence VALUES ('${what}', current_user::text); RETURN ${ret}; END`;

/** The secure outcome for a write whose table gained unreviewed code after its review. */
const stale = (id: string) => ({ approvalId: id, state: 'failed', errorCode: 'catalog_stale', failure: staleCatalogCause(true) });

/** Waits (polling, 30 s at most) until a session of the writer role waits for a lock. */
async function writerWaits(): Promise<void> {
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  try {
    for (const until = Date.now() + 30_000; Date.now() < until; ) {
      const r = await admin.query("SELECT 1 FROM pg_stat_activity WHERE usename = $1 AND wait_event_type = 'Lock'", [env.demo.writerRole]);
      if (r.rows.length > 0) return;
      await new Promise((res) => setTimeout(res, 50));
    }
    throw new Error('the writer never waited for a lock');
  } finally {
    await admin.end();
  }
}

const value = async (table: string, id: number) => (await sourceQuery<{ v: string }>(env, `SELECT v FROM public.${table} WHERE id = $1`, [id]))[0]?.v;

describe('locks: what the insider commits while the approved write waits', () => {
  test('L1 (high, fixed) CREATE TRIGGER run before the approval and committed while the write waits for its lock: the guard read the catalogue first, the trigger ran as the writer', async () => {
    const id = await queue("UPDATE rt44_t SET v = 'l1' WHERE id = 1");
    // Recorded through dblink, outside the write's transaction: only a trigger that never ran leaves no row.
    await sourceQuery(env, "CREATE FUNCTION public.rt44_l1() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN PERFORM public.rt44_dblog('l1 trigger', current_user::text); RETURN NEW; END $f$");
    await insider.query('BEGIN');
    await insider.query('CREATE TRIGGER rt44_l1 BEFORE UPDATE ON public.rt44_t FOR EACH ROW EXECUTE FUNCTION public.rt44_l1()');
    const done = approve(id);
    await writerWaits();
    await insider.query('COMMIT');
    try {
      // Before the fix: { state: 'executed', rowCount: 1 }, evidence [{ what: 'l1 trigger', who: <writer> }], v 'l1'.
      expect({ done: await done, evidence: await evidence(), v: await value('rt44_t', 1) }).toEqual({ done: stale(id), evidence: [], v: 'one' });
    } finally {
      await sourceQuery(env, 'DROP TRIGGER rt44_l1 ON public.rt44_t');
      await rescan();
    }
  });

  test('L2 (high, fixed: rolled back) a trigger function replaced while the write waits on a row lock the insider holds: its new body ran as the writer and committed', async () => {
    await sourceQuery(env, "CREATE FUNCTION public.rt44_l2() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN RETURN NEW; END $f$; CREATE TRIGGER rt44_l2 BEFORE UPDATE ON public.rt44_t FOR EACH ROW EXECUTE FUNCTION public.rt44_l2()");
    await rescan();
    const id = await queue("UPDATE rt44_t SET v = 'l2' WHERE id = 2");
    await insider.query('BEGIN');
    await insider.query('SELECT 1 FROM public.rt44_t WHERE id = 2 FOR UPDATE');
    await insider.query(`CREATE OR REPLACE FUNCTION public.rt44_l2() RETURNS trigger LANGUAGE plpgsql AS $f$ ${recorder('l2 replaced', 'NEW')} $f$`);
    const done = approve(id);
    await writerWaits();
    await insider.query('COMMIT');
    // Before the fix: executed, evidence [{ what: 'l2 replaced', who: <writer> }], v 'l2'.
    expect({ done: await done, evidence: await evidence(), v: await value('rt44_t', 2) }).toEqual({ done: stale(id), evidence: [], v: 'two' });
  });

  test.failing('L2r (medium, left) the replaced body of L2 still ran, inside the transaction that is rolled back: an effect outside it (dblink here; a sequence, an advisory lock) stays', async () => {
    await sourceQuery(env, "CREATE OR REPLACE FUNCTION public.rt44_l2() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN RETURN NEW; END $f$");
    await rescan();
    const id = await queue("UPDATE rt44_t SET v = 'l2r' WHERE id = 2");
    await insider.query('BEGIN');
    await insider.query('SELECT 1 FROM public.rt44_t WHERE id = 2 FOR UPDATE');
    await insider.query("CREATE OR REPLACE FUNCTION public.rt44_l2() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN PERFORM public.rt44_dblog('l2r outside', current_user::text); RETURN NEW; END $f$");
    const done = approve(id);
    await writerWaits();
    await insider.query('COMMIT');
    expect({ done: await done, evidence: await evidence(), v: await value('rt44_t', 2) }).toEqual({ done: stale(id), evidence: [], v: 'two' });
  });
});

describe('functions a hook reaches, replaced after the write was queued', () => {
  test('D1 (high, fixed) the function a column DEFAULT calls', async () => {
    const id = await queue('INSERT INTO rt44_def_t (id) VALUES (1)');
    await sourceQuery(env, `CREATE OR REPLACE FUNCTION public.rt44_def() RETURNS text LANGUAGE plpgsql AS $f$ ${recorder('d1 default', "'evil'")} $f$`);
    // Before the fix: executed, evidence [{ what: 'd1 default', who: <writer> }], v 'evil'.
    expect({ done: await approve(id), evidence: await evidence(), v: await value('rt44_def_t', 1) }).toEqual({ done: stale(id), evidence: [], v: undefined });
  });

  test('D2 (high, fixed) the function a CHECK constraint calls', async () => {
    const id = await queue("UPDATE rt44_chk_t SET v = 'd2' WHERE id = 1");
    await sourceQuery(env, `CREATE OR REPLACE FUNCTION public.rt44_ok() RETURNS boolean LANGUAGE plpgsql STABLE AS $f$ BEGIN PERFORM public.rt44_dblog('d2 check', current_user::text); RETURN true; END $f$`);
    try {
      expect({ done: await approve(id), evidence: await evidence(), v: await value('rt44_chk_t', 1) }).toEqual({ done: stale(id), evidence: [], v: 'one' });
    } finally {
      await sourceQuery(env, 'CREATE OR REPLACE FUNCTION public.rt44_ok() RETURNS boolean LANGUAGE plpgsql STABLE AS $f$ BEGIN RETURN true; END $f$');
      await rescan();
    }
  });

  test('D3 (high, fixed) the function of an expression index', async () => {
    const id = await queue("UPDATE rt44_idx_t SET v = 'd3' WHERE id = 1");
    await sourceQuery(env, `CREATE OR REPLACE FUNCTION public.rt44_imm(t text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $f$ BEGIN PERFORM public.rt44_dblog('d3 index', current_user::text); RETURN t; END $f$`);
    expect({ done: await approve(id), evidence: await evidence(), v: await value('rt44_idx_t', 1) }).toEqual({ done: stale(id), evidence: [], v: 'one' });
  });

  test('D4 (high, fixed) the function a row-level security policy calls', async () => {
    const id = await queue("UPDATE rt44_pol_t SET v = 'd4' WHERE id = 1");
    await sourceQuery(env, `CREATE OR REPLACE FUNCTION public.rt44_ok() RETURNS boolean LANGUAGE plpgsql STABLE AS $f$ BEGIN PERFORM public.rt44_dblog('d4 policy', current_user::text); RETURN true; END $f$`);
    try {
      expect({ done: await approve(id), evidence: await evidence(), v: await value('rt44_pol_t', 1) }).toEqual({ done: stale(id), evidence: [], v: 'one' });
    } finally {
      await sourceQuery(env, 'CREATE OR REPLACE FUNCTION public.rt44_ok() RETURNS boolean LANGUAGE plpgsql STABLE AS $f$ BEGIN RETURN true; END $f$');
      await rescan();
    }
  });

  test('D6 (held) the support function of a user operator class a hash index on the written column uses (the function guard already counted it as run by the write; the fingerprint now holds it too)', async () => {
    const id = await queue("UPDATE rt44_opc_t SET v = 'd6' WHERE id = 1");
    await sourceQuery(env, `CREATE OR REPLACE FUNCTION public.rt44_hashfn(t text) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $f$ BEGIN PERFORM public.rt44_dblog('d6 opclass', current_user::text); RETURN pg_catalog.hashtext(t); END $f$`);
    try {
      expect({ done: await approve(id), evidence: await evidence(), v: await value('rt44_opc_t', 1) }).toEqual({ done: stale(id), evidence: [], v: 'one' });
    } finally {
      await sourceQuery(env, 'CREATE OR REPLACE FUNCTION public.rt44_hashfn(t text) RETURNS int LANGUAGE sql IMMUTABLE AS $f$ SELECT pg_catalog.hashtext(t) $f$');
      await rescan();
    }
  });

  test('D5 (high, fixed) a function a plpgsql trigger function calls (no dependency is recorded for a plpgsql body: the fingerprint of a relation whose hooks reach such a body holds a digest of all user code)', async () => {
    const id = await queue("UPDATE rt44_cal_t SET v = 'd5' WHERE id = 1");
    await sourceQuery(env, `CREATE OR REPLACE FUNCTION public.rt44_side() RETURNS int LANGUAGE plpgsql AS $f$ ${recorder('d5 callee', '1')} $f$`);
    try {
      expect({ done: await approve(id), evidence: await evidence(), v: await value('rt44_cal_t', 1) }).toEqual({ done: stale(id), evidence: [], v: 'one' });
    } finally {
      await sourceQuery(env, 'CREATE OR REPLACE FUNCTION public.rt44_side() RETURNS int LANGUAGE plpgsql AS $f$ BEGIN RETURN 1; END $f$');
      await rescan();
    }
  });
});

describe('types: casts and domains reached by the written columns', () => {
  test('X1 (held) an assignment cast text → enum created after an INSERT of a text value into the enum column was queued', async () => {
    const id = await queue("INSERT INTO rt44_cast_t (id, m) VALUES (2, 'busy'::text)");
    await sourceQuery(env, `CREATE FUNCTION public.rt44_tomood(t text) RETURNS public.rt44_mood LANGUAGE plpgsql AS $f$ ${recorder('x1 cast', "'calm'")} $f$;
      CREATE CAST (text AS public.rt44_mood) WITH FUNCTION public.rt44_tomood(text) AS ASSIGNMENT`);
    try {
      const done = await approve(id);
      expect({ state: done.state, code: done.errorCode, evidence: await evidence(), m: (await sourceQuery(env, 'SELECT m::text AS m FROM public.rt44_cast_t WHERE id = 2'))[0]?.m }).toEqual({ state: 'failed', code: 'catalog_stale', evidence: [], m: undefined });
    } finally {
      await sourceQuery(env, 'DROP CAST (text AS public.rt44_mood); DROP FUNCTION public.rt44_tomood(text)');
      await rescan();
    }
  });

  test('X2 (high, fixed) the function a written column\'s domain CHECK calls, replaced after the write was queued', async () => {
    const id = await queue("UPDATE rt44_cast_t SET d = 'x2' WHERE id = 1");
    await sourceQuery(env, `CREATE OR REPLACE FUNCTION public.rt44_dom_ok(t text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $f$ BEGIN PERFORM public.rt44_dblog('x2 domain check', current_user::text); RETURN true; END $f$`);
    try {
      expect({ done: await approve(id), evidence: await evidence(), d: (await sourceQuery(env, 'SELECT d FROM public.rt44_cast_t WHERE id = 1'))[0]?.d }).toEqual({ done: stale(id), evidence: [], d: 'one' });
    } finally {
      await sourceQuery(env, 'CREATE OR REPLACE FUNCTION public.rt44_dom_ok(t text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $f$ BEGIN RETURN true; END $f$');
      await rescan();
    }
  });
});

describe('the relation itself', () => {
  test('O1 (low, fixed) the written table given to the writer role after the UPDATE was queued: row-level security no longer applies to its owner, so the write reached rows the policy kept from it', async () => {
    const id = await queue("UPDATE rt44_own_t SET v = 'o1' WHERE id IN (1, 2)");
    await sourceQuery(env, `ALTER TABLE public.rt44_own_t OWNER TO "${env.demo.writerRole}"`);
    try {
      // Before the fix: executed, rowCount 2 (the policy let the writer reach only row 1).
      expect({ done: await approve(id), v: [await value('rt44_own_t', 1), await value('rt44_own_t', 2)] }).toEqual({ done: stale(id), v: ['one', 'two'] });
    } finally {
      await sourceQuery(env, 'ALTER TABLE public.rt44_own_t OWNER TO CURRENT_USER');
      await rescan();
    }
  });

  test('O2 (low, fixed) WITH CHECK OPTION dropped from the view an INSERT targets after it was queued: a row outside the view was written', async () => {
    const id = await queue("INSERT INTO rt44_cview (id, v) VALUES (50, 'o2')");
    await sourceQuery(env, 'ALTER VIEW public.rt44_cview RESET (check_option)');
    try {
      // Before the fix: executed, rowCount 1, row 50 in rt44_base (the reviewed view refused it: 44000).
      expect({ done: await approve(id), v: await value('rt44_base', 50) }).toEqual({ done: stale(id), v: undefined });
    } finally {
      await sourceQuery(env, "ALTER VIEW public.rt44_cview SET (check_option = 'cascaded'); DELETE FROM public.rt44_base WHERE id = 50");
      await rescan();
    }
  });
});

describe('controls: what the fixes must not break', () => {
  test('C1 a deferred constraint trigger that existed at the scan runs as reviewed (now at the end of the statement), the write commits', async () => {
    const id = await queue("INSERT INTO rt44_def_log (id, v) VALUES (1, 'c1')");
    expect({ done: await approve(id), evidence: (await evidence()).map((e) => e.what), v: await value('rt44_def_log', 1) }).toEqual({ done: { approvalId: id, state: 'executed', rowCount: 1 }, evidence: ['deferred as reviewed'], v: 'c1' });
  });

  test('C2 a view whose owner may not lock its base table (SELECT only; an INSTEAD OF trigger writes it as the writer): the lock is skipped, the write runs', async () => {
    const id = await queue("UPDATE rt44_tview SET v = 'c2' WHERE id = 1");
    expect({ done: await approve(id), v: await value('rt44_base', 1) }).toEqual({ done: { approvalId: id, state: 'executed', rowCount: 1 }, v: 'c2' });
    await sourceQuery(env, "UPDATE public.rt44_base SET v = 'one' WHERE id = 1");
  });
});

describe('partitions and views (held)', () => {
  test('P1 (held) a trigger added to the existing partition a queued INSERT into the parent is routed to', async () => {
    const id = await queue("INSERT INTO rt44_part (id, v) VALUES (1, 'p1')");
    await sourceQuery(env, `CREATE FUNCTION public.rt44_p1() RETURNS trigger LANGUAGE plpgsql AS $f$ ${recorder('p1 partition trigger', 'NEW')} $f$;
      CREATE TRIGGER rt44_p1 BEFORE INSERT ON public.rt44_part_1 FOR EACH ROW EXECUTE FUNCTION public.rt44_p1()`);
    try {
      expect({ done: await approve(id), evidence: await evidence(), v: await value('rt44_part', 1) }).toEqual({ done: stale(id), evidence: [], v: undefined });
    } finally {
      await sourceQuery(env, 'DROP TRIGGER rt44_p1 ON public.rt44_part_1');
      await rescan();
    }
  });

  test('P2 (held) a partition with its own trigger attached after the INSERT was queued', async () => {
    const id = await queue("INSERT INTO rt44_part (id, v) VALUES (2, 'p2')");
    await sourceQuery(env, `CREATE FUNCTION public.rt44_p2() RETURNS trigger LANGUAGE plpgsql AS $f$ ${recorder('p2 attached trigger', 'NEW')} $f$;
      CREATE TRIGGER rt44_p2 BEFORE INSERT ON public.rt44_part_2 FOR EACH ROW EXECUTE FUNCTION public.rt44_p2();
      ALTER TABLE public.rt44_part ATTACH PARTITION public.rt44_part_2 FOR VALUES IN (2)`);
    try {
      expect({ done: await approve(id), evidence: await evidence(), v: await value('rt44_part', 2) }).toEqual({ done: stale(id), evidence: [], v: undefined });
    } finally {
      await sourceQuery(env, 'ALTER TABLE public.rt44_part DETACH PARTITION public.rt44_part_2; DROP TRIGGER rt44_p2 ON public.rt44_part_2');
      await rescan();
    }
  });

  test('P3 (held) an INSTEAD OF trigger created on the view an UPDATE targets, after it was queued', async () => {
    const id = await queue("UPDATE rt44_view SET v = 'p3' WHERE id = 1");
    await sourceQuery(env, `CREATE FUNCTION public.rt44_p3() RETURNS trigger LANGUAGE plpgsql AS $f$ ${recorder('p3 instead of', 'NEW')} $f$;
      CREATE TRIGGER rt44_p3 INSTEAD OF UPDATE ON public.rt44_view FOR EACH ROW EXECUTE FUNCTION public.rt44_p3()`);
    try {
      expect({ done: await approve(id), evidence: await evidence(), v: await value('rt44_base', 1) }).toEqual({ done: stale(id), evidence: [], v: 'one' });
    } finally {
      await sourceQuery(env, 'DROP TRIGGER rt44_p3 ON public.rt44_view');
      await rescan();
    }
  });
});
