/**
 * Issue 14: the approval loop on the governed gateway with the provisioned demo (Chinook copy).
 * Item 6/5: the README's "add a playlist called Focus" executes after approval, and describe_source
 * shows the default that makes it work.
 */
import { startGovernedEnv, callTool, sourceQuery as sourceQueryOn, type GovernedEnv } from '../../helpers/governed';
import { approveAndExecute } from '../../../src/approvals/execute';

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
