/**
 * The webhook dispatcher follows the approval audit trail in id order (issue 14, item 2): a poll that
 * reads its page limit of events whose ids cross a power of ten (…99, 100…) must not move its cursor
 * past the lower ids. Ordering by the text form of the id did: ids 96–99 sort after 100–299, so the
 * cursor jumped to 299 and their events were never delivered.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { freshControlDb, type TestControlDb } from '../control/control-db';
import { createIdentity } from '../../../src/control/identities';
import { addSource } from '../../../src/control/sources';
import { createApproval } from '../../../src/control/approvals';
import { appendAuditRows, approvalRow } from '../../../src/audit/writer';
import { startWebhookDispatcher, type WebhookDispatcher } from '../../../src/approvals/webhooks';
import { BASE_AUDIT_ROW } from '../../helpers/audit-events';

let t: TestControlDb;
let server: Server;
let dispatcher: WebhookDispatcher | null = null;
const delivered = new Set<string>();

beforeAll(async () => {
  t = await freshControlDb('apr_hookcursor');
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      // One identity's burst is coalesced (issue 24 item 2): a delivery covers every id it lists.
      const j = JSON.parse(body) as { approval: { id: string }; coalesced?: { approval_ids: string[] } };
      for (const id of j.coalesced?.approval_ids ?? [j.approval.id]) delivered.add(id);
      res.statusCode = 204;
      res.end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
});
afterAll(async () => {
  await dispatcher?.close();
  server.close();
  await t.cleanup();
});

test('210 approval events with ids 96–305, read in one poll of 200: every one is delivered', async () => {
  const identityId = (await createIdentity(t.db, 'hook-agent')).id;
  await addSource(t.db, { id: 'shop', type: 'postgres', name: 'Shop', settings: { host: 'db.internal', port: 5432, database: 'shop', reader: { user: 'r', password: 'p' }, tls: { mode: 'off' } } });
  const filler = await t.db.pool.query<{ n: string }>('SELECT coalesce(max(id), 0)::text AS n FROM audit_events');
  const fill = 95 - Number(filler.rows[0].n);
  expect(fill).toBeGreaterThan(0);
  await appendAuditRows(t.db, Array.from({ length: fill }, (_, i) => ({ ...BASE_AUDIT_ROW, request_id: `fill_${i}` })));
  const approvals = [];
  for (let i = 0; i < 210; i++) approvals.push(await createApproval(t.db, { sourceId: 'shop', identityId, keyId: null, requestId: `req_h${i}`, sql: 'DELETE FROM t WHERE id = $1', params: [i], classification: {} }));
  dispatcher = await startWebhookDispatcher({
    db: t.db,
    webhooks: [{ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, events: ['approval.queued'], secret_env: 'HOOK_SECRET' }],
    env: { HOOK_SECRET: 'whsec-cursor-0123456789abcdefghijklmn' },
    pollMs: 300,
  });
  // One batch, so the next poll sees all 210 at once (ids 96–305).
  await appendAuditRows(t.db, approvals.map((a) => approvalRow({ approvalId: a.id, action: 'queued', identityId, sourceId: 'shop', requestId: a.requestId })));
  const ids = (await t.db.pool.query<{ lo: string; hi: string }>("SELECT min(id)::text AS lo, max(id)::text AS hi FROM audit_events WHERE kind = 'approval'")).rows[0];
  expect(ids).toEqual({ lo: '96', hi: '305' });
  const end = Date.now() + 20_000;
  while (delivered.size < 210 && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
  await new Promise((r) => setTimeout(r, 700)); // two more polls: nothing else arrives
  expect(delivered.size).toBe(210);
  expect([...delivered].sort()).toEqual(approvals.map((a) => a.id).sort());
}, 60_000);
