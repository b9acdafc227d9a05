/**
 * Red team rtgov: the governance changes' audit trail, attacked from the operator side and read
 * as an auditor who must reconstruct "who granted what" (issue hgov item 1; docs/operators.md
 * "Audit"). Each test is one finding: an operator name that forges the gateway's own ("system")
 * or a second line of `audit tail`, fixed; a source update beside another one that reverted the
 * other's change or recorded it twice, fixed; grants and identities made from access-token claims
 * with no config event, a config event forged by the gateway's runtime role, every governance
 * change stalled by the runtime role holding the config chain's lock, and grants made by
 * `interlock apply` missing from their source's trail, fixed by hgov2 (migration
 * 20261208220000000_governance-audit-chain_hgov2.sql, src/declarative/apply.ts, src/audit/verify.ts).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { ADMIN_URL, createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { grantRuntimeRole, openControlDb, type ControlDb } from '../../../src/control/db';
import { runCli } from '../../../src/cli/main';
import { syncClaimGrants } from '../../../src/auth/token-identities';
import { configRow, recordApprovalEvent, recordConfigEvent } from '../../../src/audit/writer';
import { ChainLane } from '../../../src/audit/chain';
import { updateSource } from '../../../src/control/sources';
import { createIdentity } from '../../../src/control/identities';

jest.setTimeout(120_000);

let temp: TempDatabase;
let db: ControlDb;
let dir: string;

async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(['--database-url', temp.url, ...args], { out: (t) => (stdout += t.endsWith('\n') ? t : t + '\n'), err: (t) => (stderr += t.endsWith('\n') ? t : t + '\n') });
  return { code, stdout, stderr };
}

interface ConfigEvent {
  decision: string;
  operator: string;
  source_id: string | null;
  details: Record<string, unknown>;
}

async function lastId(): Promise<string> {
  return (await db.pool.query<{ id: string }>('SELECT coalesce(max(id), 0)::text AS id FROM audit_events')).rows[0].id;
}

async function configEventsAfter(after: string): Promise<ConfigEvent[]> {
  return (await db.pool.query<ConfigEvent>("SELECT decision, operator, source_id, details FROM audit_events WHERE kind = 'config' AND id > $1 ORDER BY id", [after])).rows;
}

beforeAll(async () => {
  temp = await createTempDatabase('ctl_govaudit_rt');
  dir = mkdtempSync(join(tmpdir(), 'il-govaudit-rt-'));
  expect((await cli('db', 'migrate')).code).toBe(0);
  db = await openControlDb(temp.url, { migrate: false });
  // A documents source and a role to grant on it.
  const docs = mkdtempSync(join(dir, 'docs-'));
  expect((await cli('source', 'add', '--type', 'documents', '--id', 'docs', '--path', docs)).code).toBe(0);
  const role = join(dir, 'reader.yaml');
  writeFileSync(role, 'name: reader\nstatements:\n  - { effect: allow, action: read, resource: "*" }\n');
  expect((await cli('role', 'create', role)).code).toBe(0);
  // The gateway configuration's claim rule (reader on docs for https://issuer.example), recorded as the
  // owner: interlock_sync_claim_grants gives only pairs a rule of the issuer names (task hcg).
  const config = join(dir, 'gateway.yaml');
  writeFileSync(config, 'auth:\n  resource: https://gw.example/mcp\n  issuers:\n    - issuer: https://issuer.example\n      role_grants:\n        - { claim: groups, value: readers, role: reader, source: docs }\n');
  expect((await cli('--config', config, 'db', 'sync-claim-rules')).code).toBe(0);
});
afterAll(async () => {
  await db?.close();
  await temp?.drop();
  rmSync(dir, { recursive: true, force: true });
});

// Finding 1 (low, fixed): an operator token named "system" signs its admin-API and console changes
// with the name the trail reserves for the gateway's own changes (docs: "Changes the gateway makes
// itself name the operator `system`"), so an auditor cannot tell them apart.
test('an operator token cannot be named "system" (the gateway\'s own name in the trail); nothing is created or recorded', async () => {
  const before = await lastId();
  const r = await cli('operator-token', 'create', 'system');
  expect(r.code).toBe(2);
  expect(r.stderr).toContain('reserved');
  expect((await db.pool.query("SELECT 1 FROM operator_tokens WHERE name = 'system'")).rowCount).toBe(0);
  expect(await configEventsAfter(before)).toEqual([]);
});

// Finding 2 (low, fixed): --operator took any text, so a change could be recorded as "system", as
// an empty name, or with a newline that `audit tail` prints as a second, forged line.
test('--operator refuses "system", an empty name and control characters; a valid name is recorded as given', async () => {
  for (const bad of ['system', '', 'alice\n2026-12-05 grant_added bob', 'alice\u001b[2K']) {
    const before = await lastId();
    const r = await cli('source', 'update', 'docs', '--description', 'x', '--operator', bad);
    expect(r.code).toBe(2);
    expect(await configEventsAfter(before)).toEqual([]);
    expect((await db.pool.query("SELECT description FROM sources WHERE id = 'docs'")).rows).toEqual([{ description: '' }]);
  }
  const before = await lastId();
  expect((await cli('source', 'update', 'docs', '--description', 'handbook', '--operator', 'Ops.Anna')).code).toBe(0);
  expect(await configEventsAfter(before)).toEqual([{ decision: 'source_updated', operator: 'Ops.Anna', source_id: 'docs', details: { changed: ['description'] } }]);
});

// Finding 5 (medium, fixed): updateSource read the source outside its transaction and wrote the
// whole row from that read. With another update of the same source in flight, (a) the same change
// made twice recorded two source_updated events (the second changed nothing), and (b) a change of
// another field was silently reverted while the event named only the caller's own path, so the
// trail no longer said what the source held. The caller's transaction now locks the row first.
describe('source update beside another in flight', () => {
  let x: pg.Client;
  beforeEach(async () => {
    x = new pg.Client({ connectionString: temp.url });
    await x.connect();
    await db.pool.query("UPDATE sources SET description = 'start' WHERE id = 'docs'");
  });
  afterEach(async () => {
    await x.end();
  });

  /** Runs `fn` while `x` holds an uncommitted UPDATE of the source (`set`), committing it once `fn` waits for its lock. */
  async function beside<T>(set: string, fn: () => Promise<T>): Promise<T> {
    await x.query('BEGIN');
    await x.query(`UPDATE sources SET ${set}, updated_at = now() WHERE id = 'docs'`);
    const p = fn();
    for (let i = 0; i < 500; i++) {
      const w = await db.pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'", [temp.name]);
      if (w.rows[0].n > 0) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    await x.query('COMMIT');
    return p;
  }

  test('the same change already made by the other records nothing', async () => {
    const before = await lastId();
    const r = await beside("description = 'same'", () => updateSource(db, 'docs', { description: 'same' }, { operator: 'ops-b' }));
    expect(r.changed).toEqual([]);
    expect(await configEventsAfter(before)).toEqual([]);
    expect((await db.pool.query("SELECT description FROM sources WHERE id = 'docs'")).rows).toEqual([{ description: 'same' }]);
  });

  test('another field changed by the other is kept, and the event names only this change', async () => {
    const before = await lastId();
    const r = await beside("description = 'by-x'", () => updateSource(db, 'docs', { name: 'Docs' }, { operator: 'ops-b' }));
    expect(r.changed).toEqual(['name']);
    expect((await db.pool.query("SELECT name, description FROM sources WHERE id = 'docs'")).rows).toEqual([{ name: 'Docs', description: 'by-x' }]);
    expect(await configEventsAfter(before)).toEqual([{ decision: 'source_updated', operator: 'ops-b', source_id: 'docs', details: { changed: ['name'] } }]);
  });
});

// Finding 7 (low, fixed): `interlock apply` records one `applied` event with no source, so
// `audit search --kind config --source docs`, the documented way to read one source's governance
// history, does not show a grant on docs made by apply (nor by the demo, which provisions through
// apply); the grant is only found by reading every applied event's `changes` text
// ("create grant apply-agent/reader/docs"). A fix: also record, in the same transaction, one
// event per source the apply touched (or a `sources` list that search matches). Fixed: apply also
// records each grant it adds or removes and each source it adds or updates as its own event (the
// decisions of `interlock grant/revoke/source add/update`, with the file's digest), in the same
// batch as `applied`, whose details.sources (matched by search --source) lists every source its
// changes concern, policies' and roles' included.
test('a grant made by interlock apply appears in its source\'s config trail', async () => {
  const f = join(dir, 'grant.yaml');
  writeFileSync(f, 'version: 1\nidentities:\n  - name: apply-agent\n    grants:\n      - { role: reader, source: docs }\n');
  const applied = await cli('apply', '-f', f, '--operator', 'ops-anna');
  expect(applied.code).toBe(0);
  expect((await db.pool.query("SELECT 1 FROM grants g JOIN identities i ON i.id = g.identity_id WHERE i.name = 'apply-agent' AND g.role_name = 'reader' AND g.source_id = 'docs'")).rowCount).toBe(1);
  const search = JSON.parse((await cli('--json', 'audit', 'search', '--kind', 'config', '--source', 'docs')).stdout) as { events: Array<{ decision: string; operator: string }> };
  expect(search.events.filter((e) => e.operator === 'ops-anna').map((e) => e.decision)).toContain('grant_added');
  const mine = (await configEventsAfter('0')).filter((e) => e.operator === 'ops-anna' && ['grant_added', 'applied'].includes(e.decision));
  const digest = mine.find((e) => e.decision === 'applied')!.details.digest;
  expect(mine.find((e) => e.decision === 'grant_added')).toEqual({ decision: 'grant_added', operator: 'ops-anna', source_id: 'docs', details: { identityId: expect.stringMatching(/^idn_/), identity: 'apply-agent', role: 'reader', digest } });
  // Pruned away, the grant's removal is found the same way; applying the same file again records nothing per item.
  writeFileSync(f, 'version: 1\nidentities:\n  - name: apply-agent\n');
  const before = await lastId();
  expect((await cli('apply', '-f', f, '--prune', '--operator', 'ops-anna')).code).toBe(0);
  expect((await configEventsAfter(before)).map((e) => [e.decision, e.source_id])).toEqual([['grant_revoked', 'docs'], ['applied', null]]);
  const again = await lastId();
  expect((await cli('apply', '-f', f, '--prune', '--operator', 'ops-anna')).code).toBe(0);
  expect((await configEventsAfter(again)).map((e) => e.decision)).toEqual(['applied']);
  // A policy limited to docs has no event of its own per source: its apply's `applied` lists docs in
  // details.sources, and search by source finds it there.
  const pf = join(dir, 'policy.yaml');
  writeFileSync(pf, 'version: 1\npolicies:\n  - name: docs-cap\n    applies_to: { sources: [docs] }\n    rule: { type: max_rows, max_rows: 10 }\n');
  const pol = await cli('apply', '-f', pf, '--operator', 'ops-bo');
  expect(pol.code).toBe(0);
  const bySource = JSON.parse((await cli('--json', 'audit', 'search', '--kind', 'config', '--source', 'docs')).stdout) as { events: Array<{ decision: string; operator: string; details: { sources?: string[]; changes?: string[] } }> };
  expect(bySource.events.filter((e) => e.operator === 'ops-bo').map((e) => [e.decision, e.details.sources, e.details.changes])).toEqual([['applied', ['docs'], ['create policy docs-cap: applies_to.sources, description, enabled, name, rule.max_rows, rule.type']]]);
});

// Finding 3 (medium, fixed): identities provisioned from an access token and the grants that follow
// its claims (interlock_provision_token_identity, interlock_sync_claim_grants, run by the gateway
// as its runtime role) change governance state with no config event, so "who granted role reader
// on docs to tok-user" has no answer in the trail (the grants table says granted_by = 'claims',
// the trail says nothing; a claim-granted role removed later leaves no trace at all).
// A fix: the two SECURITY DEFINER functions record an event themselves (operator "system", details
// issuer and identity, never the subject's claims' values) through the format-2 append, in their
// own statement (migration 20261208220000000).
test('identities and grants made from access-token claims record config events (identity_created, grant_added, grant_revoked)', async () => {
  const before = await lastId();
  const id = `idn_${randomBytes(10).toString('hex')}`;
  const issuer = 'https://issuer.example';
  await db.pool.query('SELECT interlock_provision_token_identity($1, $2, $3, $4)', [id, 'tok-user', issuer, 'sub-1']);
  await syncClaimGrants(db, issuer, 'sub-1', [{ role: 'reader', source: 'docs' }]);
  expect((await db.pool.query('SELECT role_name, source_id, granted_by FROM grants WHERE identity_id = $1', [id])).rows).toEqual([{ role_name: 'reader', source_id: 'docs', granted_by: 'claims' }]);
  await syncClaimGrants(db, issuer, 'sub-1', []);
  expect((await db.pool.query('SELECT 1 FROM grants WHERE identity_id = $1', [id])).rowCount).toBe(0);
  expect((await configEventsAfter(before)).map((e) => [e.decision, e.operator, e.source_id])).toEqual([
    ['identity_created', 'system', null],
    ['grant_added', 'system', 'docs'],
    ['grant_revoked', 'system', 'docs'],
  ]);
  // Details name issuer, identity and role; never the token's subject.
  const events = await configEventsAfter(before);
  expect(events[0].details).toEqual({ identity: 'tok-user', identityId: id, issuer });
  expect(events[1].details).toEqual({ grantedBy: 'claims', identity: 'tok-user', identityId: id, issuer, role: 'reader' });
  expect(JSON.stringify(events)).not.toContain('sub-1');
  expect((await cli('audit', 'verify')).code).toBe(0);
});

// Finding 4 (medium, fixed): the runtime role (`interlock db grant-runtime-role`) makes no
// governance change itself (it may not write roles, grants, identities, policies, sources or
// tokens), yet it may append an event of kind config through interlock_audit_append_v2 (granted for
// approval events) naming any operator, and `audit verify` accepts it: a stolen runtime credential
// can write "alice granted reader on docs to mallory" into the trail. A fix: the append function
// refuses kind config unless its caller may change governance state (e.g. the table owner), and the
// runtime role's INSERT on audit_events is held to its own kinds (a check on kind in its lanes): a
// migration and a verify rule. Fixed by migration 20261208220000000: config events go to a chain of
// their own (format 4) that interlock_audit_append_v2 appends only for a login role that may INSERT
// into grants; the runtime role's direct INSERTs store format-3 batches only (row-level security),
// and verify names a config event in a format-3 batch (misplaced_config).
describe('runtime role', () => {
  let role: string;
  let admin: pg.Client;
  let rt: pg.Client;
  let rtPool: pg.Pool;
  beforeAll(async () => {
    role = `il_rtgov_${randomBytes(4).toString('hex')}`;
    admin = new pg.Client({ connectionString: ADMIN_URL });
    await admin.connect();
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'rt-${role}'`);
    await grantRuntimeRole(db, role);
    const u = new URL(temp.url);
    u.username = role;
    u.password = `rt-${role}`;
    rt = new pg.Client({ connectionString: u.toString() });
    await rt.connect();
    rtPool = new pg.Pool({ connectionString: u.toString(), max: 1 });
  });
  afterAll(async () => {
    await rt?.end();
    await rtPool?.end();
    for (const what of ['ALL TABLES IN SCHEMA public', 'ALL SEQUENCES IN SCHEMA public', 'ALL FUNCTIONS IN SCHEMA public', 'SCHEMA public']) await db.pool.query(`REVOKE ALL ON ${what} FROM ${role}`);
    await admin.query(`REVOKE ALL ON DATABASE "${temp.name}" FROM ${role}`);
    await admin.query(`DROP ROLE ${role}`);
    await admin.end();
  });

  test('cannot make a governance change itself (the premise: it has no config event of its own to record)', async () => {
    await expect(rt.query("INSERT INTO grants (identity_id, role_name, source_id) SELECT id, 'reader', 'docs' FROM identities LIMIT 1")).rejects.toMatchObject({ code: '42501' });
    await expect(rt.query("UPDATE sources SET enabled = false WHERE id = 'docs'")).rejects.toMatchObject({ code: '42501' });
  });

  // Finding 6 (low-medium, fixed): every config event (and approval event) appends to the one
  // format-2 chain under audit_chain_lock, which interlock_audit_append_v2 holds until its caller's
  // transaction ends. The runtime role may call it, so a runtime credential that appends an event and
  // leaves its transaction open stalls every governance change (CLI, admin API, console, apply) for
  // as long as it likes: nothing is changed without its event, but nothing can be changed. A fix
  // needs the append not to hold a lock the caller controls (e.g. the runtime role's approval
  // events on its own format-3 lanes, or a lock_timeout on operator transactions with a clear
  // error). Fixed: config events have their own chain and lock (format 4), which the runtime role
  // cannot take (its config appends are refused); what it can still append (approval events, and the
  // identities and grants of token claims, through the definer functions) goes to the format-2 chain.
  test('cannot stall governance changes by holding the config chain\'s lock', async () => {
    await rt.query('BEGIN');
    await rt.query('SAVEPOINT s');
    await expect(recordConfigEvent(rt, { decision: 'noise', operator: 'x', details: {} })).rejects.toMatchObject({ code: '42501' });
    await rt.query('ROLLBACK TO SAVEPOINT s');
    // What it may still append, each holding the format-2 chain's lock until its transaction ends.
    await recordApprovalEvent(rt, { approvalId: 'apr_stall', action: 'expired', operator: 'system:expiry' });
    await rt.query('SELECT interlock_provision_token_identity($1, $2, $3, $4)', [`idn_${randomBytes(10).toString('hex')}`, 'stall-tok', 'https://issuer.example', 'sub-stall']);
    await rt.query('SELECT interlock_sync_claim_grants($1, $2, $3::text[], $4::text[])', ['https://issuer.example', 'sub-stall', ['reader'], ['docs']]);
    const rtPid = (await rt.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    const made = createIdentity(db, 'stalled-agent', { operator: 'ops-anna' });
    let blocked = false;
    try {
      for (let i = 0; i < 300 && !blocked; i++) {
        const w = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))', [rtPid]);
        blocked = w.rows[0].n > 0;
        if (!blocked) await new Promise((r) => setTimeout(r, 10));
      }
    } finally {
      await rt.query('ROLLBACK');
    }
    await made;
    expect(blocked).toBe(false);
  });

  test('cannot append a config event in an operator\'s name', async () => {
    const before = await lastId();
    let refused = false;
    try {
      await recordConfigEvent(rt, { decision: 'grant_added', operator: 'alice', sourceId: 'docs', details: { identity: 'mallory', role: 'reader' } });
    } catch (err) {
      refused = (err as { code?: string }).code === '42501';
    }
    // Before the fix the forged event was stored and the trail still verified.
    expect((await cli('audit', 'verify')).code).toBe(0);
    expect(await configEventsAfter(before)).toEqual([]);
    expect(refused).toBe(true);
  });

  test('cannot insert a batch of the format-2 or config chain itself (only its writer lanes\' format 3)', async () => {
    const prev = (await db.pool.query<{ hash: Buffer }>('SELECT hash FROM audit_batches ORDER BY id DESC LIMIT 1')).rows[0].hash;
    for (const format of [1, 2, 4]) {
      await expect(
        rt.query('INSERT INTO audit_batches (committed_at, event_count, prev_hash, hash, format) VALUES (now(), 0, $1, $2, $3)', [prev, randomBytes(32), format]),
      ).rejects.toMatchObject({ code: '42501' });
    }
    // Its own format-3 batches are still stored (the gateway's writer lanes).
    const lane = new ChainLane(rtPool);
    await lane.append([], 5000);
    expect(lane.committed).toBe(1);
  });

  test('a config event it stores in a format-3 batch of its own is named by audit verify (misplaced_config)', async () => {
    const lane = new ChainLane(rtPool);
    const id = await lane.append([configRow({ decision: 'grant_added', operator: 'alice', sourceId: 'docs', details: { identity: 'mallory', role: 'reader' } })], 5000);
    const r = await cli('--json', 'audit', 'verify');
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout).mismatches).toEqual([{ batchId: id, committedAt: expect.any(String), fault: 'misplaced_config' }]);
  });
});
