/**
 * Runs node-pg-migrate down `count` migrations on the control database at `url`, as its owner, in
 * one transaction (what a test of a migration on a trail written before it starts from).
 */
import { runner } from 'node-pg-migrate';
import pg from 'pg';
import { MIGRATIONS_DIR, MIGRATIONS_TABLE } from '../../src/control/db';

/** Migrates `url` down by `count` migrations; throws the runner's error. */
export async function migrateDown(url: string, count: number): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await runner({ dbClient: c, dir: MIGRATIONS_DIR, migrationsTable: MIGRATIONS_TABLE, direction: 'down', count, checkOrder: true, singleTransaction: true, logger: { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined } });
  } finally {
    await c.end();
  }
}
