/** Test helper: a migrated control database in a fresh temporary PostgreSQL database. */
import { randomBytes } from 'node:crypto';
import pg, { Client } from 'pg';
import { ADMIN_URL, createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { grantRuntimeRole, openControlDb, type ControlDb } from '../../../src/control/db';

export interface TestControlDb {
  db: ControlDb;
  temp: TempDatabase;
  /** Closes the pool and drops the database. */
  cleanup(): Promise<void>;
}

/** Creates a temporary database, applies the migrations and opens it. */
export async function freshControlDb(prefix: string, opts: { keyPepper?: string } = {}): Promise<TestControlDb> {
  const temp = await createTempDatabase(prefix);
  const db = await openControlDb(temp.url, { keyPepper: opts.keyPepper });
  return {
    db,
    temp,
    async cleanup() {
      await db.close();
      await temp.drop();
    },
  };
}


/** Runs `fn` on a fresh migrated control database, dropped afterwards whatever `fn` does. */
export async function withFreshControlDb<T>(prefix: string, fn: (t: TestControlDb) => Promise<T>): Promise<T> {
  const t = await freshControlDb(prefix);
  try {
    return await fn(t);
  } finally {
    await t.cleanup();
  }
}

/**
 * Runs `fn` with the URL of a new login role `il_rt_<random>` holding the gateway's runtime grants
 * (grantRuntimeRole) on `t`'s database; the role's grants are revoked and the role dropped afterwards.
 */
export async function withRuntimeRole<T>(t: TestControlDb, fn: (url: string) => Promise<T>): Promise<T> {
  const role = `il_rt_${randomBytes(4).toString('hex')}`;
  const admin = new Client({ connectionString: ADMIN_URL });
  await admin.connect();
  try {
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'rt-${role}'`);
    await grantRuntimeRole(t.db, role);
    const u = new URL(t.temp.url);
    u.username = role;
    u.password = `rt-${role}`;
    return await fn(u.toString());
  } finally {
    await t.db.pool.query(`REVOKE ALL ON ALL TABLES IN SCHEMA public FROM ${role}`);
    await t.db.pool.query(`REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM ${role}`);
    await t.db.pool.query(`REVOKE ALL ON ALL FUNCTIONS IN SCHEMA public FROM ${role}`);
    await t.db.pool.query(`REVOKE ALL ON SCHEMA public FROM ${role}`);
    await admin.query(`REVOKE ALL ON DATABASE "${t.temp.name}" FROM ${role}`);
    await admin.query(`DROP ROLE ${role}`);
    await admin.end();
  }
}

/** Creates the login role `role` (password `pw-<role>`) and returns `t`'s database URL as that role. */
export async function createLoginRole(t: TestControlDb, role: string): Promise<string> {
  const admin = new Client({ connectionString: ADMIN_URL });
  await admin.connect();
  try {
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'pw-${role}'`);
  } finally {
    await admin.end();
  }
  const u = new URL(t.temp.url);
  u.username = role;
  u.password = `pw-${role}`;
  return u.toString();
}

/** Revokes everything `role` holds in `t`'s database and drops the role (IF EXISTS; revocations that fail are skipped). */
export async function dropLoginRole(t: TestControlDb, role: string): Promise<void> {
  for (const sql of [`REVOKE ALL ON ALL TABLES IN SCHEMA public FROM ${role}`, `REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM ${role}`, `REVOKE ALL ON ALL FUNCTIONS IN SCHEMA public FROM ${role}`, `REVOKE ALL ON SCHEMA public FROM ${role}`, `REVOKE ALL ON DATABASE "${t.temp.name}" FROM ${role}`]) {
    await t.db.pool.query(sql).catch(() => undefined);
  }
  const admin = new Client({ connectionString: ADMIN_URL });
  await admin.connect();
  try {
    await admin.query(`DROP ROLE IF EXISTS ${role}`);
  } finally {
    await admin.end();
  }
}

/**
 * Creates a login role `<prefix>_<random>` (createLoginRole) and gives it `grant` (e.g.
 * grantRuntimeRole or grantOperatorRole, run as the owner); returns its name and `t`'s URL as it.
 * Drop it with dropLoginRole.
 */
export async function createGrantedLoginRole(t: TestControlDb, prefix: string, grant: (db: ControlDb, role: string) => Promise<void>): Promise<{ role: string; url: string }> {
  const role = `${prefix}_${randomBytes(4).toString('hex')}`;
  const url = await createLoginRole(t, role);
  await grant(t.db, role);
  return { role, url };
}

/** What eachRuntimeRoleTrail gives each test: the control database and a pool logged in as the runtime role. */
export interface RuntimeRoleTrail {
  t: TestControlDb;
  rt: pg.Pool;
}

/**
 * Registers jest beforeEach/afterEach hooks that give each test a fresh migrated control database
 * (freshControlDb(prefix): the trail refuses TRUNCATE, so one per attack) and a pool of at most `max`
 * connections logged in as a new role `<prefix>_<random>` holding the gateway's runtime grants
 * (grantRuntimeRole, as `interlock db grant-runtime-role` sets it up); both are dropped after the
 * test. Returns the object whose fields the hooks set: read them inside the tests.
 */
export function eachRuntimeRoleTrail(prefix: string, max = 2): RuntimeRoleTrail {
  const fx = {} as RuntimeRoleTrail;
  let role: string | undefined;
  beforeEach(async () => {
    fx.t = await freshControlDb(prefix);
    const granted = await createGrantedLoginRole(fx.t, `il_${prefix}`, grantRuntimeRole);
    role = granted.role;
    fx.rt = new pg.Pool({ connectionString: granted.url, max });
  });
  afterEach(async () => {
    await fx.rt?.end();
    if (role) await dropLoginRole(fx.t, role);
    role = undefined;
    await fx.t?.cleanup();
  });
  return fx;
}
