/**
 * A `perf record` of one gateway under the uncached point read at concurrency 8 driven by `wrk`
 * (issue 28, task p49): the native view the V8 profiler lacks — V8's runtime and builtins, the
 * garbage collector, libuv, node's C++ and the kernel's work for the gateway's own system calls —
 * with JavaScript frames named (`--perf-basic-prof`). Starts `interlock serve` of this checkout (or
 * PERF_ROOT) with a 1 ms result-cache time to live (bench 08's uncached side), warms it 3 s, then
 * samples the main process (`perf record -F PERF_FREQ -g -p PID`, default 999 Hz) for BENCH_SECONDS
 * (default 8) while wrk runs, and writes the data to PERF_OUT (default /tmp/perf-gateway.data).
 * PERF_SIDE=floor samples the governed floor instead (bench/lib/node-floor-server.ts with InterLock's
 * preludes, startup options and audit event, as bench 08's `node-floor-governed`), after the gateway's
 * preflight read, so the two profiles can be compared function by function.
 * PERF_NODE_FLAGS replaces the node flags of the sampled process (default `--perf-basic-prof`; e.g.
 * `--log-deopt --logfile=/tmp/v8.log --no-logfile-per-isolate` to count deoptimisations under load),
 * and PERF_FREQ=0 runs the load without `perf record`.
 * Prints the calls served and the per-call CPU from /proc (utime+stime); read the samples with
 * `perf report -i PERF_OUT --no-children --sort sym` (self) or `--children` (inclusive).
 * Run: `npm run -s build; flock /tmp/bench.lock npx tsx bench/perf-record.ts`.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { gatewayVars, ROOT, startServe, startTsChild, withBenchEnv } from './lib/env';
import { BENCH_PROTOCOL_VERSION } from './lib/http';
import { POINT_SQL, preflight, SOURCE_POOL_SIZE, TRACKS } from './lib/point-read';
import { governedFloorConfig } from './lib/governed-floor';
import { FLOOR_TOOL } from './lib/node-floor-server';
import { envInt, envSeconds, machineLine } from './lib/stats';
import { runWrk } from './lib/wrk';

/** utime + stime of a process in clock ticks (10 ms). */
function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]);
}

async function main(): Promise<void> {
  const c = envInt('BENCH_CONCURRENCY', 8);
  const durationMs = envSeconds('BENCH_SECONDS', 8);
  const root = path.resolve(process.env.PERF_ROOT ?? ROOT);
  const out = path.resolve(process.env.PERF_OUT ?? '/tmp/perf-gateway.data');
  const freq = String(envInt('PERF_FREQ', 999));
  const flags = (process.env.PERF_NODE_FLAGS ?? '--perf-basic-prof').split(' ').filter(Boolean);
  console.log(`# perf-record: uncached point read, c=${c}, ${durationMs / 1000} s, ${process.env.PERF_SIDE === 'floor' ? 'governed floor' : `gateway of ${root}`} → ${out}`);
  console.log(machineLine());
  await withBenchEnv({}, async (env) => {
    const floor = process.env.PERF_SIDE === 'floor';
    let gw = await startServe(gatewayVars(env.controlUrl, { cacheTtlMs: 1 }), floor ? [] : flags, root);
    let headers: Record<string, string> = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', 'MCP-Protocol-Version': BENCH_PROTOCOL_VERSION, Authorization: `Bearer ${env.apiKey}` };
    let bodies = Array.from({ length: 256 }, (_, i) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: POINT_SQL, params: [1 + ((i * 7919) % TRACKS)] } } }));
    let expect = '"row_count":1,';
    if (floor) {
      const pool = new pg.Pool({ ...env.reader, max: 1 });
      await preflight(gw.url, env.apiKey, pool);
      await pool.end();
      await gw.stop();
      const floorVars = { BENCH_FLOOR_READER: JSON.stringify(env.reader), BENCH_FLOOR_SQL: POINT_SQL, BENCH_FLOOR_POOL: String(SOURCE_POOL_SIZE), BENCH_FLOOR_AUDIT_URL: env.controlUrl };
      gw = await startTsChild('bench/lib/node-floor-server.ts', { ...floorVars, BENCH_FLOOR_GOVERNED: JSON.stringify(await governedFloorConfig(env.db, env.controlUrl, 'chinook', POINT_SQL, 2)) }, flags);
      headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', 'MCP-Protocol-Version': BENCH_PROTOCOL_VERSION };
      bodies = Array.from({ length: 256 }, (_, i) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: FLOOR_TOOL, arguments: { track_id: 1 + ((i * 7919) % TRACKS) } } }));
      expect = '"row_count":1';
    }
    const run = (ms: number) => runWrk({ url: gw.url, concurrency: c, durationMs: ms, bodies, headers, expect });
    try {
      await run(3000);
      const rec = freq === '0' ? null : spawn('perf', ['record', '-q', '-F', freq, '-g', '-p', String(gw.pid), '-o', out], { stdio: 'ignore' });
      if (rec) await new Promise((r) => setTimeout(r, 300));
      const t0 = cpuTicks(gw.pid);
      const w = await run(durationMs);
      const t1 = cpuTicks(gw.pid);
      if (rec) {
        rec.kill('SIGINT');
        await new Promise((r) => rec.once('exit', r));
      }
      console.log(`${w.ops} calls, ${((w.ops * 1000) / w.elapsedMs).toFixed(0)} calls/s, ${(((t1 - t0) * 10 * 1000) / w.ops).toFixed(1)} µs CPU per call (utime+stime); load ${loadavg()[0].toFixed(1)}`);
    } finally {
      await gw.stop();
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
