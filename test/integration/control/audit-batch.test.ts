/**
 * GroupCommitAuditSink: many concurrent tool-call events share batches (one interlock_audit_append call each), every promise settles
 * once its row is stored, and a malformed event in a batch is still stored (without details) by the
 * one-by-one fallback: exactly one row per event, none lost.
 */
import { toolCallEvent } from '../../helpers/audit-events';
import { freshControlDb, type TestControlDb } from './control-db';
import { DbAuditSink, searchAudit } from '../../../src/control/audit';

let t: TestControlDb;
beforeAll(async () => {
  t = await freshControlDb('ctl_auditbatch');
});
afterAll(async () => t.cleanup());

const event = toolCallEvent;

test('450 concurrent events: one row each, stored in batches', async () => {
  const sink = new DbAuditSink(t.db, undefined, { maxBatch: 200 });
  const ids = Array.from({ length: 450 }, (_, i) => `req_batch_${i}`);
  await Promise.all(ids.map((id) => sink.record(event(id))));
  const rows = (await searchAudit(t.db, { limit: 1000 })).events.filter((e) => (e.requestId ?? '').startsWith('req_batch_'));
  expect(rows.map((r) => r.requestId).sort()).toEqual([...ids].sort());
  expect(rows.every((r) => r.sourceId === 'chinook' && r.rowCount === 1)).toBe(true);
  // Group commit: the events waiting during one commit share the next one.
  const b = await t.db.pool.query("SELECT count(DISTINCT batch_id)::int AS n FROM audit_events WHERE request_id LIKE 'req_batch_%'");
  expect(b.rows[0].n).toBeLessThan(450);
  expect(b.rows[0].n).toBeGreaterThanOrEqual(1);
});

test('at concurrency 1 each record is its own batch: one statement, one commit', async () => {
  const sink = new DbAuditSink(t.db);
  for (let i = 0; i < 3; i++) await sink.record(event(`req_serial_${i}`));
  const b = await t.db.pool.query("SELECT count(DISTINCT batch_id)::int AS n, count(*)::int AS e FROM audit_events WHERE request_id LIKE 'req_serial_%'");
  expect(b.rows[0]).toEqual({ n: 3, e: 3 });
});

test('a malformed event does not sink its batch: every event is stored exactly once', async () => {
  const sink = new DbAuditSink(t.db, undefined, { maxBatch: 50 });
  const ids = Array.from({ length: 20 }, (_, i) => `req_mixed_${i}`);
  await Promise.all(ids.map((id, i) => sink.record(event(id, i === 7 ? { note: 'bad\u0000byte' } : {}))));
  const rows = (await searchAudit(t.db, { limit: 1000 })).events.filter((e) => (e.requestId ?? '').startsWith('req_mixed_'));
  expect(rows.map((r) => r.requestId).sort()).toEqual([...ids].sort());
});
