/**
 * A second red team's attacks on audit chain format 2 (migration 20261201800000000,
 * src/audit/event-text.ts, src/audit/verify.ts), kept as regressions of the fixes:
 * times moved to the same date BC (to_char prints no era), archive records made up or widened to
 * hide deleted events, relations re-based to another lower bound, an infinite commit time, a very
 * long string (no regex backtracking), a DateStyle the driver cannot read; and the chain's lock,
 * which no role without the owner's rights can take. Not repeated here: the attacks kept in
 * audit-chain-attacks.test.ts and audit-chain-format-2.test.ts.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { appendFormat1, BASE_AUDIT_ROW, tamperAsSuperuser } from '../../helpers/audit-events';
import { freshControlDb, withFreshControlDb, type TestControlDb } from '../control/control-db';
import { appendAuditRows, type AuditRowInput } from '../../../src/audit/writer';
import { archiveAuditPartitions } from '../../../src/audit/archive';
import { verifyAuditChain } from '../../../src/audit/verify';
import { grantRuntimeRole, openControlDb, type ControlDb } from '../../../src/control/db';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { ADMIN_URL } from '../../helpers/pg';

const baseRow = BASE_AUDIT_ROW;
const tamper = (db: ControlDb, sql: string, params: unknown[] = []) => tamperAsSuperuser(db.pool, sql, params);
const v1Append = (db: ControlDb, rows: Partial<AuditRowInput>[]) => appendFormat1(db.pool, rows);

const withDb = withFreshControlDb;

/** Three format-2 batches; returns the middle one. */
async function seed(db: ControlDb, over: Partial<AuditRowInput> = {}): Promise<string> {
  await appendAuditRows(db, [{ ...baseRow, request_id: 'a' }]);
  const b = await appendAuditRows(db, [{ ...baseRow, ...over, request_id: 'b' }, { ...baseRow, ...over, request_id: 'b2' }]);
  await appendAuditRows(db, [{ ...baseRow, request_id: 'c' }]);
  expect(await verifyAuditChain(db)).toMatchObject({ ok: true, firstMismatch: null });
  return b;
}

/** `col` of the rows matched, moved to the same calendar date and time in the year of that number BC (what to_char 'YYYY' prints alike). */
const toBC = (col: string) => `(to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || ' BC')::timestamp AT TIME ZONE 'UTC'`;

// ---------------------------------------------------------------------------------------------
// F1. Timestamps moved to the same date "BC": to_char(…, 'YYYY') prints no era, so the rebuilt text
//     (and the sealed header's committed_at) is unchanged. No hash is recomputed: the external copy
//     of the latest hash that docs/operators.md recommends does not catch it either.
// ---------------------------------------------------------------------------------------------

describe('F1. a timestamp moved 4,051 years back (AD → BC) is detected', () => {
  test('event time of a format-2 batch (and of a format-1 batch)', async () => {
    await withDb('rt2b_bc_time', async (t) => {
      const f1 = await v1Append(t.db, [{ ...baseRow, request_id: 'v1' }]);
      const b = await seed(t.db);
      await tamper(t.db, `UPDATE audit_events SET time = ${toBC('time')} WHERE batch_id = $1 AND request_id = 'b'`, [b]);
      const shown = (await t.db.pool.query<{ t: string }>("SELECT time::text AS t FROM audit_events WHERE request_id = 'b'")).rows[0].t;
      expect(shown).toMatch(/ BC$/); // gone from every "since …" query, SIEM export and time-index scan
      const r = await verifyAuditChain(t.db);
      expect(r).toMatchObject({ ok: false, firstMismatch: { batchId: b, fault: 'hash_mismatch' } });
      // Format 1 hashes to_char(time, 'YYYY-…') too.
      await tamper(t.db, `UPDATE audit_events SET time = ${toBC('time')} WHERE batch_id = $1`, [f1]);
      expect((await verifyAuditChain(t.db)).firstMismatch).toMatchObject({ batchId: f1, fault: 'hash_mismatch' });
    });
  }, 60_000);

  test('a format-2 batch commit time (committed_at with its events\' recorded_at)', async () => {
    await withDb('rt2b_bc_commit', async (t) => {
      const b = await seed(t.db);
      await tamper(t.db, `UPDATE audit_events SET recorded_at = ${toBC('recorded_at')} WHERE batch_id = ${b}; UPDATE audit_batches SET committed_at = ${toBC('committed_at')} WHERE id = ${b}`);
      const shown = (await t.db.pool.query<{ c: string }>('SELECT committed_at::text AS c FROM audit_batches WHERE id = $1', [b])).rows[0].c;
      expect(shown).toMatch(/ BC$/);
      expect(await verifyAuditChain(t.db)).toMatchObject({ ok: false, firstMismatch: { batchId: b, fault: 'hash_mismatch' } });
    });
  }, 60_000);
});

// ---------------------------------------------------------------------------------------------
// F2. audit_archives is not sealed: a forged or widened archive record turns a batch whose events
//     were deleted into "archived, not checked", even when verify is given the real, recorded file.
// ---------------------------------------------------------------------------------------------

describe('F2. deleted events hidden behind an archive record', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'il-rt2b-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('a new audit_archives row covering one batch (no archive ever made)', async () => {
    await withDb('rt2b_forge', async (t) => {
      const b = await seed(t.db);
      await tamper(
        t.db,
        `DELETE FROM audit_events WHERE batch_id = ${b};
         INSERT INTO audit_archives (partition, range_from, range_to, event_count, file_sha256)
           SELECT 'audit_events_p000101', committed_at, committed_at + interval '1 microsecond', 0, 'none' FROM audit_batches WHERE id = ${b}`,
      );
      const r = await verifyAuditChain(t.db);
      // Today: { ok: true, archivedBatchesSkipped: 1 } — the CLI prints "audit chain OK".
      expect(r).toMatchObject({ ok: false, firstMismatch: { batchId: b } });
    });
  }, 60_000);

  test('a whole-month record narrowed to the one batch whose events were deleted (not the month\'s first)', async () => {
    await withDb('rt2b_narrow', async (t) => {
      const b = await seed(t.db);
      await tamper(
        t.db,
        `DELETE FROM audit_events WHERE batch_id = ${b};
         INSERT INTO audit_archives (partition, range_from, range_to, event_count, first_batch_id, last_batch_id, file_sha256)
           SELECT 'audit_events_p' || to_char(committed_at AT TIME ZONE 'UTC', 'YYYYMM'), date_trunc('month', committed_at, 'UTC'),
                  date_trunc('month', committed_at, 'UTC') + interval '1 month', event_count, id, id, 'forged' FROM audit_batches WHERE id = ${b}`,
      );
      expect(await verifyAuditChain(t.db)).toMatchObject({ ok: false, archivedBatchesSkipped: 0, firstMismatch: { batchId: b, fault: 'hash_mismatch' } });
    });
  }, 60_000);

  test('a real archive record widened over a later batch, verified with the real recorded file', async () => {
    await withDb('rt2b_widen', async (t) => {
      await appendAuditRows(t.db, [{ ...baseRow, request_id: 'old1' }]);
      await appendAuditRows(t.db, [{ ...baseRow, request_id: 'old2' }]);
      const n = new Date();
      const file = join(dir, 'real.jsonl.gz');
      await archiveAuditPartitions(t.db, { before: new Date(Date.UTC(n.getUTCFullYear(), n.getUTCMonth() + 1, 1)), file, force: true });
      // Later batches (the month's partition was re-created by the archive).
      await appendAuditRows(t.db, [{ ...baseRow, request_id: 'new1' }]);
      const hidden = await appendAuditRows(t.db, [{ ...baseRow, request_id: 'new2', decision: 'refused', reason_code: 'policy_denied' }]);
      await appendAuditRows(t.db, [{ ...baseRow, request_id: 'new3' }]);
      expect(await verifyAuditChain(t.db, { archiveFile: file })).toMatchObject({ ok: true, batchesChecked: 5 });
      await tamper(
        t.db,
        `DELETE FROM audit_events WHERE batch_id = ${hidden};
         UPDATE audit_archives SET range_to = greatest(range_to, (SELECT committed_at + interval '1 microsecond' FROM audit_batches WHERE id = ${hidden}))`,
      );
      const r = await verifyAuditChain(t.db, { archiveFile: file });
      // Today: { ok: true, archive: { recorded: true }, batchesChecked: 4, archivedBatchesSkipped: 1 }.
      expect(r).toMatchObject({ ok: false, firstMismatch: { batchId: hidden } });
    });
  }, 60_000);
});

// ---------------------------------------------------------------------------------------------
// F3. relations: a text[] with another lower bound ('[5:6]={x,y}') reads back in node-pg as the
//     same JS array, so the change is not found although relations[1] is now NULL.
// ---------------------------------------------------------------------------------------------

test('F3. relations re-based to another lower bound is detected', async () => {
  await withDb('rt2b_bounds', async (t) => {
    const b = await seed(t.db, { relations: ['public.track', 'public.invoice'] });
    await tamper(t.db, "UPDATE audit_events SET relations = '[5:6]={public.track,public.invoice}' WHERE batch_id = $1", [b]);
    const r1 = (await t.db.pool.query<{ r1: string | null }>("SELECT relations[1] AS r1 FROM audit_events WHERE request_id = 'b'")).rows[0].r1;
    expect(r1).toBeNull(); // a SIEM query on relations[1] no longer sees public.track
    expect(await verifyAuditChain(t.db)).toMatchObject({ ok: false, firstMismatch: { batchId: b, fault: 'hash_mismatch' } });
  });
}, 60_000);

// ---------------------------------------------------------------------------------------------
// F4. Availability / false alarms of verify itself
// ---------------------------------------------------------------------------------------------

test('F4a. a batch committed_at set to infinity is reported as that batch, verify does not throw', async () => {
  await withDb('rt2b_inf', async (t) => {
    const b = await seed(t.db);
    await tamper(t.db, "UPDATE audit_batches SET committed_at = 'infinity' WHERE id = $1", [b]);
    // Today: rejects with RangeError: Invalid time value (iso() of the parsed Infinity), and no batch is named.
    await expect(verifyAuditChain(t.db)).resolves.toMatchObject({ ok: false, firstMismatch: { batchId: b } });
  });
}, 60_000);

test('F4b. an untouched event whose details hold one string of 9,000,000 characters verifies (no false alarm)', async () => {
  await withDb('rt2b_bigstr', async (t) => {
    // Stored without complaint by the writer; verify's jsonbNumbersCanonical regex overflows V8's
    // backtrack stack on strings past ~8.4M iterations (or ~1.7M control characters printed as \u00XX),
    // the exception is caught in verifyAuditChain and reported as hash_mismatch.
    const b = await appendAuditRows(t.db, [{ ...baseRow, request_id: 'big', details: { note: 'x'.repeat(9_000_000) } }]);
    const r = await verifyAuditChain(t.db);
    expect(r.firstMismatch).toBeNull();
    expect(r).toMatchObject({ ok: true, batchesChecked: 1 });
    expect(b).toBeDefined();
  });
}, 120_000);

test('F4c. with DateStyle German on the database, a mismatch still names its commit time', async () => {
  await withDb('rt2b_datestyle', async (t) => {
    const b = await seed(t.db);
    await t.db.pool.query(`ALTER DATABASE "${t.temp.name}" SET DateStyle = 'German, DMY'`);
    const db2 = await openControlDb(t.temp.url, { migrate: false });
    try {
      await tamper(t.db, "UPDATE audit_events SET decision = 'refused' WHERE batch_id = $1", [b]);
      const r = await verifyAuditChain(db2);
      // Today: committedAt null (node-pg cannot read German timestamps; the archive file-span check
      // that finds batches cut from a file is silently off the same way).
      expect(r.firstMismatch).toMatchObject({ batchId: b, fault: 'hash_mismatch', committedAt: expect.any(String) });
    } finally {
      await db2.close();
    }
  });
}, 60_000);

test('the chain lock cannot be taken by a role that may only connect, nor by the runtime role: appends go on while they try', async () => {
  await withDb('rt2b_lock', async (t) => {
    const admin = new pg.Client({ connectionString: ADMIN_URL });
    await admin.connect();
    const idle = `il_idle_${randomBytes(4).toString('hex')}`;
    const rt = `il_rt_${randomBytes(4).toString('hex')}`;
    const clients: pg.Client[] = [];
    try {
      await admin.query(`CREATE ROLE ${idle} LOGIN PASSWORD 'x-${idle}'`);
      await admin.query(`CREATE ROLE ${rt} LOGIN PASSWORD 'x-${rt}'`);
      await grantRuntimeRole(t.db, rt);
      for (const role of [idle, rt]) {
        const u = new URL(t.temp.url);
        u.username = role;
        u.password = `x-${role}`;
        const c = new pg.Client({ connectionString: u.toString() });
        await c.connect();
        clients.push(c);
        // The advisory key the chain used before format 2: holding it no longer stalls anything.
        if (role === idle) await c.query('SELECT pg_advisory_lock(7264116111)');
        await c.query('BEGIN');
        await expect(c.query('SELECT 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE')).rejects.toMatchObject({ code: '42501' });
        await c.query('ROLLBACK');
        await c.query('BEGIN');
        await expect(c.query('LOCK TABLE audit_chain_lock IN ACCESS EXCLUSIVE MODE')).rejects.toMatchObject({ code: '42501' });
        await c.query('ROLLBACK');
      }
      // Appends (both formats) commit within their bound while both roles hold what they could take.
      await appendAuditRows(t.db, [{ ...baseRow, request_id: 'during' }], 2000);
      await v1Append(t.db, [{ ...baseRow, request_id: 'during_v1' }]);
      expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, eventsChecked: 2 });
    } finally {
      for (const c of clients) await c.end().catch(() => undefined);
      await t.db.pool.query(`REVOKE ALL ON ALL TABLES IN SCHEMA public FROM ${rt}`);
      await t.db.pool.query(`REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM ${rt}`);
      await t.db.pool.query(`REVOKE ALL ON ALL FUNCTIONS IN SCHEMA public FROM ${rt}`);
      await t.db.pool.query(`REVOKE ALL ON SCHEMA public FROM ${rt}`);
      await admin.query(`REVOKE ALL ON DATABASE "${t.temp.name}" FROM ${rt}`);
      await admin.query(`DROP ROLE IF EXISTS ${idle}`);
      await admin.query(`DROP ROLE IF EXISTS ${rt}`);
      await admin.end();
    }
  });
}, 60_000);

test('events of a missing batch are listed in chain order even when 20 later batches do not match', async () => {
  await withDb('rt2b_orphan', async (t) => {
    const first = await appendAuditRows(t.db, [{ ...baseRow, request_id: 'o0' }]);
    const ids: string[] = [];
    for (let i = 0; i < 22; i++) ids.push(await appendAuditRows(t.db, [{ ...baseRow, request_id: `o${i + 1}` }]));
    await tamper(t.db, `UPDATE audit_events SET decision = 'refused' WHERE batch_id = ANY($1::bigint[])`, [ids]);
    await tamper(t.db, 'DELETE FROM audit_batches WHERE id = $1', [first]);
    const r = await verifyAuditChain(t.db);
    expect(r).toMatchObject({ ok: false, mismatchCount: 23, firstMismatch: { batchId: first, fault: 'events_without_batch' } });
    expect(r.mismatches).toHaveLength(20);
    expect(r.mismatches[0]).toEqual({ batchId: first, committedAt: null, fault: 'events_without_batch' });
  });
}, 60_000);

test('verify checks every batch when their ids cross a power of ten (2…12): a change to batch 5 is found, with and without --since', async () => {
  await withDb('rt2b_digits', async (t) => {
    const ids: string[] = [];
    for (let i = 0; i < 12; i++) ids.push(await appendAuditRows(t.db, [{ ...baseRow, request_id: `d${i}` }]));
    expect(ids[0]).toBe('1');
    await tamper(t.db, "UPDATE audit_events SET decision = 'refused' WHERE batch_id = 5");
    const since = (await t.db.pool.query<{ c: Date }>('SELECT committed_at AS c FROM audit_batches WHERE id = 2')).rows[0].c;
    for (const r of [await verifyAuditChain(t.db), await verifyAuditChain(t.db, { since })]) {
      expect(r).toMatchObject({ ok: false, mismatchCount: 1, firstMismatch: { batchId: '5', fault: 'hash_mismatch' } });
    }
    expect((await verifyAuditChain(t.db, { since })).batchesChecked).toBe(10);
  });
}, 60_000);
