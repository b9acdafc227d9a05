/**
 * Task hs (red team rt42c's open item): functions whose result is a relation's row type or a
 * composite type, and function bodies reading a relation whole, against a column (or attribute)
 * added after the catalogue scan, on real PostgreSQL 15 through the governed pipeline.
 *
 * Set-up: table `crew(crew_id, name)`; LANGUAGE sql functions `crew_all() RETURNS SETOF crew`,
 * `crew_one(int) RETURNS crew`, `crew_txt(int) RETURNS text` (`SELECT c::text FROM crew c …`),
 * `crew_out(OUT x crew)`, `crew_tab() RETURNS TABLE (crew_id, name)`; a trusted plpgsql
 * `crew_pl() RETURNS SETOF crew`; a view `crew_view AS SELECT crew_one(1) AS r`. Composite type
 * `badge(code, level)`, domain `badge_d` over it, table `post(post_id, b badge)`, functions
 * `post_badges() RETURNS SETOF badge` and `post_badges_d() RETURNS SETOF badge_d`. Identity
 * `hs-deny`: read public.*, deny public.crew.secret (named before it exists); `hs-mask`: read
 * public.*, crew.name and post.b masked (full).
 *
 * What leaked on main (08d9d04) once `ALTER TABLE crew ADD COLUMN secret text DEFAULT 'S3CRET'` ran
 * after the scan (no rescan), to `hs-deny`, whose role denies that column by name:
 *  - `SELECT crew_one(1)`, `SELECT crew_all()`, `SELECT crew_pl()` → `(1,Ann,S3CRET)`;
 *    `SELECT to_jsonb(crew_one(1))`, `SELECT row_to_json(c) FROM crew_pl() c` → `"secret": "S3CRET"`;
 *  - through the view: `SELECT r FROM crew_view` → `(1,Ann,S3CRET)`;
 *  - a function body reading the row whole: `SELECT crew_txt(1)` → `(1,Ann,S3CRET)` (the body's
 *    relations were checked against the scanned columns only);
 *  - `SELECT * FROM crew_all()` did not leak: 08-redact's column check (rt42 G2) refuses a result
 *    whose columns differ from the analysis (here the backend even returned the old two columns);
 *  - after a rescan, the trusted `crew_pl` still served the denied column (`SELECT * FROM crew_pl()`
 *    → `secret: S3CRET`) and, to `hs-mask`, crew.name unmasked (`Ann`): a function's result columns
 *    carried no lineage, and a trusted function's reads are not checked.
 * Fixed: the scan records each function's result row type (`CatalogFunction.resultRowTypes`: a
 * relation's or a stand-alone composite type's, through domains) and the composite types'
 * attributes (`SourceCatalog.compositeTypes`); a call records that type in `rowShapes` (the shape
 * guard trips: `catalog_stale`, rescan), reads the relation whole, and its FROM columns and value carry
 * the relation's columns (denies and masks hold); the relations a user function's body reads are
 * in `rowShapes` too.
 *
 * Composite columns: `ALTER TYPE badge ADD ATTRIBUTE note` changes no relation's columns (`post.b`
 * is still `badge`); the value of `b` carries the attribute, which is correct (a policy governs `b`
 * as one column: a mask on it masks all of it). A function returning `badge` rows is refused
 * `catalog_stale` until the rescan, then answers the live columns.
 */
import pg from 'pg';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { leaks, NO_LIMITS, statementsAgent, type AttackEnv } from './harness';
import { scanSource } from '../../../src/control/scan';
import { loadCatalog, saveCatalog } from '../../../src/control/catalog';
import { updateSource } from '../../../src/control/sources';
import { addPolicy } from '../../../src/control/policies';
import type { SourceCatalog } from '../../../src/sql/catalog-types';

let env: GovernedEnv;
let admin: pg.Client;
let denyKey = '';
let maskKey = '';

/** What one interlock_query call answered: the refusal's code or the rows; `raw` the whole body's text. */
async function outcome(sql: string, key: string): Promise<{ code?: string; rows?: unknown[]; raw: string }> {
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql }, key);
  expect(r.status).toBe(200);
  const res = r.body.result;
  const raw = JSON.stringify(r.body);
  if (res.isError) return { code: res.structuredContent.code, raw };
  return { rows: res.structuredContent.rows, raw };
}

/** The answer without its raw text. */
async function answer(sql: string, key: string): Promise<unknown> {
  const { raw: _raw, ...rest } = await outcome(sql, key);
  return rest;
}

/** Rescans the source as an operator would and drops the gateway's cached snapshot. */
async function rescan(): Promise<void> {
  await scanSource(env.db, 'chinook');
  env.gateway.store.invalidate('*');
}

/**
 * The answer while the gateway still holds `old` (the snapshot scanned before the change): saved
 * again as the newest scan before the call, so a background rescan started by an earlier
 * `catalog_stale` (which began before this save) cannot replace it in between.
 */
async function answerOn(old: SourceCatalog, sql: string, key: string): Promise<{ code?: string; rows?: unknown[]; raw: string }> {
  expect(await saveCatalog(env.db, 'chinook', { ...old, scannedAt: new Date().toISOString() })).toBe(true);
  env.gateway.store.invalidate('*');
  return outcome(sql, key);
}

beforeAll(async () => {
  env = await startGovernedEnv({ config: { ...NO_LIMITS, cache: { ttl_ms: 0 } } as never });
  admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
  const reader = admin.escapeIdentifier(env.demo.readerRole);
  await admin.query(`
    SET search_path = public;
    CREATE TABLE crew (crew_id int PRIMARY KEY, name text);
    INSERT INTO crew VALUES (1, 'Ann');
    CREATE FUNCTION crew_all() RETURNS SETOF crew LANGUAGE sql STABLE AS 'SELECT * FROM crew';
    CREATE FUNCTION crew_one(i int) RETURNS crew LANGUAGE sql STABLE AS 'SELECT * FROM crew WHERE crew_id = i';
    CREATE FUNCTION crew_txt(i int) RETURNS text LANGUAGE sql STABLE AS 'SELECT c::text FROM crew c WHERE crew_id = i';
    CREATE FUNCTION crew_out(OUT x crew) RETURNS SETOF crew LANGUAGE sql STABLE AS 'SELECT * FROM crew';
    CREATE FUNCTION crew_tab() RETURNS TABLE (crew_id int, name text) LANGUAGE sql STABLE AS 'SELECT crew_id, name FROM crew';
    CREATE FUNCTION crew_pl() RETURNS SETOF crew LANGUAGE plpgsql STABLE AS $$BEGIN RETURN QUERY SELECT * FROM crew; END$$;
    CREATE VIEW crew_view AS SELECT crew_one(1) AS r;
    CREATE TYPE badge AS (code text, level int);
    CREATE DOMAIN badge_d AS badge;
    CREATE TABLE post (post_id int PRIMARY KEY, b badge);
    INSERT INTO post VALUES (1, ROW('B1', 2));
    CREATE FUNCTION post_badges() RETURNS SETOF badge LANGUAGE sql STABLE AS 'SELECT b FROM post';
    CREATE FUNCTION post_badges_d() RETURNS SETOF badge_d LANGUAGE sql STABLE AS 'SELECT b::badge_d FROM post';
    GRANT SELECT ON crew, post, crew_view TO ${reader};`);
  await updateSource(env.db, 'chinook', { settings: { trusted_functions: ['public.crew_pl'] } }, { operator: 'test' });
  await rescan();
  denyKey = await statementsAgent({ env } as AttackEnv, 'hs-deny', [
    { effect: 'allow', action: 'read', resource: 'public.*' },
    { effect: 'deny', action: 'read', resource: 'public.crew.secret' },
  ]);
  maskKey = await statementsAgent({ env } as AttackEnv, 'hs-mask', [{ effect: 'allow', action: 'read', resource: 'public.*' }]);
  await addPolicy(env.db, { name: 'hs-mask', applies_to: { identities: ['hs-mask'] }, rule: { type: 'mask_columns', columns: ['public.crew.name', 'public.post.b'], method: 'full' } });
  env.gateway.store.invalidate('*');
}, 120_000);

afterAll(async () => {
  await admin?.end();
  await env?.close();
});

/** Every form that returns crew's row, and the answer each gave before any change (as on main). */
const CREW_FORMS: Array<[string, unknown]> = [
  ['SELECT * FROM crew_all()', { rows: [{ crew_id: 1, name: 'Ann' }] }],
  ['SELECT crew_all() AS r', { rows: [{ r: '(1,Ann)' }] }],
  ['SELECT c FROM crew_all() c', { rows: [{ c: '(1,Ann)' }] }],
  ['SELECT row_to_json(c) AS j FROM crew_all() c', { rows: [{ j: { crew_id: 1, name: 'Ann' } }] }],
  ['SELECT * FROM crew_one(1)', { rows: [{ crew_id: 1, name: 'Ann' }] }],
  ['SELECT crew_one(1) AS r', { rows: [{ r: '(1,Ann)' }] }],
  ['SELECT (crew_one(1)).name AS n', { rows: [{ n: 'Ann' }] }],
  ['SELECT to_jsonb(crew_one(1)) AS j', { rows: [{ j: { crew_id: 1, name: 'Ann' } }] }],
  ['SELECT crew_txt(1) AS t', { rows: [{ t: '(1,Ann)' }] }],
  ['SELECT * FROM crew_tab()', { rows: [{ crew_id: 1, name: 'Ann' }] }],
  ['SELECT * FROM crew_pl()', { rows: [{ crew_id: 1, name: 'Ann' }] }],
  ['SELECT crew_id FROM crew_pl()', { rows: [{ crew_id: 1 }] }],
  ['SELECT crew_pl() AS r', { rows: [{ r: '(1,Ann)' }] }],
  ['SELECT row_to_json(c) AS j FROM crew_pl() c', { rows: [{ j: { crew_id: 1, name: 'Ann' } }] }],
  ['SELECT r FROM crew_view', { rows: [{ r: '(1,Ann)' }] }],
];

describe('(3) nothing changed since the scan', () => {
  test('every form is answered as before (hs-deny)', async () => {
    for (const [sql, before] of CREW_FORMS) expect([sql, await answer(sql, denyKey)]).toEqual([sql, before]);
    expect(await answer('SELECT b FROM post', denyKey)).toEqual({ rows: [{ b: '(B1,2)' }] });
    expect(await answer('SELECT * FROM post_badges()', denyKey)).toEqual({ rows: [{ code: 'B1', level: 2 }] });
    expect(await answer('SELECT post_badges() AS r', denyKey)).toEqual({ rows: [{ r: '(B1,2)' }] });
    expect(await answer('SELECT post_badges_d() AS r', denyKey)).toEqual({ rows: [{ r: '(B1,2)' }] });
  });

  test('masks: analysable functions reading a masked column stay refused; a masked relation column stays masked', async () => {
    for (const sql of ['SELECT * FROM crew_all()', 'SELECT crew_one(1) AS r', 'SELECT crew_txt(1) AS t', 'SELECT * FROM crew_tab()', 'SELECT * FROM post_badges()']) {
      expect([sql, await answer(sql, maskKey)]).toEqual([sql, { code: 'policy_denied' }]);
    }
    expect(await answer('SELECT r FROM crew_view', maskKey)).toEqual({ rows: [{ r: '***' }] });
    expect(await answer('SELECT b FROM post', maskKey)).toEqual({ rows: [{ b: '***' }] });
    expect(await answer('SELECT crew_id FROM crew_pl()', maskKey)).toEqual({ rows: [{ crew_id: 1 }] });
  });

  test('stricter or newly answered (task hs): the trusted function’s columns carry the table’s masks; domain and OUT row results expand', async () => {
    // main: {crew_id: 1, name: 'Ann'}, {r: '(1,Ann)'} and {j: {…, name: 'Ann'}}: crew.name unmasked.
    expect(await answer('SELECT * FROM crew_pl()', maskKey)).toEqual({ rows: [{ crew_id: 1, name: '***' }] });
    expect(await answer('SELECT crew_pl() AS r', maskKey)).toEqual({ rows: [{ r: '***' }] });
    expect(await answer('SELECT row_to_json(c) AS j FROM crew_pl() c', maskKey)).toEqual({ code: 'policy_denied' });
    // main: source_role_denied (the scan named one column after the function or the OUT parameter).
    expect(await answer('SELECT * FROM post_badges_d()', denyKey)).toEqual({ rows: [{ code: 'B1', level: 2 }] });
    expect(await answer('SELECT * FROM crew_out()', denyKey)).toEqual({ rows: [{ crew_id: 1, name: 'Ann' }] });
  });
});

describe('(1) a column added to the table after the scan', () => {
  let old: SourceCatalog;
  beforeAll(async () => {
    old = (await loadCatalog(env.db, 'chinook'))!;
    await admin.query("ALTER TABLE crew ADD COLUMN secret text DEFAULT 'S3CRET'");
  });
  afterAll(async () => {
    await admin.query('ALTER TABLE crew DROP COLUMN IF EXISTS secret');
    await rescan();
  });

  test('every form is refused catalog_stale and no answer carries the new column’s value', async () => {
    for (const [sql] of [...CREW_FORMS, ['SELECT * FROM crew_out()']]) {
      const got = await answerOn(old, sql, denyKey);
      // main (hs-deny): crew_one(1), crew_all(), crew_pl() as values, to_jsonb(crew_one(1)),
      // row_to_json(c) FROM crew_pl() c, crew_txt(1) and crew_view answered S3CRET.
      expect([sql, leaks(got.raw, 'S3CRET'), got.code]).toEqual([sql, false, 'catalog_stale']);
    }
    // hs-mask: the trusted function's forms (the analysable ones stay refused policy_denied first).
    for (const sql of ['SELECT * FROM crew_pl()', 'SELECT crew_id FROM crew_pl()', 'SELECT crew_pl() AS r']) {
      const got = await answerOn(old, sql, maskKey);
      expect([sql, leaks(got.raw, 'S3CRET'), got.code]).toEqual([sql, false, 'catalog_stale']);
    }
  });

  test('rescanned: the denied column refuses every form, the trusted function included', async () => {
    await rescan();
    for (const [sql] of CREW_FORMS) {
      const got = await outcome(sql, denyKey);
      expect([sql, leaks(got.raw, 'S3CRET'), got.code]).toEqual([sql, false, 'source_role_denied']);
    }
    // hs-mask may read secret (no deny, no mask on it): its masked name stays masked.
    expect(await answer('SELECT * FROM crew_pl()', maskKey)).toEqual({ rows: [{ crew_id: 1, name: '***', secret: 'S3CRET' }] });
  });
});

describe('(2) an attribute added to a composite type after the scan', () => {
  let old: SourceCatalog;
  beforeAll(async () => {
    old = (await loadCatalog(env.db, 'chinook'))!;
    await admin.query("ALTER TYPE badge ADD ATTRIBUTE note text; UPDATE post SET b.note = 'ATTR-NOTE'");
  });

  test('functions returning the type are refused catalog_stale; the composite column is answered as the value it is', async () => {
    for (const sql of ['SELECT * FROM post_badges()', 'SELECT post_badges() AS r', 'SELECT * FROM post_badges_d()', 'SELECT post_badges_d() AS r']) {
      const got = await answerOn(old, sql, denyKey);
      expect([sql, got.code, leaks(got.raw, 'ATTR-NOTE')]).toEqual([sql, 'catalog_stale', false]);
    }
    // post.b is one column whose type is unchanged: the caller may read it, so its whole value
    // (the new attribute included) is the answer; a mask on it masks all of it.
    expect(await answerOn(old, 'SELECT b FROM post', denyKey).then(({ raw: _r, ...a }) => a)).toEqual({ rows: [{ b: '(B1,2,ATTR-NOTE)' }] });
    expect(await answerOn(old, 'SELECT b FROM post', maskKey).then(({ raw: _r, ...a }) => a)).toEqual({ rows: [{ b: '***' }] });
    expect(await answerOn(old, '(SELECT (b).note FROM post)', maskKey).then(({ raw: _r, ...a }) => a)).toEqual({ code: 'policy_denied' });
  });

  test('rescanned: the live attributes are the analysed ones', async () => {
    await rescan();
    const cat = (await loadCatalog(env.db, 'chinook'))!;
    expect(cat.compositeTypes?.find((t) => t.name === 'badge')).toEqual({ schema: 'public', name: 'badge', columns: [{ name: 'code', dataType: 'text' }, { name: 'level', dataType: 'integer' }, { name: 'note', dataType: 'text' }] });
    expect(cat.functions.find((f) => f.schema === 'public' && f.name === 'post_badges_d')).toMatchObject({ outColumns: ['code', 'level', 'note'], resultRowTypes: [{ schema: 'public', name: 'badge' }] });
    // A statement text not prepared before the change (a backend keeps an inlined plan of the old shape).
    expect(await answer('SELECT pb.* FROM post_badges() AS pb', denyKey)).toEqual({ rows: [{ code: 'B1', level: 2, note: 'ATTR-NOTE' }] });
  });
});
