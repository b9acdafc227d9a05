/**
 * Issue 26 item 4 end to end with a real OpenID provider (oidc-provider in a child process, JWT
 * access tokens for the requested resource): a token-backed identity is shown by `interlock
 * identity list` / `identity show` (issuer, subject, last use, claim grants) and by the console;
 * `interlock identity disable` (and the console's Disable) refuses it whatever its token says,
 * a token issued before the disable and one issued after; `identity enable` lets it back in.
 */
import { runCli } from '../../src/cli/main';
import { createOperatorToken } from '../../src/admin/tokens';
import { DEMO_ROLE } from '../../src/demo/provision';
import { callTool, startGovernedEnv, type GovernedEnv } from '../helpers/governed';
import { startOidcProvider, type RunningProvider } from '../helpers/oidc-provider';

jest.setTimeout(120_000);

const CLIENT = 'ops-report-agent';
let op: RunningProvider;
let env: GovernedEnv;
let resource: string;

beforeAll(async () => {
  op = await startOidcProvider(CLIENT, 'ops-report-agent-secret-0123456789');
  // The gateway's resource URL names its own port: start it on a known one.
  const port = await freePort();
  resource = `http://127.0.0.1:${port}/mcp`;
  env = await startGovernedEnv({
    port,
    config: { auth: { resource, issuers: [{ issuer: op.issuer, required_scopes: ['interlock'], unknown_subjects: 'provision', role_grants: [{ claim: 'client_id', value: CLIENT, role: DEMO_ROLE.name, source: 'chinook' }] }] } },
  });
});
afterAll(async () => {
  await env?.close();
  await op?.close();
});

async function freePort(): Promise<number> {
  const net = await import('node:net');
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as import('node:net').AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** A fresh access token from the provider (client_credentials, resource indicator = the gateway). */
async function token(): Promise<string> {
  const r = await fetch(`${op.issuer}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${Buffer.from(`${op.clientId}:${op.clientSecret}`).toString('base64')}` },
    body: new URLSearchParams({ grant_type: 'client_credentials', scope: 'interlock', resource }),
  });
  expect(r.status).toBe(200);
  return ((await r.json()) as { access_token: string }).access_token;
}

async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(['--database-url', env.db.url, ...args], { out: (t) => (stdout += t.endsWith('\n') ? t : t + '\n'), err: (t) => (stderr += t.endsWith('\n') ? t : t + '\n') });
  return { code, stdout, stderr };
}

/** The structuredContent of interlock_list_sources with `bearer`, polled (≤ 4 s) until `until` holds. */
async function listUntil(bearer: string, until: (sc: any) => boolean): Promise<any> {
  let sc: any;
  for (let i = 0; i < 40; i++) {
    const r = await callTool(env, 'interlock_list_sources', {}, bearer);
    expect(r.status).toBe(200);
    sc = r.body.result.isError ? r.body.result.structuredContent : { sources: Object.keys(JSON.parse(r.body.result.content[0].text)) };
    if (until(sc)) return sc;
    await new Promise((res) => setTimeout(res, 100));
  }
  return sc;
}

test('identity list/show and the console show the token-backed identity; disable refuses its tokens, enable lets them in again', async () => {
  const before = await token();
  expect(await listUntil(before, () => true)).toEqual({ sources: ['chinook'] });

  // CLI: list and show (issuer, subject, last use, the claim grant).
  const shown = await cli('--json', 'identity', 'show', CLIENT);
  expect(shown.code).toBe(0);
  expect(JSON.parse(shown.stdout)).toEqual({
    id: expect.stringMatching(/^idn_/),
    name: CLIENT,
    disabled: false,
    createdAt: expect.any(String),
    disabledAt: null,
    subjects: [{ issuer: op.issuer, subject: CLIENT, createdAt: expect.any(String), lastUsedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) }],
    grants: [{ role: DEMO_ROLE.name, source: 'chinook', grantedBy: 'claims' }],
    keys: { active: 0, total: 0 },
    lastUsedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
  });
  const text = await cli('identity', 'show', CLIENT);
  expect(text.stdout).toContain(`identity ${CLIENT} (`);
  expect(text.stdout).toMatch(new RegExp(`${op.issuer.replace(/[.]/g, '\\.')}\\s+${CLIENT}\\s+\\d{4}-`));
  expect(text.stdout).toMatch(/chinook\s+\S+\s+token claims/);
  const listed = await cli('identity', 'list');
  expect(listed.stdout).toMatch(new RegExp(`${CLIENT}\\s+idn_\\S+\\s+enabled\\s+.*${new URL(op.issuer).host} \\d{4}-`));
  expect((await cli('identity', 'show', 'nobody-here')).code).not.toBe(0);

  // Console: the identities table's data.
  const opToken = await createOperatorToken(env.db, 'ops-erin');
  const origin = new URL(env.url).origin;
  const signIn = await fetch(`${origin}/console/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: opToken.secret }) });
  expect(signIn.status).toBe(200);
  const cookie = (signIn.headers.get('set-cookie') ?? '').split(';')[0];
  const csrf = ((await signIn.json()) as { csrfToken: string }).csrfToken;
  const ids = await fetch(`${origin}/console/api/identities`, { headers: { cookie } });
  expect(ids.status).toBe(200);
  const row = ((await ids.json()) as { identities: any[] }).identities.find((i) => i.name === CLIENT);
  expect(row).toMatchObject({ disabled: false, subjects: [{ issuer: op.issuer, subject: CLIENT, lastUsedAt: expect.any(String) }] });

  // interlock identity disable: the token issued before it and a fresh one are both refused.
  expect(await cli('identity', 'disable', CLIENT)).toEqual({ code: 0, stdout: `disabled identity ${CLIENT}: its keys and access tokens stop working (within 2 s on running gateways)\n`, stderr: '' });
  expect(await listUntil(before, (sc) => sc.code !== undefined)).toEqual({ status: 'unauthorized', code: 'invalid_token', message: expect.any(String), request_id: expect.stringMatching(/^req_/) });
  expect(await listUntil(await token(), () => true)).toMatchObject({ status: 'unauthorized', code: 'invalid_token' });
  // The modern dialect: 401 with the challenge naming invalid_token.
  const modern = await fetch(env.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${await token()}`, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'interlock_list_sources' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {}, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } } }),
  });
  expect(modern.status).toBe(401);
  expect(modern.headers.get('www-authenticate')).toBe(`Bearer resource_metadata="${origin}/.well-known/oauth-protected-resource/mcp", error="invalid_token"`);
  await modern.text();

  // enable lets it in again; the console's Disable refuses it again.
  expect((await cli('identity', 'enable', CLIENT)).code).toBe(0);
  expect(await listUntil(await token(), (sc) => sc.sources !== undefined)).toEqual({ sources: ['chinook'] });
  const dis = await fetch(`${origin}/console/api/identities/${CLIENT}/disable`, { method: 'POST', headers: { cookie, 'x-csrf-token': csrf, 'content-type': 'application/json' }, body: '{}' });
  expect(dis.status).toBe(200);
  expect(await dis.json()).toMatchObject({ name: CLIENT, disabled: true });
  const noCsrf = await fetch(`${origin}/console/api/identities/${CLIENT}/disable`, { method: 'POST', headers: { cookie, 'content-type': 'application/json' }, body: '{}' });
  expect(noCsrf.status).toBe(403);
  expect(await listUntil(await token(), (sc) => sc.code !== undefined)).toMatchObject({ status: 'unauthorized', code: 'invalid_token' });
});

test('a real token the provider issued for another resource (RFC 8707) is refused invalid_token', async () => {
  const r = await fetch(`${op.issuer}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${Buffer.from(`${op.clientId}:${op.clientSecret}`).toString('base64')}` },
    body: new URLSearchParams({ grant_type: 'client_credentials', scope: 'interlock', resource: 'http://127.0.0.1:9/other-mcp' }),
  });
  expect(r.status).toBe(200);
  const other = ((await r.json()) as { access_token: string }).access_token;
  // Refused for its audience (not because the client's identity was disabled above): the metric says why.
  const wrongAudience = async () => Number((await (await fetch(`${new URL(env.url).origin}/metrics`)).text()).match(/interlock_token_validations_total\{outcome="wrong_audience"\} (\d+)/)?.[1] ?? 0);
  const before = await wrongAudience();
  const res = await callTool(env, 'interlock_list_sources', {}, other);
  expect(res.body.result).toMatchObject({ isError: true, structuredContent: { status: 'unauthorized', code: 'invalid_token' } });
  expect(await wrongAudience()).toBe(before + 1);
});
