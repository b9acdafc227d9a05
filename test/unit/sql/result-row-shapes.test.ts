/**
 * Task hs: a function whose result is a relation's row type or a stand-alone composite type makes
 * the statement depend on that row shape (`rowShapes`, checked by the shape guard); a relation's row
 * is read whole and its columns carry the relation's columns; a row type the catalogue does not list
 * is refused. Hand-built catalogue: Chinook plus `s.t(x, y)`, composite type `public.badge(code,
 * level)` and three functions recording their result row types as the scan does.
 */
import { analyzeSql, initSqlParser } from '../../../src/sql/analyze';
import type { SourceCatalog } from '../../../src/sql/catalog-types';
import { shapeGuardValues } from '../../../src/sources/postgres/shape-guard';
import { CATALOG, ok } from './helpers';

const CAT: SourceCatalog = {
  ...CATALOG,
  functions: [
    ...CATALOG.functions,
    { schema: 'public', name: 't_rows', volatility: 'stable', returnsSet: true, outColumns: ['x', 'y'], resultRowTypes: [{ schema: 's', name: 't' }] },
    { schema: 'public', name: 'badge_rows', volatility: 'stable', returnsSet: true, outColumns: ['code', 'level'], resultRowTypes: [{ schema: 'public', name: 'badge' }] },
    { schema: 'public', name: 'deep_rows', volatility: 'stable', returnsSet: true, resultRowTypes: [{ schema: '', name: '' }] },
  ],
  compositeTypes: [{ schema: 'public', name: 'badge', columns: [{ name: 'code', dataType: 'text' }, { name: 'level', dataType: 'integer' }] }],
};

beforeAll(async () => {
  await initSqlParser();
});

test('SELECT * FROM f() of a relation row type: the relation is read whole, its shape guarded, each column carries its own', () => {
  const a = ok('SELECT * FROM t_rows()', CAT);
  expect(a.rowShapes).toEqual([{ schema: 's', name: 't' }]);
  expect(a.reads).toEqual([{ schema: 's', table: 't', columns: ['x', 'y'] }]);
  expect(a.outputs.map((o) => [o.name, o.sources, o.passthrough, o.opaque])).toEqual([
    ['x', [{ schema: 's', table: 't', column: 'x' }], false, false],
    ['y', [{ schema: 's', table: 't', column: 'y' }], false, false],
  ]);
});

test('the call as a value embeds the relation’s whole rows; a filter on a column of the result uses that column', () => {
  const a = ok('SELECT t_rows() AS r', CAT);
  expect(a.rowShapes).toEqual([{ schema: 's', name: 't' }]);
  expect(a.outputs[0]).toMatchObject({ name: 'r', opaque: true, opaqueRelations: [{ schema: 's', table: 't' }] });
  expect(ok("SELECT x FROM t_rows() WHERE y = 'a'", CAT).nonOutputUses).toEqual([{ schema: 's', table: 't', column: 'y' }]);
});

test('a stand-alone composite result guards the type’s shape; a row type the catalogue does not list is refused', () => {
  const a = ok('SELECT * FROM badge_rows()', CAT);
  expect(a.rowShapes).toEqual([{ schema: 'public', name: 'badge' }]);
  expect(a.reads).toEqual([]);
  expect(analyzeSql('SELECT deep_rows()', CAT)).toMatchObject({ ok: false, code: 'function_not_allowed' });
});

test('the guard expects a composite type’s scanned attributes', () => {
  expect(shapeGuardValues(CAT, [{ schema: 'public', name: 'badge' }])).toEqual(['public', 'badge', '{"code","level"}', '{"text","integer"}']);
});
