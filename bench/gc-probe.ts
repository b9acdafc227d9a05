/**
 * What the gateway's young generation keeps per uncached point read (issue 28, h28k): one compiled
 * `interlock serve` per checkout (this one, and BEFORE_ROOT when given, alternating rounds), cache
 * time to live 1 ms (every call misses), driven by `wrk` at c=8 with the 256 point reads of
 * bench/cost-per-call.ts, run with `--trace-gc --trace-gc-nvp`. Per side and round: calls, the
 * gateway's CPU µs per call (/proc), scavenges per 1,000 calls, scavenge pause µs per call, and the
 * bytes each scavenge copied within the young generation (new_space_survived) and promoted to the old
 * one (promoted), per call: what outlives a scavenge is what a scavenge pays for.
 *
 * BENCH_HEAP_SNAPSHOT=DIR also writes one heap snapshot of each side after its last round (under
 * load: taken by SIGUSR2 while wrk runs) into DIR, for bench/heap-summary.ts.
 *
 * Environment: BEFORE_ROOT, BENCH_BEFORE_VARS and BENCH_AFTER_VARS (JSON objects of INTERLOCK_* variables
 * for one side; BENCH_BEFORE_VARS alone runs this tree twice, e.g. `{"INTERLOCK_CACHE_TTL_MS": "0"}`), BENCH_ROUNDS (5), BENCH_SECONDS (4), BENCH_PREWARM_SECONDS (10),
 * BENCH_CONCURRENCY (8). Run: `npm run -s build; flock /tmp/bench.lock npx tsx bench/gc-probe.ts`.
 */
import { readdirSync } from 'node:fs';
import { loadavg } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { CpuMeter } from './lib/cpu';
import { gatewayVars, ROOT, sleep, startServe, withBenchEnv, type GatewayChild } from './lib/env';
import { BENCH_PROTOCOL_VERSION } from './lib/http';
import { POINT_SQL, preflight, SOURCE_POOL_SIZE, TRACKS } from './lib/point-read';
import { concurrencyLevels, envInt, envSeconds, machineLine, median, round, table } from './lib/stats';
import { runWrk, wrkAvailable } from './lib/wrk';

/** Sums of the `--trace-gc-nvp` scavenge lines a process printed so far. */
interface Nvp {
  scavenges: number;
  others: number;
  pauseMs: number;
  copied: number;
  promoted: number;
}

function countNvp(gw: GatewayChild): Nvp {
  const n: Nvp = { scavenges: 0, others: 0, pauseMs: 0, copied: 0, promoted: 0 };
  let rest = '';
  gw.proc.stdout!.on('data', (b: Buffer) => {
    const lines = (rest + b.toString()).split('\n');
    rest = lines.pop() ?? '';
    for (const line of lines) {
      const gc = /\bgc=(\w+)/.exec(line)?.[1];
      if (!gc) continue;
      const num = (k: string) => Number(new RegExp(`\\b${k}=([\\d.]+)`).exec(line)?.[1] ?? 0);
      if (gc === 's') {
        n.scavenges++;
        n.copied += num('new_space_survived');
        n.promoted += num('promoted');
      } else n.others++;
      n.pauseMs += num('pause');
    }
  });
  return n;
}

async function main(): Promise<void> {
  if (!wrkAvailable()) {
    console.log('SKIPPED: wrk is not installed');
    return;
  }
  const beforeVars = process.env.BENCH_BEFORE_VARS ? (JSON.parse(process.env.BENCH_BEFORE_VARS) as Record<string, string>) : null;
  const afterVars = process.env.BENCH_AFTER_VARS ? (JSON.parse(process.env.BENCH_AFTER_VARS) as Record<string, string>) : {};
  const before = process.env.BEFORE_ROOT ? path.resolve(process.env.BEFORE_ROOT) : beforeVars ? ROOT : null;
  const durationMs = envSeconds('BENCH_SECONDS', 4);
  const prewarmMs = envSeconds('BENCH_PREWARM_SECONDS', 10);
  const rounds = envInt('BENCH_ROUNDS', 5);
  const snapDir = process.env.BENCH_HEAP_SNAPSHOT ? path.resolve(process.env.BENCH_HEAP_SNAPSHOT) : null;
  const [c] = concurrencyLevels([8]);
  console.log(`# gc-probe: what outlives a scavenge per uncached point read, c=${c}${before ? `, before = ${before} vs after = ${ROOT}` : ''}`);
  console.log(machineLine());
  console.log(`${rounds} rounds × ${durationMs / 1000} s per side; load average at start ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  await withBenchEnv({}, async (env) => {
    const vars = gatewayVars(env.controlUrl, { cacheTtlMs: 1 });
    const flags = (name: string) => ['--trace-gc', '--trace-gc-nvp', ...(snapDir ? ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${path.join(snapDir, name)}`] : [])];
    const gws: Record<string, GatewayChild> = {};
    const pool = new pg.Pool({ ...env.reader, max: SOURCE_POOL_SIZE });
    try {
      if (snapDir) for (const name of [...(before ? ['before'] : []), 'after']) (await import('node:fs')).mkdirSync(path.join(snapDir, name), { recursive: true });
      if (before) gws.before = await startServe({ ...vars, ...(beforeVars ?? {}) }, flags('before'), before);
      gws.after = await startServe({ ...vars, ...afterVars }, flags('after'), ROOT);
      for (const gw of Object.values(gws)) await preflight(gw.url, env.apiKey, pool);
      const gcs = new Map(Object.entries(gws).map(([name, gw]) => [name, countNvp(gw)]));
      const headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', 'MCP-Protocol-Version': BENCH_PROTOCOL_VERSION, Authorization: `Bearer ${env.apiKey}` };
      const ids = Array.from({ length: 256 }, (_, i) => 1 + ((i * 7919) % TRACKS));
      const bodies = ids.map((id) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: POINT_SQL, params: [id] } } }));
      const drive = (gw: GatewayChild, ms: number) => runWrk({ url: gw.url, concurrency: c, durationMs: ms, bodies, headers, expect: '"row_count":1,' });
      for (const [name, gw] of Object.entries(gws)) console.log(`  pre-warm ${name}: ${(await drive(gw, prewarmMs)).allOps} calls (not measured)`);
      const rows = new Map<string, Array<{ calls: number; cpu: number; sc: number; pause: number; copied: number; promoted: number; others: number }>>();
      for (let r = 0; r < rounds; r++) {
        const order = Object.keys(gws);
        if (r % 2) order.reverse();
        for (const name of order) {
          const gw = gws[name];
          await sleep(500);
          const g0 = { ...gcs.get(name)! };
          const meter = new CpuMeter({ gateway: { pids: [gw.pid] } });
          await meter.start();
          const last = r === rounds - 1 && snapDir;
          const snap = last ? setTimeout(() => gw.proc.kill('SIGUSR2'), durationMs / 2) : null;
          const x = await drive(gw, durationMs);
          if (snap) clearTimeout(snap);
          const cpu = await meter.stop();
          await meter.close();
          const g1 = gcs.get(name)!;
          const n = x.allOps;
          const list = rows.get(name) ?? [];
          list.push({ calls: n / (x.elapsedMs / 1000), cpu: (cpu.gateway * 1000) / n, sc: ((g1.scavenges - g0.scavenges) * 1000) / n, pause: ((g1.pauseMs - g0.pauseMs) * 1000) / n, copied: (g1.copied - g0.copied) / n, promoted: (g1.promoted - g0.promoted) / n, others: g1.others - g0.others });
          rows.set(name, list);
          console.log(`  round ${r + 1} ${name}: ${n} calls, ${round((cpu.gateway * 1000) / n, 0)} µs/call, load ${loadavg()[0].toFixed(2)}`);
        }
      }
      const med = (name: string, k: 'calls' | 'cpu' | 'sc' | 'pause' | 'copied' | 'promoted') => round(median(rows.get(name)!.map((x) => x[k])), k === 'sc' || k === 'pause' ? 1 : 0);
      console.log(`\nper call, median of ${rounds} rounds (scavenge = a young-generation collection; copied and promoted: bytes that outlived one):`);
      console.log(table(['side', 'calls/s', 'gateway µs', 'scavenges /1k calls', 'GC pause µs/call', 'copied B/call', 'promoted B/call', 'other GCs'], Object.keys(gws).map((name) => [name, med(name, 'calls'), med(name, 'cpu'), med(name, 'sc'), med(name, 'pause'), med(name, 'copied'), med(name, 'promoted'), rows.get(name)!.reduce((s, x) => s + x.others, 0)])));
      if (gws.before) {
        const ratios = (k: 'cpu' | 'pause' | 'copied' | 'promoted') => rows.get('after')!.map((a, i) => round(a[k] / rows.get('before')![i][k], 2));
        for (const k of ['cpu', 'pause', 'copied', 'promoted'] as const) console.log(`  after ÷ before per round, ${k}: ${ratios(k).join(', ')} (median ${round(median(ratios(k)), 3)})`);
      }
      if (snapDir) for (const name of Object.keys(gws)) console.log(`  heap snapshot ${name}: ${readdirSync(path.join(snapDir, name)).join(', ')}`);
    } finally {
      await pool.end();
      for (const gw of Object.values(gws)) await gw.stop();
    }
  });
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
