/**
 * One issuer's signing keys (issue 26 item 1, "JWKS cached with rotation"): the JSON Web Key Set is
 * fetched from `jwks_uri` (or the jwks_uri of `<issuer>/.well-known/openid-configuration`) and kept
 * in memory:
 *
 *  - fresh for `refreshMs` (default 5 min); older, it is refreshed in the background while the
 *    cached keys keep answering;
 *  - an unknown `kid`, or a signature the cached key of its kid does not verify (a key rotated under
 *    the same kid), refetches at once, but fetches (successful or not) start at most once per
 *    `cooldownMs` (default 30 s), so a flood of made-up `kid`s or signatures costs no more than one
 *    fetch per cooldown;
 *  - when the endpoint is unreachable, slow (each fetch is cut at `timeoutMs`, default 3 s, and is
 *    shared by every waiting caller) or returns junk (not JSON, no `keys` array, over 256 KiB, a
 *    redirect), the keys of the last good fetch keep serving until `maxStaleMs` (default 1 h) after
 *    it; then, and when there never was a good fetch, keys are refused: IssuerKeysUnavailable
 *    (fails closed; the caller answers identity_provider_unavailable).
 *
 * Callers of other issuers, and API-key callers, never wait on it.
 */
import { createLocalJWKSet, errors as joseErrors, type JSONWebKeySet, type JWTVerifyGetKey } from 'jose';
import type { Logger } from 'pino';

/** The issuer's keys cannot be had now (never fetched, or the last good set is older than maxStaleMs). */
export class IssuerKeysUnavailable extends Error {
  readonly code = 'ERR_ISSUER_KEYS_UNAVAILABLE';
}

/** Timing of an IssuerKeys (ms). */
export interface IssuerKeysOptions {
  /** Age after which the set is refreshed in the background (default 300 000). */
  refreshMs?: number;
  /** Least interval between two fetch attempts (default 30 000). */
  cooldownMs?: number;
  /** Age of the last good set after which it is no longer used (default 3 600 000). */
  maxStaleMs?: number;
  /** Cut-off of one fetch, discovery and JWKS together (default 3000). */
  timeoutMs?: number;
  /** Largest accepted document, in bytes (default 256 KiB). */
  maxBytes?: number;
  logger?: Logger;
  now?: () => number;
}

/** The signing keys of one issuer; `getKey` is the key function jose's jwtVerify takes. */
export class IssuerKeys {
  private local: JWTVerifyGetKey | null = null;
  private fetchedAt = 0;
  private attemptedAt = -Infinity;
  private inflight: Promise<boolean> | null = null;
  private jwksUri: string | undefined;
  private failing = false;
  private readonly o: Required<Omit<IssuerKeysOptions, 'logger'>> & { logger?: Logger };

  /** `issuer` is compared with the discovery document's `issuer`; `jwksUri` skips discovery. */
  constructor(
    readonly issuer: string,
    jwksUri: string | undefined,
    opts: IssuerKeysOptions = {},
  ) {
    this.jwksUri = jwksUri;
    this.o = { refreshMs: 300_000, cooldownMs: 30_000, maxStaleMs: 3_600_000, timeoutMs: 3000, maxBytes: 256 * 1024, now: Date.now, ...opts };
  }

  /** jose key function: the key for the token's header, fetching the set when needed (see the class comment). */
  readonly getKey: JWTVerifyGetKey = async (header, token) => {
    const now = this.o.now();
    if (!this.usable(now)) {
      if (this.mayFetch(now)) await this.fetch();
      if (!this.usable(this.o.now())) throw new IssuerKeysUnavailable(`signing keys of ${this.issuer} are unavailable`);
    } else if (now - this.fetchedAt >= this.o.refreshMs && this.mayFetch(now)) {
      void this.fetch();
    }
    try {
      return await this.local!(header, token);
    } catch (err) {
      // A rotated key: refetch at once (within the cooldown), then try again once.
      if (!(err instanceof joseErrors.JWKSNoMatchingKey) || !this.mayFetch(this.o.now())) throw err;
      if (!(await this.fetch())) throw err;
      return this.local!(header, token);
    }
  };

  /**
   * After a signature that the cached key of its kid did not verify: fetches the set again when the
   * cooldown allows (a key rotated under the same kid, or a JWKS without kids, is otherwise not seen
   * until the background refresh: red team rt48b B6). True when a new set was installed (then verify
   * once more); a flood of forged signatures costs at most one fetch per cooldown, like unknown kids.
   */
  async refetchAfterBadSignature(): Promise<boolean> {
    return this.mayFetch(this.o.now()) ? this.fetch() : false;
  }

  private usable(now: number): boolean {
    return this.local !== null && now - this.fetchedAt < this.o.maxStaleMs;
  }

  private mayFetch(now: number): boolean {
    return this.inflight !== null || now - this.attemptedAt >= this.o.cooldownMs;
  }

  /** One fetch at a time, shared by every caller; resolves true when a new set was installed. Never rejects. */
  private fetch(): Promise<boolean> {
    if (this.inflight) return this.inflight;
    this.attemptedAt = this.o.now();
    this.inflight = this.load()
      .then(
        (jwks) => {
          this.local = createLocalJWKSet(jwks);
          this.fetchedAt = this.o.now();
          if (this.failing) this.o.logger?.info({ component: 'oauth', issuer: this.issuer }, 'issuer signing keys fetched again');
          this.failing = false;
          return true;
        },
        (err: unknown) => {
          // Logged once per failure streak; never the response body (it may echo anything).
          if (!this.failing) this.o.logger?.warn({ component: 'oauth', issuer: this.issuer, reason: (err as Error).message }, 'could not fetch the issuer signing keys; serving the cached ones until they expire');
          this.failing = true;
          return false;
        },
      )
      .finally(() => {
        this.inflight = null;
      });
    return this.inflight;
  }

  private async load(): Promise<JSONWebKeySet> {
    const signal = AbortSignal.timeout(this.o.timeoutMs);
    if (!this.jwksUri) {
      const base = this.issuer.replace(/\/+$/, '');
      const doc = await getJson(`${base}/.well-known/openid-configuration`, signal, this.o.maxBytes);
      if (doc.issuer !== this.issuer) throw new Error('discovery document names another issuer');
      if (typeof doc.jwks_uri !== 'string' || !/^https?:\/\//.test(doc.jwks_uri)) throw new Error('discovery document has no jwks_uri');
      this.jwksUri = doc.jwks_uri;
    }
    const jwks = await getJson(this.jwksUri, signal, this.o.maxBytes);
    if (!Array.isArray(jwks.keys)) throw new Error('JWKS has no keys array');
    // createLocalJWKSet validates the shape; its keys are imported on first use.
    createLocalJWKSet(jwks as unknown as JSONWebKeySet);
    return jwks as unknown as JSONWebKeySet;
  }
}

/** GET `url` as a JSON object, at most `maxBytes`, no redirects; throws a short Error otherwise. */
async function getJson(url: string, signal: AbortSignal, maxBytes: number): Promise<Record<string, unknown>> {
  let res: Response;
  try {
    res = await fetch(url, { signal, redirect: 'error', headers: { accept: 'application/json' } });
  } catch (err) {
    throw new Error((err as Error).name === 'TimeoutError' ? 'timed out' : 'unreachable');
  }
  if (res.status !== 200) {
    await res.body?.cancel().catch(() => undefined);
    throw new Error(`HTTP ${res.status}`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      size += chunk.byteLength;
      if (size > maxBytes) {
        await res.body?.cancel().catch(() => undefined);
        throw new Error('document too large');
      }
      chunks.push(Buffer.from(chunk));
    }
  } catch (err) {
    throw new Error((err as Error).message === 'document too large' ? 'document too large' : 'timed out or cut off');
  }
  let v: unknown;
  try {
    v = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new Error('not JSON');
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not a JSON object');
  return v as Record<string, unknown>;
}
