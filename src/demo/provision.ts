/**
 * Demo provisioning (issue 3, Build 3; issue 16, Build 5): Chinook as source `chinook` with a
 * least-privilege reader role and a separate writer role, identity `demo-agent` with role
 * `demo-analyst`, masking policies on customer contact columns, the `handbook` documents source,
 * and a fresh API key. The governed objects (sources, roles, identity and grants, policies) are the
 * shipped interlock file examples/demo.interlock.yaml, applied with the same code as `interlock
 * apply` (src/declarative/apply.ts); what is not in a file stays here: the database copy, the login
 * roles and their privileges, the catalog scan, the handbook index and the key. Idempotent: every
 * run converges to the same state and only adds a new key.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import type { Logger } from 'pino';
import type { SourceRole } from '../../generated/role-v1';
import type { Policy } from '../../generated/policy-v1';
import { ensureDatabase, type ControlDb } from '../control/db';
import { createApiKey, listApiKeys, revokeApiKey } from '../control/keys';
import { getIdentityByName } from '../control/identities';
import { getSource } from '../control/sources';
import { scanSource } from '../control/scan';
import { NotFoundError } from '../control/errors';
import { applyInterlockFile } from '../declarative/apply';
import { parseFileText, validateInterlockFileDocument, type InterlockFile } from '../declarative/schema';
import { loadChinook } from './chinook';
import { HANDBOOK_PATH, HANDBOOK_ROLE } from '../discovery/handbook';
import { indexSource } from '../discovery/indexer';
import { installPath } from '../install-root';

/** Chinook tables the demo role may read (schema public). */
export const DEMO_READ_TABLES = ['album', 'artist', 'genre', 'media_type', 'track', 'playlist', 'playlist_track', 'customer', 'invoice', 'invoice_line'] as const;
/** Chinook tables the demo role may write (through approval) and the writer role may change. */
export const DEMO_WRITE_TABLES = ['playlist', 'playlist_track'] as const;

/** temp_file_limit of the demo's reader role: the most temporary-file space one of its statements may use. */
export const DEMO_TEMP_FILE_LIMIT = '256MB';

/** The demo's desired state, shipped in the repository: an interlock file (spec/interlock-file-v1.schema.json). */
export const DEMO_FILE = installPath('examples', 'demo.interlock.yaml');
/** Environment variables the demo file's credentials name (password_env); the demo sets them in its own process before applying. */
export const DEMO_PASSWORD_ENV = { reader: 'CHINOOK_READER_PASSWORD', writer: 'CHINOOK_WRITER_PASSWORD' } as const;

/** The demo file, parsed and validated (throws ValidationError naming the path of a schema error). */
export function readDemoFile(): InterlockFile {
  return validateInterlockFileDocument(parseFileText(readFileSync(DEMO_FILE, 'utf8')));
}

const DEMO_FILE_DOC = readDemoFile();

/** The demo's source role (from the demo file). */
export const DEMO_ROLE: SourceRole = (DEMO_FILE_DOC.roles ?? []).find((r) => r.name === 'demo-analyst')!;

/** The demo's masking policies (from the demo file: partial e-mail, fully masked phone and fax), applied on `sourceId`. */
export function demoPolicies(sourceId: string): Policy[] {
  return (DEMO_FILE_DOC.policies ?? []).map((p) => ({ ...p, applies_to: { sources: [sourceId] } }));
}

/** Where the demo file is instantiated: the server holding the Chinook copy and the names of this run. */
export interface DemoFileParams {
  host: string;
  port: number;
  databaseName: string;
  readerRole: string;
  writerRole: string;
  sourceId: string;
  identityName: string;
  /** Keep the handbook source, its role and grant (default true). */
  handbook: boolean;
}

/**
 * The demo file with this run's connection and names filled in: the Chinook source's host, port,
 * database and login roles, its id (also in the grant and the policies), the identity name, and
 * the handbook's absolute folder (or no handbook). Secrets stay references (DEMO_PASSWORD_ENV).
 */
export function demoFileFor(p: DemoFileParams): InterlockFile {
  const doc = JSON.parse(JSON.stringify(DEMO_FILE_DOC)) as InterlockFile;
  const isHandbook = (id: string) => id === 'handbook';
  doc.sources = (doc.sources ?? []).filter((s) => p.handbook || !isHandbook(s.id)).map((s) => {
    if (s.id === 'handbook') return { ...s, settings: { ...s.settings, path: HANDBOOK_PATH } };
    const st = s.settings as Record<string, unknown> & { reader: { user: string }; writer: { user: string } };
    return { ...s, id: p.sourceId, settings: { ...st, host: p.host, port: p.port, database: p.databaseName, reader: { ...st.reader, user: p.readerRole }, writer: { ...st.writer, user: p.writerRole } } };
  });
  doc.roles = (doc.roles ?? []).filter((r) => p.handbook || r.name !== HANDBOOK_ROLE.name);
  doc.identities = (doc.identities ?? []).map((i) => ({
    ...i,
    name: p.identityName,
    grants: (i.grants ?? []).filter((g) => p.handbook || !isHandbook(g.source)).map((g) => (isHandbook(g.source) ? g : { ...g, source: p.sourceId })),
  }));
  doc.policies = demoPolicies(p.sourceId);
  return doc;
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
  } else {
    // Chinook loaded by an earlier version, which did not ANALYZE it (trial nu40): once now.
    await withClient(dbUrl, async (c) => {
      const never = await c.query("SELECT 1 FROM pg_stat_user_tables WHERE schemaname = 'public' AND relname = 'playlist' AND last_analyze IS NULL AND last_autoanalyze IS NULL");
      if (never.rowCount) await c.query('ANALYZE');
    });
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
    // Row rules (issue 27): the writer role keeps InterLock's row views in a schema it owns, with no
    // CREATE on the database (docs/row-rules.md).
    await c.query(`CREATE SCHEMA IF NOT EXISTS interlock_rows AUTHORIZATION ${wr}`);
    await c.query(`ALTER SCHEMA interlock_rows OWNER TO ${wr}`);
    await c.query('COMMIT');
  });

  // 3. Sources, roles, the identity with its grants and the policies: the demo file, applied as
  // `interlock apply` does (one transaction, audited). Its password_env references resolve to this
  // run's passwords (never put into the process environment).
  const { host, port } = hostAndPort(opts.adminUrl);
  const doc = demoFileFor({ host, port, databaseName, readerRole, writerRole, sourceId, identityName, handbook: opts.handbook !== false });
  const passwords: Record<string, string> = { [DEMO_PASSWORD_ENV.reader]: readerPassword, [DEMO_PASSWORD_ENV.writer]: writerPassword };
  await applyInterlockFile(opts.controlDb, { document: doc }, { operator: 'interlock-demo', scan: false, secrets: { env: (n) => passwords[n], file: () => undefined } });

  // 4. The catalog as the reader sees it, and the handbook's discovery index.
  await scanSource(opts.controlDb, sourceId);
  if (opts.handbook !== false) await indexSource(opts.controlDb, 'handbook');
  const identity = await getIdentityByName(opts.controlDb, identityName);
  if (!identity) throw new NotFoundError(`identity "${identityName}" not found after applying the demo file`);
  return { sourceId, identityId: identity.id, databaseName, readerRole, writerRole };
}
