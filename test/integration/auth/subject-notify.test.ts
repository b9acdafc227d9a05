/**
 * identity_subjects changes are notified (task hfix item 1, migration
 * 20261212100000000_identity-subjects-notify_hfix): a subject unlinked, linked or re-pointed by SQL of
 * its own (no grants statement, so no 'grants' notification) changes which claim grants count
 * (interlock_effective_grants), and a gateway's store with a long cache lifetime sees it at the
 * next read, on the 'identity_subjects' notification; a sign-in's own bookkeeping (last_used_at,
 * claim_attributes, claims_seen_at) sends none.
 */
import { randomBytes } from 'node:crypto';
import { freshControlDb, type TestControlDb } from '../control/control-db';
import { CONTROL_CHANNEL, listenControlChanges, type ControlListener } from '../../../src/control/db';
import { DbGovernanceStore } from '../../../src/governance/db-store';
import { addSource } from '../../../src/control/sources';
import { upsertRole } from '../../../src/control/roles';
import { createIdentity } from '../../../src/control/identities';

jest.setTimeout(60_000);

const IDP = 'https://idp.subject-notify.example';
let t: TestControlDb;
let store: DbGovernanceStore;
let listener: ControlListener;
const seen: string[] = [];

beforeAll(async () => {
  t = await freshControlDb('subj_notify');
  await addSource(t.db, { id: 'docs', type: 'documents', name: 'docs', settings: { path: '/tmp' } });
  await upsertRole(t.db, { name: 'reader', statements: [{ effect: 'allow', action: 'read', resource: '*' }] });
  await t.db.pool.query("INSERT INTO configured_claim_grants (issuer, role_name, source_id) VALUES ($1, 'reader', 'docs')", [IDP]);
  // As a gateway's store: cached for ten minutes, dropped only by a notification.
  store = new DbGovernanceStore(t.db, { ttlMs: 600_000 });
  listener = await listenControlChanges(t.db, (table) => {
    seen.push(table);
    store.invalidate(table);
  });
});

afterAll(async () => {
  await listener?.close();
  await t?.cleanup();
});

/** Waits (at most 10 s) until `table`'s notification has arrived and the store has dropped what it names. */
async function notified(table: string): Promise<void> {
  for (let i = 0; i < 200 && !seen.includes(table); i++) await new Promise((r) => setTimeout(r, 50));
  expect(seen).toContain(table);
}

/** Waits until every notification of changes committed so far has arrived (a marker sent after them), then forgets them. */
async function settle(): Promise<void> {
  const marker = `settle-${randomBytes(4).toString('hex')}`;
  await t.db.pool.query('SELECT pg_notify($1, $2)', [CONTROL_CHANNEL, marker]);
  await notified(marker);
  seen.length = 0;
}

/** The (source, role) pairs the cached store grants `id`. */
async function granted(id: string): Promise<string[]> {
  return (await store.grantsForIdentity(id)).map((g) => `${g.sourceId}:${g.role.name}`);
}

test('a subject unlinked, linked again and re-pointed by SQL: the cached grants follow at once; sign-in bookkeeping notifies nothing', async () => {
  const other = await createIdentity(t.db, 'subj-b');
  const id = `idn_${randomBytes(10).toString('hex')}`;
  await t.db.pool.query('SELECT interlock_provision_token_identity($1, $2, $3, $4)', [id, 'subj-a', IDP, 'sub-1']);
  await t.db.pool.query("SELECT interlock_sync_claim_grants($1, 'sub-1', ARRAY['reader'], ARRAY['docs'])", [IDP]);
  expect(await granted(id)).toEqual(['docs:reader']);

  // Unlinked by SQL of its own: the claim grant row stays but counts no more.
  await settle();
  await t.db.pool.query('DELETE FROM identity_subjects WHERE issuer = $1 AND subject = $2', [IDP, 'sub-1']);
  await notified('identity_subjects');
  expect(await granted(id)).toEqual([]);

  // Linked again: it counts again.
  await settle();
  await t.db.pool.query('INSERT INTO identity_subjects (issuer, subject, identity_id) VALUES ($1, $2, $3)', [IDP, 'sub-1', id]);
  await notified('identity_subjects');
  expect(await granted(id)).toEqual(['docs:reader']);

  // The sign-in's bookkeeping (as src/auth/token-identities.ts writes it) sends no notification: a
  // marker sent afterwards arrives with nothing before it.
  await settle();
  await t.db.pool.query("UPDATE identity_subjects SET last_used_at = now(), claim_attributes = '{}', claims_seen_at = now() WHERE issuer = $1 AND subject = $2", [IDP, 'sub-1']);
  await t.db.pool.query('UPDATE identity_subjects SET last_used_at = now() WHERE issuer = $1 AND subject = $2', [IDP, 'sub-1']);
  await t.db.pool.query('SELECT pg_notify($1, $2)', [CONTROL_CHANNEL, 'marker']);
  await notified('marker');
  expect(seen).toEqual(['marker']);

  // Re-pointed to another identity: the first loses the claim grant at once.
  expect(await granted(id)).toEqual(['docs:reader']);
  await settle();
  await t.db.pool.query('UPDATE identity_subjects SET identity_id = $1 WHERE issuer = $2 AND subject = $3', [other.id, IDP, 'sub-1']);
  await notified('identity_subjects');
  expect(await granted(id)).toEqual([]);
});
