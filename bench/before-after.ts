/**
 * The same uncached point read against two checkouts' gateways in one run (issue 13, before/after):
 * `BEFORE_ROOT` (default /work/main) and this checkout, one process each on the same control
 * database, alternating rounds at BENCH_CONCURRENCY (default 8). Prints calls per second and CPU
 * milliseconds per call of each gateway process and of the control database's backends. Noisy on
 * a shared machine: read the ratio. `BENCH_LOAD=tools-list` drives tools/list instead of the point
 * read (the HTTP edge alone: no source, no audit). Run: `npx tsx bench/before-after.ts`.
 */
import pg from 'pg';
import path from 'node:path';
import { interleave } from './lib/load';
import { runToolsList } from './lib/http';
import { concurrencyLevels, envInt, envSeconds, machineLine, round, table } from './lib/stats';
import { gatewayVars, ROOT, startServe, withBenchEnv } from './lib/env';
import { CpuMeter } from './lib/cpu';
import { CpuLedger, preflight, runGatewayPointReads, SOURCE_POOL_SIZE } from './lib/point-read';

async function main(): Promise<void> {
  const before = path.resolve(process.env.BEFORE_ROOT ?? '/work/main');
  const durationMs = envSeconds('BENCH_SECONDS', 4);
  const warmupMs = envSeconds('BENCH_WARMUP_SECONDS', 1);
  const rounds = envInt('BENCH_ROUNDS', 2);
  const levels = concurrencyLevels([8]);
  const toolsList = process.env.BENCH_LOAD === 'tools-list';
  console.log(`# before-after: ${toolsList ? 'tools/list' : 'uncached point read'}, gateway of ${before} (before) vs ${ROOT} (after)`);
  console.log(machineLine());
  await withBenchEnv({}, async (env) => {
    const vars = gatewayVars(env.controlUrl, { cacheTtlMs: 1 });
    const gws = { before: await startServe(vars, [], before), after: await startServe(vars, [], ROOT) };
    const pool = new pg.Pool({ ...env.reader, max: SOURCE_POOL_SIZE });
    try {
      for (const gw of Object.values(gws)) await preflight(gw.url, env.apiKey, pool);
      const controlDb = { databases: [new URL(env.controlUrl).pathname.slice(1)] };
      const ledger = new CpuLedger();
      const meters = Object.fromEntries(Object.entries(gws).map(([k, gw]) => [k, new CpuMeter({ client: { self: true }, gateway: { pids: [gw.pid] }, controlDb, sourceDb: { databases: [env.demo.databaseName] } })]));
      const res = await interleave(
        Object.entries(gws).map(([name, gw]) => ({ name, run: (c: number) => ledger.metered(meters[name], name, c, () => (toolsList ? runToolsList(gw.url, env.apiKey, c, { durationMs, warmupMs }) : runGatewayPointReads([gw.url], env.apiKey, c, { durationMs, warmupMs }))) })),
        levels,
        rounds,
        (l) => console.log(l),
      );
      for (const m of Object.values(meters)) await m.close();
      console.log(table(['conc', 'before ops/s', 'after ops/s', 'after/before'], levels.map((c) => [c, round(res.get('before')!.get(c)!.throughput, 0), round(res.get('after')!.get(c)!.throughput, 0), `${(res.get('after')!.get(c)!.throughput / res.get('before')!.get(c)!.throughput).toFixed(2)}×`])));
      console.log('CPU milliseconds per call:');
      console.log(ledger.table(['before', 'after'], levels));
    } finally {
      await pool.end();
      for (const gw of Object.values(gws)) await gw.stop();
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
