/**
 * A read's `settings` (portal-read.ts BIND_SETTINGS_SQL; issue 27, the row-rule attribute values):
 * bound by `set_config(…, true)` in the statement's own round trip and implicit transaction, as
 * bound parameters. The statement (and a row view it reads) sees them; the next read on the same
 * pooled connection never does — after a success, a statement error, a tripped guard, or a cancel.
 */
import { PostgresSourceConnector } from '../../../src/sources/postgres/connector';
import { BIND_SETTINGS_SQL } from '../../../src/sources/postgres/portal-read';
import { standaloneGuard } from '../../../src/sources/postgres/hierarchy';
import { createSourceDb, type SourceDb } from './source-db';

const BIG = { maxRows: 1000, maxBytes: 10_000_000 };
const OWNER = 'interlock.attr.owner';
/** What the next read on the connection reports: its backend and the setting's value. */
const PROBE = `SELECT pg_catalog.pg_backend_pid() AS pid, pg_catalog.current_setting('${OWNER}', true) AS v`;
let src: SourceDb;
let c: PostgresSourceConnector;

beforeAll(async () => {
  src = await createSourceDb('read_settings', {
    chinook: false,
    extraSql: `CREATE TABLE doc (id int PRIMARY KEY, owner text); INSERT INTO doc VALUES (1, 'alice'), (2, 'bob'), (3, 'alice');
      CREATE TABLE part (id int) PARTITION BY RANGE (id); CREATE TABLE part_1 PARTITION OF part FOR VALUES FROM (0) TO (10);
      CREATE VIEW doc_rows WITH (security_barrier = true, security_invoker = true) AS SELECT * FROM doc WHERE owner OPERATOR(pg_catalog.=) pg_catalog.current_setting('${OWNER}', true);`,
  });
  await src.admin.query(`GRANT SELECT ON doc, doc_rows, part, part_1 TO ${src.readerRole}`);
  // One connection: every read below runs on the same backend unless one is dropped.
  c = new PostgresSourceConnector('settings', src.settings({ pool_size: 1, max_concurrent_per_identity: 1 }));
});
afterAll(async () => {
  await c?.close();
  await src?.drop();
});

const bound = (owner: string) => ({ ...BIG, settings: [[OWNER, owner]] as Array<[string, string]> });

test('the statement sees the bound values; the next read on the same connection does not', async () => {
  const first = await c.read(PROBE, [], bound('alice'));
  const pid = first.rowsArray[0][0];
  expect(first.rowsArray).toEqual([[pid, 'alice']]);
  // Transaction-local: gone with the read's implicit transaction (the placeholder reads as '').
  expect((await c.read(PROBE, [], BIG)).rowsArray).toEqual([[pid, '']]);
});

test('a row view filters by the bound value, and reads no rows for the next caller on the connection', async () => {
  expect((await c.read('SELECT id FROM doc_rows ORDER BY id', [], bound('alice'))).rowsArray).toEqual([[1], [3]]);
  expect((await c.read('SELECT id FROM doc_rows ORDER BY id', [], bound('bob'))).rowsArray).toEqual([[2]]);
  expect((await c.read('SELECT id FROM doc_rows ORDER BY id', [], BIG)).rowsArray).toEqual([]);
});

test('values are bound parameters: quotes, braces, commas and backslashes arrive unchanged, several at once', async () => {
  const odd = `O'Brien", {x,y} \\ ); SELECT 1; --`;
  const r = await c.read(
    "SELECT pg_catalog.current_setting('interlock.attr.a', true) AS a, pg_catalog.current_setting('interlock.attrs.b', true) AS b",
    [],
    { ...BIG, settings: [['interlock.attr.a', odd], ['interlock.attrs.b', '{"1","2"}']] },
  );
  expect(r.rowsArray).toEqual([[odd, '{"1","2"}']]);
  // The binding statement is one prepared text with no value in it.
  const prepared = (await c.read('SELECT statement FROM pg_prepared_statements', [], BIG)).rowsArray.map((x) => x[0] as string);
  expect(prepared.filter((t) => t === BIND_SETTINGS_SQL)).toHaveLength(1);
  expect(prepared.some((t) => t.includes('Brien'))).toBe(false);
});

test('after an error mid-statement the values are gone and the connection is kept', async () => {
  const pid = (await c.read(PROBE, [], BIG)).rowsArray[0][0];
  await expect(c.read(`SELECT 1 / (n - 2) FROM pg_catalog.generate_series(1, 3) AS n WHERE pg_catalog.current_setting('${OWNER}', true) = 'alice'`, [], bound('alice'))).rejects.toMatchObject({ code: 'execution_failed', sqlState: '22012' });
  expect((await c.read(PROBE, [], BIG)).rowsArray).toEqual([[pid, '']]);
  expect((await c.read('SELECT id FROM doc_rows', [], BIG)).rowsArray).toEqual([]);
});

test('with a guard: a passing guard lets the statement see the values; a tripped one leaves nothing behind', async () => {
  const ok = await c.read('SELECT id FROM doc_rows ORDER BY id', [], { ...bound('alice'), guard: standaloneGuard([{ schema: 'public', name: 'doc' }]) });
  expect(ok.guardTripped).toBeUndefined();
  expect(ok.rowsArray).toEqual([[1], [3]]);
  const tripped = await c.read('SELECT id FROM doc_rows', [], { ...bound('alice'), guard: standaloneGuard([{ schema: 'public', name: 'part_1' }]) });
  expect({ tripped: tripped.guardTripped, rows: tripped.rowsArray }).toEqual({ tripped: true, rows: [] });
  const pid = (await c.read('SELECT pg_catalog.pg_backend_pid()', [], BIG)).rowsArray[0][0];
  expect((await c.read(PROBE, [], BIG)).rowsArray).toEqual([[pid, '']]);
});

test('after a cancel the connection is dropped and the next caller sees no value', async () => {
  const before = (await c.read(PROBE, [], BIG)).rowsArray[0][0];
  const ac = new AbortController();
  const slow = c.read(`SELECT pg_catalog.pg_sleep(5), pg_catalog.current_setting('${OWNER}', true)`, [], { ...bound('alice'), signal: ac.signal });
  setTimeout(() => ac.abort(), 200);
  await expect(slow).rejects.toMatchObject({ code: 'cancelled' });
  const next = await c.read(PROBE, [], BIG);
  expect(next.rowsArray[0][0]).not.toBe(before);
  expect(next.rowsArray[0][1]).toBeNull();
  expect((await c.read('SELECT id FROM doc_rows', [], BIG)).rowsArray).toEqual([]);
});

test('a read whose column types are new to the source binds again on its second pass', async () => {
  await src.admin.query(`CREATE TYPE mood AS ENUM ('sad', 'happy'); GRANT USAGE ON TYPE mood TO ${src.readerRole}`);
  const r = await c.read(`SELECT ARRAY['happy'::mood] AS m, pg_catalog.current_setting('${OWNER}', true) AS v`, [], bound('alice'));
  expect(r.rowsArray).toEqual([[['happy'], 'alice']]);
});

test("a long attribute value costs nothing of the read's wire budget (the binding returns only its count)", async () => {
  // 200 000 characters: past the wire budget of a 1 000-byte read (1 000 + 64 KiB) if it came back.
  const long = 'x'.repeat(200_000);
  const r = await c.read(`SELECT pg_catalog.length(pg_catalog.current_setting('${OWNER}', true)) AS n`, [], { maxRows: 10, maxBytes: 1000, settings: [[OWNER, long]] });
  expect({ rows: r.rowsArray, truncated: r.truncated }).toEqual({ rows: [[200_000]], truncated: false });
});
