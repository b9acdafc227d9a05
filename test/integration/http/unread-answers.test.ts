/**
 * Red-team F1: answers a client never reads must not pile up in the gateway's memory. A tool call
 * holds its identity's stream slot until its answer has been flushed or its connection closed, and
 * an answer still unread after client_limits.answer_write_timeout_ms has its socket destroyed.
 * Here streams_per_identity is 2 and the deadline 1.5 s: two paused sockets each receive a large
 * answer (several MB, more than loopback's socket buffers), so the identity's third call is refused
 * rate_limited while they are unread; once the deadline destroys them, the same call is answered,
 * and both unread calls are in the audit trail as allowed. Every wait is bounded.
 */
import net from 'node:net';
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';

jest.setTimeout(60_000);

let env: GovernedEnv;
const BIG = 'select repeat(t.name, 400) as a from track t';

beforeAll(async () => {
  env = await startGovernedEnv({
    config: {
      client_limits: { keyless: { points: 600, window_seconds: 60 }, streams_per_address: 128, streams_per_identity: 2, answer_write_timeout_ms: 1500 },
      rate_limits: { per_identity: { points: 1000, window_seconds: 60 }, per_source: { points: 1000, window_seconds: 60 } },
    },
  });
}, 60_000);
afterAll(async () => {
  await env?.close();
});

/** Opens a socket, sends a tools/call for the big answer and pauses it without reading. Resolves on the first bytes of the answer. */
function pausedCall(id: number): Promise<{ socket: net.Socket }> {
  const u = new URL(env.url);
  const body = JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: BIG, max_rows: 5000 } } });
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(u.port), u.hostname);
    socket.once('error', () => undefined);
    socket.once('connect', () => {
      socket.write(
        `POST ${u.pathname} HTTP/1.1\r\nHost: ${u.host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\nAuthorization: Bearer ${env.apiKey}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
    });
    socket.once('data', () => {
      socket.pause();
      resolve({ socket });
    });
    setTimeout(() => reject(new Error(`no answer on paused call ${id} within 20 s`)), 20_000).unref();
  });
}

test("unread answers hold the identity's stream slots until the write deadline destroys their sockets", async () => {
  const a = await pausedCall(1);
  const b = await pausedCall(2);
  try {
    // Both answers are computed and audited, but wait unread: the identity's two slots are held.
    const refused = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'select 1 as one' }, env.apiKey);
    expect(refused.status).toBe(200);
    expect(refused.body.result.isError).toBe(true);
    expect(refused.body.result.structuredContent).toMatchObject({ status: 'rate_limited', code: 'rate_limited' });
    // The deadline (1.5 s) destroys both sockets; the slots are released with them.
    let answered = refused;
    const deadline = Date.now() + 10_000;
    while (answered.body.result.isError && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      answered = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'select 1 as one' }, env.apiKey);
    }
    expect(answered.status).toBe(200);
    expect(answered.body.result.isError).toBeUndefined();
    expect(answered.body.result.structuredContent).toMatchObject({ rows: [{ one: 1 }] });
    // Read what the paused clients were sent for 1 s: each answer was cut short (its SSE event never ends).
    const tails = await Promise.all(
      [a, b].map(
        (c) =>
          new Promise<string>((resolve) => {
            let tail = '';
            c.socket.on('data', (d: Buffer) => (tail = (tail + d.toString('latin1')).slice(-16)));
            c.socket.resume();
            setTimeout(() => resolve(tail), 1000);
          }),
      ),
    );
    for (const t of tails) expect(t.endsWith('}\n\n')).toBe(false);
    // The destroyed answers' calls were audited before their answers were written.
    const rows = await env.db.pool.query("SELECT decision, count(*)::int AS n FROM audit_events WHERE tool = 'interlock_query' AND decision = 'allowed' GROUP BY decision");
    // The two unread answers and the one answered after the deadline.
    expect(rows.rows).toEqual([{ decision: 'allowed', n: 3 }]);
  } finally {
    a.socket.destroy();
    b.socket.destroy();
  }
});
