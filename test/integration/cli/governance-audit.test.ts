/**
 * Every governance change made with the CLI (direct mode, in-process runCli) records one kind-config
 * audit event in the change's transaction (issue hgov item 1): exact decision, operator (the OS user
 * name), source_id and details per change; a change that changes nothing or fails records nothing;
 * a change whose event cannot be recorded is not made; no key or token secret (nor prefix, nor an
 * attribute's value) is stored in the trail; `audit verify` still passes.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { createTempDatabase, execSql, type TempDatabase } from '../../helpers/pg';
import { openControlDb, type ControlDb } from '../../../src/control/db';
import { runCli } from '../../../src/cli/main';

jest.setTimeout(120_000);

let temp: TempDatabase;
let db: ControlDb;
let dir: string;
const me = userInfo().username;

async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(['--database-url', temp.url, ...args], { out: (t) => (stdout += t.endsWith('\n') ? t : t + '\n'), err: (t) => (stderr += t.endsWith('\n') ? t : t + '\n') });
  return { code, stdout, stderr };
}

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

interface ConfigEvent {
  decision: string;
  operator: string;
  source_id: string | null;
  details: Record<string, unknown>;
}

/** The kind-config events after id `after`, in order. */
async function configEvents(after: string): Promise<ConfigEvent[]> {
  const r = await db.pool.query<ConfigEvent & { action: string }>("SELECT decision, operator, source_id, details, action FROM audit_events WHERE kind = 'config' AND id > $1 ORDER BY id", [after]);
  for (const e of r.rows) expect(e.action).toBe('config');
  return r.rows.map(({ decision, operator, source_id, details }) => ({ decision, operator, source_id, details }));
}

async function lastId(): Promise<string> {
  return (await db.pool.query<{ id: string }>('SELECT coalesce(max(id), 0)::text AS id FROM audit_events')).rows[0].id;
}

/** Runs `fn` and returns the config events it recorded. */
async function recorded(fn: () => Promise<unknown>): Promise<ConfigEvent[]> {
  const before = await lastId();
  await fn();
  return configEvents(before);
}

beforeAll(async () => {
  temp = await createTempDatabase('ctl_govaudit');
  dir = mkdtempSync(join(tmpdir(), 'il-govaudit-'));
  expect((await cli('db', 'migrate')).code).toBe(0);
  db = await openControlDb(temp.url, { migrate: false });
});
afterAll(async () => {
  await db?.close();
  await temp?.drop();
  rmSync(dir, { recursive: true, force: true });
});

test('identities: create, attributes (names only), disable, enable; no-ops and failures record nothing', async () => {
  const created = await recorded(async () => expect((await cli('identity', 'create', 'gov-agent')).code).toBe(0));
  const id = (await db.pool.query<{ id: string }>("SELECT id FROM identities WHERE name = 'gov-agent'")).rows[0].id;
  expect(created).toEqual([{ decision: 'identity_created', operator: me, source_id: null, details: { identityId: id, identity: 'gov-agent' } }]);
  expect(await recorded(async () => expect((await cli('identity', 'create', 'gov-agent')).code).toBe(2))).toEqual([]);
  expect(await recorded(async () => expect((await cli('identity', 'create', 'Bad Name')).code).toBe(2))).toEqual([]);

  const who = { identityId: id, identity: 'gov-agent' };
  expect(await recorded(async () => expect((await cli('identity', 'attributes', 'gov-agent', 'region=emea-west-7', 'level=3')).code).toBe(0))).toEqual([
    { decision: 'identity_attributes_changed', operator: me, source_id: null, details: { ...who, set: ['level', 'region'], removed: [] } },
  ]);
  // The same value again changes nothing; removing one names it.
  expect(await recorded(async () => expect((await cli('identity', 'attributes', 'gov-agent', 'region=emea-west-7')).code).toBe(0))).toEqual([]);
  expect(await recorded(async () => expect((await cli('identity', 'attributes', 'gov-agent', 'level=', 'region=emea-west-7')).code).toBe(0))).toEqual([
    { decision: 'identity_attributes_changed', operator: me, source_id: null, details: { ...who, set: [], removed: ['level'] } },
  ]);
  expect(await recorded(async () => expect((await cli('identity', 'attributes', 'ghost', 'a=1')).code).toBe(3))).toEqual([]);

  expect(await recorded(async () => expect((await cli('identity', 'disable', 'gov-agent')).code).toBe(0))).toEqual([{ decision: 'identity_disabled', operator: me, source_id: null, details: who }]);
  expect(await recorded(async () => expect((await cli('identity', 'disable', 'gov-agent')).code).toBe(0))).toEqual([]);
  expect(await recorded(async () => expect((await cli('identity', 'enable', 'gov-agent')).code).toBe(0))).toEqual([{ decision: 'identity_enabled', operator: me, source_id: null, details: who }]);
  expect(await recorded(async () => expect((await cli('identity', 'enable', 'gov-agent')).code).toBe(0))).toEqual([]);
});

let keySecret = '';
let keyPrefix = '';
let tokenSecret = '';

test('keys: create and revoke (ids only); a second revoke records nothing', async () => {
  const id = (await db.pool.query<{ id: string }>("SELECT id FROM identities WHERE name = 'gov-agent'")).rows[0].id;
  let keyId = '';
  const created = await recorded(async () => {
    const r = await cli('--json', 'key', 'create', 'gov-agent');
    expect(r.code).toBe(0);
    ({ keyId, secret: keySecret, prefix: keyPrefix } = JSON.parse(r.stdout) as { keyId: string; secret: string; prefix: string });
  });
  expect(created).toEqual([{ decision: 'key_created', operator: me, source_id: null, details: { keyId, identityId: id, identity: 'gov-agent', expiresAt: null } }]);
  expect(await recorded(async () => expect((await cli('key', 'create', 'ghost')).code).toBe(3))).toEqual([]);
  expect(await recorded(async () => expect((await cli('key', 'revoke', keyId)).code).toBe(0))).toEqual([{ decision: 'key_revoked', operator: me, source_id: null, details: { keyId, identityId: id } }]);
  expect(await recorded(async () => expect((await cli('key', 'revoke', keyId)).code).toBe(0))).toEqual([]);
  expect(await recorded(async () => expect((await cli('key', 'revoke', 'key_00000000000000000000')).code).toBe(3))).toEqual([]);
});

test('sources: add, disable, enable; the same state again records nothing', async () => {
  const docs = mkdtempSync(join(dir, 'docs-'));
  expect(await recorded(async () => expect((await cli('source', 'add', '--type', 'documents', '--id', 'handbook', '--path', docs)).code).toBe(0))).toEqual([
    { decision: 'source_added', operator: me, source_id: 'handbook', details: { type: 'documents', name: 'handbook', enabled: true } },
  ]);
  expect(await recorded(async () => expect((await cli('source', 'add', '--type', 'documents', '--id', 'handbook', '--path', docs)).code).toBe(2))).toEqual([]);
  expect(await recorded(async () => expect((await cli('source', 'disable', 'handbook')).code).toBe(0))).toEqual([{ decision: 'source_disabled', operator: me, source_id: 'handbook', details: {} }]);
  expect(await recorded(async () => expect((await cli('source', 'disable', 'handbook')).code).toBe(0))).toEqual([]);
  expect(await recorded(async () => expect((await cli('source', 'enable', 'handbook')).code).toBe(0))).toEqual([{ decision: 'source_enabled', operator: me, source_id: 'handbook', details: {} }]);
  expect(await recorded(async () => expect((await cli('source', 'enable', 'ghost')).code).toBe(3))).toEqual([]);
});

test('roles and grants: created, updated, granted, revoked; an unchanged role or a repeated grant records nothing', async () => {
  const role = file('reader.yaml', 'name: reader\nstatements:\n  - { effect: allow, action: read, resource: "*" }\n');
  expect(await recorded(async () => expect((await cli('role', 'create', role)).code).toBe(0))).toEqual([{ decision: 'role_created', operator: me, source_id: null, details: { role: 'reader' } }]);
  expect(await recorded(async () => expect((await cli('role', 'create', role)).code).toBe(0))).toEqual([]);
  const changed = file('reader2.yaml', 'name: reader\ndescription: reads everything\nstatements:\n  - { effect: allow, action: read, resource: "*" }\n');
  expect(await recorded(async () => expect((await cli('role', 'create', changed)).code).toBe(0))).toEqual([{ decision: 'role_updated', operator: me, source_id: null, details: { role: 'reader' } }]);

  const id = (await db.pool.query<{ id: string }>("SELECT id FROM identities WHERE name = 'gov-agent'")).rows[0].id;
  const grant = { identityId: id, identity: 'gov-agent', role: 'reader' };
  expect(await recorded(async () => expect((await cli('grant', 'gov-agent', 'reader', 'handbook')).code).toBe(0))).toEqual([{ decision: 'grant_added', operator: me, source_id: 'handbook', details: grant }]);
  expect(await recorded(async () => expect((await cli('grant', 'gov-agent', 'reader', 'handbook')).stdout).toBe('gov-agent already holds role reader on handbook\n'))).toEqual([]);
  expect(await recorded(async () => expect((await cli('grant', 'gov-agent', 'ghost-role', 'handbook')).code).toBe(3))).toEqual([]);
  expect(await recorded(async () => expect((await cli('revoke', 'gov-agent', 'reader', 'handbook')).code).toBe(0))).toEqual([{ decision: 'grant_revoked', operator: me, source_id: 'handbook', details: grant }]);
  expect(await recorded(async () => expect((await cli('revoke', 'gov-agent', 'reader', 'handbook')).code).toBe(3))).toEqual([]);
});

test('policies: added, conflict (nothing), replaced unchanged (nothing), updated, removed', async () => {
  const p = file('cap.yaml', 'name: cap\nrule: { type: max_rows, max_rows: 10 }\n');
  expect(await recorded(async () => expect((await cli('policy', 'add', p)).code).toBe(0))).toEqual([{ decision: 'policy_added', operator: me, source_id: null, details: { policy: 'cap' } }]);
  expect(await recorded(async () => expect((await cli('policy', 'add', p)).code).toBe(2))).toEqual([]);
  expect(await recorded(async () => expect((await cli('policy', 'add', p, '--replace')).code).toBe(0))).toEqual([]);
  const p2 = file('cap2.yaml', 'name: cap\nrule: { type: max_rows, max_rows: 20 }\n');
  expect(await recorded(async () => expect((await cli('policy', 'add', p2, '--replace')).code).toBe(0))).toEqual([{ decision: 'policy_updated', operator: me, source_id: null, details: { policy: 'cap' } }]);
  expect(await recorded(async () => expect((await cli('policy', 'remove', 'cap')).code).toBe(0))).toEqual([{ decision: 'policy_removed', operator: me, source_id: null, details: { policy: 'cap' } }]);
  expect(await recorded(async () => expect((await cli('policy', 'remove', 'cap')).code).toBe(3))).toEqual([]);
});

test('operator tokens: created and revoked in the OS user\'s name; a second revoke records nothing', async () => {
  let tokenId = '';
  const created = await recorded(async () => {
    const r = await cli('--json', 'operator-token', 'create', 'ops-gov');
    expect(r.code).toBe(0);
    ({ tokenId, secret: tokenSecret } = JSON.parse(r.stdout) as { tokenId: string; secret: string });
  });
  expect(created).toEqual([{ decision: 'operator_token_created', operator: me, source_id: null, details: { tokenId, name: 'ops-gov', expiresAt: null } }]);
  expect(await recorded(async () => expect((await cli('operator-token', 'revoke', tokenId)).code).toBe(0))).toEqual([{ decision: 'operator_token_revoked', operator: me, source_id: null, details: { tokenId, name: 'ops-gov' } }]);
  expect(await recorded(async () => expect((await cli('operator-token', 'revoke', tokenId)).code).toBe(0))).toEqual([]);
});

test('a change whose event cannot be recorded is not made (one transaction)', async () => {
  await execSql(temp.url, 'ALTER FUNCTION interlock_audit_append_v2(text) RENAME TO interlock_audit_append_v2_gone');
  try {
    const r = await cli('identity', 'create', 'never-made');
    expect(r.code).not.toBe(0);
    const grantBefore = await db.pool.query("SELECT 1 FROM roles WHERE name = 'never-role'");
    expect(grantBefore.rowCount).toBe(0);
    expect((await cli('role', 'create', file('never.yaml', 'name: never-role\nstatements:\n  - { effect: allow, action: read, resource: "*" }\n'))).code).not.toBe(0);
    expect((await cli('source', 'disable', 'handbook')).code).not.toBe(0);
  } finally {
    await execSql(temp.url, 'ALTER FUNCTION interlock_audit_append_v2_gone(text) RENAME TO interlock_audit_append_v2');
  }
  expect((await db.pool.query("SELECT 1 FROM identities WHERE name = 'never-made'")).rowCount).toBe(0);
  expect((await db.pool.query("SELECT 1 FROM roles WHERE name = 'never-role'")).rowCount).toBe(0);
  expect((await db.pool.query("SELECT enabled FROM sources WHERE id = 'handbook'")).rows).toEqual([{ enabled: true }]);
});

test('no key or token secret, prefix or attribute value is stored in the trail; audit search shows the events; audit verify passes', async () => {
  expect(keySecret).toMatch(/^ilk_/);
  expect(tokenSecret).toMatch(/^ilo_/);
  const all = (await db.pool.query<{ t: string }>('SELECT coalesce(string_agg(row_to_json(a)::text, E\'\\n\'), \'\') AS t FROM audit_events a')).rows[0].t;
  expect(all).toContain('identity_attributes_changed');
  for (const secret of [keySecret, keyPrefix, tokenSecret, tokenSecret.slice(0, 10), 'emea-west-7']) expect(all).not.toContain(secret);
  const search = JSON.parse((await cli('--json', 'audit', 'search', '--kind', 'config', '--source', 'handbook')).stdout) as { events: Array<{ decision: string; operator: string }> };
  expect(search.events.map((e) => [e.decision, e.operator])).toEqual([
    ['grant_revoked', me],
    ['grant_added', me],
    ['source_enabled', me],
    ['source_disabled', me],
    ['source_added', me],
  ]);
  const verify = await cli('audit', 'verify');
  expect(verify.code).toBe(0);
});
