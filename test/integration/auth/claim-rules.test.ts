/**
 * Task hcg (red team rtop finding 5): interlock_sync_claim_grants gives a token identity a claim
 * grant only for a (role, source) some claim rule of its issuer names in the control database: the
 * issuer's claim mapping, or a rule of the gateway configuration recorded in configured_claim_grants
 * (src/control/claim-rules.ts). On the real gateway and real database roles: the owner's gateway
 * records its rules at start (one config event), a runtime-role gateway without an operator
 * connection logs each rule the database lacks once and signs in with what the database knows, `interlock db
 * sync-claim-rules` records them, an operator connection replaces them at start, removal always
 * works, the runtime role may only read the table, and the migration seeds it from existing claim grants.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { runner } from 'node-pg-migrate';
import { ADMIN_URL, createTempDatabase } from '../../helpers/pg';
import { callTool } from '../../helpers/governed';
import { startTestIssuer, type TestIssuer } from '../../helpers/jwks-server';
import { createLoginRole, dropLoginRole, freshControlDb, type TestControlDb } from '../control/control-db';
import { grantOperatorRole, grantRuntimeRole, migrationNames, MIGRATIONS_DIR, MIGRATIONS_TABLE, openControlDb, runMigrations, type ControlDb } from '../../../src/control/db';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from '../../../src/control/config';
import { startGovernedGateway, type GovernedGateway } from '../../../src/gateway';
import { createLogger } from '../../../src/observability/logger';
import { addSource } from '../../../src/control/sources';
import { upsertRole } from '../../../src/control/roles';
import { ClaimMappingCache, deleteClaimMapping, upsertClaimMapping } from '../../../src/control/claim-mappings';
import { TokenIdentityStore } from '../../../src/auth/token-identities';
import { MISSING_CLAIM_RULE_FIX } from '../../../src/control/claim-rules';
import { runCli } from '../../../src/cli/main';
import type { ClaimRoleGrant, TokenIssuer } from '../../../generated/config-v1';

jest.setTimeout(180_000);

const RESOURCE = 'https://gateway.hcg.example/mcp';
const rule = (value: string, source: string): ClaimRoleGrant => ({ claim: 'groups', value, role: 'reader', source });

let t: TestControlDb;
let iss: TestIssuer;
let dir: string;
let runtimeRole: string;
let rtUrl: string;
let operatorRole: string;
let opUrl: string;
let rt: ControlDb;

function gatewayConfig(grants: ClaimRoleGrant[], operatorUrl?: string): ResolvedGatewayConfig {
  const c = structuredClone(DEFAULT_CONFIG as ResolvedGatewayConfig);
  if (operatorUrl) c.database = { ...c.database, operator_url: operatorUrl };
  c.auth = { resource: RESOURCE, issuers: [{ issuer: iss.issuer, jwks_uri: iss.jwksUri, unknown_subjects: 'provision', identity_claim: 'email', role_grants: grants }] };
  return c;
}

async function start(db: ControlDb, config: ResolvedGatewayConfig, lines: Array<Record<string, unknown>> = []): Promise<GovernedGateway> {
  return startGovernedGateway({ db, config, host: '127.0.0.1', port: 0, logger: createLogger('info', { write: (l: string) => void lines.push(JSON.parse(l)) }), catalogRescanMs: 0 });
}

async function rows(): Promise<Array<{ issuer: string; role_name: string; source_id: string }>> {
  return (await t.db.pool.query('SELECT issuer, role_name, source_id FROM configured_claim_grants ORDER BY 1, 2, 3')).rows;
}

async function lastEventId(): Promise<string> {
  return (await t.db.pool.query<{ id: string }>('SELECT coalesce(max(id), 0)::text AS id FROM audit_events')).rows[0].id;
}

async function syncEventsAfter(id: string): Promise<Array<{ operator: string; details: unknown }>> {
  return (await t.db.pool.query("SELECT operator, details FROM audit_events WHERE kind = 'config' AND decision = 'claim_rules_synced' AND id > $1 ORDER BY id", [id])).rows;
}

async function grantsOf(name: string): Promise<Array<{ role_name: string; source_id: string; granted_by: string }>> {
  return (await t.db.pool.query('SELECT g.role_name, g.source_id, g.granted_by FROM grants g JOIN identities i ON i.id = g.identity_id WHERE i.name = $1 ORDER BY 2', [name])).rows;
}

/** The sources a fresh token with `claims` lists through the gateway. */
async function signIn(gw: GovernedGateway, claims: Record<string, unknown>): Promise<string[]> {
  const r = await callTool({ url: gw.url }, 'interlock_list_sources', {}, await iss.mint(claims));
  expect({ status: r.status, isError: r.body.result?.isError }).toEqual({ status: 200, isError: undefined });
  return Object.keys(JSON.parse(r.body.result.content[0].text)).sort();
}

async function cli(url: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(['--database-url', url, ...args], { out: (s) => (stdout += s + '\n'), err: (s) => (stderr += s + '\n') });
  return { code, stdout, stderr };
}


beforeAll(async () => {
  t = await freshControlDb('hcg_rules');
  iss = await startTestIssuer(RESOURCE);
  dir = mkdtempSync(join(tmpdir(), 'il-hcg-'));
  for (const id of ['docs-a', 'docs-b', 'docs-c']) await addSource(t.db, { id, type: 'documents', name: id, settings: { path: dir } });
  await upsertRole(t.db, { name: 'reader', statements: [{ effect: 'allow', action: 'read', resource: '*' }] });
  runtimeRole = `il_rt_${randomBytes(4).toString('hex')}`;
  rtUrl = await createLoginRole(t, runtimeRole);
  await grantRuntimeRole(t.db, runtimeRole);
  operatorRole = `il_op_${randomBytes(4).toString('hex')}`;
  opUrl = await createLoginRole(t, operatorRole);
  await grantOperatorRole(t.db, operatorRole);
  rt = await openControlDb(rtUrl, { migrate: false, poolSize: 4 });
});

afterAll(async () => {
  await rt?.close();
  if (runtimeRole) await dropLoginRole(t, runtimeRole);
  if (operatorRole) await dropLoginRole(t, operatorRole);
  await iss?.close();
  await t?.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

test('owner setup: the start records the configuration\'s rules in one event, an honest sign-in gets its grant, an unchanged restart records nothing', async () => {
  const before = await lastEventId();
  const gw = await start(t.db, gatewayConfig([rule('a', 'docs-a')]));
  try {
    expect(await rows()).toEqual([{ issuer: iss.issuer, role_name: 'reader', source_id: 'docs-a' }]);
    expect(await syncEventsAfter(before)).toEqual([{ operator: 'system', details: { added: [{ issuer: iss.issuer, role: 'reader', source: 'docs-a' }], removed: [] } }]);
    expect(await signIn(gw, { sub: 'hcg|ana', email: 'ana@hcg.example', groups: ['a'] })).toEqual(['docs-a']);
    expect(await grantsOf('ana@hcg.example')).toEqual([{ role_name: 'reader', source_id: 'docs-a', granted_by: 'claims' }]);
  } finally {
    await gw.close(1000);
  }
  const again = await lastEventId();
  await (await start(t.db, gatewayConfig([rule('a', 'docs-a')]))).close(1000);
  expect(await syncEventsAfter(again)).toEqual([]);
});

test('runtime role without an operator connection: each rule the database lacks is logged once naming the fix, sign-in keeps the grants the database knows; `db sync-claim-rules` records the rest', async () => {
  const before = await lastEventId();
  const lines: Array<Record<string, unknown>> = [];
  const config = gatewayConfig([rule('a', 'docs-a'), rule('b', 'docs-b')]);
  const gw = await start(rt, config, lines);
  const missing = () => lines.filter((l) => l.msg === MISSING_CLAIM_RULE_FIX).map((l) => [l.level, l.component, l.issuer, l.role, l.source]);
  try {
    expect(missing()).toEqual([[40, 'oauth', iss.issuer, 'reader', 'docs-b']]);
    expect(await signIn(gw, { sub: 'hcg|ben', email: 'ben@hcg.example', groups: ['a', 'b'] })).toEqual(['docs-a']);
    expect(await grantsOf('ben@hcg.example')).toEqual([{ role_name: 'reader', source_id: 'docs-a', granted_by: 'claims' }]);
    expect(await signIn(gw, { sub: 'hcg|cid', email: 'cid@hcg.example', groups: ['b'] })).toEqual([]);
    // Once per rule, not per sign-in; nothing written by this gateway.
    expect(missing()).toHaveLength(1);
    expect(await rows()).toEqual([{ issuer: iss.issuer, role_name: 'reader', source_id: 'docs-a' }]);
    expect(await syncEventsAfter(before)).toEqual([]);

    // The runtime role's own URL may not record them (exit 2, the owner's fix named); the owner may.
    const file = join(dir, 'gateway.json');
    writeFileSync(file, JSON.stringify({ auth: config.auth }));
    const refused = await cli(rtUrl, '--config', file, 'db', 'sync-claim-rules', '--operator', 'ops-hcg');
    expect({ code: refused.code, stdout: refused.stdout }).toEqual({ code: 2, stdout: '' });
    expect(refused.stderr).toContain('may not do this (permission denied)');
    const ok = await cli(t.temp.url, '--config', file, 'db', 'sync-claim-rules', '--operator', 'ops-hcg');
    expect(ok).toEqual({ code: 0, stdout: `recorded the configuration's claim rules: 1 added, 0 removed\n  + ${iss.issuer} reader on docs-b\n`, stderr: '' });
    expect(await syncEventsAfter(before)).toEqual([{ operator: 'ops-hcg', details: { added: [{ issuer: iss.issuer, role: 'reader', source: 'docs-b' }], removed: [] } }]);
    expect((await cli(t.temp.url, '--config', file, 'db', 'sync-claim-rules')).stdout).toBe("the control database already records the configuration's 2 claim rule pair(s)\n");
    // The running gateway hears of it (notification) and gives the grant at the next sign-in.
    let seen: string[] = [];
    for (let i = 0; i < 40 && (seen = await signIn(gw, { sub: 'hcg|ben', email: 'ben@hcg.example', groups: ['a', 'b'] })).length < 2; i++) await new Promise((r) => setTimeout(r, 100));
    expect(seen).toEqual(['docs-a', 'docs-b']);
  } finally {
    await gw.close(1000);
  }
});

test('through the operator connection the start replaces the rules (a removed one too) in one event; a grant no rule names any more is taken back', async () => {
  const before = await lastEventId();
  const lines: Array<Record<string, unknown>> = [];
  const gw = await start(rt, gatewayConfig([rule('b', 'docs-b'), rule('c', 'docs-c')], opUrl), lines);
  try {
    expect(await rows()).toEqual([
      { issuer: iss.issuer, role_name: 'reader', source_id: 'docs-b' },
      { issuer: iss.issuer, role_name: 'reader', source_id: 'docs-c' },
    ]);
    expect(await syncEventsAfter(before)).toEqual([
      { operator: 'system', details: { added: [{ issuer: iss.issuer, role: 'reader', source: 'docs-c' }], removed: [{ issuer: iss.issuer, role: 'reader', source: 'docs-a' }] } },
    ]);
    expect(lines.filter((l) => l.msg === MISSING_CLAIM_RULE_FIX)).toEqual([]);
    expect(await signIn(gw, { sub: 'hcg|ben', email: 'ben@hcg.example', groups: ['a', 'b', 'c'] })).toEqual(['docs-b', 'docs-c']);
    expect(await grantsOf('ben@hcg.example')).toEqual([
      { role_name: 'reader', source_id: 'docs-b', granted_by: 'claims' },
      { role_name: 'reader', source_id: 'docs-c', granted_by: 'claims' },
    ]);
  } finally {
    await gw.close(1000);
  }
});

test('as the runtime role: only pairs a rule of the same issuer names are given (a claim mapping counts), removal always works, and the rules table is read-only', async () => {
  const other = 'https://other.hcg.example';
  const id = `idn_${randomBytes(10).toString('hex')}`;
  const c = new pg.Client({ connectionString: rtUrl });
  await c.connect();
  try {
    const sync = (roles: string[], sources: string[]) => c.query('SELECT interlock_sync_claim_grants($1, $2, $3::text[], $4::text[])', [other, 'x-sub', roles, sources]).then(() => null, (e: { code?: string }) => e.code);
    await c.query("SELECT interlock_provision_token_identity($1, 'x-tok', $2, 'x-sub')", [id, other]);
    // docs-b is named by a rule of the test issuer, not of this one.
    expect(await sync(['reader'], ['docs-b'])).toBe('42501');
    await upsertClaimMapping(t.db, { issuer: other, role_grants: [rule('x', 'docs-a')] });
    expect(await sync(['reader', 'reader'], ['docs-a', 'docs-b'])).toBe('42501');
    expect(await grantsOf('x-tok')).toEqual([]);
    expect(await sync(['reader'], ['docs-a'])).toBeNull();
    expect(await grantsOf('x-tok')).toEqual([{ role_name: 'reader', source_id: 'docs-a', granted_by: 'claims' }]);
    // No rule of the issuer left: its claim grants are still taken back.
    await deleteClaimMapping(t.db, other);
    expect(await sync([], [])).toBeNull();
    expect(await grantsOf('x-tok')).toEqual([]);
    const denied = [
      `INSERT INTO configured_claim_grants (issuer, role_name, source_id) VALUES ('${other}', 'reader', 'docs-b')`,
      'DELETE FROM configured_claim_grants',
      "UPDATE configured_claim_grants SET source_id = 'docs-a'",
      'TRUNCATE configured_claim_grants',
      `INSERT INTO claim_mappings (issuer, role_grants) VALUES ('${other}', '[]')`,
    ];
    const got = [];
    for (const sql of denied) got.push({ sql, code: await c.query(sql).then(() => 'ok', (e: { code?: string }) => e.code) });
    expect(got).toEqual(denied.map((sql) => ({ sql, code: '42501' })));
    // Nor may it take the lock a sync serialises on (and so stall the syncs).
    await c.query('BEGIN');
    expect(await c.query('LOCK TABLE configured_claim_grants IN SHARE ROW EXCLUSIVE MODE').then(() => 'ok', (e: { code?: string }) => e.code)).toBe('42501');
    await c.query('ROLLBACK');
    expect((await c.query('SELECT count(*)::int AS n FROM configured_claim_grants')).rows).toEqual([{ n: 2 }]);
    // A write given to the runtime role by hand is taken back by grant-runtime-role.
    await t.db.pool.query(`GRANT INSERT, DELETE ON configured_claim_grants, claim_mappings TO ${runtimeRole}`);
    await grantRuntimeRole(t.db, runtimeRole);
    const may = await t.db.pool.query("SELECT t, has_table_privilege($1, t, 'SELECT') AS s, has_table_privilege($1, t, 'INSERT') AS i, has_table_privilege($1, t, 'DELETE') AS d FROM unnest(ARRAY['claim_mappings', 'configured_claim_grants']) AS t ORDER BY t", [runtimeRole]);
    expect(may.rows).toEqual([
      { t: 'claim_mappings', s: true, i: false, d: false },
      { t: 'configured_claim_grants', s: true, i: false, d: false },
    ]);
  } finally {
    await c.end();
  }
});

test('a rule removed after the allowed pairs were loaded (no notification heard): the refused sync is retried with the pairs the database allows now, and the sign-in works', async () => {
  const issuer = 'https://late.hcg.example';
  const cfg = { issuer, unknown_subjects: 'provision', identity_claim: 'email', role_grants: [rule('l', 'docs-a'), rule('l', 'docs-b')] } as TokenIssuer;
  await t.db.pool.query("INSERT INTO configured_claim_grants (issuer, role_name, source_id) VALUES ($1, 'reader', 'docs-a'), ($1, 'reader', 'docs-b')", [issuer]);
  const lines: Array<Record<string, unknown>> = [];
  // On the runtime role, with a cache that would not reload for an hour on its own.
  const store = new TokenIdentityStore(rt, createLogger('info', { write: (l: string) => void lines.push(JSON.parse(l)) }), new ClaimMappingCache(rt, 3_600_000));
  const claims = { sub: 'hcg|lea', email: 'lea@hcg.example', groups: ['l'] };
  expect(await store.identityFor(cfg, claims)).toMatchObject({ identity: { name: 'lea@hcg.example' } });
  expect((await grantsOf('lea@hcg.example')).map((g) => g.source_id)).toEqual(['docs-a', 'docs-b']);
  await t.db.pool.query("DELETE FROM configured_claim_grants WHERE issuer = $1 AND source_id = 'docs-b'", [issuer]);
  // Same claims within the touch interval: the signature is unchanged, nothing is synced yet.
  expect(await store.identityFor(cfg, claims)).toMatchObject({ identity: { name: 'lea@hcg.example' } });
  // New claims make it sync: docs-b is refused by the function (42501), reloaded, left out and taken back.
  expect(await store.identityFor(cfg, { ...claims, email: 'lea@hcg.example', groups: ['l', 'other'] })).toMatchObject({ identity: { name: 'lea@hcg.example' } });
  expect((await grantsOf('lea@hcg.example')).map((g) => g.source_id)).toEqual(['docs-a']);
  expect(lines.filter((l) => l.msg === MISSING_CLAIM_RULE_FIX).map((l) => [l.issuer, l.source])).toEqual([[issuer, 'docs-b']]);
});

test('the migration seeds the table from the claim grants that exist, and lets roles that read or write claim_mappings read or write it', async () => {
  const temp = await createTempDatabase('hcg_seed');
  const target = '20261209210000000_configured-claim-grants_hcg';
  const reader = `il_sr_${randomBytes(4).toString('hex')}`;
  const writer = `il_sw_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  const c = new pg.Client({ connectionString: temp.url });
  await c.connect();
  let db: ControlDb | undefined;
  try {
    await runner({ dbClient: c, dir: MIGRATIONS_DIR, migrationsTable: MIGRATIONS_TABLE, direction: 'up', count: migrationNames().indexOf(target), singleTransaction: true, logger: { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined } });
    await c.query(`
      INSERT INTO identities (id, name) VALUES ('idn_00000000000000000001', 'tok-one'), ('idn_00000000000000000002', 'key-two');
      INSERT INTO identity_subjects (issuer, subject, identity_id) VALUES ('https://idp.seed.example', 's1', 'idn_00000000000000000001');
      INSERT INTO sources (id, type, name, settings) VALUES ('s-a', 'documents', 's-a', '{"path":"/tmp"}'), ('s-b', 'documents', 's-b', '{"path":"/tmp"}');
      INSERT INTO roles (name, statements) VALUES ('r', '[{"effect":"allow","action":"read","resource":"*"}]');
      INSERT INTO grants (identity_id, role_name, source_id, granted_by) VALUES ('idn_00000000000000000001', 'r', 's-a', 'claims'), ('idn_00000000000000000001', 'r', 's-b', 'operator'), ('idn_00000000000000000002', 'r', 's-b', 'operator');`);
    for (const r of [reader, writer]) await admin.query(`CREATE ROLE ${r}`);
    await c.query(`GRANT SELECT ON claim_mappings TO ${reader}; GRANT SELECT, INSERT ON claim_mappings TO ${writer}`);
    expect(await runMigrations(temp.url)).toEqual(migrationNames().slice(migrationNames().indexOf(target)));
    db = await openControlDb(temp.url, { migrate: false });
    expect((await db.pool.query('SELECT issuer, role_name, source_id FROM configured_claim_grants')).rows).toEqual([{ issuer: 'https://idp.seed.example', role_name: 'r', source_id: 's-a' }]);
    const may = await db.pool.query(
      `SELECT r, has_table_privilege(r, 'configured_claim_grants', 'SELECT') AS s, has_table_privilege(r, 'configured_claim_grants', 'INSERT') AS i,
              has_table_privilege(r, 'configured_claim_grants', 'DELETE') AS d, has_table_privilege(r, 'configured_claim_grants', 'UPDATE') AS u
         FROM unnest($1::text[]) AS r ORDER BY array_position($1::text[], r)`,
      [[reader, writer]],
    );
    expect(may.rows).toEqual([
      { r: reader, s: true, i: false, d: false, u: false },
      { r: writer, s: true, i: true, d: true, u: false },
    ]);
  } finally {
    await db?.close();
    await c.end();
    await temp.drop();
    for (const r of [reader, writer]) await admin.query(`DROP ROLE IF EXISTS ${r}`);
    await admin.end();
  }
});
