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
  expect(standaloneGuardSql(2)).toContain('($1::text, $2::text), ($3::text, $4::text)');
  expect(standaloneGuardSql(1)).not.toContain('$3');
  // Past the remembered range it is still built correctly.
  expect(standaloneGuardSql(40)).toContain('($79::text, $80::text)');
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
