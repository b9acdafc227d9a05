/**
 * The `session-settings` class of the sql-gateway pack (InterLock issue 22): payloads that are
 * harmless constants to a SQL analyser that lexes as PostgreSQL's defaults, but run a sub-select,
 * a side effect or `; COMMIT; DELETE …` on a server reading them with
 * `standard_conforming_strings = off` (a legal legacy setting an operator may have on a role or a
 * database). A gateway must pin the setting on its connections (or refuse the source); the pack sets
 * it as the fixture database's default while this class runs.
 */
import type { Client } from 'pg';

/** The class's statements: each is read as constants with standard_conforming_strings = on. */
export const SESSION_SETTINGS_PAYLOADS: readonly string[] = [
  "SELECT 'a\\' AS x, '; COMMIT; DELETE FROM icf_items; --'",
  "SELECT 'a\\' AS x, '; COMMIT; SELECT nextval($$icf_seq$$); --'",
  "SELECT 'a\\' AS x, ' AS y, icf_sidefx() AS z --'",
  "SELECT 'a\\' AS x, ' AS y, (SELECT email FROM icf_people ORDER BY id LIMIT 1) AS leak --'",
  "SELECT 'a\\' AS x, ' AS y, (SELECT string_agg(email, $$,$$) FROM icf_people) AS leak --'",
];

/** What entering or leaving the class did, for the log. */
export interface SessionSwitch {
  /** Sessions of the fixture database that were ended so the server reconnects under the new default. */
  ended: number;
  /** Sessions that could not be ended (the --pg-url role may not signal them). */
  notEnded: number;
}

async function endOtherSessions(db: Client): Promise<SessionSwitch> {
  const r = await db.query<{ ok: boolean | null }>(
    "SELECT pg_catalog.pg_terminate_backend(pid) AS ok FROM pg_catalog.pg_stat_activity WHERE datname = pg_catalog.current_database() AND pid <> pg_catalog.pg_backend_pid() AND backend_type = 'client backend'",
  );
  const ended = r.rows.filter((x) => x.ok === true).length;
  return { ended, notEnded: r.rows.length - ended };
}

async function alterDatabase(db: Client, clause: string): Promise<void> {
  const name = (await db.query<{ d: string }>('SELECT pg_catalog.current_database() AS d')).rows[0]!.d;
  await db.query(`ALTER DATABASE "${name.replace(/"/g, '""')}" ${clause}`);
}

/**
 * Makes `standard_conforming_strings = off` the fixture database's default and ends the other
 * sessions on it, so the server under test opens new connections that get the default unless it
 * pins the setting. Needs the --pg-url role to own the database (sql-fixture creates it so) and to
 * be allowed to signal the server's sessions (superuser or pg_signal_backend); a pg_terminate_backend
 * refusal is counted in `notEnded`, anything else throws.
 */
export async function enterSessionSettings(db: Client): Promise<SessionSwitch> {
  await alterDatabase(db, 'SET standard_conforming_strings = off');
  return endOtherSessions(db);
}

/** Removes the default again and ends the sessions opened under it. */
export async function leaveSessionSettings(db: Client): Promise<SessionSwitch> {
  await alterDatabase(db, 'RESET standard_conforming_strings');
  return endOtherSessions(db);
}
