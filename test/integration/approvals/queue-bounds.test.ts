/**
 * Bounded approval queues, the expiry sweeper and safe webhook text (issue 24 items 2 and 5)
 * against the real governed gateway: pending caps per identity and per source refused
 * approval_queue_full (nothing stored, the refusal audited), concurrent writers cannot overrun a
 * cap, the sweeper expires overdue approvals on schedule with an audit event and an
 * approval.expired webhook, agent-written markup cannot form a mention or link in the chat text,
 * and a burst of one identity's queued writes is coalesced into one delivery per webhook.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { grantRole } from '../../../src/control/grants';
import { DEMO_ROLE } from '../../../src/demo/provision';
import { createApproval, getApproval } from '../../../src/control/approvals';
import { appendAuditRows, approvalRow } from '../../../src/audit/writer';
import { withTransaction } from '../../../src/control/db';
import { chatText, eventForHook } from '../../../src/approvals/webhooks';

const SECRET = 'whsec-bounds-0123456789abcdefghijklmn';
let env: GovernedEnv;
let hook: Server;
const received: any[] = [];
let otherKey: string;
let otherId: string;

const call = (sql: string, key = env.apiKey) => callTool(env, 'interlock_query', { source_id: 'chinook', sql, params: [] }, key);
const pendingOf = async (identityId: string) => (await env.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM approvals WHERE identity_id = $1 AND state = 'pending'", [identityId])).rows[0].n;
async function waitFor<T>(fn: () => T | undefined | Promise<T | undefined>, ms = 15_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 50));
  }
}

beforeAll(async () => {
  hook = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      received.push(JSON.parse(body));
      res.statusCode = 204;
      res.end();
    });
  });
  await new Promise<void>((r) => hook.listen(0, '127.0.0.1', r));
  process.env.IL_TEST_BOUNDS_SECRET = SECRET;
  env = await startGovernedEnv({
    config: {
      approvals: { max_pending_per_identity: 3, max_pending_per_source: 5, sweep_interval_ms: 200, sweep_batch: 2 },
      notifications: { webhooks: [{ url: `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook`, events: ['approval.queued', 'approval.decided', 'approval.expired'], secret_env: 'IL_TEST_BOUNDS_SECRET' }], coalesce_queued_at: 3 },
    } as never,
  });
  const other = await createIdentity(env.db, 'other-agent');
  otherId = other.id;
  await grantRole(env.db, { identityId: other.id, roleName: DEMO_ROLE.name, sourceId: 'chinook' });
  otherKey = (await createApiKey(env.db, other.id)).secret;
}, 90_000);
afterAll(async () => {
  await env?.close();
  hook?.close();
  delete process.env.IL_TEST_BOUNDS_SECRET;
});

test('pure parts: chat text cannot form a mention, link or code-block escape; expiry event per subscription', () => {
  expect(chatText('<!channel> see <https://evil.example|the docs> @here `x` a&b')).toBe('&lt;!channel&gt; see &lt;https://evil.example|the docs&gt; ＠here ˋxˋ a&amp;b');
  expect(chatText('x\u202eyz\u2066')).toBe('x⟨U+202E⟩yz⟨U+2066⟩');
  expect(eventForHook('expired', ['approval.decided', 'approval.expired'])).toBe('approval.expired');
  expect(eventForHook('expired', ['approval.decided'])).toBe('approval.decided');
  expect(eventForHook('approved', ['approval.expired'])).toBeNull();
});

test('per-identity cap: the 4th pending write is refused approval_queue_full, not stored, and audited', async () => {
  // Concurrent writers: the advisory locks make the cap exact across connections.
  const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => call(`INSERT INTO playlist (name) VALUES ('cap ${i}')`)));
  const queued = answers.filter((a) => a.body.result.structuredContent.status === 'queued');
  const refused = answers.filter((a) => a.body.result.structuredContent.code === 'approval_queue_full');
  expect([queued.length, refused.length]).toEqual([3, 3]);
  expect(refused[0].status).toBe(200);
  expect(refused[0].body.result.isError).toBe(true);
  expect(refused[0].body.result.structuredContent).toEqual({
    status: 'forbidden',
    code: 'approval_queue_full',
    message: "The statement was not executed and not queued: too many writes of this identity, or on this source, already wait for an operator's approval. Do not retry it; wait until an operator has decided the pending ones (interlock_approval_status).",
    scope: 'identity',
    limit: 3,
    request_id: expect.stringMatching(/^req_/),
  });
  expect(await pendingOf(env.demo.identityId)).toBe(3);
  const audited = await env.db.pool.query("SELECT decision, reason_code FROM audit_events WHERE kind = 'tool_call' AND request_id = $1", [refused[0].body.result.structuredContent.request_id]);
  expect(audited.rows).toEqual([{ decision: 'refused', reason_code: 'approval_queue_full' }]);
});

test('per-source cap: another identity fills the source to 5, then is refused with scope source', async () => {
  const a = await call("INSERT INTO playlist (name) VALUES ('o1')", otherKey);
  const b = await call("INSERT INTO playlist (name) VALUES ('o2')", otherKey);
  const c = await call("INSERT INTO playlist (name) VALUES ('o3')", otherKey);
  expect([a, b].map((x) => x.body.result.structuredContent.status)).toEqual(['queued', 'queued']);
  expect(c.body.result.structuredContent).toMatchObject({ status: 'forbidden', code: 'approval_queue_full', scope: 'source', limit: 5 });
  expect(await pendingOf(otherId)).toBe(2);
});

test('the sweeper expires overdue approvals on schedule, audited, with approval.expired; the freed room takes new writes', async () => {
  // Move the clock: make every pending approval overdue. The guard trigger keeps the stored request
  // (deadline included) immutable, so the test bypasses triggers for this one statement.
  await withTransaction(env.db, async (c) => {
    await c.query('SET LOCAL session_replication_role = replica');
    await c.query("UPDATE approvals SET expires_at = now() - interval '1 second' WHERE state = 'pending'");
  });
  const ids = (await env.db.pool.query<{ id: string }>("SELECT id FROM approvals WHERE state = 'expired' OR state = 'pending' ORDER BY id")).rows.map((r) => r.id);
  expect(ids).toHaveLength(5);
  // sweep_batch 2 at a 200 ms tick: all five expire within a few ticks, no caller needed.
  await waitFor(async () => ((await env.db.pool.query("SELECT 1 FROM approvals WHERE state = 'pending'")).rowCount === 0 ? true : undefined));
  for (const id of ids) expect(await getApproval(env.db, id)).toMatchObject({ state: 'expired', decidedBy: 'system:expiry' });
  const ev = await env.db.pool.query("SELECT approval_id, operator FROM audit_events WHERE kind = 'approval' AND decision = 'expired' ORDER BY approval_id");
  expect(ev.rows).toEqual(ids.map((id) => ({ approval_id: id, operator: 'system:expiry' })));
  const expired = await waitFor(() => (received.filter((r) => r.event === 'approval.expired').length === 5 ? received.filter((r) => r.event === 'approval.expired') : undefined));
  expect(expired.map((r) => r.approval.id).sort()).toEqual(ids);
  expect(expired[0].text).toMatch(/^Approval apr_\S+ \((demo|other)-agent on chinook\) expired undecided\.$/);
  expect(received.filter((r) => r.event === 'approval.decided')).toEqual([]); // subscribed to approval.expired: sent instead
  expect((await call("INSERT INTO playlist (name) VALUES ('after')")).body.result.structuredContent.status).toBe('queued');
});

test('agent-written markup in a queued statement is inert in the chat text; the JSON keeps the statement', async () => {
  const r = await call("INSERT INTO playlist (name) VALUES ('<!channel> <https://evil.example|click> @everyone \u202egnp.exe')");
  const id = r.body.result.structuredContent.approval_id;
  const q = await waitFor(() => received.find((x) => x.event === 'approval.queued' && x.approval.id === id));
  expect(q.text).toBe(`A write by demo-agent on chinook is waiting for approval (${id}): \`\`\`INSERT INTO playlist (name) VALUES ('&lt;!channel&gt; &lt;https://evil.example|click&gt; ＠everyone ⟨U+202E⟩gnp.exe')\`\`\``);
  expect(q.approval.statement).toBe("INSERT INTO playlist (name) VALUES ('<!channel> <https://evil.example|click> @everyone ⟨U+202E⟩gnp.exe')");
});

test("a burst of one identity's queued writes is one delivery listing them (the rest recorded coalesced)", async () => {
  // Four approvals and their queued events committed at once, so the dispatcher reads them in one poll.
  const ids = await withTransaction(env.db, async (c) => {
    const out: string[] = [];
    for (let i = 0; i < 4; i++) {
      const a = await createApproval(c, { sourceId: 'chinook', identityId: otherId, keyId: null, requestId: `req_burst_${i}`, sql: `DELETE FROM playlist WHERE name = 'b${i}'`, params: [], classification: {} });
      out.push(a.id);
    }
    await appendAuditRows(c, out.map((id, i) => approvalRow({ approvalId: id, action: 'queued', identityId: otherId, sourceId: 'chinook', requestId: `req_burst_${i}` })));
    return out;
  });
  const d = await waitFor(() => received.find((x) => x.coalesced && x.approval.id === ids[0]));
  expect(d.coalesced).toEqual({ count: 4, approval_ids: ids });
  expect(d.text).toBe(`4 writes by other-agent are waiting for approval: ${ids.join(', ')}. Open the console to review them.`);
  await new Promise((r) => setTimeout(r, 700)); // one more poll: nothing else is sent for them
  expect(received.filter((x) => x.event === 'approval.queued' && ids.includes(x.approval.id))).toHaveLength(1);
  const rows = (await env.db.pool.query("SELECT approval_id, status FROM webhook_deliveries WHERE approval_id = ANY($1) ORDER BY event_id", [ids])).rows;
  expect(rows.map((r) => r.status)).toEqual([expect.stringMatching(/^(sending|delivered)$/), 'coalesced', 'coalesced', 'coalesced']);
});
