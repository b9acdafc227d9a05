/**
 * The keyless budget of requests that present an operator token: the admin API (/admin/v1, red team
 * rt49b D3) and the console's sign-in (POST /console/api/session, task lows49b) share it.
 *
 * A request whose operator token is missing or does not resolve spends one token of its client
 * address's keyless budget (config client_limits.keyless, the same budget as requests without an
 * agent key). Once the budget is spent, requests are refused 429 `rate_limited` before any look-up
 * in the control database, so unknown tokens cannot keep its pool busy. A token that resolved in the
 * last RECENT_OPERATOR_TOKEN_MS is still looked up (a revocation holds at once) but never refused by
 * the budget, so a flood from the operator's own address (a shared proxy) does not lock out an
 * operator who is at work.
 */
import crypto from 'node:crypto';
import type { Request, Response } from 'express';
import { LRUCache } from 'lru-cache';
import type { DispatchDeps } from '../protocol/dispatch';
import { clientAddressKey, type LimitRefusal } from '../transport/client-limits';
import { sendRateLimited } from '../transport/http-errors';

/** How long an operator token that resolved is exempt from its address's keyless budget (ms): 10 minutes. */
export const RECENT_OPERATOR_TOKEN_MS = 10 * 60_000;

/** Tokens remembered as resolved lately (least recently used forgotten first). */
const RECENT_OPERATOR_TOKENS_MAX = 1000;

/** One route family's view of the budget, made by operatorTokenBudget. */
export interface OperatorTokenBudget {
  /**
   * Asks before looking `token` up. Returns null when the look-up may go ahead; otherwise it has
   * answered the request itself (429 rate_limited, ErrorBody with retry_after_ms, Retry-After in
   * whole seconds; the refusal noted in the keyless audit under `route`) and returns the refusal.
   * Call it with the token as the request presents it (null or '' when absent).
   */
  refused(req: Request, res: Response, token: string | null): LimitRefusal | null;
  /** The token was missing or did not resolve: spends one token of the request's address. */
  spend(req: Request): void;
  /** The token resolved: exempt from the budget for RECENT_OPERATOR_TOKEN_MS from now. */
  resolved(token: string): void;
}

/** sha256 of a token, as the key of the recent-tokens cache (the secret itself is never kept). */
function tokenKey(token: string): string {
  return crypto.createHash('sha256').update(token).digest('base64url');
}

/**
 * The budget of one route family. `deps` gives the gateway's client limits and keyless audit
 * (absent: nothing is limited, nothing noted); `route` names the family in the keyless audit
 * ('admin', 'console'); `now` is the clock (ms), for tests.
 */
export function operatorTokenBudget(deps: Pick<DispatchDeps, 'clientLimits' | 'keylessAudit'> | undefined, route: string, now: () => number = Date.now): OperatorTokenBudget {
  /** sha256 of an operator token that resolved → when it last did (ms). */
  const recent = new LRUCache<string, number>({ max: RECENT_OPERATOR_TOKENS_MAX });
  const addressOf = (req: Request) => clientAddressKey(req.socket.remoteAddress);
  return {
    refused(req, res, token) {
      const limits = deps?.clientLimits;
      if (!limits) return null;
      const knownAt = token ? recent.get(tokenKey(token)) : undefined;
      if (knownAt !== undefined && now() - knownAt < RECENT_OPERATOR_TOKEN_MS) return null;
      const address = addressOf(req);
      const spent = limits.keylessSpent(address);
      if (!spent) return null;
      deps?.keylessAudit?.note(address, { reason: 'rate_limited', tool: '-', route });
      // Said of operator tokens, not of agents' API keys (the shared keyless text), as these routes ask for one.
      sendRateLimited(res, spent.retryAfterMs, `Too many requests without a valid operator token from this address; wait ${spent.retryAfterMs} ms before trying again.`);
      return spent;
    },
    spend(req) {
      deps?.clientLimits?.takeKeyless(addressOf(req));
    },
    resolved(token) {
      recent.set(tokenKey(token), now());
    },
  };
}
