/**
 * Trial nu40 (a new user's findings), the CLI in process against a temporary control database:
 * 1. removing a source that policies name in `applies_to.sources` is refused, naming them, unless
 *    --force: a policy naming only that source is then removed, one naming others too no longer names
 *    it; `apply --prune` refuses a file that keeps such a policy and, without a policies section,
 *    treats the stored ones as `source remove` does; export → apply round-trips after the removal, and
 *    a source added again under the same id inherits nothing.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import YAML from 'yaml';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTempDatabase, pgServer, type TempDatabase } from '../../helpers/pg';
import { openControlDb, type ControlDb } from '../../../src/control/db';
import { runCli } from '../../../src/cli/main';
import { listPolicies } from '../../../src/control/policies';
import { removeSource } from '../../../src/control/sources';
import { ConflictError } from '../../../src/control/errors';

jest.setTimeout(120_000);

let control: TempDatabase;
let db: ControlDb;
let dir: string;

async function cli(...args: string[]): Promise<{ code: number; out: string[]; err: string[] }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(['--database-url', control.url, ...args], { out: (x) => void out.push(x), err: (x) => void err.push(x) });
  return { code, out, err };
}

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

const addSource = (id: string) =>
  cli('source', 'add', '--id', id, '--host', pgServer().host, '--port', String(pgServer().port), '--database', new URL(control.url).pathname.slice(1), '--reader-user', 'root');

const POLICIES = `- name: only-scratch
  applies_to: { sources: [scratch] }
  rule: { type: max_rows, max_rows: 5 }
- name: both
  applies_to: { sources: [keep, scratch] }
  rule: { type: max_rows, max_rows: 7 }
- name: only-keep
  applies_to: { sources: [keep] }
  rule: { type: max_rows, max_rows: 9 }
- name: everywhere
  rule: { type: require_where }
`;

/** The stored policies as name → applies_to.sources ('*' when every source). */
async function policySources(): Promise<Record<string, string[] | '*'>> {
  return Object.fromEntries((await listPolicies(db)).map((p) => [p.name, p.applies_to?.sources ?? '*']));
}

beforeAll(async () => {
  control = await createTempDatabase('ctl_nu40');
  db = await openControlDb(control.url, { migrate: true });
  dir = mkdtempSync(join(tmpdir(), 'il-nu40-'));
});

afterAll(async () => {
  await db?.close();
  await control?.drop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('item 1: removing a source that policies name', () => {
  beforeEach(async () => {
    for (const id of ['scratch', 'keep']) {
      await removeSource(db, id, { operator: 'test', force: true }).catch(() => undefined);
      expect((await addSource(id)).code).toBe(0);
    }
    for (const n of ['only-scratch', 'both', 'only-keep', 'everywhere']) await cli('policy', 'remove', n);
    expect((await cli('policy', 'add', file('policies.yaml', POLICIES))).code).toBe(0);
  });

  test('source remove is refused naming the policies; --force removes the one naming only it and detaches the other; export then applies with no change', async () => {
    expect(await cli('source', 'remove', 'scratch')).toEqual({
      code: 2,
      out: [],
      err: [
        'error: source "scratch" is named in applies_to.sources by 2 policy(ies): both, only-scratch; change or remove them first, or force the removal (a policy naming only "scratch" is then removed, the others no longer name it)',
        '  both',
        '  only-scratch',
      ],
    });
    expect(await policySources()).toEqual({ 'only-scratch': ['scratch'], both: ['keep', 'scratch'], 'only-keep': ['keep'], everywhere: '*' });

    expect(await cli('source', 'remove', 'scratch', '--force')).toEqual({
      code: 0,
      out: ['removed source scratch; removed policy(ies) naming only it: only-scratch; policy(ies) no longer naming it: both'],
      err: [],
    });
    expect(await policySources()).toEqual({ both: ['keep'], 'only-keep': ['keep'], everywhere: '*' });

    const exported = join(dir, 'export.yaml');
    expect((await cli('export', '-o', exported)).code).toBe(0);
    const plan = await cli('apply', '-f', exported, '--plan');
    expect(plan.code).toBe(0);
    expect(plan.out.join('\n')).toEqual('No changes: the control plane matches the file.');

    // Added again under the same id, the source inherits no policy.
    expect((await addSource('scratch')).code).toBe(0);
    expect(await policySources()).toEqual({ both: ['keep'], 'only-keep': ['keep'], everywhere: '*' });
  });

  test('the admin backend path (removeSource) answers the same refusal as a ConflictError with the policy names as details', async () => {
    const err = await removeSource(db, 'scratch', { operator: 'test' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConflictError);
    expect((err as ConflictError).details).toEqual(['both', 'only-scratch']);
    expect(await removeSource(db, 'scratch', { operator: 'test', force: true })).toEqual({ id: 'scratch', removed: true, rejectedApprovals: [], grantsRemoved: 0, policiesRemoved: ['only-scratch'], policiesDetached: ['both'], claimRulesUntied: [] });
  });

  test('apply --prune: a file keeping a policy on the source it removes is refused (also --plan); without a policies section the stored ones are refused unless --force', async () => {
    const sourcesOnly = file('sources-only.yaml', 'version: 1\nsources: []\n');
    const exported = join(dir, 'all.yaml');
    expect((await cli('export', '-o', exported)).code).toBe(0);
    const doc = YAML.parse(readFileSync(exported, 'utf8')) as { sources: Array<{ id: string }> };
    doc.sources = doc.sources.filter((s) => s.id !== 'scratch');
    const withoutScratch = file('without-scratch.yaml', YAML.stringify(doc));

    for (const extra of [['--plan'], [], ['--force']]) {
      expect(await cli('apply', '-f', withoutScratch, '--prune', ...extra)).toEqual({
        code: 2,
        out: [],
        err: [
          'error: the file keeps policies naming a source it removes: take the source out of their applies_to.sources, or leave the policies out',
          '  policy both: applies_to.sources names source "scratch", which this apply removes',
          '  policy only-scratch: applies_to.sources names source "scratch", which this apply removes',
        ],
      });
    }
    expect(await policySources()).toEqual({ 'only-scratch': ['scratch'], both: ['keep', 'scratch'], 'only-keep': ['keep'], everywhere: '*' });

    // No policies section: the stored policies are noted in the plan, refused without --force.
    const planned = await cli('apply', '-f', sourcesOnly, '--prune', '--plan');
    expect(planned.code).toBe(0);
    expect(planned.out.join('\n')).toContain('delete source scratch (named by policy(ies) both, only-scratch: refused unless --force)');
    const refused = await cli('apply', '-f', sourcesOnly, '--prune');
    expect(refused.code).toBe(2);
    expect(refused.err[0]).toContain('error: source "keep" is named in applies_to.sources by 2 policy(ies): both, only-keep');
    expect((await cli('apply', '-f', sourcesOnly, '--prune', '--force')).code).toBe(0);
    expect(await policySources()).toEqual({ everywhere: '*' });
    const exported2 = join(dir, 'after.yaml');
    expect((await cli('export', '-o', exported2)).code).toBe(0);
    expect((await cli('apply', '-f', exported2, '--plan')).out.join('\n')).toEqual('No changes: the control plane matches the file.');
  });
});

describe('item 4: source show names a reader password only when one is set', () => {
  test('--reader-user without --reader-password-env: no password in show or show --json; with one: "***"', async () => {
    expect((await addSource('nopw')).code).toBe(0);
    const show = await cli('source', 'show', 'nopw', '--json');
    expect(JSON.parse(show.out.join('\n')).settings.reader).toEqual({ user: 'root' });
    expect((await cli('source', 'show', 'nopw')).out.join('\n')).not.toContain('password');
    process.env.IL_NU40_PW = 'sekret';
    try {
      const db2 = new URL(control.url).pathname.slice(1);
      expect((await cli('source', 'add', '--id', 'withpw', '--host', pgServer().host, '--port', String(pgServer().port), '--database', db2, '--reader-user', 'root', '--reader-password-env', 'IL_NU40_PW')).code).toBe(0);
    } finally {
      delete process.env.IL_NU40_PW;
    }
    expect(JSON.parse((await cli('source', 'show', 'withpw', '--json')).out.join('\n')).settings.reader).toEqual({ user: 'root', password: '***' });
    expect((await cli('source', 'show', 'withpw')).out.join('\n')).toContain('password: "***"');
  });
});

describe('item 5: role remove', () => {
  test('refused while granted or named by policies, naming them; --force revokes the grants, removes the policy naming only it, detaches the other; export then applies with no change', async () => {
    expect((await cli('role', 'create', '--allow-unknown-names', file('role.yaml', 'name: reader-x\nstatements:\n  - { effect: allow, action: read, resource: public.thing }\n'))).code).toBe(0);
    expect((await cli('role', 'create', '--allow-unknown-names', file('role2.yaml', 'name: other-x\nstatements:\n  - { effect: allow, action: read, resource: public.thing }\n'))).code).toBe(0);
    if ((await cli('source', 'show', 'keep')).code !== 0) expect((await addSource('keep')).code).toBe(0);
    expect((await cli('identity', 'create', 'alice-nu40')).code).toBe(0);
    expect((await cli('grant', 'alice-nu40', 'reader-x', 'keep')).code).toBe(0);
    const policies = `- name: r-only\n  applies_to: { roles: [reader-x] }\n  rule: { type: max_rows, max_rows: 3 }\n- name: r-and-other\n  applies_to: { roles: [other-x, reader-x] }\n  rule: { type: max_rows, max_rows: 4 }\n`;
    expect((await cli('policy', 'add', file('role-policies.yaml', policies))).code).toBe(0);

    expect(await cli('role', 'remove', 'reader-x')).toEqual({
      code: 2,
      out: [],
      err: ['error: role "reader-x" is granted 1 time(s): revoke the grants first, or force the removal (they are then revoked)', '  alice-nu40 on keep'],
    });
    expect((await cli('revoke', 'alice-nu40', 'reader-x', 'keep')).code).toBe(0);
    expect(await cli('role', 'remove', 'reader-x')).toEqual({
      code: 2,
      out: [],
      err: [
        'error: role "reader-x" is named in applies_to.roles by 2 policy(ies): r-and-other, r-only; change or remove them first, or force the removal (a policy naming only "reader-x" is then removed, the others no longer name it)',
        '  r-and-other',
        '  r-only',
      ],
    });
    expect((await cli('grant', 'alice-nu40', 'reader-x', 'keep')).code).toBe(0);
    expect(await cli('role', 'remove', 'reader-x', '--force')).toEqual({
      code: 0,
      out: ['removed role reader-x; revoked 1 grant(s): alice-nu40 on keep; removed policy(ies) naming only it: r-only; policy(ies) no longer naming it: r-and-other'],
      err: [],
    });
    expect((await cli('role', 'show', 'reader-x')).code).toBe(3);
    expect((await listPolicies(db)).filter((p) => p.name.startsWith('r-')).map((p) => [p.name, p.applies_to?.roles])).toEqual([['r-and-other', ['other-x']]]);
    expect(await cli('role', 'remove', 'reader-x')).toEqual({ code: 3, out: [], err: ['error: role "reader-x" not found (interlock role list shows the roles)'] });
    // A claim rule naming the role: refused even with --force (the rule must change first, as apply requires).
    expect((await cli('role', 'create', '--allow-unknown-names', file('role3.yaml', 'name: claimed-x\nstatements:\n  - { effect: allow, action: read, resource: public.thing }\n'))).code).toBe(0);
    expect((await cli('apply', '-f', file('claims.yaml', 'version: 1\nclaim_mappings:\n  - issuer: https://idp.example\n    role_grants: [{ claim: groups, value: analysts, role: claimed-x, source: keep }]\n'))).code).toBe(0);
    expect(await cli('role', 'remove', 'claimed-x', '--force')).toEqual({
      code: 2,
      out: [],
      err: ['error: role "claimed-x" is named by the claim rules of 1 issuer(s): change them first (claim mappings: interlock apply; configured rules: the gateway configuration\'s auth.issuers)', '  https://idp.example'],
    });
    expect((await cli('apply', '--prune', '-f', file('no-claims.yaml', 'version: 1\nclaim_mappings: []\n'))).code).toBe(0);
    expect((await cli('role', 'remove', 'claimed-x')).out).toEqual(['removed role claimed-x']);
    const exported = join(dir, 'after-role.yaml');
    expect((await cli('export', '-o', exported)).code).toBe(0);
    expect((await cli('apply', '-f', exported, '--plan')).out.join('\n')).toEqual('No changes: the control plane matches the file.');
  });
});
