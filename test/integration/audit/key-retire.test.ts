/**
 * Retiring a registered audit key id (task low47 item 1; migration 20261216110000000_audit-key-retire_low47,
 * src/audit/keyed-trail.ts retireAuditKeyId, `interlock audit retire-key`), on real PostgreSQL: after
 * a rotation the owner retires the old (stolen) key's id; the database then refuses every batch under
 * it, a running writer's open chain included (42501), while verify still authenticates the batches it
 * tagged before with the key given. A gateway still configured with it goes not ready
 * (`audit_key_refused`), logs that the key id is retired, and answers agents audit_unavailable with the
 * code's audit_key_refused message, which promises nothing from a retry (item 2).
 */
import pg from 'pg';
import pino from 'pino';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { createGrantedLoginRole, dropLoginRole, freshControlDb, type TestControlDb } from '../control/control-db';
import { grantRuntimeRole, migrationNames } from '../../../src/control/db';
import { ChainLane } from '../../../src/audit/chain';
import { auditKey, auditKeyring, type AuditKey } from '../../../src/audit/key';
import { verifyAuditChain } from '../../../src/audit/verify';
import { registerAuditKeyIds, retireAuditKeyId } from '../../../src/audit/keyed-trail';
import { keyedTrailRefusal } from '../../../src/audit/writer';
import { requireAuditKey } from '../../../src/cli/audit';
import { runCli } from '../../../src/cli/main';
import { migrateDown } from '../../helpers/migrate-down';
import { BASE_AUDIT_ROW } from '../../helpers/audit-events';
import { callTool, startGovernedEnv } from '../../helpers/governed';
import errors from '../../../spec/errors-v1.json';

jest.setTimeout(120_000);

const MIGRATION = '20261216110000000_audit-key-retire_low47';
const secretOf = () => randomBytes(32).toString('base64');
const row = (request: string) => ({ ...BASE_AUDIT_ROW, request_id: request });
const errorOf = (p: Promise<unknown>) => p.then(() => null, (e: { code?: string; message?: string }) => e);
const KEY_REFUSED_MESSAGE = errors.refusals.find((r) => r.code === 'audit_unavailable')!.causes!.find((c) => c.cause === 'audit_key_refused')!.message;

describe('interlock audit retire-key', () => {
  let t: TestControlDb;
  let role: string;
  let rt: pg.Pool;
  let dir: string;
  beforeAll(async () => {
    t = await freshControlDb('key_retire');
    const granted = await createGrantedLoginRole(t, 'il_rt', grantRuntimeRole);
    role = granted.role;
    rt = new pg.Pool({ connectionString: granted.url, max: 1 });
    dir = mkdtempSync(join(tmpdir(), 'il-retire-'));
  });
  afterAll(async () => {
    await rt?.end();
    if (role) await dropLoginRole(t, role);
    await t?.cleanup();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** Runs the CLI on the test's control database with a config file holding `audit` (the keys' secrets). */
  const cli = async (audit: { key?: string; previous_keys?: string[] }, ...args: string[]) => {
    const file = join(dir, `c-${randomBytes(4).toString('hex')}.json`);
    writeFileSync(file, JSON.stringify({ audit }), { mode: 0o600 });
    let out = '';
    let err = '';
    const code = await runCli(['--config', file, '--database-url', t.temp.url, ...args], { out: (x) => void (out += x + '\n'), err: (x) => void (err += x + '\n') });
    return { code, out, err };
  };

  // Shown failing before task low47: there was no retire-key command, and a registered id stayed accepted, an open chain's batches under it included.
  test('after a rotation the old id is retired: new batches under it are refused (an open chain too), old ones verify with it; refusals are clear', async () => {
    const s1 = secretOf();
    const s2 = secretOf();
    const k1: AuditKey = auditKey(s1);
    const k2: AuditKey = auditKey(s2);
    // A gateway's lane under the old key, its chain left open (a gateway still running).
    const old = new ChainLane(rt, k1);
    const a0 = await old.append([row('r1')], 5000);
    const a1 = await old.append([row('r2')], 5000);
    // The rotation: k2 signs, k1 only verifies; both registered.
    const rotated = { key: s2, previous_keys: [s1] };
    expect(await requireAuditKey(t.db, auditKeyring(rotated))).toMatchObject({ keyIds: [k1.id, k2.id].sort() });

    // Refused: the key configured now, an id not registered, not an id.
    expect(await cli({ key: s1 }, 'audit', 'retire-key', k1.id)).toEqual({
      code: 2,
      out: '',
      err: `error: audit key id ${k1.id} is the key configured now (audit.key / INTERLOCK_AUDIT_KEY): configure the new key as audit.key and this one in audit.previous_keys, run \`interlock audit require-key\`, move every gateway to the new key, then retire ${k1.id}\n`,
    });
    expect(await cli(rotated, 'audit', 'retire-key', '0123456789abcdef')).toEqual({ code: 3, out: '', err: `error: audit key id 0123456789abcdef is not registered (registered: ${[k1.id, k2.id].sort().join(', ')})\n` });
    expect((await cli(rotated, 'audit', 'retire-key', 'K1')).code).toBe(2);
    // The runtime role can neither retire nor lift a retirement.
    expect((await errorOf(rt.query('SELECT interlock_audit_retire_key($1)', [k1.id])))?.code).toBe('42501');
    expect((await t.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM audit_events WHERE decision = 'audit_key_retired'")).rows[0].n).toBe(0);

    const r = await cli(rotated, '--json', 'audit', 'retire-key', k1.id);
    expect([r.code, r.err, JSON.parse(r.out)]).toEqual([0, '', { keyId: k1.id, already: false, retired: [k1.id], active: [k2.id] }]);
    // Recorded as a config event in the operator's name.
    const ev = await t.db.pool.query("SELECT kind, action, operator, details FROM audit_events WHERE decision = 'audit_key_retired'");
    expect(ev.rows).toEqual([{ kind: 'config', action: 'config', operator: userInfo().username, details: { keyId: k1.id } }]);

    // The open chain's next batch under k1 is refused, and so is a new chain under k1; k2 goes in.
    const refused = await errorOf(old.append([row('r3')], 5000));
    expect(refused?.code).toBe('42501');
    expect(refused?.message).toBe(`audit_batches: the audit trail is keyed (audit_keyed_trail) and audit key id ${k1.id} is retired (\`interlock audit retire-key\`): configure a registered key that is not retired as audit.key (the retired key only in audit.previous_keys, to verify its batches)`);
    expect(keyedTrailRefusal(refused)).toBe('key_retired');
    expect((await errorOf(new ChainLane(t.db.pool, k1).append([row('r4')], 5000)))?.code).toBe('42501');
    const b0 = await new ChainLane(rt, k2).append([row('r5')], 5000);
    expect((await t.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM audit_events WHERE request_id IN ('r3', 'r4')")).rows[0].n).toBe(0);
    // What k1 tagged before still authenticates with it.
    expect(await verifyAuditChain(t.db, { keys: auditKeyring(rotated).byId })).toMatchObject({ ok: true, mismatchCount: 0, keyed: { batches: 3, authenticated: 3, unauthenticated: 0 } });
    expect((await t.db.pool.query<{ id: string }>('SELECT id::text FROM audit_batches WHERE format = 5 ORDER BY id')).rows.map((x) => x.id)).toEqual([a0, a1, b0]);

    // Again: nothing changes, no second event.
    const again = await cli(rotated, 'audit', 'retire-key', k1.id);
    expect(again).toEqual({ code: 0, out: `audit key id ${k1.id} was already retired; registered key id(s) in use: ${k2.id}; retired: ${k1.id}\n`, err: '' });
    // Registering it again (require-key, a gateway owning the trail at start) does not undo it; require-key with it as audit.key says so.
    await requireAuditKey(t.db, auditKeyring(rotated));
    expect(await cli({ key: s1 }, 'audit', 'require-key')).toEqual({
      code: 0,
      out: `the audit trail is keyed (since batch ${a1}, require_key); registered key id(s): ${[k1.id, k2.id].sort().join(', ')} (none new)\n`,
      err: `warning: audit key id ${k1.id} (audit.key) is retired (\`interlock audit retire-key\`): the database refuses every batch under it; configure a registered key that is not retired as audit.key\n`,
    });
    expect((await cli(rotated, 'audit', 'require-key')).err).toBe('');
    await registerAuditKeyIds(t.db.pool, [k1.id], 'gateway_start');
    expect((await t.db.pool.query('SELECT key_ids, retired_key_ids FROM audit_keyed_trail')).rows).toEqual([{ key_ids: [k1.id, k2.id].sort(), retired_key_ids: [k1.id] }]);
    expect((await errorOf(new ChainLane(rt, k1).append([row('r6')], 5000)))?.code).toBe('42501');
    // The last registered id not retired is refused (the table's CHECK backs it: 23514).
    const k3 = secretOf();
    expect(await cli({ key: k3, previous_keys: [s1, s2] }, 'audit', 'retire-key', k2.id)).toEqual({
      code: 2,
      out: '',
      err: `error: audit key id ${k2.id} is the last registered key id not retired: configure a new key as audit.key, register it with \`interlock audit require-key\`, then retire ${k2.id}\n`,
    });
    expect((await errorOf(t.db.pool.query('SELECT interlock_audit_retire_key($1)', [k2.id])))?.code).toBe('23514');
    expect((await t.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM audit_events WHERE decision = 'audit_key_retired'")).rows[0].n).toBe(1);
    // Down is refused while an id is retired (it would accept its batches again).
    const names = migrationNames();
    await expect(migrateDown(t.temp.url, names.length - names.indexOf(MIGRATION))).rejects.toThrow(/retired audit key ids/);
  });

  test('on a trail not keyed there is nothing to retire', async () => {
    const fresh = await freshControlDb('key_retire_unkeyed');
    try {
      const k = auditKey(secretOf());
      await expect(retireAuditKeyId(fresh.db, k.id, null, { operator: 'test' })).rejects.toThrow('the audit trail is not keyed: there is no registered audit key id to retire (`interlock audit require-key` registers them)');
    } finally {
      await fresh.cleanup();
    }
  });
});

describe('a governed gateway whose key is retired (task low47 items 1 and 2)', () => {
  // Shown failing before: the gateway kept writing its open chains under the retired id (ready, calls answered);
  // and with a refused key the agent was told "try again later".
  test('not ready (audit_key_refused), one error line saying the id is retired, agents told a retry will not help, no Retry-After', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const sink = { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) };
    const s1 = secretOf();
    const k1 = auditKey(s1);
    const k2 = auditKey(secretOf());
    const env = await startGovernedEnv({ config: { audit: { key: s1 } }, logger: pino({ level: 'info' }, sink) });
    try {
      const ready = async () => {
        const r = await fetch(`${env.url.replace(/\/mcp$/, '')}/readyz`);
        return [r.status, await r.json()];
      };
      const first = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT 1 AS n' }, env.apiKey);
      expect(first.body.result.structuredContent).toMatchObject({ rows: [{ n: 1 }] });
      // The owner rotates to k2 and retires k1, which this gateway still signs with.
      await registerAuditKeyIds(env.db.pool, [k2.id], 'require_key');
      expect(await retireAuditKeyId(env.db, k1.id, k2.id, { operator: 'test' })).toEqual({ keyId: k1.id, already: false, retired: [k1.id], active: [k2.id] });
      for (const i of [2, 3]) {
        const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: `SELECT ${i} AS n` }, env.apiKey);
        expect(r.status).toBe(200);
        expect(r.body.result.isError).toBe(true);
        expect(r.body.result.structuredContent).toEqual({ status: 'unavailable', code: 'audit_unavailable', message: KEY_REFUSED_MESSAGE, request_id: expect.any(String) });
        expect(r.body.result.content).toEqual([{ type: 'text', text: `Refused (unavailable, audit_unavailable): ${KEY_REFUSED_MESSAGE}` }]);
      }
      expect(KEY_REFUSED_MESSAGE).not.toMatch(/try again|retry after|later/i);
      // The modern dialect: the same message, HTTP 503, no Retry-After.
      const modern = await fetch(env.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'interlock_query', authorization: `Bearer ${env.apiKey}` },
        body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: 'SELECT 4 AS n' }, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } } }),
      });
      expect([modern.status, modern.headers.get('retry-after')]).toEqual([503, null]);
      expect(((await modern.json()) as { error: unknown }).error).toEqual({ code: -32603, message: KEY_REFUSED_MESSAGE, data: { status: 'unavailable', code: 'audit_unavailable', message: KEY_REFUSED_MESSAGE, request_id: expect.any(String) } });
      expect(await ready()).toEqual([503, { status: 'not_ready', reason: 'audit_key_refused' }]);
      const refusals = lines.filter((l) => l.component === 'audit' && l.reason === 'key_retired');
      expect(refusals).toHaveLength(1);
      expect(refusals[0]).toMatchObject({ level: 50, code: '42501', keyId: k1.id });
      expect(refusals[0].msg).toBe(`the audit trail is keyed and this gateway's audit key (id ${k1.id}) is retired (\`interlock audit retire-key\`): every governed call is refused audit_unavailable, and /readyz reports audit_key_refused, until the gateway runs with a registered key that is not retired as audit.key (INTERLOCK_AUDIT_KEY), the retired one only in audit.previous_keys (docs/operators.md "The audit key")`);
      // What k1 tagged before it was retired still verifies with it.
      expect(await verifyAuditChain(env.db, { keys: new Map([[k1.id, k1]]) })).toMatchObject({ mismatchCount: 0, keyed: { unauthenticated: 0 } });
    } finally {
      await env.close();
    }
  });
});
