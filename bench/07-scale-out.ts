/**
 * Scenario 7: scale-out. One, two and three `interlock serve` processes on one control database,
 * behind a round-robin in the bench (each call goes to the next process), at concurrency 32
 * (BENCH_SCALE_CONCURRENCY), for uncached and cached point reads (scenarios 1 and 2's load); the
 * direct-`pg` run at the same concurrency is measured alongside. Reports throughput, the ratio to
 * one process, latency, CPU per request by process group and how busy the whole machine was — on
 * two cores the shared CPU and the control database bound it, not the number of gateways.
 * Run: `npx tsx bench/07-scale-out.ts`.
 */
import pg from 'pg';
import { interleave, type Side } from './lib/load';
import { McpHttpClient, structuredResult } from './lib/http';
import { emitResult, envInt, envSeconds, machineLine, ratio, round, table } from './lib/stats';
import { gatewayVars, startServe, withBenchEnv, type GatewayChild } from './lib/env';
import { WaitSampler } from './lib/cpu';
import { CpuLedger, pointReadMeter, POINT_SQL, preflight, runDirectPointReads, runGatewayPointReads, SOURCE_POOL_SIZE } from './lib/point-read';

const MAX_PROCESSES = 3;

async function main(): Promise<void> {
  const durationMs = envSeconds('BENCH_SECONDS', 4);
  const warmupMs = envSeconds('BENCH_WARMUP_SECONDS', 1);
  const rounds = envInt('BENCH_ROUNDS', 2);
  const c = envInt('BENCH_SCALE_CONCURRENCY', 32);
  console.log(`# 7-scale-out: 1, 2 and ${MAX_PROCESSES} gateway processes, one control database, round-robin, concurrency ${c}`);
  console.log(machineLine());
  console.log(`runs: ${rounds} rounds × ${durationMs / 1000} s (+${warmupMs / 1000} s warm-up) per configuration, configurations alternating`);
  const result: Record<string, unknown> = { concurrency: c, rounds, durationMs, warmupMs };
  await withBenchEnv({}, async (env) => {
    const pool = new pg.Pool({ ...env.reader, max: envInt('BENCH_PG_POOL', SOURCE_POOL_SIZE), application_name: 'interlock-bench-direct' });
    try {
      for (const cached of [false, true]) {
        const mode = cached ? 'cached' : 'uncached';
        const hot = cached ? 64 : undefined;
        const gws: GatewayChild[] = [];
        try {
          for (let i = 0; i < MAX_PROCESSES; i++) gws.push(await startServe(gatewayVars(env.controlUrl, { cacheTtlMs: cached ? 600_000 : 1 })));
          for (const gw of gws) {
            await preflight(gw.url, env.apiKey, pool);
            if (cached) {
              const warm = new McpHttpClient(gw.url, { apiKey: env.apiKey, maxSockets: 1 });
              for (let id = 1; id <= hot!; id++) structuredResult(await warm.callTool('interlock_query', { source_id: 'chinook', sql: POINT_SQL, params: [id] }));
              warm.close();
            }
          }
          console.log(`\n## ${mode} point reads`);
          const meter = pointReadMeter(env, gws.map((g) => g.pid));
          const waits = new WaitSampler(new URL(env.controlUrl).pathname.slice(1));
          const ledger = new CpuLedger(waits);
          const sides: Side[] = [
            { name: 'direct', run: (cc) => ledger.metered(meter, 'direct', cc, () => runDirectPointReads(pool, cc, { durationMs, warmupMs, hot })) },
            ...Array.from({ length: MAX_PROCESSES }, (_, i) => ({
              name: `${i + 1} process${i ? 'es' : ''}`,
              run: (cc: number) => ledger.metered(meter, `${i + 1} process${i ? 'es' : ''}`, cc, () => runGatewayPointReads(gws.slice(0, i + 1).map((g) => g.url), env.apiKey, cc, { durationMs, warmupMs, hot })),
            })),
          ];
          const res = await interleave(sides, [c], rounds, (l) => console.log(l));
          await meter.close();
          await waits.close();
          const direct = res.get('direct')!.get(c)!;
          const one = res.get('1 process')!.get(c)!;
          const rows = sides.slice(1).map((s, i) => {
            const f = res.get(s.name)!.get(c)!;
            const cpu = ledger.perOp(s.name, c);
            return {
              processes: i + 1,
              ops_s: round(f.throughput, 0),
              ratio_to_one: round(f.throughput / one.throughput, 3),
              ratio_to_direct: round(f.throughput / direct.throughput, 3),
              p50_ms: round(f.latency.p50, 2),
              p99_ms: round(f.latency.p99, 2),
              cpu_ms_per_request: cpu,
              machine_busy: ledger.machineBusy(s.name, c),
              control_db_waits: ledger.waitShares(s.name, c),
            };
          });
          console.log('');
          console.log(
            table(
              ['processes', 'ops/s', 'vs 1 process', 'vs pg direct', 'p50', 'p99', 'gateway CPU/req', 'control DB CPU/req', 'machine busy'],
              rows.map((r) => [String(r.processes), String(r.ops_s), ratio(r.ratio_to_one), ratio(r.ratio_to_direct), `${r.p50_ms} ms`, `${r.p99_ms} ms`, `${(r.cpu_ms_per_request.gateway ?? NaN).toFixed(3)} ms`, `${(r.cpu_ms_per_request.controlDb ?? NaN).toFixed(3)} ms`, `${(r.machine_busy * 100).toFixed(0)}%`]),
            ),
          );
          console.log(`pg direct at c=${c}: ${direct.throughput.toFixed(0)} ops/s, p50 ${direct.latency.p50.toFixed(2)} ms (machine busy ${(ledger.machineBusy('direct', c) * 100).toFixed(0)}%)`);
          console.log('CPU milliseconds per request:');
          console.log(ledger.table(sides.map((s) => s.name), [c]));
          console.log('control database, active backends and what they wait on (pg_stat_activity every 25 ms):');
          for (const s of sides.slice(1)) console.log(`  ${s.name}: ${ledger.waitLine(s.name, c)}`);
          result[mode] = { rows, direct: { ops_s: round(direct.throughput, 0), p50_ms: round(direct.latency.p50, 2), cpu_ms_per_request: ledger.perOp('direct', c), machine_busy: ledger.machineBusy('direct', c) } };
        } finally {
          for (const g of gws) await g.stop();
        }
      }
    } finally {
      await pool.end();
    }
  });
  emitResult('7-scale-out', result);
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
