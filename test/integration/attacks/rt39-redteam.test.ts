/**
 * Red team rt39: three changes merged into main on 2026-12-11 attacked on real PostgreSQL and over
 * loopback, every wait bounded.
 *
 *  1. hchain: token sign-in events stored in audit_pending_events while the approval events' chain
 *     lock is held (migration 20261211140000000), chained by the next append or the seal.
 *  2. hdeny: one-part role resources on PostgreSQL sources (src/governance/evaluator.ts covers).
 *  3. h29y: the refusal at capacity decided from a modern tools/call's headers (early-refusal.ts).
 *
 * Each test is one attack; its comment says whether it is a finding (severity, fixed or not:
 * test.failing while open) or an attack the change withstands.
 */
import pg from 'pg';
import { grantRuntimeRole, openControlDb, type ControlDb } from '../../../src/control/db';
import { createGrantedLoginRole, dropLoginRole, freshControlDb, type TestControlDb } from '../control/control-db';
import { sealPendingAuditEvents } from '../../../src/audit/pending';
import { verifyAuditChain } from '../../../src/audit/verify';
import { within } from './harness';

jest.setTimeout(300_000);

describe('hchain: pending sign-in events, runtime role credential', () => {
  let t: TestControlDb;
  let runtimeRole: string;
  let rtUrl: string;
  let rt: ControlDb;
  const codeOf = (c: { query: (s: string, p?: unknown[]) => Promise<unknown> }, sql: string, params: unknown[] = []) =>
    c.query(sql, params).then(() => 'ok', (e: { code?: string }) => e.code ?? String(e));

  beforeAll(async () => {
    t = await freshControlDb('rt39');
    ({ role: runtimeRole, url: rtUrl } = await createGrantedLoginRole(t, 'il_rt', grantRuntimeRole));
    rt = await openControlDb(rtUrl, { migrate: false, poolSize: 2 });
  });
  afterAll(async () => {
    await rt?.close();
    if (runtimeRole) await dropLoginRole(t, runtimeRole);
    await t?.cleanup();
  });

  // Finding (high, fixed: migration 20261211150000000_pending-audit-chunks_rt39): the drain chained
  // every pending event as ONE format-2 batch (string_agg of all of them, then ::jsonb). A holder of
  // the runtime credential keeps the chain's lock in one session (any append it holds open) and, in
  // another, provisions token identities with 2048-character issuers of 4-byte characters (8 KiB a
  // event, each accepted at once as pending, none waiting). Past 256 MiB of pending text the drain's
  // jsonb exceeds PostgreSQL's limit (54000): the gateway's seal fails on every run, and since every
  // append on the format-2 chain drains first, every approval event, source-removal rejection and
  // sign-in that gets the lock fails too, for ever (nobody may delete a pending row but the owner by
  // hand). Now the drain chains them in batches of at most 1000 events / 8 MiB, in id order.
  test('finding (high, fixed): a pending backlog past jsonb\'s size limit does not fail the seal and every later append', async () => {
    const holder = await t.db.pool.connect();
    const c = new pg.Client({ connectionString: rtUrl });
    await c.connect();
    const N = 33_000;
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE');
      // 2040 four-byte characters: 8 KiB of issuer in each event (length() counts characters).
      const issuer = `https://${'\u{1F600}'.repeat(2040)}`;
      const r = await within(
        codeOf(c, `DO $$ BEGIN FOR g IN 1..${N} LOOP PERFORM interlock_provision_token_identity('idn_' || lpad(to_hex(g), 20, '0'), 'rt39-' || g, '${issuer}', 's' || g); END LOOP; END $$`),
        240_000,
      );
      expect(r).toBe('ok');
      await holder.query('COMMIT');
      const pending = (await t.db.pool.query<{ n: number; bytes: string }>('SELECT count(*)::int AS n, sum(octet_length(event))::text AS bytes FROM audit_pending_events')).rows[0]!;
      expect(pending.n).toBe(N);
      expect(Number(pending.bytes)).toBeGreaterThan(256 * 1024 * 1024);
      // The gateway's seal, then an approval-like append of the owner.
      const seal = await within(sealPendingAuditEvents(rt).then((n) => n, (e: { code?: string }) => e.code ?? String(e)), 240_000);
      const append = await codeOf(t.db.pool, `SELECT interlock_audit_append_chain('[' || interlock_system_config_event('rt39_probe', NULL, '{}') || ']', false)`);
      expect({ seal, append }).toEqual({ seal: N, append: 'ok' });
      expect((await t.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM audit_pending_events')).rows[0]!.n).toBe(0);
      const chained = (await t.db.pool.query<{ n: number; batches: number }>("SELECT count(*)::int AS n, count(DISTINCT batch_id)::int AS batches FROM audit_events WHERE decision = 'identity_created' AND details->>'identity' LIKE 'rt39-%'")).rows[0]!;
      expect(chained.n).toBe(N);
      expect(chained.batches).toBeGreaterThan(1);
      // In their order: event ids follow the pending ids (the identity number).
      const order = (await t.db.pool.query<{ ok: boolean }>("SELECT bool_and(x.ok) AS ok FROM (SELECT (substr(details->>'identity', 6))::int > lag((substr(details->>'identity', 6))::int, 1, 0) OVER (ORDER BY id) AS ok FROM audit_events WHERE decision = 'identity_created' AND details->>'identity' LIKE 'rt39-%') x")).rows[0]!;
      expect(order.ok).toBe(true);
      const report = await verifyAuditChain(t.db);
      expect({ ok: report.ok, first: report.firstMismatch }).toEqual({ ok: true, first: null });
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      holder.release();
      await c.end();
    }
  });
});
