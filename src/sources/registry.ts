/**
 * Per-source connector cache: one PostgresSourceConnector (pools + circuit breaker) per source id,
 * reused across calls so the hot path never opens pools, and recreated when the source's settings
 * change (compared by a SHA-256 of their canonical JSON; the hash stays in memory only). The hash of
 * a settings object is computed once per object (the store hands out the same record until the
 * source changes, and a change is a new object), so the hot path does no serialising or hashing.
 */
import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import { PostgresSourceConnector, type BreakerState, type PoolStats, type PostgresSourceSettings } from './postgres/connector';

/** Canonical JSON: object keys sorted, `undefined` members dropped (so equal settings hash equally). */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map((v) => (v === undefined ? 'null' : canonicalJson(v))).join(',')}]`;
  const obj = value as Record<string, unknown>;
  const keys = Object.keys(obj)
    .filter((k) => obj[k] !== undefined)
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`;
}

/** SHA-256 (hex) of the canonical JSON of a source's settings. */
export function settingsHash(settings: PostgresSourceSettings): string {
  return createHash('sha256').update(canonicalJson(settings)).digest('hex');
}

/** Hash per settings object: settings objects are treated as immutable once handed to the registry. */
const hashes = new WeakMap<object, string>();

function hashOf(settings: PostgresSourceSettings): string {
  let h = hashes.get(settings);
  if (h === undefined) hashes.set(settings, (h = settingsHash(settings)));
  return h;
}

/** Registry options: a logger handed to each connector, and a breaker observer told which source changed. */
export interface RegistryOptions {
  logger?: Logger;
  onBreakerChange?(sourceId: string, state: BreakerState): void;
}

interface Entry {
  hash: string;
  /** The settings object the connector was last looked up with (identity fast path). */
  settings: PostgresSourceSettings;
  connector: PostgresSourceConnector;
}

/** Caches connectors per source id. */
export class SourceConnectorRegistry {
  private readonly entries = new Map<string, Entry>();
  private readonly retiring = new Set<Promise<void>>();

  constructor(private readonly opts: RegistryOptions = {}) {}

  /**
   * The connector of `sourceId` for `settings`: the cached one when the settings are unchanged,
   * otherwise a new one (the old one is closed in the background once its connections in use are
   * returned; its in-flight calls finish). Throws SourceError 'execution_failed' for invalid settings
   * (the cached connector, if any, is kept). `settings` must not be mutated afterwards (pass a new
   * object for new settings): its hash is remembered per object.
   */
  get(sourceId: string, settings: PostgresSourceSettings): PostgresSourceConnector {
    const cur = this.entries.get(sourceId);
    if (cur && cur.settings === settings) return cur.connector;
    const hash = hashOf(settings);
    if (cur && cur.hash === hash) {
      cur.settings = settings;
      return cur.connector;
    }
    const connector = new PostgresSourceConnector(sourceId, settings, {
      logger: this.opts.logger,
      onBreakerChange: this.opts.onBreakerChange ? (state) => this.opts.onBreakerChange!(sourceId, state) : undefined,
    });
    this.entries.set(sourceId, { hash, settings, connector });
    if (cur) this.retire(cur.connector);
    return connector;
  }

  /** Breaker state per cached source id ('closed' | 'open' | 'half_open'). */
  states(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const [id, e] of this.entries) out[id] = e.connector.breakerState();
    return out;
  }

  /**
   * Reader pool occupancy per cached source id (registered sources only: a connector is cached
   * only for a source the pipeline resolved): `size` most connections, `inUse` checked out,
   * `waiting` callers waiting for a pooled connection, `identityWaiting` calls waiting for one of
   * their identity's slots (max_concurrent_per_identity).
   */
  poolStats(): Record<string, PoolStats & { identityWaiting: number }> {
    const out: Record<string, PoolStats & { identityWaiting: number }> = {};
    for (const [id, e] of this.entries) out[id] = e.connector.poolStats();
    return out;
  }

  /** Closes and forgets one source's connector (e.g. when the source is disabled or deleted). */
  async remove(sourceId: string): Promise<void> {
    const cur = this.entries.get(sourceId);
    if (!cur) return;
    this.entries.delete(sourceId);
    await cur.connector.close();
  }

  /** Closes every connector (and waits for those being retired). */
  async closeAll(): Promise<void> {
    const all = [...this.entries.values()].map((e) => e.connector.close());
    this.entries.clear();
    await Promise.all([...all, ...this.retiring]);
  }

  private retire(c: PostgresSourceConnector): void {
    const p = c
      .close()
      .catch((err: unknown) => this.opts.logger?.warn({ err, source_id: c.sourceId }, 'closing a replaced connector failed'))
      .finally(() => this.retiring.delete(p));
    this.retiring.add(p);
  }
}
