/**
 * Issue 14: the approval loop on the governed gateway with the provisioned demo (Chinook copy).
 * Item 6/5: the README's "add a playlist called Focus" executes after approval, and describe_source
 * shows the default that makes it work.
 */
import { startGovernedEnv, callTool, sourceQuery as sourceQueryOn, type GovernedEnv } from '../../helpers/governed';
import { approveAndExecute } from '../../../src/approvals/execute';
import { getApproval } from '../../../src/control/approvals';
import { searchAudit } from '../../../src/control/audit';
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
      is_nullable: false, column_default: null, is_identity: true, identity_generation: 'BY DEFAULT', is_generated: false, is_serial: false, primary_key: true, unique: true,
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

  test('the failure column is write-once (database guard)', async () => {
    await expect(env.db.pool.query(`UPDATE approvals SET failure = '{"message":"x"}' WHERE id = $1`, [failedId])).rejects.toThrow(/failure is recorded once|illegal state transition/);
  });
});
