/**
 * Jest globalSetup of the projects whose tests need the test PostgreSQL (integration, e2e; see
 * jest.config.js): one connection attempt before any test runs. When the server cannot be reached
 * the run stops at once with one line naming the URL (password hidden) and how to start it, instead
 * of every test failing on its own with ECONNREFUSED. Jest runs it only when at least one test of
 * such a project is selected, so `npx jest --selectProjects unit` still runs without PostgreSQL.
 */
import { Client } from 'pg';
import { ADMIN_URL } from './pg';
import { redactUrl } from '../../src/control/db';

/**
 * Resolves when `url` (default ADMIN_URL: INTERLOCK_TEST_PG_URL or root on 127.0.0.1) answers
 * `SELECT 1` within 5 s; otherwise rejects with an Error whose message and stack are the one line.
 */
export async function checkTestPostgres(url: string = ADMIN_URL): Promise<void> {
  const c = new Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  try {
    await c.connect();
    await c.query('SELECT 1');
  } catch (err) {
    const e = err as { code?: string; message?: string };
    const line = `The integration and end-to-end tests need PostgreSQL at ${redactUrl(url)} (INTERLOCK_TEST_PG_URL), which cannot be reached (${e?.code ?? e?.message ?? String(err)}): start it as README "Test it" says (a superuser connecting over TCP without a password), or run only the unit tests: npx jest --selectProjects unit`;
    const out = new Error(line);
    out.stack = line;
    throw out;
  } finally {
    await c.end().catch(() => undefined);
  }
}

export default function globalSetup(): Promise<void> {
  return checkTestPostgres();
}
