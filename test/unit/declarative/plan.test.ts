/**
 * The pure parts of declarative configuration (issue 16): computePlan's ordering, section scoping,
 * pruning and grant checks; renderPlan; the merge patch and changed-path helpers of source update.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { computePlan, renderPlan } from '../../../src/declarative/plan';
import { desiredStateOf, validateInterlockFileDocument } from '../../../src/declarative/schema';
import { mergeClaimMapping } from '../../../src/control/claim-mappings';
import { ValidationError } from '../../../src/control/errors';
import { grantKey, type ConfigState } from '../../../src/declarative/types';
import { canonicalJson, changedPaths, mergePatch } from '../../../src/control/sources';
import type { InterlockFile } from '../../../src/declarative/schema';

const noSecrets = { env: (n: string) => (n === 'PW' ? 'secret' : undefined), file: () => undefined };

function current(): ConfigState {
  const grants = [
    { identity: 'a', role: 'r1', source: 's1' },
    { identity: 'b', role: 'r1', source: 's1' },
  ];
  return {
    sources: new Map([['s1', { id: 's1', type: 'postgres', name: 'S1', description: '', enabled: true, settings: { host: 'h', port: 5432, database: 'd', reader: { user: 'u', password: 'secret' }, tls: { mode: 'off' } } }]]),
    roles: new Map([['r1', { name: 'r1', description: '', audiences: [], statements: [{ effect: 'allow', action: 'read', resource: '*' }] }]]),
    identities: new Map([
      ['a', { name: 'a', disabled: false }],
      ['b', { name: 'b', disabled: false }],
    ]),
    grants: new Map(grants.map((g) => [grantKey(g), g])),
    policies: new Map([['p1', { name: 'p1', description: '', enabled: true, rule: { type: 'max_rows', max_rows: 5 } }]]),
    claimMappings: new Map([['https://idp.example.com', { issuer: 'https://idp.example.com', unknown_subjects: 'provision', role_grants: [{ claim: 'groups', value: 'sales', role: 'r1', source: 's1' }] }]]),
  } as ConfigState;
}

const file = (f: Omit<InterlockFile, 'version'>): InterlockFile => ({ version: 1, ...f });
const src = { id: 's1', type: 'postgres' as const, name: 'S1', settings: { host: 'h', port: 5432, database: 'd', reader: { user: 'u', password_env: 'PW' }, tls: { mode: 'off' } } };

test('a file with only some sections leaves the others alone, even with prune', () => {
  const plan = computePlan(current(), desiredStateOf(file({ sources: [src] }), noSecrets), { prune: true });
  expect(plan).toEqual({ changes: [], summary: { create: 0, update: 0, delete: 0 } });
});

test('a listed identity holds exactly its listed grants; unlisted identities keep theirs without prune', () => {
  const plan = computePlan(current(), desiredStateOf(file({ identities: [{ name: 'a', grants: [] }] }), noSecrets));
  expect(plan.changes).toEqual([{ action: 'delete', kind: 'grant', name: 'a/r1/s1', fields: [] }]);
});

test('prune: an unlisted identity is disabled and loses its grants; deleting a role deletes its grants first', () => {
  const plan = computePlan(current(), desiredStateOf(file({ roles: [], identities: [{ name: 'a' }] }), noSecrets), { prune: true });
  expect(plan.changes.map((c) => `${c.action} ${c.kind} ${c.name}`)).toEqual(['delete grant a/r1/s1', 'delete grant b/r1/s1', 'delete identity b', 'delete role r1']);
  expect(plan.changes[2]).toMatchObject({ fields: [{ path: 'disabled', before: false, after: true }] });
  expect(renderPlan(plan)).toContain('- delete identity b (disabled and its grants revoked; kept because keys, approvals and the audit trail refer to it)\n    ~ disabled: false → true');
});

test('a create lists every field; secrets and CA bundles are never shown', () => {
  const plan = computePlan(current(), desiredStateOf(file({ sources: [src, { ...src, id: 's2', settings: { ...src.settings, tls: { mode: 'verify-full', ca: 'PEM' } } }] }), noSecrets));
  expect(plan.changes).toEqual([
    {
      action: 'create',
      kind: 'source',
      name: 's2',
      fields: [
        { path: 'description', after: '' },
        { path: 'enabled', after: true },
        { path: 'id', after: 's2' },
        { path: 'name', after: 'S1' },
        { path: 'settings.database', after: 'd' },
        { path: 'settings.host', after: 'h' },
        { path: 'settings.port', after: 5432 },
        { path: 'settings.reader.password', after: '***' },
        { path: 'settings.reader.user', after: 'u' },
        { path: 'settings.tls.ca', after: '<PEM, 3 characters>' },
        { path: 'settings.tls.mode', after: 'verify-full' },
        { path: 'type', after: 'postgres' },
      ],
    },
  ]);
});

test('a grant naming a role that neither the file nor the control plane has is refused', () => {
  expect(() => computePlan(current(), desiredStateOf(file({ identities: [{ name: 'c', grants: [{ role: 'r9', source: 's1' }] }] }), noSecrets))).toThrow('no role "r9"');
  // A role the same prune deletes does not count.
  expect(() => computePlan(current(), desiredStateOf(file({ roles: [], identities: [{ name: 'a', grants: [{ role: 'r1', source: 's1' }] }] }), noSecrets), { prune: true })).toThrow('no role "r1"');
});

test('mergePatch merges objects, null removes, anything else replaces; changedPaths ignores member order', () => {
  const base = { a: 1, s: { tls: { mode: 'verify-full', ca: 'x' }, writer: { user: 'w' } } };
  expect(mergePatch(base, { s: { tls: { mode: 'off' }, writer: null } })).toEqual({ a: 1, s: { tls: { mode: 'off', ca: 'x' } } });
  expect(base.s.writer).toEqual({ user: 'w' });
  expect(changedPaths({ a: [{ x: 1, y: 2 }] }, { a: [{ y: 2, x: 1 }] })).toEqual([]);
  expect(changedPaths({ a: 1, b: { c: 2 } }, { a: 1, b: { c: 3, d: 4 } })).toEqual(['b.c', 'b.d']);
  expect(canonicalJson({ b: 1, a: [{ d: 1, c: undefined }] })).toBe('{"a":[{"d":1}],"b":1}');
});

test('password_file is read without its trailing newline; a missing file is named', () => {
  const dir = mkdtempSync(join(tmpdir(), 'il-pwfile-'));
  writeFileSync(`${dir}/pw`, 'from-file\n');
  const withFile = { ...src, settings: { ...src.settings, reader: { user: 'u', password_file: `${dir}/pw` } } };
  const state = desiredStateOf(file({ sources: [withFile] }));
  expect(state.sources.get('s1')!.settings).toMatchObject({ reader: { user: 'u', password: 'from-file' } });
  const missing = { ...src, settings: { ...src.settings, reader: { user: 'u', password_file: `${dir}/none` } } };
  expect(() => desiredStateOf(file({ sources: [missing] }))).toThrow(`/sources/0/settings/reader/password_file: cannot read ${dir}/none`);
});

describe('claim mappings (issue 26)', () => {
  const IDP = 'https://idp.example.com';
  const rule = { claim: 'groups', value: 'sales', role: 'r1', source: 's1' };

  test('the same mapping plans nothing; a changed field plans exactly that field', () => {
    expect(computePlan(current(), desiredStateOf(file({ claim_mappings: [{ issuer: IDP, unknown_subjects: 'provision', role_grants: [rule] }] }), noSecrets)).changes).toEqual([]);
    const plan = computePlan(current(), desiredStateOf(file({ claim_mappings: [{ issuer: IDP, identity_claim: 'email', unknown_subjects: 'provision', role_grants: [rule] }] }), noSecrets));
    expect(plan.changes).toEqual([{ action: 'update', kind: 'claim_mapping', name: IDP, fields: [{ path: 'identity_claim', after: 'email' }] }]);
    expect(renderPlan(plan)).toBe(`~ update claim_mapping ${IDP}\n    + identity_claim: "email"\n\nPlan: 0 to create, 1 to update, 0 to delete.`);
  });

  test('a new issuer is created with its fields; --prune deletes an unlisted one, a plain apply keeps it', () => {
    const other = { issuer: 'https://login.example.org/tenant', role_grants: [] };
    const plain = computePlan(current(), desiredStateOf(file({ claim_mappings: [other] }), noSecrets));
    expect(plain.changes).toEqual([{ action: 'create', kind: 'claim_mapping', name: other.issuer, fields: [{ path: 'issuer', after: other.issuer }, { path: 'role_grants', after: [] }] }]);
    const pruned = computePlan(current(), desiredStateOf(file({ claim_mappings: [other] }), noSecrets), { prune: true });
    expect(pruned.changes.map((c) => `${c.action} ${c.kind} ${c.name}`)).toEqual([`create claim_mapping ${other.issuer}`, `delete claim_mapping ${IDP}`]);
  });

  test('a rule naming a role or source that will not exist is refused; so is a rule listed twice or an issuer listed twice', () => {
    expect(() => computePlan(current(), desiredStateOf(file({ claim_mappings: [{ issuer: IDP, role_grants: [{ ...rule, role: 'nope' }] }] }), noSecrets))).toThrow(
      new ValidationError(`claim mapping ${IDP}: rule groups=sales → role nope on s1: no role "nope" in the file or the control plane`),
    );
    expect(() => computePlan(current(), desiredStateOf(file({ claim_mappings: [{ issuer: IDP, role_grants: [{ ...rule, source: 'gone' }] }] }), noSecrets))).toThrow(/no source "gone"/);
    // Pruning the role a kept rule names is refused too (the rule would grant nothing).
    expect(() => computePlan(current(), desiredStateOf(file({ roles: [], claim_mappings: [{ issuer: IDP, role_grants: [rule] }] }), noSecrets), { prune: true })).toThrow(/no role "r1"/);
    expect(() => desiredStateOf(file({ claim_mappings: [{ issuer: IDP, role_grants: [rule, rule] }] }), noSecrets)).toThrow(/lists the rule groups=sales → role r1 on s1 twice/);
    expect(() => desiredStateOf(file({ claim_mappings: [{ issuer: IDP }, { issuer: IDP }] }), noSecrets)).toThrow(`claim_mappings: "${IDP}" appears twice in the file`);
  });

  test('the schema refuses a non-URL issuer, an unknown unknown_subjects and extra members', () => {
    expect(() => validateInterlockFileDocument({ version: 1, claim_mappings: [{ issuer: 'idp.example.com' }] })).toThrow(ValidationError);
    expect(() => validateInterlockFileDocument({ version: 1, claim_mappings: [{ issuer: IDP, unknown_subjects: 'adopt' }] })).toThrow(ValidationError);
    expect(() => validateInterlockFileDocument({ version: 1, claim_mappings: [{ issuer: IDP, role_grants: [{ ...rule, extra: 1 }] }] })).toThrow(ValidationError);
  });
});

describe('mergeClaimMapping (issue 26)', () => {
  const cfg = { issuer: 'https://idp.example.com', identity_claim: 'sub', unknown_subjects: 'refuse' as const, role_grants: [{ claim: 'groups', value: 'a', role: 'r', source: 's' }] };

  test('no stored mapping: the configuration as is', () => {
    expect(mergeClaimMapping(cfg, undefined)).toBe(cfg);
  });

  test('fields the mapping sets replace the configuration; role_grants of both apply, each once', () => {
    const merged = mergeClaimMapping(cfg, { issuer: cfg.issuer, unknown_subjects: 'provision', role_grants: [cfg.role_grants[0], { claim: 'groups', value: 'b', role: 'r2', source: 's' }] });
    expect(merged).toEqual({ ...cfg, unknown_subjects: 'provision', identity_claim: 'sub', role_grants: [cfg.role_grants[0], { claim: 'groups', value: 'b', role: 'r2', source: 's' }] });
  });
});
