/**
 * The plan of a queued write for the console (issue 14, item 1): `EXPLAIN` without ANALYZE, run
 * as the source's writer role (the role that would execute it), inside a READ ONLY transaction that
 * is rolled back, with a 5 s statement timeout; the statement goes over the extended protocol, so
 * it is exactly one statement, on a connection that holds the pinned session settings. EXPLAIN alone plans the statement and runs
 * nothing; the read-only transaction is a second guard. Errors come back as operator text (this
 * is the operators' console, never an agent's answer).
 */
import type pg from 'pg';
import { connectSourceClient, type SourceRecord } from '../control/sources';

/** A plan, or why there is none. */
export type PlanResult = { ok: true; lines: string[] } | { ok: false; reason: string };

/** Operator text for a failure: PostgreSQL's SQLSTATE and message, or the pinned-settings mismatch. */
function reasonOf(err: unknown): string {
  const e = err as { code?: string; message?: string };
  const sqlstate = e.code && /^[0-9A-Z]{5}$/.test(e.code) ? `SQLSTATE ${e.code}: ` : '';
  return `${sqlstate}${e.message ?? 'the plan could not be made'}`;
}

/**
 * EXPLAIN (FORMAT TEXT) of `sql` with `params` as the writer of `source`, on a connection verified to
 * hold the pinned session settings, the statement sent over the extended protocol (issue 22 items 2, 3).
 */
export async function explainAsWriter(source: SourceRecord, sql: string, params: unknown[]): Promise<PlanResult> {
  if (source.type !== 'postgres') return { ok: false, reason: 'only PostgreSQL sources have a plan' };
  if (!source.settings.writer) return { ok: false, reason: 'the source has no writer role configured' };
  let c: pg.Client;
  try {
    c = await connectSourceClient(source.settings, 'writer', { connectionTimeoutMillis: 5_000, application_name: 'interlock-console-plan' });
  } catch (err) {
    return { ok: false, reason: reasonOf(err) };
  }
  try {
    await c.query('BEGIN READ ONLY');
    await c.query("SET LOCAL statement_timeout = '5s'");
    // The agent's text goes over the extended protocol even without parameters (issue 22 item 3):
    // one Parse holds one statement, so `…; COMMIT; DELETE …` is a syntax error, never three commands.
    const r = await c.query<{ 'QUERY PLAN': string }>({ text: `EXPLAIN ${sql}`, values: params, queryMode: 'extended' } as pg.QueryConfig);
    return { ok: true, lines: r.rows.map((x) => x['QUERY PLAN']) };
  } catch (err) {
    return { ok: false, reason: reasonOf(err) };
  } finally {
    await c.query('ROLLBACK').catch(() => undefined);
    await c.end().catch(() => undefined);
  }
}
