/**
 * Red team rt42b: today's merges (cc6dc96..325cc77), as a hostile agent beside the source's other
 * users. Findings:
 *  - G1 (high, fixed by hg1; was test.failing): hf5's function guard lists only the user functions the analysis
 *    resolved, so a function CREATED after the scan that PostgreSQL's resolution prefers is never
 *    checked. `public.lower(varchar)` created after the scan wins over `pg_catalog.lower(text)` for a
 *    varchar argument (exact match, CVE-2018-1058 shape); the analysis saw the built-in, sent no guard,
 *    and the new body ran: the denied SSN was served. Same for a schema earlier on the reader's path
 *    (`"$user"`): `<reader>.twice(int)` hides the scanned `public.twice(int)`, whose version the guard
 *    checks and finds unchanged. Fixed (hg1): the guard checks, for every function and operator name
 *    the statement looks up (built-ins and implicit operators included), that the non-pg_catalog
 *    functions/operators of that name in any schema are exactly the scanned ones (oid:xmin), so a
 *    created, renamed, moved or replaced candidate trips catalog_stale; operators and renames too.
 *  - W1 (medium, fixed): hnu42a counts a data-modifying CTE's changes with pg_stat_get_xact_tuples_*
 *    over relkind r/t/m; a foreign table's rows are counted by no local statistic (postgres_fdw writes
 *    on the remote), so `WITH x AS (INSERT INTO fsink SELECT … 40 rows RETURNING 1) SELECT 1`
 *    executed, inserted 40 rows and recorded rowCount 1 (the outer SELECT's). Now such a write (its
 *    transaction holds a RowExclusiveLock on a foreign table) fails before COMMIT, rolled back.
 *  - P1 (medium, fixed): hnu42b's `prepare` (build.js --if-stale) kept dist/ whenever no source file
 *    was newer than its stamp. Sources replaced by older-dated files (a release archive extracted over
 *    the install keeps its times; cp -p, rsync -a) or deleted left the old compiled tree in place
 *    through `npm ci`, and the CLI ran it: code other than the checkout's. Now the tree records a
 *    digest of its sources (.built-from); the CLI runs it, and --if-stale keeps it, only when it matches.
 *  - D1 (medium, fixed): hnu42b's row_rules_unavailable refusal of interlock_related_documents was
 *    answered before the asset's visibility was checked, for any asset id that exists in a granted
 *    source. Asset ids of mapped rows are `source:schema.table/id`, so a caller whose row rules cannot
 *    be enforced learned which rows exist (row_rules_unavailable) and which do not (unknown_asset),
 *    of its ruled table and of mapped relations it may not read at all. Now an asset the caller may
 *    not see is unknown_asset first, whatever the rules' state.
 */
import pg from 'pg';
import { pgServer } from '../../helpers/pg';
import type { RoleStatement } from '../../../generated/role-v1';
import { relatedDocumentsHandler } from '../../../src/tools/handlers/related';
import type { ToolOutcome } from '../../../src/tools/types';
import { rowViewProvisioner } from '../../../src/pipeline/row-views';
import { startRowDiscoverySource, type RowDiscoverySource } from '../../helpers/discovery-rows';
import { approveAndExecute } from '../../../src/approvals/execute';
import { upsertRole } from '../../../src/control/roles';
import { grantRole } from '../../../src/control/grants';
import { scanSource } from '../../../src/control/scan';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { governAsHrAnalyst } from '../../helpers/hr-analyst';
import { queryOutcome, settledOutcome } from '../../helpers/stale-reads';

const STALE_CODE = 'catalog_stale';

describe('rt42b: function guard (hf5)', () => {
  let env: GovernedEnv;
  let admin: pg.Client;
  let reader: string;

  const outcome = (sql: string): Promise<unknown> => queryOutcome(env, sql);

  beforeAll(async () => {
    env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } } } });
    admin = new pg.Client({ connectionString: env.sourceUrl });
    await admin.connect();
    reader = admin.escapeIdentifier(env.demo.readerRole);
    await admin.query(`
      SET search_path = public;
      CREATE TABLE staff (emp_id int PRIMARY KEY, name text, ssn text, salary numeric);
      INSERT INTO staff VALUES (1, 'Ada', '123-45-6789', 98000);
      CREATE TABLE names (n varchar);
      INSERT INTO names VALUES ('Ada');
      CREATE FUNCTION twice(int) RETURNS int LANGUAGE sql STABLE AS $$ SELECT $1 * 2 $$;
      CREATE SCHEMA stash;
      CREATE FUNCTION stash.twice(int) RETURNS int LANGUAGE sql STABLE AS $$ SELECT 0 $$;
      CREATE FUNCTION sneaky(varchar) RETURNS text LANGUAGE sql STABLE AS $$ SELECT ssn FROM public.staff WHERE emp_id = 1 $$;
      -- The reader's "$user" schema exists (empty) at scan time: it is first on the reader's path.
      CREATE SCHEMA ${reader};
      GRANT USAGE ON SCHEMA ${reader} TO ${reader};
      GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${reader};`);
    await governAsHrAnalyst(env, 'hr');
  }, 120_000);
  afterAll(async () => {
    await admin?.query(`DROP FUNCTION IF EXISTS public.lower(varchar); DROP SCHEMA IF EXISTS ${reader} CASCADE; DROP SCHEMA IF EXISTS stash CASCADE`).catch(() => undefined);
    await admin?.end();
    await env?.close();
  });

  const settled = (sql: string): Promise<unknown> => settledOutcome(env, sql);

  /** After `change` on the source, `sql` is refused catalog_stale and serves no SSN; `undo` runs in any case. */
  async function staleAfter(change: string, sql: string, undo: string): Promise<void> {
    await admin.query(change);
    try {
      const after = await outcome(sql);
      expect(JSON.stringify(after)).not.toContain('123-45-6789');
      expect(after).toEqual({ code: STALE_CODE });
    } finally {
      await admin.query(undo);
    }
  }

  test('G1 (high, fixed hg1): a user function created after the scan that shadows a built-in for the argument type trips the guard (catalog_stale), its body never run', async () => {
    expect(await settled('SELECT lower(n) AS l FROM names')).toEqual([{ l: 'ada' }]);
    // Another text than the first call's (no result-cache hit).
    await staleAfter('CREATE FUNCTION public.lower(varchar) RETURNS text LANGUAGE sql STABLE AS $$ SELECT ssn FROM public.staff WHERE emp_id = 1 $$', 'SELECT lower(n) AS l2 FROM names', 'DROP FUNCTION public.lower(varchar)');
  });

  test('G1 (high, fixed hg1): a function created after the scan in a schema earlier on the path, hiding the scanned one, trips the guard', async () => {
    expect(await settled('SELECT twice(2) AS t')).toEqual([{ t: 4 }]);
    await staleAfter(`CREATE FUNCTION ${reader}.twice(int) RETURNS text LANGUAGE sql STABLE AS $$ SELECT ssn FROM public.staff WHERE emp_id = 1 $$`, 'SELECT twice(3) AS t2', `DROP FUNCTION ${reader}.twice(int)`);
  });

  test('G1 (hg1): an operator created after the scan that wins over the built-in for varchar operands (exact match) trips the guard', async () => {
    expect(await settled("SELECT n AS m FROM names WHERE n = 'nobody'")).toEqual([]);
    await admin.query(`CREATE FUNCTION public.leak_eq(varchar, varchar) RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT EXISTS (SELECT 1 FROM public.staff WHERE ssn LIKE '123%') $$;
      CREATE OPERATOR public.= (leftarg = varchar, rightarg = varchar, function = public.leak_eq)`);
    try {
      // Run, the new operator's body would answer true for every row (the row 'Ada' served for 'nobody').
      expect(await outcome("SELECT n AS m2 FROM names WHERE n = 'nobody'")).toEqual({ code: STALE_CODE });
      // Implicit uses of = (IN) look the name up too.
      expect(await outcome("SELECT n AS m3 FROM names WHERE n IN ('nobody', 'none')")).toEqual({ code: STALE_CODE });
    } finally {
      await admin.query('DROP OPERATOR public.= (varchar, varchar); DROP FUNCTION public.leak_eq(varchar, varchar)');
    }
  });

  test('G1 (hg1): a function renamed after the scan to a called name (ALTER FUNCTION … RENAME TO) trips the guard; so does one moved in (SET SCHEMA)', async () => {
    expect(await settled('SELECT lower(n) AS l4 FROM names')).toEqual([{ l4: 'ada' }]);
    await staleAfter('ALTER FUNCTION public.sneaky(varchar) RENAME TO lower', 'SELECT lower(n) AS l5 FROM names', 'ALTER FUNCTION public.lower(varchar) RENAME TO sneaky');
    expect(await settled('SELECT twice(5) AS t5')).toEqual([{ t5: 10 }]);
    // stash.twice(int) (off the reader's path at the scan) moved into the reader's "$user" schema would hide public.twice.
    await staleAfter(`ALTER FUNCTION stash.twice(int) SET SCHEMA ${reader}`, 'SELECT twice(6) AS t6', `ALTER FUNCTION ${reader}.twice(int) SET SCHEMA stash`);
  });

  test('withstood: an agent\'s own division by zero is its statement error, not the guard (no catalog_stale, no rescan)', async () => {
    expect(await settled('SELECT twice(1) AS w')).toEqual([{ w: 2 }]);
    const r = await outcome('SELECT twice(1) / 0 AS z');
    expect(r).not.toEqual({ code: STALE_CODE });
    expect((r as { code?: string }).code).toBe('statement_failed');
  });
});

describe('rt42b: discovery when row rules cannot be enforced (hnu42b)', () => {
  let fx: RowDiscoverySource;
  beforeAll(async () => {
    fx = await startRowDiscoverySource(
      'rt42b_rows',
      `CREATE TABLE notes (id int PRIMARY KEY, region text NOT NULL, title text, body text);
      INSERT INTO notes SELECT g, (ARRAY['eu','us','ap'])[1 + g % 3], 'note ' || g, 'zebra report number ' || g FROM generate_series(1, 9) g;
      CREATE TABLE wiki (id int PRIMARY KEY, title text, body text);
      INSERT INTO wiki VALUES (1, 'wiki one', 'zebra handbook');
      CREATE TABLE salaries (id int PRIMARY KEY, title text, body text);
      INSERT INTO salaries VALUES (5, 'pay', 'zebra pay');`,
      ['notes', 'wiki', 'salaries'],
    );
  }, 60_000);
  afterAll(async () => fx?.close());

  test('D1 (medium): related documents does not tell an existing hidden asset from a missing one (row_rules_unavailable was an existence oracle)', async () => {
    const ruled: RoleStatement[] = [
      { effect: 'allow', action: 'discover', resource: '*' },
      { effect: 'allow', action: 'read', resource: 'public.notes', rows: 'region = ANY(identity.regions)' },
      { effect: 'allow', action: 'read', resource: 'public.wiki' },
      { effect: 'deny', action: 'read', resource: 'public.salaries' },
    ];
    const { deps, ctx } = await fx.caller({ regions: ['eu'] }, ruled);
    deps.rowReads = { connectors: deps.rowReads!.connectors, rowViews: rowViewProvisioner(async () => {
      throw Object.assign(new Error('permission denied for database'), { sqlState: '42501' });
    }) };
    const related = relatedDocumentsHandler(deps);
    const code = async (asset_id: string) => {
      const o: ToolOutcome = await related({ asset_id, limit: 50 }, ctx());
      return o.kind === 'refusal' ? o.code : o.kind;
    };
    // A row of the ruled table (exists; region us: outside the rule too), a missing row of it, a row
    // of a denied mapped table and a missing one: one answer for all.
    expect(await code('hr:public.notes/1')).toBe('unknown_asset');
    expect(await code('hr:public.notes/2')).toBe('unknown_asset');
    expect(await code('hr:public.notes/999')).toBe('unknown_asset');
    expect(await code('hr:public.salaries/5')).toBe('unknown_asset');
    expect(await code('hr:public.salaries/6')).toBe('unknown_asset');
    // A visible seed still says the rules are unavailable (hnu42b item 1: no silently short answer).
    expect(await code('hr:public.wiki/1')).toBe('row_rules_unavailable');
  });
});

describe('rt42b: approved-write row counts (hnu42a)', () => {
  let env: GovernedEnv;
  let admin: pg.Client;
  beforeAll(async () => {
    env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } } } });
    admin = new pg.Client({ connectionString: env.sourceUrl });
    await admin.connect();
    const db = (await admin.query('SELECT current_database() AS d')).rows[0].d as string;
    const w = admin.escapeIdentifier(env.demo.writerRole);
    const r = admin.escapeIdentifier(env.demo.readerRole);
    // The test server as INTERLOCK_TEST_PG_URL names it (never hard-coded).
    const { host, port } = pgServer(env.sourceUrl);
    const su = decodeURIComponent(new URL(env.sourceUrl).username) || 'root';
    await admin.query(`
      CREATE EXTENSION IF NOT EXISTS postgres_fdw;
      CREATE SERVER rt42b_loop FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host ${admin.escapeLiteral(host)}, port '${port}', dbname '${db}');
      CREATE USER MAPPING FOR ${w} SERVER rt42b_loop OPTIONS (user ${admin.escapeLiteral(su)}, password_required 'false');
      CREATE USER MAPPING FOR ${r} SERVER rt42b_loop OPTIONS (user ${admin.escapeLiteral(su)}, password_required 'false');
      CREATE TABLE public.rt42b_sink (n int);
      CREATE FOREIGN TABLE public.rt42b_fsink (n int) SERVER rt42b_loop OPTIONS (schema_name 'public', table_name 'rt42b_sink');
      GRANT SELECT, INSERT ON public.rt42b_fsink TO ${w};
      GRANT SELECT ON public.rt42b_fsink TO ${r};
      GRANT SELECT ON public.track TO ${w};`);
    await scanSource(env.db, 'chinook');
    await upsertRole(env.db, { name: 'fdw-writer', statements: [
      { effect: 'allow', action: 'read', resource: 'public.*' },
      { effect: 'allow', action: 'describe', resource: 'public.*' },
      { effect: 'allow', action: 'write', resource: 'public.rt42b_fsink' },
    ] });
    await grantRole(env.db, { identityId: env.demo.identityId, roleName: 'fdw-writer', sourceId: 'chinook' });
    env.gateway.store.invalidate('*');
  }, 120_000);
  afterAll(async () => {
    await admin?.end();
    await env?.close();
  });

  // It inserted 40 rows into the foreign table and recorded 1 (the outer SELECT's): now it fails, rolled back.
  test('W1 (medium): a data-modifying CTE writing a foreign table fails closed (its rows cannot be counted), nothing written', async () => {
    const q = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'WITH x AS (INSERT INTO rt42b_fsink SELECT track_id FROM track WHERE track_id <= 40 RETURNING 1) SELECT 1', params: [] }, env.apiKey);
    const queued = q.body.result.structuredContent;
    expect(queued).toMatchObject({ status: 'queued' });
    const done = await approveAndExecute(env.db, queued.approval_id as string, { operator: 'ops-alice' });
    expect((await admin.query('SELECT count(*)::int AS n FROM rt42b_sink')).rows[0].n).toBe(0);
    expect(done).toMatchObject({ state: 'failed', errorCode: 'execution_failed' });
  });
});

describe('rt42b: prepare --if-stale (hnu42b)', () => {
  const ROOT = join(__dirname, '..', '..', '..');
  const UP_TO_DATE = 'interlock build: dist is up to date with the sources; not rebuilt (npm run build forces it)\n';
  // The copy has no node_modules: a build it does not skip stops here (--if-possible), before tsc.
  const BUILDS = 'interlock build: TypeScript is not installed; the CLI will run the sources through tsx\n';

  test('P1 (medium): sources replaced by older-dated files (or a tree without a digest) are rebuilt, not kept', () => {
    const root = mkdtempSync(join(tmpdir(), 'rt42b-prepare-'));
    try {
      for (const d of ['bin', 'scripts', 'src', 'generated', 'spec', 'dist/src/cli']) mkdirSync(join(root, d), { recursive: true });
      copyFileSync(join(ROOT, 'bin', 'runtime.js'), join(root, 'bin', 'runtime.js'));
      copyFileSync(join(ROOT, 'scripts', 'build.js'), join(root, 'scripts', 'build.js'));
      const old = new Date('2020-01-01T00:00:00Z');
      const source = (text: string) => {
        writeFileSync(join(root, 'src', 'a.ts'), text);
        utimesSync(join(root, 'src', 'a.ts'), old, old);
      };
      source('export const fixed = false;\n');
      writeFileSync(join(root, 'dist', 'src', 'cli', 'main.js'), '');
      writeFileSync(join(root, 'dist', '.built-at'), String(Date.now()));
      const prepare = () => execFileSync(process.execPath, [join(root, 'scripts', 'build.js'), '--if-possible', '--if-stale'], { cwd: root, encoding: 'utf8' });
      // A tree that records no digest of its sources is not trusted.
      expect(prepare()).toBe(BUILDS);
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const runtime = require(join(root, 'bin', 'runtime.js')) as { sourcesDigest?: (r: string, d: string[]) => string; sourceDirs: (r: string) => string[] };
      writeFileSync(join(root, 'dist', '.built-from'), runtime.sourcesDigest!(root, runtime.sourceDirs(root)));
      expect(prepare()).toBe(UP_TO_DATE);
      const choose = runtime as unknown as { chooseRuntime: (r: string, e: Record<string, string>) => { kind: string; reason?: string } };
      expect(choose.chooseRuntime(root, {})).toEqual({ kind: 'compiled', dir: join(root, 'dist') });
      // The release's fix arrives with an older time than the local build: rebuilt, and until then not run.
      source('export const fixed = true;\n');
      expect(choose.chooseRuntime(root, {})).toEqual({ kind: 'source', reason: `${join(root, 'dist')} was not built from these sources (npm run build refreshes it)` });
      expect(prepare()).toBe(BUILDS);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
