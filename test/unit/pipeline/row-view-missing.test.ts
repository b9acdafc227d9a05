/**
 * src/pipeline/row-views.ts missingRelationIsRowView and the provisioner's memory of views whose
 * base is gone (red team rtn4 item 2): a 42P01 at a row view is ours (made again), one at the
 * agent's own relation is not; a view that failed 42P01 under a snapshot is not tried again under it.
 */
import { missingRelationIsRowView, rowViewProvisioner, undefinedRelationObject } from '../../../src/pipeline/row-views';
import type { RowView } from '../../../src/pipeline/row-rules';
import type { SourceRecord } from '../../../src/governance/store';

const err = (cause: Record<string, unknown>) => ({ sqlState: '42P01', cause });
const SENT = 'SELECT c.customer_id FROM interlock_rows."customer_ab12" c, gone_t g WHERE g.id = c.customer_id';

test('told by the position (characters of the statement sent): a row view reference, or another relation', () => {
  expect(missingRelationIsRowView(err({ position: String(SENT.indexOf('interlock_rows') + 1) }), SENT)).toBe(true);
  expect(missingRelationIsRowView(err({ position: String(SENT.indexOf('gone_t') + 1) }), SENT)).toBe(false);
  // Positions count characters, not UTF-16 units: a non-BMP character before the reference.
  const wide = `SELECT '😀' AS x FROM interlock_rows."v"`;
  expect(missingRelationIsRowView(err({ position: String(Array.from(wide).indexOf('i', 10) + 1) }), wide)).toBe(true);
});

test('without a position: the English message, else taken as a row view (made again once per call, as before)', () => {
  expect(missingRelationIsRowView(err({ message: 'relation "interlock_rows.customer_ab12" does not exist' }), SENT)).toBe(true);
  expect(missingRelationIsRowView(err({ message: 'relation "gone_t" does not exist' }), SENT)).toBe(false);
  expect(missingRelationIsRowView(err({ message: 'la relation « gone_t » n’existe pas' }), SENT)).toBe(true);
  expect(missingRelationIsRowView({ sqlState: '42P01' }, SENT)).toBe(true);
  expect(undefinedRelationObject(err({ message: 'relation "public.gone_t" does not exist' }))).toBe('public.gone_t');
  expect(undefinedRelationObject(err({ message: 'something else' }))).toBeUndefined();
});

test('a view whose creation failed 42P01 under a snapshot is not tried again under it; another snapshot tries again', async () => {
  const sent: string[] = [];
  let fail: string | null = '42P01';
  const p = rowViewProvisioner(async (_s, sql) => {
    sent.push(sql);
    if (fail && sql.includes('CREATE OR REPLACE VIEW')) throw Object.assign(new Error('x'), { sqlState: fail });
  });
  const source = { id: 's', type: 'postgres', name: 's', enabled: true, settings: { reader: { user: 'r' } } } as SourceRecord;
  const view = { name: 'customer_ab12', schema: 'public', table: 'customer', predicateSql: 'true' } as RowView;
  expect(await p.ensure(source, [view], 'snap1')).toBe(false);
  expect(p.baseGone('s', [view], 'snap1')).toBe(true);
  const n = sent.length;
  expect(n).toBeGreaterThan(0);
  p.forget('s');
  expect(await p.ensure(source, [view], 'snap1')).toBe(false);
  expect(sent.length).toBe(n); // nothing sent again
  expect(p.baseGone('s', [view], 'snap2')).toBe(false);
  fail = null;
  expect(await p.ensure(source, [view], 'snap2')).toBe(true);
  expect(sent.length).toBeGreaterThan(n);
  // Another failure (not 42P01) is not remembered: the next read tries again.
  const q = rowViewProvisioner(async (_s, sql) => {
    if (sql.includes('CREATE OR REPLACE VIEW')) throw Object.assign(new Error('x'), { sqlState: '42501' });
  });
  expect(await q.ensure(source, [view], 'snap1')).toBe(false);
  expect(q.baseGone('s', [view], 'snap1')).toBe(false);
});
