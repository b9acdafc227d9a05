/**
 * Issue 10, "Done when": load and abuse for RUN_MS (30 s), loopback only, bounded in time and count.
 *
 *  - Load: 16 well-behaved agents on the official SDK clients (v1 handshake; v2 legacy, auto and
 *    pinned 2026-07-28), each its own identity, pacing their calls (list, describe, reads).
 *  - Abuse: 4 hostile identities, each in a tight loop with 2 calls in flight: over-complex
 *    statements (a chain of 2,000 CTEs, about 84 KB, within the tool's sql length: refused as
 *    statement_too_complex before it is sent), statements whose errors PostgreSQL raises on the
 *    agent's own input (a parameter that is not a number, a division by zero at run time:
 *    statement_failed, and the breaker must not count them), slow queries, and huge values (300 MB
 *    from a $1 parameter, ~140 MB from string_agg: they pass every static guard and the per-call
 *    byte budget on the wire answers result_too_large); and a keyless flooder sending notifications
 *    with 64 KiB method names and tools/call without a key, as fast as it can. The test checks that
 *    each class reached that defence and that no hostile call got the opaque failure.
 *
 * Asserts: the well-behaved agents get at least 95% successful answers; the gateway keeps serving
 * (/healthz, a final call); nothing the run did stays reachable (the heap used after a forced full
 * GC after the run is within HEAP_GROWTH_BOUND of the one after the warm-up, agents connected at
 * both); the /metrics series (names and labels)
 * after the run are exactly those after the warm-up, so their count is constant (the warm-up creates
 * every series the run can: the keyless budget and an identity's rate limit are made to trip in it),
 * and no series carries a label value outside the closed sets; and the audit grows, for the keyless
 * traffic, only by aggregated events (at most a few per address) whose counts add up to exactly what
 * the flooder was refused.
 *
 * To isolate one class while investigating: ABUSE_INTERNAL_ERRORS=0 (refused calls instead),
 * ABUSE_HUGE_VALUES=0 (more slow queries instead), ABUSE_COMPLEX_CTES=N (chain length).
 * The heap figures are the whole test process (gateway and clients), an upper bound for the gateway.
 * The report also prints the RSS growth at its peak, for information only: RSS counts garbage not yet
 * collected (of this suite and, in a full run, of others in the same jest process) and varied from
 * 35 to 337 MB between runs, so it is not asserted.
 */
import { randomBytes } from 'node:crypto';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { connectSdkV1, connectSdkV2, type CallOutcome, type ConnectedClient } from '../../helpers/clients';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { grantRole, grantsForIdentity } from '../../../src/control/grants';
import { findGc, settledHeap } from '../../helpers/gc';
import catalogue from '../../../generated/tool-catalogue.json';
import errorsSpec from '../../../spec/errors-v1.json';

/** Every code named in spec/errors-v1.json (refusal and JSON-RPC names). */
function errorCodes(): string[] {
  const out: string[] = [];
  const walk = (o: unknown): void => {
    if (Array.isArray(o)) o.forEach(walk);
    else if (o && typeof o === 'object') for (const [k, v] of Object.entries(o)) (k === 'code' || k === 'status') && typeof v === 'string' ? out.push(v) : walk(v);
  };
  walk(errorsSpec);
  return out;
}

const RUN_MS = 30_000;
const WARMUP_MS = 4_000;
const AGENTS = 16;
const HOSTILE = 4;
const HOSTILE_IN_FLIGHT = 2;
const FLOOD_IN_FLIGHT = 4;
/** Pause of a well-behaved agent between two calls. */
const AGENT_PAUSE_MS = 150;
const MAX_CALLS = 20_000;
/**
 * Allowed growth of the heap used after GC_ROUNDS forced full collections: after the run (audit
 * flushed) against after the warm-up, agents connected at both. What stays reachable past the run is
 * a leak; garbage is not counted, so the huge results' transient buffers (which made the RSS growth
 * vary from 35 to 337 MB) do not matter. Measured on 6 December 2026 with other work on the machine
 * (1-minute load average 6-11): -1.0, -2.2 and -3.0 MB without a leak; +8.0 and +6.2 MB with every
 * request body kept in a module-level array of the gateway (admission.ts), the hostile calls' bodies
 * being 7.4 and 6.6 MB of it, which fails this bound. (With 4 collections: -2.4 to -3.5 MB in five
 * runs without a leak, +4.1 to +8.1 MB with it.) A leak of less than ~4 MB over the run (a few KB per request at this
 * volume, ~1,000 requests under load) passes unseen.
 */
const HEAP_GROWTH_BOUND = 3 * 1024 * 1024;
/** Forced full collections before each heap reading. */
const GC_ROUNDS = 12;
const HUGE = process.env.ABUSE_HUGE_VALUES !== '0';
const INTERNAL_ERRORS = process.env.ABUSE_INTERNAL_ERRORS !== '0';
const COMPLEX_CTES = Number(process.env.ABUSE_COMPLEX_CTES ?? 2000); // ~84 KB: within the tool's 100,000-character sql, far over max_ctes

jest.setTimeout(RUN_MS + WARMUP_MS + 120_000);

let env: GovernedEnv;
let base: string;

beforeAll(async () => {
  env = await startGovernedEnv({
    config: {
      rate_limits: { per_identity: { points: 600, window_seconds: 60 }, per_source: { points: 1_000_000, window_seconds: 60 } },
      // A small keyless budget, so that the flooder is cut off within the run even on a slow machine.
      client_limits: { keyless: { points: 60, window_seconds: 60 }, streams_per_address: 128, streams_per_identity: 64 },
      // Admission by capacity is held at a limit this run never reaches (as before its defaults of
      // issue 29 acted from 8–32 connections): this test is about abuse by identity and address;
      // refusals at capacity and their fairness are tested in capacity*.test.ts.
      admission: { enabled: true, initial_limit: 64, min_limit: 64, max_limit: 512, queue_size: 32, queue_timeout_ms: 250, tolerance: 2, max_event_loop_delay_ms: 100, max_audit_queue: 1000, pause_refused_connections: true },
    },
  });
  base = env.url.replace(/\/mcp$/, '');
}, 60_000);
afterAll(async () => {
  await env?.close();
});

/** A new identity with the demo's role on chinook and one key. */
async function identityWithKey(name: string): Promise<string> {
  const role = (await grantsForIdentity(env.db, env.demo.identityId))[0].role.name;
  const idn = await createIdentity(env.db, name);
  await grantRole(env.db, { identityId: idn.id, roleName: role, sourceId: 'chinook' });
  return (await createApiKey(env.db, idn.id)).secret;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The gateway's own series on /metrics (process metrics depend on the runtime and are left out). */
async function series(): Promise<string[]> {
  const r = await fetch(`${base}/metrics`);
  expect(r.status).toBe(200);
  return (await r.text()).split('\n').filter((l) => l.startsWith('interlock_') && !l.startsWith('interlock_process_')).map((l) => l.slice(0, l.lastIndexOf(' ')));
}

// ---- the well-behaved agents ------------------------------------------------------------------

const GOOD_OPS: Array<[string, (i: number) => Record<string, unknown>]> = [
  ['interlock_list_sources', () => ({})],
  ['interlock_describe_access', () => ({ source_id: 'chinook' })],
  ['interlock_query', (i) => ({ source_id: 'chinook', sql: 'SELECT genre_id, name FROM genre WHERE genre_id = $1', params: [1 + (i % 25)] })],
  ['interlock_query', (i) => ({ source_id: 'chinook', sql: 'SELECT count(*) AS n FROM track WHERE album_id = $1', params: [1 + (i % 347)] })],
  ['interlock_query', (i) => ({ source_id: 'chinook', sql: 'SELECT name FROM artist WHERE artist_id = $1', params: [1 + (i % 275)] })],
];

function succeeded(o: CallOutcome): boolean {
  return o.kind === 'result' && o.result.isError !== true;
}

async function connectAgent(i: number, key: string): Promise<ConnectedClient> {
  const url = env.url;
  switch (i % 4) {
    case 0:
      return connectSdkV1({ url, apiKey: key });
    case 1:
      return connectSdkV2({ url, apiKey: key, mode: 'legacy' });
    case 2:
      return connectSdkV2({ url, apiKey: key, mode: 'auto' });
    default:
      return connectSdkV2({ url, apiKey: key, mode: { pin: '2026-07-28' } });
  }
}

// ---- the hostile identities ---------------------------------------------------------------------

function complexStatement(n: number): string {
  const ctes = [`c0 AS (SELECT 1 AS x)`];
  for (let k = 1; k < n; k++) ctes.push(`c${k} AS (SELECT x + 1 AS x FROM c${k - 1})`);
  return `WITH ${ctes.join(', ')} SELECT x FROM c${n - 1}`;
}

const HOSTILE_CLASSES: Array<{ label: string; args: (i: number) => Record<string, unknown> }> = [
  { label: 'over-complex', args: () => ({ source_id: 'chinook', sql: complexStatement(COMPLEX_CTES) }) },
  INTERNAL_ERRORS
    ? {
        label: 'statement-error',
        // Errors the statement itself makes PostgreSQL raise (bad parameter input, a runtime data
        // exception): they reach the source and must never count against its circuit.
        args: (i) => (i % 2 ? { source_id: 'chinook', sql: 'SELECT $1::int AS v', params: [`not a number ${i}`] } : { source_id: 'chinook', sql: 'SELECT 1 / (track_id - track_id) AS v FROM track WHERE track_id = $1', params: [1 + (i % 3000)] }),
      }
    : { label: 'refused', args: (i) => (i % 2 ? { source_id: `nope${i}`, sql: 'SELECT 1' } : { source_id: 'chinook', sql: 'SELECT first_name FROM employee' }) },
  { label: 'slow', args: (i) => ({ source_id: 'chinook', sql: 'SELECT count(*) AS n FROM track a, track b WHERE a.track_id + b.track_id = $1', params: [1000 + i] }) },
  HUGE
    ? {
        label: 'huge',
        // A 300 MB value from a parameter, and a ~140 MB one from an aggregate: both pass every
        // static guard and end at the call's wire budget.
        args: (i) => (i % 2 ? { source_id: 'chinook', sql: 'SELECT repeat($2, $1::int) AS v', params: [300_000_000, 'x'] } : { source_id: 'chinook', sql: "SELECT string_agg(repeat(name, 2000), ',') AS v FROM track" }),
      }
    : { label: 'slow-2', args: (i) => ({ source_id: 'chinook', sql: 'SELECT count(*) AS n FROM invoice_line a, invoice_line b WHERE a.invoice_id = $1 OR b.quantity > $1', params: [i % 400] }) },
];

async function mcpPost(body: unknown, key: string | null, headers: Record<string, string> = {}): Promise<number> {
  const h: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', ...headers };
  if (key) h.authorization = `Bearer ${key}`;
  const r = await fetch(env.url, { method: 'POST', headers: h, body: JSON.stringify(body) });
  await r.arrayBuffer();
  return r.status;
}

test('16 agents keep ≥95% success while 4 hostile identities and a keyless flooder abuse the gateway; no heap growth past the run, series and audit stay bounded', async () => {
  const gc = findGc();
  expect(gc).not.toBeNull();
  const goodKeys = await Promise.all(Array.from({ length: AGENTS }, (_, i) => identityWithKey(`good-${i}`)));
  const hostileKeys = await Promise.all(Array.from({ length: HOSTILE }, (_, i) => identityWithKey(`hostile-${i}`)));
  // An identity of its own that the warm-up drives past its rate limit (see below).
  const limitProbeKey = await identityWithKey('limit-probe');
  const agents = await Promise.all(goodKeys.map((k, i) => connectAgent(i, k)));

  const counts = { good: 0, goodOk: 0, goodFailures: new Map<string, number>(), hostile: 0, hostileAnswers: new Map<string, number>(), floodCalls: 0, floodCallsAnswered: 0, flood429: 0, floodNotifications: 0, floodOther: new Map<string, number>(), queryBodyBytes: 0 };
  const bump = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1);
  let stopAt = Date.now() + WARMUP_MS;
  const longName = `notifications/${'n'.repeat(64 * 1024 - 20)}`;

  const runAgent = async (a: ConnectedClient, i: number) => {
    for (let n = 0; Date.now() < stopAt && n < MAX_CALLS; n++) {
      const [tool, args] = GOOD_OPS[(i + n) % GOOD_OPS.length];
      const o = await a.callTool(tool, args(n));
      counts.good++;
      if (succeeded(o)) counts.goodOk++;
      else bump(counts.goodFailures, o.kind === 'result' ? String((o.result.structuredContent as { code?: string } | undefined)?.code ?? 'isError') : `${o.name}:${String(o.code)}`);
      await sleep(AGENT_PAUSE_MS);
    }
  };
  /** One interlock_query call with `key`; the answer's code (or http_<status>, network). */
  const queryCode = async (key: string, args: Record<string, unknown>, id: number): Promise<string> => {
    const body = JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'interlock_query', arguments: args } });
    counts.queryBodyBytes += body.length;
    const h: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', authorization: `Bearer ${key}` };
    const r = await fetch(env.url, { method: 'POST', headers: h, body }).catch(() => null);
    const text = r ? await r.text().catch(() => '') : '';
    return /"code":"([a-z_]+)"/.exec(text)?.[1] ?? (r ? (r.status === 200 ? 'ok' : `http_${r.status}`) : 'network');
  };
  const runHostile = async (key: string, cls: (typeof HOSTILE_CLASSES)[number]) => {
    for (let n = 0; Date.now() < stopAt && n < MAX_CALLS; n++) {
      const code = await queryCode(key, cls.args(n), n);
      counts.hostile++;
      bump(counts.hostileAnswers, `${cls.label}:${code}`);
      if (code === 'rate_limited') await sleep(250);
    }
  };
  const runFlooder = async (k: number) => {
    for (let n = 0; Date.now() < stopAt && n < MAX_CALLS; n++) {
      if (n % 2 === 0) {
        const status = await mcpPost({ jsonrpc: '2.0', method: `${longName}${randomBytes(4).toString('hex')}` }, null).catch(() => 0);
        counts.floodNotifications++;
        if (status === 429) counts.flood429++;
        else if (status !== 202) bump(counts.floodOther, `notification:${status}`);
      } else {
        const status = await mcpPost({ jsonrpc: '2.0', id: `${k}-${n}`, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: `s${randomBytes(3).toString('hex')}`, sql: 'SELECT 1' } } }, null).catch(() => 0);
        counts.floodCalls++;
        if (status === 429) counts.flood429++;
        else if (status === 200) counts.floodCallsAnswered++;
        else bump(counts.floodOther, `call:${status}`);
      }
    }
  };
  const everything = () => [
    ...agents.map((a, i) => runAgent(a, i)),
    ...hostileKeys.flatMap((k, i) => Array.from({ length: HOSTILE_IN_FLIGHT }, () => runHostile(k, HOSTILE_CLASSES[i]))),
    ...Array.from({ length: FLOOD_IN_FLIGHT }, (_, k) => runFlooder(k)),
  ];

  // ---- warm-up: the same mix for WARMUP_MS, so every series the run can create exists ----
  await Promise.all(everything());
  // The warm-up must also have seen the keyless budget trip (its 429 is a series of its own).
  for (let n = 0; counts.flood429 === 0 && n < 1000; n++) if ((await mcpPost({ jsonrpc: '2.0', method: 'notifications/initialized' }, null)) === 429) counts.flood429++;
  expect(counts.flood429).toBeGreaterThan(0);
  // And an identity's rate limit tripping, as a hostile identity's may at any moment of the run:
  // the probe identity spends its points on cheap reads (4 in flight), then sends every hostile
  // class's statements once, each answered rate_limited on its own path (refused at step 5, or
  // refused before it and charged afterwards). So every rate_limited series exists before the run.
  const probeArgs = GOOD_OPS[2][1];
  let probeLimited = false;
  await Promise.all(
    Array.from({ length: 4 }, async (_, w) => {
      for (let n = w; !probeLimited && n < 4 * 1000; n += 4) if ((await queryCode(limitProbeKey, probeArgs(n), n)) === 'rate_limited') probeLimited = true;
    }),
  );
  expect(probeLimited).toBe(true);
  for (const cls of HOSTILE_CLASSES) for (const n of [0, 1]) expect(`${cls.label}:${await queryCode(limitProbeKey, cls.args(n), n)}`).toBe(`${cls.label}:rate_limited`);
  await env.gateway.gateway.flushAudit();
  const seriesBefore = await series();
  const auditBefore = Number((await env.db.pool.query('SELECT max(id) AS m FROM audit_events')).rows[0].m ?? 0);
  await sleep(500);
  const baseline = await settledHeap(gc!, GC_ROUNDS);
  const rssBaseline = baseline.rss;
  let rssPeak = rssBaseline;
  const sampler = setInterval(() => {
    rssPeak = Math.max(rssPeak, process.memoryUsage().rss);
  }, 200);
  for (const k of Object.keys(counts) as Array<keyof typeof counts>) {
    const v = counts[k];
    if (v instanceof Map) v.clear();
    else (counts as Record<string, unknown>)[k] = 0;
  }

  // ---- the run ----
  stopAt = Date.now() + RUN_MS;
  await Promise.all(everything());
  clearInterval(sampler);

  // No crash: the gateway answers, and a well-behaved call still succeeds.
  expect((await fetch(`${base}/healthz`)).status).toBe(200);
  expect(succeeded(await agents[0].callTool('interlock_list_sources', {}))).toBe(true);
  // The series before the agents disconnect (closing a session is traffic the warm-up never sent).
  const seriesAfter = await series();
  // The heap once the run's work is done, in the state of the baseline: agents still connected, audit
  // written, a moment for sockets to close.
  await env.gateway.gateway.flushAudit();
  await sleep(500);
  const after = await settledHeap(gc!, GC_ROUNDS);
  await Promise.all(agents.map((a) => a.close().catch(() => undefined)));

  const report = {
    good: counts.good,
    goodOk: counts.goodOk,
    goodFailures: Object.fromEntries(counts.goodFailures),
    hostile: counts.hostile,
    hostileAnswers: Object.fromEntries(counts.hostileAnswers),
    // What a gateway keeping every request body would have kept of the hostile calls alone.
    hostileBodiesMB: +(counts.queryBodyBytes / 1048576).toFixed(1),
    flood: { calls: counts.floodCalls, callsAnswered: counts.floodCallsAnswered, notifications: counts.floodNotifications, refused429: counts.flood429, other: Object.fromEntries(counts.floodOther) },
    heapMB: { baseline: +(baseline.heapUsed / 1048576).toFixed(1), after: +(after.heapUsed / 1048576).toFixed(1), growth: +((after.heapUsed - baseline.heapUsed) / 1048576).toFixed(1) },
    rssPeakGrowthMB: Math.round((rssPeak - rssBaseline) / 1048576),
  };
  // eslint-disable-next-line no-console
  console.log(JSON.stringify(report, null, 1));

  // Each hostile class reached the defence it is there to test (not an earlier refusal), and no
  // hostile call got the opaque failure.
  const seen = (label: string) => [...counts.hostileAnswers.keys()].filter((k) => k.startsWith(`${label}:`)).map((k) => k.slice(label.length + 1));
  expect(seen('over-complex')).toContain('statement_too_complex');
  if (INTERNAL_ERRORS) expect(seen('statement-error')).toContain('statement_failed');
  if (HUGE) expect(seen('huge')).toContain('result_too_large');
  expect([...counts.hostileAnswers.keys()].filter((k) => /:(tool_execution_failed|invalid_arguments|network|http_5\d\d)$/.test(k))).toEqual([]);
  // ≥95% success for the well-behaved agents, and they were busy.
  expect(counts.good).toBeGreaterThan(AGENTS * 10);
  expect(counts.goodOk / counts.good).toBeGreaterThanOrEqual(0.95);
  // The abuse happened, and the flooder was cut off by its address budget.
  expect(counts.hostile).toBeGreaterThan(HOSTILE * 5);
  expect(counts.flood429).toBeGreaterThan(50);
  expect(counts.floodOther.size).toBe(0);
  // No leak: what the run did is not reachable after it.
  expect(after.heapUsed - baseline.heapUsed).toBeLessThan(HEAP_GROWTH_BOUND);
  // The metrics series stay the same: the set of series (names and labels) after the run is the
  // set before it, so their count is constant. First, as a diagnostic, no new series carries a label
  // value from outside the closed sets (values already seen, tool names of the catalogue, error
  // codes of spec/errors-v1.json): a flooded method name or source id would show up here.
  const labelValues = (s: string) => [...s.matchAll(/="((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]!);
  const closed = new Set<string>([...seriesBefore.flatMap(labelValues), ...catalogue.tools.map((t) => t.name), ...errorCodes(), 'other']);
  expect(seriesAfter.filter((s) => !seriesBefore.includes(s)).filter((s) => labelValues(s).some((v) => !closed.has(v)))).toEqual([]);
  // Then the exact criterion (a series new only in combination would mean the warm-up missed a path).
  expect(seriesAfter.filter((s) => !seriesBefore.includes(s))).toEqual([]);
  expect(new Set(seriesAfter)).toEqual(new Set(seriesBefore));
  expect(seriesAfter.length).toBe(seriesBefore.length);

  // Audit: keyless traffic only as aggregated events, whose counts are exactly the flooder's refusals.
  await env.gateway.gateway.flushAudit();
  const rows = (
    await env.db.pool.query<{ identity_id: string | null; details: Record<string, unknown> }>('SELECT identity_id, details FROM audit_events WHERE id > $1 AND kind = $2', [auditBefore, 'tool_call'])
  ).rows;
  const keyless = rows.filter((r) => r.identity_id === null);
  expect(keyless.every((r) => r.details.aggregated === true)).toBe(true);
  // One event per address per minute (the run spans at most two minutes; the final flush may split one).
  expect(keyless.length).toBeGreaterThanOrEqual(1);
  expect(keyless.length).toBeLessThanOrEqual(3);
  expect(new Set(keyless.map((r) => r.details.client_address))).toEqual(new Set(['127.0.0.1']));
  const aggregatedCount = keyless.reduce((n, r) => n + Number(r.details.count), 0);
  expect(aggregatedCount).toBe(counts.floodCallsAnswered + counts.flood429);
  // Every identified call left its own row.
  expect(rows.filter((r) => r.identity_id !== null).length).toBeGreaterThan(counts.goodOk * 0.9);
});
