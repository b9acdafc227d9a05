/**
 * API keys and the control-database IdentityResolver (pipeline step 1). decisions.md "Governance
 * model": keys are random (256 bits), stored only as HMAC-SHA-256(pepper, secret), shown once at
 * creation, revocable, optionally expiring.
 *
 * Secret format: "ilk_" + 43 base64url characters (32 random bytes). The display prefix is "ilk_"
 * plus the first 6 characters of the random part (36 of the 256 bits; 220 stay secret).
 */
import crypto from 'node:crypto';
import type { Logger } from 'pino';
import type { Identity, IdentityResolver } from './identities';
import { ScopedDigests } from './scoped-digest';
import { getKeyPepper, isUniqueViolation, withTransaction, type ControlDb } from './db';
import { recordChange, revokeCredentialRow, type ChangeActor } from './change-audit';
import { ConflictError, NotFoundError, ValidationError } from './errors';
import { iso, newKeyId } from './ids';

/** Shape of every API key secret. */
export const API_KEY_PATTERN = /^ilk_[A-Za-z0-9_-]{43}$/;
/** Random bytes in a secret (256 bits). */
export const API_KEY_RANDOM_BYTES = 32;

/** A key as listed: never the secret or its hash. Times are ISO-8601 UTC. */
export interface ApiKeyRecord {
  id: string;
  identityId: string;
  identityName: string;
  /** Display prefix, e.g. "ilk_Q2x9aB". */
  prefix: string;
  createdAt: string;
  expiresAt: string | null;
  revokedAt: string | null;
  lastUsedAt: string | null;
  /** Derived at read time: revoked wins over expired. */
  status: 'active' | 'revoked' | 'expired';
}

/** The result of createApiKey. `secret` exists only here: it is not stored and cannot be shown again. */
export interface CreatedApiKey {
  keyId: string;
  secret: string;
  prefix: string;
  expiresAt: string | null;
}

/** A fresh secret: "ilk_" + base64url(32 random bytes). */
export function generateApiKeySecret(): string {
  return 'ilk_' + crypto.randomBytes(API_KEY_RANDOM_BYTES).toString('base64url');
}

/** HMAC-SHA-256(pepper, secret): the 32 bytes stored in api_keys.hash. */
export function hashApiKey(pepper: Buffer, secret: string): Buffer {
  return crypto.createHmac('sha256', pepper).update(secret, 'utf8').digest();
}

interface KeyRow {
  id: string;
  identity_id: string;
  identity_name: string;
  prefix: string;
  created_at: Date;
  expires_at: Date | null;
  revoked_at: Date | null;
  last_used_at: Date | null;
  expired: boolean;
}

const KEY_SELECT = `SELECT k.id, k.identity_id, i.name AS identity_name, k.prefix, k.created_at, k.expires_at, k.revoked_at, k.last_used_at,
  (k.expires_at IS NOT NULL AND k.expires_at <= now()) AS expired
  FROM api_keys k JOIN identities i ON i.id = k.identity_id`;

function toRecord(r: KeyRow): ApiKeyRecord {
  return {
    id: r.id,
    identityId: r.identity_id,
    identityName: r.identity_name,
    prefix: r.prefix,
    createdAt: iso(r.created_at)!,
    expiresAt: iso(r.expires_at),
    revokedAt: iso(r.revoked_at),
    lastUsedAt: iso(r.last_used_at),
    status: r.revoked_at ? 'revoked' : r.expired ? 'expired' : 'active',
  };
}

/**
 * Creates a key for the identity and returns its secret ONCE (only the keyed hash is stored).
 * `expiresAt` (optional) must be in the future. Throws NotFoundError for an unknown identity,
 * ConflictError for a disabled one, ValidationError for a past expiry. Records key_created
 * ({keyId, identityId, identity, expiresAt}; never the secret, prefix or hash) in the same transaction.
 */
export async function createApiKey(db: ControlDb, identityId: string, opts: { expiresAt?: Date } = {}, actor: ChangeActor = {}): Promise<CreatedApiKey> {
  if (opts.expiresAt !== undefined && !(opts.expiresAt.getTime() > Date.now())) {
    throw new ValidationError(`the expiry must be in the future (got ${Number.isNaN(opts.expiresAt.getTime()) ? 'an invalid date' : opts.expiresAt.toISOString()})`);
  }
  const idn = await db.pool.query<{ disabled: boolean; name: string }>('SELECT disabled, name FROM identities WHERE id = $1', [identityId]);
  if (idn.rowCount === 0) throw new NotFoundError(`identity ${identityId} not found`);
  if (idn.rows[0].disabled) throw new ConflictError(`identity "${idn.rows[0].name}" is disabled: enable it before creating keys`);
  const pepper = await getKeyPepper(db);
  for (let attempt = 0; ; attempt++) {
    const secret = generateApiKeySecret();
    const prefix = secret.slice(0, 10);
    const keyId = newKeyId();
    try {
      return await withTransaction(db, async (c) => {
        const r = await c.query<{ expires_at: Date | null }>(
          'INSERT INTO api_keys (id, identity_id, hash, prefix, expires_at) VALUES ($1, $2, $3, $4, $5) RETURNING expires_at',
          [keyId, identityId, hashApiKey(pepper, secret), prefix, opts.expiresAt ?? null],
        );
        const expiresAt = iso(r.rows[0].expires_at);
        // Ids only: never the secret, its prefix or its hash.
        await recordChange(c, actor, 'key_created', { keyId, identityId, identity: idn.rows[0].name, expiresAt });
        return { keyId, secret, prefix, expiresAt };
      });
    } catch (err) {
      // A collision of 256-bit secrets or 80-bit ids is not expected; retry once to be safe.
      if (isUniqueViolation(err) && attempt < 2) continue;
      throw err;
    }
  }
}

/** Every key (optionally of one identity), newest first. Never returns secrets or hashes. */
export async function listApiKeys(db: ControlDb, filter: { identityId?: string } = {}): Promise<ApiKeyRecord[]> {
  const r = filter.identityId
    ? await db.pool.query<KeyRow>(`${KEY_SELECT} WHERE k.identity_id = $1 ORDER BY k.created_at DESC, k.id`, [filter.identityId])
    : await db.pool.query<KeyRow>(`${KEY_SELECT} ORDER BY k.created_at DESC, k.id`);
  return r.rows.map(toRecord);
}

/** One key by id, or null. */
export async function getApiKey(db: ControlDb, keyId: string): Promise<ApiKeyRecord | null> {
  const r = await db.pool.query<KeyRow>(`${KEY_SELECT} WHERE k.id = $1`, [keyId]);
  return r.rows[0] ? toRecord(r.rows[0]) : null;
}

/**
 * Revokes the key (idempotent: an already revoked key keeps its first revocation time, and only the
 * first revocation records key_revoked ({keyId, identityId}) in its transaction).
 * Throws NotFoundError for an unknown key id.
 */
export async function revokeApiKey(db: ControlDb, keyId: string, actor: ChangeActor = {}): Promise<ApiKeyRecord> {
  await withTransaction(db, async (c) => {
    const r = await revokeCredentialRow(c, 'api_keys', 'identity_id', keyId);
    if (!r) throw new NotFoundError(`API key ${keyId} not found`);
    if (r.fresh) await recordChange(c, actor, 'key_revoked', { keyId, identityId: r.value });
  });
  return (await getApiKey(db, keyId))!;
}

/** Options of DbIdentityResolver. */
export interface DbIdentityResolverOptions {
  /**
   * How long a successful resolution may be reused, in ms (default 2000, at most 5000, 0 = never).
   * This is the bound on how long a revoked or expired key, or a disabled identity, can still be
   * accepted by a process that has not called invalidate().
   */
  cacheTtlMs?: number;
  /** Least interval between last_used_at updates of one key, in ms (default 60 000). */
  lastUsedIntervalMs?: number;
  /**
   * Delay before pending last_used_at updates are written, in ms (default 5000): every key used
   * meanwhile is updated by one statement, so no call waits on, or pays for, a control-database
   * write of its own. last_used_at is therefore up to this late, and a crash forgets at most this much.
   */
  lastUsedFlushMs?: number;
  logger?: Logger;
}

interface ResolveRow {
  key_id: string;
  hash: Buffer;
  identity_id: string;
  identity_name: string;
  attributes: Record<string, unknown> | null;
  usable: boolean;
  last_used_fresh: boolean;
}

const ZERO_HASH = Buffer.alloc(32);

/** Usable keys kept as known hashes at most (beyond, every key is looked up). */
const KNOWN_MAX = 200_000;
/** The known-hash set is reloaded at least this often (a lost notification heals), in ms. */
const KNOWN_MAX_AGE_MS = 60_000;
/** Past the miss budget, the set is reloaded at most this often, in ms. */
const KNOWN_MIN_RELOAD_MS = 1000;
/** First wait before reading the usable keys again after a failure, in ms (doubles up to KNOWN_MAX_AGE_MS). */
const KNOWN_RETRY_MS = 1000;
/** Lookups per second, and their burst, of hashes not in the known set. */
const MISS_RATE = 20;
const MISS_BURST = 40;

/** Random per process: the resolution cache is keyed by a salted digest, never by the secret itself. */
const CACHE_SALT = crypto.randomBytes(16).toString('base64');
const oneShotHash = (crypto as unknown as { hash?: (algorithm: string, data: string, encoding: 'base64') => string }).hash;

/**
 * The resolution cache's key for a presented secret: SHA-256 of a per-process random salt and the
 * secret, base64. One call of crypto.hash (Node ≥ 20.12; createHash before): a cache hit costs no
 * HMAC and no read of the pepper (issue 13: the keyed hash was ~10 % of a tools/list profile).
 */
function cacheKeyOf(secret: string): string {
  return oneShotHash ? oneShotHash('sha256', CACHE_SALT + secret, 'base64') : crypto.createHash('sha256').update(CACHE_SALT + secret, 'utf8').digest('base64');
}

/**
 * Resolves Bearer API keys against the control database: HMAC the presented secret, look it up by
 * hash, compare with crypto.timingSafeEqual, and refuse revoked or expired keys and disabled
 * identities (null, never an exception, for any bad key). Updates api_keys.last_used_at at most
 * once per lastUsedIntervalMs per key (conditional UPDATE, so replicas do not pile up writes), in
 * batches: keys used within lastUsedFlushMs are written by one UPDATE (issue 13: no per-call
 * control-database write other than the audit). close() writes what is pending.
 *
 * Revocation bound: positive results are cached for cacheTtlMs (default 2 s, capped at 5 s); call
 * invalidate() on a CONTROL_CHANNEL notification (listenControlChanges) to drop them at once. A
 * resolution during which invalidate() was called is answered but not cached (task hrr).
 * Negative results are never cached.
 *
 * Made-up keys (issue 10, availability): the resolver keeps the keyed hashes of every usable key in
 * memory (reloaded in the background after invalidate(), and at least every 60 s; after a failed
 * read, retried with a backoff from 1 s to 60 s while the last set keeps answering). A presented key whose hash is not
 * among them is looked up in the database only while a per-process budget allows (20 lookups per
 * second, bursts of 40: a key created on another replica is found before its notification arrives);
 * past it the set is reloaded at most once per second and checked again, so a flood of made-up
 * tokens costs one HMAC each instead of a control-database query each. With more than 200,000 usable
 * keys, or while the set cannot be read, every key is looked up as before.
 */
export class DbIdentityResolver implements IdentityResolver {
  private readonly cacheTtlMs: number;
  private readonly lastUsedIntervalMs: number;
  private readonly cache = new Map<string, { identity: Identity; until: number }>();
  /** cacheKeyOf per scope (the request's socket): a keep-alive connection's calls hash their key once (resolveNow). */
  private readonly scopeKeys = new ScopedDigests(cacheKeyOf);
  /** invalidate() calls so far: a resolution is cached only when none happened while it ran (task hrr, as red team rt40 for the token resolver). */
  private generation = 0;
  private readonly lastTouched = new Map<string, number>();
  private readonly lastUsedFlushMs: number;
  private pending = new Set<string>();
  private flushTimer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> = Promise.resolve();
  /** Keyed hashes (base64) of the usable keys, when loaded; null when too many or unreadable. */
  private known: Set<string> | null = null;
  private knownAt = 0;
  private knownStale = true;
  private knownLoading: Promise<void> | null = null;
  /** After a failed load: no new attempt before knownRetryAt (ms since the epoch); the current backoff in ms. */
  private knownRetryAt = 0;
  private knownRetryMs = 0;
  /** Lookups of hashes not in `known`: a token bucket (MISS_RATE per second, MISS_BURST). */
  private missTokens = MISS_BURST;
  private missAt = Date.now();

  constructor(
    private readonly db: ControlDb,
    private readonly opts: DbIdentityResolverOptions = {},
  ) {
    this.cacheTtlMs = Math.max(0, Math.min(5000, opts.cacheTtlMs ?? 2000));
    this.lastUsedIntervalMs = Math.max(1000, opts.lastUsedIntervalMs ?? 60_000);
    this.lastUsedFlushMs = Math.max(0, opts.lastUsedFlushMs ?? 5000);
  }

  /** Drops every cached resolution (call on any api_keys/identities change notification). */
  invalidate(): void {
    this.generation++;
    this.cache.clear();
    this.knownStale = true;
  }

  /**
   * The known-hash set; null when unusable (never loaded, more than KNOWN_MAX keys, or unreadable:
   * then every key is looked up). A reload is due when the set is stale (invalidate()), older than
   * KNOWN_MAX_AGE_MS, or older than `reloadOlderThanMs`. Only the first load is waited for: later
   * reloads run in the background while the current set keeps answering, except `awaitReload`
   * (the past-budget recheck, which must see a key created since). After a failed load the next
   * attempt waits KNOWN_RETRY_MS, doubling to KNOWN_MAX_AGE_MS, and the failure is logged once per streak.
   */
  private async knownHashes(now: number, reloadOlderThanMs = KNOWN_MAX_AGE_MS, awaitReload = false): Promise<Set<string> | null> {
    const due = now >= this.knownRetryAt && (this.knownStale || now - this.knownAt >= reloadOlderThanMs);
    if (due) this.knownLoading ??= this.loadKnown();
    if (this.knownLoading && (awaitReload || this.knownAt === 0)) await this.knownLoading;
    return this.known;
  }

  private loadKnown(): Promise<void> {
    return (async () => {
      this.knownStale = false;
      const at = Date.now();
      try {
        const r = await this.db.pool.query<{ h: string }>(
          `SELECT encode(hash, 'base64') AS h FROM api_keys WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()) LIMIT ${KNOWN_MAX + 1}`,
        );
        this.known = r.rows.length > KNOWN_MAX ? null : new Set(r.rows.map((x) => x.h));
        this.knownAt = at;
        this.knownRetryMs = 0;
      } catch (err) {
        // Keep answering from the set we have (or look every key up if there is none); retry later.
        this.knownStale = true;
        this.knownRetryMs = Math.min(KNOWN_MAX_AGE_MS, this.knownRetryMs ? this.knownRetryMs * 2 : KNOWN_RETRY_MS);
        this.knownRetryAt = Date.now() + this.knownRetryMs;
        if (this.knownRetryMs === KNOWN_RETRY_MS) this.opts.logger?.warn({ component: 'identity-resolver', code: (err as { code?: string }).code }, 'could not read the usable keys; retrying with backoff');
      }
    })().finally(() => {
      this.knownLoading = null;
    });
  }

  /** Whether a hash outside the known set may still be looked up now (the miss budget). */
  private takeMiss(now: number): boolean {
    this.missTokens = Math.min(MISS_BURST, this.missTokens + ((now - this.missAt) / 1000) * MISS_RATE);
    this.missAt = now;
    if (this.missTokens < 1) return false;
    this.missTokens -= 1;
    return true;
  }

  /** True when `apiKey` does not match API_KEY_PATTERN (`ilk_` and 43 base64url characters): it never resolves. */
  rejectsByFormat(apiKey: string): boolean {
    return typeof apiKey !== 'string' || !API_KEY_PATTERN.test(apiKey);
  }

  /**
   * The identity of `apiKey` from the resolution cache, synchronously (IdentityResolver.resolveNow):
   * a copy of the cached identity while its entry lives (what resolve would return), else undefined.
   * No format check: only a key that passed it is ever cached, and a hit means the same secret (its
   * salted SHA-256). `scope`: the request's socket, whose last key's digest is reused (ScopedDigests).
   */
  resolveNow(apiKey: string, scope?: object): Identity | undefined {
    if (typeof apiKey !== 'string' || this.cache.size === 0) return undefined;
    const hit = this.cache.get(this.scopeKeys.of(apiKey, scope));
    return hit && hit.until > Date.now() ? { ...hit.identity } : undefined;
  }

  async resolve(apiKey: string): Promise<Identity | null> {
    if (this.rejectsByFormat(apiKey)) return null;
    const cacheKey = cacheKeyOf(apiKey);
    const now = Date.now();
    const hit = this.cache.get(cacheKey);
    if (hit && hit.until > now) return { ...hit.identity };
    if (hit) this.cache.delete(cacheKey);
    // A lookup that read the database before a revoke committed and returns after its notification
    // cleared the cache must not store the revoked key for the cache's lifetime.
    const gen = this.generation;
    const pepper = await getKeyPepper(this.db);
    const hash = hashApiKey(pepper, apiKey);
    const known = await this.knownHashes(now);
    if (known && !known.has(hash.toString('base64')) && !this.takeMiss(now)) {
      // Past the miss budget: only a key created since the set was loaded (at most a second ago) is looked up.
      const fresh = await this.knownHashes(Date.now(), KNOWN_MIN_RELOAD_MS, true);
      if (fresh && !fresh.has(hash.toString('base64'))) return null;
    }

    const r = await this.db.pool.query<ResolveRow>(
      `SELECT k.id AS key_id, k.hash, i.id AS identity_id, i.name AS identity_name, i.attributes,
         (k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now()) AND NOT i.disabled) AS usable,
         (k.last_used_at IS NOT NULL AND k.last_used_at > now() - make_interval(secs => $2::double precision)) AS last_used_fresh
       FROM api_keys k JOIN identities i ON i.id = k.identity_id
       WHERE k.hash = $1`,
      [hash, this.lastUsedIntervalMs / 1000],
    );
    const row = r.rows[0];
    // Compare even when nothing matched, so both paths do the same work.
    const same = crypto.timingSafeEqual(row ? row.hash : ZERO_HASH, hash);
    if (!row || !same || !row.usable) return null;

    const identity: Identity = { id: row.identity_id, name: row.identity_name, keyId: row.key_id };
    // Row rules read these as identity.<name> (issue 27).
    if (row.attributes && Object.keys(row.attributes).length > 0) identity.attributes = row.attributes;
    if (this.cacheTtlMs > 0 && gen === this.generation) this.cache.set(cacheKey, { identity, until: now + this.cacheTtlMs });
    if (!row.last_used_fresh) this.touch(row.key_id, now);
    return { ...identity };
  }

  private touch(keyId: string, now: number): void {
    const last = this.lastTouched.get(keyId);
    if (last !== undefined && now - last < this.lastUsedIntervalMs) return;
    this.lastTouched.set(keyId, now);
    if (this.lastTouched.size > 10_000) this.lastTouched.clear();
    this.pending.add(keyId);
    if (!this.flushTimer) {
      this.flushTimer = setTimeout(() => void this.flush(), this.lastUsedFlushMs);
      this.flushTimer.unref();
    }
  }

  /**
   * Writes pending last_used_at updates now (one UPDATE for every key used since the last flush).
   * Resolves when written; a failure is logged, never thrown (the next use of the key retries).
   */
  flush(): Promise<void> {
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    const ids = [...this.pending];
    this.pending = new Set();
    if (ids.length === 0) return this.flushing;
    this.flushing = this.flushing.then(() =>
      this.db.pool
        .query(
          `UPDATE api_keys SET last_used_at = now()
           WHERE id = ANY($1::text[]) AND (last_used_at IS NULL OR last_used_at <= now() - make_interval(secs => $2::double precision))`,
          [ids, this.lastUsedIntervalMs / 1000],
        )
        .then(
          () => undefined,
          (err: unknown) => {
            for (const id of ids) this.lastTouched.delete(id);
            this.opts.logger?.warn({ component: 'identity-resolver', code: (err as { code?: string }).code }, 'could not update api_keys.last_used_at');
          },
        ),
    );
    return this.flushing;
  }

  /** Writes what is pending and stops the flush timer (call on shutdown, before the pool closes). */
  close(): Promise<void> {
    return this.flush();
  }
}
