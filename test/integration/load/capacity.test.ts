/**
 * Admission by capacity (issue 29 item 1) on the governed gateway: with the limit pinned at 2 and a
 * queue of 2, a burst of slow reads gets 4 answers and the rest are refused at once (long before
 * the first read ends) with rate_limited, retry_after_ms and Retry-After, without reaching identity,
 * SQL or the per-call audit; the refusals are audited in aggregate. The same with either controller
 * (`long_average`, `min_rtt`): the guarantees do not depend on how the limit moves.
 */
import pg from 'pg';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { getSource, putSource } from '../../../src/control/sources';

let env: GovernedEnv;
const SLOW = 'SELECT count(*) AS n FROM track a, track b';

/** One tools/call in the modern dialect; resolves with status, Retry-After, the JSON-RPC body and when it was answered. */
async function call(sql: string): Promise<{ status: number; retryAfter: string | null; body: any; at: number }> {
  const r = await fetch(env.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${env.apiKey}`, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'interlock_query' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql }, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } } }),
  });
  const text = await r.text();
  const json = (r.headers.get('content-type') ?? '').startsWith('text/event-stream') ? text.split('\n').filter((l) => l.startsWith('data: ')).at(-1)!.slice(6) : text;
  return { status: r.status, retryAfter: r.headers.get('retry-after'), body: JSON.parse(json), at: Date.now() };
}

describe.each(['long_average', 'min_rtt'] as const)('controller %s', (controller) => {
  beforeAll(async () => {
    env = await startGovernedEnv({
      config: {
        admission: { controller, enabled: true, initial_limit: 2, min_limit: 2, max_limit: 2, queue_size: 2, queue_timeout_ms: 20_000, tolerance: 2, max_event_loop_delay_ms: 60_000, max_audit_queue: 1000 },
        rate_limits: { per_identity: { points: 10_000, window_seconds: 60 }, per_source: { points: 10_000, window_seconds: 60 } },
      },
    });
    // The burst's admitted reads wait behind a lock on track (below) for as long as the burst takes to
    // arrive: lock_timeout past statement_timeout (15 s), so only the latter bounds the wait.
    const src = (await getSource(env.db, 'chinook'))!;
    await putSource(env.db, { id: src.id, type: src.type, name: src.name, description: src.description, enabled: true, settings: { ...src.settings, lock_timeout_ms: 30_000 } });
    env.gateway.store.invalidate('sources');
  }, 60_000);
  afterAll(async () => {
    await env?.close();
  });

  test('beyond the limit and the queue, calls are refused at once with rate_limited and Retry-After; the admitted ones are served', async () => {
    // Warm the analysis and the pool, so the burst measures admission only.
    expect((await call('SELECT 1 AS one')).body.result.structuredContent.rows).toEqual([{ one: 1 }]);
    // The controller in force (min_rtt: its first minRTT window, 1 of 25 calls, is still open).
    expect(env.gateway.capacity!.settings.controller).toBe(controller);
    expect(env.gateway.capacity!.snapshot()).toMatchObject({ measuring: controller === 'min_rtt', limit: 2 });
    // Task flake47: the 12 calls of the burst reach the gateway over some time, which a loaded machine
    // stretched past the first admitted read (a fifth call then found a free place in the queue and
    // was served: 5 served, 7 refused). The admitted reads now wait on a lock the test holds on track
    // until every call of the burst has been admitted, queued or refused, and the client has every
    // answer given so far: what is asserted below is the admission's, whatever the machine's speed.
    const cap = env.gateway.capacity!;
    const refusedBefore = cap.refused;
    const holder = new pg.Client({ connectionString: env.sourceUrl });
    await holder.connect();
    await holder.query('BEGIN; LOCK TABLE track IN ACCESS EXCLUSIVE MODE');
    let received = 0;
    const sent = Date.now();
    const pending = Array.from({ length: 12 }, () => call(SLOW).then((a) => (received++, a)));
    try {
      while (cap.inflight + cap.queued + (cap.refused - refusedBefore) < 12 || received < cap.refused - refusedBefore) {
        await new Promise((r) => setTimeout(r, 10));
      }
    } finally {
      await holder.query('COMMIT');
      await holder.end();
    }
    const answers = await Promise.all(pending);
    const served = answers.filter((a) => a.status === 200 && a.body.result);
    const refused = answers.filter((a) => a.status === 429);
    expect(served).toHaveLength(4);
    expect(refused).toHaveLength(8);
    const firstServed = Math.min(...served.map((a) => a.at));
    for (const r of refused) {
      expect(r.body.error.data).toMatchObject({ status: 'rate_limited', code: 'rate_limited' });
      expect(r.body.error.data.retry_after_ms).toBeGreaterThanOrEqual(1000);
      expect(r.retryAfter).toBe(String(Math.ceil(r.body.error.data.retry_after_ms / 1000)));
      // Refused before the first admitted read finished: at once, not after waiting.
      expect(r.at).toBeLessThan(firstServed);
    }
    expect(Math.max(...refused.map((r) => r.at)) - sent).toBeLessThan(firstServed - sent);
    // Nothing ran for the refused calls: the audit holds the 5 served reads (warm-up included) one by one, and the refusals only in aggregate.
    await env.gateway.gateway.flushAudit();
    const rows = (await env.db.pool.query<{ request_id: string; decision: string; reason_code: string | null; details: any }>("SELECT request_id, decision, reason_code, details FROM audit_events WHERE kind = 'tool_call' ORDER BY id")).rows;
    expect(rows.filter((r) => r.decision === 'allowed')).toHaveLength(5);
    const agg = rows.filter((r) => r.details?.aggregated === true);
    expect(agg.reduce((n, r) => n + Number(r.details.count), 0)).toBe(8);
    expect(agg.every((r) => r.reason_code === 'rate_limited')).toBe(true);
  }, 60_000);
});
