/**
 * Issue 5, item 6: graceful shutdown of `interlock serve` (the real CLI, as a separate process).
 * Two tools/call are in flight when SIGTERM arrives: a statement of about two seconds and one that
 * would run far longer than the shutdown deadline (10 s, RunningGateway.close's default). Expected:
 * the listening socket closes at once (new connections are refused), the short call finishes and
 * its answer reaches the agent, the long one is cancelled at the deadline (and is gone from
 * pg_stat_activity), both calls have their audit rows (allowed, cancelled) written before the
 * process ends, and the process exits 0.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import { join } from 'node:path';
import pg from 'pg';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { freePort } from '../sources/cluster';

const BIN = join(__dirname, '..', '..', '..', 'bin', 'interlock.js');
/** RunningGateway.close's default deadline, which `interlock serve` uses. */
const DEADLINE_MS = 10_000;
/** About 2 s here (37 M joined rows); finishes well inside the deadline even on a slow machine. */
const SHORT_SQL = 'SELECT count(*) AS n FROM track a, track b, genre c WHERE c.genre_id <= 3';
/** 43 G joined rows: runs until cancelled (its statement timeout, 15 s, is past the deadline). */
const LONG_SQL = 'SELECT count(*) AS n FROM track a, track b, track c';

let env: GovernedEnv;
let admin: pg.Client;
let child: ChildProcess | undefined;

beforeAll(async () => {
  env = await startGovernedEnv();
  admin = new pg.Client({ connectionString: env.sourceUrl });
  await admin.connect();
}, 60_000);
afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await admin?.end();
  await env?.close();
});

interface Answer {
  status?: number;
  requestId?: string;
  body?: string;
  error?: string;
  at: number;
}

/** POSTs one tools/call of interlock_query on a fresh connection; resolves with the answer or the socket error. */
function postQuery(port: number, sql: string): Promise<Answer> {
  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql } } });
  return new Promise((resolve) => {
    const req = http.request({
      host: '127.0.0.1',
      port,
      path: '/mcp',
      method: 'POST',
      agent: false,
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', authorization: `Bearer ${env.apiKey}`, 'content-length': Buffer.byteLength(body) },
    });
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode, requestId: res.headers['x-request-id'] as string | undefined, body: text, at: Date.now() }));
      res.on('error', (e) => resolve({ status: res.statusCode, error: String(e), at: Date.now() }));
    });
    req.on('error', (e) => resolve({ error: (e as NodeJS.ErrnoException).code ?? String(e), at: Date.now() }));
    req.end(body);
  });
}

/** The JSON-RPC message of a JSON or SSE answer body. */
function message(text: string): any {
  const data = text.split('\n').filter((l) => l.startsWith('data: '));
  return JSON.parse(data.length ? data.at(-1)!.slice(6) : text);
}

async function running(sql: string): Promise<number> {
  const r = await admin.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND query = $1", [sql]);
  return r.rows[0].n;
}

async function waitFor(what: string, check: () => Promise<boolean> | boolean, ms: number, every = 25): Promise<void> {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, every));
  }
}

/** Resolves 'refused' when a TCP connection to the port is refused, 'accepted' when it connects. */
function tryConnect(port: number): Promise<'refused' | 'accepted' | string> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve('accepted');
    });
    s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code === 'ECONNREFUSED' ? 'refused' : e.code ?? String(e)));
  });
}

test('SIGTERM: new connections refused, the short call finishes, the long one is cancelled at the deadline, the audit is flushed, exit 0', async () => {
  const port = await freePort();
  let stdout = '';
  let stderr = '';
  child = spawn(process.execPath, [BIN, '--database-url', env.db.url, 'serve', '--port', String(port)], {
    env: { ...process.env, INTERLOCK_LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) => child!.once('exit', (code, signal) => resolve({ code, signal, at: Date.now() })));
  await waitFor('the gateway to listen', () => stdout.includes(`InterLock listening on http://127.0.0.1:${port}/mcp`) || child!.exitCode !== null, 60_000, 50);
  expect(child.exitCode).toBeNull();

  // Two calls in flight.
  const short = postQuery(port, SHORT_SQL);
  const long = postQuery(port, LONG_SQL);
  let shortDone = false;
  let longDone = false;
  void short.then(() => (shortDone = true));
  void long.then(() => (longDone = true));
  await waitFor('both statements to run in the source', async () => (await running(SHORT_SQL)) === 1 && (await running(LONG_SQL)) === 1, 20_000);

  const termAt = Date.now();
  child.kill('SIGTERM');
  // The listening socket closes at once: a new connection is refused while both calls are still in flight.
  let refusedAt = 0;
  await waitFor('new connections to be refused', async () => {
    const r = await tryConnect(port);
    if (r === 'refused') refusedAt = Date.now();
    return r === 'refused';
  }, 3_000);
  expect(refusedAt - termAt).toBeLessThan(3_000);
  expect(longDone).toBe(false);

  // The short call finishes and its answer reaches the agent.
  const s = await short;
  expect(s.status).toBe(200);
  const sm = message(s.body!);
  expect(sm.result.isError).toBeUndefined();
  expect(sm.result.structuredContent.rows).toEqual([{ n: 3503 * 3503 * 3 }]); // a bigint count within ±(2^53−1) is a JSON number (spec/value-mapping-v1.json)
  expect(s.at).toBeGreaterThan(termAt);

  // The long one is cancelled at the deadline; the process then exits 0.
  const exit = await exited;
  const l = await long;
  expect({ code: exit.code, signal: exit.signal }).toEqual({ code: 0, signal: null });
  expect(exit.at - termAt).toBeGreaterThanOrEqual(DEADLINE_MS - 500);
  expect(exit.at - termAt).toBeLessThan(DEADLINE_MS + 8_000);
  expect(s.at).toBeLessThan(exit.at);
  // The cancelled call's answer may or may not be written before the connection is closed.
  if (l.error === undefined) {
    expect(message(l.body!).result.structuredContent).toMatchObject({ code: 'cancelled' });
  }
  await waitFor('the long statement to be gone from pg_stat_activity', async () => (await running(LONG_SQL)) === 0, 2_000);

  // The audit was flushed before the exit: one row per call.
  const rows = (await env.db.pool.query<{ request_id: string; decision: string; reason_code: string | null; row_count: string | null; fingerprint: string | null }>(
    "SELECT request_id, decision, reason_code, row_count, fingerprint FROM audit_events WHERE kind = 'tool_call' ORDER BY id",
  )).rows;
  expect(rows.map((r) => r.decision).sort()).toEqual(['allowed', 'cancelled']);
  expect(rows.find((r) => r.decision === 'allowed')).toMatchObject({ request_id: s.requestId, row_count: '1' });
  expect(rows.find((r) => r.decision === 'cancelled')).toMatchObject({ reason_code: 'cancelled', request_id: expect.stringMatching(/^req_/) });
  if (l.requestId) expect(rows.find((r) => r.decision === 'cancelled')!.request_id).toBe(l.requestId);

  expect(stderr).toMatch(/SIGTERM: shutting down/);
  const errors = stdout.split('\n').filter((line) => line.startsWith('{') && JSON.parse(line).level >= 50);
  expect(errors).toEqual([]);
  console.log(`shutdown: refused after ${refusedAt - termAt} ms, short call answered after ${s.at - termAt} ms, exit ${exit.code} after ${exit.at - termAt} ms; long call ${l.error ? `connection closed (${l.error})` : `answered ${l.status}: ${l.body?.slice(0, 200)}`}`);
}, 90_000);
