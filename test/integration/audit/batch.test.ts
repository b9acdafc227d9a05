/**
 * GroupCommitAuditSink: many concurrent tool-call events share batches (one interlock_audit_append_v2 call each), every promise settles
 * once its row is stored, and an event the database rejects is still stored (without details) by the
 * one-by-one fallback: exactly one row per event, none lost.
 */
import { toolCallEvent } from '../../helpers/audit-events';
import { freshControlDb, type TestControlDb } from '../control/control-db';
import { DbAuditSink, searchAudit } from '../../../src/audit/writer';

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

test('an event with a NUL character does not sink its batch: stored whole (NUL as U+FFFD), every event exactly once', async () => {
  const sink = new DbAuditSink(t.db, undefined, { maxBatch: 50 });
  const ids = Array.from({ length: 20 }, (_, i) => `req_mixed_${i}`);
  await Promise.all(ids.map((id, i) => sink.record(event(id, i === 7 ? { note: 'bad\u0000byte' } : {}))));
  const rows = (await searchAudit(t.db, { limit: 1000 })).events.filter((e) => (e.requestId ?? '').startsWith('req_mixed_'));
  expect(rows.map((r) => r.requestId).sort()).toEqual([...ids].sort());
  expect(rows.find((r) => r.requestId === 'req_mixed_7')!.details).toEqual({ note: 'bad\ufffdbyte' });
});

test('an event the database rejects does not sink its batch: the others are stored, it is stored without its details', async () => {
  // A constraint the writer cannot know about (rows are normalised before they are sent) rejects one event.
  await t.db.pool.query("ALTER TABLE audit_events ADD CONSTRAINT test_no_poison CHECK (coalesce(details->>'note', '') <> 'poison')");
  try {
    const sink = new DbAuditSink(t.db, undefined, { maxBatch: 50 });
    const ids = Array.from({ length: 12 }, (_, i) => `req_poison_${i}`);
    await Promise.all(ids.map((id, i) => sink.record(event(id, i === 5 ? { note: 'poison' } : {}))));
    const rows = (await searchAudit(t.db, { limit: 1000 })).events.filter((e) => (e.requestId ?? '').startsWith('req_poison_'));
    expect(rows.map((r) => r.requestId).sort()).toEqual([...ids].sort());
    expect(rows.find((r) => r.requestId === 'req_poison_5')!.details).toEqual({ audit_error: 'malformed_event' });
    expect(rows.filter((r) => r.requestId !== 'req_poison_5').every((r) => JSON.stringify(r.details) === '{}')).toBe(true);
  } finally {
    await t.db.pool.query('ALTER TABLE audit_events DROP CONSTRAINT test_no_poison');
  }
});
