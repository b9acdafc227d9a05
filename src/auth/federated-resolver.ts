/**
 * Step 1 with identity providers (issue 26): one IdentityResolver for API keys and access tokens.
 * A Bearer token shaped like a JWT (two dots) is an access token: verified by TokenVerifier, then
 * mapped to its identity by TokenIdentityStore; anything else goes to the API-key resolver
 * unchanged, so API keys keep working beside tokens.
 *
 * Cheap refusals (availability): a JWT-shaped token that is oversized, malformed, or whose
 * unverified `iss` is no configured issuer is rejected by its form (rejectsByFormat), so the edge
 * charges it to the client address's keyless budget before the body is read, like a junk key. A
 * token that fails verification later is charged after step 1 (src/protocol/call-limits.ts), so a
 * flood of forged tokens spends the same budget as a flood of bad keys.
 *
 * Successful resolutions are cached for at most `cacheTtlMs` (default 2 s, capped at 5 s, and never
 * past the token's exp), keyed by a salted digest of the token: the bound on how long a disabled
 * identity can still pass; invalidate() (on an identities/grants notification) drops them at once.
 * Every validation's outcome is reported to `onValidation` (metrics) and failures are logged with
 * the issuer and the reason, never the token.
 */
import crypto from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';
import type { Identity, IdentityResolution, IdentityResolver } from '../control/identities';
import type { RefusalCode } from '../errors/vocabulary';
import { isJwtShaped, readTokenForm } from './jwt-form';
import { refusalOfFailure, TOKEN_FAILURES, type TokenVerifier } from './token-verifier';
import { SUBJECT_FAILURES, type TokenIdentityStore } from './token-identities';

/** Every outcome of a token validation: the closed label set of interlock_token_validations_total. */
export const TOKEN_OUTCOMES: ReadonlySet<string> = new Set(['valid', ...TOKEN_FAILURES, ...SUBJECT_FAILURES]);

/** Options of FederatedIdentityResolver. */
export interface FederatedResolverOptions {
  /** Reuse of a successful token resolution, in ms (default 2000, at most 5000, 0 = never). */
  cacheTtlMs?: number;
  /** Told the outcome of every token validation: `valid` or a TokenFailure / SubjectFailure. */
  onValidation?: (outcome: string) => void;
  logger?: Logger;
}

const SALT = crypto.randomBytes(16);

/** API keys through `keys`, access tokens through `verifier` and `subjects`. */
export class FederatedIdentityResolver implements IdentityResolver {
  private readonly cache = new LRUCache<string, { identity: Identity; until: number }>({ max: 10_000 });
  private readonly ttl: number;
  /** invalidate() calls so far: a resolution is cached only when none happened while it ran (red team rt40). */
  private generation = 0;

  constructor(
    private readonly keys: IdentityResolver & { invalidate?(): void; close?(): Promise<void> },
    private readonly verifier: TokenVerifier,
    private readonly subjects: TokenIdentityStore,
    private readonly opts: FederatedResolverOptions = {},
  ) {
    this.ttl = Math.max(0, Math.min(5000, opts.cacheTtlMs ?? 2000));
  }

  /** A JWT-shaped token is judged by its form and unverified issuer; anything else as the key resolver judges it. */
  rejectsByFormat(token: string): boolean {
    if (!isJwtShaped(token)) return this.keys.rejectsByFormat?.(token) ?? false;
    const form = readTokenForm(token);
    return !form.ok || !this.verifier.knows(form.issuer);
  }

  /** An API key's identity from the key resolver's cache (IdentityResolver.resolveNow); undefined for an access token (verified by resolveDetailed). */
  resolveNow(token: string, scope?: object): Identity | undefined {
    return isJwtShaped(token) ? undefined : this.keys.resolveNow?.(token, scope);
  }

  async resolve(token: string): Promise<Identity | null> {
    const r = await this.resolveDetailed(token);
    return 'identity' in r ? r.identity : null;
  }

  async resolveDetailed(token: string): Promise<IdentityResolution> {
    if (!isJwtShaped(token)) {
      const identity = await this.keys.resolve(token);
      return identity ? { identity } : { refusal: 'invalid_api_key', reason: 'unknown_key' };
    }
    const cacheKey = crypto.createHmac('sha256', SALT).update(token).digest('base64');
    const now = Date.now();
    const gen = this.generation;
    const hit = this.cache.get(cacheKey);
    if (hit && hit.until > now) return { identity: { ...hit.identity } };
    const v = await this.verifier.verify(token);
    if (!v.ok) return this.refuse(token, v.failure, refusalOfFailure(v.failure));
    const found = await this.subjects.identityFor(v.token.issuer, v.token.claims);
    if ('failure' in found) return this.refuse(token, found.failure, 'invalid_token', v.token.issuer.issuer, String(v.token.claims.sub));
    this.opts.onValidation?.('valid');
    const until = Math.min(now + this.ttl, (v.token.claims.exp ?? 0) * 1000);
    // An invalidation during the lookup (an unlink, a disabled identity) may have changed the answer: not cached.
    if (this.ttl > 0 && until > now && gen === this.generation) this.cache.set(cacheKey, { identity: found.identity, until });
    return { identity: { ...found.identity } };
  }

  private refuse(token: string, reason: string, refusal: RefusalCode, issuer?: string, subject?: string): IdentityResolution {
    this.opts.onValidation?.(reason);
    const form = issuer ? null : readTokenForm(token);
    // The issuer is logged only when configured (an unknown one is attacker-chosen text); never the token.
    const iss = issuer ?? (form?.ok && this.verifier.knows(form.issuer) ? form.issuer : undefined);
    this.opts.logger?.info({ component: 'oauth', issuer: iss, subject, reason }, 'access token refused');
    return { refusal, reason };
  }

  /** Drops cached resolutions (tokens and keys) and claim mappings: call on any identities, grants, api_keys or claim_mappings notification. */
  invalidate(): void {
    this.generation++;
    this.cache.clear();
    this.keys.invalidate?.();
    this.subjects.invalidate?.();
  }

  /** Closes the key resolver (writes its pending last-use times). */
  async close(): Promise<void> {
    await this.keys.close?.();
  }
}
