/**
 * Where a gateway's CPU per uncached point read goes by thread and mode (issue 28, task h28l): the
 * gateway (`interlock serve` of this checkout, or of BEFORE_ROOT too, alternating rounds) under wrk
 * at BENCH_CONCURRENCY (default 8) for BENCH_SECONDS (default 5) per round, BENCH_ROUNDS (default 3)
 * rounds after a 3 s warm-up; per round the user and system CPU of every thread
 * (/proc/PID/task/TID/stat, 10 ms ticks) over the run ÷ the calls served, grouped by thread name
 * (`node` is the main thread: JavaScript, node:http, pg, and the kernel work of its own system
 * calls; `V8 Worker`/`V8 DefaultWorke` are V8's helpers: concurrent marking, scavenging and
 * compiling; `libuv-worker` the thread pool; `node` others the inspector and signal threads).
 * Medians of the rounds. The bench's cache time to live is 1 ms, as bench 08's uncached side.
 * Run: `npm run -s build; [BEFORE_ROOT=/path/to/built/checkout] flock /tmp/bench.lock npx tsx bench/thread-cpu.ts`.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import path from 'node:path';
import { gatewayVars, ROOT, startServe, withBenchEnv, type GatewayChild } from './lib/env';
import { BENCH_PROTOCOL_VERSION } from './lib/http';
import { POINT_SQL, TRACKS } from './lib/point-read';
import { envInt, envSeconds, machineLine, table } from './lib/stats';
import { runWrk } from './lib/wrk';

const TICK_MS = 1000 / 100;

/** Per thread name: user and system ticks summed over the threads of that name. */
function threadTicks(pid: number): Map<string, { user: number; sys: number }> {
  const out = new Map<string, { user: number; sys: number }>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    } catch {
      continue;
    }
    const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const key = tid === String(pid) ? 'main' : name.replace(/[0-9]+$/, '').trim();
    const t = out.get(key) ?? { user: 0, sys: 0 };
    t.user += Number(f[11]);
    t.sys += Number(f[12]);
    out.set(key, t);
  }
  return out;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function main(): Promise<void> {
  const c = envInt('BENCH_CONCURRENCY', 8);
  const durationMs = envSeconds('BENCH_SECONDS', 5);
  const rounds = envInt('BENCH_ROUNDS', 3);
  const roots: Array<[string, string]> = process.env.BEFORE_ROOT ? [['before', path.resolve(process.env.BEFORE_ROOT)], ['after', ROOT]] : [['this', ROOT]];
  console.log(`# thread-cpu: uncached point read, c=${c}, ${rounds} rounds × ${durationMs / 1000} s, ${roots.map(([n, r]) => `${n}=${r}`).join(', ')}`);
  console.log(machineLine());
  await withBenchEnv({}, async (env) => {
    const vars = gatewayVars(env.controlUrl, { cacheTtlMs: 1 });
    const gws = new Map<string, GatewayChild>();
    for (const [name, root] of roots) gws.set(name, await startServe(vars, [], root));
    const headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', 'MCP-Protocol-Version': BENCH_PROTOCOL_VERSION, Authorization: `Bearer ${env.apiKey}` };
    const bodies = Array.from({ length: 256 }, (_, i) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: POINT_SQL, params: [1 + ((i * 7919) % TRACKS)] } } }));
    const run = (gw: GatewayChild, ms: number) => runWrk({ url: gw.url, concurrency: c, durationMs: ms, bodies, headers, expect: '"row_count":1,' });
    try {
      for (const gw of gws.values()) await run(gw, 3000);
      const per = new Map<string, Array<Map<string, number>>>();
      for (let r = 0; r < rounds; r++) {
        const order = r % 2 === 0 ? [...gws] : [...gws].reverse();
        for (const [name, gw] of order) {
          const before = threadTicks(gw.pid);
          const w = await run(gw, durationMs);
          const after = threadTicks(gw.pid);
          const row = new Map<string, number>();
          const usPerCall = (ticks: number) => (ticks * TICK_MS * 1000) / w.ops;
          let total = 0;
          for (const [k, a] of after) {
            const b = before.get(k) ?? { user: 0, sys: 0 };
            row.set(`${k} user`, usPerCall(a.user - b.user));
            row.set(`${k} sys`, usPerCall(a.sys - b.sys));
            total += usPerCall(a.user - b.user + a.sys - b.sys);
          }
          row.set('all', total);
          row.set('calls/s', (w.ops * 1000) / w.elapsedMs);
          (per.get(name) ?? per.set(name, []).get(name)!).push(row);
          console.log(`round ${r + 1} ${name}: ${row.get('calls/s')!.toFixed(0)} calls/s, ${total.toFixed(1)} µs per call, main ${(row.get('main user')! + row.get('main sys')!).toFixed(1)} (user ${row.get('main user')!.toFixed(1)}, sys ${row.get('main sys')!.toFixed(1)}); load ${loadavg()[0].toFixed(1)}`);
        }
      }
      const keys = [...new Set([...per.values()].flatMap((rs) => rs.flatMap((r) => [...r.keys()])))].filter((k) => [...per.values()].some((rs) => median(rs.map((r) => r.get(k) ?? 0)) >= 0.5));
      console.log('\nµs of CPU per call (median of rounds), by thread and mode:');
      console.log(table(['thread', ...per.keys()], keys.map((k) => [k, ...[...per.values()].map((rs) => median(rs.map((r) => r.get(k) ?? 0)).toFixed(1))])));
    } finally {
      for (const gw of gws.values()) await gw.stop();
    }
  });
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
