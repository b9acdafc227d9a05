/**
 * Issue 26 "Bad input, each with a test", over HTTP on the real governed gateway, for the cases the
 * other files check only below HTTP: `alg: none` and an HMAC token keyed with the issuer's public
 * key (refused invalid_token in both dialects), and an issuer whose JWKS endpoint is down, slow or
 * returns junk before any key was ever fetched (refused identity_provider_unavailable, 503 in the
 * modern dialect, a slow endpoint cut at 3 s and shared by the waiting callers, API-key callers
 * answering meanwhile). No refusal logs the token.
 */
import { Writable } from 'node:stream';
import pino from 'pino';
import { base64url, SignJWT } from 'jose';
import { callTool, startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { startTestIssuer, type TestIssuer } from '../../helpers/jwks-server';
import { modernListSources } from '../../helpers/modern-call';

jest.setTimeout(120_000);

const RESOURCE = 'https://gateway.bad-input.example/mcp';

let good: TestIssuer;
let flaky: TestIssuer;
let env: GovernedEnv;
const logLines: string[] = [];

beforeAll(async () => {
  good = await startTestIssuer(RESOURCE);
  flaky = await startTestIssuer(RESOURCE);
  flaky.mode = 'down';
  const sink = new Writable({ write(chunk, _e, cb) { logLines.push(String(chunk)); cb(); } });
  env = await startGovernedEnv({
    logger: pino({ level: 'info' }, sink),
    config: {
      auth: {
        resource: RESOURCE,
        issuers: [
          { issuer: good.issuer, jwks_uri: good.jwksUri, unknown_subjects: 'provision' },
          // The cooldown is the least one allowed (1 s), so each mode below gets its own fetch.
          { issuer: flaky.issuer, jwks_uri: flaky.jwksUri, jwks_cooldown_seconds: 1, unknown_subjects: 'provision' },
        ],
      },
    },
  });
});
afterAll(async () => {
  await env?.close();
  await good?.close();
  await flaky?.close();
});

const modernCall = (token: string | null) => modernListSources(env.url, token);

test('alg none and an HMAC token keyed with the issuer public key: invalid_token in both dialects, never logged', async () => {
  const claims = { iss: good.issuer, aud: RESOURCE, sub: 'mallory', exp: Math.floor(Date.now() / 1000) + 300 };
  const none = `${base64url.encode(JSON.stringify({ alg: 'none', kid: good.kid }))}.${base64url.encode(JSON.stringify(claims))}.`;
  const hmac = await new SignJWT(claims).setProtectedHeader({ alg: 'HS256', kid: good.kid }).sign(new TextEncoder().encode(JSON.stringify(good.publicJwk)));
  for (const token of [none, hmac]) {
    const h = await callTool(env, 'interlock_list_sources', {}, token);
    expect(h.status).toBe(200);
    expect(h.body.result).toMatchObject({ isError: true, structuredContent: { status: 'unauthorized', code: 'invalid_token' } });
    const m = await modernCall(token);
    expect(m.status).toBe(401);
    expect(m.challenge).toBe('Bearer resource_metadata="https://gateway.bad-input.example/.well-known/oauth-protected-resource/mcp", error="invalid_token"');
    expect(m.body.error.data).toMatchObject({ status: 'unauthorized', code: 'invalid_token' });
  }
  // No identity was provisioned for the forged subject.
  expect((await env.db.pool.query("SELECT 1 FROM identity_subjects WHERE subject = 'mallory'")).rowCount).toBe(0);
  const log = logLines.join('');
  expect(log).toContain('"reason":"alg_not_allowed"');
  for (const token of [none, hmac]) expect(log).not.toContain(token);
});

test.each(['down', 'junk'] as const)('JWKS %s and never fetched: identity_provider_unavailable (503 modern), fails fast, API keys unaffected', async (mode) => {
  await new Promise((r) => setTimeout(r, 1100)); // past the issuer's cooldown: this mode gets its own fetch
  flaky.mode = mode;
  const token = await flaky.mint({ sub: `u-${mode}` });
  const h = await callTool(env, 'interlock_list_sources', {}, token);
  expect(h.body.result).toMatchObject({ isError: true, structuredContent: { status: 'unavailable', code: 'identity_provider_unavailable' } });
  const t0 = Date.now();
  const m = await modernCall(token);
  expect(m.status).toBe(503);
  expect(m.body.error.data).toMatchObject({ status: 'unavailable', code: 'identity_provider_unavailable' });
  expect(Date.now() - t0).toBeLessThan(1000); // within the cooldown: no new fetch, no wait
  expect(Object.keys(JSON.parse((await callTool(env, 'interlock_list_sources', {}, env.apiKey)).body.result.content[0].text)).sort()).toEqual(['chinook', 'handbook']);
  // The good issuer's tokens are unaffected.
  expect((await callTool(env, 'interlock_list_sources', {}, await good.mint({ sub: 'ok-user' }))).body.result.isError).toBeUndefined();
  expect(logLines.join('')).not.toContain(token);
});

test('JWKS slow and never fetched: callers of that issuer share one fetch cut at 3 s; API keys and other issuers answer meanwhile', async () => {
  await new Promise((r) => setTimeout(r, 1100));
  flaky.mode = 'slow';
  const fetchesBefore = flaky.jwksFetches;
  try {
    const t0 = Date.now();
    const stalled = Promise.all([1, 2, 3].map(async (i) => callTool(env, 'interlock_list_sources', {}, await flaky.mint({ sub: `slow-${i}` }))));
    await new Promise((r) => setTimeout(r, 50));
    const k = await callTool(env, 'interlock_list_sources', {}, env.apiKey);
    expect(k.body.result.isError).toBeUndefined();
    expect((await callTool(env, 'interlock_list_sources', {}, await good.mint({ sub: 'ok-user' }))).body.result.isError).toBeUndefined();
    expect(Date.now() - t0).toBeLessThan(1500);
    const answers = await stalled;
    expect(Date.now() - t0).toBeGreaterThanOrEqual(2900);
    expect(Date.now() - t0).toBeLessThan(6000);
    for (const a of answers) expect(a.body.result.structuredContent).toMatchObject({ status: 'unavailable', code: 'identity_provider_unavailable' });
    expect(flaky.jwksFetches - fetchesBefore).toBe(1);
  } finally {
    flaky.mode = 'ok';
  }
  // Once the endpoint answers again (after the cooldown), the issuer's tokens work.
  await new Promise((r) => setTimeout(r, 1100));
  expect((await callTool(env, 'interlock_list_sources', {}, await flaky.mint({ sub: 'back-again' }))).body.result.isError).toBeUndefined();
});
