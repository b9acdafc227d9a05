/**
 * Red team rt47a: the keyed audit trail as it stands after task f2 (format 5, audit_keyed_trail,
 * queued calls' tags, keyRefusal), attacked by a fresh attacker with the privileges each threat model
 * gives: the runtime role's database credential (grantRuntimeRole, as `interlock db grant-runtime-role`
 * sets it up) without the audit key; an operator following docs/operators.md; someone holding a copy
 * of a config file. Real PostgreSQL, loopback only.
 *
 * Each test is one attack; its name says whether it is a finding (severity, fixed or open) or an
 * attack the trail withstands ("held").
 *
 *   H1 medium, fixed: the format-1 append (interlock_audit_append, kept for gateways not yet upgraded,
 *      EXECUTE granted to the runtime role) stored a tool call as a queued write's with no audit-key
 *      tag, or a copy of a genuine tagged one, and verify with the key said ok: the tag check (rt46b G1)
 *      looked at format-2 batches only.
 *   H2 medium (availability), fixed: a gateway the keyed trail refused (/readyz 503 audit_key_refused) was
 *      ready again only at its next accepted batch; a load balancer honouring /readyz sends it no call, so
 *      after the owner's fix (`interlock audit require-key` with its key, the documented rotation step) it
 *      stayed unready until restarted. A rotation rolled out before require-key drained every replica for good.
 *   H3 low, fixed: a key that is a pattern of 8+ distinct bytes repeated (`abcdefgh` ×4) passed the weak-key
 *      check (rt46b G3 refused only fewer than 8 distinct bytes), though docs say a repeated pattern is refused.
 *   H4 low, fixed: a config file that does not parse had the parser's message printed, and V8's JSON
 *      message quotes ~10 characters around the error (an unquoted audit.key's first characters), YAML's an
 *      alias's whole name; a YAML unresolved-tag warning printed the whole line to stderr.
 *   H5 medium, fixed by `interlock audit retire-key` (task low47, built beside this red team; open: a
 *      queued call's tag made with a retired key after its retirement still authenticates): a rotated-out key could not be retired. Rotation (docs "Rotate") keeps the old key in
 *      audit.previous_keys to verify what it tagged, and its id stays registered (registerAuditKeyIds never
 *      removes one), so a thief holding the runtime credential and the old key (the leak a rotation answers)
 *      still starts chains the database accepts and verify authenticates, after the rotation as before.
 *   H6 low, fixed: the embedded PostgreSQL (the demo's; also with INTERLOCK_AUDIT_KEY, which then signs)
 *      inherited the gateway's whole environment: a database superuser read the audit key back with
 *      COPY … FROM PROGRAM 'env' and could re-tag keyed chains.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { eachRuntimeRoleTrail } from '../control/control-db';
import { ChainLane } from '../../../src/audit/chain';
import { auditKey, type AuditKey } from '../../../src/audit/key';
import { verifyAuditChain } from '../../../src/audit/verify';
import { appendFormat1, auditRow, faultPairs, randomAuditKey, sqlStateOf, toolCallEvent } from '../../helpers/audit-events';
import { queueApproval } from '../../../src/control/approvals';
import { registerAuditKeyIds, retireAuditKeyId } from '../../../src/audit/keyed-trail';
import { GroupCommitAuditSink, type AuditRowInput } from '../../../src/audit/writer';
import { callTool, startGovernedEnv } from '../../helpers/governed';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../../src/control/config';
import { ValidationError } from '../../../src/control/errors';
import { startPrivatePostgres } from '../../helpers/private-postgres';

jest.setTimeout(180_000);

const newKey = randomAuditKey;
const row = auditRow;
const codeOf = sqlStateOf;
const faults = faultPairs;

const BATCH_COLS = 'committed_at, event_count, prev_hash, hash, format, chain_id, seq, mark, anchors, mac_key_id';
const EVENT_COLS = `kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version, decision,
  reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details`;

describe('rt47a: a stolen runtime credential against a keyed trail', () => {
  // A fresh trail and runtime role for each attack.
  const fx = eachRuntimeRoleTrail('rt47a');

  /** A keyed trail (require-key), one keyed lane batch, a genuine queued write tagged by the gateway; returns the key and the genuine event's stored row (JSON for the format-1 append). */
  async function keyedTrailWithQueuedWrite(): Promise<{ keys: Map<string, AuditKey>; approvalId: string; genuine: Partial<AuditRowInput> }> {
    const k = newKey();
    await registerAuditKeyIds(fx.t.db.pool, [k.id], 'require_key');
    await new ChainLane(fx.rt, k).append([row('w0')], 5000);
    await fx.t.db.pool.query("INSERT INTO identities (id, name) VALUES ('idn_dddddddddddddddddddd', 'agent')");
    await fx.t.db.pool.query("INSERT INTO sources (id, type, name, description, enabled, settings) VALUES ('chinook', 'postgres', 'chinook', '', true, '{}')");
    const a = { sourceId: 'chinook', identityId: 'idn_dddddddddddddddddddd', keyId: null, requestId: 'w1', sql: 'UPDATE t SET x = 1', params: [], classification: { fingerprint: 'UPDATE t SET x = ?' } };
    const call = (approvalId: string) => ({ ...toolCallEvent('w1', { source_id: 'chinook', fingerprint: 'UPDATE t SET x = ?', approval_id: approvalId }), identityId: 'idn_dddddddddddddddddddd', decision: 'queued' as const, reasonCode: 'approval_required' });
    const rec = await queueApproval(fx.t.db, a, call, 5000, undefined, k);
    const keys = new Map([[k.id, k]]);
    expect(await verifyAuditChain(fx.t.db, { keys })).toMatchObject({ ok: true, mismatchCount: 0 });
    const genuine = (await fx.t.db.pool.query<{ j: Partial<AuditRowInput> }>(`SELECT to_jsonb(e) - 'id' - 'batch_id' - 'recorded_at' AS j FROM audit_events e WHERE kind = 'tool_call' AND approval_id = $1`, [rec.id])).rows[0].j;
    return { keys, approvalId: rec.id, genuine };
  }

  // Shown failing without the fix (src/audit/verify.ts checked tags on format-2 batches only): verify said ok: true, mismatches [].
  test('finding H1 (medium, fixed): a queued tool call stored through the format-1 append (interlock_audit_append) without a tag, or a genuine tagged one copied there, is named on a keyed trail', async () => {
    const { keys, genuine } = await keyedTrailWithQueuedWrite();
    // The thief inserts an approval row of its own (INSERT on approvals) and a queued tool call for it, any
    // identity, any statement, any time: through the legacy format-1 function the runtime role may still run.
    await fx.rt.query("INSERT INTO approvals (id, source_id, identity_id, request_id, sql, state, expires_at) VALUES ('apr_ffffffffffffffffffffffff', 'chinook', 'idn_dddddddddddddddddddd', 'x1', 'DROP TABLE invoices', 'expired', now() - interval '1 hour')");
    const forged = { ...genuine, request_id: 'x1', approval_id: 'apr_ffffffffffffffffffffffff', fingerprint: 'DROP TABLE invoices', details: {} };
    const lie = await appendFormat1(fx.rt, [forged]);
    // And the genuine tagged event stored again, unchanged, on format 1.
    const again = await appendFormat1(fx.rt, [genuine]);
    const r = await verifyAuditChain(fx.t.db, { keys });
    expect(faults(r)).toEqual([[lie, 'unkeyed_batch'], [again, 'unkeyed_batch']]);
    expect(r.ok).toBe(false);
  });

  test('held: approval events through the format-1 append stay as before on a keyed trail (only tool calls there are named)', async () => {
    const { keys, approvalId } = await keyedTrailWithQueuedWrite();
    await appendFormat1(fx.rt, [{ kind: 'approval', decision: 'expired', approval_id: approvalId, operator: 'system:expiry', identity_id: 'idn_dddddddddddddddddddd' }]);
    expect(await verifyAuditChain(fx.t.db, { keys })).toMatchObject({ ok: true, mismatchCount: 0 });
  });

  test('held: the runtime role cannot key the trail or switch its trigger off by any table, GUC, view, sequence, COPY, trigger or partition path', async () => {
    const k = newKey();
    await registerAuditKeyIds(fx.t.db.pool, [k.id], 'require_key');
    const part = (await fx.t.db.pool.query<{ p: string }>("SELECT c.relname AS p FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'audit_events'::regclass AND c.relname <> 'audit_events_default' ORDER BY 1 LIMIT 1")).rows[0].p;
    const c = await fx.rt.connect();
    try {
      for (const sql of [
        "SET session_replication_role = 'replica'",
        "SELECT set_config('session_replication_role', 'replica', false)",
        'ALTER TABLE audit_batches DISABLE TRIGGER ALL',
        'ALTER TABLE audit_batches DISABLE TRIGGER USER',
        'ALTER TABLE audit_batches DISABLE ROW LEVEL SECURITY',
        'ALTER TABLE audit_batches NO FORCE ROW LEVEL SECURITY',
        `ALTER TABLE audit_events DETACH PARTITION ${part}`,
        `TRUNCATE ${part}`,
        'TRUNCATE audit_events_default',
        `DROP TABLE ${part}`,
        "SELECT setval('audit_batches_id_seq', 1)",
        'ALTER FUNCTION interlock_audit_refuse_unkeyed() SECURITY INVOKER',
        'CREATE OR REPLACE FUNCTION interlock_audit_refuse_unkeyed() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$',
        'DELETE FROM audit_keyed_trail',
        "UPDATE audit_keyed_trail SET key_ids = '{0123456789abcdef}'",
        'COPY audit_keyed_trail FROM STDIN',
      ]) {
        expect([sql, await codeOf(c, sql)]).toEqual([sql, '42501']);
      }
      // No CREATE on public (PostgreSQL 15+): no view, function or trigger of its own beside the trail's.
      expect(await codeOf(c, 'CREATE VIEW public.kt AS SELECT * FROM audit_keyed_trail')).toBe('42501');
      // A temporary view over the table writes with the runtime role's own rights: refused.
      await c.query('CREATE TEMP VIEW kt AS SELECT * FROM audit_keyed_trail');
      expect(await codeOf(c, "INSERT INTO kt (since_batch, set_by, key_ids) VALUES (0, 'require_key', '{0123456789abcdef}')")).toBe('42501');
      // A temporary table named like the registration is never what the owner's trigger reads (search_path: pg_temp last).
      await c.query("CREATE TEMP TABLE audit_keyed_trail (key_ids text[]); INSERT INTO audit_keyed_trail VALUES ('{0123456789abcdef}')");
      const forged = await codeOf(c, `INSERT INTO public.audit_batches (${BATCH_COLS}) VALUES (now(), 0, NULL, $1, 5, $2, 0, NULL, '[]', '0123456789abcdef')`, [randomBytes(32), randomUUID()]);
      expect(forged).toBe('42501');
      // COPY into the batches: refused under their row-level security before any row is read.
      expect(await codeOf(c, `COPY public.audit_batches (${BATCH_COLS}) FROM STDIN`)).toBe('0A000');
    } finally {
      c.release();
    }
    expect((await fx.t.db.pool.query<{ k: string[] }>('SELECT key_ids AS k FROM audit_keyed_trail')).rows).toEqual([{ k: [k.id] }]);
    // No gateway batch (format 3 or 5) went in; the registration's config event (audit_key_registered) has its own.
    expect((await fx.t.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM audit_batches WHERE format IN (3, 5)')).rows[0].n).toBe(0);
  });

  // Fixed by `interlock audit retire-key` (task low47, built beside this red team): the owner retires the
  // leaked id and the trigger refuses every batch under it, an open chain's next one included. A queued
  // call's tag (details.audit_tag, in a format-2 batch the trigger does not judge by key) made with the
  // retired key after its retirement was still authenticated by verify given that key: named
  // `retired_key` since task ret47 (test/integration/audit/retired-key-tags.test.ts).
  test('finding H5 (medium, fixed by retire-key): after the rotation the rotated-out (leaked) key can be retired, and a chain under it is refused', async () => {
    const oldKey = newKey();
    const newer = newKey();
    await registerAuditKeyIds(fx.t.db.pool, [oldKey.id], 'require_key');
    const open = new ChainLane(fx.rt, oldKey);
    await open.append([row('o1')], 5000);
    // The rotation as docs/operators.md says: the new key signs, the old one only verifies, require-key again, then retire the old id.
    await registerAuditKeyIds(fx.t.db.pool, [newer.id, oldKey.id], 'require_key');
    await retireAuditKeyId(fx.t.db, oldKey.id, newer.id, { operator: 'rt47a' });
    const honest = new ChainLane(fx.rt, newer);
    await honest.append([row('o2')], 5000);
    // The thief holding the old key (leaked: why the operator rotated) and the runtime credential: a new chain and the open one are refused.
    const state = (p: Promise<unknown>) => p.then(() => 'stored', (e: { code?: string }) => e.code);
    expect(await state(new ChainLane(fx.rt, oldKey).append([row('o3', { identity_id: 'idn_ffffffffffffffffffff', decision: 'allowed', fingerprint: 'SELECT * FROM salaries' })], 5000))).toBe('42501');
    expect(await state(open.append([row('o4')], 5000))).toBe('42501');
    const r = await verifyAuditChain(fx.t.db, { keys: new Map([[newer.id, newer], [oldKey.id, oldKey]]) });
    expect(r.ok).toBe(true);
  });

  test('held: a genuine keyed batch replayed with only its key id changed to another registered id, or a genesis forged under a registered (not secret) key id, is named', async () => {
    const k1 = newKey();
    const k2 = newKey();
    await registerAuditKeyIds(fx.t.db.pool, [k1.id, k2.id], 'require_key');
    const b0 = await new ChainLane(fx.rt, k1).append([row('i1')], 5000);
    const swapped = (await fx.rt.query<{ id: string }>(`INSERT INTO audit_batches (${BATCH_COLS}) SELECT committed_at, event_count, prev_hash, hash, format, $2::uuid, seq, mark, anchors, $3 FROM audit_batches WHERE id = $1 RETURNING id::text`, [b0, randomUUID(), k2.id])).rows[0].id;
    await fx.rt.query(`INSERT INTO audit_events (${EVENT_COLS}, batch_id, recorded_at) SELECT ${EVENT_COLS}, $2, recorded_at FROM audit_events WHERE batch_id = $1`, [b0, swapped]);
    // The database lets a genesis under a registered id through (ids are fingerprints, not secrets); its tag cannot match.
    const forged = (await fx.rt.query<{ id: string }>(`INSERT INTO audit_batches (${BATCH_COLS}) VALUES (now(), 0, NULL, $1, 5, $2, 0, NULL, '[]', $3) RETURNING id::text`, [randomBytes(32), randomUUID(), k1.id])).rows[0].id;
    const keys = new Map([[k1.id, k1], [k2.id, k2]]);
    expect(faults(await verifyAuditChain(fx.t.db, { keys }))).toEqual([[swapped, 'hash_mismatch'], [forged, 'hash_mismatch']]);
  });

  // Shown failing without the fix: recheckKeyRefusal did not exist; keyRefusal() stayed 'key_not_registered' with no batch.
  test('finding H2 (medium, fixed): a writer refused for a key not registered asks the database again (a rolled-back genesis): still refused before require-key, accepted after, nothing stored', async () => {
    const k1 = newKey();
    const k2 = newKey();
    await registerAuditKeyIds(fx.t.db.pool, [k1.id], 'require_key');
    const sink = new GroupCommitAuditSink(fx.rt, undefined, { commitTimeoutMs: 5000, key: k2 });
    await expect(sink.record(toolCallEvent('n1'))).rejects.toThrow('audit event not committed within the bound');
    expect(sink.keyRefusal()).toBe('key_not_registered');
    // Gateway batches (format 3 or 5): require-key's config event (audit_key_registered) has a batch of its own.
    const count = async () => (await fx.t.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM audit_batches WHERE format IN (3, 5)')).rows[0].n;
    const before = await count();
    expect(await sink.recheckKeyRefusal()).toBe('key_not_registered');
    // The owner registers the new key (the rotation's require-key): no call reaches the drained replica, the probe clears it.
    await registerAuditKeyIds(fx.t.db.pool, [k2.id], 'require_key');
    let now: string | null = 'key_not_registered';
    for (let i = 0; i < 50 && now !== null; i++) {
      now = await sink.recheckKeyRefusal();
      if (now !== null) await new Promise((r) => setTimeout(r, 100));
    }
    expect(now).toBeNull();
    expect(sink.keyRefusal()).toBeNull();
    expect(await count()).toBe(before);
    await sink.record(toolCallEvent('n2'));
    await sink.close();
    expect(await verifyAuditChain(fx.t.db, { keys: new Map([[k1.id, k1], [k2.id, k2]]) })).toMatchObject({ ok: true, eventsChecked: 3 }); // n2 and the two registrations' config events
  });

  // Shown failing without the fix: /readyz stayed 503 audit_key_refused (50 polls over ~5 s) until a governed call came.
  test('finding H2 (medium, fixed): /readyz is 200 again once the trail accepts the gateway, with no call in between', async () => {
    const env = await startGovernedEnv({});
    try {
      const ready = async () => {
        const r = await fetch(`${env.url.replace(/\/mcp$/, '')}/readyz`);
        return [r.status, await r.json()];
      };
      await registerAuditKeyIds(env.db.pool, [newKey().id], 'require_key');
      const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1 AS n' }, env.apiKey);
      expect(r.body.result.structuredContent).toMatchObject({ status: 'unavailable', code: 'audit_unavailable' });
      expect(await ready()).toEqual([503, { status: 'not_ready', reason: 'audit_key_refused' }]);
      // The owner lifts the mark; no call reaches the replica (a load balancer drained it).
      await env.db.pool.query('DELETE FROM audit_keyed_trail');
      let got = await ready();
      for (let i = 0; i < 50 && got[0] !== 200; i++) {
        await new Promise((res) => setTimeout(res, 100));
        got = await ready();
      }
      expect(got).toEqual([200, { status: 'ready' }]);
      const ok = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 2 AS n' }, env.apiKey);
      expect(ok.body.result.structuredContent).toMatchObject({ rows: [{ n: 2 }] });
    } finally {
      await env.close();
    }
  });
});

describe('rt47a: the key itself and the files that hold it', () => {
  // Shown failing without the fix: auditKey('abcdefgh'.repeat(4)) returned a key.
  test('finding H3 (low, fixed): a key that is any pattern written twice or more is refused, its value not echoed; random keys pass', () => {
    for (const weak of ['abcdefgh'.repeat(4), 'abcdefghi'.repeat(4), 'Secret-Passphrase-01'.repeat(2), `${'0123456789abcdef'.repeat(2)}0123`]) {
      expect(() => auditKey(weak)).toThrow(new ValidationError('audit.key must be a random secret, not a character or short pattern repeated (openssl rand -base64 48)'));
    }
    for (let i = 0; i < 200; i++) {
      expect(auditKey(randomBytes(48).toString('base64')).id).toMatch(/^[0-9a-f]{16}$/);
      expect(auditKey(randomBytes(16).toString('hex')).id).toMatch(/^[0-9a-f]{16}$/);
    }
  });

  // Shown failing without the fix: the JSON detail was `Unexpected token 'Q', ..."key": Qx7Kp9Zw"... is not valid JSON`, the YAML one named the alias.
  test('finding H4 (low, fixed): a config file that does not parse is reported without any of its text', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rt47a-'));
    const secret = 'Qx7Kp9ZwR2mT5vB8nL4hJ6cF3dG1sA0eYuIo';
    const fail = (name: string, text: string) => {
      writeFileSync(join(dir, name), text);
      try {
        loadConfig({ file: join(dir, name), env: {} });
      } catch (err) {
        return [(err as ValidationError).message, (err as ValidationError).details];
      }
      return null;
    };
    try {
      const json = fail('c.json', `{"audit": {"key": ${secret}}}`);
      expect(json).toEqual([`config file ${join(dir, 'c.json')} is not valid JSON`, ["Unexpected token (the rest of the parser's message is left out: it quotes the file)"]]);
      const alias = fail('a.yaml', `audit:\n  key: *${secret}\n`);
      expect(alias).toEqual([`config file ${join(dir, 'a.yaml')} is not valid YAML`, ["Unresolved alias (the anchor must be set before the alias) (the rest of the parser's message is left out: it quotes the file)"]]);
      const quote = fail('q.yaml', `audit:\n  key: "${secret}\n`);
      expect(quote).toEqual([`config file ${join(dir, 'q.yaml')} is not valid YAML`, ["MISSING_CHAR at line 3, column 1 (the rest of the parser's message is left out: it quotes the file)"]]);
      // Messages that quote nothing stay as the parser wrote them.
      expect(fail('p.json', `{"audit": {"key": "${secret}",}}`)).toEqual([`config file ${join(dir, 'p.json')} is not valid JSON`, ['Expected double-quoted property name in JSON at position 57']]);
      // An unresolved tag is a warning the YAML library printed to stderr with the line: no longer.
      const warn = jest.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
      try {
        fail('t.yaml', `audit:\n  key: !${secret} x\n`);
        expect(warn).not.toHaveBeenCalled();
      } finally {
        warn.mockRestore();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('rt47a: the embedded server\'s environment', () => {
  // Shown failing without the fix: the server's environment held INTERLOCK_AUDIT_KEY=<the key>.
  test('finding H6 (low, fixed): a superuser of the embedded PostgreSQL does not read the audit key from the server\'s environment', async () => {
    const secret = randomBytes(36).toString('base64');
    const saved = process.env.INTERLOCK_AUDIT_KEY;
    process.env.INTERLOCK_AUDIT_KEY = secret;
    let server: Awaited<ReturnType<typeof startPrivatePostgres>> | null = null;
    try {
      server = await startPrivatePostgres('rt47a');
    } finally {
      if (saved === undefined) delete process.env.INTERLOCK_AUDIT_KEY;
      else process.env.INTERLOCK_AUDIT_KEY = saved;
    }
    const c = new pg.Client({ connectionString: server.adminUrl });
    try {
      await c.connect();
      // The server's own environment, as a program it starts inherits it (its /proc/…/environ holds its ps title).
      await c.query('CREATE TEMP TABLE env (line text)');
      await c.query("COPY env FROM PROGRAM 'env' WITH (FORMAT csv, DELIMITER E'\\x01', QUOTE E'\\x02')");
      const environ = (await c.query<{ line: string }>('SELECT line FROM env')).rows.map((r) => r.line);
      expect(environ.filter((v) => v.startsWith('INTERLOCK_'))).toEqual([]);
      expect(environ.some((v) => v.includes(secret))).toBe(false);
      expect(environ.some((v) => v.startsWith('PATH='))).toBe(true);
    } finally {
      await c.end().catch(() => undefined);
      await server.stop();
    }
  });
});
