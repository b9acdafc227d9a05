/**
 * Red team rt43b: the function guard narrowed to the schemas a name resolves from (task hg2,
 * src/sources/postgres/function-guard.ts), through the gateway on a real PostgreSQL source.
 *
 * The question: can a read run a function or operator the scan did not see (or not the scanned
 * version) without the guard tripping, now that off-path schemas are ignored?
 *
 * Findings (F1 and F3 were test.failing with the secure expectation; fixed by task hcast: the type
 * guard, src/sources/postgres/type-guard.ts, compares pg_cast and pg_constraint per involved type):
 *  F1 (high) a cast WITH FUNCTION created after the scan (`CREATE CAST (scratch.mood AS text) WITH
 *     FUNCTION scratch.leak(scratch.mood)`) by the owner of a column's type, the function off the
 *     reader's path and never named: `mood::text` runs it by pg_cast oid, as the reader, and a
 *     denied SSN reaches the agent. The guard compares pg_proc/pg_operator by name only; pg_cast is
 *     not compared at run time (type-code.ts attaches only the casts the scan saw).
 *  F2 (high, insider with CREATE on a path schema) a LANGUAGE sql function whose string body uses
 *     `BETWEEN`: function-reads.ts records the body's A_Expr name as looked up, which for BETWEEN is
 *     `BETWEEN`, not the `>=`/`<=` PostgreSQL resolves; a `public.>=(varchar, varchar)` created after
 *     the scan wins over the built-in (exact match) and runs unchecked: here it reads staff.ssn, an
 *     oracle on a denied column. FIXED here: the body's BETWEEN looks up `>=`/`<=` (NOT: `<`/`>`).
 *  F3 (low) a domain CHECK constraint added after the scan runs its function (by oid) on every cast
 *     to the domain; the guard does not compare pg_constraint. Boolean only, errors opaque and the
 *     read-only transaction limit it to refusing reads (availability) and side channels.
 * What held (passing):
 *  H1 a schema named after the reader role (`"$user"`) created after the scan: the pinned path
 *     names only the schemas that existed, so its `lower(varchar)` is never resolved.
 *  H2 ORDER BY / DISTINCT / GROUP BY over varchar use the type's default btree opclass (by oid), not
 *     a name: a `public.<` / `public.=` (varchar, varchar) created after the scan is never run by them.
 *  H3 (task flake47, fixed) a scan that saw H1's `"$user"` schema, which was dropped right after: the
 *     path the scan recorded names it, new reader connections (on that path pinned) resolve names
 *     without it, and every read was refused `session_settings_mismatch`, counted against the circuit,
 *     until someone rescanned (CI's flake of H2: a rescan F3's stale reads had queued read the catalogue
 *     while H1's schema existed and was stored after H1 dropped it). Now the read is refused
 *     `catalog_stale`, the gateway rescans, and the next read is served. H1 also waits for the
 *     gateway's rescans to end first, so its schema is created after every scan, as it says.
 */
import pg from 'pg';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { governAsHrAnalyst } from '../../helpers/hr-analyst';
import { queryOutcome, settledOutcome, startInsider, stopInsider, type Insider } from '../../helpers/stale-reads';
import { scanSource } from '../../../src/control/scan';
import { loadCatalog } from '../../../src/control/catalog';

const STALE = { code: 'catalog_stale' };
const SSN = '078-05-1120';

let env: GovernedEnv;
let x: Insider;
let admin: pg.Client;
let insider: pg.Client;

const outcome = (sql: string): Promise<unknown> => queryOutcome(env, sql);
const settled = (sql: string): Promise<unknown> => settledOutcome(env, sql);

/**
 * The answer to `sql` once the rescan the gateway started on its own (a call just refused
 * catalog_stale) has ended: the answer on the new snapshot, never catalog_stale again. (Task
 * flake47: it asked first for one more catalog_stale, which a rescan quicker than one call — or one
 * an earlier test had queued, snapshot taken after the change — had already ended: a loaded run
 * answered function_not_allowed there; then it polled.)
 */
async function afterRescan(sql: string): Promise<unknown> {
  await env.gateway.rescansIdle();
  const o = await outcome(sql);
  expect(o).not.toEqual(STALE);
  return o;
}

beforeAll(async () => {
  env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } } } });
  // An insider with CREATE on schema scratch only (off the reader's path); it owns type scratch.mood,
  // which the owner's table `names` uses.
  x = await startInsider(env, 'rt43b');
  ({ admin, insider } = x);
  await insider.query(`
    CREATE TYPE scratch.mood AS ENUM ('calm', 'busy');
    CREATE DOMAIN scratch.tag AS varchar;
    CREATE FUNCTION scratch.nope(varchar) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$ SELECT false $$;`);
  await admin.query(`
    CREATE TABLE names (n varchar, mood scratch.mood);
    INSERT INTO names VALUES ('Ada', 'calm');
    CREATE TABLE staff (emp_id int PRIMARY KEY, name text, ssn text, salary numeric);
    INSERT INTO staff VALUES (1, 'Ada', '${SSN}', 100);
    CREATE FUNCTION in_range(v varchar, lo varchar, hi varchar) RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT v BETWEEN lo AND hi $$;
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${admin.escapeIdentifier(env.demo.readerRole)};`);
  await governAsHrAnalyst(env, 'hr');
}, 120_000);

afterAll(async () => {
  await stopInsider(x, 'DROP TABLE IF EXISTS public.names');
  await env?.close();
});

test('the denied column is denied (baseline)', async () => {
  expect(await outcome('SELECT ssn FROM staff')).toEqual({ code: 'source_role_denied' });
  expect(await settled('SELECT mood::text AS m0 FROM names')).toEqual([{ m0: 'calm' }]);
});

test('F1 (high, fixed by task hcast): a cast WITH FUNCTION created after the scan by the type\'s owner trips the type guard; after the rescan the cast is refused as its function would be', async () => {
  expect(await settled('SELECT mood::text AS m1 FROM names')).toEqual([{ m1: 'calm' }]);
  await insider.query(`
    CREATE FUNCTION scratch.leak(scratch.mood) RETURNS text LANGUAGE sql STABLE AS $$ SELECT ssn FROM public.staff LIMIT 1 $$;
    CREATE CAST (scratch.mood AS text) WITH FUNCTION scratch.leak(scratch.mood)`);
  let got: unknown;
  let after: unknown;
  let call: unknown;
  try {
    got = await outcome('SELECT mood::text AS m2 FROM names');
    // The rescan saw the cast: type-code.ts attaches scratch.leak to mood, which reads staff (ssn denied).
    after = await afterRescan('SELECT mood::text AS m3 FROM names');
    call = await outcome('SELECT scratch.leak(mood) AS m4 FROM names');
  } finally {
    await insider.query('DROP CAST (scratch.mood AS text); DROP FUNCTION scratch.leak(scratch.mood)');
  }
  // Seen before task hcast: [{ m2: '078-05-1120' }] — the denied SSN, no catalog_stale, no rescan.
  expect(got).toEqual(STALE);
  expect(call).toEqual({ code: 'source_role_denied' });
  expect(after).toEqual(call);
});

test('F1: the same cast created for a type the statement does not involve does not trip it', async () => {
  await insider.query("CREATE TYPE scratch.other AS ENUM ('x')");
  try {
    expect(await settled('SELECT mood::text AS k0, n AS k1 FROM names')).toEqual([{ k0: 'calm', k1: 'Ada' }]);
    await insider.query(`
      CREATE FUNCTION scratch.leak2(scratch.other) RETURNS text LANGUAGE sql STABLE AS $$ SELECT ssn FROM public.staff LIMIT 1 $$;
      CREATE CAST (scratch.other AS text) WITH FUNCTION scratch.leak2(scratch.other)`);
    expect(await outcome('SELECT mood::text AS k2, n AS k3 FROM names')).toEqual([{ k2: 'calm', k3: 'Ada' }]);
    // …but a statement naming that type does.
    expect(await outcome("SELECT 'x'::scratch.other::text AS k4")).toEqual(STALE);
  } finally {
    await insider.query('DROP TYPE scratch.other CASCADE');
  }
});

test('F2 (high, fixed here): a string body\'s BETWEEN resolves `>=`/`<=`, which the guard never compares: public.>=(varchar, varchar) created after the scan runs', async () => {
  expect(await settled("SELECT in_range(n, 'A', 'Z') AS r0 FROM names")).toEqual([{ r0: true }]);
  // An oracle on staff.ssn: true exactly when some SSN starts with the lower bound.
  await admin.query(`
    CREATE FUNCTION public.ge_oracle(varchar, varchar) RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT EXISTS (SELECT 1 FROM public.staff WHERE ssn LIKE $2 || '%') $$;
    CREATE OPERATOR public.>= (leftarg = varchar, rightarg = varchar, function = public.ge_oracle)`);
  let got: unknown;
  try {
    got = await outcome("SELECT in_range(n, '078-05', 'Z') AS r1, in_range(n, '999', 'Z') AS r2 FROM names");
  } finally {
    await admin.query('DROP OPERATOR public.>= (varchar, varchar); DROP FUNCTION public.ge_oracle(varchar, varchar)');
  }
  // Seen before the fix: [{ r1: true, r2: false }] — 'Ada' >= '999' is true for the built-in; the oracle answered.
  expect(got).toEqual(STALE);
});

test('F3 (low, fixed by task hcast): a domain CHECK added after the scan trips the type guard; after the rescan the cast to the domain is refused', async () => {
  expect(await settled('SELECT n::scratch.tag AS d0 FROM names')).toEqual([{ d0: 'Ada' }]);
  await insider.query('ALTER DOMAIN scratch.tag ADD CONSTRAINT c CHECK (scratch.nope(VALUE))');
  let got: unknown;
  let after: unknown;
  try {
    got = await outcome('SELECT n::scratch.tag AS d1 FROM names');
    // The rescan records the CHECK: the domain is an unsafe type, refused in a cast.
    after = await afterRescan('SELECT n::scratch.tag AS d2 FROM names');
  } finally {
    await insider.query('ALTER DOMAIN scratch.tag DROP CONSTRAINT c');
  }
  // Seen before task hcast: a statement failure (23514 from the new CHECK), not catalog_stale.
  expect(got).toEqual(STALE);
  expect(after).toEqual({ code: 'function_not_allowed' });
});

test('H1: a "$user" schema created after the scan is not on the pinned path: its lower(varchar) never runs', async () => {
  const me = admin.escapeIdentifier(env.demo.readerRole);
  expect(await settled('SELECT lower(n) AS u0 FROM names')).toEqual([{ u0: 'ada' }]);
  // The rescans earlier tests' stale reads asked the gateway for have ended (F1's second test ends
  // on one nobody waits for; before afterRescan waited, one queued behind another could still run):
  // the schema below is created after every scan, so no scan can record it (that case is H3).
  await env.gateway.rescansIdle();
  await admin.query(`CREATE SCHEMA ${me}; GRANT USAGE ON SCHEMA ${me} TO ${me};
    CREATE FUNCTION ${me}.lower(varchar) RETURNS text LANGUAGE sql STABLE AS $$ SELECT 'shadow' $$`);
  try {
    expect(await outcome('SELECT lower(n) AS u1 FROM names')).toEqual([{ u1: 'ada' }]);
  } finally {
    await admin.query(`DROP SCHEMA ${me} CASCADE`);
  }
});

test('H2: ORDER BY, DISTINCT and GROUP BY use the default opclass, not a `<`/`=` created on the path after the scan', async () => {
  await admin.query("INSERT INTO names VALUES ('Bea', 'busy'), ('Ada', 'busy')");
  try {
    expect(await settled('SELECT n AS o0 FROM names ORDER BY n DESC')).toEqual([{ o0: 'Bea' }, { o0: 'Ada' }, { o0: 'Ada' }]);
    await admin.query(`
      CREATE FUNCTION public.never(varchar, varchar) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$ SELECT 1 / 0 = 1 $$;
      CREATE OPERATOR public.< (leftarg = varchar, rightarg = varchar, function = public.never);
      CREATE OPERATOR public.= (leftarg = varchar, rightarg = varchar, function = public.never)`);
    try {
      // Either the guard trips (the analysis names the operators) or the built-ins ran: never the new code (1/0, statement_failed).
      expect([STALE, [{ o1: 'Bea' }, { o1: 'Ada' }, { o1: 'Ada' }]]).toContainEqual(await outcome('SELECT n AS o1 FROM names ORDER BY n DESC'));
      expect([STALE, [{ o2: 'Ada' }, { o2: 'Bea' }]]).toContainEqual(await outcome('SELECT DISTINCT n AS o2 FROM names ORDER BY 1'));
      expect([STALE, [{ o3: 'Ada' }, { o3: 'Bea' }]]).toContainEqual(await outcome('SELECT n AS o3 FROM names GROUP BY n ORDER BY 1'));
      expect([STALE, [{ o4: 'Ada' }, { o4: 'Bea' }]]).toContainEqual(await outcome('SELECT n AS o4 FROM names UNION SELECT n FROM names ORDER BY 1'));
    } finally {
      await admin.query('DROP OPERATOR public.< (varchar, varchar); DROP OPERATOR public.= (varchar, varchar); DROP FUNCTION public.never(varchar, varchar)');
    }
  } finally {
    await admin.query("DELETE FROM names WHERE n = 'Bea' OR mood = 'busy'");
  }
});

test('H3 (task flake47, fixed): a scan that saw a "$user" schema dropped right after it: the next read is refused catalog_stale, not counted, and served once the gateway has rescanned', async () => {
  const reader = env.demo.readerRole;
  const me = admin.escapeIdentifier(reader);
  expect(await settled('SELECT n AS p0 FROM names')).toEqual([{ p0: 'Ada' }]);
  await admin.query(`CREATE SCHEMA ${me}; GRANT USAGE ON SCHEMA ${me} TO ${me}`);
  try {
    // A scan overlapping the schema's short life (as a rescan an earlier call caused may).
    await scanSource(env.db, 'chinook');
  } finally {
    await admin.query(`DROP SCHEMA ${me} CASCADE`);
  }
  expect((await loadCatalog(env.db, 'chinook'))?.searchPath).toEqual([reader, 'public']);
  // What the scan's notification does, now rather than whenever it arrives.
  env.gateway.store.invalidate('catalog_snapshots');
  // New reader connections start on the recorded path; the server leaves the dropped schema out of it.
  // Before the fix: {code: 'session_settings_mismatch'} on this and every later read (no rescan came;
  // the fifth opened the circuit).
  expect(await outcome('SELECT n AS p1 FROM names')).toEqual(STALE);
  expect(env.gateway.connectors.states().chinook ?? 'closed').toBe('closed');
  // The gateway rescans on its own; then the read runs on the path the rescan recorded.
  await env.gateway.rescansIdle();
  expect((await loadCatalog(env.db, 'chinook'))?.searchPath).toEqual(['public']);
  expect(await outcome('SELECT n AS p2 FROM names')).toEqual([{ p2: 'Ada' }]);
  expect(env.gateway.connectors.states().chinook ?? 'closed').toBe('closed');
});
