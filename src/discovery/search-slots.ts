/**
 * Fair sharing of the control database's pool by discovery searches (red team rt49b D1).
 *
 * interlock_discover and interlock_related_documents rank the index in the control database, on
 * the gateway's one control pool (database.pool_size, 10 by default), which every call also needs
 * (rate-limit blocks, identity and key look-ups, approvals). A search whose query ORs many common
 * words ranks every document of the source: about 2 s on 10,000 documents, more on more, and no
 * statement_timeout applies. One identity with a few dozen such searches in flight held every
 * connection of the pool, and another identity's `SELECT 1` waited 11–24 s for one.
 *
 * So each search (its ranking statements, not the cheap scope look-ups before it) takes a slot:
 * at most DISCOVERY_SEARCHES_PER_IDENTITY of one identity and DISCOVERY_SEARCHES_TOTAL of all
 * identities run at once per gateway process; beyond, a search waits up to DISCOVERY_SLOT_WAIT_MS
 * and is then refused `concurrency_limited` (retry_after_ms CONCURRENCY_RETRY_MS), as a statement
 * beyond a source's per-identity cap is (src/sources/postgres/fair-share.ts, whose slots these are).
 * The rest of the control pool stays for every other call.
 *
 * And each statement of a search runs in its own read-only transaction under SET LOCAL
 * statement_timeout (DISCOVERY_SEARCH_TIMEOUT_MS, 15 s by default), so on a very large index a slot
 * (and its control connection) is held at most that long per statement; a search cut by it is
 * refused `statement_timeout` (task lows49b; was left open by rt49b D1). The control pool itself
 * keeps no statement_timeout: only the searches are bounded.
 */
import type pg from 'pg';
import { CONCURRENCY_RETRY_MS, IdentitySlots } from '../sources/postgres/fair-share';
import { SourceError } from '../sources/postgres/errors';
import type { Queryable } from './search';

/** Discovery searches one identity runs at once on a gateway process. */
export const DISCOVERY_SEARCHES_PER_IDENTITY = 2;
/** Discovery searches all identities run at once on a gateway process (under half of the default control pool of 10). */
export const DISCOVERY_SEARCHES_TOTAL = 4;
/** Longest wait for a search slot (ms) before the search is refused `concurrency_limited`. */
export const DISCOVERY_SLOT_WAIT_MS = 2_000;

/** Longest one statement of a discovery search runs (ms) before PostgreSQL cancels it (SET LOCAL statement_timeout); as a source's default statement_timeout_ms. */
export const DISCOVERY_SEARCH_TIMEOUT_MS = 15_000;

/** SQLSTATE query_canceled: what PostgreSQL raises when statement_timeout cuts a statement. */
const QUERY_CANCELED = '57014';

/**
 * Thrown by a statement of boundedQueryable that ran past its statement_timeout (SQLSTATE 57014;
 * a cancel by an operator, pg_cancel_backend, reads the same). `timeoutMs` is the bound, in ms.
 */
export class DiscoverySearchTimeout extends Error {
  constructor(readonly timeoutMs: number) {
    super(`discovery search statement cancelled after ${timeoutMs} ms (statement_timeout)`);
    this.name = 'DiscoverySearchTimeout';
  }
}

/**
 * `pool` as a Queryable whose every statement runs on its own connection in its own read-only
 * transaction under `SET LOCAL statement_timeout = timeoutMs` (ms, ≥ 1), so the bound ends with the
 * transaction and the pool's sessions keep none. Resolves to the statement's pg result; rejects
 * with DiscoverySearchTimeout when the bound cut it, else with the driver's error (the connection
 * is discarded when its BEGIN or ROLLBACK failed).
 */
export function boundedQueryable(pool: Pick<pg.Pool, 'connect'>, timeoutMs: number): Queryable {
  const bound = Math.max(1, Math.floor(timeoutMs));
  const query = async (text: string, values?: unknown[]): Promise<pg.QueryResult> => {
    const client = await pool.connect();
    let discard: Error | undefined;
    try {
      try {
        await client.query(`BEGIN READ ONLY; SET LOCAL statement_timeout = ${bound}`);
      } catch (err) {
        discard = err as Error;
        throw err;
      }
      try {
        const r = await client.query(text, values);
        await client.query('COMMIT');
        return r;
      } catch (err) {
        await client.query('ROLLBACK').catch((e: Error) => (discard = e));
        if ((err as { code?: unknown }).code === QUERY_CANCELED) throw new DiscoverySearchTimeout(bound);
        throw err;
      }
    } finally {
      client.release(discard);
    }
  };
  return { query } as unknown as Queryable;
}

/** What DiscoverySearchSlots.run resolves to: the search's value, no slot in time (`retryAfterMs`), or the statement bound cut the search (`timeoutMs`). */
export type SearchRun<T> = { ok: true; value: T } | { ok: false; retryAfterMs: number } | { ok: false; timeoutMs: number };

/** Key of the process-wide slots in the second IdentitySlots (not an identity id: those are UUIDs). */
const ALL = '*';

/** The search slots of one gateway process (shared by interlock_discover and interlock_related_documents). */
export class DiscoverySearchSlots {
  private readonly own: IdentitySlots;
  private readonly all: IdentitySlots;

  /**
   * @param perIdentity searches one identity may run at once (≥ 1)
   * @param total searches all identities may run at once (≥ perIdentity)
   * @param waitMs longest wait for each of the two slots (ms)
   * @param timeoutMs longest run of each statement of a search (ms, ≥ 1; SET LOCAL statement_timeout)
   */
  constructor(perIdentity = DISCOVERY_SEARCHES_PER_IDENTITY, total = DISCOVERY_SEARCHES_TOTAL, waitMs = DISCOVERY_SLOT_WAIT_MS, readonly timeoutMs = DISCOVERY_SEARCH_TIMEOUT_MS) {
    this.own = new IdentitySlots(perIdentity, waitMs);
    this.all = new IdentitySlots(total, waitMs);
  }

  /**
   * Runs `search` holding one of `identityId`'s slots and one of the process's, and gives both
   * back when it settles; `search` gets `pool` bounded by boundedQueryable (this.timeoutMs) and
   * must run its ranking statements on it. Resolves to `{ ok: true, value }`, `{ ok: false,
   * retryAfterMs }` when a slot did not free within the wait (the search did not run), or `{ ok:
   * false, timeoutMs }` when a statement ran past the bound and was cancelled. Rejects with what
   * `search` rejects with otherwise, or SourceError `cancelled` when `signal` aborted while waiting.
   */
  async run<T>(identityId: string, pool: Pick<pg.Pool, 'connect'>, search: (db: Queryable) => Promise<T>, signal?: AbortSignal): Promise<SearchRun<T>> {
    let releaseOwn: (() => void) | undefined;
    let releaseAll: (() => void) | undefined;
    try {
      releaseOwn = await this.own.acquire(identityId, signal);
      releaseAll = await this.all.acquire(ALL, signal);
    } catch (err) {
      releaseOwn?.();
      if (err instanceof SourceError && err.code === 'concurrency_limited') return { ok: false, retryAfterMs: err.retryAfterMs ?? CONCURRENCY_RETRY_MS };
      throw err;
    }
    try {
      return { ok: true, value: await search(boundedQueryable(pool, this.timeoutMs)) };
    } catch (err) {
      if (err instanceof DiscoverySearchTimeout) return { ok: false, timeoutMs: err.timeoutMs };
      throw err;
    } finally {
      releaseAll();
      releaseOwn();
    }
  }
}
