/**
 * Red team rt47b: this session's changes (2026-12-07) attacked by a fresh attacker with the
 * privileges docs/ threat model gives. Real PostgreSQL, loopback only. Each test is one attack; its
 * name says whether it is a finding (severity, fixed or open) or an attack that held.
 *
 *   J1 medium, fixed: `audit verify` says NOT AUTHENTICATED (nu47, 616b64e) when every mismatch is
 *      unknown_key. A holder of the runtime credential appends a format-5 batch to a genuine keyed
 *      chain (next seq, prev_hash = the chain's last tag: the trigger checks a genesis and retired ids
 *      only) under a key id nobody has, with events of its choosing; verify with the trail's key named
 *      it unknown_key only, so the forged batch read "NOT AUTHENTICATED … give that key", the wording
 *      of a rotation whose old key was left out, not BROKEN. A lane tags every batch with one key
 *      (ChainLane's key is fixed), so a batch whose key id differs from its chain's previous batch's is
 *      forged whatever keys are given: it is now hash_mismatch (BROKEN), also without any key.
 *   J2 low (availability), fixed: a reader role whose search_path default starts with pg_temp
 *      (ALTER ROLE/DATABASE … SET search_path = 'pg_temp, public': the database owner or an admin, not an
 *      agent or a CREATE-on-a-schema insider) makes current_schemas(false) name the session's own temp
 *      schema (pg_temp_<backend slot>, created on the call). The scan records ["pg_temp_N","public"]; a
 *      reader connection pinned to that path has no USAGE on another session's temp schema and reports
 *      ["public"]: since flake47 every read is catalog_stale and starts a rescan that records the same
 *      kind of path again, so reads are refused for everyone and the source is rescanned without end (before,
 *      session_settings_mismatch on every read). Fixed: the scan's path and the verification's leave the
 *      session's temporary schema out (session-settings.ts lookupPath).
 *   J3 high, fixed (functions here; operators and types: J3b): not this session's change, found while probing item
 *      1's "can the connection's statements run something else". The catalogue scan (catalog.ts SCAN_SQL,
 *      run by control/scan.ts on a reader connection with the reader role's own search_path, which was not
 *      read-only) called json_build_array, json_agg, bool_or, min, count, unnest … unqualified. An insider
 *      with CREATE on a schema of that path (public) defined public.json_build_array(name, name) (an exact
 *      match beats pg_catalog's VARIADIC "any": CVE-2018-1058's pattern) and every scan ran it as the
 *      reader role: it copied a table only the reader may read into the insider's table (shown before the
 *      fix), and could as well return forged catalogue facts. Fixed: every function of SCAN_SQL (and the
 *      fragments it includes) and of unreadableRelations is pg_catalog-qualified (a parse-tree test keeps
 *      SCAN_SQL so), unreadableRelations' operators too, and the scan's connection is read-only.
 *   J3b high, fixed: SCAN_SQL still compared with ~450 unqualified operators, some between different
 *      types pg_catalog has no exact operator for (`t.typrelid = 0`: oid = integer). An insider's
 *      public.= (oid, integer) was an exact match and ran as the reader during every scan (shown: the copy as
 *      in J3; with the read-only scan the copy fails and so does the scan, 25006, but a function that only
 *      returns a chosen boolean forges catalogue facts unseen). hook-guard.ts (`typelem <> 0`) ran an
 *      insider's public.<> (oid, integer) as the writer during an approved write's guard (shown: it recorded
 *      the writer role); and a type name in a cast (`::text`) resolved through the path, so with the reader's
 *      path `public, pg_catalog` an insider's domain public.text ran its CHECK as the reader during a scan.
 *      Fixed: every statement InterLock sends on a source connection names each operator
 *      (OPERATOR(pg_catalog.op)), type, function, collation and relation with its schema
 *      (src/sources/postgres/qualify-sql.ts qualifySql rewrites the composed texts once, IN lists, LIKE,
 *      NULLIF, IS DISTINCT FROM and CASE x WHEN written by hand; test/unit/sources/qualified-statements.test.ts
 *      checks every such statement's parse tree).
 * Held (no test needed beyond the existing suites; by reading): DateStyle's set_config and current_setting
 * are schema-qualified in the verification statement (no shadowing by search_path); interlock_approval_status
 * answers another identity's approval after the same one query as an unknown id; the console's preview is text.
 */
import { randomBytes } from 'node:crypto';
import { eachRuntimeRoleTrail } from '../control/control-db';
import { ChainLane } from '../../../src/audit/chain';
import { auditKey } from '../../../src/audit/key';
import { verifyAuditChain } from '../../../src/audit/verify';
import { registerAuditKeyIds } from '../../../src/audit/keyed-trail';
import { runCli } from '../../../src/cli/main';
import { connectPinned } from '../../../src/sources/postgres/pinned-client';
import { pinnedStartupOptions } from '../../../src/sources/postgres/session-settings';
import { searchPathOption } from '../../../src/sources/postgres/settings';
import { scanCatalog, SCAN_SQL } from '../../../src/sources/postgres/catalog';
import { initSqlParser } from '../../../src/sql/parser';
import { qualifySql, unqualifiedNames } from '../../../src/sources/postgres/qualify-sql';
import { createTempDatabase, pgServer } from '../../helpers/pg';
import { withInsiderDatabase } from '../../helpers/insider-db';
import { auditRow, faultPairs } from '../../helpers/audit-events';
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { startPublicInsider, stopInsider, type Insider } from '../../helpers/stale-reads';
import { approveAndExecute } from '../../../src/approvals/execute';
import { scanSource } from '../../../src/control/scan';
import { upsertRole } from '../../../src/control/roles';
import { createIdentity } from '../../../src/control/identities';
import { grantRole } from '../../../src/control/grants';
import { createApiKey } from '../../../src/control/keys';

jest.setTimeout(120_000);

const BATCH_COLS = 'committed_at, event_count, prev_hash, hash, format, chain_id, seq, mark, anchors, mac_key_id';
const EVENT_COLS = `kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version, decision,
  reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details`;

/** `interlock audit verify` on `url` with `env` set for the call (restored after). */
async function verifyCli(url: string, env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  const saved = Object.fromEntries(['INTERLOCK_AUDIT_KEY', 'INTERLOCK_AUDIT_PREVIOUS_KEYS'].map((k) => [k, process.env[k]]));
  delete process.env.INTERLOCK_AUDIT_KEY;
  delete process.env.INTERLOCK_AUDIT_PREVIOUS_KEYS;
  Object.assign(process.env, env);
  try {
    let stdout = '';
    let stderr = '';
    const code = await runCli(['--database-url', url, 'audit', 'verify'], { out: (t) => (stdout += t.endsWith('\n') ? t : t + '\n'), err: (t) => (stderr += t.endsWith('\n') ? t : t + '\n') });
    return { code, stdout, stderr };
  } finally {
    for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
}

describe('rt47b J1: a stolen runtime credential against verify\'s NOT AUTHENTICATED wording', () => {
  const fx = eachRuntimeRoleTrail('rt47b');

  // Shown failing without the fix (src/audit/verify.ts): faults were [[forged, 'unknown_key']] and the CLI printed
  // "audit chain NOT AUTHENTICATED at batch <forged> … unknown_key (… give that key …)".
  test('finding J1 (medium, fixed): a batch appended to a genuine keyed chain under a key id nobody has is BROKEN, not NOT AUTHENTICATED', async () => {
    const secret = randomBytes(32).toString('base64');
    const k = auditKey(secret);
    await registerAuditKeyIds(fx.t.db.pool, [k.id], 'require_key');
    const lane = new ChainLane(fx.rt, k);
    await lane.append([auditRow('j1a')], 5000);
    const last = await lane.append([auditRow('j1b')], 5000);
    // The thief: the chain's next place, under an id of no key (16 hex digits, as ids are), a tag it made up, an event it chose.
    const fake = randomBytes(8).toString('hex');
    const forged = (
      await fx.rt.query<{ id: string }>(
        `INSERT INTO audit_batches (${BATCH_COLS}) SELECT now(), 1, hash, $2, 5, chain_id, seq + 1, NULL, '[]', $3 FROM audit_batches WHERE id = $1 RETURNING id::text`,
        [last, randomBytes(32), fake],
      )
    ).rows[0].id;
    await fx.rt.query(`INSERT INTO audit_events (${EVENT_COLS}, batch_id, recorded_at) SELECT kind, time, 'j1-forged', identity_id, key_id, tool, canonical_tool, dialect, protocol_version, decision,
      reason_code, source_id, action, 'SELECT * FROM salaries', relations, row_count, duration_ms, approval_id, operator, details, $2, recorded_at FROM audit_events WHERE batch_id = $1`, [last, forged]);

    expect(faultPairs(await verifyAuditChain(fx.t.db, { keys: new Map([[k.id, k]]) }))).toEqual([[forged, 'hash_mismatch']]);
    // Without any key: the key id's change is seen all the same.
    expect(faultPairs(await verifyAuditChain(fx.t.db, {}))).toEqual([[forged, 'hash_mismatch']]);
    const r = await verifyCli(fx.t.temp.url, { INTERLOCK_AUDIT_KEY: secret });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(new RegExp(`^audit chain BROKEN at batch ${forged} \\(committed [^)]+\\): hash_mismatch;`));
  });

  test('held: a genuine chain whose old key is not given stays NOT AUTHENTICATED (the rotation case nu47 words)', async () => {
    const oldSecret = randomBytes(32).toString('base64');
    const old = auditKey(oldSecret);
    const nextSecret = randomBytes(32).toString('base64');
    const next = auditKey(nextSecret);
    await registerAuditKeyIds(fx.t.db.pool, [old.id, next.id], 'require_key');
    const lane = new ChainLane(fx.rt, old);
    const first = await lane.append([auditRow('j1c')], 5000);
    const second = await lane.append([auditRow('j1d')], 5000);
    expect(faultPairs(await verifyAuditChain(fx.t.db, { keys: new Map([[next.id, next]]) }))).toEqual([[first, 'unknown_key'], [second, 'unknown_key']]);
    const r = await verifyCli(fx.t.temp.url, { INTERLOCK_AUDIT_KEY: nextSecret });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(new RegExp(`^audit chain NOT AUTHENTICATED at batch ${first} \\(committed [^)]+\\): unknown_key \\(the batch names audit key id ${old.id};`));
    expect(await verifyCli(fx.t.temp.url, { INTERLOCK_AUDIT_KEY: nextSecret, INTERLOCK_AUDIT_PREVIOUS_KEYS: oldSecret })).toMatchObject({ code: 0 });
  });
});

// Shown failing without the fix: the pinned reader reported ["public"], the scan-like connection ["pg_temp_5","public"].
describe('rt47b J2 (low, fixed): a role path starting with pg_temp makes every reader connection differ from the scan', () => {
  test('finding J2: the path a reader connection pinned to the scanned one reports equals the scanned one', async () => {
    const temp = await createTempDatabase('rt47b_j2');
    const role = `rt47b_j2_${randomBytes(4).toString('hex')}`;
    const { host, port } = pgServer();
    const admin = await connectPinned({ host, port, database: temp.name, user: 'root', options: pinnedStartupOptions() });
    try {
      await admin.query(`CREATE ROLE ${role} LOGIN`);
      await admin.query(`ALTER ROLE ${role} SET search_path = pg_temp, public`);
      const scan = await connectPinned({ host, port, database: temp.name, user: role, options: pinnedStartupOptions() });
      const scanned = scan.searchPath!;
      // The catalogue records the same path (SCAN_SQL's current_schemas) as the connection's verification.
      expect((await scanCatalog(scan)).searchPath).toEqual(scanned);
      await scan.end();
      const reader = await connectPinned({ host, port, database: temp.name, user: role, options: `${pinnedStartupOptions()} ${searchPathOption(scanned)}` });
      const got = reader.searchPath;
      await reader.end();
      expect(got).toEqual(scanned);
    } finally {
      await admin.query(`DROP ROLE IF EXISTS ${role}`).catch(() => undefined);
      await admin.end();
      await temp.drop();
    }
  });
});

/**
 * A fresh source database with a reader (SELECT on public.secret only) and an insider (USAGE, CREATE on
 * public) who runs `insiderSql` (its objects may insert into public.loot, which anyone may); then one
 * catalogue scan as the reader on its own path (`readerPath`: the role's search_path default, set by an
 * admin first). Returns how the scan ended and the rows loot holds.
 */
async function scanWithInsider(insiderSql: string[], readerPath?: string): Promise<{ scanned: string; loot: Array<{ who: string; v: string }> }> {
  const { result: scanned, loot } = await withInsiderDatabase('rt47b_j3', insiderSql, readerPath, async ({ connectReader }) => {
    const scanner = await connectReader({ application_name: 'interlock-scan' });
    try {
      await scanCatalog(scanner);
      return 'scanned';
    } catch (err) {
      return `failed ${(err as { code?: string }).code ?? ''}`;
    } finally {
      await scanner.end();
    }
  });
  return { scanned, loot };
}

// Shown failing before the fix: loot held the secret row once per json_build_array(name, name) call, who = the reader role.
describe('rt47b J3 (high, fixed; operators and types: J3b): an insider with CREATE on a schema of the reader\'s path against the catalogue scan', () => {
  test('finding J3 (fixed for functions): a function in public shadowing a built-in the scan calls unqualified (json_build_array(name, name)) does not run as the reader', async () => {
    expect(
      await scanWithInsider([
        `CREATE FUNCTION public.json_build_array(a name, b name) RETURNS json LANGUAGE sql VOLATILE AS $$
          INSERT INTO public.loot SELECT current_user, v FROM public.secret;
          SELECT pg_catalog.json_build_array(a::text, b::text) $$`,
      ]),
    ).toEqual({ scanned: 'scanned', loot: [] });
  });
});

describe('rt47b J3: the scan statement names every function with its schema', () => {
  // Shown failing before the fix: json_agg ×34, json_build_array ×22, bool_or ×8, … unqualified. J3b: the text sent
  // (qualifySql's) names every operator, type, collation and relation too (the one check of qualify-sql.ts, which
  // test/unit/sources/qualified-statements.test.ts runs over every statement sent on a source connection).
  test('no unqualified function call in SCAN_SQL, and nothing unqualified in the text sent (libpg-query parse tree)', async () => {
    await initSqlParser();
    expect(unqualifiedNames(SCAN_SQL).filter((l) => l.startsWith('function '))).toEqual([]);
    expect(unqualifiedNames(qualifySql(SCAN_SQL))).toEqual([]);
  });
});

// Shown failing (run without .skip, before the read-only scan): loot held the secret row, who = the reader role (an operator
// = (oid, integer) in public is an exact match for the scan's `t.typrelid = 0`, pg_catalog has = (oid, oid) only); and
// again before the fix of J3b with this scan connection (not read-only): loot held the secret row, who = the reader role.
describe('rt47b J3b (high, fixed): an operator or type in public shadowing one the scan uses', () => {
  test('finding J3b: public.= (oid, integer) does not run as the reader during a scan', async () => {
    expect(
      await scanWithInsider([
        `CREATE FUNCTION public.oid_eq_int(a oid, b integer) RETURNS boolean LANGUAGE sql VOLATILE AS $$
          INSERT INTO public.loot SELECT current_user, v FROM public.secret;
          SELECT a OPERATOR(pg_catalog.=) b::oid $$`,
        'CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = integer, FUNCTION = public.oid_eq_int)',
      ]),
    ).toEqual({ scanned: 'scanned', loot: [] });
  });

  // Shown failing before the fix: loot held the secret row, who = the reader role (the scan's `::text` casts were the domain).
  test('finding J3b (types): with the reader\'s path `public, pg_catalog`, a domain public.text whose CHECK records the role does not run during a scan', async () => {
    expect(
      await scanWithInsider(
        [
          `CREATE FUNCTION public.spy(x pg_catalog.text) RETURNS boolean LANGUAGE sql VOLATILE AS $$
            INSERT INTO public.loot SELECT current_user, v FROM public.secret;
            SELECT true $$`,
          'CREATE DOMAIN public.text AS pg_catalog.text CHECK (public.spy(VALUE))',
        ],
        'public, pg_catalog',
      ),
    ).toEqual({ scanned: 'scanned', loot: [] });
  });
});

describe('rt47b J3b (high, fixed): an operator in public shadowing one the write-hook guard uses, as the writer', () => {
  let env: GovernedEnv;
  let x: Insider;
  let key: string;

  beforeAll(async () => {
    env = await startGovernedEnv();
    x = await startPublicInsider(env, 'rt47b');
    await sourceQuery(
      env,
      `CREATE TABLE public.rt47b_w (id int PRIMARY KEY, tags int[]);
       INSERT INTO public.rt47b_w VALUES (1, '{1}');
       GRANT SELECT, UPDATE ON public.rt47b_w TO "${env.demo.writerRole}";
       GRANT SELECT ON public.rt47b_w TO "${env.demo.readerRole}";`,
    );
    await scanSource(env.db, env.demo.sourceId);
    await upsertRole(env.db, {
      name: 'rt47b-writer',
      statements: [
        { effect: 'allow' as const, action: 'read' as const, resource: 'public.rt47b_w' },
        { effect: 'allow' as const, action: 'write' as const, resource: 'public.rt47b_w' },
      ],
    });
    const who = await createIdentity(env.db, 'rt47b-agent');
    await grantRole(env.db, { identityId: who.id, roleName: 'rt47b-writer', sourceId: env.demo.sourceId });
    key = (await createApiKey(env.db, who.id)).secret;
    env.gateway.store.invalidate('*');
  });
  afterAll(async () => {
    await stopInsider(x, 'DROP OPERATOR IF EXISTS public.<> (oid, integer); DROP FUNCTION IF EXISTS public.rt47b_ne(oid, integer); DROP TABLE IF EXISTS public.rt47b_evidence');
    await env?.close();
  });

  // Shown failing before the fix: { state: 'executed', rowCount: 1 } and evidence [{ who: <the writer role> }, …] (the guard's
  // `hty.typelem <> 0` over the array column's type, before and after the statement).
  test('finding J3b (writer): public.<> (oid, integer) created after the write was queued does not run during its guard', async () => {
    const r = await callTool(env, 'interlock_query', { source_id: env.demo.sourceId, sql: "UPDATE rt47b_w SET tags = '{2}' WHERE id = 1", params: [] }, key);
    expect(r.body.result.structuredContent).toMatchObject({ status: 'queued', approval_state: 'pending' });
    const id = r.body.result.structuredContent.approval_id as string;
    await x.insider.query(`CREATE FUNCTION public.rt47b_ne(a oid, b integer) RETURNS boolean LANGUAGE sql VOLATILE AS $$
        INSERT INTO public.rt47b_evidence SELECT current_user;
        SELECT a OPERATOR(pg_catalog.<>) b::oid $$;
      CREATE OPERATOR public.<> (LEFTARG = oid, RIGHTARG = integer, FUNCTION = public.rt47b_ne)`);
    const done = await approveAndExecute(env.db, id, { operator: 'ops-rt47b' });
    const evidence = await sourceQuery<{ who: string }>(env, 'SELECT who FROM public.rt47b_evidence');
    const tags = (await sourceQuery<{ tags: number[] }>(env, 'SELECT tags FROM public.rt47b_w WHERE id = 1'))[0]?.tags;
    expect({ done, evidence, tags }).toEqual({ done: { approvalId: id, state: 'executed', rowCount: 1 }, evidence: [], tags: [2] });
  });
});
