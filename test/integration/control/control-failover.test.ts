/**
 * Issue 29, item 2: the gateway follows its control database through a restart, a stopped
 * (SIGSTOP) audit backend and a failover to a promoted streaming replica, without a restart of its
 * own. Two private PostgreSQL 15 clusters (test/helpers/pg-cluster.ts); the control URL names both
 * hosts with target_session_attrs=read-write. Under load from a few concurrent agents:
 * - every answered call that succeeded has exactly one audit event; no request id has two (under a
 *   restart, a SIGSTOP of the audit backends, a SIGSTOP of the whole server — postmaster and every
 *   backend — and the failover);
 * - while no primary answers, /readyz is 503 control_database_unavailable and calls fail closed;
 * - after `pg_ctl promote` a call succeeds within 10 s; the chain verifies across the failover;
 * - a key revoked after the failover is refused within seconds (the LISTEN was re-established
 *   and the key cache revalidated; without it the cache keeps a key up to 60 s).
 * Bounded: the whole file ends in under 60 s and destroys the clusters in afterAll.
 */
import { startClusterPair, type ClusterPair } from '../../helpers/pg-cluster';
import { callTool } from '../../helpers/governed';
import { openControlDb, type ControlDb } from '../../../src/control/db';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from '../../../src/control/config';
import { startGovernedGateway, type GovernedGateway } from '../../../src/gateway';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey, revokeApiKey } from '../../../src/control/keys';
import { verifyAuditChain } from '../../../src/audit/verify';
import { createLogger } from '../../../src/observability/logger';
import pg from 'pg';
import { readdirSync, readFileSync } from 'node:fs';

jest.setTimeout(120_000);

let pair: ClusterPair | null = null;
let db: ControlDb | null = null;
let gw: GovernedGateway | null = null;
let apiKey = '';
let keyId = '';

/** One answered (or failed) call of the load. */
interface Answer {
  requestId: string | null;
  /** ok: a result without isError; else the refusal code, or 'network' when no answer came. */
  outcome: string;
  at: number;
}

/** Runs `workers` agents calling interlock_list_sources until `stop()`; returns every answer. */
function load(workers = 4): { stop(): Promise<Answer[]>; answers: Answer[] } {
  const answers: Answer[] = [];
  let running = true;
  const one = async () => {
    while (running) {
      try {
        const r = await fetch(gw!.url, {
          method: 'POST',
          signal: AbortSignal.timeout(8000),
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', authorization: `Bearer ${apiKey}` },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {} } }),
        });
        const text = await r.text();
        const json = (r.headers.get('content-type') ?? '').startsWith('text/event-stream') ? text.split('\n').filter((x) => x.startsWith('data: ')).at(-1)!.slice(6) : text;
        const body = JSON.parse(json) as { result?: { isError?: boolean; structuredContent?: { code?: string } } };
        const outcome = body.result && !body.result.isError ? 'ok' : (body.result?.structuredContent?.code ?? `http_${r.status}`);
        answers.push({ requestId: r.headers.get('x-request-id'), outcome, at: Date.now() });
        if (outcome !== 'ok') await new Promise((res) => setTimeout(res, 50));
      } catch {
        answers.push({ requestId: null, outcome: 'network', at: Date.now() });
        await new Promise((res) => setTimeout(res, 50));
      }
    }
  };
  const all = Array.from({ length: workers }, one);
  return {
    answers,
    async stop() {
      running = false;
      await Promise.all(all);
      return answers;
    },
  };
}

/**
 * Every successful answer has exactly one event (decision allowed), and so has every other answer
 * but audit_unavailable (a tool_execution_failed from a control query that failed mid-call is an
 * answer too); no request id in the trail has two; every call got an HTTP answer.
 */
async function expectOneEventPerAnswer(answers: Answer[]): Promise<void> {
  const ids = answers.filter((a) => a.requestId).map((a) => a.requestId!);
  const rows = (await db!.pool.query<{ request_id: string; n: number; decisions: string[] }>('SELECT request_id, count(*)::int AS n, array_agg(decision) AS decisions FROM audit_events WHERE request_id = ANY($1) GROUP BY request_id', [ids])).rows;
  const byId = new Map(rows.map((r) => [r.request_id, r]));
  const ok = answers.filter((a) => a.outcome === 'ok');
  expect(ok.length).toBeGreaterThan(0);
  const missing = ok.filter((a) => byId.get(a.requestId!)?.n !== 1 || byId.get(a.requestId!)?.decisions[0] !== 'allowed');
  expect(missing).toEqual([]);
  expect(rows.filter((r) => r.n > 1)).toEqual([]);
  const otherAnswered = answers.filter((a) => a.outcome !== 'ok' && a.outcome !== 'audit_unavailable' && a.outcome !== 'network');
  expect(otherAnswered.filter((a) => byId.get(a.requestId!)?.n !== 1)).toEqual([]);
  const dup = await db!.pool.query("SELECT request_id FROM audit_events WHERE kind = 'tool_call' AND request_id IS NOT NULL GROUP BY request_id HAVING count(*) > 1");
  expect(dup.rows).toEqual([]);
  // Every answer is either a success or fails closed.
  expect(answers.filter((a) => !['ok', 'audit_unavailable', 'tool_execution_failed'].includes(a.outcome)).map((a) => a.outcome)).toEqual([]);
}

async function readyz(): Promise<{ status: number; body: unknown }> {
  const r = await fetch(new URL('/readyz', gw!.url));
  return { status: r.status, body: await r.json() };
}

async function until(what: () => Promise<boolean>, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await what().catch(() => false)) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  pair = await startClusterPair();
  const admin = new pg.Client({ connectionString: pair.primary.url('postgres') });
  await admin.connect();
  await admin.query('CREATE DATABASE interlock');
  await admin.end();
  const url = `postgresql://root@127.0.0.1:${pair.primary.port},127.0.0.1:${pair.replica.port}/interlock?target_session_attrs=read-write`;
  const logger = createLogger(process.env.DEBUG_FAILOVER ? 'info' : 'silent');
  db = await openControlDb(url, { logger });
  const who = await createIdentity(db, 'failover-agent');
  const key = await createApiKey(db, who.id);
  apiKey = key.secret;
  keyId = key.keyId;
  const config = structuredClone(DEFAULT_CONFIG) as unknown as ResolvedGatewayConfig;
  // The shared rate limit is not what is tested here.
  config.rate_limits = { ...config.rate_limits, per_identity: { points: 1_000_000, window_seconds: 60 } };
  gw = await startGovernedGateway({ db, config, host: '127.0.0.1', port: 0, logger, catalogRescanMs: 0 });
}, 60_000);

afterAll(async () => {
  await gw?.close(500).catch(() => undefined);
  await db?.close().catch(() => undefined);
  await pair?.destroy();
}, 30_000);

test('a control-database restart: answered calls keep exactly one event each and the gateway recovers', async () => {
  const l = load();
  await sleep(700);
  await pair!.ctl(pair!.primary, 'restart', '-m', 'fast');
  const back = Date.now();
  expect(await until(async () => l.answers.some((a) => a.at > back && a.outcome === 'ok'), 10_000)).toBe(true);
  await sleep(500);
  await expectOneEventPerAnswer(await l.stop());
});

test('a stopped (SIGSTOP) audit backend: calls fail closed, none is answered without its event, and the gateway recovers after SIGCONT', async () => {
  const l = load();
  await sleep(500);
  const pids = (await db!.pool.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE application_name = 'interlock-audit'")).rows.map((r) => r.pid);
  expect(pids.length).toBeGreaterThan(0);
  for (const p of pids) process.kill(p, 'SIGSTOP');
  try {
    await sleep(3500);
  } finally {
    for (const p of pids) process.kill(p, 'SIGCONT');
  }
  const cont = Date.now();
  expect(l.answers.some((a) => a.outcome === 'audit_unavailable')).toBe(true);
  expect(await until(async () => l.answers.some((a) => a.at > cont && a.outcome === 'ok'), 10_000)).toBe(true);
  await sleep(500);
  await expectOneEventPerAnswer(await l.stop());
});

/** Process ids of the direct children of `pid` (a postmaster's backends and auxiliary processes), from /proc. */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid) out.push(Number(d));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

test('the whole control-database server stopped (SIGSTOP of the postmaster and every backend): nothing answered ok meanwhile, one event per answer, the chain verifies after SIGCONT', async () => {
  const l = load();
  await sleep(500);
  const pm = pair!.primary.pid()!;
  const pids = [pm, ...childrenOf(pm)];
  // Every backend: the audit lanes, the identity and rate-limit pools, the LISTEN connection.
  expect(pids.length).toBeGreaterThan(4);
  for (const p of pids) process.kill(p, 'SIGSTOP');
  const stopped = Date.now();
  try {
    await sleep(3500);
  } finally {
    for (const p of pids) process.kill(p, 'SIGCONT');
  }
  const cont = Date.now();
  // No call is answered as served while nothing can commit its event (a call whose commit was on its way when the server stopped aside).
  expect(l.answers.filter((a) => a.outcome === 'ok' && a.at > stopped + 300 && a.at < cont)).toEqual([]);
  expect(await until(async () => l.answers.some((a) => a.at > cont && a.outcome === 'ok'), 15_000)).toBe(true);
  await sleep(500);
  await expectOneEventPerAnswer(await l.stop());
  expect((await verifyAuditChain(db!)).ok).toBe(true);
});

test('failover to a promoted replica: fail closed and not ready meanwhile, follow within 10 s of promotion, one event per answer, chain verifies, LISTEN re-established', async () => {
  const l = load();
  await sleep(700);
  await pair!.ctl(pair!.primary, 'stop', '-m', 'fast');
  await sleep(1500);
  expect(await readyz()).toEqual({ status: 503, body: { status: 'not_ready', reason: 'control_database_unavailable' } });
  const before = l.answers.length;
  await sleep(500);
  expect(l.answers.slice(before).every((a) => a.outcome !== 'ok')).toBe(true);
  await pair!.ctl(pair!.replica, 'promote');
  const promoted = Date.now();
  expect(await until(async () => l.answers.some((a) => a.at > promoted && a.outcome === 'ok'), 10_000)).toBe(true);
  const followedMs = l.answers.find((a) => a.at > promoted && a.outcome === 'ok')!.at - promoted;
  expect(followedMs).toBeLessThan(10_000);
  await sleep(700);
  const answers = await l.stop();
  if (process.env.DEBUG_FAILOVER) console.log(JSON.stringify(answers.map((a) => [a.at - promoted, a.outcome])));
  // The pool now writes to the promoted replica.
  expect((await db!.pool.query<{ p: number }>('SELECT inet_server_port() AS p')).rows[0].p).toBe(pair!.replica.port);
  await expectOneEventPerAnswer(answers);
  expect((await readyz()).status).toBe(200);
  const report = await verifyAuditChain(db!);
  expect(report.ok).toBe(true);
  expect(report.eventsChecked).toBeGreaterThanOrEqual(answers.filter((a) => a.outcome === 'ok').length);

  // Key revocation reaches the gateway through the re-established LISTEN.
  await revokeApiKey(db!, keyId);
  expect(await until(async () => (await callTool({ url: gw!.url }, 'interlock_list_sources', {}, apiKey)).body.result?.structuredContent?.code === 'invalid_api_key', 8000)).toBe(true);
});
