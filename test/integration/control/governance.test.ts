/** Identities, sources, roles, grants, policies, catalog snapshots and change notifications. */
import { Client } from 'pg';
import { freshControlDb, type TestControlDb } from './control-db';
import { CONTROL_CHANNEL, listenControlChanges } from '../../../src/control/db';
import { createIdentity, disableIdentity, getIdentityByName, listIdentities, requireIdentity } from '../../../src/control/identities';
import { addSource, getSource, listSources, postgresClientConfig, putSource, redactSourceSettings, setSourceEnabled } from '../../../src/control/sources';
import { getRole, listRoles, upsertRole } from '../../../src/control/roles';
import { grantRole, grantsForIdentity, listGrants, revokeGrant } from '../../../src/control/grants';
import { activePolicies, addPolicies, getPolicy, listPolicies, removePolicy } from '../../../src/control/policies';
import { catalogSummaries, loadCatalog, saveCatalog } from '../../../src/control/catalog';
import type { SourceCatalog } from '../../../src/sql/catalog-types';

let t: TestControlDb;
beforeAll(async () => {
  t = await freshControlDb('ctl_gov');
});
afterAll(async () => {
  await t.cleanup();
});

const PG_SOURCE = {
  id: 'sales',
  type: 'postgres',
  name: 'Sales',
  settings: { host: 'db.internal', port: 5432, database: 'sales', reader: { user: 'sales_reader', password: 'r-secret' }, writer: { user: 'sales_writer', password: 'w-secret' }, tls: { mode: 'verify-full', ca: '-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n' } },
};

describe('identities', () => {
  test('create, list, get, disable; names are validated and unique', async () => {
    const a = await createIdentity(t.db, 'alpha');
    expect(a).toEqual({ id: expect.stringMatching(/^idn_[0-9a-f]{20}$/), name: 'alpha', disabled: false, createdAt: expect.any(String), disabledAt: null });
    await expect(createIdentity(t.db, 'alpha')).rejects.toMatchObject({ kind: 'conflict', message: 'identity "alpha" already exists' });
    for (const bad of ['Alpha', '', '-x', 'a b', 'x'.repeat(129)]) await expect(createIdentity(t.db, bad)).rejects.toMatchObject({ kind: 'validation' });
    expect((await getIdentityByName(t.db, 'alpha'))!.id).toBe(a.id);
    expect(await getIdentityByName(t.db, 'nobody')).toBeNull();
    await expect(requireIdentity(t.db, 'nobody')).rejects.toMatchObject({ kind: 'not_found', message: 'identity "nobody" not found' });
    const d = await disableIdentity(t.db, 'alpha');
    expect(d.disabled).toBe(true);
    expect(d.disabledAt).not.toBeNull();
    expect((await listIdentities(t.db)).map((i) => [i.name, i.disabled])).toContainEqual(['alpha', true]);
  });
});

describe('sources', () => {
  test('add, get, list, enable/disable; definitions are validated against the schema', async () => {
    const s = await addSource(t.db, PG_SOURCE);
    expect(s).toMatchObject({ id: 'sales', type: 'postgres', name: 'Sales', description: '', enabled: true, settings: PG_SOURCE.settings });
    await expect(addSource(t.db, PG_SOURCE)).rejects.toMatchObject({ kind: 'conflict', message: 'source "sales" already exists' });
    const bad = await addSource(t.db, { ...PG_SOURCE, id: 'Bad Id', settings: { ...PG_SOURCE.settings, port: 'x', tls: { mode: 'sometimes' }, extra: 1 } }).catch((e: { details: string[] }) => e);
    expect((bad as { details: string[] }).details).toEqual([
      '/id: must match pattern "^[a-z0-9][a-z0-9_-]{0,62}$"',
      '/settings: unknown key "extra" (not allowed here)',
      '/settings/port: must be integer',
      '/settings/tls/mode: must be equal to one of the allowed values (off, require, verify-ca, verify-full)',
    ]);
    await expect(addSource(t.db, { id: 'docs', type: 'documents', name: 'Docs', settings: { host: 'x' } })).rejects.toMatchObject({
      details: ['/settings: must have required property \'path\'', '/settings: unknown key "host" (not allowed here)'],
    });
    await addSource(t.db, { id: 'docs', type: 'documents', name: 'Docs', settings: { path: '/srv/docs' } });
    expect((await listSources(t.db)).map((x) => [x.id, x.type])).toEqual([
      ['docs', 'documents'],
      ['sales', 'postgres'],
    ]);
    expect((await setSourceEnabled(t.db, 'docs', false)).enabled).toBe(false);
    expect((await getSource(t.db, 'docs'))!.enabled).toBe(false);
    await expect(setSourceEnabled(t.db, 'nope', true)).rejects.toMatchObject({ kind: 'not_found' });
    const { created } = await putSource(t.db, { ...PG_SOURCE, name: 'Sales (renamed)' });
    expect(created).toBe(false);
    expect((await getSource(t.db, 'sales'))!.name).toBe('Sales (renamed)');
  });

  test('redaction for display and TLS client configuration', () => {
    const red = redactSourceSettings(PG_SOURCE.settings as never);
    expect(JSON.stringify(red)).not.toMatch(/r-secret|w-secret|MII/);
    expect(red).toMatchObject({ reader: { user: 'sales_reader', password: '***' }, writer: { password: '***' }, tls: { mode: 'verify-full', ca: '<PEM, 58 characters>' } });
    const settings = PG_SOURCE.settings as never;
    expect(postgresClientConfig(settings, 'reader')).toEqual({
      host: 'db.internal',
      port: 5432,
      database: 'sales',
      user: 'sales_reader',
      password: 'r-secret',
      ssl: { rejectUnauthorized: true, ca: PG_SOURCE.settings.tls.ca, servername: 'db.internal' },
      // The pinned session settings (issue 22 item 2), in the startup packet of every source connection (DateStyle: set on connect).
      options: '-c standard_conforming_strings=on -c backslash_quote=safe_encoding -c client_encoding=UTF8 -c IntervalStyle=postgres -c TimeZone=UTC -c extra_float_digits=1 -c bytea_output=hex',
    });
    const off = { ...PG_SOURCE.settings, tls: { mode: 'off' } } as never;
    expect(postgresClientConfig(off, 'writer').ssl).toBe(false);
    const req = { ...PG_SOURCE.settings, tls: { mode: 'require' } } as never;
    expect(postgresClientConfig(req, 'reader').ssl).toEqual({ rejectUnauthorized: false });
    const ca = postgresClientConfig({ ...PG_SOURCE.settings, tls: { mode: 'verify-ca', ca: 'PEM' } } as never, 'reader').ssl as { checkServerIdentity: () => unknown; rejectUnauthorized: boolean };
    expect(ca.rejectUnauthorized).toBe(true);
    expect(ca.checkServerIdentity()).toBeUndefined();
    expect(() => postgresClientConfig({ ...PG_SOURCE.settings, writer: undefined } as never, 'writer')).toThrow('this source has no writer credentials');
  });
});

describe('roles, grants and policies', () => {
  const ROLE = { name: 'analyst', description: 'reads', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'deny', action: 'read', resource: 'public.secrets' }] };

  test('roles: upsert validated objects, get, list', async () => {
    const first = await upsertRole(t.db, ROLE);
    expect(first.created).toBe(true);
    expect(first.role).toEqual({ ...ROLE, audiences: [], createdAt: expect.any(String), updatedAt: expect.any(String) });
    const second = await upsertRole(t.db, { ...ROLE, description: 'reads more', audiences: ['finance'] });
    expect(second.created).toBe(false);
    expect((await getRole(t.db, 'analyst'))!.audiences).toEqual(['finance']);
    expect(await getRole(t.db, 'nope')).toBeNull();
    await expect(upsertRole(t.db, { name: 'bad', statements: [{ effect: 'maybe', action: 'read', resource: 'a b' }], extra: true })).rejects.toMatchObject({
      kind: 'validation',
      details: [
        '/: unknown key "extra" (not allowed here)',
        '/statements/0/effect: must be equal to one of the allowed values (allow, deny)',
        '/statements/0/resource: must match pattern "^[^\\s]+$"',
      ],
    });
    expect((await listRoles(t.db)).map((r) => r.name)).toEqual(['analyst']);
  });

  test('grants: grant, list, grantsForIdentity, revoke; missing parts are named', async () => {
    const idn = await createIdentity(t.db, 'grantee');
    expect(await grantRole(t.db, { identityId: idn.id, roleName: 'analyst', sourceId: 'sales' })).toBe(true);
    expect(await grantRole(t.db, { identityId: idn.id, roleName: 'analyst', sourceId: 'sales' })).toBe(false);
    await expect(grantRole(t.db, { identityId: idn.id, roleName: 'ghost', sourceId: 'sales' })).rejects.toMatchObject({ kind: 'not_found', message: 'role "ghost" not found' });
    await expect(grantRole(t.db, { identityId: idn.id, roleName: 'analyst', sourceId: 'ghost' })).rejects.toMatchObject({ kind: 'not_found', message: 'source "ghost" not found' });
    const g = await grantsForIdentity(t.db, idn.id);
    expect(g).toEqual([{ sourceId: 'sales', role: expect.objectContaining({ name: 'analyst', statements: ROLE.statements }) }]);
    expect((await listGrants(t.db, { sourceId: 'sales' })).map((x) => [x.identityName, x.roleName, x.sourceId])).toEqual([['grantee', 'analyst', 'sales']]);
    expect(await revokeGrant(t.db, { identityId: idn.id, roleName: 'analyst', sourceId: 'sales' })).toBe(true);
    expect(await revokeGrant(t.db, { identityId: idn.id, roleName: 'analyst', sourceId: 'sales' })).toBe(false);
    expect(await grantsForIdentity(t.db, idn.id)).toEqual([]);
  });

  test('policies: add (one or a list), conflicts, replace, remove, activePolicies', async () => {
    const mask = { name: 'mask-email', applies_to: { sources: ['sales'] }, rule: { type: 'mask_columns', columns: ['public.customer.email'], method: 'partial' } };
    const cap = { name: 'cap-rows', enabled: false, rule: { type: 'max_rows', max_rows: 50 } };
    const added = await addPolicies(t.db, [mask, cap]);
    expect(added.map((a) => [a.policy.name, a.created, a.policy.enabled])).toEqual([
      ['mask-email', true, true],
      ['cap-rows', true, false],
    ]);
    await expect(addPolicies(t.db, mask)).rejects.toMatchObject({ kind: 'conflict', message: 'policy "mask-email" already exists (use --replace to replace it)' });
    expect((await addPolicies(t.db, { ...mask, description: 'v2' }, { replace: true }))[0].created).toBe(false);
    expect((await getPolicy(t.db, 'mask-email'))!.description).toBe('v2');
    await expect(addPolicies(t.db, [{ name: 'x', rule: { type: 'max_rows', max_rows: 0 } }, { name: 'y', rule: { type: 'nope' } }])).rejects.toMatchObject({ kind: 'validation' });
    const err = await addPolicies(t.db, [{ name: 'x', rule: { type: 'max_rows', max_rows: 0 } }]).catch((e: { details: string[] }) => e.details);
    expect(err).toEqual(['[0]/rule/max_rows: must be >= 1']);
    expect(await activePolicies(t.db)).toEqual([{ name: 'mask-email', description: 'v2', enabled: true, applies_to: { sources: ['sales'] }, rule: mask.rule }]);
    expect((await listPolicies(t.db)).map((p) => p.name)).toEqual(['cap-rows', 'mask-email']);
    expect(await removePolicy(t.db, 'cap-rows')).toBe(true);
    expect(await removePolicy(t.db, 'cap-rows')).toBe(false);
  });
});

describe('catalog snapshots and change notifications', () => {
  const catalog: SourceCatalog = {
    relations: [{ schema: 'public', name: 'album', kind: 'table', columns: [{ name: 'album_id', dataType: 'integer' }] }],
    functions: [{ schema: 'pg_catalog', name: 'lower', volatility: 'immutable', returnsSet: false }],
    searchPath: ['public'],
    scannedAt: '2026-11-29T10:00:00.000Z',
    truncated: false,
  };

  test('save, load, replace, summaries', async () => {
    expect(await loadCatalog(t.db, 'sales')).toBeNull();
    await saveCatalog(t.db, 'sales', catalog);
    expect(await loadCatalog(t.db, 'sales')).toEqual(catalog);
    await saveCatalog(t.db, 'sales', { ...catalog, truncated: true, scannedAt: '2026-11-29T11:00:00.000Z' });
    expect(await loadCatalog(t.db, 'sales')).toEqual({ ...catalog, truncated: true, scannedAt: '2026-11-29T11:00:00.000Z' });
    expect((await catalogSummaries(t.db)).get('sales')).toEqual({ scannedAt: '2026-11-29T11:00:00.000Z', truncated: true, relations: 1 });
  });

  // Red team rt42c: two scans of one source overlapped (an operator's scan after a schema change and
  // the gateway's rescan begun before it); the one begun first finished last and its older picture
  // replaced the newer. A snapshot begun earlier than the stored one is no longer saved over it.
  test('a scan begun before the stored snapshot does not replace it; one begun at or after it does', async () => {
    const newer = { ...catalog, relations: [...catalog.relations, { schema: 'public', name: 'added', kind: 'table' as const, columns: [] }], scannedAt: '2026-11-29T12:00:00.000Z' };
    expect(await saveCatalog(t.db, 'sales', newer)).toBe(true);
    expect(await saveCatalog(t.db, 'sales', { ...catalog, scannedAt: '2026-11-29T11:59:59.999Z' })).toBe(false);
    expect(await loadCatalog(t.db, 'sales')).toEqual(newer);
    expect(await saveCatalog(t.db, 'sales', { ...catalog, scannedAt: '2026-11-29T12:00:00.000Z' })).toBe(true);
    expect(await loadCatalog(t.db, 'sales')).toEqual({ ...catalog, scannedAt: '2026-11-29T12:00:00.000Z' });
  });

  test(`changes to governance tables NOTIFY ${CONTROL_CHANNEL} with the table name; last-use bookkeeping does not`, async () => {
    const seen: string[] = [];
    const listener = await listenControlChanges(t.db, (table) => seen.push(table));
    const raw = new Client({ connectionString: t.temp.url });
    await raw.connect();
    try {
      const idn = await createIdentity(t.db, 'notified');
      await upsertRole(t.db, { name: 'notifier', statements: [{ effect: 'allow', action: 'read', resource: '*.*' }] });
      await grantRole(t.db, { identityId: idn.id, roleName: 'notifier', sourceId: 'sales' });
      await addPolicies(t.db, { name: 'notify-policy', rule: { type: 'require_where' } });
      await setSourceEnabled(t.db, 'sales', true);
      await saveCatalog(t.db, 'sales', catalog);
      await raw.query("INSERT INTO api_keys (id, identity_id, hash, prefix) VALUES ('key_aaaaaaaaaaaaaaaaaaaa', $1, decode(repeat('ab', 32), 'hex'), 'ilk_x')", [idn.id]);
      await new Promise((r) => setTimeout(r, 200));
      expect(seen).toEqual(['identities', 'roles', 'grants', 'policies', 'sources', 'catalog_snapshots', 'api_keys']);
      seen.length = 0;
      await raw.query("UPDATE api_keys SET last_used_at = now() WHERE id = 'key_aaaaaaaaaaaaaaaaaaaa'");
      await raw.query("UPDATE api_keys SET revoked_at = now() WHERE id = 'key_aaaaaaaaaaaaaaaaaaaa'");
      await new Promise((r) => setTimeout(r, 200));
      expect(seen).toEqual(['api_keys']);
    } finally {
      await raw.end();
      await listener.close();
    }
  });
});
