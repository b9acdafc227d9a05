/**
 * A read carrying both the function guard and the hierarchy guard (issue 28, task h28f) sends them
 * as one statement (portal-read.ts mergedGuard): one Bind/Execute fewer per read. The outcomes are
 * the ones of the two sent apart: a function-guard trip resolves `functionsChanged`, a hierarchy
 * trip `guardTripped`, both at once `functionsChanged` (the function guard ran first), the statement
 * never executed in any of them; both passing run the statement.
 */
import { PostgresSourceConnector } from '../../../src/sources/postgres/connector';
import { standaloneGuard } from '../../../src/sources/postgres/hierarchy';
import { mergedGuard, type ReadGuard } from '../../../src/sources/postgres/portal-read';
import { createSourceDb, type SourceDb } from './source-db';

const BIG = { maxRows: 1000, maxBytes: 10_000_000 };
let src: SourceDb;
let c: PostgresSourceConnector;

/** A stand-in for the function guard: no rows for 'ok', 22012 for anything else (the division runs only then). */
const FN_TEXT = "SELECT 1 FROM (VALUES ($1::text)) AS u(v) WHERE CASE WHEN u.v <> 'ok' THEN 1 / (pg_catalog.length(u.v) * 0) = 1 ELSE false END";
const fnPass: ReadGuard = Object.freeze({ text: FN_TEXT, values: Object.freeze(['ok']) as string[] });
const fnTrip: ReadGuard = Object.freeze({ text: FN_TEXT, values: Object.freeze(['changed']) as string[] });
const rel = (name: string) => ({ schema: 'public', name });
const flatGuard = standaloneGuard([rel('flat')]);
const partGuard = standaloneGuard([rel('flat'), rel('part')]);

beforeAll(async () => {
  src = await createSourceDb('merged_guard', {
    extraSql: `CREATE TABLE flat (id int); INSERT INTO flat VALUES (1), (2);
      CREATE TABLE parent (id int) PARTITION BY RANGE (id); CREATE TABLE part PARTITION OF parent FOR VALUES FROM (0) TO (10);`,
  });
  await src.admin.query(`GRANT SELECT ON flat, parent, part TO ${src.readerRole}`);
  c = new PostgresSourceConnector('merged', src.settings({ pool_size: 1, max_concurrent_per_identity: 1 }));
});
afterAll(async () => {
  await c?.close();
  await src?.drop();
});

test('both guards passing: the statement runs, and the connection prepared the merged guard only (one statement, not two)', async () => {
  const r = await c.read('SELECT id FROM flat ORDER BY id', [], { ...BIG, functionGuard: fnPass, guard: flatGuard });
  expect({ rows: r.rowsArray, tripped: r.guardTripped, changed: r.functionsChanged }).toEqual({ rows: [[1], [2]], tripped: undefined, changed: undefined });
  const texts = (await c.read('SELECT statement FROM pg_catalog.pg_prepared_statements', [], BIG)).rowsArray.map((x) => x[0] as string);
  expect(texts).toContain(mergedGuard(fnPass, flatGuard)!.text);
  expect(texts.filter((t) => t === FN_TEXT || t === flatGuard.text)).toEqual([]);
});

test.each([
  ['the function guard trips', fnTrip, flatGuard, { tripped: undefined, changed: true }],
  ['the hierarchy guard trips', fnPass, partGuard, { tripped: true, changed: undefined }],
  ['both trip: the function guard, first as before', fnTrip, partGuard, { tripped: undefined, changed: true }],
])('%s: the same outcome as the two sent apart, the statement not executed, the connection clean', async (_name, fn, guard, want) => {
  // The statement would fail with 22P02 if it ran.
  const r = await c.read("SELECT 'not a number'::int AS x", [], { ...BIG, functionGuard: fn, guard });
  expect({ tripped: r.guardTripped, changed: r.functionsChanged, rows: r.rowsArray, fields: r.fields }).toEqual({ ...want, rows: [], fields: [] });
  expect((await c.read('SELECT 41 + 1 AS n', [], BIG)).rowsArray).toEqual([[42]]);
});

test("a statement error after the merged guard passed is the statement's own error", async () => {
  await expect(c.read('SELECT 1 / (id - id) FROM flat', [], { ...BIG, functionGuard: fnPass, guard: flatGuard })).rejects.toMatchObject({ code: 'execution_failed', sqlState: '22012' });
});

test("mergedGuard: the guard's parameters renumbered after the function guard's, values in order, one frozen object per pair; apart when renumbering is unsound", () => {
  const m = mergedGuard(fnPass, partGuard)!;
  expect(m.text).toBe(`${FN_TEXT}\nUNION ALL\n${partGuard.text.replace('$1::text, $2::text', '$2::text, $3::text').replace('$3::text, $4::text)', '$4::text, $5::text)')}`);
  expect(m.text.split('UNION ALL')[1]).not.toMatch(/\$1::text/);
  expect(m.values).toEqual(['ok', 'public', 'flat', 'public', 'part']);
  expect(mergedGuard(fnPass, partGuard)).toBe(m);
  expect(Object.isFrozen(m) && Object.isFrozen(m.values)).toBe(true);
  expect(mergedGuard(fnPass, { text: "SELECT 1 WHERE $1 = 'x'", values: ['y'] })).toBeNull();
  expect(mergedGuard(fnPass, { text: 'SELECT 1 -- $1', values: [] })).toBeNull();
});
