/**
 * A retired audit key authenticates nothing stored after its retirement (task ret47; red team rt47a's
 * open rest of H5), on real PostgreSQL. A queued write's tool-call event is stored on the format-2 chain
 * with an HMAC tag (details.audit_tag, src/audit/call-tag.ts); the owner's trigger refuses keyed batches
 * under a retired id, but not a format-2 batch. A thief holding a leaked key that the owner retired
 * and the runtime role's credential queues a call of its own, tagged with the retired key: verify, given
 * that key (audit.previous_keys, to check the old batches), names it `retired_key`, because
 * interlock_audit_retire_key recorded the audit_batches sequence's high-water mark when it retired the
 * id (audit_keyed_trail.retired_after), while the genuine calls tagged before the retirement still verify.
 */
import type pg from 'pg';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eachRuntimeRoleTrail } from '../control/control-db';
import { ChainLane } from '../../../src/audit/chain';
import { auditKey, type AuditKey } from '../../../src/audit/key';
import { verifyAuditChain } from '../../../src/audit/verify';
import { registerAuditKeyIds, retireAuditKeyId } from '../../../src/audit/keyed-trail';
import { queueApproval } from '../../../src/control/approvals';
import type { ControlDb } from '../../../src/control/db';
import { runCli } from '../../../src/cli/main';
import { auditRow, faultPairs, randomAuditKey, sqlStateOf, toolCallEvent } from '../../helpers/audit-events';

jest.setTimeout(120_000);

const IDENTITY = 'idn_dddddddddddddddddddd';

describe('ret47: a retired audit key authenticates nothing stored after its retirement', () => {
  const fx = eachRuntimeRoleTrail('ret47');

  /** Queues a write on `pool` (the gateway's control pool, or the thief's runtime-role pool) with its tool-call event tagged under `key`; returns the id of the batch holding the tool-call event. */
  async function queueTagged(pool: pg.Pool, key: AuditKey, request: string): Promise<string> {
    const a = { sourceId: 'chinook', identityId: IDENTITY, keyId: null, requestId: request, sql: 'UPDATE t SET x = 1', params: [], classification: { fingerprint: 'UPDATE t SET x = ?' } };
    const call = (approvalId: string) => ({ ...toolCallEvent(request, { source_id: 'chinook', fingerprint: 'UPDATE t SET x = ?', approval_id: approvalId }), identityId: IDENTITY, decision: 'queued' as const, reasonCode: 'approval_required' });
    const rec = await queueApproval({ pool } as ControlDb, a, call, 5000, undefined, key);
    return (await fx.t.db.pool.query<{ b: string }>("SELECT batch_id::text AS b FROM audit_events WHERE kind = 'tool_call' AND approval_id = $1", [rec.id])).rows[0].b;
  }

  /** A keyed trail under `old`, rotated to `newer` (both registered), a genuine queued call tagged by `old` before the rotation, one keyed lane batch. */
  async function rotated(old: AuditKey, newer: AuditKey): Promise<{ lane: string; genuine: string; keys: Map<string, AuditKey> }> {
    await registerAuditKeyIds(fx.t.db.pool, [old.id], 'require_key');
    await fx.t.db.pool.query("INSERT INTO identities (id, name) VALUES ($1, 'agent')", [IDENTITY]);
    await fx.t.db.pool.query("INSERT INTO sources (id, type, name, description, enabled, settings) VALUES ('chinook', 'postgres', 'chinook', '', true, '{}')");
    const lane = await new ChainLane(fx.rt, old).append([auditRow('l0')], 5000);
    const genuine = await queueTagged(fx.t.db.pool, old, 'g1');
    await registerAuditKeyIds(fx.t.db.pool, [newer.id, old.id], 'require_key');
    return { lane, genuine, keys: new Map([[old.id, old], [newer.id, newer]]) };
  }

  // Shown failing without the fix (verify had no retired_key fault; the retirement recorded no point): the forged call verified, ok: true, mismatches [].
  test('a queued call tagged with the retired key after its retirement is named retired_key; those tagged before it, and the new key\'s, verify', async () => {
    const s1 = randomBytes(32).toString('base64');
    const s2 = randomBytes(32).toString('base64');
    const old = auditKey(s1);
    const newer = auditKey(s2);
    const { lane, genuine, keys } = await rotated(old, newer);
    // Another genuine call under the old key, still before the retirement, through the runtime role (as a gateway would).
    const genuine2 = await queueTagged(fx.rt, old, 'g2');
    await retireAuditKeyId(fx.t.db, old.id, newer.id, { operator: 'ret47' });
    const after = await queueTagged(fx.t.db.pool, newer, 'g3');
    expect(await verifyAuditChain(fx.t.db, { keys })).toMatchObject({ ok: true, mismatchCount: 0 });
    // The thief: the runtime role's credential and the leaked, now retired, key.
    const forged = await queueTagged(fx.rt, old, 'x1');
    // It advances the batch id sequence as far as it likes first (USAGE on it): ids only grow, so it cannot get one at or below the point.
    await fx.rt.query("SELECT nextval('audit_batches_id_seq') FROM generate_series(1, 50)");
    const forged2 = await queueTagged(fx.rt, old, 'x2');
    const r = await verifyAuditChain(fx.t.db, { keys });
    expect(faultPairs(r)).toEqual([[forged, 'retired_key'], [forged2, 'retired_key']]);
    expect(r.mismatches.map((m) => m.keyId)).toEqual([old.id, old.id]);
    expect(r.ok).toBe(false);
    expect([genuine, genuine2, after].every((b) => BigInt(b) < BigInt(forged))).toBe(true);
    // `interlock audit verify` with the rotated configuration (the retired key in previous_keys): BROKEN, exit 1, the line says what retired_key means.
    const dir = mkdtempSync(join(tmpdir(), 'il-ret47-'));
    try {
      const file = join(dir, 'c.json');
      writeFileSync(file, JSON.stringify({ audit: { key: s2, previous_keys: [s1] } }), { mode: 0o600 });
      let out = '';
      let err = '';
      const code = await runCli(['--config', file, '--database-url', fx.t.temp.url, 'audit', 'verify'], { out: (x) => void (out += x + '\n'), err: (x) => void (err += x + '\n') });
      const at = r.firstMismatch!.committedAt;
      expect([code, err]).toEqual([1, `error: audit chain does not match at batch ${forged} (retired_key)\n`]);
      expect(out.startsWith(
        `audit chain BROKEN at batch ${forged} (committed ${at}): retired_key (the batch, or a queued call's tag in it, names audit key id ${old.id}, stored after that id was retired (\`interlock audit retire-key\`): written with the retired key, by whoever holds it, not by a gateway running a key in use); 2 batch(es) do not match in all (${forged}, ${forged2}); `,
      )).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    // Without the retired key given, what it tagged before cannot be authenticated (unknown_key, unkeyed_batch, as before);
    // what names it after its retirement is retired_key all the same (the key id is in the tag).
    const noOld = await verifyAuditChain(fx.t.db, { keys: new Map([[newer.id, newer]]) });
    expect(faultPairs(noOld)).toEqual([[lane, 'unknown_key'], [genuine, 'unkeyed_batch'], [genuine2, 'unkeyed_batch'], [forged, 'retired_key'], [forged2, 'retired_key']]);
    // A keyed batch under the retired id cannot be stored at all (the trigger, task low47): a new chain is refused.
    expect(await new ChainLane(fx.rt, old).append([auditRow('x3')], 5000).then(() => 'stored', (e: { code?: string }) => e.code)).toBe('42501');
  });

  // Shown failing without the fix: audit_keyed_trail had no retired_after column (42703).
  test('the point is the sequence\'s high-water mark, recorded by the owner\'s function only; the runtime role cannot change it', async () => {
    const old = randomAuditKey();
    const newer = randomAuditKey();
    await rotated(old, newer);
    // Ids the runtime role drew and never used (a thief advancing the sequence) count as before the retirement.
    await fx.rt.query("SELECT nextval('audit_batches_id_seq') FROM generate_series(1, 7)");
    const mark = (await fx.t.db.pool.query<{ v: string }>('SELECT last_value::text AS v FROM audit_batches_id_seq')).rows[0].v;
    await retireAuditKeyId(fx.t.db, old.id, newer.id, { operator: 'ret47' });
    expect((await fx.t.db.pool.query('SELECT retired_key_ids, retired_after FROM audit_keyed_trail')).rows).toEqual([{ retired_key_ids: [old.id], retired_after: { [old.id]: mark } }]);
    expect(await sqlStateOf(fx.rt, "UPDATE audit_keyed_trail SET retired_after = '{}'")).toBe('42501');
    expect(await sqlStateOf(fx.rt, "SELECT setval('audit_batches_id_seq', 1)")).toBe('42501');
    // Retiring it again keeps the first point.
    await fx.rt.query("SELECT nextval('audit_batches_id_seq')");
    expect(await fx.t.db.pool.query<{ r: string[] }>('SELECT interlock_audit_retire_key($1) AS r', [old.id]).then((x) => x.rows[0].r)).toEqual([old.id]);
    expect((await fx.t.db.pool.query('SELECT retired_after FROM audit_keyed_trail')).rows[0].retired_after).toEqual({ [old.id]: mark });
  });

  // Shown failing without the fix: with the trigger off, the open chain's next batch under the retired key verified (ok: true).
  test('a keyed batch under the retired id past the mark (only with the owner\'s trigger off: the database refuses it) is named retired_key too, key given or not', async () => {
    const old = randomAuditKey();
    const newer = randomAuditKey();
    const { keys } = await rotated(old, newer);
    const open = new ChainLane(fx.rt, old);
    const before = await open.append([auditRow('o1')], 5000);
    await retireAuditKeyId(fx.t.db, old.id, newer.id, { operator: 'ret47' });
    expect(await open.append([auditRow('o2')], 5000).then(() => 'stored', (e: { code?: string }) => e.code)).toBe('42501');
    // The owner (or a restore without the trigger) lets one in.
    await fx.t.db.pool.query('ALTER TABLE audit_batches DISABLE TRIGGER audit_batches_unkeyed_refused');
    const late = await open.append([auditRow('o3')], 5000);
    await fx.t.db.pool.query('ALTER TABLE audit_batches ENABLE TRIGGER audit_batches_unkeyed_refused');
    const r = await verifyAuditChain(fx.t.db, { keys });
    expect([faultPairs(r), r.mismatches[0]?.keyId, BigInt(before) < BigInt(late)]).toEqual([[[late, 'retired_key']], old.id, true]);
    expect(faultPairs(await verifyAuditChain(fx.t.db, { keys: new Map([[newer.id, newer]]) })).filter(([b]) => b === late)).toEqual([[late, 'retired_key']]);
  });
});
