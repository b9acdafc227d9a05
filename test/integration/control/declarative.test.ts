/**
 * Declarative configuration on a real control database (issue 16): export → plan shows no
 * changes; one changed field plans exactly that change; apply records state and audit; applying
 * again changes nothing; --prune removes exactly what the file left out (identities are disabled,
 * not deleted); pending approvals block pruning a source unless forced; inline passwords and
 * unresolvable references are refused; a failing apply changes nothing.
 */
import { pgServer } from '../../helpers/pg';
import YAML from 'yaml';
import { freshControlDb, type TestControlDb } from './control-db';
import { applyInterlockFile } from '../../../src/declarative/apply';
import { exportInterlockFile, passwordEnvName, renderInterlockFile } from '../../../src/declarative/export';
import { renderPlan } from '../../../src/declarative/plan';
import { fileDigest, validateInterlockFileDocument, type InterlockFile, type SecretResolver } from '../../../src/declarative/schema';
import { addSource, getSource } from '../../../src/control/sources';
import { upsertRole } from '../../../src/control/roles';
import { createIdentity, getIdentityByName } from '../../../src/control/identities';
import { grantRole, listGrants } from '../../../src/control/grants';
import { addPolicies, listPolicies } from '../../../src/control/policies';
import { listRoles } from '../../../src/control/roles';
import { createApproval, getApproval } from '../../../src/control/approvals';
import { searchAudit } from '../../../src/audit/writer';
import { ConflictError, ValidationError } from '../../../src/control/errors';

jest.setTimeout(60_000);

let t: TestControlDb;
const env: Record<string, string> = {};
const secrets: SecretResolver = { env: (n) => env[n], file: () => undefined };
const op = { operator: 'ops-anna', secrets, scan: false };

beforeAll(async () => {
  t = await freshControlDb('ctl_decl');
  const pgSettings = (db: string) => ({ ...pgServer(), database: db, reader: { user: 'reader', password: 'pw-' + db }, tls: { mode: 'off' } });
  await addSource(t.db, { id: 'sales', type: 'postgres', name: 'Sales', settings: pgSettings('sales') });
  await addSource(t.db, { id: 'hr', type: 'postgres', name: 'HR', description: 'people', settings: { ...pgSettings('hr'), writer: { user: 'w', password: 'wpw' } } });
  await upsertRole(t.db, { name: 'analyst', statements: [{ effect: 'allow', action: 'read', resource: '*' }] });
  await upsertRole(t.db, { name: 'hr-reader', audiences: ['hr'], statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'deny', action: 'read', resource: 'public.salary' }] });
  const a = await createIdentity(t.db, 'agent-a');
  const b = await createIdentity(t.db, 'agent-b');
  await grantRole(t.db, { identityId: a.id, roleName: 'analyst', sourceId: 'sales' });
  await grantRole(t.db, { identityId: b.id, roleName: 'hr-reader', sourceId: 'hr' });
  await addPolicies(t.db, [
    { name: 'cap', rule: { type: 'max_rows', max_rows: 100 } },
    { name: 'mask-hr', applies_to: { sources: ['hr'] }, rule: { type: 'mask_columns', columns: ['public.person.email'], method: 'partial' } },
  ]);
  env[passwordEnvName('sales', 'reader')] = 'pw-sales';
  env[passwordEnvName('hr', 'reader')] = 'pw-hr';
  env[passwordEnvName('hr', 'writer')] = 'wpw';
});
afterAll(async () => {
  await t?.cleanup();
});

async function configEvents() {
  return (await searchAudit(t.db, { kind: 'config', limit: 100 })).events;
}

test('export writes references, never passwords, and validates against its own schema', async () => {
  const file = await exportInterlockFile(t.db);
  const text = renderInterlockFile(file);
  expect(text).not.toContain('pw-sales');
  expect(text).not.toContain('wpw');
  expect(file.sources!.find((s) => s.id === 'hr')!.settings).toMatchObject({ reader: { user: 'reader', password_env: 'HR_READER_PASSWORD' }, writer: { user: 'w', password_env: 'HR_WRITER_PASSWORD' } });
  expect(file.identities).toEqual([
    { name: 'agent-a', disabled: false, grants: [{ role: 'analyst', source: 'sales' }] },
    { name: 'agent-b', disabled: false, grants: [{ role: 'hr-reader', source: 'hr' }] },
  ]);
  expect(text).toMatch(/^# InterLock configuration/);
  expect(validateInterlockFileDocument(file)).toBe(file);
  expect(validateInterlockFileDocument(YAML.parse(text))).toEqual(file);
});

test('round trip: export, plan shows no changes; one changed field plans exactly that; apply records it; a second apply changes nothing', async () => {
  const text = renderInterlockFile(await exportInterlockFile(t.db));
  const before = (await configEvents()).length;
  const same = await applyInterlockFile(t.db, { text }, { ...op, plan: true });
  expect(same).toEqual({ applied: false, digest: fileDigest(text), plan: { changes: [], summary: { create: 0, update: 0, delete: 0 } }, scans: [] });
  expect(renderPlan(same.plan)).toBe('No changes: the control plane matches the file.');
  // With none of the referenced variables set (a user who just exported), stored secrets are kept: still no changes.
  const bare = await applyInterlockFile(t.db, { text }, { ...op, plan: true, secrets: { env: () => undefined, file: () => undefined } });
  expect(bare.plan).toEqual({ changes: [], summary: { create: 0, update: 0, delete: 0 } });

  const doc = YAML.parse(text) as InterlockFile;
  (doc.sources!.find((s) => s.id === 'sales')!.settings as { tls: { mode: string } }).tls.mode = 'require';
  const changed = YAML.stringify(doc);
  const plan = await applyInterlockFile(t.db, { text: changed }, { ...op, plan: true });
  expect(plan.plan).toEqual({ changes: [{ action: 'update', kind: 'source', name: 'sales', fields: [{ path: 'settings.tls.mode', before: 'off', after: 'require' }] }], summary: { create: 0, update: 1, delete: 0 } });
  expect(renderPlan(plan.plan)).toBe('~ update source sales\n    ~ settings.tls.mode: "off" → "require"\n\nPlan: 0 to create, 1 to update, 0 to delete.');
  expect((await getSource(t.db, 'sales'))!.settings).toMatchObject({ tls: { mode: 'off' } });
  expect(await configEvents()).toHaveLength(before);

  const applied = await applyInterlockFile(t.db, { text: changed }, op);
  expect(applied.applied).toBe(true);
  expect(applied.plan.summary).toEqual({ create: 0, update: 1, delete: 0 });
  const src = (await getSource(t.db, 'sales'))!;
  expect(src.settings).toMatchObject({ tls: { mode: 'require' } });
  expect(src.type === 'postgres' && src.settings.reader.password).toBe('pw-sales');
  const events = await configEvents();
  // The source's own event and the apply's, in one batch (rtgov finding 7: found by --source sales).
  expect(events).toHaveLength(before + 2);
  expect(events[0]).toMatchObject({ kind: 'config', decision: 'applied', operator: 'ops-anna', details: { digest: fileDigest(changed), prune: false, summary: { create: 0, update: 1, delete: 0 }, sources: ['sales'], changes: ['update source sales: settings.tls.mode'] } });
  expect(events[1]).toMatchObject({ kind: 'config', decision: 'source_updated', operator: 'ops-anna', sourceId: 'sales', details: { changed: ['settings.tls.mode'], digest: fileDigest(changed) } });
  expect(events[0].details.digest).toMatch(/^sha256:[0-9a-f]{64}$/);

  const again = await applyInterlockFile(t.db, { text: changed }, op);
  expect(again.plan.changes).toEqual([]);
  expect((await applyInterlockFile(t.db, { text: renderInterlockFile(await exportInterlockFile(t.db)) }, { ...op, plan: true })).plan.changes).toEqual([]);
});

test('a changed secret is planned as a change without showing either value', async () => {
  const text = renderInterlockFile(await exportInterlockFile(t.db));
  const plan = await applyInterlockFile(t.db, { text }, { ...op, plan: true, secrets: { env: (n) => (n === 'HR_WRITER_PASSWORD' ? 'rotated' : env[n]), file: () => undefined } });
  expect(plan.plan.changes).toEqual([{ action: 'update', kind: 'source', name: 'hr', fields: [{ path: 'settings.writer.password', before: '***', after: '***' }] }]);
  expect(JSON.stringify(plan)).not.toMatch(/rotated|wpw/);
});

test('--prune removes exactly what the file left out; without --prune nothing is deleted', async () => {
  const doc = YAML.parse(renderInterlockFile(await exportInterlockFile(t.db))) as InterlockFile;
  doc.policies = doc.policies!.filter((p) => p.name !== 'cap');
  doc.identities = doc.identities!.filter((i) => i.name !== 'agent-b');
  doc.roles!.push({ name: 'viewer', statements: [{ effect: 'allow', action: 'read', resource: 'public.view' }] });
  doc.identities!.push({ name: 'agent-c', grants: [{ role: 'viewer', source: 'sales' }] });
  const text = YAML.stringify(doc);

  const noPrune = await applyInterlockFile(t.db, { text }, { ...op, plan: true });
  expect(noPrune.plan.changes.map((c) => `${c.action} ${c.kind} ${c.name}`)).toEqual(['create role viewer', 'create identity agent-c', 'create grant agent-c/viewer/sales']);

  const pruned = await applyInterlockFile(t.db, { text }, { ...op, prune: true });
  expect(pruned.plan.changes.map((c) => `${c.action} ${c.kind} ${c.name}`)).toEqual([
    'delete grant agent-b/hr-reader/hr',
    'create role viewer',
    'create identity agent-c',
    'delete identity agent-b',
    'create grant agent-c/viewer/sales',
    'delete policy cap',
  ]);
  expect((await listPolicies(t.db)).map((p) => p.name)).toEqual(['mask-hr']);
  expect((await listGrants(t.db)).map((g) => `${g.identityName}/${g.roleName}/${g.sourceId}`)).toEqual(['agent-a/analyst/sales', 'agent-c/viewer/sales']);
  expect((await getIdentityByName(t.db, 'agent-b'))!.disabled).toBe(true);
  expect((await listRoles(t.db)).map((r) => r.name)).toEqual(['analyst', 'hr-reader', 'viewer']);
  // Pruned identities stay disabled without grants: pruning again changes nothing.
  expect((await applyInterlockFile(t.db, { text }, { ...op, prune: true, plan: true })).plan.changes).toEqual([]);
});

test('pruning a source with a pending approval is refused unless forced; its audit rows stay', async () => {
  const b = (await getIdentityByName(t.db, 'agent-a'))!;
  const a = await createApproval(t.db, { sourceId: 'hr', identityId: b.id, keyId: null, requestId: 'req_decl', sql: 'DELETE FROM t', params: [], classification: {} });
  const doc = YAML.parse(renderInterlockFile(await exportInterlockFile(t.db))) as InterlockFile;
  doc.sources = doc.sources!.filter((s) => s.id !== 'hr');
  doc.policies = [];
  const text = YAML.stringify(doc);
  const plan = await applyInterlockFile(t.db, { text }, { ...op, prune: true, plan: true });
  expect(plan.plan.changes.find((c) => c.kind === 'source')).toMatchObject({ action: 'delete', name: 'hr', note: '1 pending approval(s): refused unless --force' });
  const refused = applyInterlockFile(t.db, { text }, { ...op, prune: true });
  await expect(refused).rejects.toBeInstanceOf(ConflictError);
  await expect(refused).rejects.toThrow('source "hr" has 1 pending approval(s): approve or reject them first, or apply with --force (they are then rejected)');
  // One transaction: the policy deletion planned before the source was not made either.
  expect((await listPolicies(t.db)).map((p) => p.name)).toEqual(['mask-hr']);
  expect(await getSource(t.db, 'hr')).not.toBeNull();

  const forced = await applyInterlockFile(t.db, { text }, { ...op, prune: true, force: true });
  expect(forced.plan.changes.map((c) => `${c.action} ${c.kind} ${c.name}`)).toEqual(['delete policy mask-hr', 'delete source hr']);
  expect(await getSource(t.db, 'hr')).toBeNull();
  expect(await listPolicies(t.db)).toEqual([]);
  expect((await getApproval(t.db, a.id))!).toMatchObject({ state: 'rejected', decidedBy: 'ops-anna', sourceId: 'hr' });
  const trail = (await searchAudit(t.db, { sourceId: 'hr', limit: 100 })).events.map((e) => [e.kind, e.decision, e.reasonCode, e.operator]);
  expect(trail).toEqual([
    // This apply (details.sources: hr), its removal of hr and the rejection.
    ['config', 'applied', null, 'ops-anna'],
    ['config', 'source_removed', null, 'ops-anna'],
    ['approval', 'rejected', 'source_removed', 'ops-anna'],
    // The previous test's pruning apply, which took agent-b's grant on hr away.
    ['config', 'applied', null, 'ops-anna'],
    ['config', 'grant_revoked', null, 'ops-anna'],
    // The setup's own changes (made without an operator, as the gateway's provisioning is).
    ['config', 'grant_added', null, 'system'],
    ['config', 'source_added', null, 'system'],
  ]);
});

test('inline passwords, unset references, bad grants and schema errors are refused with their paths', async () => {
  const inline = { version: 1, sources: [{ id: 'x', type: 'postgres', name: 'X', settings: { host: 'h', port: 1, database: 'd', reader: { user: 'u', password: 'plain' }, tls: { mode: 'off' } } }] };
  const e1 = await applyInterlockFile(t.db, { document: inline }, op).catch((e: unknown) => e);
  expect(e1).toBeInstanceOf(ValidationError);
  expect((e1 as ValidationError).details).toEqual(['/sources/0/settings/reader/password: inline passwords are not allowed; use password_env (an environment variable) or password_file']);

  const unset = { version: 1, sources: [{ ...inline.sources[0], settings: { ...inline.sources[0].settings, reader: { user: 'u', password_env: 'NOT_SET_ANYWHERE' } } }] };
  await expect(applyInterlockFile(t.db, { document: unset }, op)).rejects.toThrow('/sources/0/settings/reader/password_env: environment variable NOT_SET_ANYWHERE is not set');

  const badGrant = { version: 1, identities: [{ name: 'agent-a', grants: [{ role: 'ghost', source: 'sales' }] }] };
  await expect(applyInterlockFile(t.db, { document: badGrant }, op)).rejects.toThrow('identity agent-a: grant of role ghost on sales: no role "ghost" in the file or the control plane');

  const e4 = await applyInterlockFile(t.db, { document: { version: 2, webhooks: [] } }, op).catch((e: unknown) => e);
  expect((e4 as ValidationError).details).toEqual(['/: unknown key "webhooks" (not allowed here)', '/version: must be 1']);
  await expect(applyInterlockFile(t.db, { text: 'version: 1\nversion: 1\n' }, op)).rejects.toThrow('the interlock file is not valid YAML or JSON');
});

test('claim mappings (issue 26): apply stores them, export writes them back, the exported file plans nothing, a change plans that field, --prune removes one', async () => {
  const okta = { issuer: 'https://example.okta.com/oauth2/default', identity_claim: 'email', unknown_subjects: 'provision' as const, role_grants: [{ claim: 'groups', value: 'sales-analysts', role: 'analyst', source: 'sales' }] };
  const entra = { issuer: 'https://login.microsoftonline.com/tenant/v2.0', role_grants: [{ claim: 'roles', value: 'HR.Read', role: 'analyst', source: 'sales' }] };
  const first = await applyInterlockFile(t.db, { document: { version: 1, claim_mappings: [okta, entra] } }, op);
  expect(first.plan.changes.map((c) => `${c.action} ${c.kind} ${c.name}`)).toEqual([`create claim_mapping ${okta.issuer}`, `create claim_mapping ${entra.issuer}`]);
  const rows = await t.db.pool.query('SELECT issuer, identity_claim, unknown_subjects, role_grants FROM claim_mappings ORDER BY issuer');
  expect(rows.rows).toEqual([
    { issuer: okta.issuer, identity_claim: 'email', unknown_subjects: 'provision', role_grants: okta.role_grants },
    { issuer: entra.issuer, identity_claim: null, unknown_subjects: null, role_grants: entra.role_grants },
  ]);
  // details.sources: the sources the mappings' role_grants name (found by audit search --source sales).
  expect((await configEvents())[0].details).toMatchObject({ sources: ['sales'], changes: [`create claim_mapping ${okta.issuer}: identity_claim, issuer, role_grants, unknown_subjects`, `create claim_mapping ${entra.issuer}: issuer, role_grants`] });

  // Export writes them (ordered by issuer, absent fields left out); the YAML text applies with no changes.
  const file = await exportInterlockFile(t.db);
  expect(file.claim_mappings).toEqual([okta, entra]);
  const text = renderInterlockFile(file);
  expect((await applyInterlockFile(t.db, { text }, { ...op, plan: true })).plan.changes).toEqual([]);

  // One changed value plans exactly that field, and apply makes it.
  const changed = text.replace('value: HR.Read', 'value: HR.ReadAll');
  const plan = (await applyInterlockFile(t.db, { text: changed }, { ...op, plan: true })).plan;
  expect(plan.changes).toEqual([{ action: 'update', kind: 'claim_mapping', name: entra.issuer, fields: [{ path: 'role_grants', before: entra.role_grants, after: [{ ...entra.role_grants[0], value: 'HR.ReadAll' }] }] }]);
  await applyInterlockFile(t.db, { text: changed }, op);
  expect((await exportInterlockFile(t.db)).claim_mappings![1].role_grants).toEqual([{ ...entra.role_grants[0], value: 'HR.ReadAll' }]);

  // Without --prune a mapping the file leaves out stays; with --prune it is deleted.
  expect((await applyInterlockFile(t.db, { document: { version: 1, claim_mappings: [okta] } }, op)).plan.changes).toEqual([]);
  const pruned = await applyInterlockFile(t.db, { document: { version: 1, claim_mappings: [okta] } }, { ...op, prune: true });
  expect(pruned.plan.changes.map((c) => `${c.action} ${c.kind} ${c.name}`)).toEqual([`delete claim_mapping ${entra.issuer}`]);
  expect((await exportInterlockFile(t.db)).claim_mappings).toEqual([okta]);

  // A rule naming an unknown role is refused and changes nothing.
  await expect(applyInterlockFile(t.db, { document: { version: 1, claim_mappings: [{ ...okta, role_grants: [{ ...okta.role_grants[0], role: 'ghost' }] }] } }, op)).rejects.toThrow(
    `claim mapping ${okta.issuer}: rule groups=sales-analysts → role ghost on sales: no role "ghost" in the file or the control plane`,
  );
  expect((await exportInterlockFile(t.db)).claim_mappings).toEqual([okta]);
  await applyInterlockFile(t.db, { document: { version: 1, claim_mappings: [] } }, { ...op, prune: true });
});

test('an identity created, changed and pruned by apply records the events the identity commands record, found by audit search --identity', async () => {
  const events = async (identityId: string) => (await searchAudit(t.db, { identityId, kind: 'config', limit: 100 })).events.map((e) => [e.decision, e.operator, e.details]).reverse();
  await applyInterlockFile(t.db, { document: { version: 1, identities: [{ name: 'agent-z', attributes: { region: 'eu', tier: 2 } }] } }, op);
  const z = (await getIdentityByName(t.db, 'agent-z'))!;
  const digestOf = async () => ((await configEvents())[0].details as { digest: string }).digest;
  const d1 = await digestOf();
  expect(await events(z.id)).toEqual([
    ['identity_created', 'ops-anna', { identityId: z.id, identity: 'agent-z', digest: d1 }],
    ['identity_attributes_changed', 'ops-anna', { identityId: z.id, identity: 'agent-z', set: ['region', 'tier'], removed: [], digest: d1 }],
  ]);

  // A changed value and a removed attribute, then disabled: names only, never values.
  await applyInterlockFile(t.db, { document: { version: 1, identities: [{ name: 'agent-z', attributes: { region: 'us' } }] } }, op);
  const d2 = await digestOf();
  await applyInterlockFile(t.db, { document: { version: 1, identities: [{ name: 'agent-z', disabled: true, attributes: { region: 'us' } }] } }, op);
  const d3 = await digestOf();
  // Applying the same file again changes and records nothing.
  await applyInterlockFile(t.db, { document: { version: 1, identities: [{ name: 'agent-z', disabled: true, attributes: { region: 'us' } }] } }, op);
  await applyInterlockFile(t.db, { document: { version: 1, identities: [{ name: 'agent-z', attributes: { region: 'us' } }] } }, op);
  const d4 = await digestOf();
  expect((await events(z.id)).slice(2)).toEqual([
    ['identity_attributes_changed', 'ops-anna', { identityId: z.id, identity: 'agent-z', set: ['region'], removed: ['tier'], digest: d2 }],
    ['identity_disabled', 'ops-anna', { identityId: z.id, identity: 'agent-z', digest: d3 }],
    ['identity_enabled', 'ops-anna', { identityId: z.id, identity: 'agent-z', digest: d4 }],
  ]);

  // --prune of a file without it disables it (kept for the trail's sake): identity_disabled.
  const keep = (await exportInterlockFile(t.db)).identities!.filter((i) => i.name !== 'agent-z');
  await applyInterlockFile(t.db, { document: { version: 1, identities: keep } }, { ...op, prune: true });
  const last = await events(z.id);
  expect(last.slice(5)).toEqual([['identity_disabled', 'ops-anna', { identityId: z.id, identity: 'agent-z', digest: await digestOf() }]]);
  expect((await getIdentityByName(t.db, 'agent-z'))!.disabled).toBe(true);
});
