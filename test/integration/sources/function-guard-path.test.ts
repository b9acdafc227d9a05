/**
 * The function guard checks only the schemas PostgreSQL could resolve a name from (task hg2;
 * src/sources/postgres/function-guard.ts), through the gateway on a real PostgreSQL source.
 *
 * Finding (availability, insider): hg1's guard compared the functions and operators of a looked-up
 * name in EVERY schema, so a role with CREATE on any schema, one never on the reader's path
 * included, could create `=`(varchar, varchar) or `lower(varchar)` there over and over and keep every
 * read of that name refused `catalog_stale` and the source rescanning. Now a name the statement looks
 * up unqualified is compared in the reader's pinned path, a qualified one in its schema:
 *  (1) `=` and `lower` created after the scan in a schema off the reader's path by a role with CREATE
 *      only there: reads using them are answered, no rescan;
 *  (2) the same created in a path schema still trips (catalog_stale);
 *  (3) `scratch.f(…)` qualified with an off-path schema: a new overload there trips;
 *  (4) a function moved (SET SCHEMA) from the off-path schema into a path schema trips.
 */
import pg from 'pg';
import pino from 'pino';
import { Writable } from 'node:stream';
import { loadCatalog } from '../../../src/control/catalog';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { governAsHrAnalyst } from '../../helpers/hr-analyst';
import { queryOutcome, settledOutcome, startInsider, stopInsider, type Insider } from '../../helpers/stale-reads';

const STALE = { code: 'catalog_stale' };
const RESCAN_LOG = 'the source is being rescanned';

let env: GovernedEnv;
let admin: pg.Client;
let insider: pg.Client;
let x: Insider;
const logLines: string[] = [];

const outcome = (sql: string): Promise<unknown> => queryOutcome(env, sql);
const settled = (sql: string): Promise<unknown> => settledOutcome(env, sql);

beforeAll(async () => {
  const sink = new Writable({ write(chunk, _enc, cb) { logLines.push(String(chunk)); cb(); } });
  env = await startGovernedEnv({ logger: pino({ level: 'warn' }, sink), config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } } } });
  // An insider: a login role with CREATE on schema scratch only, which is not on the reader's path
  // (the reader has USAGE there, so it could name scratch.f() itself).
  x = await startInsider(env, 'insider');
  ({ admin, insider } = x);
  const reader = admin.escapeIdentifier(env.demo.readerRole);
  await admin.query(`
    SET search_path = public;
    CREATE TABLE names (n varchar);
    INSERT INTO names VALUES ('Ada');
    CREATE FUNCTION twice(int) RETURNS int LANGUAGE sql STABLE AS $$ SELECT $1 * 2 $$;
    -- What the hr-analyst governance names (governAsHrAnalyst).
    CREATE TABLE staff (emp_id int PRIMARY KEY, name text, ssn text, salary numeric);
    CREATE FUNCTION scratch.f(int) RETURNS int LANGUAGE sql STABLE AS $$ SELECT $1 + 1 $$;
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${reader};`);
  await governAsHrAnalyst(env, 'hr');
}, 120_000);

afterAll(async () => {
  await stopInsider(x, 'DROP FUNCTION IF EXISTS public.lower(varchar)');
  await env?.close();
});

test('(1) `=` and `lower` created after the scan off the reader\'s path, by a role with CREATE only there: reads using them are answered, no rescan', async () => {
  const path = (await loadCatalog(env.db, 'chinook'))!.searchPath;
  expect(path).not.toContain('scratch');
  expect(await settled('SELECT lower(n) AS l0 FROM names')).toEqual([{ l0: 'ada' }]);
  const before = (await loadCatalog(env.db, 'chinook'))!.scannedAt;
  const linesBefore = logLines.length;
  // Resolved through the path, these would win over the built-ins for varchar (exact match); off the path PostgreSQL never sees them.
  await insider.query(`
    CREATE FUNCTION scratch.lower(varchar) RETURNS text LANGUAGE sql STABLE AS $$ SELECT 'x' $$;
    CREATE FUNCTION scratch.always(varchar, varchar) RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT true $$;
    CREATE OPERATOR scratch.= (leftarg = varchar, rightarg = varchar, function = scratch.always)`);
  // Over and over: replaced and dropped and created again.
  for (let round = 1; round <= 3; round++) {
    expect(await outcome(`SELECT lower(n) AS l${round} FROM names`)).toEqual([{ [`l${round}`]: 'ada' }]);
    expect(await outcome(`SELECT n AS m${round} FROM names WHERE n = 'nobody'`)).toEqual([]);
    expect(await outcome(`SELECT n AS i${round} FROM names WHERE n IN ('Ada', 'none')`)).toEqual([{ [`i${round}`]: 'Ada' }]);
    await insider.query(`CREATE OR REPLACE FUNCTION scratch.lower(varchar) RETURNS text LANGUAGE sql STABLE AS $$ SELECT 'y${round}' $$;
      DROP OPERATOR scratch.= (varchar, varchar);
      CREATE OPERATOR scratch.= (leftarg = varchar, rightarg = varchar, function = scratch.always)`);
  }
  // No read tripped the guard: the snapshot is the same one, and the gateway logged no rescan.
  expect((await loadCatalog(env.db, 'chinook'))!.scannedAt).toBe(before);
  expect(logLines.slice(linesBefore).filter((l) => l.includes(RESCAN_LOG))).toEqual([]);
});

test('(3) a qualified call scratch.f(…) with scratch off the path: a new overload created there after the scan trips', async () => {
  expect(await settled('SELECT scratch.f(1) AS f1')).toEqual([{ f1: 2 }]);
  await insider.query("CREATE FUNCTION scratch.f(text) RETURNS int LANGUAGE sql STABLE AS $$ SELECT 0 $$");
  try {
    expect(await outcome('SELECT scratch.f(2) AS f2')).toEqual(STALE);
  } finally {
    await insider.query('DROP FUNCTION scratch.f(text)');
  }
});

test('(2) the same `=` and `lower` created in a path schema still trip (catalog_stale)', async () => {
  expect(await settled('SELECT lower(n) AS p0 FROM names')).toEqual([{ p0: 'ada' }]);
  await admin.query(`CREATE FUNCTION public.lower(varchar) RETURNS text LANGUAGE sql STABLE AS $$ SELECT 'shadow' $$`);
  try {
    expect(await outcome('SELECT lower(n) AS p1 FROM names')).toEqual(STALE);
  } finally {
    await admin.query('DROP FUNCTION public.lower(varchar)');
  }
  expect(await settled("SELECT n AS q0 FROM names WHERE n = 'nobody'")).toEqual([]);
  await admin.query(`CREATE FUNCTION public.always2(varchar, varchar) RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT true $$;
    CREATE OPERATOR public.= (leftarg = varchar, rightarg = varchar, function = public.always2)`);
  try {
    expect(await outcome("SELECT n AS q1 FROM names WHERE n = 'nobody'")).toEqual(STALE);
  } finally {
    await admin.query('DROP OPERATOR public.= (varchar, varchar); DROP FUNCTION public.always2(varchar, varchar)');
  }
});

test('(4) a function moved (ALTER FUNCTION … SET SCHEMA) from the off-path schema into a path schema trips', async () => {
  expect(await settled('SELECT twice(3) AS t0')).toEqual([{ t0: 6 }]);
  await insider.query('CREATE FUNCTION scratch.twice(bigint) RETURNS int LANGUAGE sql STABLE AS $$ SELECT 0 $$');
  // Off the path it is not seen (no trip) …
  expect(await outcome('SELECT twice(4) AS t1')).toEqual([{ t1: 8 }]);
  await admin.query('ALTER FUNCTION scratch.twice(bigint) SET SCHEMA public');
  try {
    // … moved into public it is a candidate of twice(…) there: the guard trips.
    expect(await outcome('SELECT twice(5) AS t2')).toEqual(STALE);
  } finally {
    await admin.query('DROP FUNCTION public.twice(bigint)');
  }
});
