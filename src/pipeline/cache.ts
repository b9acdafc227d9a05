/**
 * The read cache (issue 3 item 9): only reads without volatile or time-dependent functions; the key
 * binds source, statement text, parameters, row cap and the caller's effective grant/policy
 * fingerprint (src/pipeline/query.ts cacheKey adds the catalogue snapshot and the active policies by
 * content), so two identities with different access never share an entry, and a hit is served
 * without the live hierarchy check (issue 28, docs/architecture.md step 6½). Entries hold results
 * AFTER redaction. An executed write bumps its source's generation, which orphans every entry of
 * that source; other replicas learn of it through PostgreSQL NOTIFY (see invalidation.ts).
 */
import crypto, { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { TruncatedBy } from './07-execute';
import { rowsText } from './rows-json';

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

  constructor(opts: ResultCacheOptions = { ttlMs: 30_000, maxBytes: 32 * 1024 * 1024 }) {
    // lru-cache reads ttl 0 as "no expiry"; for InterLock 0 means "cache disabled".
    this.enabled = opts.ttlMs > 0 && opts.maxBytes > 0;
    this.lru = new LRUCache<string, CachedResult>({
      ttl: Math.max(1, opts.ttlMs),
      maxSize: Math.max(1, opts.maxBytes),
      sizeCalculation: (v) => Math.max(1, Buffer.byteLength(rowsText(v.rows))),
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

  set(key: string, value: CachedResult): void {
    if (!this.enabled) return;
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
