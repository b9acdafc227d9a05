/**
 * Pipeline step 1, identity (contract: Governance And Errors, "identity resolution"): resolves the
 * Bearer API key to an identity. Runs before argument validation, so an unauthenticated caller
 * learns nothing beyond "unauthorized".
 */
import type { Identity, IdentityResolver } from '../control/identities';
import type { ToolCallContext, ToolOutcome } from './types';

/** Extracts the token from an Authorization header value ("Bearer <token>", scheme case-insensitive), or null. */
export function bearerToken(header: string | undefined): string | null {
  if (!header) return null;
  const m = /^\s*bearer\s+(\S+)\s*$/i.exec(header);
  return m ? m[1] : null;
}

/**
 * Resolves ctx.apiKey (an API key, or an access token when issuers are configured: issue 26). On
 * success sets ctx.identity and returns null; otherwise returns the refusal (missing_api_key,
 * invalid_api_key or invalid_token: 401; insufficient_scope: 403; identity_provider_unavailable: 503).
 * An identity the resolver holds in memory (resolveNow; `scope`, the request's socket, lets it reuse
 * the key's digest) is answered synchronously, without a promise (issue 28 item 3, h28j); anything
 * else through a promise. Errors from the resolver propagate (the caller answers the opaque failure).
 */
export function identityStep(ctx: ToolCallContext, resolver: IdentityResolver, scope?: object): ToolOutcome | null | Promise<ToolOutcome | null> {
  if (!ctx.apiKey) return { kind: 'refusal', code: 'missing_api_key' };
  const known = resolver.resolveNow?.(ctx.apiKey, scope);
  if (known) {
    ctx.identity = known;
    return null;
  }
  return resolveIdentity(ctx, ctx.apiKey, resolver);
}

/** identityStep's path through the resolver's promise (a cache miss, an access token). */
async function resolveIdentity(ctx: ToolCallContext, apiKey: string, resolver: IdentityResolver): Promise<ToolOutcome | null> {
  if (resolver.resolveDetailed) {
    const r = await resolver.resolveDetailed(apiKey);
    if ('refusal' in r) return { kind: 'refusal', code: r.refusal };
    ctx.identity = r.identity;
    return null;
  }
  const identity = await resolver.resolve(apiKey);
  if (!identity) return { kind: 'refusal', code: 'invalid_api_key' };
  ctx.identity = identity;
  return null;
}

/** An IdentityResolver over a fixed key → identity map (tests and single-user setups; production uses the control database). */
export class StaticIdentityResolver implements IdentityResolver {
  constructor(private readonly keys: Record<string, { id: string; name: string; keyId?: string }>) {}
  /** The key's identity (a new object each call), synchronously; undefined for an unknown key (resolve then refuses it). */
  resolveNow(apiKey: string): Identity | undefined {
    const hit = Object.prototype.hasOwnProperty.call(this.keys, apiKey) ? this.keys[apiKey] : undefined;
    return hit ? { id: hit.id, name: hit.name, keyId: hit.keyId ?? `static:${hit.id}` } : undefined;
  }
  async resolve(apiKey: string) {
    return this.resolveNow(apiKey) ?? null;
  }
}
