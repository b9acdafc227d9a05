/**
 * The config chain (format 4, migration 20261208220000000_governance-audit-chain_hgov2.sql) on a
 * trail written before it: config events of the format-2 chain keep verifying beside the new
 * chain's, tool-call lanes (format 3) anchor the config chain's head, and a config batch changed or
 * removed from the middle of the new chain is named.
 */
import { migrateDown } from '../../helpers/migrate-down';
import { createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { migrationNames, openControlDb, runMigrations, type ControlDb } from '../../../src/control/db';
import { recordApprovalEvent, recordConfigEvent } from '../../../src/audit/writer';
import { ChainLane, parseAnchors } from '../../../src/audit/chain';
import { verifyAuditChain } from '../../../src/audit/verify';
import { tamperAsSuperuser } from '../../helpers/audit-events';

jest.setTimeout(120_000);

let temp: TempDatabase;
let db: ControlDb;

const down = (count: number) => migrateDown(temp.url, count);

beforeAll(async () => {
  temp = await createTempDatabase('ctl_cfgchain');
  await runMigrations(temp.url);
  db = await openControlDb(temp.url, { migrate: false });
});
afterAll(async () => {
  await db?.close();
  await temp?.drop();
});

test('a trail with config events on the format-2 chain keeps verifying once config events have their own chain', async () => {
  // Before the migration (and those after it): config and approval events share the format-2 chain.
  const names = migrationNames();
  await down(names.length - names.indexOf('20261208220000000_governance-audit-chain_hgov2'));
  await recordConfigEvent(db, { decision: 'role_created', operator: 'ops-old', details: { role: 'reader' } });
  await recordApprovalEvent(db, { approvalId: 'apr_old', action: 'expired', operator: 'system:expiry' });
  expect((await db.pool.query("SELECT format FROM audit_batches ORDER BY id")).rows).toEqual([{ format: 2 }, { format: 2 }]);
  await runMigrations(temp.url);

  await recordConfigEvent(db, { decision: 'role_updated', operator: 'ops-new', details: { role: 'reader' } });
  await recordApprovalEvent(db, { approvalId: 'apr_new', action: 'expired', operator: 'system:expiry' });
  await recordConfigEvent(db, { decision: 'policy_added', operator: 'ops-new', details: { policy: 'p' } });
  const lane = new ChainLane(db.pool);
  await lane.append([], 5000);
  const batches = (await db.pool.query<{ id: string; format: number; prev: string | null; anchors: string | null }>(
    "SELECT id::text, format, encode(prev_hash, 'hex') AS prev, anchors FROM audit_batches ORDER BY id",
  )).rows;
  expect(batches.map((b) => b.format)).toEqual([2, 2, 4, 2, 4, 3]);
  // The config chain starts at its first batch and links format-4 batches only; format 2 goes on from its own.
  const hash = async (id: string) => (await db.pool.query<{ h: string }>("SELECT encode(hash, 'hex') AS h FROM audit_batches WHERE id = $1", [id])).rows[0].h;
  expect(batches[2].prev).toBeNull();
  expect(batches[4].prev).toBe(await hash(batches[2].id));
  expect(batches[3].prev).toBe(await hash(batches[1].id));
  // A lane's genesis anchors the latest format-2 and format-4 batches.
  expect(parseAnchors(batches[5].anchors!)!.map((a) => a.batch)).toEqual([batches[3].id, batches[4].id]);
  const report = await verifyAuditChain(db);
  expect(report).toMatchObject({ ok: true, batchesChecked: 6, eventsChecked: 5, mismatchCount: 0 });

  // A config batch taken out of the middle of the config chain breaks the next one's link.
  await tamperAsSuperuser(db.pool, 'DELETE FROM audit_events WHERE batch_id = $1', [batches[2].id]);
  await tamperAsSuperuser(db.pool, 'DELETE FROM audit_batches WHERE id = $1', [batches[2].id]);
  const broken = await verifyAuditChain(db);
  expect(broken.ok).toBe(false);
  expect(broken.mismatches.map((m) => [m.batchId, m.fault])).toEqual([[batches[4].id, 'broken_link']]);
});
