/**
 * One gateway process against N worker processes over time (issue 28, the multi-process question):
 * `interlock serve` (compiled, cache time to live 1 ms: every call misses) and the node:cluster
 * prototype bench/lib/cluster-serve.ts with BENCH_WORKERS (2) workers on one port, both on one
 * fresh bench control database, driven by wrk with interlock_query on the point read (64 track ids)
 * at BENCH_CONCURRENCY (32), BENCH_ROUNDS (10) alternating rounds of BENCH_SECONDS (3) each and no
 * pre-warm, so the first rounds show each side's warm-up (every worker warms on its own share).
 * Prints per round calls/s, CPU µs per call of the side's processes (/proc; the cluster's primary
 * and workers summed), the control database's commits and audit_batches rows per call (pg_stat_*,
 * read 1.1 s after the round: statistics are flushed at most once a second) and the 1-minute load average, then the paired ratios of the rounds after
 * the first BENCH_SKIP (4). Run: `npm run -s build && flock /tmp/bench.lock npx tsx bench/cluster-steady.ts`.
 */
import { loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { procCpuMs, processTree } from './lib/cpu';
import { gatewayVars, startServe, startTsChild, withBenchEnv } from './lib/env';
import { BENCH_PROTOCOL_VERSION } from './lib/http';
import { POINT_SQL } from './lib/point-read';
import { concurrencyLevels, envInt, envSeconds, machineLine, median } from './lib/stats';
import { runWrk } from './lib/wrk';

async function main(): Promise<void> {
  const workers = envInt('BENCH_WORKERS', 2);
  const rounds = envInt('BENCH_ROUNDS', 10);
  const skip = envInt('BENCH_SKIP', 4);
  const durationMs = envSeconds('BENCH_SECONDS', 3);
  const [c] = concurrencyLevels([32]);
  console.log(`# cluster-steady: 1 process vs ${workers} workers, c=${c}, ${rounds} × ${durationMs / 1000} s alternating, no pre-warm`);
  console.log(machineLine());
  await withBenchEnv({}, async (env) => {
    const control = new pg.Client({ connectionString: env.controlUrl, application_name: 'interlock-bench-counters' });
    await control.connect();
    // Commits and audit batch rows of the control database so far (a fresh snapshot each time).
    const counters = async () => {
      await control.query('SELECT pg_stat_clear_snapshot()');
      const r = await control.query<{ c: string; b: string }>("SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS c, (SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE relname = 'audit_batches') AS b");
      return { commits: Number(r.rows[0].c), batches: Number(r.rows[0].b) };
    };
    const vars = gatewayVars(env.controlUrl, { cacheTtlMs: 1 });
    const one = await startServe(vars);
    const multi = await startTsChild('bench/lib/cluster-serve.ts', { ...vars, BENCH_CLUSTER_WORKERS: String(workers) });
    try {
      const headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', 'MCP-Protocol-Version': BENCH_PROTOCOL_VERSION, Authorization: `Bearer ${env.apiKey}` };
      const bodies = Array.from({ length: 64 }, (_, i) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: POINT_SQL, params: [1 + i] } } }));
      const sides = { one, [`x${workers}`]: multi };
      const per: Record<string, Array<{ ops: number; us: number }>> = {};
      for (let r = 0; r < rounds; r++) {
        for (const [name, gw] of Object.entries(sides)) {
          await sleep(1100);
          const k0 = await counters();
          const pids = processTree(gw.pid);
          const c0 = pids.map(procCpuMs);
          const x = await runWrk({ url: gw.url, concurrency: c, durationMs, bodies, headers, expect: '"row_count":1,' });
          const cpu = pids.reduce((a, p, i) => a + procCpuMs(p) - c0[i], 0);
          await sleep(1100);
          const k1 = await counters();
          const row = { ops: (x.ops * 1000) / x.elapsedMs, us: (cpu * 1000) / x.allOps };
          (per[name] ??= []).push(row);
          console.log(`  round ${r + 1}/${rounds} ${name}: ${row.ops.toFixed(0)} calls/s, ${row.us.toFixed(0)} µs CPU per call, control DB ${((k1.commits - k0.commits) / x.allOps).toFixed(3)} commits and ${((k1.batches - k0.batches) / x.allOps).toFixed(3)} audit batches per call, load ${loadavg()[0].toFixed(1)}`);
        }
      }
      const m = `x${workers}`;
      const calls = per[m].slice(skip).map((x, i) => x.ops / per.one[skip + i].ops);
      const cpu = per[m].slice(skip).map((x, i) => x.us / per.one[skip + i].us);
      console.log(`\nrounds ${skip + 1}–${rounds}, paired ${m} ÷ one: calls/s median ${median(calls).toFixed(2)}× (${calls.map((v) => v.toFixed(2)).join(', ')}); CPU per call median ${median(cpu).toFixed(2)}× (${cpu.map((v) => v.toFixed(2)).join(', ')})`);
    } finally {
      await control.end();
      await one.stop();
      await multi.stop();
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
