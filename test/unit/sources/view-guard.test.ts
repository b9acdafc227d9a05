/**
 * Red team rt49 V1, V2, R1 (rt49c G1): which views, generated columns and table kinds a statement's definition guard checks
 * (src/sources/postgres/view-guard.ts), and the guard's parameters.
 */
import { loadSqlQualifier } from '../../../src/sources/postgres/qualify-sql';
import { statementDefinitions, withViewGuard } from '../../../src/sources/postgres/view-guard';
import type { SourceCatalog } from '../../../src/sql/catalog-types';

const catalog = {
  relations: [
    { schema: 'public', name: 'staff', kind: 'table', columns: [{ name: 'emp_id', dataType: 'integer' }, { name: 'name', dataType: 'text' }, { name: 'name_up', dataType: 'text', generated: true, default: 'upper(name)' }] },
    { schema: 'public', name: 'plain', kind: 'table', columns: [{ name: 'a', dataType: 'integer' }] },
    { schema: 'public', name: 'staff_dir', kind: 'view', definition: ' SELECT staff.emp_id, staff.name FROM staff;', columns: [], view: { reads: [{ schema: 'public', name: 'staff', kind: 'table' }], userCode: [], securityBarrier: false, securityInvoker: false } },
    { schema: 'public', name: 'staff_dir2', kind: 'view', definition: ' SELECT staff_dir.emp_id FROM staff_dir;', columns: [], view: { reads: [{ schema: 'public', name: 'staff_dir', kind: 'view' }], userCode: [], securityBarrier: false, securityInvoker: false } },
    { schema: 'public', name: 'old_v', kind: 'view', columns: [] },
  ],
} as unknown as SourceCatalog;

beforeAll(loadSqlQualifier);

test('a view read through another is checked with it; a generated column only when read, or when its relation is read whole', () => {
  const d = statementDefinitions(catalog, { reads: [{ schema: 'public', table: 'staff_dir2', columns: ['emp_id'] }] });
  expect(d.views.map((v) => v.name)).toEqual(['staff_dir', 'staff_dir2']);
  // staff behind staff_dir is read whole by the view's query as far as the guard knows.
  expect(d.generated).toEqual([{ schema: 'public', name: 'staff', column: 'name_up', expression: 'upper(name)' }]);
  expect(statementDefinitions(catalog, { reads: [{ schema: 'public', table: 'staff', columns: ['name'] }] })).toEqual({ views: [], generated: [], tables: [] });
  expect(statementDefinitions(catalog, { reads: [{ schema: 'public', table: 'staff', columns: ['name_up'] }] }).generated).toHaveLength(1);
  expect(statementDefinitions(catalog, { reads: [], rowShapes: [{ schema: 'public', name: 'staff' }] }).generated).toHaveLength(1);
  expect(statementDefinitions(catalog, { reads: [{ schema: 'public', table: 'plain', columns: ['a'] }] })).toEqual({ views: [], generated: [], tables: [] });
});

test('the guard carries each view\'s scanned definition (the empty text for none) after the guards before it', () => {
  const before = { text: 'SELECT 1 WHERE $1::text IS NULL', values: ['x'] };
  const g = withViewGuard(catalog, before, { reads: [{ schema: 'public', table: 'staff_dir', columns: ['name'] }, { schema: 'public', table: 'old_v', columns: [] }] })!;
  expect(g.values).toEqual(['x', 'public', 'old_v', '', 'public', 'staff_dir', ' SELECT staff.emp_id, staff.name FROM staff;', 'public', 'staff', 'name_up', 'upper(name)']);
  expect(g.text.startsWith('SELECT 1 WHERE $1::text IS NULL UNION ALL ')).toBe(true);
  expect(g.text).toContain('($2::pg_catalog.text, $3::pg_catalog.text, $4::pg_catalog.text), ($5::pg_catalog.text, $6::pg_catalog.text, $7::pg_catalog.text)');
  expect(g.text).toContain('($8::pg_catalog.text, $9::pg_catalog.text, $10::pg_catalog.text, $11::pg_catalog.text)');
  // No view, no generated column: the guards before it alone.
  expect(withViewGuard(catalog, before, { reads: [{ schema: 'public', table: 'plain', columns: ['a'] }] })).toBe(before);
  expect(withViewGuard(catalog, null, { reads: [{ schema: 'public', table: 'plain', columns: ['a'] }] })).toBeNull();
});

test('R1: with kinds, every table read or behind a view read carries its scanned relkind; without, none', () => {
  const uses = { reads: [{ schema: 'public', table: 'plain', columns: ['a'] }, { schema: 'public', table: 'staff_dir', columns: ['name'] }] };
  expect(statementDefinitions(catalog, uses).tables).toEqual([]);
  expect(statementDefinitions(catalog, uses, true).tables.map((t) => t.name)).toEqual(['plain', 'staff']);
  const g = withViewGuard(catalog, null, { reads: [{ schema: 'public', table: 'plain', columns: ['a'] }] }, true)!;
  // rt49c G1: with the scanned generated columns' names (a JSON array, compared as a set).
  expect(g.values).toEqual(['public', 'plain', 'r', '[]']);
  expect(g.text).toContain('($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.text, $4::pg_catalog.text)');
  expect(withViewGuard(catalog, null, { reads: [{ schema: 'public', table: 'staff', columns: ['name'] }] }, true)!.values).toEqual(['public', 'staff', 'r', '["name_up"]']);
  // The memo keeps the two apart.
  expect(withViewGuard(catalog, null, { reads: [{ schema: 'public', table: 'plain', columns: ['a'] }] }, false)).toBeNull();
});
