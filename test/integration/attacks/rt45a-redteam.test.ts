/**
 * Red team rt45a: approved writes after rt44a (the write-hook fingerprint with its D5 digest,
 * src/sources/postgres/hook-guard.ts OPAQUE_REACH_SQL), as an insider: the superuser standing in for
 * a table or function owner (as rt44a), and an insider role with CREATE on schema `scratch` only
 * (test/helpers/stale-reads.ts startInsider). Each piece of unreviewed code records `current_user`
 * in rt45_evidence (writable by PUBLIC): a row there proves code no reviewer saw ran as the writer.
 *
 * Findings:
 *  X3 (high, fixed) the function a written column's domain DEFAULT calls, replaced after the INSERT
 *     was queued: the fingerprint recorded the domain's pg_type row (ALTER DOMAIN … SET DEFAULT) but
 *     the pg_depend walk never started from the domain, so the default's function was not in it.
 *  S1 (high, fixed) a relation created after the scan shadows, on a reviewed plpgsql trigger
 *     function's own path (`SET search_path = scratch, public`, scratch writable by the insider), the
 *     table the function writes: the trigger's audit row went to the insider's table, and that
 *     table's column of a domain with a DEFAULT (no trigger, no constraint, no column default: none
 *     of it in the D5 digest) ran code as the writer. The digest now also holds every non-temporary
 *     relation (name, schema, kind, row security), column (type) and type (oid:xmin) and inheritance
 *     link (oid ≥ 16384). S1b (medium, fixed with S1) row-level security enabled on the table such a
 *     trigger writes: its existing policy's function ran as the writer (relrowsecurity is in the
 *     digest now).
 *  S2 (high, fixed) a CHECK constraint calling `query_to_xml('SELECT public.f()', …)`: a built-in
 *     (pinned) function that runs SQL text records no dependency, so f — replaced after the write was
 *     queued — was in neither the walk nor the digest. A hook whose stored expression calls a built-in
 *     that runs SQL text or reads relations by name (query_to_xml …, ts_stat, ts_rewrite), or that
 *     reaches a C or internal function created after initdb (an extension's), now counts as reaching an opaque body (D5
 *     digest). S2b (high, fixed) the same through a SQL-standard function calling the extension
 *     function dblink_exec: pg_depend records dblink_exec (C), not what its text calls.
 *  G1 (low, fixed, task dgx) `ALTER ROLE <writer> SET rt.mode = 'evil'` after the UPDATE was queued,
 *     the writer's sessions ended: a reviewed plpgsql trigger that reads current_setting('rt.mode')
 *     wrote what the setting chose. The D5 digest now holds the rows of pg_db_role_setting for
 *     this database or all and the writer role or all roles.
 * Held: S3 ALTER DATABASE … SET search_path after the scan (the writer's path is pinned at connect,
 * task hrt42: the trigger still wrote the reviewed table; since task dgx the setting is in the D5
 * digest and the queued write fails catalog_stale).
 * Open (not fixed, in the report): L2r (rt44a) stays — the writer cannot lock the pg_proc rows of the
 * functions it reaches (FOR SHARE needs UPDATE on the catalogue).
 */
import pg from 'pg';
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { approveAndExecute } from '../../../src/approvals/execute';
import { staleCatalogCause } from '../../../src/approvals/causes';
import { scanSource } from '../../../src/control/scan';
import { upsertRole } from '../../../src/control/roles';
import { createIdentity } from '../../../src/control/identities';
import { grantRole } from '../../../src/control/grants';
import { createApiKey } from '../../../src/control/keys';
import { startInsider, stopInsider, type Insider } from '../../helpers/stale-reads';

jest.setTimeout(120_000);

const sc = (r: { body: any }) => r.body.result.structuredContent;

let env: GovernedEnv;
let x: Insider;
/** API key of an identity that may write the rt45 tables (approval still needed). */
let key: string;

const TABLES = ['rt45_dd_t', 'rt45_sh_t', 'rt45_q_t', 'rt45_x_t', 'rt45_db_t', 'rt45_rl_t', 'rt45_set_t'];

beforeAll(async () => {
  env = await startGovernedEnv();
  const wr = `"${env.demo.writerRole}"`;
  const u = new URL(env.sourceUrl);
  const dblinkConn = `host=${u.hostname} port=${u.port || 5432} user=${decodeURIComponent(u.username)} dbname=${u.pathname.slice(1)}`;
  x = await startInsider(env, 'rt45a');
  await sourceQuery(
    env,
    `CREATE EXTENSION IF NOT EXISTS dblink;
     CREATE TABLE public.rt45_evidence (what text NOT NULL, who text NOT NULL);
     GRANT ALL ON public.rt45_evidence TO PUBLIC;
     CREATE FUNCTION public.rt45_dblog(what text, who text) RETURNS int LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp
       AS $f$ SELECT length(public.dblink_exec('${dblinkConn}', pg_catalog.format('INSERT INTO public.rt45_evidence VALUES (%L, %L)', what, who))) $f$;
     CREATE FUNCTION public.rt45_ddef() RETURNS text LANGUAGE plpgsql AS $f$ BEGIN RETURN 'plain'; END $f$;
     CREATE DOMAIN public.rt45_ddom AS text DEFAULT public.rt45_ddef();
     CREATE TABLE public.rt45_dd_t (id int PRIMARY KEY, w public.rt45_ddom);
     CREATE FUNCTION public.rt45_rec(what text) RETURNS text LANGUAGE plpgsql AS $f$ BEGIN INSERT INTO public.rt45_evidence VALUES (what, current_user::text); RETURN what; END $f$;
     CREATE DOMAIN public.rt45_spy AS text DEFAULT public.rt45_rec('shadow table default');
     GRANT USAGE ON SCHEMA scratch TO ${wr};
     CREATE TABLE public.rt45_log (id int NOT NULL);
     GRANT ALL ON public.rt45_log TO PUBLIC;
     CREATE FUNCTION public.rt45_audit() RETURNS trigger LANGUAGE plpgsql SET search_path = scratch, public
       AS $f$ BEGIN INSERT INTO rt45_log (id) VALUES (NEW.id); RETURN NEW; END $f$;
     CREATE TABLE public.rt45_sh_t (id int PRIMARY KEY, v text);
     CREATE TRIGGER rt45_audit BEFORE UPDATE ON public.rt45_sh_t FOR EACH ROW EXECUTE FUNCTION public.rt45_audit();
     CREATE FUNCTION public.rt45_qside() RETURNS int LANGUAGE plpgsql AS $f$ BEGIN RETURN 1; END $f$;
     CREATE TABLE public.rt45_q_t (id int PRIMARY KEY, v text
       CHECK (pg_catalog.length(pg_catalog.query_to_xml('SELECT public.rt45_qside()', false, false, '')::text) > 0));
     CREATE FUNCTION public.rt45_qside2() RETURNS int LANGUAGE plpgsql AS $f$ BEGIN RETURN 1; END $f$;
     CREATE FUNCTION public.rt45_dbx(q text) RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp
       BEGIN ATOMIC SELECT public.dblink_exec('${dblinkConn}', q) IS NOT NULL; END;
     CREATE TABLE public.rt45_x_t (id int PRIMARY KEY, v text CHECK (public.rt45_dbx('DO $d$ BEGIN PERFORM public.rt45_qside2(); END $d$')));
     CREATE TABLE public.rt45_log3 (id int NOT NULL);
     GRANT ALL ON public.rt45_log3 TO PUBLIC;
     CREATE POLICY rt45_pol3 ON public.rt45_log3 USING (true) WITH CHECK (public.rt45_rec('s1b policy') IS NOT NULL);
     CREATE FUNCTION public.rt45_audit3() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN INSERT INTO public.rt45_log3 (id) VALUES (NEW.id); RETURN NEW; END $f$;
     CREATE TABLE public.rt45_rl_t (id int PRIMARY KEY, v text);
     CREATE TRIGGER rt45_audit3 BEFORE UPDATE ON public.rt45_rl_t FOR EACH ROW EXECUTE FUNCTION public.rt45_audit3();
     INSERT INTO public.rt45_rl_t VALUES (1, 'one');
     CREATE SCHEMA rt45_other;
     GRANT USAGE ON SCHEMA rt45_other TO PUBLIC;
     CREATE TABLE rt45_other.rt45_log2 (id int NOT NULL, spy public.rt45_spy);
     GRANT ALL ON rt45_other.rt45_log2 TO PUBLIC;
     CREATE TABLE public.rt45_log2 (id int NOT NULL);
     GRANT ALL ON public.rt45_log2 TO PUBLIC;
     CREATE FUNCTION public.rt45_audit2() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN INSERT INTO rt45_log2 (id) VALUES (NEW.id); RETURN NEW; END $f$;
     CREATE TABLE public.rt45_db_t (id int PRIMARY KEY, v text);
     CREATE TRIGGER rt45_audit2 BEFORE UPDATE ON public.rt45_db_t FOR EACH ROW EXECUTE FUNCTION public.rt45_audit2();
     CREATE FUNCTION public.rt45_mode() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN
       IF current_setting('rt.mode', true) = 'evil' THEN INSERT INTO public.rt45_evidence VALUES ('role setting', current_user::text); NEW.v := 'evil'; END IF;
       RETURN NEW; END $f$;
     CREATE TABLE public.rt45_set_t (id int PRIMARY KEY, v text);
     CREATE TRIGGER rt45_mode BEFORE UPDATE ON public.rt45_set_t FOR EACH ROW EXECUTE FUNCTION public.rt45_mode();
     INSERT INTO public.rt45_set_t VALUES (1, 'one');
     INSERT INTO public.rt45_sh_t VALUES (1, 'one');
     INSERT INTO public.rt45_q_t VALUES (1, 'one');
     INSERT INTO public.rt45_db_t VALUES (1, 'one');
     GRANT SELECT, INSERT, UPDATE, DELETE ON ${TABLES.map((t) => `public.${t}`).join(', ')} TO ${wr};
     GRANT SELECT ON ALL TABLES IN SCHEMA public TO "${env.demo.readerRole}";`,
  );
  // Its CHECK runs its text on a dblink session, which sees only what is committed.
  await sourceQuery(env, "INSERT INTO public.rt45_x_t VALUES (1, 'one')");
  await rescan();
  await upsertRole(env.db, {
    name: 'rt45-writer',
    statements: TABLES.flatMap((t) => [
      { effect: 'allow' as const, action: 'read' as const, resource: `public.${t}` },
      { effect: 'allow' as const, action: 'write' as const, resource: `public.${t}` },
    ]),
  });
  const who = await createIdentity(env.db, 'rt45-agent');
  await grantRole(env.db, { identityId: who.id, roleName: 'rt45-writer', sourceId: env.demo.sourceId });
  key = (await createApiKey(env.db, who.id)).secret;
  await rescan();
});
afterAll(async () => {
  await stopInsider(x);
  await env?.close();
});

async function rescan(): Promise<void> {
  await scanSource(env.db, env.demo.sourceId);
  env.gateway.store.invalidate('*');
}

afterEach(async () => {
  await sourceQuery(env, 'DELETE FROM public.rt45_evidence; DELETE FROM public.rt45_log; DELETE FROM public.rt45_log2; DELETE FROM rt45_other.rt45_log2');
});

/** Queues `sql` as the rt45 agent; the approval id. */
async function queue(sql: string): Promise<string> {
  const r = await callTool(env, 'interlock_query', { source_id: env.demo.sourceId, sql, params: [] }, key);
  expect(sc(r)).toMatchObject({ status: 'queued', approval_state: 'pending' });
  return sc(r).approval_id;
}

const approve = (id: string) => approveAndExecute(env.db, id, { operator: 'ops-rt45' });

/** What unreviewed code recorded (what, as whom), in order. */
const evidence = async () => sourceQuery<{ what: string; who: string }>(env, 'SELECT what, who FROM public.rt45_evidence ORDER BY what');

/** A plpgsql body that records `what` as the current role, then returns `ret`. */
const recorder = (what: string, ret: string) => `BEGIN INSERT INTO public.rt45_evidence VALUES ('${what}', current_user::text); RETURN ${ret}; END`;

/** The secure outcome for a write whose table gained unreviewed code after its review. */
const stale = (id: string) => ({ approvalId: id, state: 'failed', errorCode: 'catalog_stale', failure: staleCatalogCause(true) });

const value = async (table: string, id: number) => (await sourceQuery<{ v: string }>(env, `SELECT v FROM public.${table} WHERE id = $1`, [id]))[0]?.v;
const count = async (table: string) => Number((await sourceQuery<{ n: string }>(env, `SELECT count(*)::text AS n FROM ${table}`))[0]?.n);

describe('code the fingerprint did not follow', () => {
  test('X3 (high, fixed) the function a written column\'s domain DEFAULT calls, replaced after the INSERT was queued', async () => {
    const id = await queue('INSERT INTO rt45_dd_t (id) VALUES (1)');
    await sourceQuery(env, `CREATE OR REPLACE FUNCTION public.rt45_ddef() RETURNS text LANGUAGE plpgsql AS $f$ ${recorder('x3 domain default', "'evil'")} $f$`);
    try {
      // Before the fix: { state: 'executed', rowCount: 1 }, evidence [{ what: 'x3 domain default', who: <writer> }], w 'evil'.
      const w = (await sourceQuery<{ w: string }>(env, 'SELECT w FROM public.rt45_dd_t WHERE id = 1'))[0]?.w;
      expect({ done: await approve(id), evidence: await evidence(), w }).toEqual({ done: stale(id), evidence: [], w: undefined });
    } finally {
      await sourceQuery(env, "CREATE OR REPLACE FUNCTION public.rt45_ddef() RETURNS text LANGUAGE plpgsql AS $f$ BEGIN RETURN 'plain'; END $f$; DELETE FROM public.rt45_dd_t");
      await rescan();
    }
  });

  test('X3 control: the same INSERT with the reviewed default runs', async () => {
    const id = await queue('INSERT INTO rt45_dd_t (id) VALUES (2)');
    const done = await approve(id);
    const w = (await sourceQuery<{ w: string }>(env, 'SELECT w FROM public.rt45_dd_t WHERE id = 2'))[0]?.w;
    expect({ done, w }).toEqual({ done: { approvalId: id, state: 'executed', rowCount: 1 }, w: 'plain' });
    await sourceQuery(env, 'DELETE FROM public.rt45_dd_t');
  });

  test('S2 (high, fixed) a CHECK calling query_to_xml with SQL text naming a function, the function replaced after the UPDATE was queued', async () => {
    const id = await queue("UPDATE rt45_q_t SET v = 's2' WHERE id = 1");
    await sourceQuery(env, "CREATE OR REPLACE FUNCTION public.rt45_qside() RETURNS int LANGUAGE plpgsql AS $f$ BEGIN PERFORM public.rt45_dblog('s2 query text', current_user::text); RETURN 1; END $f$");
    try {
      // Before the fix: executed, evidence [{ what: 's2 query text', who: <writer> }], v 's2'.
      expect({ done: await approve(id), evidence: await evidence(), v: await value('rt45_q_t', 1) }).toEqual({ done: stale(id), evidence: [], v: 'one' });
    } finally {
      await sourceQuery(env, 'CREATE OR REPLACE FUNCTION public.rt45_qside() RETURNS int LANGUAGE plpgsql AS $f$ BEGIN RETURN 1; END $f$');
      await rescan();
    }
  });

  test('S2 control: the same UPDATE with the reviewed function runs (the digest the scan recorded is the one the guard computes)', async () => {
    const id = await queue("UPDATE rt45_q_t SET v = 's2c' WHERE id = 1");
    expect({ done: await approve(id), evidence: await evidence(), v: await value('rt45_q_t', 1) }).toEqual({ done: { approvalId: id, state: 'executed', rowCount: 1 }, evidence: [], v: 's2c' });
    await sourceQuery(env, "UPDATE public.rt45_q_t SET v = 'one' WHERE id = 1");
  });

  test('S2b (high, fixed) a CHECK whose SQL-standard function calls dblink_exec with SQL text naming a function (an extension\'s C function: pg_depend stops there), the function replaced after the UPDATE was queued', async () => {
    const id = await queue("UPDATE rt45_x_t SET v = 's2b' WHERE id = 1");
    await sourceQuery(env, `CREATE OR REPLACE FUNCTION public.rt45_qside2() RETURNS int LANGUAGE plpgsql AS $f$ ${recorder('s2b dblink text', '1')} $f$`);
    try {
      // Before the fix: executed, evidence [{ what: 's2b dblink text', who: <dblink's user> }], v 's2b'.
      expect({ done: await approve(id), evidence: await evidence(), v: await value('rt45_x_t', 1) }).toEqual({ done: stale(id), evidence: [], v: 'one' });
    } finally {
      await sourceQuery(env, 'CREATE OR REPLACE FUNCTION public.rt45_qside2() RETURNS int LANGUAGE plpgsql AS $f$ BEGIN RETURN 1; END $f$');
      await rescan();
    }
  });
});

describe('names a reviewed plpgsql body resolves at run time', () => {
  test('S1 (high, fixed) the insider (CREATE on scratch only) creates scratch.rt45_log, first on the trigger function\'s own path: the audit row went to it and its domain default ran as the writer', async () => {
    const id = await queue("UPDATE rt45_sh_t SET v = 's1' WHERE id = 1");
    await x.insider.query('CREATE TABLE scratch.rt45_log (id int NOT NULL, spy public.rt45_spy); GRANT ALL ON scratch.rt45_log TO PUBLIC');
    try {
      // Before the fix: executed, evidence [{ what: 'shadow table default', who: <writer> }], the audit row in scratch.rt45_log (1), none in public.rt45_log.
      expect({ done: await approve(id), evidence: await evidence(), v: await value('rt45_sh_t', 1), shadow: await count('scratch.rt45_log'), audit: await count('public.rt45_log') }).toEqual({
        done: stale(id),
        evidence: [],
        v: 'one',
        shadow: 0,
        audit: 0,
      });
    } finally {
      await x.insider.query('DROP TABLE scratch.rt45_log');
      await rescan();
    }
  });

  test('S1b (medium, fixed with S1) row-level security enabled after the UPDATE was queued on the table a reviewed plpgsql trigger writes: its existing policy\'s function ran as the writer', async () => {
    const id = await queue("UPDATE rt45_rl_t SET v = 's1b' WHERE id = 1");
    await sourceQuery(env, 'ALTER TABLE public.rt45_log3 ENABLE ROW LEVEL SECURITY');
    try {
      // Before the fix: executed, evidence [{ what: 's1b policy', who: <writer> }], the audit row written.
      expect({ done: await approve(id), evidence: await evidence(), v: await value('rt45_rl_t', 1), audit: await count('public.rt45_log3') }).toEqual({ done: stale(id), evidence: [], v: 'one', audit: 0 });
    } finally {
      await sourceQuery(env, 'ALTER TABLE public.rt45_log3 DISABLE ROW LEVEL SECURITY; DELETE FROM public.rt45_log3');
      await rescan();
    }
  });

  test('S1 control: with no shadow the reviewed trigger writes the reviewed audit table', async () => {
    const id = await queue("UPDATE rt45_sh_t SET v = 's1c' WHERE id = 1");
    expect({ done: await approve(id), evidence: await evidence(), v: await value('rt45_sh_t', 1), audit: await count('public.rt45_log') }).toEqual({
      done: { approvalId: id, state: 'executed', rowCount: 1 },
      evidence: [],
      v: 's1c',
      audit: 1,
    });
    await sourceQuery(env, "UPDATE public.rt45_sh_t SET v = 'one' WHERE id = 1");
  });

  test('S3 (held; stale since task dgx) ALTER DATABASE … SET search_path = rt45_other, public after the UPDATE was queued, the writer\'s sessions ended: the setting is in the D5 digest, nothing is written', async () => {
    const db = new URL(env.sourceUrl).pathname.slice(1);
    const id = await queue("UPDATE rt45_db_t SET v = 's3' WHERE id = 1");
    await sourceQuery(env, `ALTER DATABASE "${db}" SET search_path = rt45_other, public`);
    try {
      await sourceQuery(env, 'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1 AND pid <> pg_backend_pid()', [env.demo.writerRole]);
      // Before task dgx: executed on the pinned path (audit 1, other 0). The setting is in the D5
      // digest now, so the write queued before it fails once (a rescan then records the new path,
      // which the writer is pinned to and a requeued write is reviewed against).
      expect({ done: await approve(id), evidence: await evidence(), other: await count('rt45_other.rt45_log2'), audit: await count('public.rt45_log2') }).toEqual({
        done: stale(id),
        evidence: [],
        other: 0,
        audit: 0,
      });
    } finally {
      await sourceQuery(env, `ALTER DATABASE "${db}" RESET search_path; UPDATE public.rt45_db_t SET v = 'one' WHERE id = 1`);
      await rescan();
    }
  });
});

describe('settings a reviewed plpgsql body reads at run time (task dgx)', () => {
  /** Ends the writer role's pooled sessions, so the gateway's next ones start with the role's settings. */
  const endWriterSessions = () => sourceQuery(env, 'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1 AND pid <> pg_backend_pid()', [env.demo.writerRole]);

  test('G1 (low, fixed) ALTER ROLE <writer> SET rt.mode = \'evil\' after the UPDATE was queued, the writer\'s sessions ended: the reviewed trigger reads the setting', async () => {
    const id = await queue("UPDATE rt45_set_t SET v = 'g1' WHERE id = 1");
    await sourceQuery(env, `ALTER ROLE "${env.demo.writerRole}" SET rt.mode = 'evil'`);
    try {
      await endWriterSessions();
      // Before the fix: executed, evidence [{ what: 'role setting', who: <writer> }], v 'evil'.
      expect({ done: await approve(id), evidence: await evidence(), v: await value('rt45_set_t', 1) }).toEqual({ done: stale(id), evidence: [], v: 'one' });
    } finally {
      await sourceQuery(env, `ALTER ROLE "${env.demo.writerRole}" RESET rt.mode`);
      await endWriterSessions();
      await rescan();
    }
  });

  test('G1 control: the reader role\'s setting changed after the UPDATE was queued does not stop it (only the writer\'s sessions are covered)', async () => {
    const id = await queue("UPDATE rt45_set_t SET v = 'g1r' WHERE id = 1");
    await sourceQuery(env, `ALTER ROLE "${env.demo.readerRole}" SET rt.mode = 'evil'`);
    try {
      expect({ done: await approve(id), evidence: await evidence(), v: await value('rt45_set_t', 1) }).toEqual({ done: { approvalId: id, state: 'executed', rowCount: 1 }, evidence: [], v: 'g1r' });
    } finally {
      await sourceQuery(env, `ALTER ROLE "${env.demo.readerRole}" RESET rt.mode; UPDATE public.rt45_set_t SET v = 'one' WHERE id = 1`);
    }
  });

  test('G1 control: the same UPDATE with the role\'s settings unchanged runs as reviewed', async () => {
    const id = await queue("UPDATE rt45_set_t SET v = 'g1c' WHERE id = 1");
    expect({ done: await approve(id), evidence: await evidence(), v: await value('rt45_set_t', 1) }).toEqual({ done: { approvalId: id, state: 'executed', rowCount: 1 }, evidence: [], v: 'g1c' });
    await sourceQuery(env, "UPDATE public.rt45_set_t SET v = 'one' WHERE id = 1");
  });
});
