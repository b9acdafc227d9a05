/**
 * Stored generated columns (red team rt42 G1): reading one reads the columns its expression is
 * computed from (CatalogColumn.generatedFrom), and its value is derived from them; a snapshot that
 * does not record the inputs (scanned before rt42) takes every other column of the relation.
 */
import type { SourceCatalog } from '../../../src/sql/catalog-types';
import { initSqlParser } from '../../../src/sql/analyze';
import { CATALOG, lineage, ok, readMap } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

const withTable = (generatedFrom?: string[]): SourceCatalog => ({
  ...CATALOG,
  relations: [
    ...CATALOG.relations,
    {
      schema: 'public',
      name: 'gen',
      kind: 'table',
      columns: [
        { name: 'id', dataType: 'integer', nullable: false, default: null, identity: null, generated: false },
        { name: 'ssn', dataType: 'text', nullable: true, default: null, identity: null, generated: false },
        { name: 'note', dataType: 'text', nullable: true, default: null, identity: null, generated: false },
        { name: 'ssn4', dataType: 'text', nullable: true, default: 'right(ssn, 4)', identity: null, generated: true, ...(generatedFrom ? { generatedFrom } : {}) },
      ],
    },
  ],
});

test('a generated column reads its recorded inputs, and its value is derived from them', () => {
  const r = ok('SELECT ssn4 FROM gen', withTable(['ssn']));
  expect(readMap(r)).toEqual({ gen: ['ssn', 'ssn4'] });
  expect(lineage(r)).toEqual(['ssn4: [gen.ssn,gen.ssn4] derived']);
});

test('a snapshot without the inputs takes every other column of the relation (fails closed)', () => {
  const r = ok('SELECT ssn4 FROM gen', withTable());
  expect(readMap(r).gen!.slice().sort()).toEqual(['id', 'note', 'ssn', 'ssn4']);
});

test('ordinary columns are unchanged (passthrough)', () => {
  const r = ok('SELECT note FROM gen', withTable(['ssn']));
  expect(readMap(r)).toEqual({ gen: ['note'] });
  expect(lineage(r)).toEqual(['note: [gen.note] pass']);
});
