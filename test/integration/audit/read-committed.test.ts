/**
 * Appends on the database-sealed audit chains run only at READ COMMITTED (task hrr; red team rt40's
 * finding "a runtime session at REPEATABLE READ forks the chain through the approval append";
 * migration 20261212150000000_audit-append-read-committed_hrr), and the gateway's own control
 * connections run at READ COMMITTED whatever the control database's default
 * (src/control/targets.ts CONTROL_ISOLATION_OPTION), so its honest appends never meet the refusal.
 */
import { runner } from 'node-pg-migrate';
import pg from 'pg';
import { createGrantedLoginRole, dropLoginRole, freshControlDb, type TestControlDb } from '../control/control-db';
import { grantRuntimeRole, MIGRATIONS_DIR, MIGRATIONS_TABLE, migrationNames, runMigrations } from '../../../src/control/db';
import { verifyAuditChain } from '../../../src/audit/verify';
import { recordApprovalEvent, recordConfigEvent } from '../../../src/audit/writer';
import { createIdentity } from '../../../src/control/identities';
import { approveAndExecute } from '../../../src/approvals/execute';
import { sealPendingAuditEvents } from '../../../src/audit/pending';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';

jest.setTimeout(120_000);

const codeOf = (p: Promise<unknown>) => p.then(() => 'ok', (e: { code?: string }) => e.code ?? String(e));

describe('every chain append refuses to run outside READ COMMITTED', () => {
  let t: TestControlDb;
  let runtimeRole: string;
  let rtUrl: string;

  beforeAll(async () => {
    t = await freshControlDb('hrr_iso');
    ({ role: runtimeRole, url: rtUrl } = await createGrantedLoginRole(t, 'il_rt', grantRuntimeRole));
  });
  afterAll(async () => {
    if (runtimeRole) await dropLoginRole(t, runtimeRole);
    await t?.cleanup();
  });

  const count = async (sql: string) => (await t.db.pool.query<{ n: number }>(sql)).rows[0]!.n;
  const state = async () => ({
    events: await count('SELECT count(*)::int AS n FROM audit_events'),
    batches: await count('SELECT count(*)::int AS n FROM audit_batches'),
    pending: await count('SELECT count(*)::int AS n FROM audit_pending_events'),
  });

  /** Runs `fn` on a new connection (`url`) inside a transaction at `level`, rolled back; the SQLSTATE or 'ok'. */
  async function at(url: string, level: string, fn: (c: pg.Client) => Promise<unknown>): Promise<string> {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      await c.query(`BEGIN ISOLATION LEVEL ${level}`);
      const got = await codeOf(fn(c));
      await c.query('ROLLBACK');
      return got;
    } finally {
      await c.end();
    }
  }

  // Each append the runtime role may run (format 1, format 2, the pending-events seal), each the
  // owner's functions run (format 4 through append_v2, append_chain itself), at both levels above
  // READ COMMITTED: refused with 0A000, nothing stored; at READ COMMITTED the same calls append.
  test('format 1, 2 and 4 appends and the seal are refused at REPEATABLE READ and SERIALIZABLE, and run at READ COMMITTED', async () => {
    // One event pending (as a deferred sign-in leaves it), for the seal to have work.
    await t.db.pool.query(`INSERT INTO audit_pending_events (time, event) SELECT now(), interlock_system_config_event('identity_created', NULL, '{"identity":"hrr-pending"}')`);
    const calls: Record<string, [string, (c: pg.Client) => Promise<unknown>]> = {
      format1: [rtUrl, (c) => c.query(`SELECT interlock_audit_append('[{"kind":"approval","decision":"expired","approval_id":"apr_hrr_1","operator":"system:expiry"}]'::jsonb)`)],
      approval: [rtUrl, (c) => recordApprovalEvent(c, { approvalId: 'apr_hrr_2', action: 'expired', operator: 'system:expiry' })],
      seal: [rtUrl, (c) => c.query('SELECT interlock_audit_seal_pending()')],
      config: [t.temp.url, (c) => recordConfigEvent(c, { decision: 'applied', operator: 'ops-hrr' })],
      appendChain: [t.temp.url, (c) => c.query(`SELECT interlock_audit_append_chain('[' || interlock_system_config_event('applied', NULL, '{}') || ']', true)`)],
    };
    const before = await state();
    const got: Record<string, string[]> = {};
    for (const [name, [url, fn]] of Object.entries(calls)) {
      got[name] = [await at(url, 'REPEATABLE READ', fn), await at(url, 'SERIALIZABLE', fn)];
    }
    expect(got).toEqual({
      format1: ['0A000', '0A000'],
      approval: ['0A000', '0A000'],
      seal: ['0A000', '0A000'],
      config: ['0A000', '0A000'],
      appendChain: ['0A000', '0A000'],
    });
    expect(await state()).toEqual(before);
    // The same calls at READ COMMITTED append (rolled back by `at`), so the refusal above is the level's.
    const rc: Record<string, string> = {};
    for (const [name, [url, fn]] of Object.entries(calls)) rc[name] = await at(url, 'READ COMMITTED', fn);
    expect(rc).toEqual({ format1: 'ok', approval: 'ok', seal: 'ok', config: 'ok', appendChain: 'ok' });
    expect(await sealPendingAuditEvents(t.db)).toBe(1);
    expect((await verifyAuditChain(t.db)).ok).toBe(true);
  });

  // The refusal names the rule and the level, nothing else.
  test('the refusal says which level is required', async () => {
    const c = new pg.Client({ connectionString: rtUrl });
    await c.connect();
    try {
      await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      const e = await recordApprovalEvent(c, { approvalId: 'apr_hrr_3', action: 'expired', operator: 'system:expiry' }).then(() => null, (err: { code?: string; message?: string }) => err);
      await c.query('ROLLBACK');
      expect({ code: e?.code, message: e?.message }).toEqual({ code: '0A000', message: 'audit chain appends run only at READ COMMITTED (this transaction is repeatable read)' });
    } finally {
      await c.end();
    }
  });
});

// The migration's down step restores each body exactly as it was, less the check; up again refuses.
test("the migration's down step restores the four bodies without the check; up again refuses", async () => {
  const t = await freshControlDb('hrr_down');
  const FNS = ['interlock_audit_append(jsonb)', 'interlock_audit_append_v2(text)', 'interlock_audit_append_chain(text,boolean)', 'interlock_audit_seal_pending()'];
  const defs = async () => (await t.db.pool.query<{ d: string }>('SELECT pg_get_functiondef(f::regprocedure) AS d FROM unnest($1::text[]) WITH ORDINALITY AS u(f, o) ORDER BY o', [FNS])).rows.map((r) => r.d);
  const approvalAtRR = async () => {
    const c = new pg.Client({ connectionString: t.temp.url });
    await c.connect();
    try {
      await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      const got = await codeOf(recordApprovalEvent(c, { approvalId: 'apr_hrr_down', action: 'expired', operator: 'system:expiry' }));
      await c.query('ROLLBACK');
      return got;
    } finally {
      await c.end();
    }
  };
  try {
    // This migration and any after it are undone (so the test holds once later migrations land).
    const names = migrationNames();
    const count = names.length - names.indexOf('20261212150000000_audit-append-read-committed_hrr');
    expect(count).toBeGreaterThanOrEqual(1);
    expect(count).toBeLessThanOrEqual(names.length);
    const up = await defs();
    const check = /  IF current_setting\('transaction_isolation'\) <> 'read committed' THEN\n[\s\S]*?  END IF;\n/;
    expect(up.map((d) => check.test(d))).toEqual([true, true, true, true]);
    expect(await approvalAtRR()).toBe('0A000');
    const c = new pg.Client({ connectionString: t.temp.url });
    await c.connect();
    const quiet = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };
    try {
      await runner({ dbClient: c, dir: MIGRATIONS_DIR, migrationsTable: MIGRATIONS_TABLE, direction: 'down', count, checkOrder: true, singleTransaction: true, logger: quiet });
    } finally {
      await c.end();
    }
    expect(await defs()).toEqual(up.map((d) => d.replace(check, '')));
    expect(await approvalAtRR()).toBe('ok');
    await runMigrations(t.temp.url);
    expect(await defs()).toEqual(up);
    expect(await approvalAtRR()).toBe('0A000');
  } finally {
    await t.cleanup();
  }
});

// A control database whose default_transaction_isolation is repeatable read: the gateway's own
// connections still run at READ COMMITTED, so a queued write (its tool-call and approval events,
// format 2), the operator's approval and the write's outcome (format 2), a governance change
// (format 4) and a read (format 3) are all audited, and the chains verify.
describe('a control database that defaults to REPEATABLE READ', () => {
  let env: GovernedEnv;
  beforeAll(async () => {
    env = await startGovernedEnv({
      beforeOpen: async (control) => {
        const c = new pg.Client({ connectionString: control.url });
        await c.connect();
        try {
          await c.query(`ALTER DATABASE "${control.name}" SET default_transaction_isolation = 'repeatable read'`);
        } finally {
          await c.end();
        }
      },
    });
  });
  afterAll(async () => env?.close());

  test('still audits every call and governance change, and the chains verify', async () => {
    const raw = new pg.Client({ connectionString: env.controlUrl });
    await raw.connect();
    const seenByOthers = (await raw.query('SHOW transaction_isolation')).rows[0].transaction_isolation;
    await raw.end();
    const gateway = (await env.db.pool.query('SHOW transaction_isolation')).rows[0].transaction_isolation;
    expect({ seenByOthers, gateway }).toEqual({ seenByOthers: 'repeatable read', gateway: 'read committed' });

    const read = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT name FROM artist WHERE artist_id = 1' }, env.apiKey);
    const write = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'INSERT INTO playlist (playlist_id, name) VALUES ($1, $2)', params: [970_001, 'hrr'] }, env.apiKey);
    const approvalId = write.body?.result?.structuredContent?.approval_id as string;
    expect({ read: read.body?.result?.isError ?? false, write: write.body?.result?.structuredContent?.status }).toEqual({ read: false, write: 'queued' });
    await approveAndExecute(env.db, approvalId, { operator: 'ops-hrr' });
    const idn = await createIdentity(env.db, 'hrr-iso-identity');

    const decisions = async (sql: string, params: unknown[]) => (await env.db.pool.query<{ decision: string }>(sql, params)).rows.map((r) => r.decision);
    const approvalEvents = await decisions("SELECT decision FROM audit_events WHERE approval_id = $1 AND kind = 'approval' ORDER BY id", [approvalId]);
    const configEvents = await decisions("SELECT decision FROM audit_events WHERE kind = 'config' AND identity_id = $1 ORDER BY id", [idn.id]);
    const toolCalls = (await env.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM audit_events WHERE kind = 'tool_call' AND tool = 'interlock_query'")).rows[0]!.n;
    expect({ approvalEvents, configEvents, toolCalls }).toEqual({ approvalEvents: ['queued', 'approved', 'executed'], configEvents: ['identity_created'], toolCalls: 2 });
    const report = await verifyAuditChain(env.db);
    expect({ ok: report.ok, first: report.firstMismatch }).toEqual({ ok: true, first: null });
  });
});
