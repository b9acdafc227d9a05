/**
 * Red team rt43a: (A) task hw's run-time guard of approved writes (function-guard.ts, shape-guard.ts
 * run in the write's transaction right before its statement, write.ts runWrite, approvals/execute.ts
 * recheck) and (B) task hidle's retries of reads and writes whose pooled connection was lost
 * (read.ts readFrom, write.ts writeOn, errors.ts isConnectionLost, wire-budget.ts answered).
 *
 * (A) The attacker is an insider with DDL rights on a written table (its owner, or a DBA), not the
 * writer role: after an agent's write was queued and reviewed, they attach code to the table or its
 * columns that the approved write then runs AS THE WRITER ROLE, code no reviewer saw and the
 * guard does not check (it checks functions and operators by the names the statement looks up, and
 * whole-row shapes, not what the table runs on a write). Every hook here records `current_user` in
 * rt43_evidence (writable by PUBLIC), so a row there proves unreviewed code ran as the writer.
 * A1–A5, A8 and A10 are fixed by task hhook (src/sources/postgres/hook-guard.ts: the write-hook
 * fingerprint of every relation the write touches is compared in its transaction); they were
 * `test.failing` before. Findings not fixed are `test.failing` with the secure outcome: the approval fails `catalog_stale`
 * (or another refusal), nothing written, no evidence. What held is a plain passing test.
 *
 * (B) A read whose statement reached the server and ran, and whose connection was then reset
 * before any answer came back (a middlebox's RST, a NAT table flushed), looks exactly like a pooled
 * connection the server had ended while idle (ECONNRESET, nothing answered), so it runs again on
 * another connection: a trusted function with an effect outside the read-only transaction (dblink,
 * here) runs twice. Staged by a loopback proxy of this file that forwards the statement, drops the
 * server's answer and resets the gateway's socket.
 */
import net from 'node:net';
import pg from 'pg';
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { ADMIN_URL } from '../../helpers/pg';
import { approveAndExecute } from '../../../src/approvals/execute';
import { staleCatalogCause } from '../../../src/approvals/causes';
import { getSource, putSource } from '../../../src/control/sources';
import { scanSource } from '../../../src/control/scan';
import { getApproval } from '../../../src/control/approvals';
import { createApiKey, revokeApiKey } from '../../../src/control/keys';
import { reviewApprovalPlan, STALE_PLAN_REASON } from '../../../src/console/plan';

jest.setTimeout(120_000);

const sc = (r: { body: any }) => r.body.result.structuredContent;

let env: GovernedEnv;
let admin: pg.Client;
/** A libpq connection string of the source database as the superuser (for dblink). */
let dblinkConn: string;
beforeAll(async () => {
  env = await startGovernedEnv();
  admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  await sourceQuery(
    env,
    `CREATE TABLE public.rt43_evidence (what text NOT NULL, who text NOT NULL);
     GRANT ALL ON public.rt43_evidence TO PUBLIC;
     CREATE FUNCTION public.rt43_norm(t varchar) RETURNS varchar LANGUAGE sql IMMUTABLE AS $$ SELECT upper(t) $$;
     INSERT INTO playlist (playlist_id, name) VALUES (9401, 'rt43 one'), (9402, 'rt43 two'), (9403, 'rt43 three'), (9404, 'rt43 four'), (9405, 'rt43 five'), (9406, 'rt43 six'), (9407, 'rt43 seven'), (9408, 'rt43 eight'), (9409, 'rt43 nine'), (9411, 'rt43 eleven');`,
  );
  const u = new URL(env.sourceUrl);
  dblinkConn = `host=${u.hostname} port=${u.port || 5432} user=${decodeURIComponent(u.username)} dbname=${u.pathname.slice(1)}`;
  // rt43_log: a STABLE-labelled trusted function with an effect outside a read's read-only
  // transaction (dblink, as a definer: dblink needs a superuser without a password). rt43_fold: an
  // IMMUTABLE function a write may call with a constant (folded by the planner); rt43_dblog records
  // (what, who) in rt43_evidence outside the caller's transaction.
  await sourceQuery(
    env,
    `CREATE EXTENSION IF NOT EXISTS dblink;
     CREATE TABLE public.rt43_calls (n serial PRIMARY KEY);
     CREATE FUNCTION public.rt43_log(t int) RETURNS int LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp
       AS $f$ SELECT t + 0 * length(public.dblink_exec('${dblinkConn}', 'INSERT INTO public.rt43_calls DEFAULT VALUES')) $f$;
     CREATE FUNCTION public.rt43_dblog(what text, who text) RETURNS int LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp
       AS $f$ SELECT length(public.dblink_exec('${dblinkConn}', pg_catalog.format('INSERT INTO public.rt43_evidence VALUES (%L, %L)', what, who))) $f$;
     CREATE FUNCTION public.rt43_fold(t varchar) RETURNS varchar LANGUAGE sql IMMUTABLE AS $f$ SELECT upper(t) $f$;`,
  );
  await scanSource(env.db, env.demo.sourceId);
  env.gateway.store.invalidate('*');
});
afterAll(async () => {
  await env?.close();
  await admin?.end();
});

/** Queues `sql` as the demo agent (a playlist write: queued for approval); the approval id. */
async function queue(sql: string): Promise<string> {
  const r = await callTool(env, 'interlock_query', { source_id: env.demo.sourceId, sql, params: [] }, env.apiKey);
  expect(sc(r)).toMatchObject({ status: 'queued', approval_state: 'pending' });
  return sc(r).approval_id;
}

/** What unreviewed hooks recorded (what, as whom), in order. */
async function evidence(): Promise<Array<{ what: string; who: string }>> {
  return sourceQuery(env, 'SELECT what, who FROM public.rt43_evidence');
}

/** A hook function that records `what` and the role it runs as, and returns `ret` (SQL text). */
async function hookFunction(name: string, what: string, returns: string, ret: string, language: 'plpgsql' = 'plpgsql'): Promise<void> {
  await sourceQuery(
    env,
    `CREATE OR REPLACE FUNCTION public.${name}() RETURNS ${returns} LANGUAGE ${language} AS $f$
     BEGIN INSERT INTO public.rt43_evidence VALUES ('${what}', current_user::text); RETURN ${ret}; END $f$`,
  );
}

const playlist = async (id: number) => (await sourceQuery<{ name: string }>(env, 'SELECT name FROM playlist WHERE playlist_id = $1', [id]))[0]?.name;

/** The secure outcome for a write whose table gained unreviewed code after its review. */
const stale = (id: string) => ({ approvalId: id, state: 'failed', errorCode: 'catalog_stale', failure: staleCatalogCause(true) });

afterEach(async () => {
  await sourceQuery(
    env,
    `DELETE FROM public.rt43_evidence;
     DROP TRIGGER IF EXISTS rt43_trg ON playlist;
     DROP RULE IF EXISTS rt43_rule ON playlist;
     DROP POLICY IF EXISTS rt43_pol ON playlist;
     ALTER TABLE playlist DISABLE ROW LEVEL SECURITY;
     ALTER TABLE playlist ALTER COLUMN name DROP DEFAULT;
     ALTER TABLE playlist DROP COLUMN IF EXISTS rt43_gen;`,
  );
  // A write refused catalog_stale has the source rescanned with the hook in place (task hhook):
  // scan again without it, so the next test starts from the plain table.
  await scanSource(env.db, env.demo.sourceId);
  env.gateway.store.invalidate('*');
});

describe('(A) approved writes: unreviewed code attached after the review, run as the writer', () => {
  test('A1 (high) a trigger created on the written table after the write was queued runs as the writer role at approval; the guard does not see it', async () => {
    const id = await queue("UPDATE playlist SET name = 'rt43 a1' WHERE playlist_id = 9401");
    await hookFunction('rt43_trg_fn', 'trigger', 'trigger', 'NEW');
    await sourceQuery(env, 'CREATE TRIGGER rt43_trg BEFORE UPDATE ON playlist FOR EACH ROW EXECUTE FUNCTION public.rt43_trg_fn()');
    const done = await approveAndExecute(env.db, id, { operator: 'ops-rt43' });
    // Before task hhook: { state: 'executed', rowCount: 1 } and evidence [{ what: 'trigger', who: <writer role> }].
    expect({ done, evidence: await evidence(), name: await playlist(9401) }).toEqual({ done: stale(id), evidence: [], name: 'rt43 one' });
    // Requeued, it is reviewed against the rescanned catalogue, which has the trigger: approved, it runs it.
    env.gateway.store.invalidate('*');
    const again = await queue("UPDATE playlist SET name = 'rt43 a1' WHERE playlist_id = 9401");
    expect(await approveAndExecute(env.db, again, { operator: 'ops-rt43' })).toEqual({ approvalId: again, state: 'executed', rowCount: 1 });
    expect({ evidence: (await evidence()).map((e) => e.what), name: await playlist(9401) }).toEqual({ evidence: ['trigger'], name: 'rt43 a1' });
  });

  test('A1b (control) a trigger that existed at the scan, unchanged, does not stop the approved write: it runs as reviewed', async () => {
    await hookFunction('rt43_trg_fn', 'trigger', 'trigger', 'NEW');
    await sourceQuery(env, 'CREATE TRIGGER rt43_trg BEFORE UPDATE ON playlist FOR EACH ROW EXECUTE FUNCTION public.rt43_trg_fn()');
    await scanSource(env.db, env.demo.sourceId);
    env.gateway.store.invalidate('*');
    const id = await queue("UPDATE playlist SET name = 'rt43 a1b' WHERE playlist_id = 9401");
    expect(await approveAndExecute(env.db, id, { operator: 'ops-rt43' })).toEqual({ approvalId: id, state: 'executed', rowCount: 1 });
    expect({ evidence: (await evidence()).map((e) => e.what), name: await playlist(9401) }).toEqual({ evidence: ['trigger'], name: 'rt43 a1b' });
  });

  test('A2 (high) the function of a trigger that existed at the scan, replaced after the write was queued, runs its new body as the writer role', async () => {
    await sourceQuery(env, "CREATE FUNCTION public.rt43_trg2_fn() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN RETURN NEW; END $f$; CREATE TRIGGER rt43_trg BEFORE UPDATE ON playlist FOR EACH ROW EXECUTE FUNCTION public.rt43_trg2_fn()");
    await scanSource(env.db, env.demo.sourceId);
    env.gateway.store.invalidate('*');
    const id = await queue("UPDATE playlist SET name = 'rt43 a2' WHERE playlist_id = 9402");
    await hookFunction('rt43_trg2_fn', 'replaced trigger function', 'trigger', 'NEW');
    const done = await approveAndExecute(env.db, id, { operator: 'ops-rt43' });
    expect({ done, evidence: await evidence(), name: await playlist(9402) }).toEqual({ done: stale(id), evidence: [], name: 'rt43 two' });
  });

  test("A3 (high) ALTER TABLE … SET DEFAULT evil() after an INSERT was queued: the approved INSERT evaluates the new default as the writer role", async () => {
    const id = await queue('INSERT INTO playlist (playlist_id) VALUES (9410)');
    await hookFunction('rt43_default', 'default', 'varchar', "'from default'");
    await sourceQuery(env, 'ALTER TABLE playlist ALTER COLUMN name SET DEFAULT public.rt43_default()');
    const done = await approveAndExecute(env.db, id, { operator: 'ops-rt43' });
    expect({ done, evidence: await evidence(), name: await playlist(9410) }).toEqual({ done: stale(id), evidence: [], name: undefined });
  });

  test('A4 (high) a row-level security policy created after the write was queued: its USING expression runs as the writer role (and can change which rows the write reaches)', async () => {
    const id = await queue("UPDATE playlist SET name = 'rt43 a4' WHERE playlist_id = 9404");
    await hookFunction('rt43_policy', 'policy', 'boolean', 'true');
    await sourceQuery(env, 'ALTER TABLE playlist ENABLE ROW LEVEL SECURITY; CREATE POLICY rt43_pol ON playlist USING (public.rt43_policy())');
    const done = await approveAndExecute(env.db, id, { operator: 'ops-rt43' });
    expect({ done, evidence: await evidence(), name: await playlist(9404) }).toEqual({ done: stale(id), evidence: [], name: 'rt43 four' });
  });

  test('A5 (high) a rewrite rule (DO ALSO) created after the write was queued: its action runs the rule\'s function as the writer role', async () => {
    const id = await queue("UPDATE playlist SET name = 'rt43 a5' WHERE playlist_id = 9405");
    await hookFunction('rt43_rule_fn', 'rule', 'integer', '1');
    await sourceQuery(env, 'CREATE RULE rt43_rule AS ON UPDATE TO playlist DO ALSO SELECT public.rt43_rule_fn()');
    const done = await approveAndExecute(env.db, id, { operator: 'ops-rt43' });
    expect({ done, evidence: await evidence(), name: await playlist(9405) }).toEqual({ done: stale(id), evidence: [], name: 'rt43 five' });
    // Against the rescanned catalogue, which has the rule, the write is refused before it is queued (rtfk finding 5).
    const r = await callTool(env, 'interlock_query', { source_id: env.demo.sourceId, sql: "UPDATE playlist SET name = 'rt43 a5' WHERE playlist_id = 9405", params: [] }, env.apiKey);
    expect(sc(r)).toMatchObject({ status: 'forbidden', code: 'source_role_denied' });
  });

  test('A8 (high) a stored generated column added after the write was queued: its (IMMUTABLE-labelled) expression runs on the approved UPDATE as the writer role', async () => {
    const id = await queue("UPDATE playlist SET name = 'rt43 a8' WHERE playlist_id = 9403");
    // An IMMUTABLE-labelled function may not INSERT itself, but may call a volatile one that does.
    await hookFunction('rt43_gen_side', 'generated', 'integer', '1');
    await sourceQuery(env, 'CREATE OR REPLACE FUNCTION public.rt43_gen_fn(t varchar) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $f$ BEGIN RETURN public.rt43_gen_side(); END $f$');
    await sourceQuery(env, 'ALTER TABLE playlist ADD COLUMN rt43_gen int GENERATED ALWAYS AS (public.rt43_gen_fn(name)) STORED');
    await sourceQuery(env, 'DELETE FROM public.rt43_evidence'); // the ADD COLUMN's own rewrite ran it as the superuser
    const done = await approveAndExecute(env.db, id, { operator: 'ops-rt43' });
    expect({ done, evidence: await evidence(), name: await playlist(9403) }).toEqual({ done: stale(id), evidence: [], name: 'rt43 three' });
  });

  test("A9 (medium; fixed) the console's review of a queued write planned it as the writer before any guard: an IMMUTABLE function replaced after the scan, called with a constant, was run by the planner as the writer role when the operator merely opened the review; now the write's guard runs first and there is no plan", async () => {
    const id = await queue("UPDATE playlist SET name = rt43_fold('rt43 a9') WHERE playlist_id = 9408");
    await sourceQuery(
      env,
      `CREATE OR REPLACE FUNCTION public.rt43_fold(t varchar) RETURNS varchar LANGUAGE plpgsql IMMUTABLE AS $f$
       BEGIN PERFORM public.rt43_dblog('review', current_user::text); RETURN t; END $f$`,
    );
    const review = await reviewApprovalPlan(env.db, (await getApproval(env.db, id))!);
    // Before the fix: a plan (ok: true), and evidence held [{ what: 'review', who: <writer role> }]
    // (the EXPLAIN's READ ONLY transaction does not stop an effect outside it, here through dblink).
    expect({ review, evidence: await evidence(), name: await playlist(9408) }).toEqual({
      review: { destructive: true, estimate: null, plan: { ok: false, reason: STALE_PLAN_REASON }, requester: null },
      evidence: [],
      name: 'rt43 eight',
    });
    // Approving it then fails catalog_stale, nothing run.
    expect(await approveAndExecute(env.db, id, { operator: 'ops-rt43' })).toEqual(stale(id));
    expect({ evidence: await evidence(), name: await playlist(9408) }).toEqual({ evidence: [], name: 'rt43 eight' });
  });

  test("A9b (medium; fixed) the review of a write whose requester's key was revoked planned it as the writer without any guard (the re-check stops at the requester): the replaced IMMUTABLE function ran as the writer when the review was opened; now the rest of the re-check's guard runs first", async () => {
    // rt43_fold as scanned first (A9 replaced it and its failed approval rescanned the source).
    await sourceQuery(env, 'CREATE OR REPLACE FUNCTION public.rt43_fold(t varchar) RETURNS varchar LANGUAGE sql IMMUTABLE AS $f$ SELECT upper(t) $f$');
    await scanSource(env.db, env.demo.sourceId);
    env.gateway.store.invalidate('*');
    const key = await createApiKey(env.db, env.demo.identityId);
    const r = await callTool(env, 'interlock_query', { source_id: env.demo.sourceId, sql: "UPDATE playlist SET name = rt43_fold('rt43 a9b') WHERE playlist_id = 9411", params: [] }, key.secret);
    expect(sc(r)).toMatchObject({ status: 'queued', approval_state: 'pending' });
    await revokeApiKey(env.db, key.keyId);
    await sourceQuery(
      env,
      `CREATE OR REPLACE FUNCTION public.rt43_fold(t varchar) RETURNS varchar LANGUAGE plpgsql IMMUTABLE AS $f$
       BEGIN PERFORM public.rt43_dblog('review b', current_user::text); RETURN t; END $f$`,
    );
    const review = await reviewApprovalPlan(env.db, (await getApproval(env.db, sc(r).approval_id))!);
    expect(review.requester).toMatchObject({ code: 'key_revoked' });
    // Before the fix: a plan (ok: true) and evidence [{ what: 'review b', who: <writer role> }].
    expect({ plan: review.plan, evidence: await evidence() }).toEqual({ plan: { ok: false, reason: STALE_PLAN_REASON }, evidence: [] });
  });

  test("A10 (high) a column's type changed to a domain whose CHECK calls a function, after the write was queued: the approved UPDATE runs the check's function as the writer role", async () => {
    const id = await queue("UPDATE playlist SET name = 'rt43 a10' WHERE playlist_id = 9409");
    await hookFunction('rt43_dom_fn', 'domain check', 'boolean', 'true');
    const type = (await sourceQuery<{ t: string }>(env, "SELECT format_type(atttypid, atttypmod) AS t FROM pg_attribute WHERE attrelid = 'playlist'::regclass AND attname = 'name'"))[0]!.t;
    await sourceQuery(env, `CREATE DOMAIN public.rt43_dom AS ${type}; ALTER DOMAIN public.rt43_dom ADD CONSTRAINT rt43_chk CHECK (public.rt43_dom_fn())`);
    try {
      await sourceQuery(env, 'ALTER TABLE playlist ALTER COLUMN name TYPE public.rt43_dom');
      await sourceQuery(env, 'DELETE FROM public.rt43_evidence'); // the ALTER's own check of the rows ran it as the superuser
      const done = await approveAndExecute(env.db, id, { operator: 'ops-rt43' });
      expect({ done, evidence: await evidence(), name: await playlist(9409) }).toEqual({ done: stale(id), evidence: [], name: 'rt43 nine' });
    } finally {
      await sourceQuery(env, `ALTER TABLE playlist ALTER COLUMN name TYPE ${type}; DROP DOMAIN public.rt43_dom`);
    }
  });

  test('A6 (held) a function the write calls, altered after it was queued (SECURITY DEFINER, SET search_path): catalog_stale, nothing written', async () => {
    for (const alter of ['SECURITY DEFINER', 'SET search_path = public, pg_temp']) {
      const id = await queue('UPDATE playlist SET name = rt43_norm(name) WHERE playlist_id = 9406');
      await sourceQuery(env, `ALTER FUNCTION public.rt43_norm(varchar) ${alter}`);
      expect(await approveAndExecute(env.db, id, { operator: 'ops-rt43' })).toEqual(stale(id));
      expect(await playlist(9406)).toBe('rt43 six');
    }
  });

  test('A7 (held) a function the write calls, replaced after it was queued by one that records its caller: catalog_stale, its body never ran', async () => {
    const id = await queue('UPDATE playlist SET name = rt43_norm(name) WHERE playlist_id = 9407');
    await sourceQuery(env, "CREATE OR REPLACE FUNCTION public.rt43_norm(t varchar) RETURNS varchar LANGUAGE plpgsql VOLATILE AS $f$ BEGIN INSERT INTO public.rt43_evidence VALUES ('replaced', current_user::text); RETURN t; END $f$");
    expect(await approveAndExecute(env.db, id, { operator: 'ops-rt43' })).toEqual(stale(id));
    expect({ evidence: await evidence(), name: await playlist(9407) }).toEqual({ evidence: [], name: 'rt43 seven' });
  });
});

/** A proxy whose `swallowNext(marker)` forwards the next client chunk holding `marker`, drops what the server answers on that connection, and then resets the client's socket (RST). */
interface SwallowProxy {
  port: number;
  /** Client chunks holding the marker of the last `swallowNext`, forwarded to a server since it. */
  sent: number;
  swallowNext(marker: string): void;
  close(): Promise<void>;
}

function startSwallowProxy(target: { host: string; port: number }): Promise<SwallowProxy> {
  const socks = new Set<net.Socket>();
  const st = { marker: null as string | null, armed: null as string | null, sent: 0 };
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    socks.add(client).add(upstream);
    let swallowing = false;
    client.on('data', (d: Buffer) => {
      if (st.marker && d.includes(st.marker)) st.sent++;
      if (st.armed && d.includes(st.armed)) {
        st.armed = null;
        swallowing = true;
        // Let the server run the statement (and its effects), then cut: the gateway gets a reset, no answer.
        setTimeout(() => {
          client.resetAndDestroy();
          upstream.destroy();
        }, 1500);
      }
      upstream.write(d);
    });
    upstream.on('data', (d: Buffer) => {
      if (!swallowing) client.write(d);
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
      socks.delete(client);
      socks.delete(upstream);
    };
    client.on('close', end);
    client.on('error', end);
    upstream.on('close', end);
    upstream.on('error', end);
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({
        port: (server.address() as net.AddressInfo).port,
        get sent() {
          return st.sent;
        },
        swallowNext(marker: string) {
          st.sent = 0;
          st.marker = marker;
          st.armed = marker;
        },
        close: () =>
          new Promise<void>((r) => {
            for (const s of socks) s.destroy();
            server.close(() => r());
          }),
      }),
    ),
  );
}

describe('(B) retries of reads whose connection was lost', () => {
  let proxy: SwallowProxy;
  beforeAll(async () => {
    const src = await getSource(env.db, 'chinook');
    if (!src || src.type !== 'postgres') throw new Error('no chinook source');
    proxy = await startSwallowProxy({ host: src.settings.host as string, port: src.settings.port as number });
    await putSource(env.db, { id: src.id, type: src.type, name: src.name, description: src.description, enabled: true, settings: { ...src.settings, port: proxy.port, trusted_functions: ['public.rt43_log'] } });
    await scanSource(env.db, env.demo.sourceId);
    env.gateway.store.invalidate('*');
  });
  afterAll(async () => {
    await proxy?.close();
  });

  const calls = async () => (await sourceQuery<{ n: number }>(env, 'SELECT count(*)::int AS n FROM public.rt43_calls'))[0]!.n;

  test('B0 (control) through the proxy, a read calling the trusted logging function runs it once', async () => {
    const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT public.rt43_log(7) AS v' }, env.apiKey);
    expect(sc(r)).toMatchObject({ rows: [{ v: 7 }] });
    expect(await calls()).toBe(1);
  });

  test('B1 (medium, fixed) a read that runs a user function, whose statement ran on the server and whose connection was then reset before any answer, is not run again on another connection: its effect happens once, the read fails source_unavailable', async () => {
    const before = await calls();
    // A pooled connection exists (B0 and this warm-up), so the lost one predates the read: the retry condition.
    expect(sc(await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1 AS warm' }, env.apiKey))).toMatchObject({ rows: [{ warm: 1 }] });
    proxy.swallowNext('rt43_log(8)');
    const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT public.rt43_log(8) AS v' }, env.apiKey);
    // Before the fix: the answer had rows [{ v: 8 }], the statement was sent twice and the function ran twice.
    expect({ sent: proxy.sent, ran: (await calls()) - before, rows: sc(r).rows, code: sc(r).code }).toEqual({ sent: 1, ran: 1, rows: undefined, code: 'source_unavailable' });
  });
  test('B2 (held) a read of built-ins only (no effect outside its read-only transaction) whose connection was reset so is run again, audited once (allowed, one row), and the lost connection is not counted: the circuit stays closed', async () => {
    const mark = (await env.db.pool.query<{ id: string }>('SELECT coalesce(max(id), 0)::text AS id FROM audit_events')).rows[0].id;
    expect(sc(await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 2 AS warm' }, env.apiKey))).toMatchObject({ rows: [{ warm: 2 }] });
    proxy.swallowNext('rt43 b2');
    const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: "SELECT 9 AS v WHERE 'rt43 b2' <> ''" }, env.apiKey);
    expect(sc(r).rows).toEqual([{ v: 9 }]);
    const ev = await env.db.pool.query("SELECT decision, reason_code, row_count::text AS row_count FROM audit_events WHERE kind = 'tool_call' AND id > $1::bigint ORDER BY id", [mark]);
    expect(ev.rows).toEqual([
      { decision: 'allowed', reason_code: null, row_count: '1' },
      { decision: 'allowed', reason_code: null, row_count: '1' },
    ]);
    expect(env.gateway.connectors.states().chinook ?? 'closed').toBe('closed');
  });

  test('W1 (held) an approved write whose statement was sent, then its connection reset before any answer: not run again, nothing committed, the approval fails', async () => {
    await sourceQuery(env, "UPDATE playlist SET name = 'rt43 w1 before' WHERE playlist_id = 9406");
    const id = await queue("UPDATE playlist SET name = 'rt43 w1 after' WHERE playlist_id = 9406");
    proxy.swallowNext('rt43 w1 after');
    const done = await approveAndExecute(env.db, id, { operator: 'ops-rt43' });
    expect({ state: done.state, errorCode: done.errorCode, sent: proxy.sent, name: await playlist(9406) }).toEqual({ state: 'failed', errorCode: 'execution_failed', sent: 1, name: 'rt43 w1 before' });
  });
});
