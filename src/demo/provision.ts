/**
 * Demo provisioning (issue 3, Build 3): Chinook as source `chinook` with a least-privilege reader
 * role and a separate writer role, identity `demo-agent` with role `demo-analyst`, masking policies
 * on customer contact columns, and a fresh API key. Idempotent: every run converges to the same
 * state and only adds a new key (earlier demo keys stay valid until revoked).
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { Logger } from 'pino';
import type { SourceRole } from '../../generated/role-v1';
import type { Policy } from '../../generated/policy-v1';
import { ensureDatabase, type ControlDb } from '../control/db';
import { createApiKey, listApiKeys, revokeApiKey } from '../control/keys';
import { createIdentity, enableIdentity, getIdentityByName } from '../control/identities';
import { upsertRole } from '../control/roles';
import { grantRole } from '../control/grants';
import { addPolicies } from '../control/policies';
import { getSource, putSource, type PostgresSourceSettings } from '../control/sources';
import { scanSource } from '../control/scan';
import { loadChinook } from './chinook';
import { provisionHandbook } from '../discovery/handbook';

/** Chinook tables the demo role may read (schema public). */
export const DEMO_READ_TABLES = ['album', 'artist', 'genre', 'media_type', 'track', 'playlist', 'playlist_track', 'customer', 'invoice', 'invoice_line'] as const;
/** Chinook tables the demo role may write (through approval) and the writer role may change. */
export const DEMO_WRITE_TABLES = ['playlist', 'playlist_track'] as const;

/** temp_file_limit of the demo's reader role: the most temporary-file space one of its statements may use. */
export const DEMO_TEMP_FILE_LIMIT = '256MB';

/** The demo's source role. */
export const DEMO_ROLE: SourceRole = {
  name: 'demo-analyst',
  description: 'Demo: read the Chinook catalogue, customers and invoices (contact details masked); write playlists through approval.',
  statements: [
    ...DEMO_READ_TABLES.map((t) => ({ effect: 'allow' as const, action: 'read' as const, resource: `public.${t}` })),
    { effect: 'allow', action: 'describe', resource: 'public.*' },
    ...DEMO_WRITE_TABLES.map((t) => ({ effect: 'allow' as const, action: 'write' as const, resource: `public.${t}` })),
  ] as SourceRole['statements'],
};

/** The demo's masking policies (one method per rule: partial e-mail, fully masked phone), applied on `sourceId`. */
export function demoPolicies(sourceId: string): Policy[] {
  return [
    {
      name: 'demo-mask-contact',
      description: 'Demo: customer e-mail addresses are partially masked.',
      applies_to: { sources: [sourceId] },
      rule: { type: 'mask_columns', columns: ['public.customer.email'], method: 'partial' },
    },
    {
      name: 'demo-mask-contact-phone',
      description: 'Demo: customer phone and fax numbers are fully masked.',
      applies_to: { sources: [sourceId] },
      rule: { type: 'mask_columns', columns: ['public.customer.phone', 'public.customer.fax'], method: 'full' },
    },
  ];
}

/** Options of provisionDemo. The names default to the demo's; tests pass unique ones. */
export interface ProvisionDemoOptions {
  /** Superuser (or CREATEDB + CREATEROLE) connection URL of the server that will hold the demo database. */
  adminUrl: string;
  controlDb: ControlDb;
  /** Database to create and load Chinook into (default "chinook"). */
  databaseName?: string;
  /** Prefix of the two login roles: <prefix>_reader, <prefix>_writer (default "interlock_chinook"). */
  rolePrefix?: string;
  /** Source id (default "chinook"). */
  sourceId?: string;
  /** Identity name (default "demo-agent"). */
  identityName?: string;
  logger?: Logger;
  /** Also register and index the `handbook` documents source for the identity (default true). */
  handbook?: boolean;
}

/** What provisionDemo set up. `apiKey` is shown once: it is not stored. */
export interface ProvisionedDemo {
  apiKey: string;
  keyId: string;
  sourceId: string;
  identityId: string;
  databaseName: string;
  readerRole: string;
  writerRole: string;
}

function hostAndPort(url: string): { host: string; port: number } {
  const u = new URL(url);
  const host = u.hostname.replace(/^\[(.*)\]$/, '$1') || 'localhost';
  return { host, port: u.port ? Number(u.port) : 5432 };
}

function withDatabase(url: string, db: string): string {
  const u = new URL(url);
  u.pathname = '/' + encodeURIComponent(db);
  return u.toString();
}

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => undefined);
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => undefined);
  }
}

/** Creates (or resets) a login role with only LOGIN and the given password. */
async function ensureLoginRole(c: pg.Client, role: string, password: string): Promise<void> {
  const exists = await c.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [role]);
  const r = c.escapeIdentifier(role);
  if (!exists.rowCount) {
    try {
      await c.query(`CREATE ROLE ${r}`);
    } catch (err) {
      if ((err as { code?: string }).code !== '42710') throw err;
    }
  }
  await c.query(`ALTER ROLE ${r} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT PASSWORD ${c.escapeLiteral(password)}`);
}

/**
 * Gives the demo copy's playlist.playlist_id a default (GENERATED BY DEFAULT AS IDENTITY, starting
 * after the highest id), so the README's `INSERT INTO playlist (name) VALUES ($1)` works. Chinook
 * ships it as a plain NOT NULL integer. Idempotent: a column that already has an identity or a
 * default is left alone.
 */
export async function ensurePlaylistIdDefault(c: pg.Client): Promise<void> {
  await c.query(`DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
             WHERE a.attrelid = 'public.playlist'::regclass AND a.attname = 'playlist_id' AND a.attidentity = '' AND d.adbin IS NULL) THEN
    ALTER TABLE public.playlist ALTER COLUMN playlist_id ADD GENERATED BY DEFAULT AS IDENTITY;
    PERFORM setval(pg_get_serial_sequence('public.playlist', 'playlist_id'), (SELECT coalesce(max(playlist_id), 0) + 1 FROM public.playlist), false);
  END IF;
END $$`);
}

/** What provisionDemoSetup set up (everything but the key). */
export type DemoSetup = Omit<ProvisionedDemo, 'apiKey' | 'keyId'>;

/**
 * Provisions the demo (see the module comment) and returns a NEW API key for the demo identity.
 * Database and roles are created through `adminUrl`; the control records go to `controlDb`.
 * Throws on any database error (the CLI reports it).
 */
export async function provisionDemo(opts: ProvisionDemoOptions): Promise<ProvisionedDemo> {
  const setup = await provisionDemoSetup(opts);
  const key = await createApiKey(opts.controlDb, setup.identityId);
  return { ...setup, apiKey: key.secret, keyId: key.keyId };
}

/** A demo key issued by issueDemoKey: the new secret (shown once) and the earlier keys it revoked. */
export interface IssuedDemoKey {
  apiKey: string;
  keyId: string;
  /** Ids of the identity's earlier active keys, now revoked. */
  revoked: string[];
}

/**
 * Issues the demo identity's key for this start and revokes its earlier active keys, so exactly one
 * demo key works at a time (issue 14, item 9). `interlock demo` calls it only after the gateway is
 * listening, so a start that fails (a busy port) leaves no new key behind.
 */
export async function issueDemoKey(db: ControlDb, identityId: string): Promise<IssuedDemoKey> {
  const earlier = (await listApiKeys(db, { identityId })).filter((k) => k.status === 'active');
  const key = await createApiKey(db, identityId);
  for (const k of earlier) await revokeApiKey(db, k.id);
  return { apiKey: key.secret, keyId: key.keyId, revoked: earlier.map((k) => k.id) };
}

/** Provisions everything of the demo except a key (idempotent; see provisionDemo). */
export async function provisionDemoSetup(opts: ProvisionDemoOptions): Promise<DemoSetup> {
  const databaseName = opts.databaseName ?? 'chinook';
  const prefix = opts.rolePrefix ?? 'interlock_chinook';
  const sourceId = opts.sourceId ?? 'chinook';
  const identityName = opts.identityName ?? 'demo-agent';
  const readerRole = `${prefix}_reader`;
  const writerRole = `${prefix}_writer`;
  const log = opts.logger;

  // 1. The database, with Chinook loaded once.
  await ensureDatabase(opts.adminUrl, databaseName);
  const dbUrl = withDatabase(opts.adminUrl, databaseName);
  const loaded = await withClient(dbUrl, async (c) => (await c.query<{ t: string | null }>("SELECT to_regclass('public.album') AS t")).rows[0].t !== null);
  if (!loaded) {
    log?.info({ component: 'demo', database: databaseName }, 'loading Chinook');
    await loadChinook(dbUrl);
  }
  await withClient(dbUrl, (c) => ensurePlaylistIdDefault(c));

  // 2. Login roles: reuse the stored passwords when the source already names these roles.
  const existing = await getSource(opts.controlDb, sourceId);
  const prev = existing?.type === 'postgres' ? existing.settings : null;
  const readerPassword = (prev?.reader.user === readerRole ? prev.reader.password : undefined) ?? randomBytes(24).toString('base64url');
  const writerPassword = (prev?.writer?.user === writerRole ? prev.writer.password : undefined) ?? randomBytes(24).toString('base64url');
  await withClient(opts.adminUrl, async (c) => {
    await ensureLoginRole(c, readerRole, readerPassword);
    await ensureLoginRole(c, writerRole, writerPassword);
    await c.query(`ALTER ROLE ${c.escapeIdentifier(readerRole)} SET default_transaction_read_only = on`);
    // temp_file_limit has context superuser: the reader cannot raise it; a sort or hash of a huge
    // generated set then fails (SQLSTATE 53400) instead of filling the server's disk (issue 10).
    await c.query(`ALTER ROLE ${c.escapeIdentifier(readerRole)} SET temp_file_limit = ${c.escapeLiteral(DEMO_TEMP_FILE_LIMIT)}`);
    const d = c.escapeIdentifier(databaseName);
    await c.query(`REVOKE ALL ON DATABASE ${d} FROM PUBLIC`);
    await c.query(`GRANT CONNECT ON DATABASE ${d} TO ${c.escapeIdentifier(readerRole)}, ${c.escapeIdentifier(writerRole)}`);
  });
  await withClient(dbUrl, async (c) => {
    const rd = c.escapeIdentifier(readerRole);
    const wr = c.escapeIdentifier(writerRole);
    await c.query('BEGIN');
    await c.query('REVOKE CREATE ON SCHEMA public FROM PUBLIC');
    await c.query(`GRANT USAGE ON SCHEMA public TO ${rd}, ${wr}`);
    // Reset, then grant exactly: reader SELECT on every table; writer DML on the playlist tables only.
    await c.query(`REVOKE ALL ON ALL TABLES IN SCHEMA public FROM ${rd}, ${wr}`);
    await c.query(`REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM ${rd}, ${wr}`);
    await c.query(`GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${rd}`);
    await c.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ${DEMO_WRITE_TABLES.map((t) => `public.${c.escapeIdentifier(t)}`).join(', ')} TO ${wr}`);
    // Sequences behind the writable tables' defaults (identity or serial): an approved INSERT draws from them.
    const seqs = await c.query<{ seq: string }>(
      `SELECT DISTINCT pg_get_serial_sequence(format('public.%I', t), a.attname) AS seq
       FROM unnest($1::text[]) AS t JOIN pg_attribute a ON a.attrelid = format('public.%I', t)::regclass AND a.attnum > 0 AND NOT a.attisdropped
       WHERE pg_get_serial_sequence(format('public.%I', t), a.attname) IS NOT NULL`,
      [[...DEMO_WRITE_TABLES]],
    );
    for (const { seq } of seqs.rows) await c.query(`GRANT USAGE ON SEQUENCE ${seq} TO ${wr}`);
    await c.query('COMMIT');
  });

  // 3. The source, and its catalog as the reader sees it.
  const { host, port } = hostAndPort(opts.adminUrl);
  const settings: PostgresSourceSettings = {
    host,
    port,
    database: databaseName,
    reader: { user: readerRole, password: readerPassword },
    writer: { user: writerRole, password: writerPassword },
    tls: { mode: 'off' },
    statement_timeout_ms: 15_000,
    lock_timeout_ms: 2_000,
    max_rows: 1_000,
    pool_size: 5,
  };
  await putSource(opts.controlDb, {
    id: sourceId,
    type: 'postgres',
    name: 'Chinook (demo)',
    description: 'The Chinook sample database: a digital media store with artists, albums, tracks, playlists, customers and invoices.',
    enabled: true,
    settings,
  });
  await scanSource(opts.controlDb, sourceId);

  // 4. Identity, role, policies, grant, key.
  let identity = await getIdentityByName(opts.controlDb, identityName);
  if (!identity) identity = await createIdentity(opts.controlDb, identityName);
  else if (identity.disabled) identity = await enableIdentity(opts.controlDb, identity.id);
  await upsertRole(opts.controlDb, DEMO_ROLE);
  await addPolicies(opts.controlDb, demoPolicies(sourceId), { replace: true });
  await grantRole(opts.controlDb, { identityId: identity.id, roleName: DEMO_ROLE.name, sourceId });
  // The handbook documents source (issue 4): registered, indexed and discoverable by the demo identity.
  if (opts.handbook !== false) await provisionHandbook(opts.controlDb, { identityId: identity.id });
  return { sourceId, identityId: identity.id, databaseName, readerRole, writerRole };
}
