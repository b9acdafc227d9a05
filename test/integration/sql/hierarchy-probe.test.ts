/**
 * The live hierarchy check's standalone probe (src/sources/postgres/hierarchy.ts, issue 23's bench
 * 01 item) against real PostgreSQL: for relations that stand alone only the index-lookup probe is
 * sent, and for every relation, whatever DDL ran (partitions created, attached, detached,
 * inheritance children added or removed, relations dropped), the probed answer equals the full
 * recursive walk's answer, so the probe never hides a tree.
 */
import { Client } from 'pg';
import { createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { HIERARCHY_SQL, standaloneProbeSql, readRelationTrees, type HierarchyRead } from '../../../src/sources/postgres/hierarchy';
import { relationKey, type LiveRelationTree } from '../../../src/sql/hierarchy';
import { qualifySql } from '../../../src/sources/postgres/qualify-sql';
import type { RelationName } from '../../../src/sql/catalog-types';

let db: TempDatabase;
let admin: Client;
let reader: Client;
/** Which of the two queries each read sent, in order. */
let sent: Array<'probe' | 'walk'> = [];

const read: HierarchyRead = async (sql, params) => {
  // Each sent with every name pinned to pg_catalog (red team rt47b J3b).
  sent.push(sql === qualifySql(standaloneProbeSql(params.length / 2)) ? 'probe' : sql === qualifySql(HIERARCHY_SQL) ? 'walk' : (() => { throw new Error('unexpected sql'); })());
  const r = await reader.query({ text: sql, values: params, rowMode: 'array' });
  return { rowsArray: r.rows as unknown[][], truncated: false };
};

const rel = (name: string, schema = 'public'): RelationName => ({ schema, name });

/** Trees with sorted lists, for comparison. */
function normal(m: Map<string, LiveRelationTree>): Record<string, { ancestors: string[]; descendants: string[] }> {
  const out: Record<string, { ancestors: string[]; descendants: string[] }> = {};
  const names = (l: RelationName[]) => l.map((r) => `${r.schema}.${r.name}`).sort();
  for (const [k, t] of m) out[k.replace('\u0000', '.')] = { ancestors: names(t.ancestors), descendants: names(t.descendants) };
  return out;
}

/** Every user relation of the database, plus one that does not exist. */
async function allRelations(): Promise<RelationName[]> {
  const r = await admin.query<{ s: string; n: string }>(
    "SELECT n.nspname AS s, c.relname AS n FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r','p','v','m','f') AND n.nspname NOT IN ('pg_catalog','information_schema') AND n.nspname NOT LIKE 'pg_toast%' ORDER BY 1, 2",
  );
  return [...r.rows.map((x) => rel(x.n, x.s)), rel('gone')];
}

/** The probed answer for every relation equals the walk's answer (the ground truth). */
async function expectProbeEqualsWalk(): Promise<void> {
  const rels = await allRelations();
  for (const r of rels) {
    const probed = await readRelationTrees(read, [r], { probe: true });
    const walked = await readRelationTrees(read, [r], { probe: false });
    expect({ r, tree: normal(probed) }).toEqual({ r, tree: normal(walked) });
  }
  expect(normal(await readRelationTrees(read, rels, { probe: true }))).toEqual(normal(await readRelationTrees(read, rels, { probe: false })));
}

beforeAll(async () => {
  db = await createTempDatabase('hier_probe');
  admin = new Client({ connectionString: db.url });
  reader = new Client({ connectionString: db.url });
  await admin.connect();
  await reader.connect();
  await admin.query(`
    CREATE SCHEMA "Odd";
    CREATE TABLE flat (id int PRIMARY KEY, v text);
    CREATE TABLE "Odd"."Flat T" (id int);
    CREATE TABLE meas (id int, v text) PARTITION BY RANGE (id);
    CREATE TABLE meas_a PARTITION OF meas FOR VALUES FROM (0) TO (100) PARTITION BY LIST (v);
    CREATE TABLE meas_a_x PARTITION OF meas_a FOR VALUES IN ('x');
    CREATE TABLE late (id int, v text);
    CREATE TABLE animal (id int, name text);
    CREATE VIEW flat_v AS SELECT id FROM flat;
  `);
});
beforeEach(() => {
  sent = [];
});
afterAll(async () => {
  await reader?.end();
  await admin?.end();
  await db?.drop();
});

test('relations that stand alone cost one index-lookup probe and no walk', async () => {
  const rels = [rel('flat'), rel('Flat T', 'Odd'), rel('flat_v'), rel('gone'), rel('late')];
  const trees = await readRelationTrees(read, rels, { probe: true });
  expect(sent).toEqual(['probe']);
  expect([...trees.keys()]).toEqual(rels.map((r) => relationKey(r.schema, r.name)));
  for (const t of trees.values()) expect(t).toEqual({ ancestors: [], descendants: [] });
});

test('relations in a tree are walked, and only they', async () => {
  const trees = await readRelationTrees(read, [rel('flat'), rel('meas_a')], { probe: true });
  expect(sent).toEqual(['probe', 'walk']);
  expect(normal(trees)).toEqual({
    'public.flat': { ancestors: [], descendants: [] },
    'public.meas_a': { ancestors: ['public.meas'], descendants: ['public.meas_a_x'] },
  });
  sent = [];
  await readRelationTrees(read, [rel('flat')]);
  expect(sent).toEqual(['walk']);
});

test('a table attached, a child inheriting, a partition created: the probe flags each and the walk sees the change', async () => {
  await admin.query("ALTER TABLE meas ATTACH PARTITION late FOR VALUES FROM (100) TO (200)");
  expect(normal(await readRelationTrees(read, [rel('late')], { probe: true }))).toEqual({ 'public.late': { ancestors: ['public.meas'], descendants: [] } });
  expect(sent).toEqual(['probe', 'walk']);
  sent = [];
  await admin.query('CREATE TABLE cat (lives int) INHERITS (animal)');
  expect(normal(await readRelationTrees(read, [rel('animal')], { probe: true }))).toEqual({ 'public.animal': { ancestors: [], descendants: ['public.cat'] } });
  expect(sent).toEqual(['probe', 'walk']);
  sent = [];
  // A flat table made a child of another by ALTER TABLE … INHERIT: its own pg_inherits row flags it.
  await admin.query('CREATE TABLE dog (id int, name text); ALTER TABLE dog INHERIT animal');
  expect(normal(await readRelationTrees(read, [rel('dog')], { probe: true }))).toEqual({ 'public.dog': { ancestors: ['public.animal'], descendants: [] } });
  expect(sent).toEqual(['probe', 'walk']);
  // A flat table that gains a partition-of child in another schema.
  await admin.query('CREATE TABLE "Odd"."Kid" () INHERITS ("Odd"."Flat T")');
  await expectProbeEqualsWalk();
});

test('after detach, NO INHERIT and DROP the probed answer still equals the walk', async () => {
  await admin.query('ALTER TABLE meas DETACH PARTITION late');
  await admin.query('ALTER TABLE dog NO INHERIT animal');
  await admin.query('DROP TABLE "Odd"."Kid"');
  // A parent keeps relhassubclass until VACUUM notices it has no child: it is walked, and the walk says so.
  sent = [];
  expect(normal(await readRelationTrees(read, [rel('Flat T', 'Odd')], { probe: true }))).toEqual({ 'Odd.Flat T': { ancestors: [], descendants: [] } });
  expect(sent).toEqual(['probe', 'walk']);
  sent = [];
  expect(normal(await readRelationTrees(read, [rel('late'), rel('dog')], { probe: true }))).toEqual({ 'public.late': { ancestors: [], descendants: [] }, 'public.dog': { ancestors: [], descendants: [] } });
  expect(sent).toEqual(['probe']);
  await expectProbeEqualsWalk();
  await admin.query('VACUUM "Odd"."Flat T"');
  await expectProbeEqualsWalk();
});

test('an incomplete or malformed probe answer is an error, never an empty tree', async () => {
  const cut: HierarchyRead = async () => ({ rowsArray: [], truncated: true });
  await expect(readRelationTrees(cut, [rel('flat')], { probe: true })).rejects.toThrow('hierarchy answer incomplete');
  const odd: HierarchyRead = async () => ({ rowsArray: [[1, null]], truncated: false });
  await expect(readRelationTrees(odd, [rel('flat')], { probe: true })).rejects.toThrow('hierarchy answer incomplete');
});
