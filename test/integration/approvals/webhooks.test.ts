/**
 * Approval webhooks (issue 14, item 2) against a local receiver on loopback: signed POSTs for
 * approval.queued / decided / executed / failed with a readable `text`, retries with backoff after a
 * failed delivery, every attempt recorded in webhook_deliveries, unsubscribed events not sent.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { approveAndExecute, rejectApproval } from '../../../src/approvals/execute';
import { eventFor, stateAtEvent, verifyWebhook, webhookText } from '../../../src/approvals/webhooks';

const SECRET = 'whsec-test-0123456789abcdefghijklmnop';
interface Received {
  headers: Record<string, string | string[] | undefined>;
  body: string;
  json: any;
}
let env: GovernedEnv;
let server: Server;
let other: Server;
const received: Received[] = [];
const otherReceived: Received[] = [];
let failNextExecuted = true;

function receiver(into: Received[], answer: (r: Received) => number): Promise<Server> {
  const s = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const r = { headers: req.headers, body, json: JSON.parse(body) };
      into.push(r);
      res.statusCode = answer(r);
      res.end();
    });
  });
  return new Promise((resolve) => s.listen(0, '127.0.0.1', () => resolve(s)));
}
const url = (s: Server) => `http://127.0.0.1:${(s.address() as AddressInfo).port}/hook`;

beforeAll(async () => {
  server = await receiver(received, (r) => {
    if (r.json.event === 'approval.executed' && failNextExecuted) {
      failNextExecuted = false;
      return 500;
    }
    return 204;
  });
  other = await receiver(otherReceived, () => 200);
  process.env.IL_TEST_WEBHOOK_SECRET = SECRET;
  env = await startGovernedEnv({
    config: {
      notifications: {
        webhooks: [
          { url: url(server), events: ['approval.queued', 'approval.decided', 'approval.executed', 'approval.failed'], secret_env: 'IL_TEST_WEBHOOK_SECRET' },
          { url: url(other), events: ['approval.failed'], secret_env: 'IL_TEST_WEBHOOK_SECRET' },
        ],
      },
    },
  });
}, 90_000);
afterAll(async () => {
  await env?.close();
  server?.close();
  other?.close();
  delete process.env.IL_TEST_WEBHOOK_SECRET;
});

async function waitFor<T>(fn: () => T | undefined, ms = 15_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error('timed out waiting for a webhook');
    await new Promise((r) => setTimeout(r, 50));
  }
}
const find = (list: Received[], id: string, event: string) => () => list.find((r) => r.json.approval.id === id && r.json.event === event);
const queue = async (sql: string, params: unknown[]) => (await callTool(env, 'interlock_query', { source_id: 'chinook', sql, params }, env.apiKey)).body.result.structuredContent.approval_id as string;

test('pure parts: event mapping and text', () => {
  expect(['queued', 'approved', 'rejected', 'expired', 'executed', 'failed', 'refused'].map(eventFor)).toEqual(['approval.queued', 'approval.decided', 'approval.decided', 'approval.decided', 'approval.executed', 'approval.failed', null]);
  expect(['queued', 'approved', 'rejected', 'expired', 'executed', 'failed'].map(stateAtEvent)).toEqual(['pending', 'approved', 'rejected', 'expired', 'executed', 'failed']);
  const a = { id: 'apr_1', state: 'rejected', source_id: 'chinook', identity: 'demo-agent', operator: 'ops', row_count: null, error_code: null, reason: 'no', statement: 'DELETE FROM t' };
  expect(webhookText('approval.decided', 'rejected', a)).toBe('Approval apr_1 (demo-agent on chinook) was rejected by ops: no.');
});

test('queued → signed approval.queued; approve → decided and executed (retried after a 500, attempts recorded)', async () => {
  const id = await queue('INSERT INTO playlist (name) VALUES ($1)', ['Hooked']);
  const q = await waitFor(find(received, id, 'approval.queued'));
  expect(q.headers['content-type']).toBe('application/json');
  expect(q.headers['x-interlock-event']).toBe('approval.queued');
  expect(verifyWebhook(SECRET, String(q.headers['x-interlock-timestamp']), q.body, String(q.headers['x-interlock-signature']))).toBe(true);
  expect(verifyWebhook('wrong', String(q.headers['x-interlock-timestamp']), q.body, String(q.headers['x-interlock-signature']))).toBe(false);
  expect(Math.abs(Number(q.headers['x-interlock-timestamp']) - Date.now() / 1000)).toBeLessThan(60);
  expect(q.json).toEqual({
    id: expect.stringMatching(/^[0-9]+$/), event: 'approval.queued', time: expect.any(String),
    approval: { id, state: 'pending', source_id: 'chinook', identity: 'demo-agent', operator: null, row_count: null, error_code: null, reason: null, statement: 'INSERT INTO playlist (name) VALUES ($1)' },
    text: `A write by demo-agent on chinook is waiting for approval (${id}): \`\`\`INSERT INTO playlist (name) VALUES ($1)\`\`\``,
  });
  await approveAndExecute(env.db, id, { operator: 'ops-frank', reason: 'fine' });
  const decided = await waitFor(find(received, id, 'approval.decided'));
  expect(decided.json.text).toBe(`Approval ${id} (demo-agent on chinook) was approved by ops-frank: fine.`);
  // Task hnu4b (f): the decision's own state, whichever surface approved it (the write has executed by the time the poll reads it).
  expect(decided.json.approval).toMatchObject({ state: 'approved', row_count: null, operator: 'ops-frank', reason: 'fine' });
  const executed = await waitFor(() => received.filter((r) => r.json.approval.id === id && r.json.event === 'approval.executed').at(1));
  expect(executed.json.approval).toMatchObject({ row_count: 1, operator: 'ops-frank' });
  expect(executed.headers['x-interlock-delivery']).toBe(received.filter((r) => r.json.approval.id === id && r.json.event === 'approval.executed')[0].headers['x-interlock-delivery']);
  const recorded = async () => (await env.db.pool.query("SELECT event, status, attempts, last_status, last_error FROM webhook_deliveries WHERE approval_id = $1 AND webhook = $2 ORDER BY event_id", [id, url(server)])).rows;
  // The row is updated just after the receiver answers: wait (bounded) for the last attempt to be recorded.
  for (let i = 0; i < 100 && (await recorded()).some((r) => r.status === 'sending'); i++) await new Promise((r) => setTimeout(r, 50));
  expect(await recorded()).toEqual([
    { event: 'approval.queued', status: 'delivered', attempts: 1, last_status: 204, last_error: null },
    { event: 'approval.decided', status: 'delivered', attempts: 1, last_status: 204, last_error: null },
    { event: 'approval.executed', status: 'delivered', attempts: 2, last_status: 204, last_error: null },
  ]);
  expect(otherReceived.filter((r) => r.json.approval.id === id)).toEqual([]); // subscribed to failed only
});

test('a failed write → approval.failed with the code (no database text) to both subscribers; a rejection → decided with the reason', async () => {
  const id = await queue('INSERT INTO playlist_track (playlist_id, track_id) VALUES ($1, $2)', [654321, 1]);
  await approveAndExecute(env.db, id, { operator: 'ops-frank' });
  const f = await waitFor(find(received, id, 'approval.failed'));
  expect(f.json.approval).toMatchObject({ state: 'failed', error_code: 'statement_failed' });
  expect(f.body).not.toContain('foreign key');
  expect(f.json.text).toBe(`Approval ${id} (demo-agent on chinook) failed: statement_failed. See the console or interlock approval show ${id} for the cause.`);
  await waitFor(find(otherReceived, id, 'approval.failed'));
  const r = await queue('DELETE FROM playlist_track WHERE playlist_id = $1', [2]);
  await rejectApproval(env.db, r, { operator: 'ops-frank', reason: 'not now' });
  const rejected = (await waitFor(find(received, r, 'approval.decided'))).json;
  expect(rejected.text).toBe(`Approval ${r} (demo-agent on chinook) was rejected by ops-frank: not now.`);
  expect(rejected.approval).toMatchObject({ state: 'rejected', row_count: null });
});
