/**
 * Red team rt43c: the type guard (task hcast, src/sources/postgres/type-guard.ts) and the write-hook
 * guard (task hhook), through the gateway on a real PostgreSQL source, as an insider owning a type.
 *
 * The insider (CREATE on schema scratch only) owns enum scratch.mood and types built on it; the
 * owner's tables use them. After the scan it creates `CREATE CAST (scratch.mood AS text) WITH
 * FUNCTION scratch.leak(scratch.mood)`, whose function reads the denied staff.ssn as the reader.
 * Findings (were test.failing with the secure expectation; fixed here in type-guard.ts, whose walk
 * of the types an involved one is built on now recurses on the server):
 *  F1 (high) a domain four deep (d4 → d3 → d2 → d1 → mood): the guard's name branch followed three
 *     domain bases, PostgreSQL flattens the domain to mood to find the cast: `'calm'::scratch.d4::text`
 *     returned the denied SSN, no catalog_stale.
 *  F2 (high) a composite type's attribute: `(p).m::text` on a column of scratch.pair (m mood), or
 *     `(ROW('calm')::scratch.pair).m::text`, ran the new cast: neither closeOver nor the name branch
 *     followed composite attributes. The walk now follows domain bases, array elements, range and
 *     multirange subtypes and composite attributes.
 * What held: a cast named directly; a view's stored query (its coercion is bound at CREATE VIEW); a
 * range over the user type (refused function_not_allowed).
 */
import pg from 'pg';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { governAsHrAnalyst } from '../../helpers/hr-analyst';
import { queryOutcome, settledOutcome, startInsider, stopInsider, type Insider } from '../../helpers/stale-reads';

const STALE = { code: 'catalog_stale' };
const SSN = '078-05-1120';

let env: GovernedEnv;
let x: Insider;
let admin: pg.Client;
let insider: pg.Client;

const outcome = (sql: string): Promise<unknown> => queryOutcome(env, sql);
const settled = (sql: string): Promise<unknown> => settledOutcome(env, sql);

/** Creates the leaking cast scratch.mood → text (as the insider, who owns mood), runs `fn`, drops the cast. */
async function withLeakCast<T>(fn: () => Promise<T>): Promise<T> {
  await insider.query(`
    CREATE FUNCTION scratch.leak(scratch.mood) RETURNS text LANGUAGE sql STABLE AS $$ SELECT ssn FROM public.staff LIMIT 1 $$;
    CREATE CAST (scratch.mood AS text) WITH FUNCTION scratch.leak(scratch.mood)`);
  try {
    return await fn();
  } finally {
    await insider.query('DROP CAST (scratch.mood AS text); DROP FUNCTION scratch.leak(scratch.mood)');
  }
}

beforeAll(async () => {
  env = await startGovernedEnv({ config: { rate_limits: { per_identity: { points: 100000, window_seconds: 60 }, per_source: { points: 100000, window_seconds: 60 } } } });
  x = await startInsider(env, 'rt43c');
  ({ admin, insider } = x);
  await insider.query(`
    CREATE TYPE scratch.mood AS ENUM ('calm', 'busy');
    CREATE DOMAIN scratch.d1 AS scratch.mood;
    CREATE DOMAIN scratch.d2 AS scratch.d1;
    CREATE DOMAIN scratch.d3 AS scratch.d2;
    CREATE DOMAIN scratch.d4 AS scratch.d3;
    CREATE TYPE scratch.pair AS (m scratch.mood);
    CREATE TYPE scratch.moods AS RANGE (subtype = scratch.mood);`);
  await admin.query(`
    CREATE TABLE plain (n varchar);
    INSERT INTO plain VALUES ('Ada');
    CREATE TABLE staff (emp_id int PRIMARY KEY, name text, ssn text, salary numeric);
    INSERT INTO staff VALUES (1, 'Ada', '${SSN}', 100);
    CREATE TABLE pairs (p scratch.pair, r scratch.moods);
    INSERT INTO pairs VALUES (ROW('calm'), scratch.moods('calm', 'busy'));
    CREATE VIEW moody AS SELECT n, 'calm'::scratch.mood::text AS m FROM plain;
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${admin.escapeIdentifier(env.demo.readerRole)};`);
  await governAsHrAnalyst(env, 'hr');
}, 120_000);

afterAll(async () => {
  await stopInsider(x, 'DROP VIEW IF EXISTS public.moody; DROP TABLE IF EXISTS public.plain, public.pairs');
  await env?.close();
});

test('baseline: the denied column is denied; the probes answer without the cast', async () => {
  expect(await outcome('SELECT ssn FROM staff')).toEqual({ code: 'source_role_denied' });
  expect(await settled("SELECT 'calm'::scratch.mood::text AS b0")).toEqual([{ b0: 'calm' }]);
  expect(await settled("SELECT 'calm'::scratch.d4::text AS b1")).toEqual([{ b1: 'calm' }]);
  expect(await settled('SELECT n AS b2, m AS b3 FROM moody')).toEqual([{ b2: 'Ada', b3: 'calm' }]);
});

test('held: a cast on a type the statement names directly trips', async () => {
  expect(await settled("SELECT 'calm'::scratch.mood::text AS h0")).toEqual([{ h0: 'calm' }]);
  const got = await withLeakCast(() => outcome("SELECT 'calm'::scratch.mood::text AS h1"));
  expect(got).toEqual(STALE);
});

test('F1 (high, fixed here): a cast on a type four domains deep under a named domain trips (the name branch followed only three bases)', async () => {
  expect(await settled("SELECT 'calm'::scratch.d4::text AS g0")).toEqual([{ g0: 'calm' }]);
  const got = await withLeakCast(() => outcome("SELECT 'calm'::scratch.d4::text AS g1"));
  // Seen before the fix: [{ g1: '078-05-1120' }] — the denied SSN, no catalog_stale.
  expect(got).toEqual(STALE);
});

test('held: a view whose stored query casts through the type bound its coercion at CREATE VIEW; a later cast does not run', async () => {
  expect(await settled('SELECT n AS v0, m AS v1 FROM moody')).toEqual([{ v0: 'Ada', v1: 'calm' }]);
  const got = await withLeakCast(() => outcome('SELECT n AS v2, m AS v3 FROM moody'));
  expect(got).toEqual([{ v2: 'Ada', v3: 'calm' }]);
});

test('F2 (high, fixed here): a cast on a type reached only as an attribute of a column\'s composite type trips', async () => {
  expect(await settled('SELECT (p).m::text AS c0 FROM pairs')).toEqual([{ c0: 'calm' }]);
  const got = await withLeakCast(() => outcome('SELECT (p).m::text AS c1 FROM pairs'));
  // Seen before the fix: [{ c1: '078-05-1120' }].
  expect(got).toEqual(STALE);
});

test('held: a range over the user type is refused before it runs (function_not_allowed), with or without the cast', async () => {
  expect(await outcome('SELECT upper(r)::text AS r0 FROM pairs')).toEqual({ code: 'function_not_allowed' });
  const got = await withLeakCast(() => outcome('SELECT upper(r)::text AS r1 FROM pairs'));
  expect(got).toEqual({ code: 'function_not_allowed' });
});

test('F2 (named): a cast on an attribute type of a composite the statement names trips', async () => {
  expect(await settled("SELECT (ROW('calm')::scratch.pair).m::text AS n0")).toEqual([{ n0: 'calm' }]);
  const got = await withLeakCast(() => outcome("SELECT (ROW('calm')::scratch.pair).m::text AS n1"));
  expect(got).toEqual(STALE);
});
