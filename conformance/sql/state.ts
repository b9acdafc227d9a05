/**
 * The fixture database's observable state, read as the --pg-url role before and after every payload.
 * An escape is any difference: rows changed, the sequence moved, a relation or large object created,
 * an advisory or relation lock still held, a transaction left open by another session. `restore`
 * puts the fixture back (and ends the sessions that still hold something) so payloads stay independent.
 */
import type { Client } from 'pg';
import { fixtureSql } from './fixture';

/** One reading of the fixture's state. Each member is compared as a whole. */
export interface FixtureState {
  items: string;
  people: string;
  logRows: number;
  sequence: string;
  relations: string[];
  largeObjects: number;
  advisoryLocks: number;
  relationLocks: number;
  openTransactions: number;
  roleSettings: number;
}

/** Reads the state. Throws the server's error when the fixture is missing. */
export async function readState(c: Client): Promise<FixtureState> {
  const q = async <T>(sql: string): Promise<T> => (await c.query(sql)).rows[0] as T;
  const items = await q<{ s: string }>(`SELECT count(*) || ':' || coalesce(md5(string_agg(id || ':' || name || ':' || price, ',' ORDER BY id)), '') AS s FROM icf_items`);
  const people = await q<{ s: string }>(`SELECT count(*) || ':' || coalesce(md5(string_agg(id || ':' || name || ':' || email, ',' ORDER BY id)), '') AS s FROM icf_people`);
  const log = await q<{ n: string }>(`SELECT count(*) AS n FROM icf_log`);
  const seq = await q<{ s: string }>(`SELECT last_value || ':' || is_called AS s FROM icf_seq`);
  const rels = await c.query<{ r: string }>(`SELECT c.relname AS r FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind IN ('r','v','m','S','f','p') ORDER BY 1`);
  const lo = await q<{ n: string }>(`SELECT count(*) AS n FROM pg_largeobject_metadata`);
  const adv = await q<{ n: string }>(`SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`);
  const relLocks = await q<{ n: string }>(
    `SELECT count(*) AS n FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname LIKE 'icf\\_%' AND l.pid <> pg_backend_pid() AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
  );
  const open = await q<{ n: string }>(`SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'`);
  const settings = await q<{ n: string }>(`SELECT count(*) AS n FROM pg_db_role_setting, unnest(setconfig) AS s(setting) WHERE s.setting LIKE '%icf\\_evil%'`);
  return {
    items: items.s,
    people: people.s,
    logRows: Number(log.n),
    sequence: seq.s,
    relations: rels.rows.map((r) => r.r),
    largeObjects: Number(lo.n),
    advisoryLocks: Number(adv.n),
    relationLocks: Number(relLocks.n),
    openTransactions: Number(open.n),
    roleSettings: Number(settings.n),
  };
}

const LABELS: Record<keyof FixtureState, string> = {
  items: 'rows of icf_items changed',
  people: 'rows of icf_people changed',
  logRows: 'icf_log was written (a side effect ran)',
  sequence: 'icf_seq moved',
  relations: 'relations were created or dropped',
  largeObjects: 'a large object was created or removed',
  advisoryLocks: 'an advisory lock is still held',
  relationLocks: 'a lock on an icf_ relation is still held by another session',
  openTransactions: 'another session was left idle in a transaction',
  roleSettings: 'a per-role or per-database setting naming icf_evil was stored',
};

/** The differences between two readings, as sentences; empty when the state is unchanged. */
export function stateChanges(before: FixtureState, after: FixtureState): string[] {
  const out: string[] = [];
  for (const k of Object.keys(LABELS) as Array<keyof FixtureState>) {
    if (JSON.stringify(before[k]) !== JSON.stringify(after[k])) out.push(`${LABELS[k]} (${JSON.stringify(before[k])} → ${JSON.stringify(after[k])})`);
  }
  return out;
}

/**
 * Puts the fixture back as `baseline` was: ends other sessions that hold locks or open transactions
 * on it, rewrites its rows (same sentinel e-mails), resets the sequence, drops relations that were
 * not there, unlinks new large objects.
 */
export async function restore(c: Client, baseline: FixtureState, base: { emails: string[]; token: string; sequence: { last: string; called: boolean }; largeObjects: string[] }): Promise<void> {
  await c.query(
    `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
       AND (state LIKE 'idle in transaction%' OR pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' OR relation IN (SELECT oid FROM pg_class WHERE relname LIKE 'icf\\_%')))`,
  );
  const rels = await c.query<{ r: string; k: string }>(`SELECT c.relname AS r, c.relkind AS k FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind IN ('r','v','m','S','f','p')`);
  for (const r of rels.rows) {
    if (baseline.relations.includes(r.r)) continue;
    const kind = r.k === 'v' ? 'VIEW' : r.k === 'm' ? 'MATERIALIZED VIEW' : r.k === 'S' ? 'SEQUENCE' : r.k === 'f' ? 'FOREIGN TABLE' : 'TABLE';
    await c.query(`DROP ${kind} IF EXISTS public."${r.r.replace(/"/g, '""')}" CASCADE`);
  }
  const stored = await c.query<{ db: string | null; role: string | null }>(
    `SELECT d.datname AS db, r.rolname AS role FROM pg_db_role_setting s CROSS JOIN LATERAL unnest(s.setconfig) AS x(setting)
       LEFT JOIN pg_database d ON d.oid = s.setdatabase LEFT JOIN pg_roles r ON r.oid = s.setrole WHERE x.setting LIKE '%icf\\_evil%'`,
  );
  const ident = (s: string) => `"${s.replace(/"/g, '""')}"`;
  for (const r of stored.rows) {
    if (r.role && r.db) await c.query(`ALTER ROLE ${ident(r.role)} IN DATABASE ${ident(r.db)} RESET search_path`);
    else if (r.role) await c.query(`ALTER ROLE ${ident(r.role)} RESET search_path`);
    else if (r.db) await c.query(`ALTER DATABASE ${ident(r.db)} RESET search_path`);
  }
  await c.query(fixtureSql(base.emails, base.token));
  await c.query('SELECT setval($1, $2, $3)', ['icf_seq', base.sequence.last, base.sequence.called]);
  const lo = await c.query<{ oid: string }>('SELECT oid::text AS oid FROM pg_largeobject_metadata');
  for (const r of lo.rows) if (!base.largeObjects.includes(r.oid)) await c.query('SELECT lo_unlink($1::oid)', [r.oid]);
}
