/**
 * Issue 3, end to end with real clients: SDK v1 (handshake) and SDK v2 (modern, pinned 2026-07-28)
 * list sources → describe access → query Chinook (rows come back, masked columns masked) → a write
 * comes back queued → `interlock approval approve` (the operator CLI, as a separate process) runs it
 * → the row is in the database → the audit shows every step.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import pg from 'pg';
import { startGovernedEnv, type GovernedEnv } from '../helpers/governed';
import { connectSdkV1, connectSdkV2, type ConnectedClient, type CallOutcome } from '../helpers/clients';
import { searchAudit } from '../../src/audit/writer';

const run = promisify(execFile);
const BIN = join(__dirname, '..', '..', 'bin', 'interlock.js');
let env: GovernedEnv;

beforeAll(async () => {
  env = await startGovernedEnv();
}, 60_000);
afterAll(async () => env?.close());

function structured(o: CallOutcome): Record<string, any> {
  if (o.kind !== 'result') throw new Error(`expected a result, got ${o.name}: ${o.message}`);
  return o.result.structuredContent as Record<string, any>;
}

async function sourceRows(sql: string): Promise<any[]> {
  const c = new pg.Client({ connectionString: env.sourceUrl });
  await c.connect();
  try {
    return (await c.query(sql)).rows;
  } finally {
    await c.end();
  }
}

const clients: Array<[string, () => Promise<ConnectedClient>, number]> = [
  ['SDK v1 (2025-11-25)', () => connectSdkV1({ url: env.url, apiKey: env.apiKey }), 9101],
  ['SDK v2 pinned 2026-07-28', () => connectSdkV2({ url: env.url, apiKey: env.apiKey, mode: { pin: '2026-07-28' } }), 9102],
];

test.each(clients)('%s: list → describe → query (masked) → write queued → CLI approval → row present → audit', async (_label, connect, playlistId) => {
  const client = await connect();
  try {
    const sources = structured(await client.callTool('interlock_list_sources', {}));
    expect(sources).toEqual({ chinook: expect.objectContaining({ type: 'postgres' }), handbook: expect.objectContaining({ type: 'documents' }) });

    const access = structured(await client.callTool('interlock_describe_access', { source_id: 'chinook' }));
    expect(access.chinook.roles).toEqual(['demo-analyst']);

    const rows = structured(await client.callTool('interlock_query', { source_id: 'chinook', sql: 'SELECT first_name, email, phone FROM customer WHERE customer_id = $1', params: [1] }));
    const real = (await sourceRows('SELECT first_name, email, phone FROM customer WHERE customer_id = 1'))[0];
    expect(rows.rows[0].first_name).toBe(real.first_name);
    expect(rows.rows[0].email).not.toBe(real.email);
    expect(rows.rows[0].phone).not.toBe(real.phone);
    expect(rows.masked_columns).toEqual(['email', 'phone']);

    const queued = await client.callTool('interlock_query', { source_id: 'chinook', sql: `INSERT INTO playlist (playlist_id, name) VALUES (${playlistId}, 'From ${_label}')` });
    expect(queued.kind === 'result' && queued.result.isError).toBe(false);
    const q = structured(queued);
    expect(q).toMatchObject({ status: 'queued', approval_state: 'pending' });
    expect(await sourceRows(`SELECT * FROM playlist WHERE playlist_id = ${playlistId}`)).toEqual([]);

    const cli = await run(process.execPath, [BIN, '--database-url', env.db.url, 'approval', 'approve', q.approval_id, '--operator', 'ops-alice', '--yes'], { timeout: 60_000 });
    expect(cli.stdout).toMatch(/executed/);
    expect(await sourceRows(`SELECT name FROM playlist WHERE playlist_id = ${playlistId}`)).toEqual([{ name: `From ${_label}` }]);

    const audit = (await searchAudit(env.db, { approvalId: q.approval_id, limit: 20 })).events;
    expect(audit.map((e) => `${e.kind}:${e.decision}`).sort()).toEqual(['approval:approved', 'approval:executed', 'approval:queued', 'tool_call:queued']);
  } finally {
    await client.close();
  }
}, 120_000);
