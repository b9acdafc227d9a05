/**
 * The plan of a queued write for the console (issue 14, item 1): `EXPLAIN` without ANALYZE, run
 * as the source's writer role (the role that would execute it), inside a READ ONLY transaction that
 * is rolled back, with a 5 s statement timeout. EXPLAIN alone plans the statement and runs
 * nothing; the read-only transaction is a second guard. Errors come back as operator text (this
 * is the operators' console, never an agent's answer).
 */
import pg from 'pg';
import { postgresClientConfig, type SourceRecord } from '../control/sources';

/** A plan, or why there is none. */
export type PlanResult = { ok: true; lines: string[] } | { ok: false; reason: string };

/** EXPLAIN (FORMAT TEXT) of `sql` with `params` as the writer of `source`. */
export async function explainAsWriter(source: SourceRecord, sql: string, params: unknown[]): Promise<PlanResult> {
  if (source.type !== 'postgres') return { ok: false, reason: 'only PostgreSQL sources have a plan' };
  if (!source.settings.writer) return { ok: false, reason: 'the source has no writer role configured' };
  const c = new pg.Client(postgresClientConfig(source.settings, 'writer', { connectionTimeoutMillis: 5_000, application_name: 'interlock-console-plan' }));
  c.on('error', () => undefined);
  try {
    await c.connect();
    await c.query('BEGIN READ ONLY');
    await c.query("SET LOCAL statement_timeout = '5s'");
    const r = await c.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${sql}`, params);
    return { ok: true, lines: r.rows.map((x) => x['QUERY PLAN']) };
  } catch (err) {
    const e = err as { code?: string; message?: string };
    return { ok: false, reason: `${e.code ? `SQLSTATE ${e.code}: ` : ''}${e.message ?? 'the plan could not be made'}` };
  } finally {
    await c.query('ROLLBACK').catch(() => undefined);
    await c.end().catch(() => undefined);
  }
}
