/**
 * The Chinook sample database (MIT licence, data/chinook/LICENSE.md), used by the demo and the tests.
 */
import { readFileSync } from 'node:fs';
import { Client } from 'pg';
import { installPath } from '../install-root';

/** Absolute path of the bundled Chinook script. */
export const CHINOOK_SQL_PATH = installPath('data', 'chinook', 'Chinook_PostgreSql.sql');

/**
 * The Chinook script without its DROP/CREATE DATABASE and `\c` lines, ready to run inside an
 * existing, empty database (creates 11 tables in schema `public` and inserts their rows).
 */
export function chinookSchemaAndData(): string {
  const full = readFileSync(CHINOOK_SQL_PATH, 'utf8');
  const marker = '\\c chinook;';
  const at = full.indexOf(marker);
  if (at < 0) throw new Error('Chinook script: connect marker not found');
  return full.slice(at + marker.length);
}

/**
 * Loads Chinook into the (empty) database at `url`, then ANALYZEs it: the planner's row estimates
 * (`approval show`'s "about N row(s)") are otherwise its defaults for never-analysed tables, e.g. about
 * 280 rows for the 19 of playlist (trial nu40), and autovacuum never analyses tables this small. Throws on any SQL error.
 */
export async function loadChinook(url: string): Promise<void> {
  const c = new Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(chinookSchemaAndData());
    await c.query('ANALYZE');
  } finally {
    await c.end();
  }
}
