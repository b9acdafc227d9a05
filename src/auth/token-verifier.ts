/**
 * JWT access-token verification (issue 26 item 1; RFC 7519, RFC 8725, RFC 9068) with `jose`:
 * signature by a key of the issuer's JWKS (src/auth/issuer-keys.ts), `alg` among the issuer's
 * allowed asymmetric algorithms (`none` and HMAC never, so a token "signed" with the issuer's public
 * key as an HMAC secret is refused), `iss` exactly, `aud` containing the expected audience (the
 * gateway's resource URL by default, RFC 8707), `exp`/`nbf`/`iat` within the clock skew, and the
 * required scopes, and the `typ` header (RFC 9068 §4: the issuer's `token_type` when configured; otherwise
 * absent, `JWT` or `at+jwt`, so that another kind of token the same keys sign, such as a logout token
 * or a DPoP proof, is never taken for an access token). The cheap checks (form, size, unverified `iss` among the configured issuers) run
 * first, before any key is fetched.
 */
import { errors as joseErrors, jwtVerify, type JWTHeaderParameters, type JWTPayload } from 'jose';
import type { Logger } from 'pino';
import type { TokenIssuer } from '../../generated/config-v1';
import { IssuerKeys, IssuerKeysUnavailable, type IssuerKeysOptions } from './issuer-keys';
import { readTokenForm } from './jwt-form';
import { MAX_TOKEN_SUBJECT } from '../control/identities';

/** Algorithms allowed when an issuer names none. */
export const DEFAULT_ALGORITHMS: readonly string[] = Object.freeze(['RS256', 'ES256']);
/** Clock skew when an issuer names none, in seconds. */
export const DEFAULT_CLOCK_SKEW_SECONDS = 60;

/**
 * Why a token was refused, also the `outcome` label of interlock_token_validations_total (with
 * `valid`): the refusal code is invalid_token for all but `insufficient_scope` (insufficient_scope)
 * and `keys_unavailable` (identity_provider_unavailable).
 */
export const TOKEN_FAILURES = ['oversized', 'malformed', 'unknown_issuer', 'expired', 'not_yet_valid', 'wrong_issuer', 'wrong_audience', 'alg_not_allowed', 'bad_signature', 'unknown_kid', 'wrong_type', 'invalid_claims', 'insufficient_scope', 'keys_unavailable'] as const;
/** One of TOKEN_FAILURES. */
export type TokenFailure = (typeof TOKEN_FAILURES)[number];

/** A verified token: its issuer settings and claims. */
export interface VerifiedToken {
  issuer: TokenIssuer;
  claims: JWTPayload;
}

/** The refusal code (spec/errors-v1.json) of a TokenFailure. */
export function refusalOfFailure(f: TokenFailure): 'invalid_token' | 'insufficient_scope' | 'identity_provider_unavailable' {
  return f === 'insufficient_scope' ? 'insufficient_scope' : f === 'keys_unavailable' ? 'identity_provider_unavailable' : 'invalid_token';
}

/** Verifies tokens of the configured issuers. */
export class TokenVerifier {
  private readonly byIssuer = new Map<string, { cfg: TokenIssuer; keys: IssuerKeys }>();

  /** `resource` is auth.resource (the default audience). Issuers without an audience and without a resource are a configuration error (thrown). */
  constructor(
    issuers: readonly TokenIssuer[],
    private readonly resource: string | undefined,
    opts: IssuerKeysOptions & { logger?: Logger } = {},
  ) {
    for (const cfg of issuers) {
      if (!cfg.audience && !resource) throw new Error(`auth.issuers ${cfg.issuer}: set auth.resource or the issuer's audience`);
      const cooldown = cfg.jwks_cooldown_seconds !== undefined ? { cooldownMs: cfg.jwks_cooldown_seconds * 1000 } : {};
      this.byIssuer.set(cfg.issuer, { cfg, keys: new IssuerKeys(cfg.issuer, cfg.jwks_uri, { ...opts, ...cooldown }) });
    }
  }

  /** True when tokens of `issuer` (an unverified `iss`) can be verified here. */
  knows(issuer: string): boolean {
    return this.byIssuer.has(issuer);
  }

  /** Whether any issuer is configured. */
  get enabled(): boolean {
    return this.byIssuer.size > 0;
  }

  /** The configured issuer identifiers (RFC 9728 authorization_servers). */
  issuers(): string[] {
    return [...this.byIssuer.keys()];
  }

  /** Verifies `token`. Never throws: every problem is a TokenFailure. */
  async verify(token: string): Promise<{ ok: true; token: VerifiedToken } | { ok: false; failure: TokenFailure }> {
    const form = readTokenForm(token);
    if (!form.ok) return { ok: false, failure: form.reason };
    const entry = this.byIssuer.get(form.issuer);
    if (!entry) return { ok: false, failure: 'unknown_issuer' };
    const { cfg, keys } = entry;
    let claims: JWTPayload;
    let header: JWTHeaderParameters;
    const options = {
      issuer: cfg.issuer,
      audience: cfg.audience ?? this.resource!,
      algorithms: [...(cfg.algorithms ?? DEFAULT_ALGORITHMS)],
      clockTolerance: cfg.clock_skew_seconds ?? DEFAULT_CLOCK_SKEW_SECONDS,
      requiredClaims: ['exp', 'sub'],
      ...(cfg.token_type !== undefined ? { typ: cfg.token_type } : {}),
    };
    try {
      try {
        ({ payload: claims, protectedHeader: header } = await jwtVerify(token, keys.getKey, options));
      } catch (err) {
        // A key rotated under the same kid (or a set without kids): a fresh set, once, within the cooldown (rt48b B6).
        if (!(err instanceof joseErrors.JWSSignatureVerificationFailed) || !(await keys.refetchAfterBadSignature())) throw err;
        ({ payload: claims, protectedHeader: header } = await jwtVerify(token, keys.getKey, options));
      }
    } catch (err) {
      return { ok: false, failure: failureOf(err) };
    }
    if (cfg.token_type === undefined && !isAccessTokenType(header.typ)) return { ok: false, failure: 'wrong_type' };
    // RFC 7519 4.1.2: sub is a string. jose checks only that it is present, and String() of an object,
    // array or number would make distinct or odd subjects one identity_subjects key ("[object Object]").
    if (typeof claims.sub !== 'string' || claims.sub.length === 0 || claims.sub.length > MAX_TOKEN_SUBJECT) return { ok: false, failure: 'invalid_claims' };
    const required = cfg.required_scopes ?? [];
    if (required.length > 0) {
      const granted = new Set(scopesOf(claims));
      if (!required.every((s) => granted.has(s))) return { ok: false, failure: 'insufficient_scope' };
    }
    return { ok: true, token: { issuer: cfg, claims } };
  }
}

/**
 * Whether a `typ` header (RFC 7515 §4.1.9) can be an access token's when the issuer names no
 * token_type: absent, `JWT` (RFC 7519 §5.1) or `at+jwt` (RFC 9068 §2.1), compared as jose compares
 * (case-insensitive, an `application/` prefix dropped). Any other value names another kind of token.
 */
export function isAccessTokenType(typ: unknown): boolean {
  if (typ === undefined) return true;
  if (typeof typ !== 'string') return false;
  const t = typ.toLowerCase().replace(/^application\//, '');
  return t === 'jwt' || t === 'at+jwt';
}

/** The scopes of a token: the space-separated `scope` claim, or an `scp` array (Entra ID, Okta). */
export function scopesOf(claims: JWTPayload): string[] {
  if (typeof claims.scope === 'string') return claims.scope.split(' ').filter((s) => s.length > 0);
  if (Array.isArray(claims.scp)) return claims.scp.filter((s): s is string => typeof s === 'string');
  return [];
}

function failureOf(err: unknown): TokenFailure {
  if (err instanceof IssuerKeysUnavailable) return 'keys_unavailable';
  if (err instanceof joseErrors.JWTExpired) return 'expired';
  if (err instanceof joseErrors.JWTClaimValidationFailed) {
    if (err.claim === 'nbf' || err.claim === 'iat') return 'not_yet_valid';
    if (err.claim === 'aud') return 'wrong_audience';
    if (err.claim === 'iss') return 'wrong_issuer';
    if (err.claim === 'typ') return 'wrong_type';
    return 'invalid_claims';
  }
  if (err instanceof joseErrors.JOSEAlgNotAllowed) return 'alg_not_allowed';
  if (err instanceof joseErrors.JWSSignatureVerificationFailed) return 'bad_signature';
  if (err instanceof joseErrors.JWKSNoMatchingKey || err instanceof joseErrors.JWKSMultipleMatchingKeys) return 'unknown_kid';
  return 'malformed';
}
