/**
 * Where the slowest calls spend their time (issue 29, h29x): one admission-off gateway (like bench
 * 11's capacity sweep: cache off, client caps lifted), loaded with bench/lib/call-trace-preload.cjs,
 * warmed for 2 s at 16 connections, then per level of BENCH_LEVELS (default 1,32,48) wrk closed-loop
 * for BENCH_SECONDS (default 6) with the trace window open. Per level: wrk's p50/p99, the gateway's
 * own p50/p99 (arrive → res.end), and for all calls and for the slowest 1 % (by arrive → end) the
 * median of each span: parse (arrive → X-Request-Id), pre-read (→ connector.read), slot wait (→ the
 * identity's source slot), statement (→ read settled), post-read (→ audit record()), audit queue
 * (→ taken by a lane), commit (→ record() settled), write (→ res.end); the share of the slow calls'
 * time in each span; GC pauses (count, total, largest; the slow calls' median overlap with them),
 * event-loop delay (monitorEventLoopDelay p50/p99/max), batches (count, median events, median and
 * p99 wall ms). BENCH_GATEWAY_NODE_FLAGS go before the preload (e.g. --max-semi-space-size=32);
 * BENCH_CONFIG: a gateway config file (INTERLOCK_CONFIG); BENCH_TRACE_DIR: keep each level's raw trace there
 * (trace-N.json). Not a timed test. Needs /usr/bin/wrk.
 *
 * Run: `npm run -s build && npx tsx bench/call-trace.ts`.
 */
import { copyFileSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { loadavg } from 'node:os';
import path from 'node:path';
import { gatewayVars, ROOT, sleep, startServe, withBenchEnv, type BenchEnv } from './lib/env';
import { POINT_SQL, TRACKS } from './lib/point-read';
import { envInt } from './lib/stats';
import { runWrkOverload, wrkAvailable } from './lib/wrk';

const MODERN = '2026-07-28';
const META = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} };
const HEADERS = (apiKey: string) => ({ 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${apiKey}`, 'MCP-Protocol-Version': MODERN, 'Mcp-Method': 'tools/call', 'Mcp-Name': 'interlock_query' });
const BODIES = Array.from({ length: 500 }, (_, i) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: POINT_SQL, params: [1 + ((i * 7919) % TRACKS)] }, _meta: META } }));

/** One call's timeline (ms, performance.now() of the gateway); see call-trace-preload.cjs. */
interface Call {
  rid: string;
  arrive?: number;
  admit?: number;
  readStart?: number;
  hold?: number;
  readEnd?: number;
  submit?: number;
  taken?: number;
  settle?: number;
  end?: number;
  status?: number;
  /** Index of its batch in Trace.batches. */
  batch?: number;
}
interface Trace {
  calls: Call[];
  batches: Array<[number, number, number, number, number]>;
  gc: Array<[number, number, number]>;
  lags: Array<[number, number]>;
  eld: { p50: number; p99: number; max: number };
}

const SPANS: Array<[string, keyof Call, keyof Call]> = [
  ['parse', 'arrive', 'admit'],
  ['pre-read', 'admit', 'readStart'],
  ['slot wait', 'readStart', 'hold'],
  ['statement', 'hold', 'readEnd'],
  ['post-read', 'readEnd', 'submit'],
  ['audit queue', 'submit', 'taken'],
  ['commit', 'taken', 'settle'],
  ['write', 'settle', 'end'],
];

const q = (xs: number[], p: number) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};
const f = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : '-');

/** Prints the decomposition of one level's trace. */
function report(t: Trace, label: string): void {
  const full = t.calls.filter((c) => SPANS.every(([, a, b]) => typeof c[a] === 'number' && typeof c[b] === 'number') && c.status === 200);
  const total = (c: Call) => (c.end as number) - (c.arrive as number);
  full.sort((a, b) => total(a) - total(b));
  const slow = full.slice(Math.floor(full.length * 0.99));
  const gcIn = (c: Call) => t.gc.reduce((s, [st, d]) => s + Math.max(0, Math.min(st + d, c.end as number) - Math.max(st, c.arrive as number)), 0);
  const lagIn = (c: Call) => t.lags.reduce((s, [at, lag]) => s + (at >= (c.arrive as number) && at - lag <= (c.end as number) ? lag : 0), 0);
  console.log(`${label}: ${full.length} complete calls; gateway arrive→end p50 ${f(q(full.map(total), 0.5))} p99 ${f(q(full.map(total), 0.99))} ms; slowest 1 %: ${slow.length} calls, ≥ ${f(total(slow[0] ?? full[0]))} ms`);
  console.log('  span          all p50   all p99   slow p50   slow share');
  const slowSum = slow.reduce((s, c) => s + total(c), 0);
  for (const [name, a, b] of SPANS) {
    const d = (c: Call) => (c[b] as number) - (c[a] as number);
    const share = slow.reduce((s, c) => s + d(c), 0) / slowSum;
    console.log(`  ${name.padEnd(12)} ${f(q(full.map(d), 0.5)).padStart(8)} ${f(q(full.map(d), 0.99)).padStart(9)} ${f(q(slow.map(d), 0.5)).padStart(10)} ${(100 * share).toFixed(0).padStart(10)} %`);
  }
  const gcDur = t.gc.map((g) => g[1]);
  console.log(`  gc: ${t.gc.length} pauses, ${f(gcDur.reduce((s, x) => s + x, 0))} ms in all, largest ${f(Math.max(0, ...gcDur))} ms (kinds ${[...new Set(t.gc.map((g) => g[2]))].join(',')}); slow calls' median overlap with a pause ${f(q(slow.map(gcIn), 0.5))} ms (all calls' ${f(q(full.map(gcIn), 0.5))}); slow calls overlapping ≥ 1 pause ${slow.filter((c) => gcIn(c) > 0).length}/${slow.length}, all calls ${(100 * full.filter((c) => gcIn(c) > 0).length / full.length).toFixed(0)} %`);
  console.log(`  event-loop delay: p50 ${f(t.eld.p50)} p99 ${f(t.eld.p99)} max ${f(t.eld.max)} ms; 5 ms timer ≥ 2 ms late ${t.lags.length} times; slow calls' median lag inside ${f(q(slow.map(lagIn), 0.5))} ms`);
  const bw = t.batches.filter((b) => b[1] > 0).map((b) => b[1] - b[0]);
  const ofSlow = slow.map((c) => t.batches[c.batch as number]).filter((b) => b && b[4] > 0);
  const part = (bs: typeof ofSlow, i: number) => f(q(bs.map((b) => (i === 0 ? b[3] - b[0] : i === 1 ? b[4] - b[3] : b[1] - b[4])), 0.5));
  const allB = t.batches.filter((b) => b[4] > 0);
  console.log(`  commit = build (normalise, hash) + append (pool checkout, statement, commit: one round trip) + after: all batches' medians ${part(allB, 0)} + ${part(allB, 1)} + ${part(allB, 2)} ms, append p99 ${f(q(allB.map((b) => b[4] - b[3]), 0.99))}; the slow calls' batches' ${part(ofSlow, 0)} + ${part(ofSlow, 1)} + ${part(ofSlow, 2)} ms`);
  console.log(`  audit batches: ${t.batches.length}, median ${q(t.batches.map((b) => b[2]), 0.5)} events (p99 ${q(t.batches.map((b) => b[2]), 0.99)}), wall p50 ${f(q(bw, 0.5))} p99 ${f(q(bw, 0.99))} max ${f(Math.max(0, ...bw))} ms`);
}

async function main(): Promise<void> {
  if (!wrkAvailable()) throw new Error('needs wrk (/usr/bin/wrk)');
  const levels = (process.env.BENCH_LEVELS ?? '1,32,48').split(',').map(Number);
  const seconds = envInt('BENCH_SECONDS', 6);
  const out = `/tmp/call-trace-${process.pid}.json`;
  await withBenchEnv({}, async (env: BenchEnv) => {
    const vars = { ...gatewayVars(env.controlUrl, { cacheTtlMs: 0 }), INTERLOCK_ADMISSION_ENABLED: 'false', INTERLOCK_STREAMS_PER_IDENTITY: '100000', INTERLOCK_STREAMS_PER_ADDRESS: '100000', INTERLOCK_BODY_READS_PER_ADDRESS: '100000', CALL_TRACE_ROOT: ROOT, CALL_TRACE_OUT: out, ...(process.env.BENCH_CONFIG ? { INTERLOCK_CONFIG: process.env.BENCH_CONFIG } : {}) };
    const flags = [...(process.env.BENCH_GATEWAY_NODE_FLAGS ?? '').split(' ').filter(Boolean), '-r', path.join(ROOT, 'bench', 'lib', 'call-trace-preload.cjs')];
    const gw = await startServe(vars, flags);
    try {
      const headers = HEADERS(env.apiKey);
      await runWrkOverload({ url: gw.url, connections: 16, seconds: 2, bodies: BODIES, headers, expect: '"track_id"' });
      for (const n of levels) {
        rmSync(out, { force: true });
        process.kill(gw.pid, 'SIGUSR2');
        await sleep(50);
        const w = await runWrkOverload({ url: gw.url, connections: n, seconds, bodies: BODIES, headers, expect: '"track_id"' });
        process.kill(gw.pid, 'SIGUSR2');
        for (let i = 0; i < 100 && !existsSync(out); i++) await sleep(50);
        const t = JSON.parse(readFileSync(out, 'utf8')) as Trace;
        if (process.env.BENCH_TRACE_DIR) copyFileSync(out, path.join(process.env.BENCH_TRACE_DIR, `trace-${n}.json`));
        console.log(`\n## n = ${n}: wrk ${Math.round(w.served / w.seconds)} calls/s, p50 ${w.p50Ms} p99 ${w.p99Ms} ms, load ${loadavg()[0].toFixed(2)}`);
        report(t, `n = ${n}`);
      }
    } finally {
      rmSync(out, { force: true });
      await gw.stop();
    }
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
