/**
 * Issue 22, item 4, on the live server: every function of the server's pg_catalog with a
 * sizing-shaped argument (builtin-functions/sizing.ts) that the policy does not refuse is reviewed
 * as allocation-sized or bounded by its input, so a PostgreSQL upgrade cannot add one silently; the
 * statements the analyser refuses and allows are valid PostgreSQL 15 (checked with PREPARE, which
 * resolves names without planning or running anything), and the allowed ones run.
 */
import { Client } from 'pg';
import { analyzeSql, initSqlParser, prepareCatalog } from '../../../src/sql/analyze';
import { classifyRow } from '../../../src/sql/builtin-functions/rules';
import { ALLOCATION_SIZED, BOUNDED_BY_INPUT, hasSizingShape } from '../../../src/sql/builtin-functions/sizing';
import { PROC_SNAPSHOT_SQL, type ProcRow } from '../../../src/sql/builtin-functions/snapshot';
import { ADMIN_URL } from '../../helpers/pg';
import { CATALOG } from '../../unit/sql/helpers';

let client: Client;
let rows: ProcRow[] = [];
beforeAll(async () => {
  await initSqlParser();
  client = new Client({ connectionString: ADMIN_URL });
  await client.connect();
  rows = (await client.query<{ r: ProcRow }>(PROC_SNAPSHOT_SQL)).rows.map((x) => x.r);
});
afterAll(async () => {
  await client.end();
});

const cat = prepareCatalog(CATALOG);

test("every allowed function of the server's pg_catalog with a sizing-shaped argument is reviewed", () => {
  const shaped = rows.filter((r) => r[0] === 'pg_catalog' && hasSizingShape(r[2], r[3], r[7]) && classifyRow(r)?.class !== 'refused');
  expect(shaped.length).toBeGreaterThan(50);
  expect(shaped.filter((r) => !ALLOCATION_SIZED.has(r[1]) && !BOUNDED_BY_INPUT.has(r[1])).map((r) => `${r[1]}(${r[2]})`)).toEqual([]);
  // Every allocation-sized name exists on the server.
  expect([...ALLOCATION_SIZED.keys()].filter((n) => !rows.some((r) => r[0] === 'pg_catalog' && r[1] === n))).toEqual([]);
});

const REFUSED = [
  'SELECT array_fill(0, ARRAY[100000, 1000])',
  "SELECT array_fill('x'::text, '{20000000}')",
  'SELECT "bit"(1, 100000000)',
  "SELECT bpchar('x', 100000004, true)",
  'SELECT 1::bit(80000000)',
  "SELECT * FROM generate_series('2000-01-01'::timestamp, '2100-01-01', '1 second')",
  "SELECT * FROM generate_series(now(), 'infinity', '1 day')",
  "SELECT lpad('x', 100000000)",
];

test.each(REFUSED)('%s is valid PostgreSQL and refused before it runs', async (sql) => {
  const r = analyzeSql(sql, cat);
  expect(r.ok ? 'ok' : r.code).toBe('function_not_allowed');
  expect(r.ok ? '' : r.message).toMatch(/^resource limit: /);
  await client.query(`PREPARE il_sizing AS ${sql}`);
  await client.query('DEALLOCATE il_sizing');
});

test.each([
  ['SELECT cardinality(array_fill(0, ARRAY[100, 100])) AS n', '10000'],
  ['SELECT length(pg_catalog.bit(5, 16)::text) AS n', '16'],
  ["SELECT octet_length(bpchar('x', 14, true)) AS n", '10'],
  ["SELECT count(*)::text AS n FROM generate_series('2000-01-01'::timestamp, '2000-01-02', '1 hour')", '25'],
  ["SELECT count(*)::text AS n FROM generate_series('2000-01-01'::date, '2001-01-01'::date, '1 day'::interval)", '367'],
  ["SELECT length(repeat('x', 10)) AS n", '10'],
])('%s is allowed and runs', async (sql, n) => {
  expect(analyzeSql(sql, cat).ok).toBe(true);
  const res = await client.query<{ n: string | number }>(sql);
  expect(String(res.rows[0].n)).toBe(n);
});
