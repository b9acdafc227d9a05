/**
 * The cheap, network-free checks on a presented Bearer token that looks like a JWT (issue 26 item 1,
 * "keep junk tokens cheap"): its form (three base64url segments, at most MAX_TOKEN_BYTES) and the
 * unverified `iss` of its payload, used only to pick the issuer whose keys will verify it. Nothing
 * here trusts the token; src/auth/token-verifier.ts verifies it. Pure.
 */

/** Largest access token accepted, in characters (8 KiB); a longer one is refused as oversized before it is decoded. */
export const MAX_TOKEN_BYTES = 8192;

const JWT_FORM = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

/** True when `token` is shaped like a compact JWS (it holds exactly two dots): then it is judged as a token, never as an API key. */
export function isJwtShaped(token: string): boolean {
  let dots = 0;
  for (let i = 0; i < token.length && dots < 3; i++) if (token.charCodeAt(i) === 46) dots++;
  return dots === 2;
}

/** What the form check found: the unverified issuer, or why the token is refused before verification. */
export type TokenForm = { ok: true; issuer: string } | { ok: false; reason: 'oversized' | 'malformed' };

/**
 * Checks a JWT-shaped token's form and reads its unverified `iss`: `oversized` past MAX_TOKEN_BYTES,
 * `malformed` when a segment is not base64url, the header or payload is not a JSON object, or `iss`
 * is not a string. Never throws.
 */
export function readTokenForm(token: string): TokenForm {
  if (token.length > MAX_TOKEN_BYTES) return { ok: false, reason: 'oversized' };
  if (!JWT_FORM.test(token)) return { ok: false, reason: 'malformed' };
  const [h, p] = token.split('.', 2);
  const header = decodeSegment(h);
  const payload = decodeSegment(p);
  if (!header || !payload || typeof payload.iss !== 'string') return { ok: false, reason: 'malformed' };
  return { ok: true, issuer: payload.iss };
}

/** base64url → JSON object, or null. A segment whose length is 1 mod 4 is not base64 (no byte decodes from 6 bits). */
function decodeSegment(seg: string): Record<string, unknown> | null {
  if (seg.length % 4 === 1) return null;
  try {
    const v: unknown = JSON.parse(Buffer.from(seg, 'base64url').toString('utf8'));
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}
