/**
 * A read's guard (portal-read.ts ReadGuard; issue 23, bench 01): the live hierarchy probe run in
 * the read's own round trip. When every named relation stands alone the statement runs and
 * answers as usual; when one sits in a tree the server raises in the guard and never executes the
 * statement (the read resolves with `guardTripped` and no rows); both statements stay prepared on
 * the connection, so later reads neither parse nor plan them again.
 */
import { PostgresSourceConnector } from '../../../src/sources/postgres/connector';
import { standaloneGuard, standaloneGuardSql } from '../../../src/sources/postgres/hierarchy';
import { createSourceDb, type SourceDb } from './source-db';

const BIG = { maxRows: 1000, maxBytes: 10_000_000 };
let src: SourceDb;
let c: PostgresSourceConnector;

beforeAll(async () => {
  src = await createSourceDb('read_guard', {
    extraSql: `CREATE TABLE flat (id int); INSERT INTO flat VALUES (1), (2);
      CREATE TABLE parent (id int) PARTITION BY RANGE (id); CREATE TABLE part PARTITION OF parent FOR VALUES FROM (0) TO (10);
      CREATE TABLE base (id int); CREATE TABLE child () INHERITS (base);`,
  });
  await src.admin.query(`GRANT SELECT ON flat, parent, part, base, child TO ${src.readerRole}`);
  c = new PostgresSourceConnector('guarded', src.settings({ pool_size: 1, max_concurrent_per_identity: 1 }));
});
afterAll(async () => {
  await c?.close();
  await src?.drop();
});

const rel = (name: string) => ({ schema: 'public', name });

test('a passing guard lets the statement run and answer as usual', async () => {
  const r = await c.read('SELECT id FROM flat ORDER BY id', [], { ...BIG, guard: standaloneGuard([rel('flat'), rel('track')]) });
  expect(r.guardTripped).toBeUndefined();
  expect(r.rowsArray).toEqual([[1], [2]]);
  expect(r.truncated).toBe(false);
});

test('a relation in a tree trips the guard and the statement is never executed', async () => {
  for (const name of ['part', 'parent', 'child', 'base']) {
    // The statement would fail with 22P02 if it ran; the guard's 22012 comes first and the server skips it.
    const r = await c.read("SELECT 'not a number'::int AS x", [], { ...BIG, guard: standaloneGuard([rel('flat'), rel(name)]) });
    expect({ name, tripped: r.guardTripped, rows: r.rowsArray, fields: r.fields }).toEqual({ name, tripped: true, rows: [], fields: [] });
  }
  // The connection is clean afterwards: the next read (same single connection) works.
  expect((await c.read('SELECT 41 + 1 AS n', [], BIG)).rowsArray).toEqual([[42]]);
});

test('a same-named relation in a tree in another schema does not trip the guard; the named one still does (task h28g)', async () => {
  await src.admin.query(`CREATE SCHEMA other; CREATE TABLE other.flat (id int) PARTITION BY RANGE (id); CREATE TABLE other.flat_1 PARTITION OF other.flat FOR VALUES FROM (0) TO (10);
    CREATE TABLE other.parent (id int)`);
  try {
    // public.flat stands alone: other.flat's tree is not its (before task h28g the plan tested the CASE on every pg_class row named flat).
    for (let i = 0; i < 8; i++) {
      const r = await c.read('SELECT id FROM flat ORDER BY id', [], { ...BIG, guard: standaloneGuard([rel('flat')]) });
      expect({ i, tripped: r.guardTripped, rows: r.rowsArray }).toEqual({ i, tripped: undefined, rows: [[1], [2]] });
    }
    const named = await c.read("SELECT 'not a number'::int AS x", [], { ...BIG, guard: standaloneGuard([{ schema: 'other', name: 'flat' }]) });
    expect(named.guardTripped).toBe(true);
    // And the other way round: other.parent stands alone beside public.parent's tree.
    const r = await c.read('SELECT 1 AS one', [], { ...BIG, guard: standaloneGuard([{ schema: 'other', name: 'parent' }, rel('flat')]) });
    expect({ tripped: r.guardTripped, rows: r.rowsArray }).toEqual({ tripped: undefined, rows: [[1]] });
  } finally {
    await src.admin.query('DROP SCHEMA other CASCADE');
  }
});

test('schemas are looked up by name when the guard runs: a quoted name, and a schema renamed with a tree made under its old name (task h28g)', async () => {
  await src.admin.query(`CREATE SCHEMA "Odd.S"; CREATE TABLE "Odd.S"."T" (id int); CREATE SCHEMA s_old; CREATE TABLE s_old.t (id int)`);
  try {
    const g = standaloneGuard([{ schema: 'Odd.S', name: 'T' }, { schema: 's_old', name: 't' }]);
    expect((await c.read('SELECT 1 AS one', [], { ...BIG, guard: g })).rowsArray).toEqual([[1]]);
    await src.admin.query('ALTER SCHEMA s_old RENAME TO s_moved; CREATE SCHEMA s_old; CREATE TABLE s_old.t (id int) PARTITION BY RANGE (id); CREATE TABLE s_old.t_1 PARTITION OF s_old.t FOR VALUES FROM (0) TO (10)');
    expect((await c.read("SELECT 'not a number'::int AS x", [], { ...BIG, guard: g })).guardTripped).toBe(true);
    await src.admin.query('DROP SCHEMA s_old CASCADE; CREATE TABLE "Odd.S"."Kid" () INHERITS ("Odd.S"."T")');
    expect((await c.read("SELECT 'not a number'::int AS x", [], { ...BIG, guard: g })).guardTripped).toBe(true);
  } finally {
    await src.admin.query('DROP SCHEMA "Odd.S" CASCADE; DROP SCHEMA IF EXISTS s_old CASCADE; DROP SCHEMA IF EXISTS s_moved CASCADE');
  }
});

test("a statement error after a passing guard is the statement's own error, not a tripped guard", async () => {
  await expect(c.read('SELECT 1 / (id - id) FROM flat', [], { ...BIG, guard: standaloneGuard([rel('flat')]) })).rejects.toMatchObject({ code: 'execution_failed', sqlState: '22012' });
});

test('guard and statement stay prepared on the connection', async () => {
  await c.read('SELECT count(*) AS n FROM flat', [], { ...BIG, guard: standaloneGuard([rel('flat')]) });
  await c.read('SELECT count(*) AS n FROM flat', [], { ...BIG, guard: standaloneGuard([rel('flat')]) });
  const r = await c.read('SELECT statement FROM pg_prepared_statements ORDER BY prepare_time', [], BIG);
  const texts = r.rowsArray.map((x) => x[0] as string);
  expect(texts.filter((t) => t === standaloneGuardSql(1))).toHaveLength(1);
  expect(texts.filter((t) => t === standaloneGuardSql(2))).toHaveLength(1);
  expect(texts.filter((t) => t === 'SELECT count(*) AS n FROM flat')).toHaveLength(1);
});

test('the guard text is one shared string per relation count, the same text as built afresh (issue 28 item 3)', () => {
  expect(standaloneGuardSql(2)).toBe(standaloneGuardSql(2));
  // Types pinned to pg_catalog (red team rt47b J3b).
  expect(standaloneGuardSql(2)).toContain('($1::pg_catalog.text, $2::pg_catalog.text), ($3::pg_catalog.text, $4::pg_catalog.text)');
  expect(standaloneGuardSql(1)).not.toContain('$3');
  // Past the remembered range it is still built correctly.
  expect(standaloneGuardSql(40)).toContain('($79::pg_catalog.text, $80::pg_catalog.text)');
  expect(standaloneGuard([{ schema: 'public', name: 'flat' }]).text).toBe(standaloneGuardSql(1));
});

test('the guard of one relations array is made once, frozen, with each relation as (schema, name) in order (issue 28 item 3)', () => {
  const rels = [{ schema: 'public', name: 'flat' }, { schema: 's2', name: 'base' }];
  const g = standaloneGuard(rels);
  expect(standaloneGuard(rels)).toBe(g);
  expect(g).toEqual({ text: standaloneGuardSql(2), values: ['public', 'flat', 's2', 'base'] });
  expect(Object.isFrozen(g) && Object.isFrozen(g.values)).toBe(true);
  // Another array with the same relations gets an equal guard of its own.
  expect(standaloneGuard([...rels])).not.toBe(g);
  expect(standaloneGuard([...rels])).toEqual(g);
});
