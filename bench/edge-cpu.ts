/**
 * The gateway's own CPU per tools/call at the HTTP edge and dispatcher (issue 28 item 3), without
 * databases: one bench/lib/edge-server.cjs child per compiled tree (this checkout, and BEFORE_ROOT
 * when given), each driven by `wrk` at BENCH_CONCURRENCY (8) with a modern-dialect tools/call of
 * interlock_list_sources (an answer counts only when it is HTTP 200 and holds `"demo"`), in
 * alternating rounds after a pre-warm. Per side and round: the child's utime+stime from /proc in µs
 * per call (and stime alone). With no source or audit round trip, the figure is node:http plus
 * src/transport, src/protocol and the dispatcher's bookkeeping: the part of a governed call this
 * item's edge changes touch, with far less noise than bench/cost-per-call.ts.
 *
 * Environment: BEFORE_ROOT, BENCH_ROUNDS (7), BENCH_SECONDS (3), BENCH_PREWARM_SECONDS (5),
 * BENCH_CONCURRENCY (8). Both trees need a fresh `npm run -s build`. Run: `npx tsx bench/edge-cpu.ts`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { loadavg } from 'node:os';
import path from 'node:path';
import { procCpuSplitMs } from './lib/cpu';
import { ROOT } from './lib/env';
import { BENCH_PROTOCOL_VERSION } from './lib/http';
import { emitResult, envInt, envSeconds, machineLine, round, table } from './lib/stats';
import { runWrk, wrkAvailable } from './lib/wrk';

interface Side {
  name: string;
  child: ChildProcess;
  url: string;
  key: string;
  us: number[];
  sys: number[];
  rps: number[];
}

function start(name: string, root: string): Promise<Side> {
  const child = spawn(process.execPath, [path.join(ROOT, 'bench/lib/edge-server.cjs')], { env: { ...process.env, EDGE_ROOT: root }, stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = /READY (\S+) (\S+)/.exec(out);
      if (m) resolve({ name, child, url: m[1], key: m[2], us: [], sys: [], rps: [] });
    });
    child.on('exit', (code) => reject(new Error(`edge server for ${root} exited ${code}`)));
  });
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function main(): Promise<void> {
  if (!wrkAvailable()) {
    console.log('SKIPPED: wrk is not installed');
    return;
  }
  const rounds = envInt('BENCH_ROUNDS', 7);
  const durationMs = envSeconds('BENCH_SECONDS', 3);
  const prewarmMs = envSeconds('BENCH_PREWARM_SECONDS', 5);
  const concurrency = envInt('BENCH_CONCURRENCY', 8);
  const roots: Array<[string, string]> = process.env.BEFORE_ROOT ? [['before', path.resolve(process.env.BEFORE_ROOT)], ['after', ROOT]] : [['this', ROOT]];
  console.log(`# edge-cpu: CPU per tools/call (interlock_list_sources, in memory) at c=${concurrency}, wrk-driven: ${roots.map(([n, r]) => `${n} = ${r}`).join(', ')}`);
  console.log(machineLine());
  const sides: Side[] = [];
  for (const [n, r] of roots) sides.push(await start(n, r));
  const body = (i: number) => JSON.stringify({ jsonrpc: '2.0', id: i, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {} } });
  const bodies = Array.from({ length: 16 }, (_, i) => body(i + 1));
  const load = (s: Side, ms: number) =>
    runWrk({ url: s.url, concurrency, durationMs: ms, bodies, expect: '"demo"', headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', 'MCP-Protocol-Version': BENCH_PROTOCOL_VERSION, Authorization: `Bearer ${s.key}` } });
  try {
    for (const s of sides) await load(s, prewarmMs);
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? sides : [...sides].reverse();
      for (const s of order) {
        const c0 = procCpuSplitMs(s.child.pid!);
        const run = await load(s, durationMs);
        const c1 = procCpuSplitMs(s.child.pid!);
        const us = ((c1.user + c1.system - c0.user - c0.system) * 1000) / run.ops;
        s.us.push(us);
        s.sys.push(((c1.system - c0.system) * 1000) / run.ops);
        s.rps.push((run.ops * 1000) / run.elapsedMs);
        console.log(`  round ${r + 1}/${rounds} ${s.name}: ${Math.round((run.ops * 1000) / run.elapsedMs)} calls/s, ${round(us, 1)} µs/call, load ${loadavg()[0].toFixed(2)}`);
      }
    }
  } finally {
    for (const s of sides) s.child.kill('SIGTERM');
  }
  console.log(table(['side', 'calls/s', 'µs/call median (range)', 'kernel µs'], sides.map((s) => [s.name, Math.round(median(s.rps)), `${round(median(s.us), 1)} (${round(Math.min(...s.us), 1)}–${round(Math.max(...s.us), 1)})`, round(median(s.sys), 1)])));
  if (sides.length === 2) {
    const pairs = sides[0].us.map((b, i) => sides[1].us[i] / b);
    console.log(`after/before, paired by round: ${round(median(pairs), 3)}× (rounds ${pairs.map((p) => round(p, 2)).join(', ')})`);
  }
  emitResult('edge-cpu', { concurrency, rounds, durationMs, sides: Object.fromEntries(sides.map((s) => [s.name, { us: s.us, sys: s.sys, rps: s.rps }])) });
}

void main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
