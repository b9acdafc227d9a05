/**
 * The control database: connection, migrations, the API-key pepper, the runtime role and change
 * notifications. Issue 3, "Control database"; decisions.md "Governance model".
 *
 * Migrations live in `migrations/` (SQL files for node-pg-migrate, one transaction per run) and are
 * applied by `openControlDb` unless told not to. Two processes starting at once are safe: each
 * waits on node-pg-migrate's advisory lock (taken blocking here, then re-entered by the runner),
 * so the second one finds nothing left to do.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import pg from 'pg';
import { runner } from 'node-pg-migrate';
import type { Logger } from 'pino';
import { ConflictError, ControlError } from './errors';
import { installPath } from '../install-root';
import { controlClient, controlPool } from './targets';
import { OPERATOR_ROLE_FUNCTIONS, OPERATOR_ROLE_WRITES } from './governance-privileges';

/** Directory holding the SQL migrations. */
export const MIGRATIONS_DIR = installPath('migrations');
/** Table in which node-pg-migrate records applied migrations. */
export const MIGRATIONS_TABLE = 'interlock_migrations';
/** node-pg-migrate's advisory lock id; held (blocking) around every migration run. */
const MIGRATION_LOCK_ID = '7241865325823964';
/** How long opening one LISTEN connection or answering /readyz may take, in ms (a stopped server accepts TCP and never answers). */
export const CONTROL_CONNECT_TIMEOUT_MS = 5000;
/** Channel of the change notifications: payload is the changed table's name. */
export const CONTROL_CHANNEL = 'interlock_control';
/** Tables whose changes are notified on CONTROL_CHANNEL. */
export const NOTIFIED_TABLES = ['identities', 'api_keys', 'sources', 'roles', 'grants', 'policies', 'catalog_snapshots', 'claim_mappings', 'configured_claim_grants', 'identity_subjects'] as const;

/** An open control database. `url` is the connection URL as given (it may hold a password: never print it; see redactUrl). */
export interface ControlDb {
  pool: pg.Pool;
  url: string;
  /** Ends the pool. Idempotent. */
  close(): Promise<void>;
  /** The API-key pepper (HMAC key) chosen at open; absent on hand-built ControlDb objects (then read from settings). */
  keyPepper?: Buffer;
}

/** Options of openControlDb. */
export interface OpenControlDbOptions {
  /**
   * Whether to apply pending migrations. 'auto' (the default): only when the connecting role owns
   * the control tables (see mayMigrate); any other role (the runtime or operator role) checks the
   * applied migrations read-only and never runs node-pg-migrate. true: always migrate; false: never.
   * Whenever it does not migrate, pending migrations are a MigrationsPendingError.
   */
  migrate?: boolean | 'auto';
  /** API-key pepper from config or INTERLOCK_KEY_PEPPER (≥ 32 characters). Default: generated once and kept in `settings`. */
  keyPepper?: string;
  /** Largest number of pooled connections (default 10). */
  poolSize?: number;
  /**
   * Bound on opening a pooled connection, in ms (pg connectionTimeoutMillis, which also bounds the
   * wait for a free pooled connection; and on opening the migration connection). Default: none, for
   * the gateway, whose calls queue for this pool under load. The CLI passes CONTROL_CONNECT_TIMEOUT_MS
   * (cliControlBounds in src/cli/bounds.ts).
   */
  connectTimeoutMs?: number;
  /**
   * PostgreSQL lock_timeout of the pool's sessions, in ms: a statement that waits longer for one lock
   * fails with SQLSTATE 55P03 (its transaction rolled back). Default: the server's (none). Migrations
   * run on their own connection without it: they queue on node-pg-migrate's advisory lock behind a
   * concurrent migrator by design. No statement_timeout is set either way.
   */
  lockTimeoutMs?: number;
  logger?: Logger;
  /**
   * When true and the role may not read `settings` (the operator role, grant-operator-role), the
   * pepper is not resolved at open: `keyPepper` stays unset and a later getKeyPepper (creating an API
   * key) meets the permission error (SQLSTATE 42501) instead. The CLI passes it (every command but
   * serve and demo), so `db sync-claim-rules` and governance changes work on the operator role's URL.
   * Default false: the open resolves the pepper (the gateway must have it).
   */
  pepperOnlyIfReadable?: boolean;
}

/** Applied and pending migration names (file names without extension), in order. */
export interface MigrationStatus {
  applied: string[];
  pending: string[];
  /** True when nothing is pending. */
  upToDate: boolean;
}

/**
 * `url` with the values of its query parameters whose name (percent-decoded) holds "password"
 * replaced by "***": node-postgres, like libpq, takes `?password=` and `?sslpassword=` from a
 * connection string's query (red team rt48a K3). The rest of the text is kept as it is.
 */
function hideQueryPasswords(url: string): string {
  const q = url.indexOf('?');
  if (q < 0) return url;
  const hash = url.indexOf('#', q);
  const end = hash < 0 ? url.length : hash;
  const params = url.slice(q + 1, end).split('&').map((p) => {
    const i = p.indexOf('=');
    const key = i < 0 ? p : p.slice(0, i);
    let name = key;
    try {
      name = decodeURIComponent(key.replace(/\+/g, ' '));
    } catch {
      // A malformed escape: judged by the text as written.
    }
    return i >= 0 && /password/i.test(name) ? `${key}=***` : p;
  });
  return `${url.slice(0, q + 1)}${params.join('&')}${url.slice(end)}`;
}

/** `url` with any password replaced by "***", in the userinfo or as a query parameter (for messages and logs). */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return hideQueryPasswords(u.toString());
  } catch {
    // Several hosts (h1:p1,h2:p2, issue 29) are no WHATWG URL: blank the password by the URL's shape.
    const m = /^(postgres(?:ql)?:\/\/[^:@/?#]*)(:[^@/?#]*)?@([^/?#]*)(.*)$/s.exec(url) ?? /^(postgres(?:ql)?:\/\/)()([^/?#@]*)(.*)$/s.exec(url);
    if (m) return hideQueryPasswords(`${m[1]}${m[2] ? ':***' : ''}${m[0].includes('@') ? '@' : ''}${m[3]}${m[4]}`);
    return '<unparseable database URL>';
  }
}

/** Names of the migration files in MIGRATIONS_DIR, in the order node-pg-migrate applies them. */
export function migrationNames(): string[] {
  return readdirSync(MIGRATIONS_DIR)
    .filter((f) => !f.startsWith('.') && /\.(sql|js)$/.test(f))
    .sort()
    .map((f) => f.replace(/\.(sql|js)$/, ''));
}

/**
 * The error for a PostgreSQL insufficient_privilege (42501) met by the CLI or at open on a role
 * that is not the owner of the control tables (the gateway's runtime role, the operator role, or
 * any other): ControlError 'forbidden' (CLI exit code 2), one line naming the fix and what each
 * granted role may do (docs/operators.md "The operator CLI"), no driver text. `where` is the redacted URL.
 */
export function roleForbiddenError(where: string): ControlError {
  return new ControlError(
    'forbidden',
    `the database role of ${where} may not do this (permission denied): run the interlock CLI with the URL of the role that owns the control tables (the one that runs \`interlock db migrate\`); a role given \`interlock db grant-runtime-role\` may only read, one given \`interlock db grant-operator-role\` may make governance changes and \`db sync-claim-rules\` but not create API keys or operator tokens nor read the audit trail`,
  );
}

/** SQLSTATE lock_not_available: a lock was not granted within the session's lock_timeout. */
export const LOCK_NOT_AVAILABLE = '55P03';

/**
 * The error for a lock on the control database not granted within `lockTimeoutMs` (SQLSTATE 55P03 on
 * a connection with lock_timeout, e.g. the CLI's): ControlError 'unavailable' (CLI exit code 1), one
 * line naming what to check (another session holding a lock on the governance tables, found in
 * pg_stat_activity) and INTERLOCK_LOCK_TIMEOUT_MS; no driver text. `where` is the redacted URL.
 */
export function lockTimeoutError(where: string, lockTimeoutMs?: number): ControlError {
  const within = lockTimeoutMs === undefined ? 'in time' : `within ${lockTimeoutMs} ms (INTERLOCK_LOCK_TIMEOUT_MS)`;
  return new ControlError(
    'unavailable',
    `a lock on the control database ${where} was not granted ${within}: another session holds a lock on the governance tables (a long or idle-in-transaction session: look in pg_stat_activity for its pid, state, xact_start and query; pg_locks shows what it holds); the statement was rolled back, try again once that session ends`,
  );
}

/** True for pg's own connection-timeout errors (pg.Client "timeout expired", pg.Pool "timeout exceeded when trying to connect", a connection cut by the timeout), which carry no code. */
function isConnectTimeout(e: { code?: string; message?: string }): boolean {
  return !e?.code && /^(timeout expired|timeout exceeded when trying to connect|Connection terminated due to connection timeout)$/.test(String(e?.message ?? ''));
}

function describeConnectError(err: unknown, url: string, bounds: { connectTimeoutMs?: number; lockTimeoutMs?: number } = {}): ControlError {
  const e = err as { code?: string; message?: string };
  const where = redactUrl(url);
  if (isConnectTimeout(e)) return new ControlError('unavailable', `cannot reach the control database at ${where}: no answer within ${bounds.connectTimeoutMs ?? '?'} ms`);
  switch (e?.code) {
    case LOCK_NOT_AVAILABLE:
      return lockTimeoutError(where, bounds.lockTimeoutMs);
    case 'ECONNREFUSED':
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'ETIMEDOUT':
      return new ControlError('unavailable', `cannot reach the control database at ${where} (${e.code})`);
    case '3D000':
      return new ControlError('unavailable', `the control database does not exist: ${where}`);
    case '28P01':
    case '28000':
      return new ControlError('unavailable', `the control database refused the credentials in ${where}`);
    case '42501':
      return roleForbiddenError(where);
    default:
      return new ControlError('unavailable', `cannot open the control database at ${where}: ${e?.message ?? String(err)}`);
  }
}

/**
 * Applies every pending migration in one transaction while holding node-pg-migrate's advisory
 * lock (blocking, so concurrent starters queue instead of failing). Returns the names applied
 * (empty when up to date). Throws ControlError('unavailable') when the server cannot be reached, and
 * 'forbidden' (one line naming the fix) when the role may not migrate (migrationRefusal) or a pending
 * migration is refused because the current schema does not let the role create (42501).
 */
export async function runMigrations(url: string, logger?: Logger, opts: { connectTimeoutMs?: number } = {}): Promise<string[]> {
  const client = controlClient(url, { application_name: 'interlock-migrate', ...(opts.connectTimeoutMs ? { connectionTimeoutMillis: opts.connectTimeoutMs } : {}) });
  try {
    await client.connect();
  } catch (err) {
    throw describeConnectError(err, url, opts);
  }
  client.on('error', () => undefined);
  try {
    // A role that may not migrate is told so in one line naming the fix, before node-pg-migrate
    // logs and throws its own text with a stack trace (task hnu3 item 3).
    const refusal = await migrationRefusal(client, redactUrl(url));
    if (refusal) throw refusal;
    await client.query(`SELECT pg_advisory_lock(${MIGRATION_LOCK_ID})`);
    try {
      const quiet = (msg: string) => logger?.debug({ component: 'migrations' }, msg);
      const ran = await runner({
        dbClient: client,
        dir: MIGRATIONS_DIR,
        migrationsTable: MIGRATIONS_TABLE,
        direction: 'up',
        checkOrder: true,
        singleTransaction: true,
        logger: { debug: quiet, info: quiet, warn: (m: string) => logger?.warn({ component: 'migrations' }, m), error: (m: string) => logger?.error({ component: 'migrations' }, m) },
      }).catch(async (err: unknown) => {
        // A pending migration refused by a schema the role may no longer create in (it owns the
        // control tables, so the pre-check passed: red team rtlk): the same one line as a fresh database.
        if ((err as { code?: string })?.code !== '42501') throw err;
        const f = await client
          .query<{ who: string; dbname: string; schema: string; may: boolean }>("SELECT current_user AS who, current_database() AS dbname, coalesce(current_schema(), 'public') AS schema, coalesce(has_schema_privilege(current_schema(), 'CREATE'), false) AS may")
          .catch(() => null);
        // Only when the schema is what refuses (another 42501, e.g. a table of another owner, is not named so).
        if (!f?.rows[0] || f.rows[0].may) throw err;
        throw createRefusal(redactUrl(url), f.rows[0]);
      });
      return ran.map((m) => m.name);
    } finally {
      await client.query(`SELECT pg_advisory_unlock(${MIGRATION_LOCK_ID})`).catch(() => undefined);
    }
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * The refusal of a role (`f.who`) that may not create the control tables in `f.schema` of database
 * `f.dbname`: ControlError 'forbidden' (CLI exit code 2), one line naming the fix (the database's
 * owner). `where` is the redacted URL.
 */
function createRefusal(where: string, f: { who: string; dbname: string; schema: string }): ControlError {
  const id = (n: string) => pg.Client.prototype.escapeIdentifier(n);
  return new ControlError(
    'forbidden',
    `the database role of ${where} may not create the control tables (permission denied for schema ${f.schema}): make role ${f.who} the database's owner (createdb -O ${f.who} ${f.dbname} for a new database, or as a superuser ALTER DATABASE ${id(f.dbname)} OWNER TO ${id(f.who)}; on PostgreSQL 15 and later only the owner may create in schema public) and run \`interlock db migrate\` again`,
  );
}

/**
 * Why the role of `client` may not apply migrations, or null when it may (mayMigrate's test): a
 * ControlError 'forbidden' (CLI exit code 2) whose one line names the fix. Before the first
 * migration the role must be able to create tables in schema public (node-pg-migrate keeps
 * MIGRATIONS_TABLE there) and in the current schema (the control tables): on PostgreSQL 15 and later
 * only the database's owner may create in schema public, so the fix is `createdb -O ROLE DB` (or
 * ALTER DATABASE … OWNER TO, or GRANT CREATE ON SCHEMA); afterwards it must own (or have the
 * privileges of the owner of) MIGRATIONS_TABLE, so the fix is the owner's URL. `where` is the redacted URL.
 */
async function migrationRefusal(client: pg.ClientBase, where: string): Promise<ControlError | null> {
  // node-pg-migrate keeps MIGRATIONS_TABLE in schema public whatever the search_path (no `schema`
  // option); the control tables go to the current schema: a fresh database needs CREATE on both
  // (red team rtlk: a role owning a schema of its own on its search_path passed, then failed raw).
  const r = await client.query<{ fresh: boolean; may: boolean; who: string; dbname: string; schema: string; owner: string | null }>(
    `SELECT c.oid IS NULL AS fresh,
            coalesce(CASE WHEN c.oid IS NOT NULL THEN pg_has_role(current_user, c.relowner, 'USAGE') WHEN NOT x.pub THEN false ELSE has_schema_privilege('public', 'CREATE') AND has_schema_privilege(current_schema(), 'CREATE') END, false) AS may,
            current_user AS who, current_database() AS dbname,
            CASE WHEN x.pub AND NOT has_schema_privilege('public', 'CREATE') THEN 'public' ELSE coalesce(current_schema(), 'public') END AS schema,
            pg_get_userbyid(c.relowner) AS owner
       FROM (SELECT to_regclass(format('public.%I', $1::text)) AS r, EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'public') AS pub) x LEFT JOIN pg_class c ON c.oid = x.r`,
    [MIGRATIONS_TABLE],
  );
  const x = r.rows[0];
  if (!x || x.may) return null;
  if (x.fresh) return createRefusal(where, x);
  return new ControlError('forbidden', `the database role of ${where} may not apply migrations: the control tables belong to role ${x.owner}; run \`interlock db migrate\` with that role's URL`);
}

/**
 * Pending migrations on a role that does not apply them (ControlError 'unavailable': serve keeps
 * listening, not ready with /readyz reason `migrations_pending`, and retries). Its message is one
 * line naming the fix: `interlock db migrate` run as the owner of the control tables.
 */
export class MigrationsPendingError extends ControlError {
  constructor(readonly pending: string[]) {
    const names = pending.length <= 3 ? pending.join(', ') : `${pending.slice(0, 3).join(', ')}, … ${pending.length - 3} more`;
    super('unavailable', `the control database needs ${pending.length} migration(s) (${names}): run \`interlock db migrate\` with the URL of the role that owns the control tables (this role does not migrate)`);
    this.name = 'MigrationsPendingError';
  }
}

/**
 * True when the role `pool` connects as may apply migrations: it owns (or has the privileges of the
 * owner of) MIGRATIONS_TABLE, or, before the first migration, may create tables in the current
 * schema. The gateway's runtime role and the operator role (grant-runtime-role,
 * grant-operator-role) never do: node-pg-migrate would try to ALTER the table they do not own.
 */
export async function mayMigrate(pool: pg.Pool): Promise<boolean> {
  const r = await pool.query<{ may: boolean | null }>(
    `SELECT CASE WHEN c.oid IS NULL THEN has_schema_privilege(current_schema(), 'CREATE')
                 ELSE pg_has_role(current_user, c.relowner, 'USAGE') END AS may
       FROM (SELECT to_regclass($1) AS r) x LEFT JOIN pg_class c ON c.oid = x.r`,
    [MIGRATIONS_TABLE],
  );
  return r.rows[0]?.may === true;
}

/** Applied versus available migrations (for `interlock db status` and /readyz). Never throws for a fresh database. */
export async function migrationStatus(db: ControlDb): Promise<MigrationStatus> {
  const all = migrationNames();
  const exists = await db.pool.query<{ t: string | null }>('SELECT to_regclass($1) AS t', [MIGRATIONS_TABLE]);
  const applied = exists.rows[0].t ? (await db.pool.query<{ name: string }>(`SELECT name FROM ${MIGRATIONS_TABLE} ORDER BY run_on, id`)).rows.map((r) => r.name) : [];
  const pending = all.filter((n) => !applied.includes(n));
  return { applied, pending, upToDate: pending.length === 0 };
}

/**
 * The migration status of the control database at `url` (`interlock db status`), read on one
 * connection of its own that neither migrates nor resolves the pepper. `bounds` are the CLI's
 * (src/cli/bounds.ts): opening waits at most `connectTimeoutMs` (ms), each statement waits for a
 * lock at most `lockTimeoutMs` (ms), and for its answer at most their sum (client-side: a server
 * that authenticates and then never answers, red team rths). Throws ControlError 'unavailable' (one
 * line, no driver text) when the server cannot be reached or does not answer within the bound, as
 * openControlDb does.
 */
export async function readMigrationStatus(url: string, bounds: { connectTimeoutMs?: number; lockTimeoutMs?: number } = {}): Promise<MigrationStatus> {
  const queryTimeoutMs = (bounds.connectTimeoutMs ?? 0) + (bounds.lockTimeoutMs ?? 0);
  const pool = controlPool(url, {
    max: 1,
    application_name: 'interlock-status',
    ...(bounds.connectTimeoutMs ? { connectionTimeoutMillis: bounds.connectTimeoutMs } : {}),
    ...(bounds.lockTimeoutMs !== undefined ? { options: `-c lock_timeout=${bounds.lockTimeoutMs}` } : {}),
    ...(queryTimeoutMs > 0 ? { query_timeout: queryTimeoutMs } : {}),
  });
  pool.on('error', () => undefined);
  const db: ControlDb = { pool, url, close: () => pool.end() };
  try {
    return await migrationStatus(db);
  } catch (err) {
    if (err instanceof ControlError) throw err;
    if ((err as Error)?.message === 'Query read timeout' && !(err as { code?: string }).code) {
      throw new ControlError('unavailable', `the control database at ${redactUrl(url)} did not answer a query within ${queryTimeoutMs} ms`);
    }
    throw describeConnectError(err, url, bounds);
  } finally {
    await pool.end().catch(() => undefined);
  }
}

function pepperFingerprint(pepper: Buffer): string {
  return createHash('sha256').update('interlock-key-pepper-v1\0').update(pepper).digest('hex').slice(0, 16);
}

/**
 * Chooses the API-key pepper: the configured one (checked against the fingerprint recorded when
 * the first pepper was chosen, so a changed pepper fails loudly instead of silently invalidating
 * every key), or the one generated on first use and kept in `settings`.
 */
async function resolveKeyPepper(pool: pg.Pool, configured: string | undefined): Promise<Buffer> {
  if (configured !== undefined && configured.length < 32) {
    throw new ControlError('validation', 'the API-key pepper (key_pepper / INTERLOCK_KEY_PEPPER) must be at least 32 characters');
  }
  const c = await pool.connect();
  try {
    // Once a pepper and its fingerprint are stored (every start after the first), nothing is written
    // and no lock is taken: a role holding the advisory lock below can delay only the very first start.
    const SETTINGS_SQL = "SELECT key, value FROM settings WHERE key IN ('key_pepper', 'key_pepper_fingerprint')";
    const seen = (await c.query<{ key: string; value: string }>(SETTINGS_SQL)).rows;
    const seenPepper = seen.find((r) => r.key === 'key_pepper')?.value;
    const seenFp = seen.find((r) => r.key === 'key_pepper_fingerprint')?.value;
    const ready = configured !== undefined ? Buffer.from(configured, 'utf8') : seenPepper !== undefined ? Buffer.from(seenPepper, 'base64url') : null;
    if (ready && seenFp !== undefined && pepperFingerprint(ready) === seenFp) return ready;
    await c.query('BEGIN');
    await c.query("SELECT pg_advisory_xact_lock(hashtext('interlock_key_pepper'))");
    const rows = (await c.query<{ key: string; value: string }>(SETTINGS_SQL)).rows;
    const stored = rows.find((r) => r.key === 'key_pepper')?.value;
    const fp = rows.find((r) => r.key === 'key_pepper_fingerprint')?.value;
    let pepper: Buffer;
    if (configured !== undefined) {
      pepper = Buffer.from(configured, 'utf8');
    } else if (stored !== undefined) {
      pepper = Buffer.from(stored, 'base64url');
    } else {
      if (fp !== undefined) {
        throw new ConflictError('the existing API keys were made with a configured pepper: set INTERLOCK_KEY_PEPPER (or key_pepper in the config file) to it');
      }
      const generated = randomBytes(32).toString('base64url');
      await c.query("INSERT INTO settings (key, value) VALUES ('key_pepper', $1)", [generated]);
      pepper = Buffer.from(generated, 'base64url');
    }
    const mine = pepperFingerprint(pepper);
    if (fp === undefined) {
      await c.query("INSERT INTO settings (key, value) VALUES ('key_pepper_fingerprint', $1)", [mine]);
    } else if (fp !== mine) {
      throw new ConflictError(
        configured !== undefined
          ? 'the configured API-key pepper differs from the one the existing keys were made with (every key would stop working); restore the previous pepper'
          : 'the stored API-key pepper does not match its recorded fingerprint; the settings table was altered',
      );
    }
    await c.query('COMMIT');
    return pepper;
  } catch (err) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    c.release();
  }
}

const peppers = new WeakMap<ControlDb, Promise<Buffer>>();

/** The pepper keys are hashed with: `db.keyPepper`, else read (or generated) from `settings` once per ControlDb. */
export function getKeyPepper(db: ControlDb): Promise<Buffer> {
  if (db.keyPepper) return Promise.resolve(db.keyPepper);
  let p = peppers.get(db);
  if (!p) {
    p = resolveKeyPepper(db.pool, undefined);
    peppers.set(db, p);
    p.catch(() => peppers.delete(db));
  }
  return p;
}

/**
 * Opens the control database at `url` (a PostgreSQL connection URL): connects, applies pending
 * migrations when its role owns the control tables (opts.migrate, default 'auto'; other roles only
 * check them, read-only) and resolves the API-key pepper (not when opts.pepperOnlyIfReadable and the
 * role may not read `settings`: the operator role's CLI).
 * Throws ControlError 'unavailable' when the server cannot be reached or the database does not
 * exist, 'conflict' when the configured pepper does not match the keys on record, and
 * MigrationsPendingError ('unavailable') when migrations are pending and this open does not apply them.
 */
export async function openControlDb(url: string, opts: OpenControlDbOptions = {}): Promise<ControlDb> {
  const bounds = { connectTimeoutMs: opts.connectTimeoutMs, lockTimeoutMs: opts.lockTimeoutMs };
  if (opts.migrate === true) await runMigrations(url, opts.logger, bounds);
  // No connectionTimeoutMillis by default: pg.Pool applies it to waiting for a pooled connection too,
  // and the gateway's calls queue for this pool under load. (The LISTEN connections and the host
  // probes have their bound; the CLI, one command at a time, passes its own.)
  const pool = controlPool(url, {
    max: opts.poolSize ?? 10,
    application_name: 'interlock-control',
    ...(opts.connectTimeoutMs ? { connectionTimeoutMillis: opts.connectTimeoutMs } : {}),
    ...(opts.lockTimeoutMs !== undefined ? { options: `-c lock_timeout=${opts.lockTimeoutMs}` } : {}),
  });
  pool.on('error', (err) => {
    const code = (err as { code?: string }).code;
    // 57P01: the server ended an idle session (shutdown, e.g. the embedded server on Ctrl-C, or
    // pg_terminate_backend): expected, and the pool opens a new connection when one is needed.
    if (code === '57P01') opts.logger?.info({ component: 'control-db', code }, 'idle control-database connection closed by the server (shutdown or terminated); a new one is opened when needed');
    else opts.logger?.warn({ component: 'control-db', code }, 'idle control-database connection failed');
  });
  let closed: Promise<void> | null = null;
  const db: ControlDb = {
    pool,
    url,
    close() {
      closed ??= pool.end();
      return closed;
    },
  };
  // A failing migration is reported as itself (as with migrate: true), not as "cannot open".
  let migrating = false;
  try {
    // 'auto': only the owner of the control tables migrates; any other role only checks (read-only).
    const migrateNow = (opts.migrate ?? 'auto') === 'auto' && (await mayMigrate(pool));
    if (migrateNow) {
      migrating = true;
      await runMigrations(url, opts.logger, bounds);
      migrating = false;
    } else if (opts.migrate !== true) {
      const st = await migrationStatus(db);
      if (!st.upToDate) throw new MigrationsPendingError(st.pending);
    }
    const skipPepper = opts.pepperOnlyIfReadable && !(await pool.query<{ r: boolean }>("SELECT has_table_privilege('settings', 'SELECT') AS r")).rows[0].r;
    if (!skipPepper) db.keyPepper = await resolveKeyPepper(pool, opts.keyPepper);
  } catch (err) {
    await db.close().catch(() => undefined);
    if (err instanceof ControlError || migrating) throw err;
    throw describeConnectError(err, url, bounds);
  }
  return db;
}

/** Runs `fn` in a transaction on one pooled client of `db.pool` (BEGIN/COMMIT, ROLLBACK on error). */
export async function withTransaction<T>(db: Pick<ControlDb, 'pool'>, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const c = await db.pool.connect();
  try {
    await c.query('BEGIN');
    const out = await fn(c);
    await c.query('COMMIT');
    return out;
  } catch (err) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    c.release();
  }
}

/** True for a PostgreSQL unique_violation (23505), optionally on the named constraint. */
export function isUniqueViolation(err: unknown, constraint?: string): boolean {
  const e = err as { code?: string; constraint?: string };
  return e?.code === '23505' && (constraint === undefined || e.constraint === constraint);
}

/** True for a PostgreSQL foreign_key_violation (23503). */
export function isForeignKeyViolation(err: unknown): boolean {
  return (err as { code?: string })?.code === '23503';
}

/**
 * Grants the gateway's own database role what it needs and nothing more (run as the owner):
 * SELECT on every control table; EXECUTE of interlock_audit_append_v2 (and of the format-1
 * interlock_audit_append, for a gateway not yet upgraded) for approval events (config events are
 * refused to a role that may not INSERT into grants), and INSERT on audit_events and audit_batches
 * (not their ids; format-3 or format-5 batches only, by row-level security) for its own chains (issue
 * 28; never UPDATE, DELETE or TRUNCATE on the trail: it is append-only, and what the process inserts
 * outside its own chains verify names as inserted or misplaced); UPDATE of
 * api_keys.last_used_at; INSERT of approvals and UPDATE of their state columns (expiry);
 * INSERT/UPDATE of catalog_snapshots; read/write of rate_limits; INSERT, DELETE and UPDATE of the
 * activity and end of console_sessions; for token identities (issue 26), EXECUTE of
 * interlock_provision_token_identity and interlock_sync_claim_grants (SECURITY DEFINER, checking
 * their input: no INSERT/DELETE on identities, identity_subjects or grants, which it revokes; only
 * SELECT on the claim rules that function checks, claim_mappings and configured_claim_grants) and
 * UPDATE of identity_subjects.last_used_at, claim_attributes and claims_seen_at (the attribute
 * claims a subject last presented); EXECUTE of interlock_audit_seal_pending (chains the events those
 * functions left pending while the chain's lock was held, never waiting; no write of
 * audit_pending_events: migration 20261211140000000). `role` must exist.
 * Throws NotFoundError-like ControlError when the role does not exist.
 */
export async function grantRuntimeRole(db: ControlDb, role: string): Promise<void> {
  const exists = await db.pool.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [role]);
  if (exists.rowCount === 0) throw new ControlError('not_found', `database role "${role}" does not exist (CREATE ROLE ${role} LOGIN PASSWORD '…' first)`);
  const r = pg.Client.prototype.escapeIdentifier(role);
  await withTransaction(db, async (c) => {
    const dbName = (await c.query<{ d: string }>('SELECT current_database() AS d')).rows[0].d;
    await c.query(`GRANT CONNECT ON DATABASE ${pg.Client.prototype.escapeIdentifier(dbName)} TO ${r}`);
    await c.query(`GRANT USAGE ON SCHEMA public TO ${r}`);
    await c.query(`REVOKE ALL ON audit_events, audit_batches, audit_archives FROM ${r}`);
    // Every control table is readable (later migrations add tables the gateway reads); writes are listed one by one.
    await c.query(`GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${r}`);
    // The chain's lock row is the append functions' alone (no role may hold it and stall the trail).
    await c.query(`REVOKE ALL ON audit_chain_lock, audit_config_chain_lock FROM ${r}`);
    // The trail is appended only through the chain function (owner's rights; issue 11). Config events
    // are refused to this role (it may not INSERT into grants; migration 20261208220000000).
    await c.query(`GRANT EXECUTE ON FUNCTION interlock_audit_append(jsonb), interlock_audit_append_v2(text) TO ${r}`);
    // Format 3 (issue 28): the gateway's writer lanes insert their own chained batches: INSERT on every
    // column but the ids (they come from the sequences), never UPDATE, DELETE or TRUNCATE.
    await c.query(`GRANT INSERT (kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version, decision, reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, batch_id, recorded_at) ON audit_events TO ${r}`);
    await c.query(`GRANT INSERT (committed_at, event_count, prev_hash, hash, format, chain_id, seq, mark, anchors, mac_key_id) ON audit_batches TO ${r}`);
    await c.query(`GRANT USAGE ON SEQUENCE audit_events_id_seq, audit_batches_id_seq TO ${r}`);
    await c.query(`GRANT UPDATE (last_used_at) ON api_keys TO ${r}`);
    await c.query(`GRANT INSERT, UPDATE (state, decided_by, decided_at, executed_at, outcome, failure) ON approvals TO ${r}`);
    await c.query(`GRANT INSERT, UPDATE ON catalog_snapshots TO ${r}`);
    await c.query(`GRANT INSERT, UPDATE ON webhook_deliveries TO ${r}`);
    await c.query(`GRANT USAGE ON SEQUENCE webhook_deliveries_id_seq TO ${r}`);
    await c.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON rate_limits TO ${r}`);
    // Console sign-in, activity, sign-out and clean-up (issue 24, item 3).
    await c.query(`GRANT INSERT, UPDATE (last_seen_at, ended_at, ended_reason), DELETE ON console_sessions TO ${r}`);
    // Identities from tokens (issue 26, src/auth/token-identities.ts): provisioning and grants that follow
    // claims only through the checked SECURITY DEFINER functions, never by writing the tables (the
    // REVOKE tightens a role granted by an earlier version); last use directly.
    await c.query(`REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON identities, identity_subjects, grants FROM ${r}`);
    await c.query(`GRANT EXECUTE ON FUNCTION interlock_provision_token_identity(text, text, text, text), interlock_sync_claim_grants(text, text, text[], text[]) TO ${r}`);
    // Their events wait as pending while another transaction holds the chain's lock (task hchain): the
    // gateway chains them with the never-waiting seal; the pending table is the owner's functions' alone.
    await c.query(`REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON audit_pending_events FROM ${r}`);
    await c.query(`GRANT EXECUTE ON FUNCTION interlock_audit_seal_pending() TO ${r}`);
    // The claim rules that function checks pairs against are read only (task hcg: a role that could
    // write them could name any pair; the REVOKE tightens a role given more by hand or by an upgrade).
    await c.query(`REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON claim_mappings, configured_claim_grants FROM ${r}`);
    // The attribute claims a subject last presented (red team rt27m finding 3): a queued write's kept claim values are checked against them at approval;
    // claims_issued_at orders them by the token's iat, so an older token does not replace a newer one's (red team rt48b B5).
    await c.query(`GRANT UPDATE (last_used_at, claim_attributes, claims_seen_at, claims_issued_at) ON identity_subjects TO ${r}`);
  });
}

/**
 * Tables the operator role (grantOperatorRole) may read, and the writes it may make to each: what the
 * admin API and the console need to change governance state (src/admin/governance-db.ts), and what
 * the gateway needs to record its configuration's claim rules (configured_claim_grants). Derived
 * from the one list both use (src/control/governance-privileges.ts). Apply and source removal read
 * approvals; they reject a removed source's pending ones only through
 * interlock_reject_removed_source_approvals (no UPDATE of approvals: red team rtop finding 4); a scan
 * keeps the catalog.
 */
export { OPERATOR_ROLE_WRITES } from './governance-privileges';

/** Tables the operator role is refused everything on (grantOperatorRole revokes them, tightening an earlier grant). */
const OPERATOR_ROLE_NONE = ['audit_events', 'audit_batches', 'audit_archives', 'audit_keyed_trail', 'audit_pending_events', 'audit_chain_lock', 'audit_config_chain_lock', 'operator_tokens', 'console_sessions', 'settings', 'rate_limits', 'webhook_deliveries'];

/**
 * Grants `role` what the admin API and console need to change governance state through the operator
 * connection (config database.operator_url; run as the owner): CONNECT and USAGE on schema public;
 * SELECT on the tables of OPERATOR_ROLE_WRITES and the writes listed there (configured_claim_grants
 * included: the gateway records its configuration's claim rules through this role); EXECUTE of
 * OPERATOR_ROLE_FUNCTIONS: interlock_audit_append_v2 to record each change's config event, and
 * interlock_reject_removed_source_approvals to reject a removed source's pending approvals with their
 * approval events (no UPDATE of approvals: an earlier grant of it is revoked), and
 * interlock_untie_removed_source_claim_rules to take a removed source's claim mapping rules out (the
 * source family; UPDATE of claim_mappings is apply's, red team rt41a / task hpriv). Nothing on the trail beyond appending through that function (no
 * INSERT, UPDATE, DELETE or TRUNCATE of audit tables, not even SELECT; no audit_chain_lock or audit_config_chain_lock), nothing on
 * operator tokens, console sessions, settings (the key pepper), rate limits or webhook deliveries,
 * no sequences, no DDL. Throws ControlError not_found when the role does not exist, conflict when it
 * holds the runtime role's grants (give the operator connection a role of its own).
 */
export async function grantOperatorRole(db: ControlDb, role: string): Promise<void> {
  const exists = await db.pool.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [role]);
  if (exists.rowCount === 0) throw new ControlError('not_found', `database role "${role}" does not exist (CREATE ROLE ${role} LOGIN PASSWORD '…' first)`);
  const runtime = await db.pool.query<{ r: boolean }>("SELECT has_table_privilege($1, 'rate_limits', 'INSERT') AS r", [role]);
  if (runtime.rows[0].r) throw new ConflictError(`database role "${role}" holds the gateway runtime role's grants: the operator connection needs a role of its own (CREATE ROLE … LOGIN, then interlock db grant-operator-role)`);
  const r = pg.Client.prototype.escapeIdentifier(role);
  await withTransaction(db, async (c) => {
    const dbName = (await c.query<{ d: string }>('SELECT current_database() AS d')).rows[0].d;
    await c.query(`GRANT CONNECT ON DATABASE ${pg.Client.prototype.escapeIdentifier(dbName)} TO ${r}`);
    await c.query(`GRANT USAGE ON SCHEMA public TO ${r}`);
    const none = (await c.query<{ t: string }>('SELECT c.relname AS t FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relname = ANY($1)', [[...OPERATOR_ROLE_NONE, 'audit_events_default']])).rows.map((x) => x.t);
    for (const t of none) await c.query(`REVOKE ALL ON ${pg.Client.prototype.escapeIdentifier(t)} FROM ${r}`);
    // Grants before red team rtop finding 4 let the role UPDATE approvals' state: taken back.
    await c.query(`REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON approvals FROM ${r}`);
    for (const [table, writes] of Object.entries(OPERATOR_ROLE_WRITES)) {
      await c.query(`GRANT SELECT ON ${table} TO ${r}`);
      if (writes) await c.query(`GRANT ${writes} ON ${table} TO ${r}`);
    }
    // interlock_audit_append_v2 (config events), interlock_reject_removed_source_approvals and interlock_untie_removed_source_claim_rules.
    for (const fn of OPERATOR_ROLE_FUNCTIONS) await c.query(`GRANT EXECUTE ON FUNCTION ${fn} TO ${r}`);
  });
}

/** Longest wait between two reconnect attempts of a LISTEN connection, in ms. */
export const LISTEN_RETRY_MAX_MS = 4000;

/** A running LISTEN on CONTROL_CHANNEL. */
export interface ControlListener {
  close(): Promise<void>;
}

/**
 * Calls `onChange(table)` for every change notification on CONTROL_CHANNEL (payload = the table
 * name, see NOTIFIED_TABLES), on a dedicated connection (listenNotifications). After a reconnect it
 * calls `onChange('*')`, since notifications sent meanwhile are lost: treat '*' as "invalidate
 * everything".
 */
export function listenControlChanges(db: ControlDb, onChange: (table: string) => void, logger?: Logger): Promise<ControlListener> {
  return listenNotifications(db.url, CONTROL_CHANNEL, (payload) => onChange(payload || '*'), () => onChange('*'), logger);
}

/**
 * LISTENs on `channel` with a dedicated connection to the control database at `url` (several hosts:
 * the primary, src/control/targets.ts) and calls `onPayload` with each notification's payload ('' when
 * none). When the connection fails or ends it reconnects (1 s, doubling to LISTEN_RETRY_MAX_MS, so a
 * failover is followed within seconds; issue 29) until it succeeds, then calls `onReconnect`, since
 * notifications sent meanwhile are lost. Rejects when the first connect fails.
 */
export async function listenNotifications(url: string, channel: string, onPayload: (payload: string) => void, onReconnect: () => void, logger?: Logger): Promise<ControlListener> {
  let client: pg.Client | null = null;
  let stopped = false;
  let delay = 1000;
  let timer: NodeJS.Timeout | null = null;
  const connect = async (first: boolean): Promise<void> => {
    const c = controlClient(url, { application_name: channel === CONTROL_CHANNEL ? 'interlock-listen' : `interlock-${channel}`, connectionTimeoutMillis: CONTROL_CONNECT_TIMEOUT_MS });
    c.on('notification', (n) => {
      if (n.channel === channel) onPayload(n.payload ?? '');
    });
    const lost = () => {
      if (stopped || client !== c) return;
      client = null;
      c.end().catch(() => undefined);
      logger?.warn({ component: 'control-listen', channel }, 'notification listener lost its connection; reconnecting');
      schedule();
    };
    c.on('error', lost);
    c.on('end', lost);
    try {
      await c.connect();
      await c.query(`LISTEN ${channel}`);
    } catch (err) {
      c.end().catch(() => undefined);
      throw err;
    }
    if (stopped) {
      await c.end().catch(() => undefined);
      return;
    }
    client = c;
    delay = 1000;
    if (!first) onReconnect();
  };
  const schedule = () => {
    if (stopped || timer) return;
    timer = setTimeout(() => {
      timer = null;
      connect(false).catch(() => {
        delay = Math.min(delay * 2, LISTEN_RETRY_MAX_MS);
        schedule();
      });
    }, delay);
    timer.unref();
  };
  await connect(true);
  return {
    async close() {
      stopped = true;
      if (timer) clearTimeout(timer);
      const c = client;
      client = null;
      if (c) await c.end().catch(() => undefined);
    },
  };
}

/**
 * Creates database `name` through the superuser connection `adminUrl` unless it exists (safe when
 * two processes race). Returns true when it was created.
 */
export async function ensureDatabase(adminUrl: string, name: string): Promise<boolean> {
  const c = new pg.Client({ connectionString: adminUrl });
  c.on('error', () => undefined);
  await c.connect();
  try {
    const r = await c.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (r.rowCount) return false;
    try {
      await c.query(`CREATE DATABASE ${c.escapeIdentifier(name)}`);
      return true;
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code === '42P04' || code === '23505') return false;
      throw err;
    }
  } finally {
    await c.end().catch(() => undefined);
  }
}
