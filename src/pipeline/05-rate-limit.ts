/**
 * Pipeline step 5, rate limit: per identity and per source, shared by every replica through the
 * control database or in memory for a single process. Replicas keep token buckets in memory and
 * claim the shared budget in blocks (BlockRateLimiter), so a call costs no control-database round
 * trip unless its replica's bucket is empty. A refusal carries retry_after_ms.
 */
import { RateLimiterMemory, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Pool } from 'pg';
import { PostgresRateBlockStore, type RateBlockStore } from '../control/rate-store';
import type { ToolCallContext, ToolOutcome } from './types';

/** Points per window for one key kind. */
export interface RateLimitSettings {
  /** Calls allowed per identity per window (across all sources). */
  perIdentity: { points: number; windowSeconds: number };
  /** Calls allowed per source per window (across all identities). */
  perSource: { points: number; windowSeconds: number };
}

/** Defaults: 120 calls per identity per minute, 600 per source per minute. */
export const DEFAULT_RATE_LIMITS: RateLimitSettings = { perIdentity: { points: 120, windowSeconds: 60 }, perSource: { points: 600, windowSeconds: 60 } };

/**
 * Consumes one point for the identity and, when the call names a source and the identity admitted
 * it, one for the source: a call refused for its identity never spends a source point.
 */
export interface RateLimiter {
  consume(identityId: string, sourceId: string | null): Promise<{ ok: true } | { ok: false; retryAfterMs: number; scope: 'identity' | 'source' }>;
  /**
   * Optional synchronous path (issue 28 item 3: no promise per call): true when the call was admitted
   * and its points spent here and now, exactly as consume() would have; false when nothing was spent
   * and consume() must decide.
   */
  consumeNow?(identityId: string, sourceId: string | null): boolean;
}

class FlexibleRateLimiter implements RateLimiter {
  constructor(private readonly perIdentity: RateLimiterAbstract, private readonly perSource: RateLimiterAbstract) {}
  async consume(identityId: string, sourceId: string | null) {
    // The identity decides first; only a call its identity admitted spends a source point, so one
    // identity spends at most its own budget of a source's (red-team F2).
    const idn = await settle(this.perIdentity.consume(identityId, 1));
    if (idn) return { ok: false as const, retryAfterMs: Math.max(1, idn.msBeforeNext), scope: 'identity' as const };
    const src = sourceId === null ? null : await settle(this.perSource.consume(sourceId, 1));
    if (src) return { ok: false as const, retryAfterMs: Math.max(1, src.msBeforeNext), scope: 'source' as const };
    return { ok: true as const };
  }
}

/** Resolves to null when the point was consumed, to the RateLimiterRes when limited; rethrows store errors. */
async function settle(p: Promise<unknown>): Promise<RateLimiterRes | null> {
  try {
    await p;
    return null;
  } catch (e) {
    if (e instanceof RateLimiterRes) return e;
    throw e;
  }
}

/** A process-local limiter (tests, single replica). */
export function memoryRateLimiter(s: RateLimitSettings = DEFAULT_RATE_LIMITS): RateLimiter {
  return new FlexibleRateLimiter(
    new RateLimiterMemory({ keyPrefix: 'idn', points: s.perIdentity.points, duration: s.perIdentity.windowSeconds }),
    new RateLimiterMemory({ keyPrefix: 'src', points: s.perSource.points, duration: s.perSource.windowSeconds }),
  );
}

/**
 * Size of the next block a replica claims: a sixteenth of the window's budget (at most 1000), and
 * never more than a quarter of what the replica last saw remaining, so blocks shrink as the budget
 * runs out (few calls stranded in other replicas' blocks near the limit). Budgets under 32 points
 * are claimed one call at a time, which makes small limits exact across replicas. Pure.
 */
export function blockSize(points: number, remaining: number): number {
  const max = Math.max(1, Math.min(1000, Math.floor(points / 16)));
  return Math.max(1, Math.min(max, Math.floor(remaining / 4)));
}

interface Bucket {
  /** Calls claimed from the shared budget and not yet spent by this replica. */
  tokens: number;
  /** Local time (Date.now()) by which the window surely ends; tokens are void from then on. */
  until: number;
  /** The shared budget of the window is spent: refuse locally until `until`. */
  exhausted: boolean;
  /** Calls the shared budget had left at the last claim. */
  remaining: number;
  /** The claim in flight, shared by every call that found the bucket empty meanwhile. */
  claiming: Promise<void> | null;
}

/**
 * Per-replica token buckets over a shared budget claimed in blocks (issue 13): a call spends a
 * token held in memory; only an empty bucket claims the next block from the store, and concurrent
 * calls wait for that one claim. Once the store reports the window's budget spent, calls are refused
 * in memory until the window ends.
 *
 * Accuracy bound (per key and window): the store never grants more than `points`, and a replica
 * spends its tokens only before the window surely ends (its local end is the claim's send time plus
 * the store's remaining window, so it falls before the store's end), so never more than `points`
 * calls are admitted per window across all replicas. The error is the other way: up to one unspent
 * block per replica (≤ blockSize(points, remaining) − 1 calls, at most a quarter of what remained
 * when it was claimed) can be refused to other replicas until the window ends. Budgets under 32
 * points are claimed call by call and are exact. A source token is taken only for a call its
 * identity admitted, so the bound holds per key and the source budget counts admitted calls only.
 */
export class BlockRateLimiter implements RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  constructor(private readonly store: RateBlockStore, private readonly settings: RateLimitSettings = DEFAULT_RATE_LIMITS, private readonly clock: () => number = Date.now) {}

  /**
   * Spends one call of the identity and then, only when the identity admitted it, one of the source
   * (red-team F2: a call refused for its identity spends nothing of the source, so one identity can
   * use at most its own budget of a source's and cannot lock the source for every other identity).
   * Resolves { ok: true } or the refusal with retryAfterMs (≥ 1, until the refusing key's window
   * ends) and the refusing scope; a store failure rejects. The two keys are taken one after the
   * other, which costs a second claim's latency only when both local buckets are empty at once.
   */
  async consume(identityId: string, sourceId: string | null) {
    const a = await this.take(`idn:${identityId}`, this.settings.perIdentity);
    if (a !== null) return { ok: false as const, retryAfterMs: a, scope: 'identity' as const };
    const b = sourceId === null ? null : await this.take(`src:${sourceId}`, this.settings.perSource);
    if (b !== null) return { ok: false as const, retryAfterMs: b, scope: 'source' as const };
    return { ok: true as const };
  }

  /**
   * consume()'s answer when it needs no claim: both local buckets (the identity's, and the source's
   * unless `sourceId` is null) hold a token inside their windows. Then one of each is spent and it
   * returns true, as take() would for each; otherwise it spends nothing and returns false.
   */
  consumeNow(identityId: string, sourceId: string | null): boolean {
    const now = this.clock();
    const a = this.buckets.get(`idn:${identityId}`);
    if (!a || a.tokens <= 0 || now >= a.until) return false;
    let b: Bucket | undefined;
    if (sourceId !== null) {
      b = this.buckets.get(`src:${sourceId}`);
      if (!b || b.tokens <= 0 || now >= b.until) return false;
    }
    a.tokens--;
    if (b) b.tokens--;
    return true;
  }

  /** Spends one call of `key`: null when admitted, else the milliseconds until the window ends (≥ 1). */
  private async take(key: string, limit: { points: number; windowSeconds: number }): Promise<number | null> {
    const b = this.bucket(key, limit.points);
    for (;;) {
      const now = this.clock();
      if (now >= b.until) {
        b.tokens = 0;
        b.exhausted = false;
        b.remaining = limit.points;
      }
      if (b.tokens > 0) {
        b.tokens--;
        return null;
      }
      if (b.exhausted) return Math.max(1, b.until - now);
      if (!b.claiming) b.claiming = this.claim(key, b, limit).finally(() => (b.claiming = null));
      await b.claiming;
    }
  }

  private async claim(key: string, b: Bucket, limit: { points: number; windowSeconds: number }): Promise<void> {
    const sentAt = this.clock();
    const c = await this.store.claim(key, blockSize(limit.points, b.remaining), limit.points, limit.windowSeconds * 1000);
    b.until = sentAt + c.msLeft;
    b.remaining = limit.points - c.consumed;
    b.tokens += c.granted;
    // Refused with nothing left: spent until the window ends. Refused with some left (a smaller
    // block fits): the next loop claims again with a block sized to what remains.
    b.exhausted = c.granted === 0 && b.remaining <= 0 && c.msLeft > 0;
  }

  private bucket(key: string, points: number): Bucket {
    let b = this.buckets.get(key);
    if (!b) {
      if (this.buckets.size >= 10_000) this.prune();
      b = { tokens: 0, until: 0, exhausted: false, remaining: points, claiming: null };
      this.buckets.set(key, b);
    }
    return b;
  }

  /** Forgets buckets whose window has ended (their tokens are void anyway). */
  private prune(): void {
    const now = this.clock();
    for (const [k, b] of this.buckets) if (b.until <= now && !b.claiming) this.buckets.delete(k);
  }
}

/**
 * A limiter shared by every replica through table `rate_limits` of the control database, claiming
 * blocks of calls (see BlockRateLimiter for the accuracy bound). The table exists once the control
 * database is migrated; store errors reject consume().
 */
export async function postgresRateLimiter(pool: Pool, s: RateLimitSettings = DEFAULT_RATE_LIMITS): Promise<RateLimiter> {
  return new BlockRateLimiter(new PostgresRateBlockStore(pool), s);
}

/**
 * Runs the step for the call `ctx` (its identity `identityId`, on `sourceId` or null for
 * identity-level calls): marks the call's point as consumed (ctx.rateLimitCharge), then returns
 * null to proceed or the rate_limited refusal with retry_after_ms. Null comes back synchronously when
 * the limiter admits the call from memory (RateLimiter.consumeNow; issue 28 item 3), else a promise.
 * Limiter errors reject.
 */
export function rateLimitStep(limiter: RateLimiter, ctx: Pick<ToolCallContext, 'rateLimitCharge'>, identityId: string, sourceId: string | null): ToolOutcome | null | Promise<ToolOutcome | null> {
  if (ctx.rateLimitCharge) ctx.rateLimitCharge.charged = true;
  if (limiter.consumeNow?.(identityId, sourceId)) return null;
  return limiter.consume(identityId, sourceId).then((r) => (r.ok ? null : refusal(r, sourceId)));
}

function refusal(r: { retryAfterMs: number; scope: 'identity' | 'source' }, sourceId: string | null): ToolOutcome {
  const who = r.scope === 'identity' ? 'this identity' : `source '${sourceId}'`;
  return { kind: 'refusal', code: 'rate_limited', message: `Too many requests for ${who}; wait ${r.retryAfterMs} ms before trying again.`, extra: { retry_after_ms: r.retryAfterMs } };
}
