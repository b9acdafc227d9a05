/**
 * The admin API (/admin/v1) and the console on the gateway's least-privilege runtime role
 * (docs/operators.md "Give the gateway a least-privilege database role"; `interlock db
 * grant-runtime-role`). That role may not write governance tables, so without an operator
 * connection (INTERLOCK_OPERATOR_DATABASE_URL) every governance write answers one clear 403 naming
 * the fix (no driver text), reads keep working, and nothing is half-made. With an operator
 * connection on a role given `interlock db grant-operator-role`, every write family works and
 * records its config event in the operator token's name; a permission error in the middle of a
 * write (its config event refused) leaves nothing behind.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { ADMIN_URL, pgServer } from '../../helpers/pg';
import { createLoginRole, dropLoginRole, freshControlDb, type TestControlDb } from '../control/control-db';
import { grantOperatorRole, grantRuntimeRole, openControlDb, type ControlDb } from '../../../src/control/db';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from '../../../src/control/config';
import { startGovernedGateway, type GovernedGateway } from '../../../src/gateway';
import { createLogger } from '../../../src/observability/logger';
import { createOperatorToken } from '../../../src/admin/tokens';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { addSource } from '../../../src/control/sources';
import { upsertRole } from '../../../src/control/roles';
import { grantRole } from '../../../src/control/grants';
import { addPolicies } from '../../../src/control/policies';
import { checkedFetch } from './openapi';
import { openGovernanceAccess } from '../../../src/admin/governance-db';
import { runCli } from '../../../src/cli/main';

jest.setTimeout(180_000);

/** The refusal every governance write gets on the runtime role without an operator connection. */
export const RUNTIME_REFUSAL = {
  error: 'forbidden',
  code: 'forbidden',
  message:
    "This gateway's database role may not change governance state (identities, keys, sources, roles, grants, policies): set INTERLOCK_OPERATOR_DATABASE_URL (database.operator_url) to a role given `interlock db grant-operator-role ROLE`, or make the change with the interlock CLI as the database owner.",
};

/** The refusal when the operator connection's role lacks a privilege. */
const OPERATOR_REFUSAL = {
  error: 'forbidden',
  code: 'forbidden',
  message: "The operator connection's database role (INTERLOCK_OPERATOR_DATABASE_URL) may not make this change: run `interlock db grant-operator-role ROLE` for it as the database owner, or make the change with the interlock CLI as the owner.",
};

let t: TestControlDb;
let runtimeRole: string;
let operatorRole: string;
let opUrl: string;
let gwOp: GovernedGateway;
let baseOp: string;
const logLines: Array<Record<string, unknown>> = [];
const opLogLines: Array<Record<string, unknown>> = [];
let rt: ControlDb;
let gw: GovernedGateway;
let base: string;
let token: string;
let dir: string;
let keyId: string;

async function createRole(role: string): Promise<string> {
  return createLoginRole(t, role);
}

async function dropRole(role: string): Promise<void> {
  await dropLoginRole(t, role);
}

function gatewayConfig(database: Partial<ResolvedGatewayConfig['database']> = {}): ResolvedGatewayConfig {
  const c = structuredClone(DEFAULT_CONFIG as ResolvedGatewayConfig);
  c.database = { ...c.database, ...database };
  return c;
}

beforeAll(async () => {
  t = await freshControlDb('adm_rt');
  dir = mkdtempSync(join(tmpdir(), 'il-adm-rt-'));
  runtimeRole = `il_rt_${randomBytes(4).toString('hex')}`;
  const rtUrl = await createRole(runtimeRole);
  await grantRuntimeRole(t.db, runtimeRole);
  operatorRole = `il_op_${randomBytes(4).toString('hex')}`;
  opUrl = await createRole(operatorRole);
  await grantOperatorRole(t.db, operatorRole);
  // What exists before the calls, made by the owner.
  const idn = await createIdentity(t.db, 'agent-a');
  keyId = (await createApiKey(t.db, idn.id)).keyId;
  await addSource(t.db, { id: 'notes', type: 'documents', name: 'Notes', settings: { path: dir } });
  await upsertRole(t.db, { name: 'notes-reader', statements: [{ effect: 'allow', action: 'read', resource: '*' }] });
  await grantRole(t.db, { identityId: idn.id, roleName: 'notes-reader', sourceId: 'notes' });
  await addPolicies(t.db, { name: 'cap', rule: { type: 'max_rows', max_rows: 5 } });
  token = (await createOperatorToken(t.db, 'ops-hop')).secret;
  rt = await openControlDb(rtUrl, { migrate: false, poolSize: 4 });
  const logs = { write: (line: string) => void logLines.push(JSON.parse(line)) };
  gw = await startGovernedGateway({ db: rt, config: gatewayConfig(), host: '127.0.0.1', port: 0, logger: createLogger('warn', logs), catalogRescanMs: 0 });
  base = new URL(gw.url).origin;
  const opLogs = { write: (line: string) => void opLogLines.push(JSON.parse(line)) };
  gwOp = await startGovernedGateway({ db: rt, config: gatewayConfig({ operator_url: opUrl }), host: '127.0.0.1', port: 0, logger: createLogger('info', opLogs), catalogRescanMs: 0 });
  baseOp = new URL(gwOp.url).origin;
});

afterAll(async () => {
  await gw?.close(1000);
  await gwOp?.close(1000);
  await rt?.close();
  if (runtimeRole) await dropRole(runtimeRole);
  if (operatorRole) await dropRole(operatorRole);
  await t?.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

async function call(b: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  // Every answer is checked against spec/openapi-v1.yaml.
  const r = await checkedFetch(`${b}/admin/v1${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  expect(r.problems).toEqual([]);
  return { status: r.status, json: r.json ?? r.text };
}

/** Every governance write family of /admin/v1, as [method, path, body]. */
export const WRITES = (key: string): Array<[string, string, unknown]> => [
  ['POST', '/identities', { name: 'agent-b' }],
  ['PATCH', '/identities/agent-a/attributes', { attributes: { team: 'red' } }],
  ['POST', '/identities/agent-a/disable', {}],
  ['POST', '/identities/agent-a/enable', {}],
  ['POST', '/keys', { identity: 'agent-a' }],
  ['POST', `/keys/${key}/revoke`, {}],
  ['POST', '/sources?scan=false', { id: 'notes2', type: 'documents', name: 'Notes 2', settings: { path: '/tmp' } }],
  ['PATCH', '/sources/notes?scan=false', { name: 'Notes renamed' }],
  ['POST', '/sources/notes/disable', {}],
  ['POST', '/sources/notes/enable', {}],
  ['PUT', '/roles/other-reader', { statements: [{ effect: 'allow', action: 'read', resource: '*' }] }],
  ['POST', '/grants', { identity: 'agent-a', role: 'notes-reader', source: 'notes' }],
  ['DELETE', '/grants/agent-a/notes-reader/notes', undefined],
  ['POST', '/policies', { name: 'cap2', rule: { type: 'max_rows', max_rows: 7 } }],
  ['DELETE', '/policies/cap', undefined],
  ['POST', '/apply', { document: { version: 1, identities: [{ name: 'agent-c' }] } }],
  ['DELETE', '/sources/notes', undefined],
];

/** A digest of every governance table and the trail (to show a refused write changed nothing). */
async function governanceState(): Promise<string> {
  const r = await t.db.pool.query<{ s: string }>(
    `SELECT concat_ws('|',
       (SELECT string_agg(name || disabled::text || attributes::text, ',' ORDER BY name) FROM identities),
       (SELECT string_agg(id || coalesce(revoked_at::text, '-'), ',' ORDER BY id) FROM api_keys),
       (SELECT string_agg(id || name || enabled::text, ',' ORDER BY id) FROM sources),
       (SELECT string_agg(name, ',' ORDER BY name) FROM roles),
       (SELECT string_agg(role_name || source_id, ',' ORDER BY role_name) FROM grants),
       (SELECT string_agg(name || rule::text, ',' ORDER BY name) FROM policies),
       (SELECT count(*)::text FROM audit_events)) AS s`,
  );
  return r.rows[0].s;
}

test('on the runtime role without an operator connection every governance write is refused clearly and changes nothing; reads work', async () => {
  const before = await governanceState();
  const got = [];
  for (const [method, path, body] of WRITES(keyId)) {
    const r = await call(base, method, path, body);
    got.push({ call: `${method} ${path}`, status: r.status, body: r.json });
  }
  expect(got).toEqual(WRITES(keyId).map(([method, path]) => ({ call: `${method} ${path}`, status: 403, body: RUNTIME_REFUSAL })));
  expect(await governanceState()).toBe(before);
  for (const path of ['/identities', '/identities/agent-a', '/keys', '/sources', '/sources/notes', '/roles', '/grants', '/policies', '/approvals', '/audit', '/export']) {
    expect({ path, status: (await call(base, 'GET', path)).status }).toEqual({ path, status: 200 });
  }
  expect((await call(base, 'GET', '/identities')).json.identities.map((i: { name: string }) => i.name)).toEqual(['agent-a']);
  // A plan only reads: it works on the runtime role.
  const plan = await call(base, 'POST', '/apply?plan=true', { document: { version: 1, identities: [{ name: 'agent-c' }] } });
  expect({ status: plan.status, applied: plan.json.applied }).toEqual({ status: 200, applied: false });
  expect(await governanceState()).toBe(before);
  // One warning at start, naming the fix; no connection URL or password in the log.
  const warnings = logLines.filter((l) => l.component === 'governance');
  expect(warnings).toEqual([expect.objectContaining({ level: 40, refused: ['identity', 'subject', 'key', 'source', 'role', 'grant', 'policy', 'apply'], msg: expect.stringContaining('INTERLOCK_OPERATOR_DATABASE_URL') })]);
  expect(JSON.stringify(logLines)).not.toContain('pw-');
});

test("the console's Disable on the runtime role without an operator connection is refused clearly", async () => {
  const signIn = await fetch(`${base}/console/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token }) });
  expect(signIn.status).toBe(200);
  const cookie = (signIn.headers.get('set-cookie') ?? '').split(';')[0];
  const csrf = ((await signIn.json()) as { csrfToken: string }).csrfToken;
  const r = await checkedFetch(`${base}/console/api/identities/agent-a/disable`, { method: 'POST', headers: { 'content-type': 'application/json', cookie, 'x-csrf-token': csrf }, body: '{}' });
  expect({ status: r.status, body: r.json, problems: r.problems }).toEqual({ status: 403, body: RUNTIME_REFUSAL, problems: [] });
  expect((await t.db.pool.query("SELECT disabled FROM identities WHERE name = 'agent-a'")).rows).toEqual([{ disabled: false }]);
  const list = await fetch(`${base}/console/api/identities`, { headers: { cookie } });
  expect(list.status).toBe(200);
});

async function configEventsAfter(id: string): Promise<Array<{ decision: string; operator: string }>> {
  return (await t.db.pool.query("SELECT decision, operator FROM audit_events WHERE kind = 'config' AND id > $1 ORDER BY id", [id])).rows;
}
const lastEventId = async () => (await t.db.pool.query<{ id: string }>('SELECT coalesce(max(id), 0)::text AS id FROM audit_events')).rows[0].id;

test('on the runtime role with an operator connection every governance write family works and records its config event in the token\'s name', async () => {
  const steps: Array<[string, string, unknown, number, string[]]> = [
    ['POST', '/identities', { name: 'agent-b' }, 201, ['identity_created']],
    ['PATCH', '/identities/agent-b/attributes', { attributes: { team: 'red' } }, 200, ['identity_attributes_changed']],
    ['POST', '/identities/agent-b/disable', {}, 200, ['identity_disabled']],
    ['POST', '/identities/agent-b/enable', {}, 200, ['identity_enabled']],
    ['POST', '/keys', { identity: 'agent-b' }, 201, ['key_created']],
    ['POST', `/keys/${keyId}/revoke`, {}, 200, ['key_revoked']],
    ['POST', '/sources?scan=false', { id: 'notes2', type: 'documents', name: 'Notes 2', settings: { path: dir } }, 201, ['source_added']],
    ['PATCH', '/sources/notes2?scan=false', { name: 'Notes two' }, 200, ['source_updated']],
    ['POST', '/sources/notes2/disable', {}, 200, ['source_disabled']],
    ['POST', '/sources/notes2/enable', {}, 200, ['source_enabled']],
    ['PUT', '/roles/other-reader', { statements: [{ effect: 'allow', action: 'read', resource: '*' }] }, 201, ['role_created']],
    ['POST', '/grants', { identity: 'agent-b', role: 'other-reader', source: 'notes2' }, 201, ['grant_added']],
    ['DELETE', '/grants/agent-b/other-reader/notes2', undefined, 200, ['grant_revoked']],
    ['POST', '/policies', { name: 'cap2', rule: { type: 'max_rows', max_rows: 7 } }, 201, ['policy_added']],
    ['DELETE', '/policies/cap2', undefined, 200, ['policy_removed']],
    ['POST', '/apply', { document: { version: 1, identities: [{ name: 'agent-c' }] } }, 200, ['identity_created', 'applied']],
    ['POST', '/grants', { identity: 'agent-b', role: 'other-reader', source: 'notes2' }, 201, ['grant_added']],
    ['DELETE', '/sources/notes2', undefined, 200, ['source_removed']],
  ];
  const got = [];
  for (const [method, path, body] of steps) {
    const before = await lastEventId();
    const r = await call(baseOp, method, path, body);
    got.push({ call: `${method} ${path}`, status: r.status, events: await configEventsAfter(before) });
  }
  expect(got).toEqual(steps.map(([method, path, , status, decisions]) => ({ call: `${method} ${path}`, status, events: decisions.map((decision) => ({ decision, operator: 'ops-hop' })) })));
  const state = await t.db.pool.query("SELECT (SELECT string_agg(name, ',' ORDER BY name) FROM identities) AS i, (SELECT string_agg(id, ',' ORDER BY id) FROM sources) AS s, (SELECT revoked_at IS NOT NULL FROM api_keys WHERE id = $1) AS revoked", [keyId]);
  expect(state.rows).toEqual([{ i: 'agent-a,agent-b,agent-c', s: 'notes', revoked: true }]);
});

test("the console's identity Disable works through the operator connection, recorded in the session's operator's name", async () => {
  const signIn = await fetch(`${baseOp}/console/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token }) });
  expect(signIn.status).toBe(200);
  const cookie = (signIn.headers.get('set-cookie') ?? '').split(';')[0];
  const csrf = ((await signIn.json()) as { csrfToken: string }).csrfToken;
  const before = await lastEventId();
  const r = await checkedFetch(`${baseOp}/console/api/identities/agent-c/disable`, { method: 'POST', headers: { 'content-type': 'application/json', cookie, 'x-csrf-token': csrf }, body: '{}' });
  expect({ status: r.status, body: r.json, problems: r.problems }).toEqual({ status: 200, body: expect.objectContaining({ name: 'agent-c', disabled: true }), problems: [] });
  expect(await configEventsAfter(before)).toEqual([{ decision: 'identity_disabled', operator: 'ops-hop' }]);
});

test('a write whose config event the database refuses (42501) changes nothing, answers the clear 403, and works again once granted', async () => {
  await t.db.pool.query(`REVOKE EXECUTE ON FUNCTION interlock_audit_append_v2(text) FROM ${operatorRole}`);
  try {
    const before = await lastEventId();
    // The privilege check of the start said yes: the identity row is inserted, then the append is refused and all of it rolled back.
    const r = await call(baseOp, 'POST', '/identities', { name: 'half-made' });
    expect({ status: r.status, body: r.json }).toEqual({ status: 403, body: OPERATOR_REFUSAL });
    const grant = await call(baseOp, 'POST', '/grants', { identity: 'agent-a', role: 'other-reader', source: 'notes' });
    expect({ status: grant.status, body: grant.json }).toEqual({ status: 403, body: OPERATOR_REFUSAL });
    expect((await t.db.pool.query("SELECT count(*)::int AS n FROM identities WHERE name = 'half-made'")).rows).toEqual([{ n: 0 }]);
    expect((await t.db.pool.query("SELECT count(*)::int AS n FROM grants WHERE role_name = 'other-reader'")).rows).toEqual([{ n: 0 }]);
    expect(await lastEventId()).toBe(before);
  } finally {
    await t.db.pool.query(`GRANT EXECUTE ON FUNCTION interlock_audit_append_v2(text) TO ${operatorRole}`);
  }
  const before = await lastEventId();
  const again = await call(baseOp, 'POST', '/identities', { name: 'half-made' });
  expect(again.status).toBe(201);
  expect(await configEventsAfter(before)).toEqual([{ decision: 'identity_created', operator: 'ops-hop' }]);
});

test('the operator role may append to the trail only through the chain function: no other write on audit tables, no chain lock, no settings, tokens or DDL', async () => {
  const c = new pg.Client({ connectionString: opUrl });
  await c.connect();
  try {
    const denied = [
      'SELECT * FROM audit_events LIMIT 1',
      "INSERT INTO audit_events (kind, decision) VALUES ('config', 'forged')",
      'UPDATE audit_events SET decision = decision',
      'DELETE FROM audit_events',
      'TRUNCATE audit_events',
      'DELETE FROM audit_batches',
      'SELECT * FROM audit_chain_lock',
      'SELECT * FROM settings',
      'SELECT * FROM operator_tokens',
      "INSERT INTO operator_tokens (id, name, hash, prefix) VALUES ('x', 'x', '\\x00', 'x')",
      'SELECT * FROM console_sessions',
      'UPDATE approvals SET params = params',
      'CREATE TABLE public.op_ddl (x int)',
      'ALTER TABLE identities ADD COLUMN x int',
      'DROP TABLE policies',
    ];
    const got = [];
    for (const sql of denied) got.push({ sql, code: await c.query(sql).then(() => 'ok', (e: { code?: string }) => e.code) });
    expect(got).toEqual(denied.map((sql) => ({ sql, code: '42501' })));
  } finally {
    await c.end();
  }
});

test('the operator connection is logged without its password, and no governance warning when its role has the grants', () => {
  // The 42501 test above logged its one refusal by the database (the grant after it was refused by the re-check, before any write).
  expect(opLogLines.filter((l) => l.code === '42501').map((l) => l.family)).toEqual(['identity']);
  const lines = opLogLines.filter((l) => l.component === 'governance' && l.code !== '42501');
  const redacted = new URL(opUrl);
  redacted.password = '***';
  expect(lines).toEqual([expect.objectContaining({ level: 30, url: redacted.toString(), msg: 'governance changes of /admin/v1 and /console go through the operator connection' })]);
  expect(JSON.stringify(opLogLines)).not.toContain(`pw-${operatorRole}`);
});

test('an operator connection that cannot be opened: the gateway starts and is ready, governance writes answer 503 without driver text, reads work', async () => {
  const lines: Array<Record<string, unknown>> = [];
  const dead = `postgres://${operatorRole}:pw-secret-dead@127.0.0.1:1/${t.temp.name}`;
  const g = await startGovernedGateway({ db: rt, config: gatewayConfig({ operator_url: dead }), host: '127.0.0.1', port: 0, logger: createLogger('info', { write: (l: string) => void lines.push(JSON.parse(l)) }), catalogRescanMs: 0 });
  try {
    const b = new URL(g.url).origin;
    expect((await fetch(`${b}/readyz`)).status).toBe(200);
    const before = await governanceState();
    const r = await call(b, 'POST', '/identities', { name: 'agent-z' });
    expect({ status: r.status, body: r.json }).toEqual({
      status: 503,
      body: { error: 'unavailable', code: 'unavailable', message: "The operator database connection (INTERLOCK_OPERATOR_DATABASE_URL) cannot be used now; the gateway's log says why." },
    });
    expect((await call(b, 'GET', '/identities')).status).toBe(200);
    expect(await governanceState()).toBe(before);
    expect(lines.filter((l) => l.component === 'governance' && l.level === 40).length).toBeGreaterThanOrEqual(1);
    expect(JSON.stringify(lines)).not.toContain('pw-secret-dead');
  } finally {
    await g.close(1000);
  }
});

test('an operator URL naming several hosts follows the writable one (target_session_attrs=read-write)', async () => {
  const u = new URL(opUrl);
  const multi = `postgres://${u.username}:${u.password}@127.0.0.1:1,${u.host}${u.pathname}?target_session_attrs=read-write`;
  const g = await startGovernedGateway({ db: rt, config: gatewayConfig({ operator_url: multi }), host: '127.0.0.1', port: 0, logger: createLogger('silent'), catalogRescanMs: 0 });
  try {
    const before = await lastEventId();
    const r = await call(new URL(g.url).origin, 'POST', '/policies', { name: 'cap-multi', rule: { type: 'max_rows', max_rows: 3 } });
    expect(r.status).toBe(201);
    expect(await configEventsAfter(before)).toEqual([{ decision: 'policy_added', operator: 'ops-hop' }]);
  } finally {
    await g.close(1000);
  }
});

test('grant-operator-role refuses a missing role and the runtime role (the operator connection needs a role of its own)', async () => {
  await expect(grantOperatorRole(t.db, 'il_no_such_role_hop')).rejects.toMatchObject({ kind: 'not_found', message: `database role "il_no_such_role_hop" does not exist (CREATE ROLE il_no_such_role_hop LOGIN PASSWORD '…' first)` });
  await expect(grantOperatorRole(t.db, runtimeRole)).rejects.toMatchObject({ kind: 'conflict', message: `database role "${runtimeRole}" holds the gateway runtime role's grants: the operator connection needs a role of its own (CREATE ROLE … LOGIN, then interlock db grant-operator-role)` });
  // Granting again is harmless.
  await grantOperatorRole(t.db, operatorRole);
});

test('a PostgreSQL source added through the operator connection is scanned; a scan alone works on the runtime role; removal drops its catalog', async () => {
  const reader = `il_rd_${randomBytes(4).toString('hex')}`;
  await createRole(reader);
  await t.db.pool.query(`GRANT CONNECT ON DATABASE "${t.temp.name}" TO ${reader}`);
  try {
    const { host, port } = pgServer();
    const def = { id: 'pgsrc', type: 'postgres', name: 'PG', settings: { host, port, database: t.temp.name, reader: { user: reader, password: `pw-${reader}` }, tls: { mode: 'off' } } };
    const before = await lastEventId();
    const added = await call(baseOp, 'POST', '/sources', def);
    expect({ status: added.status, scanError: added.json.scanError, relations: typeof added.json.scan?.relations }).toEqual({ status: 201, scanError: null, relations: 'number' });
    expect(await configEventsAfter(before)).toEqual([{ decision: 'source_added', operator: 'ops-hop' }]);
    const scan = await call(base, 'POST', '/sources/pgsrc/scan');
    expect({ status: scan.status, relations: typeof scan.json.relations }).toEqual({ status: 200, relations: 'number' });
    expect((await call(baseOp, 'DELETE', '/sources/pgsrc')).status).toBe(200);
    expect((await t.db.pool.query("SELECT count(*)::int AS n FROM catalog_snapshots WHERE source_id = 'pgsrc'")).rows).toEqual([{ n: 0 }]);
  } finally {
    await t.db.pool.query(`REVOKE ALL ON DATABASE "${t.temp.name}" FROM ${reader}`);
    await dropRole(reader);
  }
});

test('`interlock db grant-operator-role ROLE` as the owner: grants, and refuses the runtime role (exit 2)', async () => {
  const run = async (...args: string[]) => {
    let stdout = '';
    let stderr = '';
    const code = await runCli(['--database-url', t.temp.url, ...args], { out: (x) => (stdout += x), err: (x) => (stderr += x) });
    return { code, stdout: stdout.trim(), stderr: stderr.trim() };
  };
  expect(await run('db', 'grant-operator-role', operatorRole)).toEqual({ code: 0, stdout: `granted the operator privileges to database role ${operatorRole}`, stderr: '' });
  const refused = await run('db', 'grant-operator-role', runtimeRole);
  expect({ code: refused.code, stdout: refused.stdout }).toEqual({ code: 2, stdout: '' });
  expect(refused.stderr).toContain(`database role "${runtimeRole}" holds the gateway runtime role's grants`);
});

test('an operator connection whose role lacks grants: the start log warns of the 403 and does not say governance changes go through it; a partly granted role says which do', async () => {
  const bare = `il_bare_${randomBytes(4).toString('hex')}`;
  const bareUrl = await createRole(bare);
  try {
    const start = async () => {
      const lines: Array<Record<string, unknown>> = [];
      const g = await openGovernanceAccess({ db: rt, operatorUrl: bareUrl, logger: createLogger('info', { write: (l: string) => void lines.push(JSON.parse(l)) }) });
      await g.close();
      return lines.filter((l) => l.component === 'governance').map((l) => [l.level, l.msg, l.refused ?? l.allowed]);
    };
    const WARN = 'the operator connection\'s database role lacks privileges: these governance changes over /admin/v1 and /console are refused (403) until `interlock db grant-operator-role ROLE` is run for it';
    expect(await start()).toEqual([[40, WARN, ['identity', 'subject', 'key', 'source', 'role', 'grant', 'policy', 'apply']]]);
    // Given the identity writes only: those go through it, the rest are refused.
    await t.db.pool.query(`GRANT INSERT, UPDATE ON identities TO ${bare}; GRANT EXECUTE ON FUNCTION interlock_audit_append_v2(text) TO ${bare}`);
    expect(await start()).toEqual([
      [40, WARN, ['subject', 'key', 'source', 'role', 'grant', 'policy', 'apply']],
      [30, 'the other governance changes of /admin/v1 and /console (allowed) go through the operator connection', ['identity']],
    ]);
  } finally {
    await dropRole(bare);
  }
});
