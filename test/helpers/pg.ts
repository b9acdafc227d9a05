/**
 * Test helpers for real PostgreSQL: each test file creates its own database on the server named by
 * INTERLOCK_TEST_PG_URL (default postgres://root@127.0.0.1:5432/postgres) and drops it afterwards.
 */
import { Client } from 'pg';
import { randomBytes } from 'node:crypto';

/** Connection URL of the administrative database used to create and drop test databases. */
export const ADMIN_URL = process.env.INTERLOCK_TEST_PG_URL ?? 'postgres://root@127.0.0.1:5432/postgres';

/** A database created for one test file; `url` connects to it as the superuser. */
export interface TempDatabase {
  name: string;
  url: string;
  drop(): Promise<void>;
}

/**
 * Host and port of the test PostgreSQL server (from ADMIN_URL, so INTERLOCK_TEST_PG_URL is
 * honoured; or from `base`), for source settings and `--host`/`--port` flags; port 5432 when the URL names none.
 */
export function pgServer(base: string = ADMIN_URL): { host: string; port: number } {
  const u = new URL(base);
  return { host: u.hostname.replace(/^\[(.*)\]$/, '$1') || '127.0.0.1', port: Number(u.port || 5432) };
}

/** Returns `ADMIN_URL` with its database name replaced by `name`. */
export function urlFor(name: string, base: string = ADMIN_URL): string {
  const u = new URL(base);
  u.pathname = '/' + name;
  return u.toString();
}

/**
 * Creates a fresh database `il_<prefix>_<random>` on the server of `base` (default ADMIN_URL, a
 * superuser URL); `drop()` terminates its sessions and drops it.
 * Throws when the server is unreachable (tests must not silently skip).
 */
export async function createTempDatabase(prefix = 'test', base: string = ADMIN_URL): Promise<TempDatabase> {
  const name = `il_${prefix.replace(/[^a-z0-9_]/gi, '_').toLowerCase()}_${randomBytes(5).toString('hex')}`;
  const admin = new Client({ connectionString: base });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  return {
    name,
    url: urlFor(name, base),
    async drop() {
      const c = new Client({ connectionString: base });
      await c.connect();
      try {
        await c.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [name]);
        await c.query(`DROP DATABASE IF EXISTS "${name}"`);
      } finally {
        await c.end();
      }
    },
  };
}

/** Runs `sql` (may hold several statements) on `url` as one simple-protocol query. */
export async function execSql(url: string, sql: string): Promise<void> {
  const c = new Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}
