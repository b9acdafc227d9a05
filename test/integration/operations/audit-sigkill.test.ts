/**
 * Issue 11, Done when: a gateway process (`interlock serve`, a child process) is killed with SIGKILL
 * while 32 clients make reads, refusals and queued writes, five times. Every call a client saw
 * answered has exactly one audit event (matched by the X-Request-Id of its answer): none missing,
 * none duplicated. Calls cut off by the kill may or may not have an event; never two. The gateway
 * runs with an audit key (task f1): its batches are keyed (format 5), and verify authenticates them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { freePort } from '../sources/cluster';
import { verifyAuditChain } from '../../../src/audit/verify';
import { auditKeyring } from '../../../src/audit/key';

/** The gateway's audit key in this test (INTERLOCK_AUDIT_KEY). */
const AUDIT_KEY = 'the sigkill test audit key: 32+ bytes';

const BIN = join(__dirname, '..', '..', '..', 'bin', 'interlock.js');
const CLIENTS = 32;
const ROUNDS = 5;
/** How long the clients call before the kill, per round. */
const LOAD_MS = 2500;

let env: GovernedEnv;
let child: ChildProcess | undefined;

beforeAll(async () => {
  env = await startGovernedEnv();
}, 60_000);
afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await env?.close();
});

/** The three kinds of call, in turn: a read, a refusal at classification time, a queued write. */
function callFor(i: number): { kind: string; sql: string } {
  switch (i % 3) {
    case 0:
      return { kind: 'read', sql: `SELECT album_id, title FROM album WHERE album_id = ${1 + (i % 300)}` };
    case 1:
      return { kind: 'refusal', sql: 'SELECT pg_sleep(1)' };
    default:
      return { kind: 'write', sql: `INSERT INTO playlist (playlist_id, name) VALUES (${20_000 + i}, 'sigkill')` };
  }
}

interface Answered {
  requestId: string;
  kind: string;
  status: string;
}

/** One tools/call; resolves with the answer, or null when the connection died before the whole answer arrived. */
async function call(port: number, sql: string): Promise<{ requestId: string; body: any } | null> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', authorization: `Bearer ${env.apiKey}` },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql } } }),
    });
    const text = await res.text();
    const data = text.split('\n').filter((l) => l.startsWith('data: '));
    return { requestId: String(res.headers.get('x-request-id')), body: JSON.parse(data.length ? data.at(-1)!.slice(6) : text) };
  } catch {
    return null; // refused, reset or cut mid-answer: not seen as answered
  }
}

async function startServe(port: number): Promise<ChildProcess> {
  let stdout = '';
  const c = spawn(process.execPath, [BIN, '--database-url', env.db.url, 'serve', '--port', String(port)], {
    env: { ...process.env, INTERLOCK_LOG_LEVEL: 'warn', INTERLOCK_AUDIT_KEY: AUDIT_KEY, INTERLOCK_RATE_LIMIT_IDENTITY_POINTS: '1000000', INTERLOCK_RATE_LIMIT_SOURCE_POINTS: '1000000', INTERLOCK_CACHE_TTL_MS: '0', INTERLOCK_APPROVAL_MAX_PENDING_PER_IDENTITY: '100000', INTERLOCK_APPROVAL_MAX_PENDING_PER_SOURCE: '100000' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  c.stdout!.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  c.stderr!.resume();
  const until = Date.now() + 60_000;
  while (!stdout.includes(`listening on http://127.0.0.1:${port}/mcp`)) {
    if (c.exitCode !== null || Date.now() > until) throw new Error(`interlock serve did not start: ${stdout.slice(-500)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return c;
}

test(`SIGKILL under ${CLIENTS} clients, ${ROUNDS} times: every answered call has exactly one audit event`, async () => {
  const answered: Answered[] = [];
  // A refusal at capacity (issue 29: admission by capacity, on by default) is answered before any
  // per-call work and audited only in aggregate, by design; on a busy machine some calls get one.
  // It is not a governed call, so it is kept apart from the exactly-once check.
  let atCapacity = 0;
  const record = (a: { requestId: string; body: any }, kind: string) => {
    const sc = a.body.result?.structuredContent;
    if (sc?.code === 'rate_limited' && typeof sc.message === 'string' && sc.message.startsWith('The gateway is at capacity')) atCapacity++;
    else answered.push({ requestId: a.requestId, kind, status: sc?.status ?? (a.body.result?.isError ? 'error' : 'ok') });
  };
  let cut = 0;
  let seq = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const port = await freePort();
    child = await startServe(port);
    const exited = new Promise<void>((r) => child!.once('exit', () => r()));
    let killed = false;
    // Warm the process (connections, catalog, JIT) with one call of each kind; they count too.
    for (let k = 0; k < 3; k++) {
      const c = callFor(k);
      const w = await call(port, c.sql);
      if (w) record(w, c.kind);
    }
    const client = async () => {
      while (!killed) {
        const c = callFor(seq++);
        const r = await call(port, c.sql);
        if (r === null) {
          cut++;
          continue;
        }
        record(r, c.kind);
      }
    };
    const clients = Array.from({ length: CLIENTS }, () => client());
    await new Promise((r) => setTimeout(r, LOAD_MS));
    killed = true; // each client stops after its call in flight
    child.kill('SIGKILL');
    await exited;
    await Promise.all(clients);
  }
  // Capacity refusals are the exception, not the rule: most calls were governed.
  expect(answered.length).toBeGreaterThan(atCapacity);
  // Every kind was answered, with its expected status (the store never failed: no audit_unavailable).
  const kinds = new Map<string, Set<string>>();
  for (const a of answered) kinds.set(a.kind, (kinds.get(a.kind) ?? new Set()).add(a.status));
  expect([...kinds.keys()].sort()).toEqual(['read', 'refusal', 'write']);
  expect([...kinds.get('read')!]).toEqual(['ok']);
  expect([...kinds.get('refusal')!]).toEqual(['forbidden']);
  expect([...kinds.get('write')!]).toEqual(['queued']);

  const ids = answered.map((a) => a.requestId);
  expect(new Set(ids).size).toBe(ids.length);
  const r = await env.db.pool.query<{ request_id: string; n: number }>("SELECT request_id, count(*)::int AS n FROM audit_events WHERE kind = 'tool_call' AND request_id = ANY($1) GROUP BY request_id", [ids]);
  const counts = new Map(r.rows.map((x) => [x.request_id, x.n]));
  const missing = ids.filter((id) => !counts.has(id));
  const duplicated = [...counts].filter(([, n]) => n !== 1);
  expect({ missing, duplicated }).toEqual({ missing: [], duplicated: [] });
  // No request id has two tool-call events at all (also among the calls cut off by the kills).
  const dup = await env.db.pool.query("SELECT request_id FROM audit_events WHERE kind = 'tool_call' GROUP BY request_id HAVING count(*) > 1");
  expect(dup.rows).toEqual([]);
  // A queued write's approval row, its approval event and its tool-call event commit together:
  // every approval has exactly one of each, and no queued event lacks its approval.
  const orphans = await env.db.pool.query(
    `SELECT a.id, (SELECT count(*) FROM audit_events e WHERE e.kind = 'approval' AND e.approval_id = a.id AND e.decision = 'queued')::int AS approval_events,
            (SELECT count(*) FROM audit_events e WHERE e.kind = 'tool_call' AND e.approval_id = a.id AND e.decision = 'queued')::int AS call_events
     FROM approvals a`,
  );
  expect(orphans.rows.length).toBeGreaterThan(0);
  expect(orphans.rows.filter((r) => r.approval_events !== 1 || r.call_events !== 1)).toEqual([]);
  const stray = await env.db.pool.query("SELECT id FROM audit_events e WHERE e.decision = 'queued' AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.id = e.approval_id)");
  expect(stray.rows).toEqual([]);
  // Issue 28: the kills leave open chains (one per writer lane and start), never a gap: the honest
  // trail verifies, with at least one chain per round left open by its kill.
  const v = await verifyAuditChain(env.db, { keys: auditKeyring({ key: AUDIT_KEY }).byId });
  expect({ ok: v.ok, firstMismatch: v.firstMismatch }).toEqual({ ok: true, firstMismatch: null });
  // Every writer lane's batch keyed and authenticated (format 5).
  expect(v.keyed.batches).toBeGreaterThanOrEqual(ROUNDS);
  expect(v.keyed).toMatchObject({ authenticated: v.keyed.batches, unauthenticated: 0, fault: null });
  expect((await env.db.pool.query('SELECT count(*)::int AS n FROM audit_batches WHERE format = 3')).rows[0].n).toBe(0);
  expect(v.openChains).toBeGreaterThanOrEqual(ROUNDS);
  console.log(`sigkill: ${answered.length} calls answered over ${ROUNDS} kills (${cut} cut off), each with exactly one event`);
}, 180_000);
