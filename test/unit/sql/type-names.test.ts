/**
 * Issue 12, Build 4: a cast to a type that is neither built-in nor in the catalogue is refused as
 * `unknown_relation` (answered exactly like a missing or ungranted relation), while a relation's
 * row type counts as reading the relation, built-in and user types pass, and catalogues without a
 * type list are not checked.
 */
import { analyzeSql, initSqlParser } from '../../../src/sql/analyze';
import type { SourceCatalog } from '../../../src/sql/catalog-types';
import { CATALOG, readMap } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

const TYPED: SourceCatalog = {
  ...CATALOG,
  types: [
    ...['int4', 'int8', 'text', 'bool', 'numeric', 'varchar', 'bpchar', 'float8', 'timestamptz', 'jsonb', 'json', 'interval', '_int4'].map((name) => ({ schema: 'pg_catalog', name })),
    { schema: 'public', name: 'mood' },
    { schema: 's', name: 'color' },
  ],
};
const answer = (sql: string, cat: SourceCatalog = TYPED) => {
  const r = analyzeSql(sql, cat);
  return r.ok ? 'ok' : `${r.code}: ${r.message}`;
};

test.each([
  ['SELECT NULL::no_such_type', 'unknown_relation: unknown type "no_such_type"'],
  ['SELECT CAST(NULL AS no_such_type)', 'unknown_relation: unknown type "no_such_type"'],
  ["SELECT '{}'::no_such_type[]", 'unknown_relation: unknown type "no_such_type"'],
  ['SELECT NULL::public.no_such_type', 'unknown_relation: unknown type "public.no_such_type"'],
  ['SELECT NULL::s.mood', 'unknown_relation: unknown type "s.mood"'],
  ['SELECT NULL::pg_class', 'unknown_relation: unknown type "pg_class"'],
  ['SELECT NULL::pg_catalog.pg_authid', 'unknown_relation: unknown type "pg_catalog.pg_authid"'],
  ['SELECT * FROM jsonb_to_record(\'{}\') AS x(a no_such_type)', 'unknown_relation: unknown type "no_such_type"'],
])('%s is refused like a missing relation', (sql, expected) => {
  expect(answer(sql)).toBe(expected);
});

test.each([
  'SELECT NULL::int4, 1::bigint, 2::integer, NULL::text, NULL::varchar(3), NULL::char(2), NULL::double precision, NULL::jsonb, NULL::json, NULL::interval, NULL::int[]',
  'SELECT NULL::mood, NULL::public.mood, NULL::s.color',
])('%s passes', (sql) => {
  expect(answer(sql)).toBe('ok');
});

test("a relation's row type reads every column of the relation (authorization decides, like FROM)", () => {
  const r = analyzeSql("SELECT jsonb_populate_record(NULL::employee, '{}')", TYPED);
  expect(r.ok).toBe(true);
  if (r.ok) expect(Object.keys(readMap(r))).toEqual(['employee']);
  const s = analyzeSql('SELECT NULL::s.t', TYPED);
  expect(s.ok && readMap(s)).toEqual({ 's.t': ['x', 'y'] });
});

test('a catalogue without a type list does not check type names', () => {
  expect(answer('SELECT NULL::no_such_type', CATALOG)).toBe('ok');
});
