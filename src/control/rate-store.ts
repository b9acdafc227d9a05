/**
 * The shared rate-limit budget in the control database (table `rate_limits`: key, points consumed in
 * the current window, expire as epoch milliseconds of the control database's clock). Replicas claim
 * blocks of calls from it (src/pipeline/05-rate-limit.ts spends them locally), so the table sees one
 * statement per block, not one per call. The row shape is the one rate-limiter-flexible used, so
 * replicas of the old and the new release share counters during a rolling upgrade.
 */
import type { Pool } from 'pg';

/** Result of one claim. `consumed` and `msLeft` describe the window after the claim. */
export interface BlockClaim {
  /** Calls granted to the caller: `want` or 0 (a claim never takes part of a block). */
  granted: number;
  /** Calls consumed in the current window across all replicas (≤ points). */
  consumed: number;
  /** Milliseconds until the window ends, by the store's clock (≥ 0). */
  msLeft: number;
}

/** Where blocks of a shared budget are claimed from. */
export interface RateBlockStore {
  /**
   * Atomically grants `want` calls (1 ≤ want ≤ points) of the window of `key` when at least `want`
   * remain, starting a window of `windowMs` when none is open. Never lets `consumed` exceed `points`.
   * Rejects with the store's error when the store cannot be reached.
   */
  claim(key: string, want: number, points: number, windowMs: number): Promise<BlockClaim>;
}

const NOW_MS = `(extract(epoch from now()) * 1000)::bigint`;

// One statement: open a window (fresh key or expired window) or add `want` to the open one when the
// budget allows; the WHERE of ON CONFLICT leaves the row alone (and RETURNING empty) otherwise.
const CLAIM_SQL = `
INSERT INTO rate_limits AS r (key, points, expire) VALUES ($1, $2::int, ${NOW_MS} + $4::bigint)
ON CONFLICT (key) DO UPDATE SET
  points = CASE WHEN r.expire IS NULL OR r.expire <= ${NOW_MS} THEN $2::int ELSE r.points + $2::int END,
  expire = CASE WHEN r.expire IS NULL OR r.expire <= ${NOW_MS} THEN EXCLUDED.expire ELSE r.expire END
WHERE r.expire IS NULL OR r.expire <= ${NOW_MS} OR r.points + $2::int <= $3::int
RETURNING points, GREATEST(0, expire - ${NOW_MS})::bigint AS ms_left`;

const PEEK_SQL = `SELECT points, GREATEST(0, expire - ${NOW_MS})::bigint AS ms_left FROM rate_limits WHERE key = $1`;

/** The control-database store. One round trip per granted block, two for a refused claim. */
export class PostgresRateBlockStore implements RateBlockStore {
  constructor(private readonly pool: Pool) {}

  async claim(key: string, want: number, points: number, windowMs: number): Promise<BlockClaim> {
    const r = await this.pool.query<{ points: number; ms_left: string }>(CLAIM_SQL, [key, want, points, windowMs]);
    if (r.rows.length) return { granted: want, consumed: r.rows[0].points, msLeft: Number(r.rows[0].ms_left) };
    const p = await this.pool.query<{ points: number; ms_left: string }>(PEEK_SQL, [key]);
    const row = p.rows[0];
    // The window may have closed between the two statements: report it as empty so the caller retries.
    if (!row || Number(row.ms_left) === 0) return { granted: 0, consumed: 0, msLeft: 0 };
    return { granted: 0, consumed: Math.min(points, row.points), msLeft: Number(row.ms_left) };
  }
}

/** A process-local store with the same semantics (a single process, and tests of several replicas sharing one store). */
export class MemoryRateBlockStore implements RateBlockStore {
  private readonly rows = new Map<string, { points: number; expire: number }>();
  constructor(private readonly clock: () => number = Date.now) {}

  async claim(key: string, want: number, points: number, windowMs: number): Promise<BlockClaim> {
    const now = this.clock();
    const row = this.rows.get(key);
    if (!row || row.expire <= now) {
      this.rows.set(key, { points: want, expire: now + windowMs });
      return { granted: want, consumed: want, msLeft: windowMs };
    }
    if (row.points + want <= points) {
      row.points += want;
      return { granted: want, consumed: row.points, msLeft: row.expire - now };
    }
    return { granted: 0, consumed: Math.min(points, row.points), msLeft: row.expire - now };
  }
}
