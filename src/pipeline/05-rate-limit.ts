/**
 * Pipeline step 5, rate limit: per identity and per source, shared by every replica through the
 * control database (rate-limiter-flexible's PostgreSQL store) or in memory for a single process.
 * A refusal carries retry_after_ms.
 */
import { RateLimiterMemory, RateLimiterPostgres, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Pool } from 'pg';
import type { ToolOutcome } from '../tools/types';

/** Points per window for one key kind. */
export interface RateLimitSettings {
  /** Calls allowed per identity per window (across all sources). */
  perIdentity: { points: number; windowSeconds: number };
  /** Calls allowed per source per window (across all identities). */
  perSource: { points: number; windowSeconds: number };
}

/** Defaults: 120 calls per identity per minute, 600 per source per minute. */
export const DEFAULT_RATE_LIMITS: RateLimitSettings = { perIdentity: { points: 120, windowSeconds: 60 }, perSource: { points: 600, windowSeconds: 60 } };

/** Consumes one point for the identity and, when the call names a source, one for the source. */
export interface RateLimiter {
  consume(identityId: string, sourceId: string | null): Promise<{ ok: true } | { ok: false; retryAfterMs: number; scope: 'identity' | 'source' }>;
}

class FlexibleRateLimiter implements RateLimiter {
  constructor(private readonly perIdentity: RateLimiterAbstract, private readonly perSource: RateLimiterAbstract) {}
  async consume(identityId: string, sourceId: string | null) {
    // Both keys are consumed concurrently (one round trip of latency, not two); a call refused for
    // one key still spends a point of the other, which only errs on the side of limiting.
    const [idn, src] = await Promise.all([settle(this.perIdentity.consume(identityId, 1)), sourceId === null ? Promise.resolve(null) : settle(this.perSource.consume(sourceId, 1))]);
    if (idn) return { ok: false as const, retryAfterMs: Math.max(1, idn.msBeforeNext), scope: 'identity' as const };
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
 * A limiter shared by every replica through table `rate_limits` of the control database.
 * Resolves once the table exists.
 */
export async function postgresRateLimiter(pool: Pool, s: RateLimitSettings = DEFAULT_RATE_LIMITS): Promise<RateLimiter> {
  const make = (keyPrefix: string, points: number, duration: number) =>
    new Promise<RateLimiterPostgres>((resolve, reject) => {
      const l: RateLimiterPostgres = new RateLimiterPostgres(
        { storeClient: pool, storeType: 'pool', tableName: 'rate_limits', keyPrefix, points, duration, clearExpiredByTimeout: true },
        (err?: Error) => (err ? reject(err) : resolve(l)),
      );
    });
  return new FlexibleRateLimiter(await make('idn', s.perIdentity.points, s.perIdentity.windowSeconds), await make('src', s.perSource.points, s.perSource.windowSeconds));
}

/** Runs the step: null to proceed, or the rate_limited refusal with retry_after_ms. */
export async function rateLimitStep(limiter: RateLimiter, identityId: string, sourceId: string | null): Promise<ToolOutcome | null> {
  const r = await limiter.consume(identityId, sourceId);
  if (r.ok) return null;
  const who = r.scope === 'identity' ? 'this identity' : `source '${sourceId}'`;
  return { kind: 'refusal', code: 'rate_limited', message: `Too many requests for ${who}; wait ${r.retryAfterMs} ms before trying again.`, extra: { retry_after_ms: r.retryAfterMs } };
}
