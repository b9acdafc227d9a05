/**
 * Issue 26: the gateway's runtime database role provisions token identities and their claim grants
 * only through the checked SECURITY DEFINER functions (migrations/…_token-provisioning-functions_h26.sql),
 * never by writing identities, identity_subjects or grants itself. As that role: direct writes are
 * refused (42501); the real step-1 code (TokenIdentityStore) still provisions and syncs; the
 * functions refuse bad input (22023), cannot give anything to an identity without a token subject
 * (a key-only identity), never touch operator grants, give a disabled identity nothing, and skip
 * roles or sources that do not exist.
 */
import { pgServer } from '../../helpers/pg';
import { freshControlDb, withRuntimeRole, type TestControlDb } from './control-db';
import { openControlDb, type ControlDb } from '../../../src/control/db';
import { addSource } from '../../../src/control/sources';
import { upsertRole } from '../../../src/control/roles';
import { createIdentity } from '../../../src/control/identities';
import { grantRole } from '../../../src/control/grants';
import { TokenIdentityStore } from '../../../src/auth/token-identities';
import { replaceConfiguredClaimGrants } from '../../../src/control/claim-rules';
import type { TokenIssuer } from '../../../generated/config-v1';

jest.setTimeout(60_000);

const ISSUER = 'https://idp.runtime.example';
const CFG = { issuer: ISSUER, unknown_subjects: 'provision', identity_claim: 'email', role_grants: [{ claim: 'groups', value: 'analysts', role: 'analyst', source: 'sales' }, { claim: 'groups', value: 'ghosts', role: 'no-such-role', source: 'sales' }] } as TokenIssuer;
let t: TestControlDb;
let keyAgentId: string;

beforeAll(async () => {
  t = await freshControlDb('rt_grants');
  await addSource(t.db, { id: 'sales', type: 'postgres', name: 'Sales', settings: { ...pgServer(), database: 'sales', reader: { user: 'reader', password: 'pw' }, tls: { mode: 'off' } } });
  await upsertRole(t.db, { name: 'analyst', statements: [{ effect: 'allow', action: 'read', resource: '*' }] });
  await upsertRole(t.db, { name: 'admin-ish', statements: [{ effect: 'allow', action: '*', resource: '*' }] });
  keyAgentId = (await createIdentity(t.db, 'key-agent')).id;
  await grantRole(t.db, { identityId: keyAgentId, roleName: 'analyst', sourceId: 'sales' });
  // The configuration's rules recorded by the owner (a gateway's start or `interlock db sync-claim-rules`, task hcg).
  await replaceConfiguredClaimGrants(t.db, [CFG]);
});
afterAll(async () => {
  await t?.cleanup();
});

async function grantsOf(name: string) {
  const r = await t.db.pool.query('SELECT g.role_name, g.source_id, g.granted_by FROM grants g JOIN identities i ON i.id = g.identity_id WHERE i.name = $1 ORDER BY 1, 2', [name]);
  return r.rows;
}

/** Runs `fn` with a control-database handle logged in as a fresh runtime role. */
async function asRuntime(fn: (db: ControlDb) => Promise<void>): Promise<void> {
  await withRuntimeRole(t, async (url) => {
    const db = await openControlDb(url, { migrate: false });
    try {
      await fn(db);
    } finally {
      await db.close();
    }
  });
}

test('the runtime role cannot write identities, token subjects or grants directly', async () => {
  await asRuntime(async (db) => {
    const refused = [
      `INSERT INTO grants (identity_id, role_name, source_id) VALUES ('${keyAgentId}', 'admin-ish', 'sales')`,
      `INSERT INTO grants (identity_id, role_name, source_id, granted_by) VALUES ('${keyAgentId}', 'admin-ish', 'sales', 'claims')`,
      'DELETE FROM grants',
      "UPDATE grants SET role_name = 'admin-ish'",
      "INSERT INTO identities (id, name) VALUES ('idn_00000000000000000001', 'x')",
      `INSERT INTO identity_subjects (issuer, subject, identity_id) VALUES ('${ISSUER}', 'steal', '${keyAgentId}')`,
      'DELETE FROM identity_subjects',
      "UPDATE identity_subjects SET identity_id = 'x'",
      'UPDATE identities SET disabled = false',
    ];
    for (const sql of refused) await expect(db.pool.query(sql)).rejects.toMatchObject({ code: '42501' });
    // What it still may do: read, and record a subject's last use.
    await db.pool.query('SELECT * FROM grants');
    await db.pool.query('UPDATE identity_subjects SET last_used_at = now() WHERE false');
  });
  expect(await grantsOf('key-agent')).toEqual([{ role_name: 'analyst', source_id: 'sales', granted_by: 'operator' }]);
});

test('as the runtime role, step 1 still provisions a token identity and keeps its claim grants in step', async () => {
  const cfg = CFG;
  await asRuntime(async (db) => {
    const store = new TokenIdentityStore(db);
    const found = await store.identityFor(cfg, { sub: 'okta|rita', email: 'rita@runtime.example', groups: ['analysts', 'ghosts'] });
    expect(found).toMatchObject({ identity: { name: 'rita@runtime.example', token: { issuer: ISSUER, subject: 'okta|rita' } } });
    expect(await grantsOf('rita@runtime.example')).toEqual([{ role_name: 'analyst', source_id: 'sales', granted_by: 'claims' }]);
    // Its usable attribute claims are recorded (red team rt27m finding 3: kept claim values are checked against them at approval).
    expect((await db.pool.query("SELECT claim_attributes, claims_seen_at IS NOT NULL AS seen FROM identity_subjects WHERE subject = 'okta|rita'")).rows).toEqual([{ claim_attributes: { email: 'rita@runtime.example', groups: ['analysts', 'ghosts'] }, seen: true }]);
    // Leaving the group takes the claim grant back (a fresh store: no touch interval).
    await new TokenIdentityStore(db).identityFor(cfg, { sub: 'okta|rita', email: 'rita@runtime.example', groups: [] });
    expect(await grantsOf('rita@runtime.example')).toEqual([]);
    // An existing name is never taken over by a new subject.
    expect(await new TokenIdentityStore(db).identityFor(cfg, { sub: 'okta|impostor', email: 'key-agent' })).toEqual({ failure: 'identity_name_taken' });
  });
});

test('the functions check their input: bad forms, a key-only identity, operator grants, a disabled identity', async () => {
  await asRuntime(async (db) => {
    const call = (sql: string, params: unknown[]) => db.pool.query(sql, params);
    const provision = 'SELECT interlock_provision_token_identity($1, $2, $3, $4)';
    for (const bad of [
      ['not-an-id', 'ok-name', ISSUER, 'sub-1'],
      ['idn_00000000000000000002', 'Bad Name', ISSUER, 'sub-1'],
      ['idn_00000000000000000002', 'ok-name', 'ftp://idp.example', 'sub-1'],
      ['idn_00000000000000000002', 'ok-name', ISSUER, ''],
      [null, 'ok-name', ISSUER, 'sub-1'],
    ]) {
      await expect(call(provision, bad)).rejects.toMatchObject({ code: '22023' });
    }
    // Linking a new subject to an existing identity (by its id or its name) is a unique violation: nothing is taken over.
    await expect(call(provision, [keyAgentId, 'fresh-name', ISSUER, 'sub-2'])).rejects.toMatchObject({ code: '23505' });
    await expect(call(provision, ['idn_00000000000000000003', 'key-agent', ISSUER, 'sub-3'])).rejects.toMatchObject({ code: '23505' });

    const sync = 'SELECT interlock_sync_claim_grants($1, $2, $3::text[], $4::text[])';
    // A subject no identity is linked to (so a key-only identity such as key-agent can never be named).
    await expect(call(sync, [ISSUER, 'okta|nobody', ['admin-ish'], ['sales']])).rejects.toMatchObject({ code: '22023' });
    await expect(call(sync, [ISSUER, 'okta|rita', ['admin-ish', 'analyst'], ['sales']])).rejects.toMatchObject({ code: '22023' });
    await expect(call(sync, [ISSUER, 'okta|rita', [null], ['sales']])).rejects.toMatchObject({ code: '22023' });
    await expect(call(sync, [ISSUER, 'okta|rita', Array(1025).fill('analyst'), Array(1025).fill('sales')])).rejects.toMatchObject({ code: '22023' });
    expect(await grantsOf('key-agent')).toEqual([{ role_name: 'analyst', source_id: 'sales', granted_by: 'operator' }]);

    // An operator grant on a token identity is never removed by a sync.
    const rita = (await t.db.pool.query("SELECT id FROM identities WHERE name = 'rita@runtime.example'")).rows[0].id as string;
    await grantRole(t.db, { identityId: rita, roleName: 'admin-ish', sourceId: 'sales' });
    await call(sync, [ISSUER, 'okta|rita', ['analyst'], ['sales']]);
    expect(await grantsOf('rita@runtime.example')).toEqual([
      { role_name: 'admin-ish', source_id: 'sales', granted_by: 'operator' },
      { role_name: 'analyst', source_id: 'sales', granted_by: 'claims' },
    ]);
    await call(sync, [ISSUER, 'okta|rita', [], []]);
    expect(await grantsOf('rita@runtime.example')).toEqual([{ role_name: 'admin-ish', source_id: 'sales', granted_by: 'operator' }]);

    // A disabled identity gains nothing (and still loses claim grants).
    await t.db.pool.query('UPDATE identities SET disabled = true WHERE id = $1', [rita]);
    await call(sync, [ISSUER, 'okta|rita', ['analyst'], ['sales']]);
    expect(await grantsOf('rita@runtime.example')).toEqual([{ role_name: 'admin-ish', source_id: 'sales', granted_by: 'operator' }]);
  });
});

test('EXECUTE is not granted to PUBLIC: a role without the runtime grants cannot call the functions', async () => {
  const r = await t.db.pool.query<{ fn: string; public_exec: boolean }>(
    `SELECT p.proname AS fn, has_function_privilege('public', p.oid, 'EXECUTE') AS public_exec, p.prosecdef
       FROM pg_proc p WHERE p.proname IN ('interlock_provision_token_identity', 'interlock_sync_claim_grants') ORDER BY 1`,
  );
  expect(r.rows).toEqual([
    { fn: 'interlock_provision_token_identity', public_exec: false, prosecdef: true },
    { fn: 'interlock_sync_claim_grants', public_exec: false, prosecdef: true },
  ]);
});
