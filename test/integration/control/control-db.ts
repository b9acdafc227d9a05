/** Test helper: a migrated control database in a fresh temporary PostgreSQL database. */
import { createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { openControlDb, type ControlDb } from '../../../src/control/db';

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
