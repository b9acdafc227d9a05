/**
 * Issue 26 over HTTP, on the real governed gateway: access tokens of a trusted issuer beside API
 * keys, provisioning and claim grants, a disabled identity refused, the contract codes of bad
 * tokens in both dialects with the WWW-Authenticate challenge, the protected resource metadata,
 * tokens in the query string refused, the audit's issuer/subject/jti (never the token), the
 * validation metric, and a slow JWKS that stalls no API-key caller.
 */
import { Writable } from 'node:stream';
import pino from 'pino';
import { callTool, startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { startTestIssuer, type TestIssuer } from '../../helpers/jwks-server';
import { modernListSources } from '../../helpers/modern-call';
import { disableIdentity, listIdentities } from '../../../src/control/identities';
import { DEMO_ROLE } from '../../../src/demo/provision';
import { exportInterlockFile } from '../../../src/declarative/export';
import { applyInterlockFile } from '../../../src/declarative/apply';
import { verifyAuditChain } from '../../../src/audit/verify';

jest.setTimeout(120_000);

const RESOURCE = 'https://gateway.test.example/mcp';

let iss: TestIssuer;
let env: GovernedEnv;
const logLines: string[] = [];

beforeAll(async () => {
  iss = await startTestIssuer(RESOURCE);
  const sink = new Writable({ write(chunk, _e, cb) { logLines.push(String(chunk)); cb(); } });
  env = await startGovernedEnv({
    logger: pino({ level: 'info' }, sink),
    config: {
      auth: {
        resource: RESOURCE,
        scopes_supported: ['interlock'],
        issuers: [{ issuer: iss.issuer, jwks_uri: iss.jwksUri, jwks_cooldown_seconds: 1, unknown_subjects: 'provision', identity_claim: 'email', role_grants: [{ claim: 'groups', value: 'analysts', role: DEMO_ROLE.name, source: 'chinook' }] }],
      },
    },
  });
});
afterAll(async () => {
  await env?.close();
  await iss?.close();
});

const modernCall = (token: string | null) => modernListSources(env.url, token);

function sourcesOf(body: any): string[] {
  return Object.keys(JSON.parse(body.result.content[0].text)).sort();
}

test('a valid token provisions its identity, its group grants the demo role, and the audit records issuer, subject and jti only', async () => {
  const token = await iss.mint({ sub: 'okta|ana', email: 'Ana@Example.com', groups: ['analysts'], jti: 'jti-ana-1' });
  const r = await callTool(env, 'interlock_list_sources', {}, token);
  expect(r.status).toBe(200);
  expect(r.body.result.isError).toBeUndefined();
  expect(sourcesOf(r.body)).toEqual(['chinook']);
  const idn = await env.db.pool.query("SELECT i.name, s.subject FROM identity_subjects s JOIN identities i ON i.id = s.identity_id WHERE s.issuer = $1", [iss.issuer]);
  expect(idn.rows).toEqual([{ name: 'ana@example.com', subject: 'okta|ana' }]);
  const grants = await env.db.pool.query("SELECT g.role_name, g.source_id, g.granted_by FROM grants g JOIN identities i ON i.id = g.identity_id WHERE i.name = 'ana@example.com'");
  expect(grants.rows).toEqual([{ role_name: DEMO_ROLE.name, source_id: 'chinook', granted_by: 'claims' }]);
  const ev = await env.db.pool.query("SELECT key_id, details FROM audit_events WHERE tool = 'interlock_list_sources' AND details->'oauth'->>'jti' = 'jti-ana-1'");
  expect(ev.rows).toHaveLength(1);
  expect(ev.rows[0].key_id).toBe('token:jti-ana-1');
  expect(ev.rows[0].details.oauth).toEqual({ issuer: iss.issuer, subject: 'okta|ana', jti: 'jti-ana-1' });
  expect(JSON.stringify(ev.rows[0])).not.toContain(token.split('.')[2]);
  // Operators see the token-backed identity and its last use (interlock identity list, GET /admin/v1/identities).
  const listed = (await listIdentities(env.db)).find((i) => i.name === 'ana@example.com');
  expect(listed?.subjects).toEqual([{ issuer: iss.issuer, subject: 'okta|ana', lastUsedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) }]);
  expect((await listIdentities(env.db)).find((i) => i.name === 'demo-agent')?.subjects).toBeUndefined();
  // Claim grants follow the identity provider: interlock export leaves them out (and apply leaves them alone).
  const file = await exportInterlockFile(env.db);
  expect(file.identities?.find((i) => i.name === 'ana@example.com')).toEqual({ name: 'ana@example.com', disabled: false, grants: [] });
});

test('API keys keep working beside tokens', async () => {
  const r = await callTool(env, 'interlock_list_sources', {}, env.apiKey);
  expect(sourcesOf(r.body)).toEqual(['chinook', 'handbook']);
});

test('leaving the group removes the claim grant at the next sign-in', async () => {
  const token = await iss.mint({ sub: 'okta|ben', email: 'ben@example.com', groups: ['analysts'] });
  expect(sourcesOf((await callTool(env, 'interlock_list_sources', {}, token)).body)).toEqual(['chinook']);
  const later = await iss.mint({ sub: 'okta|ben', email: 'ben@example.com', groups: ['sales'] });
  // The grants notification clears the caches; poll for it (bounded).
  let seen: string[] = [];
  for (let i = 0; i < 40 && (seen = sourcesOf((await callTool(env, 'interlock_list_sources', {}, later)).body)).length > 0; i++) await new Promise((r) => setTimeout(r, 100));
  expect(seen).toEqual([]);
});

test('claim mappings from an interlock file: a rule applied by interlock apply grants at the next sign-in; --prune of the mapping takes it back', async () => {
  const claims = { sub: 'okta|dee', email: 'dee@example.com', groups: ['support'] };
  expect(sourcesOf((await callTool(env, 'interlock_list_sources', {}, await iss.mint(claims))).body)).toEqual([]);
  const mapping = { issuer: iss.issuer, role_grants: [{ claim: 'groups', value: 'support', role: DEMO_ROLE.name, source: 'handbook' }] };
  const applied = await applyInterlockFile(env.db, { document: { version: 1, claim_mappings: [mapping] } }, { operator: 'ops', scan: false });
  expect(applied.plan.changes.map((c) => `${c.action} ${c.kind} ${c.name}`)).toEqual([`create claim_mapping ${iss.issuer}`]);
  // The claim_mappings notification reaches the gateway; poll for it (bounded).
  let seen: string[] = [];
  for (let i = 0; i < 40 && (seen = sourcesOf((await callTool(env, 'interlock_list_sources', {}, await iss.mint(claims))).body)).length === 0; i++) await new Promise((r) => setTimeout(r, 100));
  expect(seen).toEqual(['handbook']);
  // The configuration's rules still apply beside the file's (the new grant is seen once its notification arrives).
  const both = { ...claims, groups: ['support', 'analysts'] };
  for (let i = 0; i < 40 && (seen = sourcesOf((await callTool(env, 'interlock_list_sources', {}, await iss.mint(both))).body)).length < 2; i++) await new Promise((r) => setTimeout(r, 100));
  expect(seen).toEqual(['chinook', 'handbook']);
  expect((await exportInterlockFile(env.db)).claim_mappings).toEqual([mapping]);
  const pruned = await applyInterlockFile(env.db, { document: { version: 1, claim_mappings: [] } }, { operator: 'ops', scan: false, prune: true });
  expect(pruned.plan.changes.map((c) => `${c.action} ${c.kind} ${c.name}`)).toEqual([`delete claim_mapping ${iss.issuer}`]);
  for (let i = 0; i < 40 && (seen = sourcesOf((await callTool(env, 'interlock_list_sources', {}, await iss.mint(claims))).body)).length > 0; i++) await new Promise((r) => setTimeout(r, 100));
  expect(seen).toEqual([]);
});

test('a disabled identity is refused whatever its token says', async () => {
  const token = await iss.mint({ sub: 'okta|cy', email: 'cy@example.com' });
  expect((await callTool(env, 'interlock_list_sources', {}, token)).body.result.isError).toBeUndefined();
  await disableIdentity(env.db, 'cy@example.com');
  let sc: any;
  for (let i = 0; i < 40; i++) {
    sc = (await callTool(env, 'interlock_list_sources', {}, await iss.mint({ sub: 'okta|cy', email: 'cy@example.com' }))).body.result.structuredContent;
    if (sc?.code === 'invalid_token') break;
    await new Promise((r) => setTimeout(r, 100));
  }
  expect(sc).toMatchObject({ status: 'unauthorized', code: 'invalid_token' });
});

// Task hchain (red team rths finding: a held sync holds the approval events' chain): while another
// transaction holds the format-2 chain's lock row, a token's first sign-in (provisioning, claim
// grant) answers without waiting; its events are stored as pending and the gateway's background
// seal chains them, exactly once, once the lock is free; `audit verify` passes.
test("a sign-in while another transaction holds the approval events' chain answers at once; the gateway chains its pending events afterwards", async () => {
  const mine = "SELECT event::jsonb->>'decision' AS decision FROM audit_pending_events WHERE event::jsonb->'details'->>'identity' = 'held@example.com' ORDER BY id";
  const holder = await env.db.pool.connect();
  try {
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE');
    const token = await iss.mint({ sub: 'okta|held', email: 'held@example.com', groups: ['analysts'], jti: 'jti-held-1' });
    let timer: NodeJS.Timeout | undefined;
    const r = await Promise.race([callTool(env, 'interlock_list_sources', {}, token), new Promise<'hung'>((res) => (timer = setTimeout(() => res('hung'), 15_000)))]).finally(() => clearTimeout(timer));
    expect(r === 'hung' ? 'hung' : sourcesOf(r.body)).toEqual(['chinook']);
    expect((await env.db.pool.query(mine)).rows.map((x) => x.decision)).toEqual(['identity_created', 'grant_added']);
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    holder.release();
  }
  // The gateway's seal runs every 2 s: poll (bounded) until they are chained.
  let left = -1;
  for (let i = 0; i < 100 && (left = (await env.db.pool.query(mine)).rows.length) > 0; i++) await new Promise((res) => setTimeout(res, 200));
  expect(left).toBe(0);
  const chained = await env.db.pool.query("SELECT decision FROM audit_events WHERE kind = 'config' AND details->>'identity' = 'held@example.com' ORDER BY id");
  expect(chained.rows.map((x) => x.decision)).toEqual(['identity_created', 'grant_added']);
  const report = await verifyAuditChain(env.db);
  expect({ ok: report.ok, first: report.firstMismatch, pending: report.pending.events }).toEqual({ ok: true, first: null, pending: 0 });
});

test('bad tokens: handshake tool-result refusals with contract codes, never the token in the log', async () => {
  const now = Math.floor(Date.now() / 1000);
  const cases: Array<[string, string]> = [
    [await iss.mint({ exp: now - 3600 }), 'invalid_token'],
    [await iss.mint({ nbf: now + 3600 }), 'invalid_token'],
    [await iss.mint({ aud: 'https://another-resource.example/mcp' }), 'invalid_token'],
    [await iss.mint({ iss: 'https://untrusted.example' }), 'invalid_token'],
    [await iss.mint({}, { kid: 'unknown-kid' }), 'invalid_token'],
    [await iss.mint({ pad: 'x'.repeat(9000) }), 'invalid_token'],
    ['eyJhbGciOiJSUzI1NiJ9.e30x.c2ln', 'invalid_token'],
    ['ilk_not-a-real-key-at-all-but-the-right-length-xxxxx', 'invalid_api_key'],
  ];
  for (const [token, code] of cases) {
    const r = await callTool(env, 'interlock_list_sources', {}, token);
    expect(r.status).toBe(200);
    expect(r.body.result.isError).toBe(true);
    expect(r.body.result.structuredContent).toMatchObject({ status: 'unauthorized', code });
  }
  const log = logLines.join('');
  for (const [token] of cases) expect(log).not.toContain(token);
  expect(log).toContain('"reason":"expired"');
  expect(log).toContain('"reason":"wrong_audience"');
});

test('modern dialect: 401 with the resource_metadata challenge; invalid_token names the error', async () => {
  const none = await modernCall(null);
  expect(none.status).toBe(401);
  expect(none.challenge).toBe('Bearer resource_metadata="https://gateway.test.example/.well-known/oauth-protected-resource/mcp"');
  expect(none.body.error).toMatchObject({ code: -32602, data: { status: 'unauthorized', code: 'missing_api_key' } });
  const bad = await modernCall(await iss.mint({ exp: Math.floor(Date.now() / 1000) - 3600 }));
  expect(bad.status).toBe(401);
  expect(bad.challenge).toBe('Bearer resource_metadata="https://gateway.test.example/.well-known/oauth-protected-resource/mcp", error="invalid_token"');
  expect(bad.body.error.data).toMatchObject({ status: 'unauthorized', code: 'invalid_token' });
  const good = await modernCall(await iss.mint({ sub: 'okta|ana', email: 'ana@example.com', groups: ['analysts'] }));
  expect(good.status).toBe(200);
  expect(good.body.result.content[0].type).toBe('text');
});

test('the deprecated /mcp/tools/call and /v1 answer 401 with the realm and the resource_metadata challenge; a valid token works there too', async () => {
  const origin = new URL(env.url).origin;
  const META_URL = 'https://gateway.test.example/.well-known/oauth-protected-resource/mcp';
  const routes = [
    { path: '/v1/sources', init: { method: 'GET' } },
    { path: '/mcp/tools/call', init: { method: 'POST', body: JSON.stringify({ name: 'interlock_list_sources', arguments: {} }) } },
  ];
  const expired = await iss.mint({ sub: 'okta|old', email: 'old@example.com', exp: Math.floor(Date.now() / 1000) - 3600 });
  const valid = await iss.mint({ sub: 'okta|vic', email: 'vic@example.com', groups: ['analysts'] });
  for (const { path, init } of routes) {
    const send = (bearer: string | null) => fetch(origin + path, { ...init, headers: { 'content-type': 'application/json', ...(bearer ? { authorization: `Bearer ${bearer}` } : {}) } });
    const none = await send(null);
    expect([path, none.status, none.headers.get('www-authenticate')]).toEqual([path, 401, `Bearer realm="interlock", resource_metadata="${META_URL}"`]);
    expect(await none.json()).toMatchObject({ error: 'unauthorized', code: 'missing_api_key' });
    const bad = await send(expired);
    expect([path, bad.status, bad.headers.get('www-authenticate')]).toEqual([path, 401, `Bearer realm="interlock", resource_metadata="${META_URL}", error="invalid_token"`]);
    expect(await bad.json()).toMatchObject({ error: 'unauthorized', code: 'invalid_token' });
    const ok = await send(valid);
    expect([path, ok.status, ok.headers.get('www-authenticate')]).toEqual([path, 200, null]);
    await ok.arrayBuffer();
  }
});

test('protected resource metadata at the well-known path and its /mcp path form', async () => {
  const base = new URL(env.url).origin;
  for (const path of ['/.well-known/oauth-protected-resource', '/.well-known/oauth-protected-resource/mcp']) {
    const r = await fetch(`${base}${path}`);
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ resource: RESOURCE, authorization_servers: [iss.issuer], scopes_supported: ['interlock'], bearer_methods_supported: ['header'] });
  }
});

test('an access token in the query string is refused', async () => {
  const token = await iss.mint({ sub: 'okta|ana', email: 'ana@example.com' });
  const r = await fetch(`${env.url}?access_token=${token}`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {} } }) });
  expect(r.status).toBe(400);
  expect(await r.json()).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Invalid request: send the access token in the Authorization header, never in the URL' } });
});

test('a slow JWKS stalls only the token that needs it: API-key callers answer meanwhile', async () => {
  await new Promise((r) => setTimeout(r, 1100)); // past the JWKS cooldown, so the unknown kid refetches
  iss.mode = 'slow';
  try {
    const t0 = Date.now();
    const stalled = callTool(env, 'interlock_list_sources', {}, await iss.mint({}, { kid: 'rotated-kid-nobody-has' }));
    await new Promise((r) => setTimeout(r, 50));
    const k = await callTool(env, 'interlock_list_sources', {}, env.apiKey);
    expect(sourcesOf(k.body)).toEqual(['chinook', 'handbook']);
    expect(Date.now() - t0).toBeLessThan(1500);
    const s = await stalled;
    // The refetch was cut at its 3 s timeout; the cached keys still hold no such kid.
    expect(Date.now() - t0).toBeGreaterThanOrEqual(2900);
    expect(Date.now() - t0).toBeLessThan(6000);
    expect(s.body.result.structuredContent).toMatchObject({ status: 'unauthorized', code: 'invalid_token' });
  } finally {
    iss.mode = 'ok';
  }
});

test('/metrics counts validations by outcome', async () => {
  const text = await (await fetch(`${new URL(env.url).origin}/metrics`)).text();
  expect(text).toMatch(/interlock_token_validations_total\{outcome="valid"\} [1-9]/);
  expect(text).toMatch(/interlock_token_validations_total\{outcome="expired"\} [1-9]/);
  expect(text).toMatch(/interlock_token_validations_total\{outcome="wrong_audience"\} 1\n/);
});
