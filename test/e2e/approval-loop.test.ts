/**
 * Issue 14, Done when: the approval loop end to end with the official MCP SDK clients.
 * An agent queues a write → a loopback webhook receiver gets approval.queued with a valid
 * signature → an operator approves it through the console's route → the agent's
 * interlock_approval_status shows executed with the row count. The failing variant ends failed
 * with a safe code for the agent and the SQLSTATE plus cause for the operator.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startGovernedEnv, sourceQuery, type GovernedEnv } from '../helpers/governed';
import { connectSdkV1, connectSdkV2, type CallOutcome, type ConnectedClient } from '../helpers/clients';
import { createOperatorToken } from '../../src/admin/tokens';
import { verifyWebhook } from '../../src/approvals/webhooks';

const SECRET = 'e2e-webhook-secret-0123456789abcdef';
let env: GovernedEnv;
let receiver: Server;
const hooks: Array<{ headers: Record<string, unknown>; body: string; json: any }> = [];
let session: { cookie: string; csrf: string };

beforeAll(async () => {
  receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      hooks.push({ headers: req.headers, body, json: JSON.parse(body) });
      res.statusCode = 200;
      res.end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', () => r()));
  process.env.IL_E2E_WEBHOOK_SECRET = SECRET;
  env = await startGovernedEnv({
    config: { notifications: { webhooks: [{ url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/`, events: ['approval.queued', 'approval.decided', 'approval.executed', 'approval.failed'], secret_env: 'IL_E2E_WEBHOOK_SECRET' }] } },
  });
  const token = await createOperatorToken(env.db, 'ops-gina');
  const r = await fetch(new URL('/console/api/session', env.url), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: token.secret }) });
  expect(r.status).toBe(200);
  session = { cookie: (r.headers.get('set-cookie') ?? '').split(';')[0], csrf: ((await r.json()) as { csrfToken: string }).csrfToken };
}, 90_000);
afterAll(async () => {
  await env?.close();
  receiver?.close();
  delete process.env.IL_E2E_WEBHOOK_SECRET;
});

function structured(o: CallOutcome): Record<string, any> {
  if (o.kind !== 'result') throw new Error(`expected a result, got ${o.name}: ${o.message}`);
  return o.result.structuredContent as Record<string, any>;
}
async function webhook(approvalId: string, event: string) {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const h = hooks.find((x) => x.json.approval.id === approvalId && x.json.event === event);
    if (h) return h;
    if (Date.now() > deadline) throw new Error(`no ${event} webhook for ${approvalId}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
async function consoleCall(method: string, path: string, body?: unknown): Promise<any> {
  const r = await fetch(new URL(`/console/api${path}`, env.url), { method, headers: { cookie: session.cookie, 'x-csrf-token': session.csrf, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  expect(r.status).toBe(200);
  return r.json();
}

const clients: Array<[string, () => Promise<ConnectedClient>]> = [
  ['SDK v1 (2025-11-25)', () => connectSdkV1({ url: env.url, apiKey: env.apiKey })],
  ['SDK v2 pinned 2026-07-28', () => connectSdkV2({ url: env.url, apiKey: env.apiKey, mode: { pin: '2026-07-28' } })],
];

test.each(clients)('%s: queue → signed approval.queued → approved in the console → status executed with the row count', async (label, connect) => {
  const client = await connect();
  try {
    const name = `Focus ${label}`;
    const queued = structured(await client.callTool('interlock_query', { source_id: 'chinook', sql: 'INSERT INTO playlist (name) VALUES ($1)', params: [name] }));
    expect(queued).toMatchObject({ status: 'queued', approval_state: 'pending' });
    expect(queued.message).toContain('interlock_approval_status');
    const id = queued.approval_id as string;
    const q = await webhook(id, 'approval.queued');
    expect(verifyWebhook(SECRET, String(q.headers['x-interlock-timestamp']), q.body, String(q.headers['x-interlock-signature']))).toBe(true);
    expect(structured(await client.callTool('interlock_approval_status', { approval_id: id }))).toMatchObject({ approval_id: id, state: 'pending', outcome: null });

    expect(await consoleCall('POST', `/approvals/${id}/approve`, { reason: 'e2e' })).toEqual({ id, approvalId: id, state: 'executed', rowCount: 1 });
    const status = structured(await client.callTool('interlock_approval_status', { approval_id: id }));
    expect(status).toMatchObject({ approval_id: id, source_id: 'chinook', state: 'executed', decided_at: expect.any(String), executed_at: expect.any(String), outcome: { row_count: 1 } });
    expect(await sourceQuery(env, 'SELECT count(*)::int AS n FROM playlist WHERE name = $1', [name])).toEqual([{ n: 1 }]);
    await webhook(id, 'approval.executed');
  } finally {
    await client.close();
  }
});

test.each(clients)('%s: a failing write ends failed: a safe code for the agent, SQLSTATE and cause for the operator', async (_label, connect) => {
  const client = await connect();
  try {
    const queued = structured(await client.callTool('interlock_query', { source_id: 'chinook', sql: 'INSERT INTO playlist_track (playlist_id, track_id) VALUES ($1, $2)', params: [543210, 1] }));
    const id = queued.approval_id as string;
    await webhook(id, 'approval.queued');
    const decision = await consoleCall('POST', `/approvals/${id}/approve`, {});
    expect(decision).toMatchObject({ state: 'failed', errorCode: 'statement_failed', failure: { sqlstate: '23503' } });

    const status = await client.callTool('interlock_approval_status', { approval_id: id });
    // The agent gets the SQLSTATE and its condition name (spec/errors-v1.json statementSqlstates), never the database's text.
    expect(structured(status)).toMatchObject({ state: 'failed', outcome: { error_code: 'statement_failed', sqlstate: '23503', condition: 'foreign_key_violation', message: expect.stringContaining('Nothing was changed') } });
    const agentText = JSON.stringify(status);
    for (const leak of ['foreign key', 'playlist_track_playlist_id_fkey', '543210', 'is not present']) expect(agentText).not.toContain(leak);

    const operatorView = await (await fetch(new URL(`/console/api/approvals/${id}`, env.url), { headers: { cookie: session.cookie } })).json() as any;
    expect(operatorView.approval.failure).toEqual({
      sqlstate: '23503',
      message: 'insert or update on table "playlist_track" violates foreign key constraint "playlist_track_playlist_id_fkey"',
      detail: 'Key (playlist_id)=(543210) is not present in table "playlist".',
    });
    expect((await webhook(id, 'approval.failed')).json.approval.error_code).toBe('statement_failed');
  } finally {
    await client.close();
  }
});
