/**
 * Governance changes through the admin API (/admin/v1) record one kind-config audit event each, in
 * the operator token's name (issue hgov item 1): identities, attributes, keys, sources, roles,
 * grants and policies; a failed or idempotent change records nothing; no key secret is stored.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { createOperatorToken } from '../../../src/admin/tokens';

jest.setTimeout(180_000);

let env: GovernedEnv;
let base: string;
let token: string;
let dir: string;

beforeAll(async () => {
  env = await startGovernedEnv();
  base = env.url.replace(/\/mcp$/, '');
  token = (await createOperatorToken(env.db, 'ops-dora')).secret;
  dir = mkdtempSync(join(tmpdir(), 'il-admin-gov-'));
});
afterAll(async () => {
  await env?.close();
  rmSync(dir, { recursive: true, force: true });
});

async function admin(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const r = await fetch(`${base}/admin/v1${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
}

/** Runs one admin call, checks its status, and returns the config events it recorded. */
async function events(method: string, path: string, body: unknown, status: number): Promise<Array<{ decision: string; operator: string; source_id: string | null; details: Record<string, unknown> }>> {
  const before = (await env.db.pool.query<{ id: string }>('SELECT coalesce(max(id), 0)::text AS id FROM audit_events')).rows[0].id;
  expect((await admin(method, path, body)).status).toBe(status);
  const r = await env.db.pool.query("SELECT decision, operator, source_id, details FROM audit_events WHERE kind = 'config' AND id > $1 ORDER BY id", [before]);
  return r.rows;
}

test('every governance change through /admin/v1 is recorded in the token\'s operator\'s name; no-ops and failures are not', async () => {
  const op = 'ops-dora';
  const created = await events('POST', '/identities', { name: 'api-agent' }, 201);
  const id = (await env.db.pool.query<{ id: string }>("SELECT id FROM identities WHERE name = 'api-agent'")).rows[0].id;
  const who = { identityId: id, identity: 'api-agent' };
  expect(created).toEqual([{ decision: 'identity_created', operator: op, source_id: null, details: who }]);
  expect(await events('POST', '/identities', { name: 'api-agent' }, 409)).toEqual([]);
  expect(await events('PATCH', '/identities/api-agent/attributes', { attributes: { team: 'payments-team-x' } }, 200)).toEqual([
    { decision: 'identity_attributes_changed', operator: op, source_id: null, details: { ...who, set: ['team'], removed: [] } },
  ]);
  expect(await events('POST', '/identities/api-agent/disable', {}, 200)).toEqual([{ decision: 'identity_disabled', operator: op, source_id: null, details: who }]);
  expect(await events('POST', '/identities/api-agent/enable', {}, 200)).toEqual([{ decision: 'identity_enabled', operator: op, source_id: null, details: who }]);

  const before = (await env.db.pool.query<{ id: string }>('SELECT coalesce(max(id), 0)::text AS id FROM audit_events')).rows[0].id;
  const key = await admin('POST', '/keys', { identity: 'api-agent' });
  expect(key.status).toBe(201);
  const keyEvents = await env.db.pool.query("SELECT decision, operator, details FROM audit_events WHERE kind = 'config' AND id > $1 ORDER BY id", [before]);
  expect(keyEvents.rows).toEqual([{ decision: 'key_created', operator: op, details: { keyId: key.json.keyId, ...who, expiresAt: null } }]);
  expect(await events('POST', `/keys/${key.json.keyId}/revoke`, {}, 200)).toEqual([{ decision: 'key_revoked', operator: op, source_id: null, details: { keyId: key.json.keyId, identityId: id } }]);
  expect(await events('POST', `/keys/${key.json.keyId}/revoke`, {}, 200)).toEqual([]);

  expect(await events('POST', '/sources?scan=false', { id: 'notes', type: 'documents', name: 'Notes', settings: { path: dir } }, 201)).toEqual([
    { decision: 'source_added', operator: op, source_id: 'notes', details: { type: 'documents', name: 'Notes', enabled: true } },
  ]);
  expect(await events('POST', '/sources/notes/disable', {}, 200)).toEqual([{ decision: 'source_disabled', operator: op, source_id: 'notes', details: {} }]);
  expect(await events('POST', '/sources/notes/enable', {}, 200)).toEqual([{ decision: 'source_enabled', operator: op, source_id: 'notes', details: {} }]);

  const role = { statements: [{ effect: 'allow', action: 'read', resource: '*' }] };
  expect(await events('PUT', '/roles/notes-reader', role, 201)).toEqual([{ decision: 'role_created', operator: op, source_id: null, details: { role: 'notes-reader' } }]);
  expect(await events('PUT', '/roles/notes-reader', role, 200)).toEqual([]);
  const grant = { identity: 'api-agent', role: 'notes-reader', source: 'notes' };
  expect(await events('POST', '/grants', grant, 201)).toEqual([{ decision: 'grant_added', operator: op, source_id: 'notes', details: { ...who, role: 'notes-reader' } }]);
  expect(await events('POST', '/grants', grant, 200)).toEqual([]);
  expect(await events('POST', '/grants', { ...grant, role: 'ghost' }, 404)).toEqual([]);
  expect(await events('DELETE', '/grants/api-agent/notes-reader/notes', undefined, 200)).toEqual([{ decision: 'grant_revoked', operator: op, source_id: 'notes', details: { ...who, role: 'notes-reader' } }]);

  expect(await events('POST', '/policies', { name: 'api-cap', rule: { type: 'max_rows', max_rows: 5 } }, 201)).toEqual([{ decision: 'policy_added', operator: op, source_id: null, details: { policy: 'api-cap' } }]);
  expect(await events('POST', '/policies?replace=true', { name: 'api-cap', rule: { type: 'max_rows', max_rows: 6 } }, 201)).toEqual([{ decision: 'policy_updated', operator: op, source_id: null, details: { policy: 'api-cap' } }]);
  expect(await events('DELETE', '/policies/api-cap', undefined, 200)).toEqual([{ decision: 'policy_removed', operator: op, source_id: null, details: { policy: 'api-cap' } }]);
  expect(await events('DELETE', '/policies/api-cap', undefined, 404)).toEqual([]);

  const all = (await env.db.pool.query<{ t: string }>("SELECT string_agg(row_to_json(a)::text, E'\\n') AS t FROM audit_events a")).rows[0].t;
  for (const secret of [key.json.secret, key.json.prefix, token, 'payments-team-x']) expect(all).not.toContain(secret);
});
