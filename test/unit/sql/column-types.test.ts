/**
 * describe_source's type fields (src/sql/column-types.ts, issue 23 item 1) on hand-built catalogue
 * types: old snapshots get no type fields, the spec's value_form enum is the value mapping's forms,
 * and cut or cyclic domain chains end instead of looping.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { ColumnTypes } from '../../../src/sql/column-types';
import type { CatalogType, SourceCatalog } from '../../../src/sql/catalog-types';

const catalog = (columnTypes?: CatalogType[]): SourceCatalog => ({ relations: [], functions: [], searchPath: ['public'], scannedAt: '2026-12-03T00:00:00Z', truncated: false, ...(columnTypes ? { columnTypes } : {}) });
const spec = (f: string) => JSON.parse(readFileSync(path.join(__dirname, '../../../spec', f), 'utf8'));

test('the spec lists exactly the value mapping forms as value_form', () => {
  expect(spec('mcp-tools-v1.json').$defs.CatalogRow.properties.value_form.enum).toEqual(Object.keys(spec('value-mapping-v1.json').forms));
});

test('a snapshot without column types, or a type it does not describe, gives no type fields', () => {
  expect(new ColumnTypes(catalog()).describe(23)).toEqual({});
  expect(new ColumnTypes(catalog([{ oid: 23, typtype: 'b', category: 'N', base: 0, element: 0, name: 'integer' }])).describe(undefined)).toEqual({});
  expect(new ColumnTypes(catalog([])).describe(99999)).toEqual({});
});

test('built-in oids take their mapped form; an unlisted base type is text', () => {
  const t = new ColumnTypes(catalog([
    { oid: 20, typtype: 'b', category: 'N', base: 0, element: 0, name: 'bigint' },
    { oid: 1016, typtype: 'b', category: 'A', base: 0, element: 20, name: 'bigint[]' },
    { oid: 70000, typtype: 'b', category: 'U', base: 0, element: 0, name: 'citext' },
  ]));
  expect(t.describe(20)).toEqual({ type_kind: 'base', value_form: 'int8' });
  expect(t.describe(1016)).toEqual({ type_kind: 'array', element_type: 'bigint', element_kind: 'base', value_form: 'array' });
  expect(t.describe(70000)).toEqual({ type_kind: 'base', value_form: 'text' });
});

test('a domain chain whose base is missing, or that loops, ends at the last known type', () => {
  const cut = new ColumnTypes(catalog([{ oid: 80000, typtype: 'd', category: 'S', base: 25, element: 0, name: 'email_address' }]));
  expect(cut.describe(80000)).toEqual({ type_kind: 'domain', value_form: 'text' });
  const loop = new ColumnTypes(catalog([
    { oid: 80001, typtype: 'd', category: 'S', base: 80002, element: 0, name: 'a' },
    { oid: 80002, typtype: 'd', category: 'S', base: 80001, element: 0, name: 'b' },
  ]));
  expect(loop.describe(80001)).toEqual({ type_kind: 'domain', value_form: 'text' });
});
