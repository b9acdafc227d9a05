/**
 * The limits runToolCall applies around the pipeline (issue 10, Build 6), kept out of dispatch.ts:
 *
 *  - after step 1, a key or access token that did not resolve (invalid_api_key, invalid_token) spends the keyless budget of the client address
 *    (over it: rate_limited instead of invalid_api_key), unless the edge's keylessGate already
 *    charged it for its form (client-limits.ts chargedUpFront), and a resolved identity takes a stream
 *    slot for the call (per client address and per identity; over a cap: rate_limited);
 *  - every tools/call with a resolved identity consumes one rate-limit point of that identity
 *    whatever its outcome: pipeline step 5 (rateLimitStep) marks the call's ChargeState
 *    (ctx.rateLimitCharge), and a call that ended without reaching step 5 (refused at source,
 *    authorization, policy or parse time, invalid arguments, failed) is charged afterwards by
 *    chargeUnspent. When that charge is refused, a refusal or failure is answered rate_limited.
 *    (The state travels on the call's context, not in AsyncLocalStorage: on Node 20 that installs
 *    promise hooks for every promise of the process, which the issue-13 profile showed per call.)
 */
import type { Logger } from 'pino';
import { rateLimitStep, type RateLimiter } from '../pipeline/05-rate-limit';
import type { ToolOutcome } from '../tools/types';
import { limitMessage, type ClientLimits, type LimitRefusal } from '../transport/client-limits';

/** Step-1 refusals of a presented credential that resolved to nobody (charged to the keyless budget). */
const UNRESOLVED: ReadonlySet<string> = new Set(['invalid_api_key', 'invalid_token']);

/** Whether the current tool call has consumed its rate-limit point (ToolCallContext.rateLimitCharge). */
export interface ChargeState {
  charged: boolean;
}

/** The rate_limited refusal of a client limit, with retry_after_ms. */
export function limitRefusal(r: LimitRefusal): ToolOutcome {
  return { kind: 'refusal', code: 'rate_limited', message: limitMessage(r), extra: { retry_after_ms: r.retryAfterMs } };
}

/**
 * Applies the client limits after step 1. `identityOutcome` is step 1's answer (null = resolved,
 * `identityId` set). Returns the outcome to answer instead (null = proceed) and the release of the
 * stream slot taken (a no-op when none). `paidUpFront`: the key was charged to the keyless budget
 * before the body was read (client-limits.ts chargedUpFront), so a refusal of it is not charged again.
 */
export function admitCall(limits: ClientLimits | undefined, address: string, identityOutcome: ToolOutcome | null, identityId: string | null, paidUpFront = false): { outcome: ToolOutcome | null; release: () => void } {
  const none = () => undefined;
  if (!limits) return { outcome: identityOutcome, release: none };
  if (identityOutcome) {
    if (identityOutcome.kind === 'refusal' && UNRESOLVED.has(identityOutcome.code) && !paidUpFront) {
      const t = limits.takeKeyless(address);
      if (!t.ok) return { outcome: limitRefusal(t), release: none };
    }
    return { outcome: identityOutcome, release: none };
  }
  if (identityId === null) return { outcome: null, release: none };
  const slot = limits.openStream(address, identityId);
  return slot.ok ? { outcome: null, release: slot.release } : { outcome: limitRefusal(slot), release: none };
}

/**
 * Charges the identity one point when the call did not reach step 5. Returns the outcome to answer:
 * unchanged, or rate_limited when the charge was refused and the call had not succeeded (a result
 * or a queued write is never taken back). A limiter failure is logged and changes nothing. A call
 * already charged (every call that reached step 5) gets its outcome back synchronously, not a
 * promise (issue 28 item 3).
 */
export function chargeUnspent(limiter: RateLimiter | undefined, state: ChargeState, identityId: string | null, outcome: ToolOutcome, logger: Logger): ToolOutcome | Promise<ToolOutcome> {
  if (!limiter || identityId === null || state.charged) return outcome;
  return chargeNow(limiter, state, identityId, outcome, logger);
}

async function chargeNow(limiter: RateLimiter, state: ChargeState, identityId: string, outcome: ToolOutcome, logger: Logger): Promise<ToolOutcome> {
  try {
    // Pipeline step 5 itself, at identity level: it marks the call charged and words the refusal.
    const refused = await rateLimitStep(limiter, { rateLimitCharge: state }, identityId, null);
    const succeeded = (outcome.kind === 'result' && !outcome.isError) || outcome.kind === 'queued';
    return refused && !succeeded ? refused : outcome;
  } catch (err) {
    logger.warn({ component: 'rate-limit', code: (err as { code?: string }).code }, 'could not charge a refused call');
    return outcome;
  }
}
