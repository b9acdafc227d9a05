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
 */
import { CONCURRENCY_RETRY_MS, IdentitySlots } from '../sources/postgres/fair-share';
import { SourceError } from '../sources/postgres/errors';

/** Discovery searches one identity runs at once on a gateway process. */
export const DISCOVERY_SEARCHES_PER_IDENTITY = 2;
/** Discovery searches all identities run at once on a gateway process (under half of the default control pool of 10). */
export const DISCOVERY_SEARCHES_TOTAL = 4;
/** Longest wait for a search slot (ms) before the search is refused `concurrency_limited`. */
export const DISCOVERY_SLOT_WAIT_MS = 2_000;

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
   */
  constructor(perIdentity = DISCOVERY_SEARCHES_PER_IDENTITY, total = DISCOVERY_SEARCHES_TOTAL, waitMs = DISCOVERY_SLOT_WAIT_MS) {
    this.own = new IdentitySlots(perIdentity, waitMs);
    this.all = new IdentitySlots(total, waitMs);
  }

  /**
   * Runs `search` holding one of `identityId`'s slots and one of the process's, and gives both
   * back when it settles. Resolves to `{ ok: true, value }`, or `{ ok: false, retryAfterMs }` when
   * a slot did not free within the wait (the search did not run). Rejects with what `search`
   * rejects with, or SourceError `cancelled` when `signal` aborted while waiting.
   */
  async run<T>(identityId: string, search: () => Promise<T>, signal?: AbortSignal): Promise<{ ok: true; value: T } | { ok: false; retryAfterMs: number }> {
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
      return { ok: true, value: await search() };
    } finally {
      releaseAll();
      releaseOwn();
    }
  }
}
