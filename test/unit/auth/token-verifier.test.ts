/**
 * Issue 26 item 1 and "Bad input, each with a test": TokenVerifier against a real issuer over HTTP
 * (test/helpers/jwks-server.ts), each bad token a precise failure and none a throw or a stall.
 */
import { base64url, generateKeyPair, SignJWT } from 'jose';
import { startTestIssuer, type TestIssuer } from '../../helpers/jwks-server';
import { refusalOfFailure, TokenVerifier } from '../../../src/auth/token-verifier';

const RESOURCE = 'http://127.0.0.1:9/mcp';
let iss: TestIssuer;
beforeEach(async () => {
  iss = await startTestIssuer(RESOURCE);
});
afterEach(async () => {
  await iss.close();
});

function verifier(opts: { cooldownMs?: number; timeoutMs?: number; refreshMs?: number; maxStaleMs?: number; now?: () => number; discovery?: boolean; required_scopes?: string[]; token_type?: string } = {}) {
  const { discovery, required_scopes, token_type, ...timing } = opts;
  return new TokenVerifier([{ issuer: iss.issuer, jwks_uri: discovery ? undefined : iss.jwksUri, required_scopes, token_type }], RESOURCE, { cooldownMs: 0, ...timing });
}

async function failure(v: TokenVerifier, token: string) {
  const r = await v.verify(token);
  return r.ok ? 'valid' : r.failure;
}

test('a valid token verifies, by jwks_uri and by OpenID discovery', async () => {
  for (const discovery of [false, true]) {
    const r = await verifier({ discovery }).verify(await iss.mint({ sub: 'ana' }));
    expect(r.ok).toBe(true);
    expect(r.ok && r.token.claims.sub).toBe('ana');
  }
});

test('expired, not yet valid, other issuer, other audience, missing audience', async () => {
  const v = verifier();
  const now = Math.floor(Date.now() / 1000);
  expect(await failure(v, await iss.mint({ exp: now - 3600 }))).toBe('expired');
  expect(await failure(v, await iss.mint({ nbf: now + 3600 }))).toBe('not_yet_valid');
  expect(await failure(v, await iss.mint({ iss: 'https://idp.elsewhere.example' }))).toBe('unknown_issuer');
  expect(await failure(v, await iss.mint({ aud: 'https://other-resource.example/mcp' }))).toBe('wrong_audience');
  expect(await failure(v, await iss.mint({ aud: undefined }))).toBe('wrong_audience');
  // Within the skew (60 s) an expiry just passed is still accepted.
  expect(await failure(v, await iss.mint({ exp: now - 5 }))).toBe('valid');
});

test('typ (RFC 9068): another kind of token the issuer signs is refused wrong_type; token_type requires one', async () => {
  const v = verifier();
  expect(await failure(v, await iss.mint({}, { typ: 'at+jwt' }))).toBe('valid');
  expect(await failure(v, await iss.mint({}, { typ: 'application/AT+JWT' }))).toBe('valid');
  expect(await failure(v, await iss.mint({}, { typ: 'JWT' }))).toBe('valid');
  expect(await failure(v, await iss.mint({}, { typ: undefined }))).toBe('valid');
  for (const typ of ['logout+jwt', 'dpop+jwt', 'secevent+jwt', 'application/id_token+jwt', 'JOSE']) expect(await failure(v, await iss.mint({}, { typ }))).toBe('wrong_type');
  expect(await failure(v, await iss.mint({}, { typ: 7 }))).toBe('wrong_type');
  const strict = verifier({ token_type: 'at+jwt' });
  expect(await failure(strict, await iss.mint({}, { typ: 'application/at+jwt' }))).toBe('valid');
  expect(await failure(strict, await iss.mint({}, { typ: 'JWT' }))).toBe('wrong_type');
  expect(await failure(strict, await iss.mint({}, { typ: undefined }))).toBe('wrong_type');
  expect(refusalOfFailure('wrong_type')).toBe('invalid_token');
});

test('alg none and an HMAC token keyed with the issuer public key are refused as alg_not_allowed', async () => {
  const v = verifier();
  const payload = base64url.encode(JSON.stringify({ iss: iss.issuer, aud: RESOURCE, sub: 'ana', exp: Math.floor(Date.now() / 1000) + 300 }));
  const none = `${base64url.encode(JSON.stringify({ alg: 'none', kid: iss.kid }))}.${payload}.`;
  expect(await failure(v, none)).toBe('alg_not_allowed');
  const secret = new TextEncoder().encode(JSON.stringify(iss.publicJwk));
  const hmac = await new SignJWT({ iss: iss.issuer, aud: RESOURCE, sub: 'ana', exp: Math.floor(Date.now() / 1000) + 300 }).setProtectedHeader({ alg: 'HS256', kid: iss.kid }).sign(secret);
  expect(await failure(v, hmac)).toBe('alg_not_allowed');
  expect(refusalOfFailure('alg_not_allowed')).toBe('invalid_token');
});

test('a foreign signature and an unknown kid; unknown kids refetch at most once per cooldown', async () => {
  const other = await generateKeyPair('RS256');
  const v = verifier({ cooldownMs: 60_000 });
  expect(await failure(v, await iss.mint({}, {}, other.privateKey))).toBe('bad_signature');
  expect(iss.jwksFetches).toBe(1);
  for (let i = 0; i < 20; i++) expect(await failure(v, await iss.mint({}, { kid: `made-up-${i}` }, other.privateKey))).toBe('unknown_kid');
  expect(iss.jwksFetches).toBe(1);
});

test('a rotated key is fetched on its first unknown kid', async () => {
  const v = verifier();
  expect(await failure(v, await iss.mint())).toBe('valid');
  await iss.rotate();
  expect(await failure(v, await iss.mint())).toBe('valid');
  expect(iss.jwksFetches).toBe(2);
});

test('oversized and malformed tokens are refused before any fetch', async () => {
  const v = verifier();
  expect(await failure(v, await iss.mint({ pad: 'x'.repeat(9000) }))).toBe('oversized');
  expect(await failure(v, 'eyJhbGciOiJSUzI1NiJ9.e30x.c2ln')).toBe('malformed');
  expect(await failure(v, 'eyJhbGciOiJSUzI1NiJ9.!!!.c2ln')).toBe('malformed');
  expect(await failure(v, `${base64url.encode('not json')}.${base64url.encode('{}')}.c2ln`)).toBe('malformed');
  expect(iss.jwksFetches).toBe(0);
});

test('insufficient scope', async () => {
  const v = verifier({ required_scopes: ['interlock:query'] });
  expect(await failure(v, await iss.mint({ scope: 'openid profile' }))).toBe('insufficient_scope');
  expect(await failure(v, await iss.mint({ scope: 'openid interlock:query' }))).toBe('valid');
  expect(refusalOfFailure('insufficient_scope')).toBe('insufficient_scope');
});

test.each(['down', 'junk'] as const)('JWKS %s with no cached keys fails closed, and within the cooldown fails fast without a fetch', async (mode) => {
  iss.mode = mode;
  const v = verifier({ cooldownMs: 60_000 });
  const token = await iss.mint();
  expect(await failure(v, token)).toBe('keys_unavailable');
  const fetches = iss.jwksFetches;
  const t0 = Date.now();
  expect(await failure(v, token)).toBe('keys_unavailable');
  expect(Date.now() - t0).toBeLessThan(100);
  expect(iss.jwksFetches).toBe(fetches);
  expect(refusalOfFailure('keys_unavailable')).toBe('identity_provider_unavailable');
});

test('a slow JWKS is cut at the timeout, and concurrent callers share the one fetch', async () => {
  iss.mode = 'slow';
  const v = verifier({ timeoutMs: 300, cooldownMs: 60_000 });
  const token = await iss.mint();
  const t0 = Date.now();
  const all = await Promise.all(Array.from({ length: 10 }, () => failure(v, token)));
  expect(all).toEqual(Array(10).fill('keys_unavailable'));
  expect(Date.now() - t0).toBeLessThan(2000);
  expect(iss.jwksFetches).toBe(1);
});

test('cached keys keep serving while the JWKS is down, until they expire; then fail closed', async () => {
  let now = Date.now();
  const v = verifier({ now: () => now, refreshMs: 1000, maxStaleMs: 10_000 });
  expect(await failure(v, await iss.mint())).toBe('valid');
  iss.mode = 'down';
  now += 5000; // past refreshMs: a background refresh fails, the cached key still answers
  expect(await failure(v, await iss.mint())).toBe('valid');
  now += 6000; // past maxStaleMs
  expect(await failure(v, await iss.mint())).toBe('keys_unavailable');
  iss.mode = 'ok';
  expect(await failure(v, await iss.mint())).toBe('valid');
});
