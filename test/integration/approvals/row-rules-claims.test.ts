/**
 * Issue 27, writes by identities from access tokens, on the governed gateway (Chinook copy): the
 * attribute a row rule reads (`tenant`) comes from the token's `attribute_claims`. The values the
 * write's row rules read are kept with the queued write (approvals.claim_attributes) and used at
 * approval, under the identity record's current values (the record wins, as on a call). Operators
 * see them in the admin API's and the console's approval detail (validated against
 * spec/openapi-v1.yaml).
 */
import { callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import type { TestIssuer } from '../../helpers/jwks-server';
import { useTenantClaimsEnv } from '../../helpers/tenant-claims';
import { createOperatorToken } from '../../../src/admin/tokens';
import { setIdentityAttributes } from '../../../src/control/identities';
import { upsertRole } from '../../../src/control/roles';
import { approveAndExecute } from '../../../src/approvals/execute';
import { requeueApproval } from '../../../src/approvals/requeue';
import { getApproval } from '../../../src/control/approvals';
import { checkedFetch } from '../http/openapi';

jest.setTimeout(120_000);

const RESOURCE = 'https://gateway.h27x.example/mcp';
const ROLE = 'playlist-tenant';
const started = useTenantClaimsEnv(RESOURCE, ROLE);
let iss: TestIssuer;
let env: GovernedEnv;
let opToken: string;

beforeAll(async () => {
  ({ iss, env } = started());
  opToken = (await createOperatorToken(env.db, 'ops-h27x')).secret;
});

const sc = (r: { body: any }) => r.body.result.structuredContent;
const count = async (name: string) => (await sourceQuery(env, 'SELECT count(*)::int AS n FROM playlist WHERE name = $1', [name]))[0].n as number;
/** The statement every test queues: it names every playlist, so the rule alone decides which it reaches. */
const EVERY = 'UPDATE playlist SET name = name WHERE playlist_id > 0';

async function call(token: string, sql: string) {
  return callTool(env, 'interlock_query', { source_id: 'chinook', sql, params: [] }, token);
}
async function queue(token: string, sql = EVERY): Promise<string> {
  const r = await call(token, sql);
  expect(sc(r)).toMatchObject({ status: 'queued', approval_state: 'pending' });
  return sc(r).approval_id;
}
async function adminDetail(id: string) {
  const r = await checkedFetch(new URL(`/admin/v1/approvals/${id}`, env.url).toString(), { headers: { authorization: `Bearer ${opToken}` } });
  expect(r.problems).toEqual([]);
  return r.json as any;
}
async function consoleDetail(id: string) {
  const base = new URL(env.url).origin;
  const s = await fetch(`${base}/console/api/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: opToken }) });
  const cookie = (s.headers.get('set-cookie') ?? '').split(';')[0];
  const r = await checkedFetch(`${base}/console/api/approvals/${id}`, { headers: { cookie } });
  expect(r.problems).toEqual([]);
  return r.json as any;
}

test('a token identity with tenant from a claim: the claim value is kept with the write, shown to operators, and the approval reaches only its rows', async () => {
  const music = await count('Music');
  const total = (await sourceQuery(env, 'SELECT count(*)::int AS n FROM playlist'))[0].n as number;
  expect(music).toBeGreaterThan(0);
  expect(total).toBeGreaterThan(music);
  const token = await iss.mint({ sub: 'okta|tia', email: 'tia@example.com', groups: ['writers'], tenant: 'Music' });
  const id = await queue(token);
  // Only the attribute the row rules read is kept (email is a claim attribute too, but no rule reads it).
  expect((await getApproval(env.db, id))!.claimAttributes).toEqual({ tenant: 'Music' });
  expect((await adminDetail(id)).claimAttributes).toEqual({ tenant: 'Music' });
  expect((await consoleDetail(id)).approval.claimAttributes).toEqual({ tenant: 'Music' });
  const done = await approveAndExecute(env.db, id, { operator: 'ops-h27x' });
  expect(done).toEqual({ approvalId: id, state: 'executed', rowCount: music });
});

test('a token without the claim is refused row_rule_attribute_missing when it queues; nothing is stored', async () => {
  const token = await iss.mint({ sub: 'okta|noa', email: 'noa@example.com', groups: ['writers'] });
  const before = (await env.db.pool.query('SELECT count(*)::int AS n FROM approvals')).rows[0].n;
  const r = await call(token, EVERY);
  expect(r.body.result.isError).toBe(true);
  expect(sc(r)).toMatchObject({ code: 'row_rule_attribute_missing' });
  expect((await env.db.pool.query('SELECT count(*)::int AS n FROM approvals')).rows[0].n).toBe(before);
});

test('a record value set after queueing wins over the kept claim value; removed again, the kept claim value is used', async () => {
  const token = await iss.mint({ sub: 'okta|rex', email: 'rex@example.com', groups: ['writers'], tenant: 'Music' });
  const first = await queue(token);
  const second = await queue(token);
  const classical = await count('Classical');
  expect(classical).toBeGreaterThan(0);
  expect(classical).not.toBe(await count('Music'));
  await setIdentityAttributes(env.db, 'rex@example.com', { tenant: 'Classical' });
  expect(await approveAndExecute(env.db, first, { operator: 'ops-h27x' })).toEqual({ approvalId: first, state: 'executed', rowCount: classical });
  await setIdentityAttributes(env.db, 'rex@example.com', { tenant: null });
  expect(await approveAndExecute(env.db, second, { operator: 'ops-h27x' })).toEqual({ approvalId: second, state: 'executed', rowCount: await count('Music') });
});

test('a kept claim value that no longer fits the rule fails closed at approval, and a requeue keeps the claim values', async () => {
  const token = await iss.mint({ sub: 'okta|ivy', email: 'ivy@example.com', groups: ['writers'], tenant: 'Music' });
  const id = await queue(token);
  // The rule now reads an attribute the token never gave: the record lacks it too.
  await upsertRole(env.db, { name: ROLE, statements: [
    { effect: 'allow', action: 'read', resource: 'public.playlist', rows: 'name = identity.tenant AND playlist_id <> identity.excluded' },
    { effect: 'allow', action: 'write', resource: 'public.playlist' },
  ] });
  try {
    expect(await approveAndExecute(env.db, id, { operator: 'ops-h27x' })).toMatchObject({ approvalId: id, state: 'failed', errorCode: 'row_rule_attribute_missing' });
  } finally {
    await upsertRole(env.db, { name: ROLE, statements: [
      { effect: 'allow', action: 'read', resource: 'public.playlist', rows: 'name = identity.tenant' },
      { effect: 'allow', action: 'write', resource: 'public.playlist' },
    ] });
  }
  const again = await requeueApproval(env.db, id, { operator: 'ops-h27x' });
  expect(again.claimAttributes).toEqual({ tenant: 'Music' });
  expect(await approveAndExecute(env.db, again.id, { operator: 'ops-h27x' })).toEqual({ approvalId: again.id, state: 'executed', rowCount: await count('Music') });
});

test('the kept values cannot be changed once stored', async () => {
  const token = await iss.mint({ sub: 'okta|uma', email: 'uma@example.com', groups: ['writers'], tenant: 'Music' });
  const id = await queue(token);
  await expect(env.db.pool.query(`UPDATE approvals SET claim_attributes = '{"tenant": "Movies"}' WHERE id = $1`, [id])).rejects.toThrow(/claim_attributes is immutable/);
  expect((await getApproval(env.db, id))!.claimAttributes).toEqual({ tenant: 'Music' });
});

test('an API-key identity keeps no claim values', async () => {
  const r = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'INSERT INTO playlist (name) VALUES ($1)', params: ['h27x-key'] }, env.apiKey);
  expect(sc(r)).toMatchObject({ status: 'queued' });
  expect((await getApproval(env.db, sc(r).approval_id))!.claimAttributes).toBeNull();
});
