/**
 * `interlock source list` says what is true (task hnu42b item 5): a documents source has no
 * catalogue to scan (it showed "not scanned" for the indexed demo handbook), and in direct mode the
 * discovery index of each source is shown.
 */
import { sourceListTable } from '../../../src/cli/source';

const rows = [
  { id: 'chinook', type: 'postgres', name: 'Chinook', enabled: true, catalog: { relations: 11, scannedAt: '2026-12-06T10:00:00.000Z', truncated: false } },
  { id: 'fresh', type: 'postgres', name: 'Fresh', enabled: false, catalog: null },
  { id: 'handbook', type: 'documents', name: 'Handbook', enabled: true, catalog: null },
] as Parameters<typeof sourceListTable>[0];
const index = [{ sourceId: 'handbook', indexedAt: '2026-12-06T10:05:00.000Z', durationMs: 12, assets: 7, added: 7, updated: 0, unchanged: 0, removed: 0, skipped: 0, problems: [] }];

const cells = (text: string) => text.split('\n').filter((l) => l.trim() !== '').map((l) => l.trim().split(/\s{2,}/));

test('direct mode: a documents source shows no catalogue and its index; postgres sources their scan', () => {
  const t = cells(sourceListTable(rows, index));
  expect(t[0]).toEqual(['ID', 'TYPE', 'NAME', 'ENABLED', 'CATALOG', 'INDEX']);
  expect(t.find((r) => r[0] === 'handbook')!.slice(4)).toEqual(['none (documents)', expect.stringMatching(/^7 assets, /)]);
  expect(t.find((r) => r[0] === 'fresh')!.slice(4)).toEqual(['not scanned', 'not indexed']);
  expect(t.find((r) => r[0] === 'chinook')![4]).toMatch(/^11 relations, /);
});

test('remote mode (no index status): no index column, and still no "not scanned" for a documents source', () => {
  const t = cells(sourceListTable(rows));
  expect(t[0]).toEqual(['ID', 'TYPE', 'NAME', 'ENABLED', 'CATALOG']);
  expect(t.find((r) => r[0] === 'handbook')![4]).toBe('none (documents)');
});
