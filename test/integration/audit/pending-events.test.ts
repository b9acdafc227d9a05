/**
 * Pending audit events (task hchain, migration 20261211140000000_pending-audit-events_hchain): what
 * a token sign-in records while another transaction holds the format-2 chain's lock waits in
 * audit_pending_events; the next append on that chain chains it first, retention never drops it,
 * and the migration's down step chains it before the table goes.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { runner } from 'node-pg-migrate';
import pg from 'pg';
import { freshControlDb, type TestControlDb } from '../control/control-db';
import { MIGRATIONS_DIR, MIGRATIONS_TABLE, migrationNames, runMigrations } from '../../../src/control/db';
import { recordApprovalEvent, searchAudit, tailAudit } from '../../../src/audit/writer';
import { archiveAuditPartitions } from '../../../src/audit/archive';
import { verifyAuditChain } from '../../../src/audit/verify';
import { sealPendingAuditEvents } from '../../../src/audit/pending';
import { commitWhenWaitedOn, untilChainLockHeld } from '../../helpers/chain-lock';

jest.setTimeout(120_000);

const ISSUER = 'https://idp.pending.example';
let t: TestControlDb;

beforeAll(async () => {
  t = await freshControlDb('pending_ev');
});
afterAll(async () => {
  await t?.cleanup();
});

const pendingCount = async () => (await t.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM audit_pending_events')).rows[0].n;

/** Runs `fn` while another session holds the format-2 chain's lock row; the lock is released (committed) afterwards. */
async function whileChainHeld<T>(fn: () => Promise<T>): Promise<T> {
  const holder = await t.db.pool.connect();
  try {
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE');
    const r = await fn();
    await holder.query('COMMIT');
    return r;
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    holder.release();
  }
}

/** Provisions a token identity named `name` (owner's session; the function is the runtime's path). */
async function provision(name: string): Promise<void> {
  await t.db.pool.query('SELECT interlock_provision_token_identity($1, $2, $3, $4)', [`idn_${randomBytes(10).toString('hex')}`, name, ISSUER, `sub-${name}`]);
}

// Task hfix item 2 (migration 20261212101000000_chain-lock-bounded-wait_hfix): two sign-ins at once.
// The first holds the chain's lock until its commit; the second reaches the lock while it is held.
// It waits (at most 50 ms) instead of skipping it, so both events are chained and none is left
// pending. The first's transaction commits as soon as the second waits on it (the DO block watches
// pg_locks for a waiter on its own transaction id; at most 5 s), which stands for the few ms of an
// ordinary commit. Before, the second deferred its event at once (FOR UPDATE SKIP LOCKED).
test('two sign-ins at once, the first committing while the second waits for the chain: both chained, none pending', async () => {
  const before = await pendingCount();
  expect(before).toBe(0);
  const first = await t.db.pool.connect();
  try {
    const pid = (await first.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    const id1 = `idn_${randomBytes(10).toString('hex')}`;
    const firstDone = commitWhenWaitedOn(first, `SELECT interlock_provision_token_identity('${id1}', 'pair-first', '${ISSUER}', 'sub-pair-first')`);
    // The first holds the chain's lock row before the second starts.
    await untilChainLockHeld(t.db.pool, pid);
    await provision('pair-second');
    await firstDone;
  } finally {
    await first.query('ROLLBACK').catch(() => undefined);
    first.release();
  }
  expect(await pendingCount()).toBe(0);
  const chained = await t.db.pool.query("SELECT details->>'identity' AS identity FROM audit_events WHERE kind = 'config' AND decision = 'identity_created' AND details->>'identity' LIKE 'pair-%' ORDER BY id");
  expect(chained.rows.map((r) => r.identity)).toEqual(['pair-first', 'pair-second']);
  expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, firstMismatch: null, pending: { events: 0, oldest: null, stale: 0, fault: null } });
});

test('the next approval event chains the pending events first, in a batch of their own before its own', async () => {
  await whileChainHeld(async () => {
    await provision('pend-a');
    await provision('pend-b');
  });
  expect(await pendingCount()).toBe(2);
  await recordApprovalEvent(t.db, { approvalId: 'apr_pending', action: 'expired', operator: 'system:expiry' });
  expect(await pendingCount()).toBe(0);
  const rows = (
    await t.db.pool.query("SELECT batch_id::text AS b, kind, details->>'identity' AS identity FROM audit_events WHERE (kind = 'config' AND details->>'identity' LIKE 'pend-%') OR approval_id = 'apr_pending' ORDER BY id")
  ).rows;
  expect(rows.map((r) => [r.kind, r.identity])).toEqual([['config', 'pend-a'], ['config', 'pend-b'], ['approval', null]]);
  expect(rows[0].b).toBe(rows[1].b);
  expect(BigInt(rows[2].b)).toBeGreaterThan(BigInt(rows[1].b));
  expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, firstMismatch: null, pending: { events: 0, oldest: null, stale: 0, fault: null } });
});

test('search and tail show pending events first / last, marked unsealed with a "p" id; chained, they show as any event', async () => {
  await whileChainHeld(() => provision('pend-search'));
  const pid = (await t.db.pool.query<{ id: string }>('SELECT id::text FROM audit_pending_events')).rows.map((r) => r.id);
  expect(pid).toHaveLength(1);
  const idn = (await t.db.pool.query<{ id: string }>("SELECT id FROM identities WHERE name = 'pend-search'")).rows[0].id;
  const page = await searchAudit(t.db, { limit: 2 });
  expect(page.events.map((e) => [e.id, e.decision, e.unsealed ?? false])).toEqual([[`p${pid[0]}`, 'identity_created', true], [expect.stringMatching(/^[0-9]+$/), expect.any(String), false]]);
  expect(page.events[0]).toMatchObject({ kind: 'config', identityId: idn, operator: 'system', details: { identity: 'pend-search', identityId: idn, issuer: ISSUER } });
  expect(page.nextCursor).toBe(page.events[1].id);
  // Filters apply to pending events too; a cursor pages through chained events only.
  expect((await searchAudit(t.db, { identityId: idn })).events.map((e) => e.id)).toEqual([`p${pid[0]}`]);
  expect((await searchAudit(t.db, { kind: 'approval', limit: 1 })).events.map((e) => e.unsealed ?? false)).toEqual([false]);
  expect((await searchAudit(t.db, { cursor: page.nextCursor })).events.some((e) => e.unsealed)).toBe(false);
  // A page of pending events only: its cursor starts the chained events.
  const only = await searchAudit(t.db, { limit: 1 });
  expect(only.events.map((e) => e.id)).toEqual([`p${pid[0]}`]);
  const top = (await t.db.pool.query<{ id: string }>('SELECT max(id)::text AS id FROM audit_events')).rows[0].id;
  expect((await searchAudit(t.db, { limit: 1, cursor: only.nextCursor })).events.map((e) => e.id)).toEqual([top]);
  const tail = await tailAudit(t.db, 3);
  expect(tail.map((e) => e.unsealed ?? false)).toEqual([false, false, true]);
  expect(await sealPendingAuditEvents(t.db)).toBe(1);
  const after = await searchAudit(t.db, { identityId: idn });
  expect(after.events.map((e) => [e.decision, e.unsealed ?? false, /^[0-9]+$/.test(e.id)])).toEqual([['identity_created', false, true]]);
});

test('retention: archiving old months keeps a pending event of those months; sealed, it is chained now and verifies across the archive', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'il-pending-'));
  try {
    const monthStart = (back: number) => {
      const n = new Date();
      return new Date(Date.UTC(n.getUTCFullYear(), n.getUTCMonth() - back, 1));
    };
    await t.db.pool.query('SELECT interlock_audit_ensure_partitions($1::date, 3)', [monthStart(3).toISOString().slice(0, 10)]);
    // An old month holding one sealed batch (as the retention tests store old events).
    const old = new Date(monthStart(3).getTime() + 86_400_000);
    const c = await t.db.pool.connect();
    try {
      await c.query('BEGIN');
      await c.query('SELECT 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE');
      const b = (await c.query("SELECT nextval('audit_batches_id_seq')::text AS b")).rows[0].b;
      await c.query("INSERT INTO audit_events (decision, request_id, time, details, batch_id, recorded_at) VALUES ('refused', 'old_0', $1, '{}', $2, $1)", [old, b]);
      await c.query('SELECT interlock_audit_seal($1, $2)', [b, old]);
      await c.query('COMMIT');
    } finally {
      c.release();
    }
    await whileChainHeld(() => provision('pend-old'));
    // The pending event has waited since that old month (its time moved back, as the owner can).
    // (The text stays canonical: only the first "time" value is replaced.)
    await t.db.pool.query(
      "UPDATE audit_pending_events SET time = $1, event = regexp_replace(event, '\"time\":\"[^\"]*\"', '\"time\":' || to_json(to_char($1::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'))::text)",
      [new Date(old.getTime() + 3600_000)],
    );
    const stale = await verifyAuditChain(t.db);
    expect({ ok: stale.ok, first: stale.firstMismatch, pending: stale.pending }).toEqual({ ok: false, first: null, pending: { events: 1, oldest: new Date(old.getTime() + 3600_000).toISOString(), stale: 1, fault: 'pending_stale' } });
    const file = join(dir, 'old.jsonl.gz');
    const archived = await archiveAuditPartitions(t.db, { before: monthStart(1), file });
    expect(archived.events).toBe(1);
    expect(await pendingCount()).toBe(1);
    expect(await sealPendingAuditEvents(t.db)).toBe(1);
    const chained = (await t.db.pool.query("SELECT time, recorded_at FROM audit_events WHERE kind = 'config' AND details->>'identity' = 'pend-old'")).rows;
    expect(chained.map((r) => [r.time.toISOString(), r.recorded_at.getTime() > Date.now() - 60_000])).toEqual([[new Date(old.getTime() + 3600_000).toISOString(), true]]);
    expect(await verifyAuditChain(t.db, { archiveFile: file })).toMatchObject({ ok: true, firstMismatch: null, archivedBatchesSkipped: 0, pending: { events: 0, fault: null } });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the migration's down step chains pending events before dropping the table; up again works", async () => {
  await whileChainHeld(() => provision('pend-down'));
  expect(await pendingCount()).toBe(1);
  const c = new pg.Client({ connectionString: t.temp.url });
  await c.connect();
  const quiet = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };
  const names = migrationNames();
  // hrr's (the appends' READ COMMITTED refusal restores hgov2's and hchain's bodies), rt40's (the
  // READ COMMITTED guard restores hfix's body), hfix's two (the bounded wait restores hchain's SKIP
  // LOCKED body) and rt39's bounded drain (20261211230000000) are undone first, then hchain's; later
  // migrations (e.g. hpriv's claim-rule function) are undone before them.
  const from = names.indexOf('20261211140000000_pending-audit-events_hchain');
  expect(names.slice(from, from + 6)).toEqual([
    '20261211140000000_pending-audit-events_hchain',
    '20261211230000000_pending-audit-chunks_rt39',
    '20261212100000000_identity-subjects-notify_hfix',
    '20261212101000000_chain-lock-bounded-wait_hfix',
    '20261212140000000_chain-lock-read-committed_rt40',
    '20261212150000000_audit-append-read-committed_hrr',
  ]);
  try {
    await runner({ dbClient: c, dir: MIGRATIONS_DIR, migrationsTable: MIGRATIONS_TABLE, direction: 'down', count: names.length - from, checkOrder: true, singleTransaction: true, logger: quiet });
  } finally {
    await c.end();
  }
  expect((await t.db.pool.query("SELECT to_regclass('audit_pending_events') AS r")).rows[0].r).toBeNull();
  expect((await t.db.pool.query("SELECT count(*)::int AS n FROM audit_events WHERE kind = 'config' AND details->>'identity' = 'pend-down'")).rows[0].n).toBe(1);
  expect((await t.db.pool.query("SELECT to_regprocedure('interlock_audit_seal_pending()') AS r")).rows[0].r).toBeNull();
  expect((await t.db.pool.query("SELECT to_regprocedure('interlock_audit_try_chain_lock()') AS r")).rows[0].r).toBeNull();
  await runMigrations(t.temp.url);
  expect(await pendingCount()).toBe(0);
  expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, firstMismatch: null });
});
