/**
 * Issue 24, item 4: requester checks at decision time, on the real gateway. A pending write whose
 * API key has been revoked or has expired, or whose identity is disabled, cannot be approved: it
 * ends `failed` with the requester's code (nothing runs), the agent reads the code through
 * interlock_approval_status, and the console's detail shows the problem while it is still pending.
 */
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { createOperatorToken } from '../../../src/admin/tokens';
import { createApiKey, revokeApiKey } from '../../../src/control/keys';
import { createIdentity, disableIdentity, requireIdentity } from '../../../src/control/identities';
import { grantRole, listGrants } from '../../../src/control/grants';
import { getApproval } from '../../../src/control/approvals';
import { requesterProblems } from '../../../src/approvals/requester';
import errors from '../../../spec/errors-v1.json';
import { checkedFetch } from '../http/openapi';
import { runCli } from '../../../src/cli/main';
import { listApprovals } from '../../../src/control/approvals';
import { validateApprovalStatus } from '../../../generated/validators';
import { approvalLookup } from '../../../src/approvals/status';

jest.setTimeout(120_000);

let env: GovernedEnv;
let token: string;
let agentId: string;
beforeAll(async () => {
  env = await startGovernedEnv();
  token = (await createOperatorToken(env.db, 'ops-dora')).secret;
  agentId = (await requireIdentity(env.db, 'demo-agent')).id;
});
afterAll(async () => env?.close());

const failureMessage = (code: string) => errors.approvalFailures.find((f) => f.code === code)!.message;
const sc = (r: { body: any }) => r.body.result.structuredContent;

async function queue(key: string, name: string): Promise<string> {
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'INSERT INTO playlist (name) VALUES ($1)', params: [name] }, key);
  expect(sc(r)).toMatchObject({ status: 'queued', approval_state: 'pending' });
  return sc(r).approval_id;
}
async function admin(method: string, path: string, body?: unknown) {
  const r = await fetch(new URL(`/admin/v1${path}`, env.url).toString(), { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: r.status, json: (await r.json()) as any };
}
async function consoleGet(path: string) {
  const base = new URL(env.url).origin;
  const s = await fetch(`${base}/console/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token }) });
  const cookie = (s.headers.get('set-cookie') ?? '').split(';')[0];
  // Validated against spec/openapi-v1.yaml (requesterProblem, requester).
  const r = await checkedFetch(`${base}/console/api${path}`, { headers: { cookie } });
  expect(r.problems).toEqual([]);
  return r.json as any;
}
const consoleDetail = (id: string) => consoleGet(`/approvals/${id}`);
const rows = async (name: string) => (await sourceQuery(env, 'SELECT count(*)::int AS n FROM playlist WHERE name = $1', [name]))[0].n;

test('a revoked key: the console warns before the click, approving ends failed key_revoked, nothing runs, the agent reads why', async () => {
  const key = await createApiKey(env.db, agentId);
  const id = await queue(key.secret, 'revoked-key');
  expect((await consoleDetail(id)).requester).toBeNull();
  await revokeApiKey(env.db, key.keyId);

  const detail = await consoleDetail(id);
  expect(detail.requester).toEqual({ code: 'key_revoked', message: 'Approving will not run this write: the API key that queued this write has been revoked (or no longer exists). It would end failed (key_revoked).' });
  expect(detail.approval).toMatchObject({ id, state: 'pending', keyId: key.keyId });

  const decided = await admin('POST', `/approvals/${id}/approve`, {});
  expect(decided).toEqual({ status: 200, json: { id, approvalId: id, state: 'failed', errorCode: 'key_revoked', failure: { message: 're-checked at approval: the API key that queued this write has been revoked (or no longer exists)' } } });
  expect(await rows('revoked-key')).toBe(0);
  expect((await getApproval(env.db, id))!).toMatchObject({ state: 'failed', decidedBy: 'ops-dora', outcome: { error_code: 'key_revoked' } });
  // The identity's other key reads the outcome; the message is the fixed one, never the operator's cause.
  const status = await callTool(env, 'interlock_approval_status', { approval_id: id }, env.apiKey);
  expect(sc(status)).toMatchObject({ approval_id: id, state: 'failed', outcome: { error_code: 'key_revoked', message: failureMessage('key_revoked') } });
  expect(sc(status).message).toBe(`An operator approved it but it did not complete. ${failureMessage('key_revoked')}`);
});

test('an expired key: approving ends failed key_expired and nothing runs', async () => {
  const key = await createApiKey(env.db, agentId, { expiresAt: new Date(Date.now() + 3_600_000) });
  const id = await queue(key.secret, 'expired-key');
  await env.db.pool.query("UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1", [key.keyId]);
  expect((await consoleDetail(id)).requester).toMatchObject({ code: 'key_expired' });
  const decided = await admin('POST', `/approvals/${id}/approve`, {});
  expect(decided.json).toMatchObject({ state: 'failed', errorCode: 'key_expired', failure: { message: 're-checked at approval: the API key that queued this write has expired' } });
  expect(await rows('expired-key')).toBe(0);
  const status = await callTool(env, 'interlock_approval_status', { approval_id: id }, env.apiKey);
  expect(sc(status).outcome).toEqual({ error_code: 'key_expired', message: failureMessage('key_expired') });
});

test('a disabled identity: the console list and detail flag it; approving ends failed identity_disabled', async () => {
  const other = await createIdentity(env.db, 'agent-two');
  for (const g of await listGrants(env.db, { identityId: agentId })) await grantRole(env.db, { identityId: other.id, roleName: g.roleName, sourceId: g.sourceId });
  const key = await createApiKey(env.db, other.id);
  const id = await queue(key.secret, 'disabled-identity');
  await disableIdentity(env.db, 'agent-two');
  expect((await consoleDetail(id)).requester).toMatchObject({ code: 'identity_disabled' });
  const listed = (await consoleGet('/approvals?state=pending')).approvals as Array<{ id: string; requesterProblem: string | null }>;
  expect(listed.find((a) => a.id === id)!.requesterProblem).toBe('identity_disabled');
  expect(listed.filter((a) => a.id !== id).map((a) => a.requesterProblem)).toEqual(listed.filter((a) => a.id !== id).map(() => null));
  const decided = await admin('POST', `/approvals/${id}/approve`, {});
  expect(decided.json).toMatchObject({ state: 'failed', errorCode: 'identity_disabled' });
  expect(await rows('disabled-identity')).toBe(0);
});

test('a live key and identity: no requester problem, and the write runs', async () => {
  const id = await queue(env.apiKey, 'live-key');
  expect((await consoleDetail(id)).requester).toBeNull();
  expect((await admin('POST', `/approvals/${id}/approve`, {})).json).toMatchObject({ state: 'executed', rowCount: 1 });
  expect(await rows('live-key')).toBe(1);
});

test('task nu47fix (1): a pending write whose key was revoked or expired: the agent is told it cannot run as queued and to queue it again, not to wait; other identities learn nothing', async () => {
  const revokedKey = await createApiKey(env.db, agentId);
  const expiringKey = await createApiKey(env.db, agentId, { expiresAt: new Date(Date.now() + 3_600_000) });
  const revokedId = await queue(revokedKey.secret, 'nu47-revoked');
  const expiredId = await queue(expiringKey.secret, 'nu47-expired');
  const status = async (id: string, key = env.apiKey) => sc(await callTool(env, 'interlock_approval_status', { approval_id: id }, key));
  const pending = (id: string) => ({ approval_id: id, source_id: 'chinook', state: 'pending', requested_at: expect.any(String), expires_at: expect.any(String), decided_at: null, executed_at: null, outcome: null });
  // While the key is live: waiting, as before.
  expect(await status(revokedId)).toEqual({ ...pending(revokedId), message: 'Waiting for an operator to approve or reject it. Nothing has run yet; do not queue it again.' });

  await revokeApiKey(env.db, revokedKey.keyId);
  await env.db.pool.query("UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1", [expiringKey.keyId]);
  // The identity's other (live) key asks: still pending (nobody decided), but it cannot run and the agent is told what to do.
  for (const [id, code, what] of [[revokedId, 'key_revoked', 'been revoked'], [expiredId, 'key_expired', 'expired']]) {
    const v = await status(id);
    expect(v).toEqual({
      ...pending(id),
      cannot_run: code,
      message: `It cannot run as queued: the API key that queued it has ${what}, so approving it would not run it (it would end failed, ${code}). Nothing has run. To have the write made, queue it again with a valid API key.`,
    });
    expect(validateApprovalStatus(v)).toBe(true);
  }
  // The operator side says the same (approval list's ⚠).
  const listed = await cli('approval', 'list', '--state', 'pending');
  expect(listed.stdout.split('\n').find((l) => l.startsWith(revokedId))).toContain('⚠ key_revoked');
  expect(listed.stdout.split('\n').find((l) => l.startsWith(expiredId))).toContain('⚠ key_expired');

  // Another identity asking for these ids learns nothing (not_found, as for an id that does not exist).
  const stranger = await createIdentity(env.db, 'agent-nu47');
  for (const g of await listGrants(env.db, { identityId: agentId })) await grantRole(env.db, { identityId: stranger.id, roleName: g.roleName, sourceId: g.sourceId });
  const strangerKey = (await createApiKey(env.db, stranger.id)).secret;
  for (const id of [revokedId, expiredId, 'apr_000000000000000000000000']) {
    const r = await callTool(env, 'interlock_approval_status', { approval_id: id }, strangerKey);
    expect(r.body.result.isError).toBe(true);
    expect(sc(r)).toEqual({ status: 'not_found', code: 'unknown_approval', message: 'No approval with that id was requested by this identity.', request_id: expect.stringMatching(/^req_/) });
  }
  // Its requester's keys are not even looked up for the stranger: the lookup stops at the id.
  expect(await approvalLookup(env.db)(revokedId, stranger.id)).toBeNull();
  expect(await approvalLookup(env.db)(revokedId, agentId)).toMatchObject({ approval: { id: revokedId, state: 'pending' }, requesterProblem: 'key_revoked' });
  // The stranger's own live write is plainly pending.
  const own = await queue(strangerKey, 'nu47-stranger');
  expect(await status(own, strangerKey)).toEqual({ ...pending(own), message: 'Waiting for an operator to approve or reject it. Nothing has run yet; do not queue it again.' });
  // Decided, the revoked one ends failed key_revoked as the status said it would; cannot_run is for pending writes only.
  expect((await admin('POST', `/approvals/${revokedId}/approve`, {})).json).toMatchObject({ state: 'failed', errorCode: 'key_revoked' });
  expect(await status(revokedId)).not.toHaveProperty('cannot_run');
  expect(await rows('nu47-revoked')).toBe(0);
  for (const id of [expiredId, own]) await admin('POST', `/approvals/${id}/reject`, { reason: 'test' });
});

test('requesterProblems judges many approvals in one query, by key and identity, null key checked by identity only', async () => {
  const revoked = await createApiKey(env.db, agentId);
  await revokeApiKey(env.db, revoked.keyId);
  const live = await createApiKey(env.db, agentId);
  const other = await requireIdentity(env.db, 'agent-two');
  const m = await requesterProblems(env.db, [
    { id: 'a', identityId: agentId, keyId: live.keyId },
    { id: 'b', identityId: agentId, keyId: revoked.keyId },
    { id: 'c', identityId: agentId, keyId: null },
    { id: 'd', identityId: other.id, keyId: null },
    { id: 'e', identityId: agentId, keyId: 'key_00000000000000000000' },
    // A key of another identity does not count as the requester's.
    { id: 'f', identityId: other.id, keyId: live.keyId },
  ]);
  expect(Object.fromEntries(m)).toEqual({ b: 'key_revoked', d: 'identity_disabled', e: 'key_revoked', f: 'identity_disabled' });
});

/** The CLI in this process, direct mode on the gateway's control database. */
async function cli(...args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(['--database-url', env.db.url, ...args], { out: (t) => out.push(t), err: (t) => err.push(t) });
  return { code, stdout: out.join('\n'), stderr: err.join('\n') };
}

test('task hnu4b (a): the CLI warns of a revoked key before approving, its failure is not sent back to the queue, and requeue refuses it', async () => {
  const key = await createApiKey(env.db, agentId);
  const id = await queue(key.secret, 'revoked-cli');
  await revokeApiKey(env.db, key.keyId);
  const warning = 'warning: Approving will not run this write: the API key that queued this write has been revoked (or no longer exists). It would end failed (key_revoked).';

  const shown = await cli('approval', 'show', id);
  expect(shown.code).toBe(0);
  expect(shown.stdout.split('\n')).toContain(warning);
  // The admin API's review carries it too (validated against spec/openapi-v1.yaml).
  const review = await checkedFetch(new URL(`/admin/v1/approvals/${id}/review`, env.url).toString(), { headers: { authorization: `Bearer ${token}` } });
  expect(review.problems).toEqual([]);
  expect((review.json as any).requester).toEqual({ code: 'key_revoked', message: warning.slice('warning: '.length) });

  const approved = await cli('approval', 'approve', id, '--yes', '--operator', 'ops-dora');
  expect(approved.code).toBe(1);
  expect(approved.stdout.split('\n')).toContain(warning);
  expect(approved.stdout).toContain(`approved ${id}, but the write failed: key_revoked`);
  expect(approved.stdout).toContain('(the API key that queued it is revoked: it cannot be requeued; the agent must send the write again with a valid key)');
  expect(approved.stdout).not.toContain('approval requeue');

  const requeued = await cli('approval', 'requeue', id, '--operator', 'ops-dora');
  expect(requeued).toEqual({ code: 2, stdout: '', stderr: `error: approval ${id} cannot be requeued: the API key that queued this write has been revoked (or no longer exists), so it could never run; the agent must send the write again with a valid key` });
  expect(await admin('POST', `/approvals/${id}/requeue`, {})).toMatchObject({ status: 409, json: { code: 'conflict' } });
  expect((await listApprovals(env.db, { state: 'pending' })).filter((a) => a.requeuedFrom === id)).toEqual([]);
  // A live key's approval reviews without a warning.
  const live = await queue(env.apiKey, 'live-cli');
  expect((await cli('approval', 'show', live)).stdout).not.toContain('warning:');
  expect((await admin('GET', `/approvals/${live}/review`)).json.requester).toBeNull();
});
