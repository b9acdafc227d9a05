/**
 * The keyed audit chain, format 5 (red team rt45b F1; migration 20261216100000000_audit-keyed-chain_f1,
 * src/audit/chain.ts, src/audit/key.ts, src/audit/verify.ts), on real PostgreSQL: batches tagged with
 * the audit key verify with it, rotation (an old key verifies, the new one tags), a wrong or missing key
 * is named, and once the trail is keyed an unkeyed (format-3) batch is refused by the database and
 * named by verify. The forged chains are written with the runtime role's credential only.
 */
import pg from 'pg';
import pino from 'pino';
import { registerAuditKeyIds } from '../../../src/audit/keyed-trail';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { archiveAuditPartitions } from '../../../src/audit/archive';
import { randomBytes } from 'node:crypto';
import { createGrantedLoginRole, dropLoginRole, freshControlDb, withFreshControlDb, type TestControlDb } from '../control/control-db';
import { grantRuntimeRole, migrationNames, runMigrations } from '../../../src/control/db';
import { ChainLane } from '../../../src/audit/chain';
import { auditKey, auditKeyring, type AuditKey } from '../../../src/audit/key';
import { verifyAuditChain } from '../../../src/audit/verify';
import { requireAuditKey } from '../../../src/cli/audit';
import { migrateDown } from '../../helpers/migrate-down';
import { BASE_AUDIT_ROW, toolCallEvent } from '../../helpers/audit-events';
import { appendAuditRows, DbAuditSink } from '../../../src/audit/writer';
import { callTool, startGovernedEnv } from '../../helpers/governed';

jest.setTimeout(120_000);

const MIGRATION = '20261216100000000_audit-keyed-chain_f1';
const newKey = (): AuditKey => auditKey(randomBytes(32).toString('base64'));
const row = (request: string, extra: Partial<typeof BASE_AUDIT_ROW> = {}) => ({ ...BASE_AUDIT_ROW, request_id: request, ...extra });
const codeOf = (p: Promise<unknown>) => p.then(() => 'ok', (e: { code?: string }) => e.code ?? String(e));
const faults = (r: { mismatches: Array<{ batchId: string; fault: string }> }) => r.mismatches.map((m) => [m.batchId, m.fault]);

describe('format 5 on a fresh trail', () => {
  let t: TestControlDb;
  let role: string;
  let rt: pg.Pool;
  beforeAll(async () => {
    t = await freshControlDb('keyed_chain');
    const granted = await createGrantedLoginRole(t, 'il_rt', grantRuntimeRole);
    role = granted.role;
    rt = new pg.Pool({ connectionString: granted.url, max: 1 });
  });
  afterAll(async () => {
    await rt?.end();
    if (role) await dropLoginRole(t, role);
    await t?.cleanup();
  });

  test('the runtime role writes keyed batches; rotation: the old key verifies, the new key tags; a missing or wrong key is named', async () => {
    const k1 = newKey();
    const k2 = newKey();
    const a = new ChainLane(rt, k1);
    const a0 = await a.append([row('r1')], 5000);
    const a1 = await a.append([row('r2'), row('r3')], 5000);
    await a.append([], 5000, 'seal');
    const b = new ChainLane(rt, k2);
    const b0 = await b.append([row('r4')], 5000);
    const stored = await t.db.pool.query<{ id: string; format: number; mac_key_id: string | null }>('SELECT id::text, format, mac_key_id FROM audit_batches ORDER BY id');
    expect(stored.rows.map((x) => [x.format, x.mac_key_id])).toEqual([[5, k1.id], [5, k1.id], [5, k1.id], [5, k2.id]]);
    // Rotated: k2 tags, k1 verifies.
    const both = auditKeyring({ key: k2.secret.toString(), previous_keys: [k1.secret.toString()] });
    expect(both.signing?.id).toBe(k2.id);
    expect(await verifyAuditChain(t.db, { keys: both.byId })).toMatchObject({ ok: true, batchesChecked: 4, eventsChecked: 4, chains: 2, openChains: 1, keyed: { batches: 4, authenticated: 4, unauthenticated: 0, fault: null, keyedSince: a0 } });
    // The old key not given: its batches are named unknown_key.
    const onlyNew = await verifyAuditChain(t.db, { keys: auditKeyring({ key: k2.secret.toString() }).byId });
    expect(onlyNew).toMatchObject({ ok: false, mismatchCount: 3, keyed: { batches: 4, authenticated: 1 } });
    expect(faults(onlyNew).slice(0, 2)).toEqual([[a0, 'unknown_key'], [a1, 'unknown_key']]);
    // Another key of 32 bytes: every batch unknown.
    const k3 = newKey();
    expect(await verifyAuditChain(t.db, { keys: new Map([[k3.id, k3]]) })).toMatchObject({ ok: false, mismatchCount: 4, firstMismatch: { batchId: a0, fault: 'unknown_key' } });
    // No key at all: the links are checked, the tags cannot be; not ok, and said why.
    expect(await verifyAuditChain(t.db)).toMatchObject({ ok: false, mismatchCount: 0, firstMismatch: null, batchesChecked: 0, keyed: { batches: 4, authenticated: 0, unauthenticated: 4, fault: 'key_needed' } });
    // Keyed batches do not key the trail (red team rt46b G2): the owner does, registering the key ids
    // (`interlock audit require-key`); from then on an unkeyed batch is refused, even the owner's.
    expect((await t.db.pool.query('SELECT since_batch::text AS s, set_by FROM audit_keyed_trail')).rows).toEqual([]);
    expect(await requireAuditKey(t.db, both)).toEqual({ already: false, sinceBatch: b0, setBy: 'require_key', keyIds: [k1.id, k2.id].sort(), added: [k1.id, k2.id].sort() });
    expect((await t.db.pool.query('SELECT since_batch::text AS s, set_by, key_ids FROM audit_keyed_trail')).rows).toEqual([{ s: b0, set_by: 'require_key', key_ids: [k1.id, k2.id].sort() }]);
    // A chain under a key not registered is refused at its genesis.
    expect(await codeOf(new ChainLane(rt, k3).append([row('r5k')], 5000))).toBe('42501');
    expect(await codeOf(new ChainLane(rt).append([row('r5')], 5000))).toBe('42501');
    expect(await codeOf(new ChainLane(t.db.pool).append([row('r6')], 5000))).toBe('42501');
    // The runtime role cannot lift it, nor place a batch before the mark: ids are the owner's sequence's.
    expect(await codeOf(rt.query("INSERT INTO audit_batches (id, committed_at, event_count, hash, format, chain_id, seq) VALUES (1, now(), 0, $1, 3, gen_random_uuid(), 0)", [Buffer.alloc(32, 1)]))).toBe('42501');
    expect(await codeOf(rt.query("SELECT setval('audit_batches_id_seq', 1)"))).toBe('42501');
    expect(await codeOf(rt.query("INSERT INTO audit_keyed_trail (only_row, since_batch, set_by, key_ids) VALUES (true, 0, 'require_key', '{0123456789abcdef}')"))).toBe('42501');
    expect(await codeOf(rt.query("UPDATE audit_keyed_trail SET key_ids = key_ids || '{0123456789abcdef}'::text[]"))).toBe('42501');
    // Nor remove the mark or its trigger.
    expect(await codeOf(rt.query('DELETE FROM audit_keyed_trail'))).toBe('42501');
    expect(await codeOf(rt.query('ALTER TABLE audit_batches DISABLE TRIGGER audit_batches_unkeyed_refused'))).toBe('42501');
    expect((await t.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM audit_events WHERE request_id IN ('r5', 'r6')")).rows[0].n).toBe(0);
    // A format-3 batch that got in anyway (triggers off: only a superuser can) is named unkeyed_batch.
    const su = new pg.Pool({ connectionString: t.temp.url, max: 1 });
    let g0: string;
    try {
      await su.query("SET session_replication_role = 'replica'");
      g0 = await new ChainLane(su).append([row('r7')], 5000);
    } finally {
      await su.end();
    }
    expect(faults(await verifyAuditChain(t.db, { keys: both.byId }))).toEqual([[g0, 'unkeyed_batch']]);
    // The format-2 append function the runtime role may call (approval events) is no way round: a tool
    // call other than a queued write's in such a batch is named too, and so is a queued write's whose
    // approval id names no approval of its identity (red team rt46b G1; queueApproval stores the
    // approval row in the same transaction: test/integration/attacks/rt46b-redteam.test.ts).
    const loose = await appendAuditRows(rt, [row('r8', { decision: 'allowed' })]);
    const queued = await appendAuditRows(rt, [row('r9', { decision: 'queued', reason_code: 'approval_required', approval_id: 'apr_0123456789abcdef0123' })]);
    expect(faults(await verifyAuditChain(t.db, { keys: both.byId }))).toEqual([[g0, 'unkeyed_batch'], [loose, 'unkeyed_batch'], [queued, 'unkeyed_batch']]);
    expect(BigInt(queued) > BigInt(loose)).toBe(true);
  });
});

describe('an unkeyed trail becoming keyed', () => {
  let t: TestControlDb;
  beforeAll(async () => {
    t = await freshControlDb('keyed_upgrade');
  });
  afterAll(async () => {
    await t?.cleanup();
  });

  test('the migration keeps every event (down and up); `audit require-key` keys a trail before its first keyed batch; down is refused once keyed batches exist', async () => {
    const names = migrationNames();
    expect(names).toContain(MIGRATION);
    const back = names.length - names.indexOf(MIGRATION);
    const old = new ChainLane(t.db.pool);
    const o0 = await old.append([row('u1')], 5000);
    await old.append([row('u2')], 5000);
    const trail = async () => (await t.db.pool.query<{ t: string }>('SELECT row_to_json(e)::text AS t FROM audit_events e ORDER BY id')).rows.map((x) => x.t);
    const before = await trail();
    await migrateDown(t.temp.url, back);
    expect((await t.db.pool.query("SELECT to_regclass('audit_keyed_trail') AS r")).rows).toEqual([{ r: null }]);
    expect(await trail()).toEqual(before);
    expect(await verifyAuditChain(t.db)).toMatchObject({ ok: true, batchesChecked: 2 });
    expect(await runMigrations(t.temp.url)).toEqual(names.slice(names.indexOf(MIGRATION)));
    expect(await trail()).toEqual(before);
    // Unkeyed batches still go in until the trail is keyed.
    const o2 = await old.append([row('u3')], 5000);
    const k = newKey();
    const ring = auditKeyring({ key: k.secret.toString() });
    // No key configured: nothing to register.
    await expect(requireAuditKey(t.db, auditKeyring(undefined))).rejects.toThrow(/set audit\.key \(INTERLOCK_AUDIT_KEY\) first/);
    expect(await requireAuditKey(t.db, ring, { operator: 'ops-ann' })).toEqual({ already: false, sinceBatch: o2, setBy: 'require_key', keyIds: [k.id], added: [k.id] });
    expect(await requireAuditKey(t.db, ring, { operator: 'ops-ann' })).toEqual({ already: true, sinceBatch: o2, setBy: 'require_key', keyIds: [k.id], added: [] });
    // A registration that adds an id is a config event in the operator's name; one that adds none records nothing (nu47: a rotation left no trace).
    const registered = await t.db.pool.query("SELECT kind, action, operator, details FROM audit_events WHERE decision = 'audit_key_registered'");
    expect(registered.rows).toEqual([{ kind: 'config', action: 'config', operator: 'ops-ann', details: { keyIds: [k.id], setBy: 'require_key', sinceBatch: o2 } }]);
    expect(await codeOf(old.append([row('u4')], 5000))).toBe('42501');
    expect(await codeOf(new ChainLane(t.db.pool, newKey()).append([row('u4k')], 5000))).toBe('42501');
    const keyed = new ChainLane(t.db.pool, k);
    const k0 = await keyed.append([row('u5')], 5000);
    // The keyed batch leaves the row as it was.
    expect((await t.db.pool.query('SELECT since_batch::text AS s, set_by, key_ids FROM audit_keyed_trail')).rows).toEqual([{ s: o2, set_by: 'require_key', key_ids: [k.id] }]);
    expect(await verifyAuditChain(t.db, { keys: new Map([[k.id, k]]) })).toMatchObject({ ok: true, batchesChecked: 5, chains: 2, keyed: { batches: 1, authenticated: 1, keyedSince: o2 } }); // (one: the config event audit_key_registered)
    expect(BigInt(k0) > BigInt(o2) && BigInt(o0) < BigInt(o2)).toBe(true);
    await expect(migrateDown(t.temp.url, back)).rejects.toThrow(/format-5 \(keyed\) batches/);
  });
});

describe('the writer with a key', () => {
  test('GroupCommitAuditSink given the key writes format 5 on every lane and seals them; verify with the key says ok', async () => {
    await withFreshControlDb('keyed_writer', async (t) => {
      const k = newKey();
      const sink = new DbAuditSink(t.db, undefined, { key: k, lanes: 2 });
      await Promise.all(Array.from({ length: 6 }, (_, i) => sink.record(toolCallEvent(`req_w${i}`))));
      await sink.close();
      expect((await t.db.pool.query('SELECT DISTINCT format, mac_key_id FROM audit_batches')).rows).toEqual([{ format: 5, mac_key_id: k.id }]);
      expect(await verifyAuditChain(t.db, { keys: new Map([[k.id, k]]) })).toMatchObject({ ok: true, eventsChecked: 6, openChains: 0, mismatchCount: 0, keyed: { unauthenticated: 0, fault: null } });
    });
  });
});

describe('an archived keyed month', () => {
  test('keyed batches archived to a file verify from it with the key; an edited line is named', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'il-keyed-arch-'));
    try {
      await withFreshControlDb('keyed_archive', async (t) => {
        const k = newKey();
        const keys = new Map([[k.id, k]]);
        const lane = new ChainLane(t.db.pool, k);
        await lane.append([row('arch-a', { time: new Date().toISOString() })], 5000);
        const b1 = await lane.append([row('arch-b', { time: new Date().toISOString() })], 5000);
        await lane.append([], 5000, 'seal');
        const n = new Date();
        const file = join(dir, 'a.jsonl.gz');
        await archiveAuditPartitions(t.db, { before: new Date(Date.UTC(n.getUTCFullYear(), n.getUTCMonth() + 1, 1)), file, force: true });
        expect(await verifyAuditChain(t.db, { keys })).toMatchObject({ ok: true, archivedBatchesSkipped: 2, keyed: { batches: 3, authenticated: 1 } });
        expect(await verifyAuditChain(t.db, { keys, archiveFile: file })).toMatchObject({ ok: true, batchesChecked: 3, eventsChecked: 2, keyed: { authenticated: 3 } });
        const edited = join(dir, 'b.jsonl.gz');
        const lines = gunzipSync(readFileSync(file)).toString('utf8').split('\n').filter(Boolean);
        writeFileSync(edited, gzipSync(lines.map((l) => l.replace('"decision":"allowed"', l.includes('"arch-b"') ? '"decision":"denied"' : '"decision":"allowed"')).join('\n') + '\n'));
        expect(await verifyAuditChain(t.db, { keys, archiveFile: edited })).toMatchObject({ ok: false, firstMismatch: { batchId: b1, fault: 'hash_mismatch' }, archive: { recorded: false } });
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a governed gateway with a key (red team rt46b G1, G2)', () => {
  // Shown failing before task f2: the queued write's tool-call event had no audit_tag, and the gateway registered no key id.
  test('owning the trail, it keys it at start; a queued write\'s tool-call event carries its tag, and verify with the key says ok', async () => {
    const secret = randomBytes(32).toString('base64');
    const k = auditKey(secret);
    const env = await startGovernedEnv({ config: { audit: { key: secret } } });
    try {
      expect((await env.db.pool.query('SELECT set_by, key_ids FROM audit_keyed_trail')).rows).toEqual([{ set_by: 'gateway_start', key_ids: [k.id] }]);
      const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'INSERT INTO playlist (name) VALUES ($1)', params: ['Keyed'] }, env.apiKey);
      const approvalId = (r.body.result.structuredContent as { approval_id: string }).approval_id;
      const ev = await env.db.pool.query<{ format: number; tag: { key_id: string } }>("SELECT b.format, e.details->'audit_tag' AS tag FROM audit_events e JOIN audit_batches b ON b.id = e.batch_id WHERE e.kind = 'tool_call' AND e.approval_id = $1", [approvalId]);
      expect(ev.rows).toEqual([{ format: 2, tag: { key_id: k.id, tag: expect.stringMatching(/^[0-9a-f]{64}$/) } }]);
      expect(await verifyAuditChain(env.db, { keys: new Map([[k.id, k]]) })).toMatchObject({ ok: true, mismatchCount: 0, keyed: { unauthenticated: 0 } });
    } finally {
      await env.close();
    }
  });
});

describe('a governed gateway without a key on a keyed trail (nu46)', () => {
  // Shown failing before: /readyz said {status: ready} while every call was refused, and the log said only "audit batch not committed" (42501).
  test('every governed call fails closed, /readyz says audit_key_refused, one error line names the fix; once the trail accepts it again it is ready', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const sink = { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) };
    const env = await startGovernedEnv({ logger: pino({ level: 'info' }, sink) });
    try {
      const ready = async () => {
        const r = await fetch(`${env.url.replace(/\/mcp$/, '')}/readyz`);
        return [r.status, await r.json()];
      };
      expect(await ready()).toEqual([200, { status: 'ready' }]);
      // The owner keys the trail with another key's id: this keyless gateway's format-3 batches are refused from now on.
      await registerAuditKeyIds(env.db.pool, [newKey().id], 'require_key');
      // The agent is not told to try again later (task low47 item 2: shown failing before, it was): the cause is the gateway's configuration.
      const message = 'The call could not be recorded in the audit trail, so no result is returned: the audit trail refuses this gateway\'s audit key, a configuration fault an operator must fix. Repeating the call will not help until then; tell the operator.';
      for (const i of [1, 2]) {
        const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: `SELECT ${i} AS n` }, env.apiKey);
        expect(r.body.result.structuredContent).toEqual({ status: 'unavailable', code: 'audit_unavailable', message, request_id: expect.any(String) });
      }
      expect(await ready()).toEqual([503, { status: 'not_ready', reason: 'audit_key_refused' }]);
      const refusals = lines.filter((l) => l.component === 'audit' && l.reason === 'no_key');
      expect(refusals).toHaveLength(1);
      expect(refusals[0]).toMatchObject({ level: 50, code: '42501', keyId: null });
      expect(String(refusals[0].msg)).toContain('until the gateway runs with the audit key (audit.key / INTERLOCK_AUDIT_KEY');
      // The owner lifts the mark (docs: a trail keyed by mistake): the next batch commits and the gateway is ready again.
      await env.db.pool.query('DELETE FROM audit_keyed_trail');
      const ok = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 3 AS n' }, env.apiKey);
      expect(ok.body.result.structuredContent).toMatchObject({ rows: [{ n: 3 }] });
      expect(await ready()).toEqual([200, { status: 'ready' }]);
    } finally {
      await env.close();
    }
  });
});
