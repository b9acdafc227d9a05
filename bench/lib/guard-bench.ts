/**
 * The in-process guard benches' set-up (bench/guard-merge-cost.ts, bench/guard-cuts.ts): a Chinook
 * source database (test/integration/sources/source-db.ts, plus `extraSql` run as its owner), a
 * connector on one pooled reader connection, the reader's catalogue scan, and the point read
 * `SELECT … FROM customer WHERE customer_id = $1` with its analysis and the function guard the
 * connector makes for it (`=`). Close `c` and drop `src` when done.
 * @throws Error when the analysis refuses the point read or makes no function guard for it
 */
import { createSourceDb, type SourceDb } from '../../test/integration/sources/source-db';
import { PostgresSourceConnector } from '../../src/sources/postgres/connector';
import { scanCatalog } from '../../src/sources/postgres/catalog';
import type { ReadGuard } from '../../src/sources/postgres/portal-read';
import type { SourceCatalog } from '../../src/sql/catalog-types';
import { analyzeSql } from '../../src/sql/analyze';

export interface GuardBench {
  src: SourceDb;
  c: PostgresSourceConnector;
  cat: SourceCatalog;
  /** The point read's text (one parameter, a customer id 1–59). */
  sql: string;
  /** The connector's function guard of the point read (not null). */
  fn: ReadGuard;
}

export async function openGuardBench(prefix: string, extraSql?: string): Promise<GuardBench> {
  const src = await createSourceDb(prefix, extraSql ? { extraSql } : {});
  const c = new PostgresSourceConnector(`${prefix}_c`, src.settings({ pool_size: 1, max_concurrent_per_identity: 1 }));
  try {
    const cat = await c.withReader((client) => scanCatalog(client));
    const sql = 'SELECT customer_id, first_name, last_name, email FROM customer WHERE customer_id = $1';
    const a = analyzeSql(sql, cat);
    if (!a.ok) throw new Error('analysis refused');
    const fn = c.functionGuard(cat, a);
    if (!fn) throw new Error('no function guard for a statement using =');
    return { src, c, cat, sql, fn };
  } catch (err) {
    await c.close();
    await src.drop();
    throw err;
  }
}
