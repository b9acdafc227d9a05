/**
 * Issue 24, item 3: real console sessions, on real gateways sharing one control database.
 * - Sessions live in the control database: a sign-out on one replica ends the session on every
 *   replica and for every copy of the cookie; revoking the operator token ends all its sessions;
 *   the idle and absolute timeouts are enforced (and the idle one is configurable); an open event
 *   stream ends with its session. The table holds only a hash of the cookie.
 * - The cookie is Secure when the console is served over TLS: natively (listen.tls, whose
 *   certificate is reloaded on SIGHUP) or behind a proxy that trust_proxy trusts.
 */
import { request as httpsRequest } from 'node:https';
import { createHash, X509Certificate } from 'node:crypto';
import { copyFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { makeTestCert, type TestCert } from '../../helpers/tls-cert';
import { createOperatorToken, revokeOperatorToken } from '../../../src/admin/tokens';
import { startGovernedGateway, type GovernedGateway } from '../../../src/gateway';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from '../../../src/control/config';
import { createLogger } from '../../../src/observability/logger';

jest.setTimeout(120_000);

let env: GovernedEnv;
let replica: GovernedGateway;
let proxied: GovernedGateway;
let token: { secret: string; tokenId: string };

const config = (over: Partial<ResolvedGatewayConfig>): ResolvedGatewayConfig => ({ ...structuredClone(DEFAULT_CONFIG as ResolvedGatewayConfig), ...over });
const originOf = (url: string) => new URL(url).origin;

beforeAll(async () => {
  env = await startGovernedEnv();
  // A second replica on the same control database, with a 60 s idle timeout.
  replica = await startGovernedGateway({ db: env.db, config: config({ console: { session_idle_timeout_seconds: 60, session_absolute_timeout_seconds: 28_800 } }), host: '127.0.0.1', port: 0, logger: createLogger('silent'), catalogRescanMs: 0 });
  // A replica behind a TLS-terminating proxy on loopback.
  proxied = await startGovernedGateway({ db: env.db, config: config({ trust_proxy: ['loopback'] }), host: '127.0.0.1', port: 0, logger: createLogger('silent'), catalogRescanMs: 0 });
  token = await createOperatorToken(env.db, 'ops-sam');
});
afterAll(async () => {
  await replica?.close(500);
  await proxied?.close(500);
  await env?.close();
});

async function signIn(base: string, secret = token.secret, headers: Record<string, string> = {}) {
  const r = await fetch(`${base}/console/api/session`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ token: secret }) });
  const setCookie = r.headers.get('set-cookie') ?? '';
  const json = (await r.json()) as { csrfToken: string; operator: string };
  return { status: r.status, setCookie, cookie: setCookie.split(';')[0], csrf: json.csrfToken };
}
const get = async (base: string, cookie: string, path = '/console/api/approvals') => (await fetch(base + path, { headers: { cookie } })).status;

test('the cookie is only a random id; the table keeps its SHA-256; the session reaches every replica', async () => {
  const s = await signIn(originOf(env.url));
  expect(s.status).toBe(200);
  expect(s.setCookie).toMatch(/^interlock_console=[A-Za-z0-9_-]{43}; Path=\/console; HttpOnly; SameSite=Strict; Max-Age=28800$/);
  const value = s.cookie.split('=')[1];
  const rows = (await env.db.pool.query("SELECT encode(id_hash, 'hex') AS h, operator, token_id, ended_at FROM console_sessions WHERE token_id = $1", [token.tokenId])).rows;
  expect(rows).toEqual([{ h: createHash('sha256').update(value).digest('hex'), operator: 'ops-sam', token_id: token.tokenId, ended_at: null }]);
  expect(await get(originOf(replica.url), s.cookie)).toBe(200);
});

test('sign-out on one replica ends the session on every replica and for every copy of the cookie', async () => {
  const s = await signIn(originOf(env.url));
  const copy = s.cookie;
  expect(await get(originOf(replica.url), copy)).toBe(200);
  const out = await fetch(`${originOf(replica.url)}/console/api/session`, { method: 'DELETE', headers: { cookie: s.cookie, 'x-csrf-token': s.csrf } });
  expect(out.status).toBe(200);
  expect(out.headers.get('set-cookie')).toBe('interlock_console=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0');
  expect(await get(originOf(env.url), copy)).toBe(401);
  expect(await get(originOf(replica.url), copy)).toBe(401);
  const again = await fetch(`${originOf(env.url)}/console/api/session`, { headers: { cookie: copy } });
  expect(again.status).toBe(401);
  expect(await again.json()).toEqual({ error: 'unauthorized', code: 'missing_operator_token', message: 'Sign in to the console with an operator token' });
});

test('revoking the operator token ends all its sessions', async () => {
  const other = await createOperatorToken(env.db, 'ops-tim');
  const a = await signIn(originOf(env.url), other.secret);
  const b = await signIn(originOf(replica.url), other.secret);
  expect([await get(originOf(env.url), a.cookie), await get(originOf(replica.url), b.cookie)]).toEqual([200, 200]);
  await revokeOperatorToken(env.db, other.tokenId);
  expect([await get(originOf(env.url), a.cookie), await get(originOf(replica.url), b.cookie), await get(originOf(env.url), b.cookie)]).toEqual([401, 401, 401]);
});

test('idle and absolute timeouts: the idle one per replica configuration, a request restarts the idle clock', async () => {
  const s = await signIn(originOf(env.url));
  const hash = createHash('sha256').update(s.cookie.split('=')[1]).digest();
  await env.db.pool.query("UPDATE console_sessions SET last_seen_at = now() - interval '90 seconds' WHERE id_hash = $1", [hash]);
  // Idle 90 s: past the replica's 60 s, within the default 30 minutes (which restarts the clock).
  expect(await get(originOf(replica.url), s.cookie)).toBe(401);
  expect(await get(originOf(env.url), s.cookie)).toBe(200);
  expect(await get(originOf(replica.url), s.cookie)).toBe(200);
  await env.db.pool.query("UPDATE console_sessions SET last_seen_at = now() - interval '31 minutes' WHERE id_hash = $1", [hash]);
  expect(await get(originOf(env.url), s.cookie)).toBe(401);

  const t = await signIn(originOf(env.url));
  await env.db.pool.query("UPDATE console_sessions SET expires_at = now() - interval '1 second' WHERE id_hash = $1", [createHash('sha256').update(t.cookie.split('=')[1]).digest()]);
  expect(await get(originOf(env.url), t.cookie)).toBe(401);
  // Garbage and forged cookies are simply no session.
  expect(await get(originOf(env.url), 'interlock_console=' + 'A'.repeat(43))).toBe(401);
  expect(await get(originOf(env.url), 'interlock_console=x.y')).toBe(401);
});

test('an open event stream ends when its session is signed out elsewhere', async () => {
  const s = await signIn(originOf(env.url));
  const stream = await fetch(`${originOf(env.url)}/console/api/events`, { headers: { cookie: s.cookie } });
  expect(stream.status).toBe(200);
  const reader = stream.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  const first = await reader.read();
  text += decoder.decode(first.value);
  await fetch(`${originOf(replica.url)}/console/api/session`, { method: 'DELETE', headers: { cookie: s.cookie, 'x-csrf-token': s.csrf } });
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value);
  }
  expect(text).toMatch(/event: session_ended\ndata: \{\}\n\n$/);
});

test('trust_proxy: behind a trusted proxy X-Forwarded-Proto https makes the cookie Secure; without trust_proxy the header is ignored', async () => {
  expect((await signIn(originOf(proxied.url), token.secret, { 'x-forwarded-proto': 'https' })).setCookie).toMatch(/; Max-Age=28800; Secure$/);
  expect((await signIn(originOf(proxied.url))).setCookie).toMatch(/; Max-Age=28800$/);
  expect((await signIn(originOf(env.url), token.secret, { 'x-forwarded-proto': 'https' })).setCookie).toMatch(/; Max-Age=28800$/);
});

// Red team rt48a L2 (cookie tossing): a page on a sibling domain can set an interlock_console cookie
// for a more specific path (/console/api), which the browser sends first; the console took the first
// one and signed the person into the setter's session. Shown failing before the fix: two cookies
// answered 200 as the first one's operator, and over HTTPS the cookie was named interlock_console.
describe('two session cookies, and the __Host- name over HTTPS (rt48a L2)', () => {
  const SEVERAL = { error: 'unauthorized', code: 'missing_operator_token', message: "More than one console session cookie was sent (another site of this domain may have set one): signed out; clear this site's cookies, then sign in again" };
  const call = async (base: string, cookie: string, init: { method?: string; headers?: Record<string, string>; path?: string } = {}) => {
    const r = await fetch(base + (init.path ?? '/console/api/session'), { method: init.method ?? 'GET', headers: { cookie, ...(init.headers ?? {}) } });
    return { status: r.status, json: (await r.json().catch(() => null)) as unknown, setCookie: r.headers.get('set-cookie') };
  };
  let attacker: { secret: string; tokenId: string };
  beforeAll(async () => {
    attacker = await createOperatorToken(env.db, 'ops-mallory');
  });

  test('over HTTP: a request with two interlock_console cookies is signed out (401 for every API call), whichever comes first', async () => {
    const base = originOf(env.url);
    const planted = await signIn(base, attacker.secret);
    const own = await signIn(base);
    expect((await call(base, own.cookie)).json).toMatchObject({ operator: 'ops-sam' });
    for (const header of [`${planted.cookie}; ${own.cookie}`, `${own.cookie}; ${planted.cookie}`, `${own.cookie}; ${own.cookie}`]) {
      expect(await call(base, header)).toEqual({ status: 401, json: SEVERAL, setCookie: null });
      expect((await call(base, header, { path: '/console/api/approvals' })).status).toBe(401);
      expect((await call(base, header, { path: '/console/api/events' })).status).toBe(401);
      // A change (with the first cookie's CSRF token) is refused the same way and changes nothing.
      expect((await call(base, header, { method: 'DELETE', headers: { 'x-csrf-token': header.startsWith(planted.cookie) ? planted.csrf : own.csrf } })).status).toBe(401);
    }
    // Each alone is still its own session (nothing was signed out above).
    expect([(await call(base, own.cookie)).json, (await call(base, planted.cookie)).json]).toMatchObject([{ operator: 'ops-sam' }, { operator: 'ops-mallory' }]);
  });

  test('over HTTPS (a trusted proxy): the cookie is __Host-interlock_console, Path=/, Secure; a planted interlock_console is not read; two __Host- cookies are signed out', async () => {
    const base = originOf(proxied.url);
    const https = { 'x-forwarded-proto': 'https' };
    const own = await signIn(base, token.secret, https);
    expect(own.setCookie).toMatch(/^__Host-interlock_console=[A-Za-z0-9_-]{43}; Path=\/; HttpOnly; SameSite=Strict; Max-Age=28800; Secure$/);
    expect((await call(base, own.cookie, { headers: https })).json).toMatchObject({ operator: 'ops-sam' });
    // A sibling domain can set only the unprefixed name: over HTTPS it is no session, beside the person's or alone.
    const planted = (await signIn(base, attacker.secret)).cookie;
    expect(planted).toMatch(/^interlock_console=/);
    expect((await call(base, `${planted}; ${own.cookie}`, { headers: https })).json).toMatchObject({ operator: 'ops-sam' });
    expect((await call(base, planted, { headers: https })).status).toBe(401);
    const other = (await signIn(base, attacker.secret, https)).cookie;
    expect(await call(base, `${other}; ${own.cookie}`, { headers: https })).toEqual({ status: 401, json: SEVERAL, setCookie: null });
    // Sign-out clears the same name and path.
    const out = await call(base, own.cookie, { method: 'DELETE', headers: { ...https, 'x-csrf-token': own.csrf } });
    expect([out.status, out.setCookie]).toEqual([200, '__Host-interlock_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0; Secure']);
    expect((await call(base, own.cookie, { headers: https })).status).toBe(401);
  });
});

describe('listen.tls', () => {
  let tlsGateway: GovernedGateway;
  let first: TestCert;

  /** One HTTPS request on a new connection, trusting `ca`; the status, headers, body and the server certificate's fingerprint. */
  function httpsCall(url: string, ca: string[], init: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string; fingerprint: string }> {
    return new Promise((resolve, reject) => {
      const req = httpsRequest(url, { method: init.method ?? 'GET', headers: init.headers, ca, agent: false }, (res) => {
        const fingerprint = new X509Certificate((res.socket as TLSSocket).getPeerCertificate(false).raw).fingerprint256;
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body, fingerprint }));
      });
      req.on('error', reject);
      req.end(init.body);
    });
  }

  beforeAll(async () => {
    first = makeTestCert('first');
    tlsGateway = await startGovernedGateway({ db: env.db, config: config({ listen: { ...DEFAULT_CONFIG.listen, tls: { cert_file: first.certFile, key_file: first.keyFile } } }), host: '127.0.0.1', port: 0, logger: createLogger('silent'), catalogRescanMs: 0 });
  });
  afterAll(async () => {
    await tlsGateway?.close(500);
  });

  test('the console is served over TLS and its cookie is Secure', async () => {
    expect(tlsGateway.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/mcp$/);
    const r = await httpsCall(`${originOf(tlsGateway.url)}/console/api/session`, [first.cert], { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: token.secret }) });
    expect(r.status).toBe(200);
    expect(r.fingerprint).toBe(first.fingerprint);
    // Over TLS the __Host- name (rt48a L2): no other host, a sibling domain included, can set it.
    expect(String(r.headers['set-cookie'])).toMatch(/^__Host-interlock_console=[A-Za-z0-9_-]{43}; Path=\/; HttpOnly; SameSite=Strict; Max-Age=28800; Secure$/);
    const cookie = String(r.headers['set-cookie']).split(';')[0];
    expect((await httpsCall(`${originOf(tlsGateway.url)}/console/api/session`, [first.cert], { headers: { cookie } })).status).toBe(200);
  });

  test('SIGHUP reloads the certificate and key; a failed reload keeps the current one', async () => {
    const second = makeTestCert('second', dirname(first.certFile));
    copyFileSync(second.certFile, first.certFile);
    copyFileSync(second.keyFile, first.keyFile);
    // Jest gives each test file its own process object, whose listeners a real signal to the worker
    // does not reach (the worker would end): the signal is delivered to the gateway's listener by emit.
    expect(process.listenerCount('SIGHUP')).toBe(1);
    process.emit('SIGHUP', 'SIGHUP');
    let seen = '';
    for (let i = 0; i < 50 && seen !== second.fingerprint; i++) {
      seen = (await httpsCall(`${originOf(tlsGateway.url)}/healthz`, [first.cert, second.cert])).fingerprint;
      if (seen !== second.fingerprint) await new Promise((r) => setTimeout(r, 100));
    }
    expect(seen).toBe(second.fingerprint);

    writeFileSync(first.certFile, 'not a certificate');
    expect(await tlsGateway.reloadTls()).toBe(false);
    const still = await httpsCall(`${originOf(tlsGateway.url)}/healthz`, [second.cert]);
    expect({ status: still.status, fingerprint: still.fingerprint }).toEqual({ status: 200, fingerprint: second.fingerprint });
  });
});
