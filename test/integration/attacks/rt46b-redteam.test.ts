/**
 * Red team rt46b: the keyed audit chain (format 5; migration 20261216100000000_audit-keyed-chain_f1,
 * src/audit/key.ts, chain.ts, verify.ts), attacked on real PostgreSQL with the runtime role's
 * credential only (grantRuntimeRole, as `interlock db grant-runtime-role` sets it up), without the key.
 *
 * Each test is one attack; its name says whether it is a finding (severity, fixed or open:
 * test.failing while open) or an attack the trail withstands ("held").
 *
 *   G1 medium, fixed (task f2): a tool call stored as a queued write's (decision queued) through
 *      interlock_audit_append_v2 (format 2) verified on a keyed trail: identity, SQL, time and approval
 *      id the thief's, the approval row inserted by the thief too. Now the gateway tags a queued write's
 *      tool-call event under the audit key (details.audit_tag, src/audit/call-tag.ts) and verify with
 *      the key names one without a valid tag; a copy of a tagged event stored again is inserted_batch.
 *   G2 medium (availability), fixed (task f2): a keyed genesis forged by the runtime role (any tag, any
 *      key id) keyed an unkeyed trail, and every gateway without a key failed closed (42501). Now only
 *      the owner keys the trail (`interlock audit require-key`, registering the key ids; audit_keyed_trail).
 *   G3 low, fixed: a key of 32 bytes but one repeated character (or a short repeated pattern) was accepted.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { createGrantedLoginRole, dropLoginRole, freshControlDb, type TestControlDb } from '../control/control-db';
import { grantRuntimeRole } from '../../../src/control/db';
import { ChainLane } from '../../../src/audit/chain';
import { auditKey, type AuditKey } from '../../../src/audit/key';
import { verifyAuditChain } from '../../../src/audit/verify';
import { appendAuditRows } from '../../../src/audit/writer';
import { ValidationError } from '../../../src/control/errors';
import { BASE_AUDIT_ROW, toolCallEvent } from '../../helpers/audit-events';
import { tagCallRow } from '../../../src/audit/call-tag';
import { rowFromStored, type StoredEventV2 } from '../../../src/audit/event-text';
import { queueApproval } from '../../../src/control/approvals';
import { registerAuditKeyIds } from '../../../src/audit/keyed-trail';

jest.setTimeout(180_000);

const newKey = (): AuditKey => auditKey(randomBytes(32).toString('base64'));
const row = (request: string, extra: Partial<typeof BASE_AUDIT_ROW> = {}) => ({ ...BASE_AUDIT_ROW, request_id: request, ...extra });
/** The SQLSTATE `sql` fails with on `c` ('ok' when it succeeds). */
const codeOf = (c: { query: (s: string, p?: unknown[]) => Promise<unknown> }, sql: string, params: unknown[] = []) =>
  c.query(sql, params).then(() => 'ok', (e: { code?: string }) => e.code ?? String(e));
const faults = (r: { mismatches: Array<{ batchId: string; fault: string }> }) => r.mismatches.map((m) => [m.batchId, m.fault]);

const BATCH_COLS = 'committed_at, event_count, prev_hash, hash, format, chain_id, seq, mark, anchors, mac_key_id';
const EVENT_COLS = `kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version, decision,
  reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details`;

/**
 * As the runtime role (`rt`): a copy of batch `src` (its header and stored tag, with `set` SQL
 * expressions replacing columns) and of its events, pointed at the copy; returns the copy's id.
 */
async function replay(rt: pg.Pool, src: string, set: Record<string, string> = {}): Promise<string> {
  const cols = BATCH_COLS.split(', ');
  const sel = cols.map((c) => set[c] ?? c).join(', ');
  const c = await rt.connect();
  try {
    await c.query('BEGIN');
    const b = await c.query<{ id: string }>(`INSERT INTO audit_batches (${BATCH_COLS}) SELECT ${sel} FROM audit_batches WHERE id = $1 RETURNING id::text`, [src]);
    const id = b.rows[0].id;
    await c.query(`INSERT INTO audit_events (${EVENT_COLS}, batch_id, recorded_at) SELECT ${EVENT_COLS}, $2, recorded_at FROM audit_events WHERE batch_id = $1 ORDER BY id`, [src, id]);
    await c.query('COMMIT');
    return id;
  } catch (err) {
    await c.query('ROLLBACK');
    throw err;
  } finally {
    c.release();
  }
}

describe('a stolen runtime credential against a keyed trail', () => {
  let t: TestControlDb;
  let role: string;
  let rt: pg.Pool;
  // A fresh trail for each attack (the trail refuses TRUNCATE, even the owner's).
  beforeEach(async () => {
    t = await freshControlDb('rt46b');
    const granted = await createGrantedLoginRole(t, 'il_rt46b', grantRuntimeRole);
    role = granted.role;
    rt = new pg.Pool({ connectionString: granted.url, max: 2 });
  });
  afterEach(async () => {
    await rt?.end();
    if (role) await dropLoginRole(t, role);
    await t?.cleanup();
  });

  test('held: a real keyed batch replayed with its tag (same place, another chain, another seq, another commit time, moved before a seal), or events added to one, is named by verify with the key', async () => {
    const k = newKey();
    const keys = new Map([[k.id, k]]);
    const lane = new ChainLane(rt, k);
    const b0 = await lane.append([row('h1')], 5000);
    const b1 = await lane.append([row('h2'), row('h3')], 5000);
    const b2 = await lane.append([row('h4')], 5000);
    const seal = await lane.append([], 5000, 'seal');
    expect(await verifyAuditChain(t.db, { keys })).toMatchObject({ ok: true, batchesChecked: 4, eventsChecked: 4, keyed: { authenticated: 4 } });
    // The thief reads every row (SELECT on every control table) and writes batch and event rows.
    const same = await replay(rt, b1);
    const otherChain = await replay(rt, b0, { chain_id: `'${randomUUID()}'::uuid` });
    const laterSeq = await replay(rt, b2, { seq: '7' });
    const otherTime = await replay(rt, b1, { committed_at: "committed_at + interval '1 second'" });
    const afterSeal = await replay(rt, seal, { seq: '4', prev_hash: `(SELECT hash FROM audit_batches WHERE id = ${seal})` });
    await rt.query(`INSERT INTO audit_events (${EVENT_COLS}, batch_id, recorded_at) SELECT ${EVENT_COLS}, batch_id, recorded_at FROM audit_events WHERE batch_id = $1`, [b2]);
    // An event pointing at a batch id the thief chooses, that no batch has (yet).
    await rt.query(`INSERT INTO audit_events (${EVENT_COLS}, batch_id, recorded_at) SELECT ${EVENT_COLS}, 9000000, recorded_at FROM audit_events WHERE batch_id = $1`, [b0]);
    const r = await verifyAuditChain(t.db, { keys });
    expect(faults(r)).toEqual([
      [b2, 'hash_mismatch'],
      [same, 'inserted_batch'],
      [otherChain, 'hash_mismatch'],
      [laterSeq, 'inserted_batch'],
      [otherTime, 'inserted_batch'],
      [afterSeal, 'inserted_batch'],
      ['9000000', 'events_without_batch'],
    ]);
    expect(r.ok).toBe(false);
  });

  test('held: the format numbers and key ids the runtime role may not write (NULL or malformed key id, format 6, 4, 1, 2 by INSERT) are refused; it can neither change nor remove a row', async () => {
    const ins = (format: number, keyId: string | null, seq: string | null = '0') =>
      codeOf(rt, `INSERT INTO audit_batches (${BATCH_COLS}) VALUES (now(), 0, NULL, $1, $2, $3, $4, NULL, '[]', $5)`, [randomBytes(32), format, seq === null ? null : randomUUID(), seq, keyId]);
    expect(await ins(5, null)).toBe('23514');
    expect(await ins(5, '')).toBe('23514');
    expect(await ins(5, 'ABCDEF0123456789')).toBe('23514');
    expect(await ins(5, '0123456789abcdef0')).toBe('23514');
    expect(await ins(3, '0123456789abcdef')).toBe('23514');
    expect(await ins(6, '0123456789abcdef')).toBe('23514');
    expect(await ins(4, null, null)).toBe('42501');
    expect(await ins(2, null, null)).toBe('42501');
    expect(await ins(1, null, null)).toBe('42501');
    expect((await t.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM audit_batches')).rows[0].n).toBe(0);
    const k = newKey();
    const b0 = await new ChainLane(rt, k).append([row('m1'), row('m2')], 5000);
    for (const sql of [
      'UPDATE audit_batches SET hash = hash',
      'UPDATE audit_events SET batch_id = batch_id',
      'DELETE FROM audit_events',
      'DELETE FROM audit_batches',
      'TRUNCATE audit_events',
      'TRUNCATE audit_batches',
      'UPDATE audit_keyed_trail SET since_batch = 999999',
      'ALTER TABLE audit_keyed_trail DISABLE ROW LEVEL SECURITY',
      'DROP TRIGGER audit_batches_unkeyed_refused ON audit_batches',
      'ALTER TABLE audit_batches DISABLE TRIGGER audit_batches_unkeyed_refused',
      "INSERT INTO audit_keyed_trail (since_batch, set_by, key_ids) VALUES (0, 'require_key', '{0123456789abcdef}')",
      'ALTER SEQUENCE audit_batches_id_seq RESTART WITH 1',
    ]) {
      expect([sql, await codeOf(rt, sql)]).toEqual([sql, '42501']);
    }
    // Its keyed batch does not key the trail (red team rt46b G2): only the owner does.
    expect((await t.db.pool.query('SELECT since_batch::text AS s FROM audit_keyed_trail')).rows).toEqual([]);
    expect(b0).toMatch(/^[0-9]+$/);
    expect(await verifyAuditChain(t.db, { keys: new Map([[k.id, k]]) })).toMatchObject({ ok: true, eventsChecked: 2 });
  });

  test('held: on a keyed trail a tool call the thief appends through the format-1/2 functions other than as a queued write, or a forged keyed chain under any key id, is named', async () => {
    const k = newKey();
    const keys = new Map([[k.id, k]]);
    await new ChainLane(rt, k).append([row('f1')], 5000);
    const denied = await appendAuditRows(rt, [row('f2', { decision: 'denied', reason_code: 'policy' })]);
    const forged = await new ChainLane(rt, newKey()).append([row('f3')], 5000);
    const sameId = await new ChainLane(rt, { id: k.id, secret: randomBytes(32) }).append([row('f4')], 5000);
    expect(faults(await verifyAuditChain(t.db, { keys }))).toEqual([[denied, 'unkeyed_batch'], [forged, 'unknown_key'], [sameId, 'hash_mismatch']]);
  });

  test('finding G1 (medium, partly fixed): a tool call the thief stores as a queued write (interlock_audit_append_v2) whose approval id names no approval, or another identity\'s, is named on a keyed trail', async () => {
    const k = newKey();
    const keys = new Map([[k.id, k]]);
    await new ChainLane(rt, k).append([row('q1')], 5000);
    await t.db.pool.query("INSERT INTO identities (id, name) VALUES ('idn_eeeeeeeeeeeeeeeeeeee', 'someone')");
    await t.db.pool.query("INSERT INTO sources (id, type, name, description, enabled, settings) VALUES ('chinook', 'postgres', 'chinook', '', true, '{}')");
    await rt.query("INSERT INTO approvals (id, source_id, identity_id, request_id, sql, expires_at) VALUES ('apr_eeeeeeeeeeeeeeeeeeeeeeee', 'chinook', 'idn_eeeeeeeeeeeeeeeeeeee', 'q0', 'UPDATE t SET x = 1', now() + interval '1 hour')");
    // Any identity, any SQL fingerprint, any time; no approval row with that id.
    const none = await appendAuditRows(rt, [
      row('q2', { identity_id: 'idn_ffffffffffffffffffff', decision: 'queued', reason_code: 'approval_required', approval_id: 'apr_ffffffffffffffffffffffff', fingerprint: 'DROP TABLE invoices', time: '2026-01-01T00:00:00.000Z' }),
    ]);
    // A real approval's id, under another identity.
    const other = await appendAuditRows(rt, [row('q3', { identity_id: 'idn_ffffffffffffffffffff', decision: 'queued', reason_code: 'approval_required', approval_id: 'apr_eeeeeeeeeeeeeeeeeeeeeeee' })]);
    const r = await verifyAuditChain(t.db, { keys });
    expect(r.ok).toBe(false);
    expect(faults(r)).toEqual([[none, 'unkeyed_batch'], [other, 'unkeyed_batch']]);
  });

  // Shown failing before task f2 (test.failing on main): verify said ok, nothing named.
  test('finding G1 (medium, fixed): a thief who inserts the approval row too (INSERT on approvals) adds a queued tool call: named on a keyed trail (no valid tag)', async () => {
    const k = newKey();
    const keys = new Map([[k.id, k]]);
    await new ChainLane(rt, k).append([row('p1')], 5000);
    await t.db.pool.query("INSERT INTO identities (id, name) VALUES ('idn_ffffffffffffffffffff', 'someone')");
    await t.db.pool.query("INSERT INTO sources (id, type, name, description, enabled, settings) VALUES ('chinook', 'postgres', 'chinook', '', true, '{}')");
    await rt.query("INSERT INTO approvals (id, source_id, identity_id, request_id, sql, state, expires_at) VALUES ('apr_ffffffffffffffffffffffff', 'chinook', 'idn_ffffffffffffffffffff', 'p2', 'DROP TABLE invoices', 'expired', now() - interval '1 hour')");
    const lie = await appendAuditRows(rt, [
      row('p2', { identity_id: 'idn_ffffffffffffffffffff', decision: 'queued', reason_code: 'approval_required', approval_id: 'apr_ffffffffffffffffffffffff', fingerprint: 'DROP TABLE invoices' }),
    ]);
    expect(faults(await verifyAuditChain(t.db, { keys }))).toEqual([[lie, 'unkeyed_batch']]);
  });

  test('held, G1: a queued write the gateway stores with its key verifies; its tag copied onto an altered event, or a tag under another key, is named', async () => {
    const k = newKey();
    const keys = new Map([[k.id, k]]);
    await new ChainLane(rt, k).append([row('t1')], 5000);
    await t.db.pool.query("INSERT INTO identities (id, name) VALUES ('idn_dddddddddddddddddddd', 'agent')");
    await t.db.pool.query("INSERT INTO sources (id, type, name, description, enabled, settings) VALUES ('chinook', 'postgres', 'chinook', '', true, '{}')");
    const a = { sourceId: 'chinook', identityId: 'idn_dddddddddddddddddddd', keyId: null, requestId: 't2', sql: 'UPDATE t SET x = 1', params: [], classification: { fingerprint: 'UPDATE t SET x = ?' } };
    const call = (approvalId: string) => ({ ...toolCallEvent('t2', { source_id: 'chinook', fingerprint: 'UPDATE t SET x = ?', approval_id: approvalId }), identityId: 'idn_dddddddddddddddddddd', decision: 'queued' as const, reasonCode: 'approval_required' });
    const rec = await queueApproval(t.db, a, call, 5000, undefined, k);
    const stored = await t.db.pool.query<{ batch_id: string; details: { audit_tag: { key_id: string; tag: string } } }>("SELECT batch_id::text, details FROM audit_events WHERE kind = 'tool_call' AND approval_id = $1", [rec.id]);
    expect(stored.rows[0].details.audit_tag).toEqual({ key_id: k.id, tag: expect.stringMatching(/^[0-9a-f]{64}$/) });
    expect(await verifyAuditChain(t.db, { keys })).toMatchObject({ ok: true, mismatchCount: 0 });
    // The thief copies the tag onto the same event with another statement, and tags one under a key of its own.
    const copied = await appendAuditRows(rt, [row('t2', { identity_id: 'idn_dddddddddddddddddddd', decision: 'queued', reason_code: 'approval_required', approval_id: rec.id, source_id: 'chinook', fingerprint: 'DROP TABLE t', details: { audit_tag: stored.rows[0].details.audit_tag } })]);
    const own = newKey();
    const ownTagged = await appendAuditRows(rt, [tagCallRow(own, row('t3', { identity_id: 'idn_dddddddddddddddddddd', decision: 'queued', reason_code: 'approval_required', approval_id: rec.id }))]);
    expect(faults(await verifyAuditChain(t.db, { keys }))).toEqual([[copied, 'unkeyed_batch'], [ownTagged, 'unkeyed_batch']]);
    // The thief stores the genuine tagged event again, unchanged (a second queued call for the approval): named
    // as a place the chain already has (shown failing before: verify passed the copy).
    const e = (
      await t.db.pool.query<StoredEventV2>(
        `SELECT e.id::text AS id, e.kind, to_char(e.time AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS time, e.request_id, e.identity_id, e.key_id, e.tool, e.canonical_tool,
                e.dialect, e.protocol_version, e.decision, e.reason_code, e.source_id, e.action, e.fingerprint, e.relations,
                e.row_count::text AS row_count, e.duration_ms::text AS duration_ms, e.approval_id, e.operator, e.details::text AS details
           FROM audit_events e WHERE e.kind = 'tool_call' AND e.approval_id = $1 AND e.batch_id = $2`,
        [rec.id, stored.rows[0].batch_id],
      )
    ).rows[0];
    const copy = rowFromStored(e)!;
    expect(copy.details).toEqual(stored.rows[0].details);
    const again = await appendAuditRows(rt, [copy]);
    expect(faults(await verifyAuditChain(t.db, { keys }))).toEqual([[copied, 'unkeyed_batch'], [ownTagged, 'unkeyed_batch'], [again, 'inserted_batch']]);
  });

  // Shown failing on main before task f2 (this test was test.failing there): the owner's trigger latched
  // the trail as keyed at the forged genesis, and the honest unkeyed append was refused (42501).
  test('finding G2 (medium, availability, fixed): a keyed genesis the thief forges (any tag, any key id) does not key an unkeyed trail; the gateway without a key goes on', async () => {
    const honest = new ChainLane(rt);
    await honest.append([row('d1')], 5000);
    const forged = (await rt.query<{ id: string }>(`INSERT INTO audit_batches (${BATCH_COLS}) VALUES (now(), 0, NULL, $1, 5, $2, 0, NULL, '[]', '0123456789abcdef') RETURNING id::text`, [randomBytes(32), randomUUID()])).rows[0].id;
    // Verify names it (no key given: key_needed; under any key: unknown_key) and it moves no mark.
    expect(await verifyAuditChain(t.db)).toMatchObject({ ok: false, keyed: { batches: 1, unauthenticated: 1, fault: 'key_needed', keyedSince: null } });
    const other = newKey();
    expect(faults(await verifyAuditChain(t.db, { keys: new Map([[other.id, other]]) }))).toEqual([[forged, 'unknown_key']]);
    expect((await t.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM audit_keyed_trail')).rows[0].n).toBe(0);
    const d2 = await honest.append([row('d2')], 5000).then((id) => id, (e: { code?: string }) => e.code);
    expect(d2).toMatch(/^[0-9]+$/);
    // The later unkeyed batch is not named unkeyed_batch: nothing but the forgery is.
    expect(faults(await verifyAuditChain(t.db, { keys: new Map([[other.id, other]]) }))).toEqual([[forged, 'unknown_key']]);
  });

  test('held, G2: once the owner keyed the trail (require-key), the thief\'s genesis under an unregistered key id and its unkeyed batch are refused; a gateway under a new key is refused until require-key registers it (rotation)', async () => {
    const k1 = newKey();
    const k2 = newKey();
    expect(await registerAuditKeyIds(t.db.pool, [k1.id], 'require_key')).toEqual({ already: false, sinceBatch: '0', setBy: 'require_key', keyIds: [k1.id], added: [k1.id] });
    // The runtime role cannot register a key id of its own.
    expect(await registerAuditKeyIds(rt, ['0123456789abcdef'], 'require_key').then(() => 'ok', (e: { code?: string }) => e.code)).toBe('42501');
    const g = new ChainLane(rt, k1);
    const g0 = await g.append([row('k1')], 5000);
    const refusal = (p: Promise<unknown>) => p.then(() => null, (e: { code?: string; message: string }) => ({ code: e.code, message: e.message }));
    const forged = await refusal(rt.query(`INSERT INTO audit_batches (${BATCH_COLS}) VALUES (now(), 0, NULL, $1, 5, $2, 0, NULL, '[]', '0123456789abcdef')`, [randomBytes(32), randomUUID()]));
    expect(forged).toEqual({ code: '42501', message: 'audit_batches: the audit trail is keyed (audit_keyed_trail) and audit key id 0123456789abcdef is not registered: with that key configured (audit.key, the keys still in use in audit.previous_keys), run `interlock audit require-key` as the owner of the control tables' });
    expect(await refusal(new ChainLane(rt).append([row('k2')], 5000))).toEqual({ code: '42501', message: 'audit_batches: the audit trail is keyed (audit_keyed_trail): an unkeyed (format-3) batch is refused; give the gateway its audit key (audit.key / INTERLOCK_AUDIT_KEY)' });
    // Rotation: a gateway under k2 fails closed until the owner registers k2 (k1 stays registered).
    expect(await refusal(new ChainLane(rt, k2).append([row('k3')], 5000))).toMatchObject({ code: '42501' });
    expect(await registerAuditKeyIds(t.db.pool, [k2.id, k1.id], 'require_key')).toEqual({ already: true, sinceBatch: '0', setBy: 'require_key', keyIds: [k1.id, k2.id].sort(), added: [k2.id] });
    const h0 = await new ChainLane(rt, k2).append([row('k4')], 5000);
    expect(await g.append([row('k5')], 5000)).toMatch(/^[0-9]+$/);
    const keys = new Map([[k1.id, k1], [k2.id, k2]]);
    expect(await verifyAuditChain(t.db, { keys })).toMatchObject({ ok: true, batchesChecked: 5, eventsChecked: 5, keyed: { authenticated: 3, keyedSince: '0' } });
    // (the two other batches: config events audit_key_registered of the two registrations, nu47)
    expect(BigInt(h0) > BigInt(g0)).toBe(true);
  });
});

describe('the key itself', () => {
  test('finding G3 (low, fixed): a key of 32+ bytes that is one character or a short pattern repeated is refused, its value not echoed', () => {
    for (const weak of ['a'.repeat(32), 'ab'.repeat(20), '0123'.repeat(10), 'k'.repeat(64)]) {
      expect(() => auditKey(weak)).toThrow(ValidationError);
      expect(() => auditKey(weak)).toThrow(/audit\.key must be a random secret/);
      expect(() => auditKey(weak)).not.toThrow(weak);
    }
    // What docs/operators.md says to use, and a hex key, are accepted.
    expect(auditKey(randomBytes(48).toString('base64')).id).toMatch(/^[0-9a-f]{16}$/);
    expect(auditKey(randomBytes(32).toString('hex')).id).toMatch(/^[0-9a-f]{16}$/);
  });
});
