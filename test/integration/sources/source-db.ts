/**
 * A source database for connector tests on the machine's PostgreSQL (test/helpers/pg.ts): a temp
 * database with Chinook, a reader role (SELECT only) and a writer role (SELECT/INSERT/UPDATE/DELETE),
 * and an admin connection for pg_stat_activity checks. `drop()` removes the database and both roles.
 */
import { Client } from 'pg';
import { randomBytes } from 'node:crypto';
import { ADMIN_URL, createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { loadChinook } from '../../../src/demo/chinook';
import type { PostgresSourceSettings } from '../../../src/sources/postgres/connector';

export interface SourceDb {
  db: TempDatabase;
  host: string;
  port: number;
  readerRole: string;
  writerRole: string;
  /** Superuser connection to the temp database. */
  admin: Client;
  /** Settings for the temp database with the reader (and writer) roles, plus overrides. */
  settings(overrides?: Partial<PostgresSourceSettings>): PostgresSourceSettings;
  /** Rows of pg_stat_activity for this database, excluding the admin connection. */
  activity(): Promise<Array<{ pid: number; state: string | null; query: string; usename: string; application_name: string; backend_xid: string | null }>>;
  drop(): Promise<void>;
}

export async function createSourceDb(prefix: string, opts: { chinook?: boolean; extraSql?: string } = {}): Promise<SourceDb> {
  const db = await createTempDatabase(prefix);
  const suffix = randomBytes(4).toString('hex');
  const readerRole = `il_reader_${suffix}`;
  const writerRole = `il_writer_${suffix}`;
  const u = new URL(ADMIN_URL);
  const host = u.hostname;
  const port = Number(u.port || 5432);
  if (opts.chinook !== false) await loadChinook(db.url);
  const admin = new Client({ connectionString: db.url });
  await admin.connect();
  await admin.query(`
    CREATE ROLE ${readerRole} LOGIN;
    CREATE ROLE ${writerRole} LOGIN;
    GRANT USAGE ON SCHEMA public TO ${readerRole}, ${writerRole};
    ${opts.extraSql ?? ''}
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${readerRole};
    GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${writerRole};
    GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO ${writerRole};
  `);
  return {
    db,
    host,
    port,
    readerRole,
    writerRole,
    admin,
    settings: (overrides = {}) => ({
      host,
      port,
      database: db.name,
      reader: { user: readerRole },
      writer: { user: writerRole },
      ...overrides,
    }),
    async activity() {
      const r = await admin.query(
        `SELECT pid, state, query, usename, application_name, backend_xid::text AS backend_xid
           FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`,
        [db.name],
      );
      return r.rows;
    },
    async drop() {
      await admin.end().catch(() => undefined);
      await db.drop();
      const c = new Client({ connectionString: ADMIN_URL });
      await c.connect();
      try {
        await c.query(`DROP ROLE IF EXISTS ${readerRole}`);
        await c.query(`DROP ROLE IF EXISTS ${writerRole}`);
      } finally {
        await c.end();
      }
    },
  };
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Polls `fn` every 20 ms until it returns true or `ms` pass; returns the elapsed time, or -1 on timeout. */
export async function waitFor(fn: () => Promise<boolean>, ms: number): Promise<number> {
  const t0 = Date.now();
  for (;;) {
    if (await fn()) return Date.now() - t0;
    if (Date.now() - t0 > ms) return -1;
    await sleep(20);
  }
}
