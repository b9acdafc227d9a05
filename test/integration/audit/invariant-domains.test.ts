/**
 * The audit trail's one-column row invariants as domains (migration
 * 20261214100000000_audit-invariant-domains_h28t.sql, issue 28, task h28t): on a trail written before
 * it (format-1, format-2, format-3 and format-4 batches, a sealed and an open lane) every event is
 * kept, byte for byte, and verify passes before and after; afterwards every invariant the CHECKs
 * stated is still refused (SQLSTATE 23514), the one two-column CHECK is the only CHECK left on the
 * trail's tables and partitions, and new batches of every format verify beside the old ones.
 */
import { migrateDown } from '../../helpers/migrate-down';
import { createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { migrationNames, openControlDb, runMigrations, type ControlDb } from '../../../src/control/db';
import { recordApprovalEvent, recordConfigEvent } from '../../../src/audit/writer';
import { ChainLane } from '../../../src/audit/chain';
import { verifyAuditChain } from '../../../src/audit/verify';
import { appendFormat1, BASE_AUDIT_ROW, tamperAsSuperuser } from '../../helpers/audit-events';

jest.setTimeout(120_000);

const MIGRATION = '20261214100000000_audit-invariant-domains_h28t';

let temp: TempDatabase;
let db: ControlDb;

const down = (count: number) => migrateDown(temp.url, count);

/** Every stored event and batch as text, in id order: what the migration must keep. */
async function trail(): Promise<{ events: string[]; batches: string[] }> {
  const e = await db.pool.query<{ t: string }>('SELECT row_to_json(e)::text AS t FROM audit_events e ORDER BY id');
  // mac_key_id: added by a later migration (20261216100000000, format 5), null on every batch written here.
  const b = await db.pool.query<{ t: string }>("SELECT (to_jsonb(b) - 'mac_key_id')::text AS t FROM audit_batches b ORDER BY id");
  return { events: e.rows.map((r) => r.t), batches: b.rows.map((r) => r.t) };
}

/** The CHECK constraints on audit_batches, audit_events and its partitions. */
async function tableChecks(): Promise<string[]> {
  const r = await db.pool.query<{ n: string }>(
    `SELECT c.conrelid::regclass::text || '.' || c.conname AS n FROM pg_constraint c
      WHERE c.contype = 'c' AND (c.conrelid IN ('audit_batches'::regclass, 'audit_events'::regclass)
         OR c.conrelid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'audit_events'::regclass))
      ORDER BY 1`,
  );
  return r.rows.map((x) => x.n);
}

const row = (request: string) => ({ ...BASE_AUDIT_ROW, request_id: request, time: new Date().toISOString() });

beforeAll(async () => {
  temp = await createTempDatabase('ctl_h28t_dom');
  await runMigrations(temp.url);
  db = await openControlDb(temp.url, { migrate: false });
});
afterAll(async () => {
  await db?.close();
  await temp?.drop();
});

test('a trail written before the migration keeps every event and verifies before and after; new batches verify beside it', async () => {
  const names = migrationNames();
  expect(names).toContain(MIGRATION);
  await down(names.length - names.indexOf(MIGRATION));
  const parentChecks = async () => (await tableChecks()).filter((n) => /^audit_(batches|events)\./.test(n));
  expect(await parentChecks()).toHaveLength(9); // 7 on the batch, 2 on the event (and the partitions' inherited copies)
  // Every format the trail can hold: format 1 (an old gateway), format 2 (approvals), format 4 (config), format 3 lanes (one sealed, one open).
  await appendFormat1(db.pool, [row('old-f1-a'), row('old-f1-b')]);
  await recordApprovalEvent(db, { approvalId: 'apr_old', action: 'expired', operator: 'system:expiry' });
  await recordConfigEvent(db, { decision: 'role_created', operator: 'ops-old', details: { role: 'reader' } });
  const sealed = new ChainLane(db.pool);
  await sealed.append([row('old-f3-a'), row('old-f3-b'), row('old-f3-c')], 5000);
  await sealed.append([row('old-f3-d')], 5000);
  await sealed.append([], 5000, 'seal');
  const open = new ChainLane(db.pool);
  await open.append([row('old-f3-e')], 5000);
  const before = await trail();
  expect(before.events).toHaveLength(9);
  const okBefore = await verifyAuditChain(db);
  expect(okBefore).toMatchObject({ ok: true, mismatchCount: 0, eventsChecked: 9 });

  expect(await runMigrations(temp.url)).toEqual(names.slice(names.indexOf(MIGRATION)));
  expect(await trail()).toEqual(before);
  expect(await verifyAuditChain(db)).toEqual(okBefore);
  expect(await tableChecks()).toEqual(['audit_batches.audit_batches_chain_check']);

  // The open lane goes on, a new one starts, approvals and config events append: all verify.
  await open.append([row('new-f3-a'), row('new-f3-b')], 5000);
  const fresh = new ChainLane(db.pool);
  await fresh.append([row('new-f3-c')], 5000);
  await fresh.append([], 5000, 'seal');
  await recordApprovalEvent(db, { approvalId: 'apr_new', action: 'expired', operator: 'system:expiry' });
  await recordConfigEvent(db, { decision: 'role_updated', operator: 'ops-new', details: { role: 'reader' } });
  const after = await verifyAuditChain(db);
  expect(after).toMatchObject({ ok: true, mismatchCount: 0, eventsChecked: 14 });
  expect(after.batchesChecked).toBe(okBefore.batchesChecked + 5);

  // And down again keeps every event too (the CHECKs come back).
  const now = await trail();
  await down(names.length - names.indexOf(MIGRATION));
  expect(await trail()).toEqual(now);
  expect(await parentChecks()).toHaveLength(9);
  await runMigrations(temp.url);
});

test('every invariant the CHECKs stated is still refused, by a superuser too (23514)', async () => {
  const b = `INSERT INTO audit_batches (committed_at, event_count, prev_hash, hash, format, chain_id, seq, mark) VALUES (now(), $1, $2, $3, $4, $5, $6, $7)`;
  const good: unknown[] = [0, null, Buffer.alloc(32, 1), 3, '00000000-0000-4000-8000-000000000001', 0, null];
  const bad: Array<[string, number, unknown]> = [
    ['event_count < 0', 0, -1],
    ['prev_hash of 31 bytes', 1, Buffer.alloc(31)],
    ['hash of 33 bytes', 2, Buffer.alloc(33)],
    ['format 5', 3, 5],
    ['seq < 0', 5, -1],
    ['mark other than seal', 6, 'open'],
  ];
  for (const [what, i, v] of bad) {
    const values = [...good];
    values[i] = v;
    await expect(tamperAsSuperuser(db.pool, b, values).then(() => what)).rejects.toMatchObject({ code: '23514' });
  }
  // The two-column invariant: format 3 without a seq, and format 2 with a chain.
  await expect(tamperAsSuperuser(db.pool, b, [0, null, Buffer.alloc(32, 1), 3, good[4], null, null])).rejects.toMatchObject({ code: '23514' });
  await expect(tamperAsSuperuser(db.pool, b, [0, null, Buffer.alloc(32, 1), 2, good[4], 0, null])).rejects.toMatchObject({ code: '23514' });
  // The same row with valid values is accepted (so each refusal above is its invariant's).
  await tamperAsSuperuser(db.pool, b, good);
  const e = `INSERT INTO audit_events (kind, decision, details, batch_id) VALUES ($1, 'allowed', $2::jsonb, 1)`;
  await expect(tamperAsSuperuser(db.pool, e, ['nope', '{}'])).rejects.toMatchObject({ code: '23514' });
  await expect(tamperAsSuperuser(db.pool, e, ['tool_call', '[]'])).rejects.toMatchObject({ code: '23514' });
  await tamperAsSuperuser(db.pool, e, ['tool_call', '{}']);
});
