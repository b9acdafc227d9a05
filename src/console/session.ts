/**
 * Console sessions (issue 14, item 1): pure functions over a server key. Signing in with an
 * operator token gives a session cookie holding {token id, operator name, expiry} sealed with
 * HMAC-SHA-256, so any replica can check it (no server-side session store, like the rest of the
 * gateway). The cookie is HttpOnly, SameSite=Strict and scoped to /console; the CSRF token is an
 * HMAC of the cookie value, sent by the page in the X-CSRF-Token header of every state-changing
 * request (double defence with SameSite=Strict and the Host/Origin guard).
 *
 * The routes re-check the token id on every request, so revoking the operator token ends the
 * session at once.
 */
import crypto from 'node:crypto';

/** Name of the session cookie. */
export const SESSION_COOKIE = 'interlock_console';
/** Session lifetime in seconds (8 hours). */
export const SESSION_TTL_SECONDS = 8 * 3600;

/** What a session holds. `exp` is seconds since the epoch. */
export interface ConsoleSession {
  tokenId: string;
  operator: string;
  exp: number;
}

const mac = (key: Buffer, label: string, value: string) => crypto.createHmac('sha256', key).update(label).update('\u0000').update(value).digest('base64url');

/** The console's key, derived from the control database's key pepper. */
export function consoleKey(pepper: Buffer): Buffer {
  return crypto.createHmac('sha256', pepper).update('interlock-console-v1').digest();
}

/** Seals a session into a cookie value: base64url(JSON) + "." + MAC. */
export function sealSession(key: Buffer, s: ConsoleSession): string {
  const body = Buffer.from(JSON.stringify({ t: s.tokenId, o: s.operator, e: s.exp })).toString('base64url');
  return `${body}.${mac(key, 'session', body)}`;
}

/** Opens a cookie value: the session, or null when malformed, forged or expired at `nowSeconds`. */
export function openSession(key: Buffer, value: string | undefined, nowSeconds: number): ConsoleSession | null {
  if (!value || value.length > 1024) return null;
  const [body, sig, extra] = value.split('.');
  if (!body || !sig || extra !== undefined) return null;
  const want = Buffer.from(mac(key, 'session', body));
  const got = Buffer.from(sig);
  if (want.length !== got.length || !crypto.timingSafeEqual(want, got)) return null;
  try {
    const j = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as { t?: unknown; o?: unknown; e?: unknown };
    if (typeof j.t !== 'string' || typeof j.o !== 'string' || typeof j.e !== 'number' || j.e <= nowSeconds) return null;
    return { tokenId: j.t, operator: j.o, exp: j.e };
  } catch {
    return null;
  }
}

/** The CSRF token bound to a cookie value. */
export function csrfToken(key: Buffer, cookieValue: string): string {
  return mac(key, 'csrf', cookieValue);
}

/** True when `presented` is the CSRF token of `cookieValue` (constant time). */
export function csrfValid(key: Buffer, cookieValue: string, presented: string | undefined): boolean {
  if (typeof presented !== 'string') return false;
  const want = Buffer.from(csrfToken(key, cookieValue));
  const got = Buffer.from(presented);
  return want.length === got.length && crypto.timingSafeEqual(want, got);
}

/** The value of cookie `name` in a Cookie header, or undefined. */
export function readCookie(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) return part.slice(i + 1).trim();
  }
  return undefined;
}

/** The Set-Cookie value of a session (empty value + Max-Age=0 clears it). Secure when served over HTTPS. */
export function sessionCookie(value: string, maxAgeSeconds: number, secure: boolean): string {
  return `${SESSION_COOKIE}=${value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSeconds}${secure ? '; Secure' : ''}`;
}
