/**
 * Task hcast (red team rt43b F1, F3): the types outside pg_catalog a statement involves
 * (`SqlAnalysisOk.typeUses`), whose casts and domain constraints the type guard compares
 * (src/sources/postgres/type-guard.ts). Hand-built scan-like catalogue: Chinook plus
 * `public.moods(n varchar, mood public.mood, tag public.tag)`, `tag` a domain over `mood` (oids
 * 20002 → 20001), and the scan's `castVersions` (empty: no user casts at the scan).
 */
import { analyzeSql, initSqlParser } from '../../../src/sql/analyze';
import type { SourceCatalog } from '../../../src/sql/catalog-types';
import { withTypeGuard } from '../../../src/sources/postgres/type-guard';
import { CATALOG, ok } from './helpers';

const CAT: SourceCatalog = {
  ...CATALOG,
  relations: [
    ...CATALOG.relations,
    {
      schema: 'public',
      name: 'moods',
      kind: 'table',
      columns: [
        { name: 'n', dataType: 'character varying', typeOid: 1043 },
        { name: 'mood', dataType: 'mood', typeOid: 20001 },
        { name: 'tag', dataType: 'tag', typeOid: 20002 },
      ],
    },
  ],
  types: [
    { schema: 'pg_catalog', name: 'text' },
    { schema: 'pg_catalog', name: 'varchar' },
    { schema: 'public', name: 'mood' },
    { schema: 'public', name: 'tag' },
  ],
  columnTypes: [
    { oid: 1043, typtype: 'b', category: 'S', base: 0, element: 0, name: 'character varying' },
    { oid: 20001, typtype: 'e', category: 'E', base: 0, element: 0, name: 'mood' },
    { oid: 20002, typtype: 'd', category: 'E', base: 20001, element: 0, name: 'tag' },
  ],
  castVersions: [],
};

beforeAll(async () => {
  await initSqlParser();
});

test('a statement involving no user type records none and sends no type guard part', () => {
  for (const sql of ['SELECT n FROM moods', 'SELECT n::text AS t FROM moods', 'SELECT 1 AS one']) {
    const a = ok(sql, CAT);
    expect(a.typeUses).toBeUndefined();
    expect(withTypeGuard(CAT, null, a.typeUses)).toBeNull();
  }
});

test('a column of a user type counts with the types it is built on; a named type with every schema it may resolve from', () => {
  expect(ok('SELECT mood::text AS m FROM moods', CAT).typeUses).toEqual({ oids: [20001], names: [] });
  expect(ok('SELECT tag FROM moods', CAT).typeUses).toEqual({ oids: [20001, 20002], names: [] });
  expect(ok('SELECT n::mood AS m FROM moods', CAT).typeUses).toEqual({ oids: [], names: [{ schema: 'public', name: 'mood' }] });
  expect(ok('SELECT CAST(n AS public.tag) AS m FROM moods', CAT).typeUses).toEqual({ oids: [], names: [{ schema: 'public', name: 'tag' }] });
});

test('the guard part: the involved oids and names, the scan\'s versions; a scan without them expects what no server answers', () => {
  const a = ok('SELECT mood, n::tag AS t FROM moods', CAT);
  const g = withTypeGuard(CAT, null, a.typeUses)!;
  expect(g.text).toContain('pg_catalog.pg_cast');
  expect(g.text).toContain('pg_catalog.pg_constraint');
  expect(g.values).toEqual(['{20001}', '{"public"}', '{"tag"}', '{}', '{}', '']);
  const withCast: SourceCatalog = { ...CAT, castVersions: [[20001, 'c30001:5']] };
  expect(withTypeGuard(withCast, null, a.typeUses)!.values.slice(3)).toEqual(['{20001}', '{"c30001:5"}', '']);
  const older: SourceCatalog = { ...CAT, castVersions: undefined };
  expect(withTypeGuard(older, null, a.typeUses)!.values.slice(3)).toEqual(['{}', '{}', '?']);
});

test('a hand-built catalogue (no scan facts) records no types', () => {
  const { castVersions: _c, columnTypes: _t, ...bare } = CAT;
  expect(analyzeSql('SELECT mood, n::mood AS m FROM moods', bare)).toMatchObject({ ok: true });
  expect(ok('SELECT mood, n::mood AS m FROM moods', bare).typeUses).toBeUndefined();
});
