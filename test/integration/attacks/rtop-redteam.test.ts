/**
 * Red team rtop: the operator side's database roles and the governance audit trail, attacked with
 * real PostgreSQL roles (docs/operators.md "Give the gateway a least-privilege database role",
 * "Give the admin API and console an operator role", "What the database enforces"). Each test is
 * one finding; its comment gives the severity and whether it is fixed.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import pg from 'pg';
import { ADMIN_URL, execSql } from '../../helpers/pg';
import { freshControlDb, withRuntimeRole, type TestControlDb } from '../control/control-db';
import { grantOperatorRole } from '../../../src/control/db';
import { createApiKey } from '../../../src/control/keys';
import { recordApprovalEvent } from '../../../src/audit/writer';
import { verifyAuditChain } from '../../../src/audit/verify';
import { checkedFetch } from '../http/openapi';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from '../../../src/control/config';
import { startGovernedGateway, type GovernedGateway } from '../../../src/gateway';
import { createLogger } from '../../../src/observability/logger';
import { createOperatorToken } from '../../../src/admin/tokens';
import { createIdentity } from '../../../src/control/identities';
import { addSource } from '../../../src/control/sources';
import { upsertRole } from '../../../src/control/roles';
import { asRole } from './harness';

jest.setTimeout(180_000);

let t: TestControlDb;


let aliceId: string;

/** Runs `fn` on a connection as a new role holding the runtime grants (a stolen gateway credential). */
function asRuntime<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  return withRuntimeRole(t, (url) => asRole(url, fn));
}

beforeAll(async () => {
  t = await freshControlDb('rtop_rt');
  // A key-only identity (no token subject), a role and a source to grant it on, made by the owner.
  aliceId = (await createIdentity(t.db, 'alice')).id;
  await addSource(t.db, { id: 'docs', type: 'documents', name: 'Docs', settings: { path: '/tmp' } });
  await upsertRole(t.db, { name: 'admin', statements: [{ effect: 'allow', action: '*', resource: '*' }] });
});

afterAll(async () => {
  await t?.cleanup();
});

// Finding 1 (critical, fixed by migration 20261208260000000_definer-search-path_rtop): the token
// provisioning functions (SECURITY DEFINER, EXECUTE granted to the runtime role) pinned
// `search_path = pg_catalog, public` without pg_temp; PostgreSQL then searches the caller's
// temporary schema FIRST for tables. The runtime role may create temporary tables (PUBLIC holds TEMP
// on every database), so a stolen runtime credential shadowed `identities` (and `identity_subjects`)
// with its own temporary tables and (a) linked a token subject of its choosing to the key-only
// identity alice (a later access token with that subject signs in as alice), (b) gave alice any role
// on any source through interlock_sync_claim_grants (the migration's "an identity with no token
// subject cannot be given anything" broken), with a config event naming an identity that was never
// created. Now pg_temp is searched last: the functions see only the real tables.
describe('a stolen runtime credential and the SECURITY DEFINER provisioning functions', () => {
  test('a temporary `identities` table does not let provisioning link a subject to an existing identity', async () => {
    const err = await asRuntime(async (c) => {
      await c.query('CREATE TEMP TABLE identities (id text, name text, disabled boolean DEFAULT false)');
      return c.query("SELECT interlock_provision_token_identity($1, 'mallory', 'https://idp.example', 'mallory-sub')", [aliceId]).then(
        () => null,
        (e: { code?: string }) => e.code,
      );
    });
    // The real identities table already holds that id.
    expect(err).toBe('23505');
    expect((await t.db.pool.query('SELECT issuer, subject, identity_id FROM identity_subjects')).rows).toEqual([]);
  });

  test('temporary `identities` and `identity_subjects` tables do not let claim sync grant a key-only identity a role', async () => {
    const err = await asRuntime(async (c) => {
      await c.query('CREATE TEMP TABLE identities (id text, name text, disabled boolean DEFAULT false)');
      await c.query('CREATE TEMP TABLE identity_subjects (issuer text, subject text, identity_id text)');
      await c.query("INSERT INTO pg_temp.identities VALUES ($1, 'alice', false)", [aliceId]);
      await c.query("INSERT INTO pg_temp.identity_subjects VALUES ('https://idp.example', 'x', $1)", [aliceId]);
      return c.query("SELECT interlock_sync_claim_grants('https://idp.example', 'x', ARRAY['admin'], ARRAY['docs'])").then(
        () => null,
        (e: { code?: string }) => e.code,
      );
    });
    expect(err).toBe('22023');
    expect((await t.db.pool.query('SELECT identity_id, role_name, source_id FROM grants')).rows).toEqual([]);
    expect((await t.db.pool.query("SELECT decision FROM audit_events WHERE kind = 'config' AND details ? 'issuer'")).rows).toEqual([]);
  });

  test('every SECURITY DEFINER function of the control database searches pg_temp last (or not at all)', async () => {
    const r = await t.db.pool.query<{ f: string; path: string | null }>(
      `SELECT p.proname AS f, (SELECT substr(x, 13) FROM unnest(p.proconfig) AS x WHERE x LIKE 'search_path=%') AS path
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'public' AND p.prosecdef ORDER BY 1`,
    );
    const bad = r.rows.filter((x) => x.path === null || !/(^|,\s*)pg_temp$/.test(x.path));
    expect(r.rows.length).toBeGreaterThanOrEqual(4);
    expect(bad).toEqual([]);
  });
});

// Finding 2 (high, fixed): the operator connection had no connect timeout and the gateway awaited
// its privilege check at start. An operator URL naming a host that accepts TCP but never answers
// (a stopped or hung server, a firewall that swallows the handshake) kept the gateway from starting
// at all (so /mcp and /readyz depended on the operator connection, which docs say they do not), and
// once started each governance change over /admin/v1 hung instead of answering 503 unavailable.
describe('an operator URL whose server never answers', () => {
  let silent: Server;
  const sockets: Socket[] = [];
  let gw: GovernedGateway | undefined;
  beforeAll(async () => {
    silent = createServer((s) => {
      sockets.push(s);
      s.on('error', () => undefined);
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  });
  afterAll(async () => {
    await gw?.close(1000);
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => silent.close(() => resolve()));
  });

  test('the gateway starts and is ready, and a governance change answers 503 unavailable', async () => {
    const port = (silent.address() as { port: number }).port;
    const opUrl = `postgres://op:secret-pw@127.0.0.1:${port}/interlock`;
    const lines: Array<Record<string, unknown>> = [];
    const token = (await createOperatorToken(t.db, `ops-${randomBytes(3).toString('hex')}`)).secret;
    // Bounded wait for the fault: starting must not wait on the operator connection.
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<'hung'>((resolve) => (timer = setTimeout(() => resolve('hung'), 30_000)));
    const config = structuredClone(DEFAULT_CONFIG as ResolvedGatewayConfig);
    config.database = { ...config.database, operator_url: opUrl };
    const started = startGovernedGateway({ db: t.db, config, host: '127.0.0.1', port: 0, logger: createLogger('info', { write: (l: string) => void lines.push(JSON.parse(l)) }), catalogRescanMs: 0 });
    const first = await Promise.race([started, bound]);
    clearTimeout(timer);
    if (first === 'hung') {
      void started.then((g) => g.close(1000)).catch(() => undefined);
      throw new Error('the gateway did not start within 30 s with an unanswering operator URL');
    }
    gw = first;
    const base = new URL(gw.url).origin;
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    const ctl = new AbortController();
    const cut = setTimeout(() => ctl.abort(), 30_000);
    const r = await fetch(`${base}/admin/v1/identities`, { method: 'POST', signal: ctl.signal, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'carol' }) });
    clearTimeout(cut);
    expect({ status: r.status, body: await r.json() }).toEqual({
      status: 503,
      body: { error: 'unavailable', code: 'unavailable', message: "The operator database connection (INTERLOCK_OPERATOR_DATABASE_URL) cannot be used now; the gateway's log says why." },
    });
    expect((await t.db.pool.query("SELECT 1 FROM identities WHERE name = 'carol'")).rowCount).toBe(0);
    expect(JSON.stringify(lines)).not.toContain('secret-pw');
  });
});

// Finding 3 (medium, fixed: bounded, not prevented): the runtime role must UPDATE api_keys
// (last_used_at), approvals and catalog_snapshots, so it may lock their rows (SELECT … FOR UPDATE)
// and hold the format-2 chain's lock (interlock_audit_append_v2 with an approval event). A stolen
// runtime credential holding such a lock in an open transaction made the governance changes that
// need it — revoking a key (the emergency action), removing a source with --force (its approvals'
// rejection events go on the format-2 chain) — wait forever over /admin/v1, an HTTP request that
// never answered. The operator connection now gives up on a lock after OPERATOR_LOCK_TIMEOUT_MS
// (lock_timeout) and answers 503 unavailable, its transaction and event rolled back. A runtime
// credential can still refuse these changes for as long as it holds the lock (the CLI as the owner
// can end its session: pg_terminate_backend).
describe('a runtime session holding a lock a governance change needs', () => {
  const opRole = `il_rtop_op_${randomBytes(4).toString('hex')}`;
  let gw: GovernedGateway | undefined;
  let base: string;
  let token: string;
  let opUrl: string;
  beforeAll(async () => {
    await execSql(ADMIN_URL, `CREATE ROLE ${opRole} LOGIN PASSWORD 'pw-${opRole}'`);
    await grantOperatorRole(t.db, opRole);
    const u = new URL(t.temp.url);
    u.username = opRole;
    u.password = `pw-${opRole}`;
    opUrl = u.toString();
    const config = structuredClone(DEFAULT_CONFIG as ResolvedGatewayConfig);
    config.database = { ...config.database, operator_url: opUrl };
    gw = await startGovernedGateway({ db: t.db, config, host: '127.0.0.1', port: 0, logger: createLogger('error', { write: () => undefined }), catalogRescanMs: 0 });
    base = new URL(gw.url).origin;
    token = (await createOperatorToken(t.db, `ops-${randomBytes(3).toString('hex')}`)).secret;
  });
  afterAll(async () => {
    await gw?.close(1000);
    await t.db.pool.query(`REVOKE ALL ON ALL TABLES IN SCHEMA public FROM ${opRole}`).catch(() => undefined);
    await t.db.pool.query(`REVOKE ALL ON ALL FUNCTIONS IN SCHEMA public FROM ${opRole}`).catch(() => undefined);
    await t.db.pool.query(`REVOKE ALL ON SCHEMA public FROM ${opRole}`).catch(() => undefined);
    await execSql(ADMIN_URL, `REVOKE ALL ON DATABASE "${t.temp.name}" FROM ${opRole}; DROP ROLE IF EXISTS ${opRole}`).catch(() => undefined);
  });

  test('revoking a key whose row the runtime role holds locked answers 503 unavailable instead of hanging, and revokes nothing', async () => {
    const idn = await createIdentity(t.db, `bob-${randomBytes(3).toString('hex')}`);
    const { keyId } = await createApiKey(t.db, idn.id);
    const answer = await asRuntime(async (c) => {
      await c.query('BEGIN');
      await c.query('SELECT 1 FROM api_keys WHERE id = $1 FOR UPDATE', [keyId]);
      // Bounded wait for the fault: the request must answer while the lock is held.
      const ctl = new AbortController();
      const cut = setTimeout(() => ctl.abort(), 60_000);
      try {
        const r = await fetch(`${base}/admin/v1/keys/${keyId}/revoke`, { method: 'POST', signal: ctl.signal, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: '{}' });
        return { status: r.status, body: await r.json() };
      } catch {
        return 'no answer within 60 s';
      } finally {
        clearTimeout(cut);
        await c.query('ROLLBACK');
      }
    });
    expect(answer).toEqual({
      status: 503,
      body: { error: 'unavailable', code: 'unavailable', message: "The operator database connection (INTERLOCK_OPERATOR_DATABASE_URL) cannot be used now; the gateway's log says why." },
    });
    expect((await t.db.pool.query('SELECT revoked_at FROM api_keys WHERE id = $1', [keyId])).rows).toEqual([{ revoked_at: null }]);
    expect((await t.db.pool.query("SELECT 1 FROM audit_events WHERE kind = 'config' AND decision = 'key_revoked' AND details->>'keyId' = $1", [keyId])).rowCount).toBe(0);
    // Once the lock is gone the same change goes through, with its event.
    const again = await fetch(`${base}/admin/v1/keys/${keyId}/revoke`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: '{}' });
    expect(again.status).toBe(200);
    expect((await t.db.pool.query("SELECT 1 FROM audit_events WHERE kind = 'config' AND decision = 'key_revoked' AND details->>'keyId' = $1", [keyId])).rowCount).toBe(1);
  });

  // Finding 6 (medium, fixed): approving or rejecting committed the approval's new state first and
  // appended its event afterwards, on the approval events' chain, whose lock the runtime role (and
  // the operator role) may hold through interlock_audit_append_v2 in an open transaction. While a
  // stolen credential held it, /admin/v1/approvals/{id}/approve never answered and left the approval
  // "approved" with no approval event (never executed: approvals are not re-run), i.e. half-applied
  // with its event skipped. The decision and its event are now one transaction that waits at most
  // APPROVAL_DECISION_LOCK_TIMEOUT_MS for a lock, then answers 503 unavailable with nothing decided.
  test('an approve while a runtime session holds the approval chain\'s lock answers 503, decides nothing and records nothing', async () => {
    const id = `apr_${randomBytes(12).toString('hex')}`;
    await t.db.pool.query("INSERT INTO approvals (id, source_id, identity_id, request_id, sql, expires_at) VALUES ($1, 'docs', $2, 'req-rtop-lock', 'UPDATE t SET x = 1', now() + interval '1 hour')", [id, aliceId]);
    const answer = await asRuntime(async (c) => {
      await c.query('BEGIN');
      await recordApprovalEvent(c, { approvalId: `apr_${randomBytes(12).toString('hex')}`, action: 'rejected', operator: 'nobody' });
      const ctl = new AbortController();
      const cut = setTimeout(() => ctl.abort(), 60_000);
      try {
        // Checked against spec/openapi-v1.yaml (503 AdminDecisionUnavailable).
        const r = await checkedFetch(`${base}/admin/v1/approvals/${id}/approve`, { method: 'POST', signal: ctl.signal, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: '{}' });
        return { status: r.status, code: (r.json as { code?: string }).code, problems: r.problems };
      } catch {
        return 'no answer within 60 s';
      } finally {
        clearTimeout(cut);
        await c.query('ROLLBACK');
      }
    });
    expect(answer).toEqual({ status: 503, code: 'unavailable', problems: [] });
    expect((await t.db.pool.query('SELECT state, decided_by FROM approvals WHERE id = $1', [id])).rows).toEqual([{ state: 'pending', decided_by: null }]);
    expect((await t.db.pool.query("SELECT 1 FROM audit_events WHERE kind = 'approval' AND approval_id = $1", [id])).rowCount).toBe(0);
    // Nothing is held afterwards: rejecting it now works and is recorded.
    const r = await fetch(`${base}/admin/v1/approvals/${id}/reject`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: '{}' });
    expect(r.status).toBe(200);
    expect((await t.db.pool.query("SELECT decision, operator FROM audit_events WHERE kind = 'approval' AND approval_id = $1", [id])).rows).toEqual([{ decision: 'rejected', operator: expect.stringMatching(/^ops-/) }]);
  });

  // Finding 4 (low, fixed by migration 20261208290000000_operator-approval-rejection_hrt6): the
  // operator role held UPDATE of approvals.state (so that removing a source with --force could reject
  // its pending approvals), and nothing limited the value. An operator credential could so move any
  // pending approval to "approved" in any name with no approval event (approvals run only on the
  // gateway's own approve, so it was stranded, never executed: the requester's write silently
  // refused while the trail showed nothing), or reject it with none. Now the role holds no UPDATE of
  // approvals (grantOperatorRole revokes an earlier one); source removal rejects through
  // interlock_reject_removed_source_approvals, which records each rejection in the same statement
  // and only for a source already deleted.
  test('the operator role cannot approve a pending approval directly (no approval event)', async () => {
    const id = `apr_${randomBytes(12).toString('hex')}`;
    await t.db.pool.query("INSERT INTO approvals (id, source_id, identity_id, request_id, sql, expires_at) VALUES ($1, 'docs', $2, 'req-rtop', 'UPDATE t SET x = 1', now() + interval '1 hour')", [id, aliceId]);
    const code = await asRole(opUrl, (c) =>
      c.query("UPDATE approvals SET state = 'approved', decided_by = 'alice', decided_at = now() WHERE id = $1", [id]).then(
        () => null,
        (e: { code?: string }) => e.code,
      ),
    );
    expect(code).toBe('42501');
    expect((await t.db.pool.query('SELECT state FROM approvals WHERE id = $1', [id])).rows).toEqual([{ state: 'pending' }]);
  });
  test('granting the operator role again takes back an UPDATE of approvals given before the fix', async () => {
    await t.db.pool.query(`GRANT UPDATE (state, decided_by, decided_at) ON approvals TO ${opRole}`);
    await grantOperatorRole(t.db, opRole);
    const r = await t.db.pool.query<{ u: boolean; s: boolean }>("SELECT has_any_column_privilege($1, 'approvals', 'UPDATE') AS u, has_table_privilege($1, 'approvals', 'SELECT') AS s", [opRole]);
    expect(r.rows).toEqual([{ u: false, s: true }]);
  });
  test('the rejection function refuses a source that still exists (operator role) and any caller without EXECUTE (runtime role)', async () => {
    const id = `apr_${randomBytes(12).toString('hex')}`;
    await t.db.pool.query("INSERT INTO approvals (id, source_id, identity_id, request_id, sql, expires_at) VALUES ($1, 'docs', $2, 'req-rtop-fn', 'UPDATE t SET x = 1', now() + interval '1 hour')", [id, aliceId]);
    const call = (c: pg.Client) => c.query("SELECT interlock_reject_removed_source_approvals('docs', 'mallory')").then(() => null, (e: { code?: string }) => e.code);
    expect(await asRole(opUrl, call)).toBe('55000');
    expect(await asRuntime(call)).toBe('42501');
    expect((await t.db.pool.query('SELECT state, decided_by FROM approvals WHERE id = $1', [id])).rows).toEqual([{ state: 'pending', decided_by: null }]);
    expect((await t.db.pool.query("SELECT 1 FROM audit_events WHERE approval_id = $1", [id])).rowCount).toBe(0);
    await t.db.pool.query("UPDATE approvals SET state = 'rejected' WHERE id = $1", [id]);
  });
  test('removing a source with force through the operator connection rejects its pending approvals, each with its event, and the trail verifies', async () => {
    const src = `gone-${randomBytes(3).toString('hex')}`;
    await addSource(t.db, { id: src, type: 'documents', name: 'Gone', settings: { path: '/tmp' } });
    const ids = [0, 1].map(() => `apr_${randomBytes(12).toString('hex')}`);
    for (const [i, id] of ids.entries()) {
      await t.db.pool.query(`INSERT INTO approvals (id, source_id, identity_id, request_id, sql, expires_at, created_at) VALUES ($1, $2, $3, $4, 'UPDATE t SET x = 1', now() + interval '1 hour', now() - make_interval(secs => $5))`, [id, src, aliceId, `req-"gone"-${i}`, 10 - i]);
    }
    const r = await checkedFetch(`${base}/admin/v1/sources/${src}?force=true`, { method: 'DELETE', headers: { authorization: `Bearer ${token}` } });
    expect({ status: r.status, problems: r.problems, body: r.json }).toEqual({ status: 200, problems: [], body: { id: src, removed: true, rejectedApprovals: ids, grantsRemoved: 0, policiesRemoved: [], policiesDetached: [], claimRulesUntied: [] } });
    expect((await t.db.pool.query('SELECT id, state, decided_by FROM approvals WHERE source_id = $1 ORDER BY created_at', [src])).rows).toEqual(
      ids.map((id) => ({ id, state: 'rejected', decided_by: expect.stringMatching(/^ops-/) })),
    );
    const events = await t.db.pool.query("SELECT approval_id, decision, reason_code, request_id, identity_id, source_id, action, operator FROM audit_events WHERE kind = 'approval' AND source_id = $1 ORDER BY id", [src]);
    expect(events.rows).toEqual(
      ids.map((id, i) => ({ approval_id: id, decision: 'rejected', reason_code: 'source_removed', request_id: `req-"gone"-${i}`, identity_id: aliceId, source_id: src, action: 'write', operator: expect.stringMatching(/^ops-/) })),
    );
    const report = await verifyAuditChain(t.db);
    expect({ ok: report.ok, mismatchCount: report.mismatchCount }).toEqual({ ok: true, mismatchCount: 0 });
  });
});

// Finding 5 (high, fixed by migration 20261209210000000_configured-claim-grants_hcg): the claim-grant
// function trusted the (role, source) pairs its caller passed: it checked only that they existed. A
// stolen runtime credential could so provision an identity for a token subject it controls (any
// subject at an issuer the gateway trusts) and give it any role on any source; each grant was
// recorded (grant_added, operator system), so it was detected, not prevented. Now the function
// accepts only pairs some claim rule of that issuer names in the database (its claim mapping's
// role_grants, or the configuration's rules recorded in configured_claim_grants, which the runtime
// role may only read), else 42501 with nothing changed: a thief gets at most what a mapping grants.
test('a stolen runtime credential cannot give a token identity a role that no claim mapping of its issuer names', async () => {
  const id = `idn_${randomBytes(10).toString('hex')}`;
  const code = await asRuntime(async (c) => {
    await c.query("SELECT interlock_provision_token_identity($1, 'mallory-tok', 'https://idp.example', 'mallory-own-sub')", [id]);
    return c.query("SELECT interlock_sync_claim_grants('https://idp.example', 'mallory-own-sub', ARRAY['admin'], ARRAY['docs'])").then(
      () => null,
      (e: { code?: string }) => e.code,
    );
  });
  expect(code).toBe('42501');
  expect((await t.db.pool.query('SELECT role_name FROM grants WHERE identity_id = $1', [id])).rows).toEqual([]);
});
