/**
 * The read cache (issue 3 item 9): only reads without volatile or time-dependent functions; the key
 * binds source, statement text, parameters, row cap and the caller's effective grant/policy
 * fingerprint (src/pipeline/query.ts cacheKey adds the catalogue snapshot and the active policies by
 * content), so two identities with different access never share an entry, and a hit is served
 * without the live hierarchy check (issue 28, docs/architecture.md step 6½). Entries hold results
 * AFTER redaction. An executed write bumps its source's generation, which orphans every entry of
 * that source; other replicas learn of it through PostgreSQL NOTIFY (see invalidation.ts). Every
 * hit on an entry is answered by one outcome object (hitOutcome), whose final bytes the wire
 * serialiser keeps when the entry is small (issue 28: a hit serialises nothing but its id).
 */
import crypto, { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { TruncatedBy } from './07-execute';
import { rowsText } from './rows-json';
import type { ToolOutcome } from './types';

/** PostgreSQL NOTIFY channel on which an executed write invalidates its source's cached reads on every replica (payload: source id). */
export const CACHE_CHANNEL = 'interlock_cache';

/** crypto.hash (Node ≥ 20.12): one call instead of a Hash object per key; createHash before. */
const oneShotHash = (crypto as unknown as { hash?: (algorithm: string, data: string, encoding: 'base64url') => string }).hash;

/** A cached, already-redacted read result. */
export interface CachedResult {
  rows: Record<string, unknown>[];
  truncated: boolean;
  truncatedBy?: TruncatedBy | null;
  maskedColumns: string[];
}

/** Cache limits: time to live in milliseconds and a byte budget for all entries. */
export interface ResultCacheOptions {
  ttlMs: number;
  maxBytes: number;
}

/** The per-process result cache. */
export class ResultCache {
  private readonly lru: LRUCache<string, CachedResult>;
  private readonly generations = new Map<string, number>();
  /** Bumped by clear(), so a read keyed before it cannot store under a key read after it. */
  private epoch = 0;
  hits = 0;
  misses = 0;

  /** False when configured with ttlMs 0 or maxBytes 0: nothing is stored and every lookup misses. */
  readonly enabled: boolean;

  /** Milliseconds between two sweeps of expired entries (the time to live; see set()). */
  private readonly sweepEveryMs: number;
  /** performance.now() at or after which the next set() sweeps expired entries first. */
  private nextSweepAt = 0;
  /** Stores since the last sweep: a sweep waits for at least half the entries held (see set()). */
  private storesSinceSweep = 0;

  constructor(opts: ResultCacheOptions = { ttlMs: 30_000, maxBytes: 32 * 1024 * 1024 }) {
    // lru-cache reads ttl 0 as "no expiry"; for InterLock 0 means "cache disabled".
    this.enabled = opts.ttlMs > 0 && opts.maxBytes > 0;
    this.sweepEveryMs = Math.max(1, opts.ttlMs);
    // ttlResolution 0: every staleness test reads performance.now() itself (~50 ns). lru-cache's default
    // (1) keeps the time it read and arms a 1 ms setTimeout to forget it, which at a call rate above
    // 1,000/s is one timer set, fired and collected per uncached read (issue 28, p49), and lets an
    // expired entry be served while that timer is late (a busy event loop): with 0 an entry is never
    // answered past its time to live.
    this.lru = new LRUCache<string, CachedResult>({
      ttl: Math.max(1, opts.ttlMs),
      ttlResolution: 0,
      maxSize: Math.max(1, opts.maxBytes),
      sizeCalculation: (v) => Math.max(1, entryBytes(v)),
    });
  }

  /**
   * The cache key for one read: sha-256 (base64url, 43 characters) over the JSON text of its parts
   * and the source's generation, in one crypto.hash call where Node has it (no Hash object per
   * call: issue 28 item 3). A key the size of its parts was measured and not kept: a point read's
   * parts are ~1 KB (the access fingerprint), which made the store's lookups and the heap dearer
   * than the hash (bench/hot-path-parts.ts, RESULTS.md).
   */
  key(parts: { sourceId: string; sql: string; params: unknown[]; maxRows: number; accessFingerprint: string }): string {
    const gen = this.generations.get(parts.sourceId) ?? 0;
    const text = JSON.stringify([parts.sourceId, gen, this.epoch, parts.sql, parts.params, parts.maxRows, parts.accessFingerprint]);
    return oneShotHash ? oneShotHash('sha256', text, 'base64url') : createHash('sha256').update(text).digest('base64url');
  }

  get(key: string): CachedResult | undefined {
    const v = this.lru.get(key);
    if (v) this.hits++;
    else this.misses++;
    return v;
  }

  /**
   * Stores `value` under `key` (nothing when the cache is disabled). At most once per time to live,
   * and only after at least half as many stores as entries held, a store first drops the entries
   * whose time to live ran out (lru-cache's purgeStale, by its own clock: exactly the entries a get()
   * would no longer return), so an expired entry no longer stays until its key is read again or the
   * byte budget evicts it (issue 28, h28k: at a short time to live every stored read outlived a
   * young-generation collection and was promoted, then collected as old-generation garbage). What
   * get() answers is unchanged. A sweep walks every entry held; waiting for half as many stores
   * bounds that to about two entries visited per store, also in a synchronous burst of stores.
   */
  set(key: string, value: CachedResult): void {
    if (!this.enabled) return;
    if (++this.storesSinceSweep * 2 >= this.lru.size) {
      const now = performance.now();
      if (now >= this.nextSweepAt) {
        this.nextSweepAt = now + this.sweepEveryMs;
        this.storesSinceSweep = 0;
        if (this.lru.size > 0) this.lru.purgeStale();
      }
    }
    this.lru.set(key, value);
  }

  /** Orphans every entry of the source (after a write executed there). */
  invalidateSource(sourceId: string): void {
    this.generations.set(sourceId, (this.generations.get(sourceId) ?? 0) + 1);
  }

  /** Drops every entry (the invalidation listener reconnected: invalidations sent meanwhile were lost; issue 29). */
  clear(): void {
    this.epoch++;
    this.lru.clear();
  }

  /** Every entry currently held (diagnostics and tests: proves what the cache stores). */
  values(): CachedResult[] {
    return [...this.lru.values()];
  }

  /** Entries currently held. */
  get size(): number {
    return this.lru.size;
  }
}

/** The hit answer made once per stored entry (hitOutcome); dropped with the entry (weakly held). */
const hitOutcomes = new WeakMap<CachedResult, ToolOutcome>();
/** Outcomes from hitOutcome(): shared by every hit on their entry, never edited. */
const storedOutcomes = new WeakSet<ToolOutcome>();

/**
 * The answer to every hit on `entry` (issue 28, the cached read's own costs): `build()` runs on the
 * first hit only, and the same outcome object is returned to every later hit on that entry, so the
 * wire serialiser can keep its final bytes (isStoredOutcome; src/protocol/tool-results.ts renders it
 * once) when its rows' text is at most STORED_ANSWER_MAX_CHARS. The outcome must therefore be
 * identical for every caller of the entry: a query result whose content and structuredContent
 * depend on the entry alone (rows, truncation, masks, `cached: true`),
 * never on the call (request id, audit facts). Callers must not edit it.
 */
export function hitOutcome(entry: CachedResult, build: () => ToolOutcome): ToolOutcome {
  let o = hitOutcomes.get(entry);
  if (!o) {
    o = build();
    hitOutcomes.set(entry, o);
    if (rowsText(entry.rows).length <= STORED_ANSWER_MAX_CHARS) storedOutcomes.add(o);
  }
  return o;
}

/**
 * Rows texts up to this many characters get their answer's final bytes kept (isStoredOutcome); a
 * larger answer is serialised per hit, as before, since its kept bytes would cost memory several
 * times its rows' text (the escaped text item and the structured rows, as a string and as UTF-8).
 */
export const STORED_ANSWER_MAX_CHARS = 16 * 1024;

/**
 * What an entry counts against the cache's byte budget: the UTF-8 bytes of its rows' text, and five
 * times that for an answer small enough to be kept as final bytes on its first hit (the serialised
 * envelope as a string and as UTF-8, each holding the rows twice).
 */
function entryBytes(v: CachedResult): number {
  const text = rowsText(v.rows);
  const bytes = Buffer.byteLength(text);
  return text.length <= STORED_ANSWER_MAX_CHARS ? bytes * 5 : bytes;
}

/** True for an outcome from hitOutcome(): the same object answers every hit on its entry, so its rendering may be kept. */
export function isStoredOutcome(o: ToolOutcome): boolean {
  return storedOutcomes.has(o);
}
