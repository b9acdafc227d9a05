/**
 * Task hpriv item 2 (red team rt41a, low, availability): the first describe after a new catalogue
 * snapshot analysed every view column's read in one turn of the event loop (2,000 views took 1.5 s).
 * warmViewColumnReads analyses them in chunks, yielding the loop (setImmediate) between chunks, and
 * does nothing on a snapshot already warm.
 */
import { initSqlParser } from '../../../src/sql/analyze';
import type { CatalogRelation, SourceCatalog } from '../../../src/sql/catalog-types';
import { VIEW_COLUMN_CHUNK, warmViewColumnReads } from '../../../src/tools/handlers/describe';
import { CATALOG } from '../sql/helpers';

beforeAll(async () => {
  await initSqlParser();
});

/** CATALOG with `n` views of two columns each over customer. */
function withViews(n: number): SourceCatalog {
  const views: CatalogRelation[] = Array.from({ length: n }, (_, i) => ({
    schema: 'public',
    name: `v_hpriv_${i}`,
    kind: 'view',
    columns: [{ name: 'id', dataType: 'integer' }, { name: 'e', dataType: 'text' }],
    definition: ' SELECT customer.customer_id AS id,\n    customer.email AS e\n   FROM customer;',
  }));
  return { ...CATALOG, relations: [...CATALOG.relations.filter((r) => r.kind !== 'view' && r.kind !== 'materialized_view'), ...views] };
}

test('a cold snapshot is analysed in chunks, the loop turning between them; a warm one is not analysed again and never yields', async () => {
  const cat = withViews(VIEW_COLUMN_CHUNK); // 2 columns each: two chunks
  const turns: string[] = [];
  setImmediate(() => turns.push('turn during the cold warm-up'));
  expect(await warmViewColumnReads(cat)).toBe(2 * VIEW_COLUMN_CHUNK);
  expect(turns).toEqual(['turn during the cold warm-up']);
  setImmediate(() => turns.push('turn after the warm one'));
  expect(await warmViewColumnReads(cat)).toBe(0);
  expect(turns).toEqual(['turn during the cold warm-up']);
  await new Promise<void>((r) => setImmediate(r));
  expect(turns).toEqual(['turn during the cold warm-up', 'turn after the warm one']);
});

test('a smaller chunk yields more often; another catalogue object is cold again', async () => {
  const cat = withViews(5);
  let turns = 0;
  const tick = (): void => {
    turns++;
    if (turns < 100) setImmediate(tick);
  };
  setImmediate(tick);
  expect(await warmViewColumnReads(cat, 2)).toBe(10);
  expect(turns).toBe(5);
  turns = 100;
  expect(await warmViewColumnReads({ ...cat }, 2)).toBe(10);
});
