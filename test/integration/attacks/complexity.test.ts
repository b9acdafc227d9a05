/**
 * Issue 10, Build 3: over-complex statements are refused before anything is sent. The 3,000-CTE
 * chain once kept a backend busy for ~17 minutes, ignoring statement_timeout, cancel and
 * pg_terminate_backend; now it is answered forbidden/statement_too_complex and never reaches
 * PostgreSQL (no backend of the source shows it as its last statement), while a statement just
 * inside the limits runs. The circuit stays closed for everyone.
 */
import { randomBytes } from 'node:crypto';
import { startAttackEnv, query, type AttackEnv } from './harness';

let a: AttackEnv;
beforeAll(async () => {
  a = await startAttackEnv();
}, 120_000);
afterAll(async () => a?.close());

const chain = (n: number, marker: string) =>
  `/* ${marker} */ WITH ${Array.from({ length: n }, (_, i) => (i === 0 ? 'c0 AS (SELECT 1 AS x)' : `c${i} AS (SELECT x FROM c${i - 1})`)).join(', ')} SELECT * FROM c${n - 1}`;

/** Whether any backend of the source database has seen a statement carrying `marker` (pg_stat_activity keeps each backend's last statement). */
async function reachedPostgres(marker: string): Promise<boolean> {
  const r = await a.admin.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND query LIKE $1 AND pid <> pg_backend_pid()', [`%${marker}%`]);
  return r.rows[0].n > 0;
}

describe('complexity bounds (issue 10, Build 3)', () => {
  test('the 3,000-chained-CTE statement (~94 KB) is refused as statement_too_complex and never sent', async () => {
    const marker = `cx_${randomBytes(6).toString('hex')}`;
    const sql = chain(3000, marker);
    expect(sql.length).toBeGreaterThan(90_000);
    const r = await query(a, sql);
    expect(r.kind).toBe('refused');
    expect(r.sc).toEqual({
      request_id: expect.stringMatching(/^req_/),
      status: 'forbidden',
      code: 'statement_too_complex',
      message: 'statement too complex: more than 64 WITH items (CTEs) (source setting complexity.max_ctes); split it into smaller statements',
    });
    expect(await reachedPostgres(marker)).toBe(false);
    // The source stays healthy for everyone.
    const ok = await query(a, 'SELECT count(*) AS n FROM track');
    expect(ok.kind).toBe('rows');
    expect(ok.rows).toEqual([{ n: 3503 }]);
  }, 60_000);

  test('a chain inside the limits runs (so the check above can fail) and reaches PostgreSQL', async () => {
    const marker = `cx_${randomBytes(6).toString('hex')}`;
    const r = await query(a, chain(60, marker));
    expect(r.kind).toBe('rows');
    expect(r.rows).toEqual([{ x: 1 }]);
    expect(await reachedPostgres(marker)).toBe(true);
  }, 60_000);

  test.each([
    ['deep nesting', `SELECT ${'(SELECT '.repeat(40)}1${')'.repeat(40)} AS v`, 'more than 32 levels of nested queries (source setting complexity.max_subquery_depth)'],
    ['a huge UNION chain', Array.from({ length: 600 }, (_, i) => `SELECT ${i} AS v`).join(' UNION ALL '), 'more than 256 UNION/INTERSECT/EXCEPT arms (source setting complexity.max_set_operation_arms)'],
    ['a 100-way self-join', `SELECT 1 AS v FROM track t0 ${Array.from({ length: 100 }, (_, i) => `JOIN track t${i + 1} ON true`).join(' ')}`, 'more than 64 levels of nested JOINs (source setting complexity.max_join_depth)'],
    ['300 FROM items', `SELECT 1 AS v FROM ${Array.from({ length: 300 }, (_, i) => `genre g${i}`).join(', ')}`, 'more than 256 FROM items and joins (source setting complexity.max_range_table_entries)'],
  ])('%s is refused with the limit named', async (_name, sql, what) => {
    const r = await query(a, sql);
    expect(r.sc).toEqual({ request_id: expect.stringMatching(/^req_/), status: 'forbidden', code: 'statement_too_complex', message: `statement too complex: ${what}; split it into smaller statements` });
  }, 60_000);

});
