/**
 * Console sessions (issue 14, item 1; server-side since issue 24, item 3). Signing in with an
 * operator token creates a row in the control database's console_sessions; the cookie holds only a
 * random session id (256 bits, base64url), the table its SHA-256. Every request checks the row, on
 * whichever replica it lands:
 * - signing out ends the session everywhere (ended_at), not just the browser's cookie;
 * - a revoked or expired operator token ends its sessions (the check joins operator_tokens);
 * - the idle timeout (no request for console.session_idle_timeout_seconds) and the absolute
 *   timeout (console.session_absolute_timeout_seconds after sign-in) are enforced in SQL.
 * The cookie is HttpOnly and SameSite=Strict. Over plain HTTP it is `interlock_console`, scoped to
 * /console; when the request came over TLS (a native TLS listener, or a trusted proxy's
 * X-Forwarded-Proto: config trust_proxy) it is `__Host-interlock_console`, Secure, Path=/ and without
 * Domain, a name browsers refuse to take from any other host, a sibling domain included (red team
 * rt48a L2: a page on a sibling domain could plant a more specific `interlock_console` cookie, sent
 * first, and sign the person into its own session). A request carrying more than one session cookie
 * of the name in use is signed out (readCookies: no guessing which one is the person's). The
 * CSRF token is an HMAC of the cookie value under a key derived from the control database's
 * pepper, sent by the page in the X-CSRF-Token header of every state-changing request.
 */
import crypto from 'node:crypto';
import type { ControlDb } from '../control/db';

/** Name of the session cookie over plain HTTP (Path=/console). */
export const SESSION_COOKIE = 'interlock_console';
/** Name of the session cookie over TLS: the `__Host-` prefix makes browsers take it only Secure, Path=/, without Domain, from this host. */
export const SECURE_SESSION_COOKIE = `__Host-${SESSION_COOKIE}`;

/** The session cookie's name for a request over TLS (`secure`, req.secure) or plain HTTP. */
export function sessionCookieName(secure: boolean): string {
  return secure ? SECURE_SESSION_COOKIE : SESSION_COOKIE;
}

/** Session timeouts in seconds (config console.*; defaults in DEFAULT_CONFIG). */
export interface SessionTimeouts {
  idleSeconds: number;
  absoluteSeconds: number;
}

/** Defaults of SessionTimeouts: 30 minutes idle, 8 hours absolute. */
export const DEFAULT_SESSION_TIMEOUTS: Readonly<SessionTimeouts> = Object.freeze({ idleSeconds: 1800, absoluteSeconds: 28_800 });

/** A live session. */
export interface ConsoleSession {
  tokenId: string;
  operator: string;
  /** When the session ends at the latest (absolute timeout), ISO-8601 UTC. */
  expiresAt: string;
}

const mac = (key: Buffer, label: string, value: string) => crypto.createHmac('sha256', key).update(label).update('\u0000').update(value).digest('base64url');
const idHash = (cookie: string) => crypto.createHash('sha256').update(cookie, 'utf8').digest();
/** Shape of a session cookie value: 32 random bytes, base64url. */
const COOKIE_VALUE = /^[A-Za-z0-9_-]{43}$/;

/** The console's CSRF key, derived from the control database's key pepper. */
export function consoleKey(pepper: Buffer): Buffer {
  return crypto.createHmac('sha256', pepper).update('interlock-console-v1').digest();
}

/**
 * Creates a session for an operator token and returns its cookie value (shown to the browser only).
 * Deletes sessions that ended or expired more than a day ago on the way (the table stays small).
 */
export async function createConsoleSession(db: ControlDb, s: { tokenId: string; operator: string }, t: SessionTimeouts): Promise<{ cookie: string; session: ConsoleSession }> {
  await db.pool.query("DELETE FROM console_sessions WHERE expires_at < now() - interval '1 day' OR ended_at < now() - interval '1 day'");
  const cookie = crypto.randomBytes(32).toString('base64url');
  const r = await db.pool.query<{ expires_at: Date }>(
    'INSERT INTO console_sessions (id_hash, token_id, operator, expires_at) VALUES ($1, $2, $3, now() + make_interval(secs => $4)) RETURNING expires_at',
    [idHash(cookie), s.tokenId, s.operator, t.absoluteSeconds],
  );
  return { cookie, session: { tokenId: s.tokenId, operator: s.operator, expiresAt: r.rows[0].expires_at.toISOString() } };
}

/**
 * The live session of a cookie value, or null: unknown, signed out, idle longer than
 * `t.idleSeconds`, past its absolute expiry, or its operator token revoked or expired. With
 * `touch` (a request by the person), its idle clock restarts; the event stream's periodic checks
 * do not touch, so an open page left alone still times out.
 */
export async function resolveConsoleSession(db: ControlDb, cookie: string | undefined, t: SessionTimeouts, touch: boolean): Promise<ConsoleSession | null> {
  if (!cookie || !COOKIE_VALUE.test(cookie)) return null;
  const r = await db.pool.query<{ token_id: string; operator: string; expires_at: Date }>(
    `${touch ? 'UPDATE console_sessions s SET last_seen_at = now() FROM operator_tokens o' : 'SELECT s.token_id, s.operator, s.expires_at FROM console_sessions s JOIN operator_tokens o ON true'}
     WHERE s.id_hash = $1 AND o.id = s.token_id AND s.ended_at IS NULL AND s.expires_at > now()
       AND s.last_seen_at > now() - make_interval(secs => $2)
       AND o.revoked_at IS NULL AND (o.expires_at IS NULL OR o.expires_at > now())
     ${touch ? 'RETURNING s.token_id, s.operator, s.expires_at' : ''}`,
    [idHash(cookie), t.idleSeconds],
  );
  const row = r.rows[0];
  return row ? { tokenId: row.token_id, operator: row.operator, expiresAt: row.expires_at.toISOString() } : null;
}

/** Ends the session of a cookie value everywhere (sign-out). True when a live session was ended. */
export async function endConsoleSession(db: ControlDb, cookie: string): Promise<boolean> {
  if (!COOKIE_VALUE.test(cookie)) return false;
  const r = await db.pool.query("UPDATE console_sessions SET ended_at = now(), ended_reason = 'signed_out' WHERE id_hash = $1 AND ended_at IS NULL", [idHash(cookie)]);
  return (r.rowCount ?? 0) > 0;
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

/**
 * Every value of cookie `name` in a Cookie header, in header order (names compared exactly, after
 * trimming spaces); [] when none. A browser sends several when cookies of one name differ in path or
 * domain: the caller must not pick one (red team rt48a L2).
 */
export function readCookies(header: string | undefined, name: string): string[] {
  const values: string[] = [];
  for (const part of (header ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) values.push(part.slice(i + 1).trim());
  }
  return values;
}

/**
 * The Set-Cookie value of a session (empty value + Max-Age=0 clears it). Over TLS (`secure`,
 * req.secure): `__Host-interlock_console=…; Path=/; HttpOnly; SameSite=Strict; Max-Age=N; Secure`;
 * else `interlock_console=…; Path=/console; HttpOnly; SameSite=Strict; Max-Age=N`.
 */
export function sessionCookie(value: string, maxAgeSeconds: number, secure: boolean): string {
  return `${sessionCookieName(secure)}=${value}; Path=${secure ? '/' : '/console'}; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSeconds}${secure ? '; Secure' : ''}`;
}
