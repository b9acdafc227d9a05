/** Control database migrations: apply on an empty database, idempotent, safe with concurrent runners. */
import { Client } from 'pg';
import { createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { migrationNames, migrationStatus, openControlDb, runMigrations, MIGRATIONS_TABLE } from '../../../src/control/db';

const TABLES = ['api_keys', 'approvals', 'audit_events', 'catalog_snapshots', 'grants', 'identities', MIGRATIONS_TABLE, 'policies', 'rate_limits', 'roles', 'settings', 'sources'];

async function tables(url: string): Promise<string[]> {
  const c = new Client({ connectionString: url });
  await c.connect();
  try {
    const r = await c.query<{ t: string }>("SELECT tablename AS t FROM pg_tables WHERE schemaname = 'public' ORDER BY 1");
    return r.rows.map((x) => x.t);
  } finally {
    await c.end();
  }
}

async function appliedCount(url: string): Promise<number> {
  const c = new Client({ connectionString: url });
  await c.connect();
  try {
    return Number((await c.query(`SELECT count(*) AS n FROM ${MIGRATIONS_TABLE}`)).rows[0].n);
  } finally {
    await c.end();
  }
}

describe('control database migrations', () => {
  let temp: TempDatabase;
  beforeEach(async () => {
    temp = await createTempDatabase('ctl_mig');
  });
  afterEach(async () => {
    await temp.drop();
  });

  test('apply on an empty database, then report up to date', async () => {
    expect(await tables(temp.url)).toEqual([]);
    const ran = await runMigrations(temp.url);
    expect(ran).toEqual(migrationNames());
    expect(ran.length).toBeGreaterThanOrEqual(1);
    expect(await tables(temp.url)).toEqual(expect.arrayContaining(TABLES));
    const db = await openControlDb(temp.url);
    try {
      expect(await migrationStatus(db)).toEqual({ applied: migrationNames(), pending: [], upToDate: true });
    } finally {
      await db.close();
    }
  });

  test('running twice applies nothing the second time', async () => {
    await runMigrations(temp.url);
    expect(await runMigrations(temp.url)).toEqual([]);
    expect(await appliedCount(temp.url)).toBe(migrationNames().length);
  });

  test('two concurrent runners: one applies, the other waits and finds nothing to do', async () => {
    const [a, b, c] = await Promise.all([runMigrations(temp.url), runMigrations(temp.url), runMigrations(temp.url)]);
    const applied = [a, b, c].filter((r) => r.length > 0);
    expect(applied).toEqual([migrationNames()]);
    expect(await appliedCount(temp.url)).toBe(migrationNames().length);
  });

  test('two processes opening at once both succeed and share one pepper', async () => {
    const [d1, d2] = await Promise.all([openControlDb(temp.url), openControlDb(temp.url)]);
    try {
      expect(d1.keyPepper).toBeDefined();
      expect(d1.keyPepper!.equals(d2.keyPepper!)).toBe(true);
      expect(d1.keyPepper!.length).toBe(32);
    } finally {
      await d1.close();
      await d2.close();
    }
  });

  test('migrationStatus on a fresh database lists everything as pending; migrate:false refuses it', async () => {
    const { Pool } = await import('pg');
    const pool = new Pool({ connectionString: temp.url });
    try {
      const st = await migrationStatus({ pool, url: temp.url, close: () => pool.end() });
      expect(st).toEqual({ applied: [], pending: migrationNames(), upToDate: false });
    } finally {
      await pool.end();
    }
    await expect(openControlDb(temp.url, { migrate: false })).rejects.toThrow(/needs \d+ migration\(s\) .* run `interlock db migrate`/);
  });

  test('an unreachable server is a clear ControlError without the password', async () => {
    const err = await openControlDb('postgres://someone:s3cret@127.0.0.1:1/nowhere').catch((e: unknown) => e as Error & { kind?: string });
    expect(err).toBeInstanceOf(Error);
    expect((err as { kind?: string }).kind).toBe('unavailable');
    expect((err as Error).message).toBe('cannot reach the control database at postgres://someone:***@127.0.0.1:1/nowhere (ECONNREFUSED)');
  });
});
