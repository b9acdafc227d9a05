/**
 * A secret's digest kept per scope (issue 28 item 3): the request's socket holds the digest of the last
 * secret presented on it, so a keep-alive connection's calls hash their bearer token once, not once
 * per call. Held weakly: it goes with the scope. Used by the key resolver's cache key
 * (src/control/keys.ts) and admission by capacity's token memory (src/transport/capacity.ts).
 */
export class ScopedDigests {
  private readonly last = new WeakMap<object, { secret: string; digest: string }>();

  /** `digestOf` (a pure function of the secret, e.g. a salted SHA-256) is called at most once per scope and secret in a row. */
  constructor(private readonly digestOf: (secret: string) => string) {}

  /** digestOf(secret), reused from `scope`'s last secret when it is the same; computed afresh without a scope. */
  of(secret: string, scope: object | undefined): string {
    if (!scope) return this.digestOf(secret);
    const last = this.last.get(scope);
    if (last && last.secret === secret) return last.digest;
    const digest = this.digestOf(secret);
    this.last.set(scope, { secret, digest });
    return digest;
  }
}
