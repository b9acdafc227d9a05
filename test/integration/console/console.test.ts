/**
 * The approval console's HTTP surface (issue 14, item 1): sign-in with an operator token only,
 * HttpOnly SameSite=Strict cookie, CSRF on changes, Host/Origin guard, the approval detail with
 * its plan (EXPLAIN as the writer) and audit history, decisions with a reason, and the SSE queue.
 */
import { request as httpRequest } from 'node:http';
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { createOperatorToken, revokeOperatorToken } from '../../../src/admin/tokens';
import { removeSource } from '../../../src/control/sources';

let env: GovernedEnv;
let token: { secret: string; tokenId: string };
beforeAll(async () => {
  env = await startGovernedEnv();
  token = await createOperatorToken(env.db, 'ops-carol');
}, 90_000);
afterAll(async () => env?.close());

const base = () => new URL(env.url).origin;
async function http(method: string, path: string, opts: { cookie?: string; csrf?: string; body?: unknown; headers?: Record<string, string> } = {}) {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.cookie) headers.cookie = opts.cookie;
  if (opts.csrf) headers['x-csrf-token'] = opts.csrf;
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  const r = await fetch(base() + path, { method, headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
  const text = await r.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: r.status, headers: r.headers, text, json };
}
async function signIn(secret = token.secret) {
  const r = await http('POST', '/console/api/session', { body: { token: secret } });
  const setCookie = r.headers.get('set-cookie') ?? '';
  return { r, setCookie, cookie: setCookie.split(';')[0], csrf: r.json?.csrfToken as string };
}
/** Status of a GET with headers fetch() would not send as given (Host). */
function rawStatus(path: string, headers: Record<string, string>): Promise<number> {
  const u = new URL(env.url);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: u.hostname, port: u.port, path, method: 'GET', headers }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
}
const queue = async (sql: string, params: unknown[]) => (await callTool(env, 'interlock_query', { source_id: 'chinook', sql, params }, env.apiKey)).body.result.structuredContent.approval_id as string;

test('the page is served with a strict CSP; assets load; unknown console routes are 404', async () => {
  const root = await fetch(base() + '/', { redirect: 'manual' });
  expect(root.status).toBe(302);
  expect(root.headers.get('location')).toBe('/console');
  const page = await http('GET', '/console');
  expect(page.status).toBe(200);
  expect(page.headers.get('content-type')).toMatch(/^text\/html/);
  expect(page.text).toContain('<title>InterLock approvals</title>');
  expect(page.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
  expect(page.headers.get('x-frame-options')).toBe('DENY');
  expect((await http('GET', '/console/assets/console.js')).status).toBe(200);
  expect((await http('GET', '/console/assets/nope.js')).json).toMatchObject({ code: 'unknown_route' });
});

test('sign-in: operator token → HttpOnly SameSite=Strict cookie; agent key and garbage are 401', async () => {
  const { r, setCookie } = await signIn();
  expect(r.status).toBe(200);
  expect(r.json).toEqual({ operator: 'ops-carol', csrfToken: expect.any(String) });
  expect(setCookie).toMatch(/^interlock_console=[^;]+; Path=\/console; HttpOnly; SameSite=Strict; Max-Age=28800$/);
  const agent = await http('POST', '/console/api/session', { body: { token: env.apiKey } });
  expect(agent.status).toBe(401);
  expect(agent.json).toMatchObject({ code: 'invalid_operator_token' });
  expect(agent.headers.get('set-cookie')).toBeNull();
  expect((await http('POST', '/console/api/session', { body: { token: 'ilo_nope' } })).status).toBe(401);
  expect((await http('GET', '/console/api/approvals')).status).toBe(401);
  expect((await http('GET', '/console/api/approvals', { cookie: 'interlock_console=forged.value' })).status).toBe(401);
});

test('Host and Origin guard', async () => {
  expect(await rawStatus('/console', { host: 'evil.example.com' })).toBe(403);
  const s = await signIn();
  const cross = await http('POST', '/console/api/session', { body: { token: token.secret }, headers: { origin: 'http://evil.example.com' } });
  expect(cross.status).toBe(403);
  expect(cross.json).toMatchObject({ code: 'origin_not_allowed' });
  expect((await http('GET', '/console/api/session', { cookie: s.cookie })).json).toEqual({ operator: 'ops-carol', csrfToken: s.csrf });
});

test('detail: statement with comments flagged, params, relations, plan as the writer, audit; approve needs CSRF and runs once with the reason recorded', async () => {
  const id = await queue("/* add the playlist 'Console' */ INSERT INTO playlist (name) VALUES ($1)", ['Console']);
  const s = await signIn();
  const list = await http('GET', '/console/api/approvals?state=pending', { cookie: s.cookie });
  expect(list.json.approvals.find((a: { id: string }) => a.id === id)).toMatchObject({ id, state: 'pending', identity: 'demo-agent', source: 'chinook', statement: 'INSERT INTO playlist (name) VALUES ($1)', comments: 1, truncated: false });
  const d = await http('GET', `/console/api/approvals/${id}`, { cookie: s.cookie });
  expect(d.status).toBe(200);
  expect(d.json.statement).toEqual({ text: 'INSERT INTO playlist (name) VALUES ($1)', comments: ["/* add the playlist 'Console' */"], visible: "/* add the playlist 'Console' */ INSERT INTO playlist (name) VALUES ($1)", invisible: 0 });
  expect([d.json.destructive, d.json.params, typeof d.json.estimate]).toEqual([false, '[\n  "Console"\n]', 'number']);
  expect(d.json.approval).toMatchObject({ id, params: ['Console'], sql: "/* add the playlist 'Console' */ INSERT INTO playlist (name) VALUES ($1)" });
  expect(d.json.relations).toEqual(['public.playlist (insert: name)']);
  expect(d.json.plan.ok).toBe(true);
  expect(d.json.plan.lines[0]).toMatch(/^Insert on playlist/);
  expect(d.json.audit.map((e: { decision: string }) => e.decision)).toEqual(['queued']);
  const noCsrf = await http('POST', `/console/api/approvals/${id}/approve`, { cookie: s.cookie, body: {} });
  expect(noCsrf.status).toBe(403);
  expect(await sourceQuery(env, "SELECT count(*)::int AS n FROM playlist WHERE name = 'Console'")).toEqual([{ n: 0 }]);
  const ok = await http('POST', `/console/api/approvals/${id}/approve`, { cookie: s.cookie, csrf: s.csrf, body: { reason: 'looks right' } });
  expect(ok.json).toEqual({ id, approvalId: id, state: 'executed', rowCount: 1 });
  expect(await sourceQuery(env, "SELECT count(*)::int AS n FROM playlist WHERE name = 'Console'")).toEqual([{ n: 1 }]);
  const after = await http('GET', `/console/api/approvals/${id}`, { cookie: s.cookie });
  expect(after.json.audit.map((e: { decision: string; operator: string | null }) => [e.decision, e.operator])).toEqual([['queued', null], ['approved', 'ops-carol'], ['executed', 'ops-carol']]);
  expect(after.json.audit[1].details).toEqual({ reason: 'looks right' });
});

// Task hsm2 item 1: the console's bodies are closed too (spec/openapi-v1.yaml consoleSignIn,
// consoleDecide, consoleDisableIdentity): an unknown field is 400 validation_failed naming it, and
// nothing happens (no session, the write not run, the identity enabled).
test('an unknown body field: sign-in, approve and disable are refused with 400 validation_failed naming it; nothing happens', async () => {
  const refusal = (field: string) => ({ status: 400, json: { error: 'invalid_request', code: 'validation_failed', message: `the body has a field this route does not accept (spec/openapi-v1.yaml): ${field}` } });
  const signInExtra = await http('POST', '/console/api/session', { body: { token: token.secret, remember: true } });
  expect({ status: signInExtra.status, json: signInExtra.json }).toEqual(refusal('/remember'));
  expect(signInExtra.headers.get('set-cookie')).toBeNull();
  const id = await queue('INSERT INTO playlist (name) VALUES ($1)', ['Strict']);
  const s = await signIn();
  const approve = await http('POST', `/console/api/approvals/${id}/approve`, { cookie: s.cookie, csrf: s.csrf, body: { reason: 'ok', confrim: true } });
  expect({ status: approve.status, json: approve.json }).toEqual(refusal('/confrim'));
  expect(await sourceQuery(env, "SELECT count(*)::int AS n FROM playlist WHERE name = 'Strict'")).toEqual([{ n: 0 }]);
  expect((await http('GET', `/console/api/approvals/${id}`, { cookie: s.cookie })).json.approval.state).toBe('pending');
  const disable = await http('POST', '/console/api/identities/demo-agent/disable', { cookie: s.cookie, csrf: s.csrf, body: { why: 'x' } });
  expect({ status: disable.status, json: disable.json }).toEqual(refusal('/why'));
  expect((await env.db.pool.query("SELECT disabled FROM identities WHERE name = 'demo-agent'")).rows).toEqual([{ disabled: false }]);
});

test('the event stream sends the pending queue and a new write as it arrives', async () => {
  const s = await signIn();
  const ctrl = new AbortController();
  const bound = setTimeout(() => ctrl.abort(), 15_000); // a missing event fails the test in bounded time
  const r = await fetch(base() + '/console/api/events', { headers: { cookie: s.cookie }, signal: ctrl.signal });
  expect(r.status).toBe(200);
  expect(r.headers.get('content-type')).toBe('text/event-stream');
  const reader = r.body!.getReader();
  let buf = '';
  const until = async (pred: (b: string) => boolean) => {
    while (!pred(buf)) {
      const { value, done } = await reader.read();
      if (done) throw new Error('stream ended');
      buf += Buffer.from(value).toString('utf8');
    }
  };
  await until((b) => b.includes('event: queue'));
  const id = await queue('INSERT INTO playlist (name) VALUES ($1)', ['Live']);
  await until((b) => b.includes(id));
  clearTimeout(bound);
  ctrl.abort();
});

test('sign-out clears the cookie; a revoked token ends the session', async () => {
  const s = await signIn();
  const out = await http('DELETE', '/console/api/session', { cookie: s.cookie, csrf: s.csrf });
  expect(out.json).toEqual({ signedOut: true });
  expect(out.headers.get('set-cookie')).toMatch(/^interlock_console=; .*Max-Age=0/);
  const other = await createOperatorToken(env.db, 'ops-dave');
  const s2 = await signIn(other.secret);
  expect((await http('GET', '/console/api/approvals', { cookie: s2.cookie })).status).toBe(200);
  await revokeOperatorToken(env.db, other.tokenId);
  expect((await http('GET', '/console/api/approvals', { cookie: s2.cookie })).status).toBe(401);
});

test('the detail of an approval whose source was removed still opens (no plan), with its audit', async () => {
  const id = await queue('INSERT INTO playlist (name) VALUES ($1)', ['Orphan']);
  const s = await signIn();
  expect((await http('POST', `/console/api/approvals/${id}/approve`, { cookie: s.cookie, csrf: s.csrf, body: {} })).json).toMatchObject({ id, state: 'executed' });
  await removeSource(env.db, 'chinook', { operator: 'ops-carol', force: true });
  const d = await http('GET', `/console/api/approvals/${id}`, { cookie: s.cookie });
  expect(d.status).toBe(200);
  expect(d.json).toMatchObject({ approval: { id, state: 'executed', sourceId: 'chinook' }, plan: null });
  expect(d.json.audit.map((e: { decision: string }) => e.decision)).toEqual(['queued', 'approved', 'executed']);
});

test('disabling an identity in the console records identity_disabled in the signed-in operator\'s name (issue hgov item 1)', async () => {
  const { createIdentity } = await import('../../../src/control/identities');
  const idn = await createIdentity(env.db, 'console-target');
  const { cookie, csrf } = await signIn();
  const before = (await env.db.pool.query<{ id: string }>('SELECT coalesce(max(id), 0)::text AS id FROM audit_events')).rows[0].id;
  const r = await http('POST', '/console/api/identities/console-target/disable', { cookie, csrf, body: {} });
  expect(r.status).toBe(200);
  expect(r.json).toMatchObject({ name: 'console-target', disabled: true });
  const events = await env.db.pool.query("SELECT kind, decision, operator, source_id, details FROM audit_events WHERE kind = 'config' AND id > $1 ORDER BY id", [before]);
  expect(events.rows).toEqual([{ kind: 'config', decision: 'identity_disabled', operator: 'ops-carol', source_id: null, details: { identityId: idn.id, identity: 'console-target' } }]);
});
