/**
 * Demo provisioning on this machine's PostgreSQL, with uniquely named database and roles (dropped
 * afterwards): Chinook loaded, least-privilege reader and writer roles, source, identity, role,
 * masking policies, grant and a fresh API key; idempotent.
 */
import { randomBytes } from 'node:crypto';
import { Client } from 'pg';
import { ADMIN_URL } from '../../helpers/pg';
import { freshControlDb, type TestControlDb } from './control-db';
import { provisionDemo, demoFileFor, DEMO_ROLE, type ProvisionedDemo } from '../../../src/demo/provision';
import { applyInterlockFile } from '../../../src/declarative/apply';
import { searchAudit } from '../../../src/audit/writer';
import { DbIdentityResolver } from '../../../src/control/keys';
import { getSource } from '../../../src/control/sources';
import { getRole } from '../../../src/control/roles';
import { grantsForIdentity } from '../../../src/control/grants';
import { listPolicies } from '../../../src/control/policies';
import { loadCatalog } from '../../../src/control/catalog';
import type { PostgresSourceSettings } from '../../../src/control/sources';

const suffix = randomBytes(4).toString('hex');
const DB_NAME = `il_demo_${suffix}`;
const PREFIX = `il_demo_${suffix}`;
let t: TestControlDb;
let first: ProvisionedDemo;
let settings: PostgresSourceSettings;

function urlAs(user: string, password: string, db: string): string {
  const u = new URL(ADMIN_URL);
  u.username = user;
  u.password = password;
  u.pathname = '/' + db;
  return u.toString();
}

async function asRole(user: string, password: string, fn: (c: Client) => Promise<void>): Promise<void> {
  const c = new Client({ connectionString: urlAs(user, password, DB_NAME) });
  await c.connect();
  try {
    await fn(c);
  } finally {
    await c.end();
  }
}

beforeAll(async () => {
  t = await freshControlDb('ctl_demo');
  first = await provisionDemo({ adminUrl: ADMIN_URL, controlDb: t.db, databaseName: DB_NAME, rolePrefix: PREFIX });
  const s = await getSource(t.db, 'chinook');
  settings = s!.settings as PostgresSourceSettings;
}, 120_000);

afterAll(async () => {
  await t.cleanup();
  const admin = new Client({ connectionString: ADMIN_URL });
  await admin.connect();
  try {
    await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [DB_NAME]);
    await admin.query(`DROP DATABASE IF EXISTS "${DB_NAME}"`);
    await admin.query(`DROP ROLE IF EXISTS "${PREFIX}_reader"`);
    await admin.query(`DROP ROLE IF EXISTS "${PREFIX}_writer"`);
  } finally {
    await admin.end();
  }
});

describe('provisionDemo', () => {
  test('control records: source, identity, role, policies, grant, catalog and a working key', async () => {
    expect(first).toEqual({
      apiKey: expect.stringMatching(/^ilk_[A-Za-z0-9_-]{43}$/),
      keyId: expect.stringMatching(/^key_/),
      sourceId: 'chinook',
      identityId: expect.stringMatching(/^idn_/),
      databaseName: DB_NAME,
      readerRole: `${PREFIX}_reader`,
      writerRole: `${PREFIX}_writer`,
    });
    expect(await new DbIdentityResolver(t.db).resolve(first.apiKey)).toEqual({ id: first.identityId, name: 'demo-agent', keyId: first.keyId });
    const source = await getSource(t.db, 'chinook');
    expect(source).toMatchObject({ id: 'chinook', type: 'postgres', enabled: true });
    const u = new URL(ADMIN_URL);
    expect(settings).toEqual({
      host: u.hostname,
      port: Number(u.port || 5432),
      database: DB_NAME,
      reader: { user: `${PREFIX}_reader`, password: expect.stringMatching(/^[A-Za-z0-9_-]{32}$/) },
      writer: { user: `${PREFIX}_writer`, password: expect.stringMatching(/^[A-Za-z0-9_-]{32}$/) },
      tls: { mode: 'off' },
      statement_timeout_ms: 15000,
      lock_timeout_ms: 2000,
      max_rows: 1000,
      pool_size: 5,
    });
    const role = await getRole(t.db, 'demo-analyst');
    expect(role!.statements).toEqual([
      ...['album', 'artist', 'genre', 'media_type', 'track', 'playlist', 'playlist_track', 'customer', 'invoice', 'invoice_line'].map((x) => ({ effect: 'allow', action: 'read', resource: `public.${x}` })),
      { effect: 'allow', action: 'describe', resource: 'public.*' },
      { effect: 'allow', action: 'write', resource: 'public.playlist' },
      { effect: 'allow', action: 'write', resource: 'public.playlist_track' },
    ]);
    expect(role!.statements).toEqual(DEMO_ROLE.statements);
    const pols = await listPolicies(t.db);
    expect(pols.map((p) => [p.name, p.rule, p.applies_to])).toEqual([
      ['demo-mask-contact', { type: 'mask_columns', columns: ['public.customer.email'], method: 'partial' }, { sources: ['chinook'] }],
      ['demo-mask-contact-phone', { type: 'mask_columns', columns: ['public.customer.phone', 'public.customer.fax'], method: 'full' }, { sources: ['chinook'] }],
    ]);
    expect((await grantsForIdentity(t.db, first.identityId)).map((g) => [g.sourceId, g.role.name]).sort()).toEqual([['chinook', 'demo-analyst'], ['handbook', 'handbook-reader']]);
    const catalog = await loadCatalog(t.db, 'chinook');
    expect(catalog!.truncated).toBe(false);
    expect(catalog!.relations.map((r) => `${r.schema}.${r.name}`)).toEqual(
      ['album', 'artist', 'customer', 'employee', 'genre', 'invoice', 'invoice_line', 'media_type', 'playlist', 'playlist_track', 'track'].map((x) => `public.${x}`),
    );
  });

  test('the reader role reads every table and can change nothing', async () => {
    await asRole(settings.reader.user, settings.reader.password!, async (c) => {
      expect((await c.query('SELECT count(*)::int AS n FROM album')).rows[0].n).toBe(347);
      expect((await c.query('SELECT count(*)::int AS n FROM employee')).rows[0].n).toBe(8);
      expect((await c.query('SHOW default_transaction_read_only')).rows[0].default_transaction_read_only).toBe('on');
      await expect(c.query("INSERT INTO playlist (playlist_id, name) VALUES (9999, 'x')")).rejects.toMatchObject({ code: '25006' });
      // Even with the read-only default switched off, it holds no write privilege.
      await c.query('SET default_transaction_read_only = off');
      await expect(c.query("INSERT INTO playlist (playlist_id, name) VALUES (9999, 'x')")).rejects.toMatchObject({ code: '42501' });
      await expect(c.query("UPDATE customer SET email = 'x'")).rejects.toMatchObject({ code: '42501' });
      await expect(c.query('DELETE FROM invoice_line')).rejects.toMatchObject({ code: '42501' });
      await expect(c.query('CREATE TABLE public.sneaky (x int)')).rejects.toMatchObject({ code: '42501' });
      await expect(c.query('CREATE TEMP TABLE sneaky (x int)')).rejects.toMatchObject({ code: '42501' });
    });
  });

  test('the writer role changes playlist and playlist_track only', async () => {
    await asRole(settings.writer!.user, settings.writer!.password!, async (c) => {
      await c.query('BEGIN');
      expect((await c.query("INSERT INTO playlist (playlist_id, name) VALUES (9999, 'test')")).rowCount).toBe(1);
      expect((await c.query('INSERT INTO playlist_track (playlist_id, track_id) VALUES (9999, 1)')).rowCount).toBe(1);
      expect((await c.query("UPDATE playlist SET name = 'renamed' WHERE playlist_id = 9999")).rowCount).toBe(1);
      expect((await c.query('DELETE FROM playlist_track WHERE playlist_id = 9999')).rowCount).toBe(1);
      await c.query('ROLLBACK');
      // The demo copy's playlist ids have a default (identity): the README's example needs no id.
      await c.query('BEGIN');
      expect((await c.query("INSERT INTO playlist (name) VALUES ('Focus') RETURNING playlist_id")).rows[0].playlist_id).toBeGreaterThan(18);
      await c.query('ROLLBACK');
      for (const sql of ['SELECT * FROM customer LIMIT 1', "UPDATE track SET name = 'x' WHERE track_id = 1", 'DELETE FROM invoice', "INSERT INTO artist (artist_id, name) VALUES (9999, 'x')", 'TRUNCATE playlist', 'CREATE TABLE public.sneaky (x int)']) {
        await expect(c.query(sql)).rejects.toMatchObject({ code: '42501' });
      }
    });
  });

  test('other roles cannot connect to the demo database', async () => {
    const admin = new Client({ connectionString: ADMIN_URL });
    await admin.connect();
    try {
      const r = await admin.query<{ ok: boolean }>("SELECT has_database_privilege('public', $1, 'CONNECT') AS ok", [DB_NAME]);
      expect(r.rows[0].ok).toBe(false);
    } finally {
      await admin.end();
    }
  });

  test('idempotent: a second run keeps the data and passwords, adds a new key, keeps the old one', async () => {
    const second = await provisionDemo({ adminUrl: ADMIN_URL, controlDb: t.db, databaseName: DB_NAME, rolePrefix: PREFIX });
    expect(second.apiKey).not.toBe(first.apiKey);
    expect(second.identityId).toBe(first.identityId);
    const again = (await getSource(t.db, 'chinook'))!.settings as PostgresSourceSettings;
    expect(again.reader.password).toBe(settings.reader.password);
    expect(again.writer!.password).toBe(settings.writer!.password);
    const resolver = new DbIdentityResolver(t.db, { cacheTtlMs: 0 });
    expect(await resolver.resolve(first.apiKey)).not.toBeNull();
    expect(await resolver.resolve(second.apiKey)).not.toBeNull();
    expect(await grantsForIdentity(t.db, first.identityId)).toHaveLength(2);
    expect(await listPolicies(t.db)).toHaveLength(2);
    await asRole(settings.reader.user, settings.reader.password!, async (c) => {
      expect((await c.query('SELECT count(*)::int AS n FROM track')).rows[0].n).toBe(3503);
    });
  }, 60_000);

  test('provisioned through the declarative path: the demo file applied as `interlock apply` (audited), and re-planning it shows no change', async () => {
    const events = (await searchAudit(t.db, { kind: 'config', limit: 100 })).events.filter((e) => e.decision === 'applied');
    // The first run created everything; the second found nothing to change.
    expect(events.map((e) => [e.operator, (e.details as { summary: unknown }).summary])).toEqual([
      ['interlock-demo', { create: 0, update: 0, delete: 0 }],
      ['interlock-demo', { create: 9, update: 0, delete: 0 }],
    ]);
    const u = new URL(ADMIN_URL);
    const doc = demoFileFor({ host: u.hostname, port: Number(u.port || 5432), databaseName: DB_NAME, readerRole: `${PREFIX}_reader`, writerRole: `${PREFIX}_writer`, sourceId: 'chinook', identityName: 'demo-agent', handbook: true });
    // Secrets stay references in the file, and the demo never puts the passwords into the process
    // environment; with the variable unset, re-planning keeps the stored passwords: no changes.
    expect(doc.sources![0].settings.reader).toEqual({ user: `${PREFIX}_reader`, password_env: 'CHINOOK_READER_PASSWORD' });
    expect(process.env.CHINOOK_READER_PASSWORD).toBeUndefined();
    expect(settings.reader.password).toEqual(expect.any(String));
    const plan = await applyInterlockFile(t.db, { document: doc }, { operator: 'test', plan: true });
    expect(plan.plan).toEqual({ changes: [], summary: { create: 0, update: 0, delete: 0 } });
  });
});
