/**
 * Task hpriv item 2 (red team rt41a, low, availability): the store made a new catalogue object on
 * every reload (each 30 s per replica, and on every catalog_snapshots notification), so the caches
 * keyed by the object (view lineage, prepared catalogue, describe's view-column reads) started
 * cold. Now a reload of an unchanged stored snapshot answers the same object; a saved one (new
 * scan, or the same scan time written again) answers a new object.
 */
import { freshControlDb, type TestControlDb } from '../control/control-db';
import { DbGovernanceStore } from '../../../src/governance/db-store';
import { loadCatalogVersion, saveCatalog } from '../../../src/control/catalog';
import type { SourceCatalog } from '../../../src/sql/catalog-types';

let t: TestControlDb;
beforeAll(async () => {
  t = await freshControlDb('hpriv_cat');
  await t.db.pool.query(`INSERT INTO sources (id, type, name, description, enabled, settings) VALUES ('s1', 'postgres', 's1', '', true, '{}')`);
});
afterAll(async () => t?.cleanup());

const catalog = (scannedAt: string, names: string[]): SourceCatalog =>
  ({ scannedAt, truncated: false, relations: names.map((name) => ({ schema: 'public', name, kind: 'table', columns: [{ name: 'id', dataType: 'integer' }] })), functions: [] }) as unknown as SourceCatalog;
const names = (c: SourceCatalog | null) => c?.relations.map((r) => r.name) ?? null;

test('a reload of an unchanged snapshot keeps the catalogue object; a saved snapshot replaces it', async () => {
  await saveCatalog(t.db, 's1', catalog('2026-12-06T10:00:00.000Z', ['a']));
  const store = new DbGovernanceStore(t.db);
  const first = await store.loadCatalog('s1');
  expect({ names: names(first), scannedAt: first?.scannedAt }).toEqual({ names: ['a'], scannedAt: '2026-12-06T10:00:00.000Z' });
  // A notification (any replica's save or '*' after a reconnect) and a stale mark both reload it.
  store.invalidate('catalog_snapshots');
  expect(await store.loadCatalog('s1')).toBe(first);
  store.invalidate('*');
  store.markCatalogStale('s1');
  expect(await store.loadCatalog('s1')).toBe(first);

  await saveCatalog(t.db, 's1', catalog('2026-12-06T10:00:30.000Z', ['a', 'b']));
  store.invalidate('catalog_snapshots');
  const second = await store.loadCatalog('s1');
  expect(second).not.toBe(first);
  expect({ names: names(second), scannedAt: second?.scannedAt }).toEqual({ names: ['a', 'b'], scannedAt: '2026-12-06T10:00:30.000Z' });
  store.invalidate('catalog_snapshots');
  expect(await store.loadCatalog('s1')).toBe(second);

  // The same scan time written again with other content is a new row version: a new object.
  await saveCatalog(t.db, 's1', catalog('2026-12-06T10:00:30.000Z', ['c']));
  store.invalidate('catalog_snapshots');
  const third = await store.loadCatalog('s1');
  expect(third).not.toBe(second);
  expect(names(third)).toEqual(['c']);

  // Gone, then scanned again: null, then a new object.
  await t.db.pool.query("DELETE FROM catalog_snapshots WHERE source_id = 's1'");
  store.invalidate('catalog_snapshots');
  expect(await store.loadCatalog('s1')).toBeNull();
  await saveCatalog(t.db, 's1', catalog('2026-12-06T10:00:30.000Z', ['c']));
  store.invalidate('catalog_snapshots');
  const fourth = await store.loadCatalog('s1');
  expect(fourth).not.toBe(third);
  expect(names(fourth)).toEqual(['c']);
});

test('an unchanged version is answered without sending the catalogue again', async () => {
  await saveCatalog(t.db, 's1', catalog('2026-12-06T11:00:00.000Z', ['x']));
  const known = await loadCatalogVersion(t.db, 's1');
  expect(names(known?.catalog ?? null)).toEqual(['x']);
  // A forged version with the known catalogue is refused: the stored row's version differs, so the stored catalogue comes back.
  const forged = { catalog: catalog('2026-12-06T11:00:00.000Z', ['forged']), version: `${known!.version}-other` };
  const fresh = await loadCatalogVersion(t.db, 's1', forged);
  expect({ same: fresh === forged, names: names(fresh?.catalog ?? null), version: fresh?.version }).toEqual({ same: false, names: ['x'], version: known!.version });
  expect(await loadCatalogVersion(t.db, 's1', known!)).toBe(known);
});
