/**
 * Issue 14: the approval loop on the governed gateway with the provisioned demo (Chinook copy).
 * Item 6/5: the README's "add a playlist called Focus" executes after approval, and describe_source
 * shows the default that makes it work.
 */
import { startGovernedEnv, callTool, sourceQuery as sourceQueryOn, type GovernedEnv } from '../../helpers/governed';
import { approveAndExecute, rejectApproval } from '../../../src/approvals/execute';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { getApproval } from '../../../src/control/approvals';
import { searchAudit } from '../../../src/audit/writer';
import { requeueApproval } from '../../../src/approvals/requeue';
import { createOperatorToken } from '../../../src/admin/tokens';

let env: GovernedEnv;
beforeAll(async () => {
  env = await startGovernedEnv();
}, 90_000);
afterAll(async () => env?.close());

const sc = (r: { body: any }) => r.body.result.structuredContent;
const query = (sql: string, params: unknown[] = []) => callTool(env, 'interlock_query', { source_id: 'chinook', sql, params }, env.apiKey);

const sourceQuery = <T = any>(sql: string, params: unknown[] = []) => sourceQueryOn<T>(env, sql, params);

describe('item 6/5: the demo example write', () => {
  test('describe_source shows playlist_id as an identity primary key and name as nullable', async () => {
    const r = await callTool(env, 'interlock_describe_source', { source_id: 'chinook' }, env.apiKey);
    const rows = JSON.parse(r.body.result.content[0].text) as Array<Record<string, unknown>>;
    expect(rows.find((x) => x.table_name === 'playlist' && x.column_name === 'playlist_id')).toEqual({
      table_schema: 'public', table_name: 'playlist', column_name: 'playlist_id', data_type: 'integer',
      is_nullable: false, column_default: null, is_identity: true, identity_generation: 'BY DEFAULT', is_generated: false, is_serial: false, primary_key: true, unique: true, table_kind: 'table', type_kind: 'base', value_form: 'number',
    });
    expect(rows.find((x) => x.table_name === 'playlist' && x.column_name === 'name')).toMatchObject({ is_nullable: true, primary_key: false, is_identity: false });
    expect(sc(r).keys).toContainEqual({ table_schema: 'public', table_name: 'playlist_track', kind: 'primary', columns: ['playlist_id', 'track_id'] });
    expect(sc(r).rows).toEqual(rows);
  });

  test('INSERT INTO playlist (name) VALUES ($1) is queued, then executes once approved', async () => {
    const before = (await sourceQuery('SELECT max(playlist_id)::int AS m FROM playlist'))[0].m as number;
    const r = await query('INSERT INTO playlist (name) VALUES ($1)', ['Focus']);
    expect(sc(r)).toMatchObject({ status: 'queued', approval_state: 'pending' });
    const done = await approveAndExecute(env.db, sc(r).approval_id, { operator: 'ops-alice' });
    expect(done).toMatchObject({ state: 'executed', rowCount: 1 });
    expect(await sourceQuery("SELECT playlist_id FROM playlist WHERE name = 'Focus'")).toEqual([{ playlist_id: before + 1 }]);
  });
});

describe('item 4: operators see why a write failed; a failed approval can be requeued', () => {
  let token: string;
  let failedId: string;
  const admin = (method: string, path: string, body?: unknown) =>
    fetch(new URL(`/admin/v1${path}`, env.url).toString(), { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });

  beforeAll(async () => {
    token = (await createOperatorToken(env.db, 'ops-bob')).secret;
  });

  test('a failing write ends failed with SQLSTATE, message and detail recorded for operators', async () => {
    const r = await query('INSERT INTO playlist_track (playlist_id, track_id) VALUES ($1, $2)', [987654, 1]);
    failedId = sc(r).approval_id;
    const res = await admin('POST', `/approvals/${failedId}/approve`, {});
    expect(res.status).toBe(200);
    const decision = (await res.json()) as any;
    expect(decision).toEqual({
      id: failedId, approvalId: failedId, state: 'failed', errorCode: 'statement_failed',
      failure: { sqlstate: '23503', message: 'insert or update on table "playlist_track" violates foreign key constraint "playlist_track_playlist_id_fkey"', detail: 'Key (playlist_id)=(987654) is not present in table "playlist".' },
    });
    const shown = await (await admin('GET', `/approvals/${failedId}`)).json();
    expect(shown).toMatchObject({ state: 'failed', outcome: { error_code: 'statement_failed', sqlstate: '23503' }, failure: decision.failure, requeuedFrom: null });
  });

  test('requeue makes a linked pending approval; a second requeue while it is pending is a conflict; a pending one cannot be requeued', async () => {
    const res = await admin('POST', `/approvals/${failedId}/requeue`, {});
    expect(res.status).toBe(201);
    const again = (await res.json()) as any;
    const original = await getApproval(env.db, failedId);
    expect(again).toMatchObject({ state: 'pending', requeuedFrom: failedId, sql: original!.sql, params: original!.params, identityId: original!.identityId, sourceId: 'chinook', failure: null, outcome: null });
    expect(again.id).not.toBe(failedId);
    const twice = await admin('POST', `/approvals/${failedId}/requeue`, {});
    expect(twice.status).toBe(409);
    expect(await twice.json()).toMatchObject({ code: 'conflict', message: `approval ${failedId} was already requeued as ${again.id}, which is pending` });
    const notFailed = await admin('POST', `/approvals/${again.id}/requeue`, {});
    expect(notFailed.status).toBe(409);
    const trail = await searchAudit(env.db, { approvalId: again.id });
    expect(trail.events.map((e) => [e.decision, e.operator, e.details])).toEqual([['requeued', 'ops-bob', { requeued_from: failedId }]]);
  });

  test('concurrent requeues of one failed approval make exactly one pending approval; the others are conflicts', async () => {
    const r = await query('INSERT INTO playlist_track (playlist_id, track_id) VALUES ($1, $2)', [987655, 1]);
    const id = sc(r).approval_id as string;
    expect((await admin('POST', `/approvals/${id}/approve`, {})).status).toBe(200);
    const answers = await Promise.all(Array.from({ length: 6 }, () => admin('POST', `/approvals/${id}/requeue`, {})));
    expect(answers.map((a) => a.status).sort()).toEqual([201, 409, 409, 409, 409, 409]);
    const created = (await answers.find((a) => a.status === 201)!.json()) as { id: string };
    for (const a of answers.filter((x) => x.status === 409)) {
      expect(await a.json()).toMatchObject({ code: 'conflict', message: `approval ${id} was already requeued as ${created.id}, which is pending` });
    }
    const rows = (await env.db.pool.query("SELECT id FROM approvals WHERE requeued_from = $1", [id])).rows.map((x) => x.id);
    expect(rows).toEqual([created.id]);
  });

  test('failure and requeued_from are write-once (database guard)', async () => {
    // A transition the state guard allows (pending → rejected), so only the cause guard can refuse it.
    const pending = (await env.db.pool.query("SELECT id FROM approvals WHERE state = 'pending' AND requeued_from IS NOT NULL LIMIT 1")).rows[0].id as string;
    await expect(env.db.pool.query(`UPDATE approvals SET state = 'rejected', failure = '{"message":"x"}' WHERE id = $1`, [pending])).rejects.toThrow(/failure is recorded once/);
    await expect(env.db.pool.query('UPDATE approvals SET requeued_from = NULL WHERE id = $1', [pending])).rejects.toThrow(/requeued_from is immutable/);
    await expect(env.db.pool.query(`UPDATE approvals SET failure = '{"message":"x"}' WHERE id = $1`, [failedId])).rejects.toThrow(/failure is recorded once|illegal state transition/);
  });
});

describe('item 3: interlock_approval_status', () => {
  let otherKey: string;
  const status = (id: string, key = env.apiKey) => callTool(env, 'interlock_approval_status', { approval_id: id }, key);
  const withoutRequestId = (r: { body: any }) => {
    const { request_id: _omit, ...rest } = r.body.result.structuredContent;
    return { isError: r.body.result.isError, rest };
  };

  beforeAll(async () => {
    const other = await createIdentity(env.db, 'other-agent');
    otherKey = (await createApiKey(env.db, other.id)).secret;
  });

  test('the queued result names the tool; pending, then executed with the row count', async () => {
    const q = await query('INSERT INTO playlist (name) VALUES ($1)', ['Status check']);
    expect(sc(q).message).toContain('interlock_approval_status');
    expect(q.body.result.content[0].text).toContain('call interlock_approval_status with this approval_id');
    const id = sc(q).approval_id;
    const pending = await status(id);
    expect(pending.body.result.isError).toBeUndefined();
    expect(sc(pending)).toEqual({
      approval_id: id, source_id: 'chinook', state: 'pending', requested_at: expect.any(String), expires_at: expect.any(String),
      decided_at: null, executed_at: null, outcome: null, message: 'Waiting for an operator to approve or reject it. Nothing has run yet; do not queue it again.',
    });
    expect(JSON.parse(pending.body.result.content[0].text)).toEqual(sc(pending));
    await approveAndExecute(env.db, id, { operator: 'ops-alice' });
    const done = await status(id);
    expect(sc(done)).toMatchObject({ state: 'executed', decided_at: expect.any(String), executed_at: expect.any(String), outcome: { row_count: 1 }, message: 'An operator approved it and it ran once. 1 row(s) changed.' });
  });

  test('a failed write: a stable code and a safe message, no database text', async () => {
    const q = await query('INSERT INTO playlist_track (playlist_id, track_id) VALUES ($1, $2)', [876543, 1]);
    await approveAndExecute(env.db, sc(q).approval_id, { operator: 'ops-alice' });
    const r = await status(sc(q).approval_id);
    // The SQLSTATE and its condition name (new-user pass: something to act on), never PostgreSQL's text.
    expect(sc(r).outcome).toEqual({ error_code: 'statement_failed', message: 'The source database refused the statement when it ran (for example a constraint or a missing privilege). Nothing was changed; an operator can see the database\'s reason.', sqlstate: '23503', condition: 'foreign_key_violation' });
    expect(sc(r)).toMatchObject({ state: 'failed' });
    const text = r.body.result.content[0].text as string;
    for (const leak of ['foreign key', 'playlist_track_playlist_id_fkey', '876543', 'Key (', 'violates']) expect(text).not.toContain(leak);
  });

  test('a failed write an operator requeued names the new approval (requeued_as); the new one names the old (requeued_from)', async () => {
    const q = await query('INSERT INTO playlist_track (playlist_id, track_id) VALUES ($1, $2)', [876544, 1]);
    const id = sc(q).approval_id as string;
    await approveAndExecute(env.db, id, { operator: 'ops-alice' });
    const before = sc(await status(id));
    expect(before).toMatchObject({ state: 'failed' });
    expect(before.requeued_as).toBeUndefined();
    const again = await requeueApproval(env.db, id, { operator: 'ops-alice' });
    expect(sc(await status(id))).toMatchObject({ state: 'failed', requeued_as: again.id });
    expect(sc(await status(again.id))).toMatchObject({ state: 'pending', requeued_from: id });
    expect(sc(await status(again.id)).requeued_as).toBeUndefined();
  });

  test('rejected with the operator\'s reason', async () => {
    const q = await query('DELETE FROM playlist_track WHERE playlist_id = $1', [1]);
    await rejectApproval(env.db, sc(q).approval_id, { operator: 'ops-alice', reason: 'too broad' });
    expect(sc(await status(sc(q).approval_id))).toMatchObject({ state: 'rejected', outcome: { reason: 'too broad' }, message: 'An operator rejected it; it was not run.' });
  });

  test("another identity's approval answers exactly like an unknown id", async () => {
    const q = await query('INSERT INTO playlist (name) VALUES ($1)', ['Mine']);
    const foreign = await status(sc(q).approval_id, otherKey);
    const unknown = await status('apr_000000000000000000000000', otherKey);
    const garbage = await status('not-an-id', otherKey);
    expect(withoutRequestId(foreign)).toEqual({ isError: true, rest: { status: 'not_found', code: 'unknown_approval', message: 'No approval with that id was requested by this identity.' } });
    expect(withoutRequestId(unknown)).toEqual(withoutRequestId(foreign));
    expect(withoutRequestId(garbage)).toEqual(withoutRequestId(foreign));
    const texts = (r: { body: any }) => (r.body.result.content[0].text as string).replace(/req_[0-9A-Za-z_-]+/g, 'req');
    expect(texts(foreign)).toBe(texts(unknown));
    expect((await status(sc(q).approval_id, null as unknown as string)).body.result.structuredContent).toMatchObject({ status: 'unauthorized', code: 'missing_api_key' });
  });
});
