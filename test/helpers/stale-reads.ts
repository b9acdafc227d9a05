/**
 * Reads through the gateway for the function-guard tests (tasks hg1, hg2; red team rt42b): what an
 * `interlock_query` on source `chinook` answered, and the same once the catalogue is current again.
 */
import { scanSource } from '../../src/control/scan';
import { callTool, type GovernedEnv } from './governed';

/** The refusal `{ code }` of `sql` on `chinook`, or the rows when the call was served (HTTP 200 either way). */
export async function queryOutcome(env: GovernedEnv, sql: string): Promise<unknown> {
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql }, env.apiKey);
  if (r.status !== 200) throw new Error(`HTTP ${r.status}`);
  const res = r.body.result;
  if (res.isError) return { code: res.structuredContent.code };
  return res.structuredContent.rows;
}

/**
 * The rows of `sql` once the source's catalogue is current again: a rescan an earlier test caused
 * may still run, or may have recorded a state that test undid (then its analysis, not the guard,
 * refuses: the source is scanned again here). The waits (100 ms, at most 50) only stage it.
 */
export async function settledOutcome(env: GovernedEnv, sql: string): Promise<unknown> {
  for (let i = 0; ; i++) {
    const r = await queryOutcome(env, sql);
    if (i >= 50 || Array.isArray(r)) return r;
    if ((r as { code?: string }).code !== 'catalog_stale') await scanSource(env.db, 'chinook');
    await new Promise((res) => setTimeout(res, 100));
  }
}
