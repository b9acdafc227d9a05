/**
 * Issue 11, Build 5–6: `interlock audit archive` exports whole monthly partitions (gzip JSON lines)
 * and detaches and drops them, only for the owner; `interlock audit verify` recomputes the hash
 * chain, across the archive boundary given the file, and names the first batch that was changed.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { ADMIN_URL } from '../../helpers/pg';
import { toolCallEvent } from '../../helpers/audit-events';
import { freshControlDb, type TestControlDb } from '../control/control-db';
import { DbAuditSink, recordApprovalEvent } from '../../../src/audit/writer';
import { grantRuntimeRole, openControlDb } from '../../../src/control/db';
import { archiveAuditPartitions } from '../../../src/audit/archive';

const BIN = join(__dirname, '..', '..', '..', 'bin', 'interlock.js');

function run(url: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return runWith({}, url, ...args);
}

/** `run` with extra environment variables (e.g. INTERLOCK_AUDIT_RETENTION_MIN_DAYS). */
function runWith(extra: NodeJS.ProcessEnv, url: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('INTERLOCK_')) env[k] = v;
  Object.assign(env, extra);
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, '--database-url', url, ...args], { env, timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

let t: TestControlDb;
let dir: string;
const monthStart = (back: number) => {
  const n = new Date();
  return new Date(Date.UTC(n.getUTCFullYear(), n.getUTCMonth() - back, 1));
};
const ymd = (d: Date) => d.toISOString().slice(0, 10);
const event = (requestId: string) => toolCallEvent(requestId, { row_count: 2, relations: ['public.album'] });

/** Stores `n` events as one sealed batch committed at `at` (as the migration does for old events). */
async function oldBatch(at: Date, n: number, tag: string): Promise<void> {
  const c = await t.db.pool.connect();
  try {
    await c.query('BEGIN');
    await c.query('SELECT 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE');
    const b = (await c.query("SELECT nextval('audit_batches_id_seq')::text AS b")).rows[0].b;
    for (let i = 0; i < n; i++) {
      await c.query("INSERT INTO audit_events (decision, request_id, time, relations, duration_ms, details, batch_id, recorded_at) VALUES ('refused', $1, $2, '{public.track}', 0.5, '{\"k\": [1, \"x\"]}', $3, $2)", [`${tag}_${i}`, at, b]);
    }
    await c.query('SELECT interlock_audit_seal($1, $2)', [b, at]);
    await c.query('COMMIT');
  } finally {
    c.release();
  }
}

beforeAll(async () => {
  t = await freshControlDb('ops_auditret');
  dir = mkdtempSync(join(tmpdir(), 'il-audit-'));
  await t.db.pool.query('SELECT interlock_audit_ensure_partitions($1::date, 3)', [ymd(monthStart(3))]);
  await oldBatch(new Date(monthStart(3).getTime() + 86_400_000), 3, 'm3a');
  await oldBatch(new Date(monthStart(3).getTime() + 2 * 86_400_000), 2, 'm3b');
  await oldBatch(new Date(monthStart(2).getTime() + 3600_000), 4, 'm2');
  const sink = new DbAuditSink(t.db);
  await Promise.all(Array.from({ length: 30 }, (_, i) => sink.record(event(`now_${i}`))));
  await recordApprovalEvent(t.db, { approvalId: 'apr_x', action: 'approved', operator: 'alice' });
}, 60_000);
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  await t?.cleanup();
});

test('verify passes on an untouched trail', async () => {
  const r = await run(t.temp.url, '--json', 'audit', 'verify');
  expect(r).toMatchObject({ code: 0, stderr: '' });
  expect(JSON.parse(r.stdout)).toMatchObject({ ok: true, eventsChecked: 40, archivedBatchesSkipped: 0, firstMismatch: null });
}, 60_000);

test('only the owner of audit_events can archive', async () => {
  const role = `il_rt_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  try {
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'pw-${role}'`);
    await grantRuntimeRole(t.db, role);
    const u = new URL(t.temp.url);
    u.username = role;
    u.password = `pw-${role}`;
    // (The CLI would first try to migrate, which the runtime role cannot either; call the operation itself.)
    const rt = await openControlDb(u.toString(), { migrate: false });
    try {
      await expect(archiveAuditPartitions(rt, { before: monthStart(1), file: join(dir, 'nope.jsonl.gz') })).rejects.toMatchObject({ kind: 'forbidden', message: expect.stringContaining('only the owner of audit_events') });
    } finally {
      await rt.close();
    }
    expect((await t.db.pool.query('SELECT count(*)::int AS n FROM audit_events')).rows[0].n).toBe(40);
  } finally {
    // DROP OWNED also revokes column and sequence privileges the runtime-role grant gives.
    await t.db.pool.query(`DROP OWNED BY ${role}`);
    await admin.query(`REVOKE ALL ON DATABASE "${t.temp.name}" FROM ${role}`);
    await admin.query(`DROP ROLE ${role}`);
    await admin.end();
  }
}, 60_000);

test('archive refuses the open month without --force and drops nothing (issue 24 item 6)', async () => {
  const before = (await t.db.pool.query('SELECT count(*)::int AS n FROM audit_events')).rows[0].n;
  const r = await run(t.temp.url, 'audit', 'archive', '--before', ymd(monthStart(-1)), '--to', join(dir, 'open.jsonl.gz'));
  expect(r.code).toBe(2);
  expect(r.stderr).toContain(`would archive and drop the open month (${monthStart(0).toISOString().slice(0, 7)}) or later, whose events are still in use: use --before ${ymd(monthStart(0))} or earlier, or add --force`);
  expect(existsSync(join(dir, 'open.jsonl.gz'))).toBe(false);
  expect((await t.db.pool.query('SELECT count(*)::int AS n FROM audit_events')).rows[0].n).toBe(before);
});

test('archive --plan names the partitions and events it would drop and changes nothing; a retention floor refuses newer months without --force (issue 24 item 6)', async () => {
  const before = (await t.db.pool.query('SELECT count(*)::int AS n FROM audit_events')).rows[0].n;
  const file = join(dir, 'plan.jsonl.gz');
  const names = [monthStart(3), monthStart(2)].map((d) => `audit_events_p${d.toISOString().slice(0, 7).replace('-', '')}`);
  const plan = await run(t.temp.url, 'audit', 'archive', '--before', ymd(monthStart(1)), '--to', file, '--plan');
  expect(plan.code).toBe(0);
  expect(plan.stderr).toBe('');
  expect(plan.stdout).toMatch(new RegExp(`^PARTITION +FROM +TO +EVENTS\\n${names[0]} .+\\n${names[1]} .+\\nwould archive 9 event\\(s\\) to ${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}, then detach and drop these partitions \\(plan only: nothing was changed\\)\\n$`));
  expect(existsSync(file)).toBe(false);
  expect((await t.db.pool.query('SELECT count(*)::int AS n FROM audit_events')).rows[0].n).toBe(before);
  // monthStart(1) lies 28–62 days back: a 400-day floor refuses it, and says which setting.
  const floor = await runWith({ INTERLOCK_AUDIT_RETENTION_MIN_DAYS: '400' }, t.temp.url, 'audit', 'archive', '--before', ymd(monthStart(1)), '--to', file);
  expect(floor.code).toBe(2);
  expect(floor.stderr).toContain(`--before ${ymd(monthStart(1))} is inside the retention floor (audit.retention_min_days = 400: nothing newer than`);
  expect(existsSync(file)).toBe(false);
  expect((await t.db.pool.query('SELECT count(*)::int AS n FROM audit_events')).rows[0].n).toBe(before);
});

test('archive exports exactly the detached partitions, drops them, and verify passes across the boundary', async () => {
  const oldIds = (await t.db.pool.query<{ id: string }>('SELECT id::text AS id FROM audit_events WHERE recorded_at < $1 ORDER BY id', [monthStart(1)])).rows.map((r) => r.id);
  expect(oldIds).toHaveLength(9);
  const file = join(dir, 'old.jsonl.gz');
  const r = await run(t.temp.url, '--json', 'audit', 'archive', '--before', ymd(monthStart(1)), '--to', file);
  expect(r).toMatchObject({ code: 0, stderr: '' });
  const out = JSON.parse(r.stdout);
  expect(out.partitions.map((p: { partition: string }) => p.partition)).toEqual([monthStart(3), monthStart(2)].map((d) => `audit_events_p${d.toISOString().slice(0, 7).replace('-', '')}`));
  expect(out.events).toBe(9);
  const lines = gunzipSync(readFileSync(file)).toString('utf8').trim().split('\n').map((l) => JSON.parse(l));
  expect(lines.map((l) => String(l.id))).toEqual(oldIds);
  expect(lines[0]).toMatchObject({ decision: 'refused', request_id: 'm3a_0', relations: ['public.track'], details: { k: [1, 'x'] } });
  for (const p of out.partitions) expect((await t.db.pool.query('SELECT to_regclass($1) AS r', [p.partition])).rows[0].r).toBeNull();
  expect((await t.db.pool.query('SELECT count(*)::int AS n FROM audit_events')).rows[0].n).toBe(31);
  // Rows that stay are still append-only.
  await expect(t.db.pool.query("DELETE FROM audit_events WHERE request_id = 'now_1'")).rejects.toMatchObject({ message: expect.stringContaining('append-only') });

  const without = JSON.parse((await run(t.temp.url, '--json', 'audit', 'verify')).stdout);
  expect(without).toMatchObject({ ok: true, eventsChecked: 31, archivedBatchesSkipped: 3 });
  const across = await run(t.temp.url, '--json', 'audit', 'verify', '--archive', file);
  expect(across.code).toBe(0);
  expect(JSON.parse(across.stdout)).toMatchObject({ ok: true, eventsChecked: 40, archiveEvents: 9, archivedBatchesSkipped: 0 });

  // A changed line in the archive file is found too: its batch is named.
  const forged = join(dir, 'forged.jsonl.gz');
  const changed = lines.map((l) => (l.request_id === 'm2_1' ? { ...l, decision: 'allowed' } : l));
  writeFileSync(forged, gzipSync(changed.map((l) => JSON.stringify(l)).join('\n') + '\n'));
  const bad = await run(t.temp.url, '--json', 'audit', 'verify', '--archive', forged);
  expect(bad.code).toBe(1);
  expect(JSON.parse(bad.stdout).firstMismatch).toEqual({ batchId: String(lines.find((l) => l.request_id === 'm2_1').batch_id), committedAt: expect.any(String), fault: 'hash_mismatch' });
}, 90_000);

test('a superuser changing one row with the triggers disabled: verify names that batch', async () => {
  const victim = (await t.db.pool.query("SELECT id::text AS id, batch_id::text AS b FROM audit_events WHERE request_id = 'now_17'")).rows[0];
  const c = await t.db.pool.connect();
  try {
    await c.query("SET session_replication_role = 'replica'");
    await c.query("UPDATE audit_events SET decision = 'refused', reason_code = 'policy_denied' WHERE id = $1", [victim.id]);
    await c.query("SET session_replication_role = 'origin'");
  } finally {
    c.release();
  }
  const r = await run(t.temp.url, '--json', 'audit', 'verify');
  expect(r.code).toBe(1);
  expect(JSON.parse(r.stdout)).toMatchObject({ ok: false, firstMismatch: { batchId: victim.b, fault: 'hash_mismatch' } });
  expect(r.stderr).toContain(`audit chain does not match at batch ${victim.b}`);
  const human = await run(t.temp.url, 'audit', 'verify');
  expect(human.stdout).toContain(`audit chain BROKEN at batch ${victim.b}`);
}, 60_000);
