/**
 * The audit writer's batch shape under concurrency (issue 28 item 4), in process: BENCH_CONCURRENCY
 * (8,32) closed-loop callers each record a point-read event through GroupCommitAuditSink on a pool of
 * two connections (as the gateway's openAuditPool), waiting BENCH_THINK_MS (2 ms: the rest of a call)
 * between events, for BENCH_SECONDS (3) per variant and round; variants alternate within each of
 * BENCH_ROUNDS (5) rounds. Variants (BENCH_OVERLAP, default `0,auto`): overlapAfterMs 0 (the second
 * lane starts at once, the policy before h28b), `auto` (only once the batch in flight has lasted twice
 * the typical batch, the default since h28b), or a fixed number of ms; BENCH_LANE_START (default 1)
 * sets laneStartEvents for every variant (h28c measured 1, 2, 3: no gain). Prints, medians over rounds:
 * the control database's backend CPU per event (/proc of the pool's backends), events per batch,
 * record() latency p50 / p99 (ms), events per second.
 * Run: `npx tsx bench/audit-lanes.ts`.
 */
import pg from 'pg';
import { runMigrations } from '../src/control/db';
import { GroupCommitAuditSink, openAuditPool } from '../src/audit/writer';
import { createTempDatabase } from '../test/helpers/pg';
import { toolCallEvent } from '../test/helpers/audit-events';
import { procCpuMs } from './lib/cpu';
import { concurrencyLevels, envInt, envSeconds, machineLine, quantile, runBench, table } from './lib/stats';

async function main(): Promise<void> {
  const rounds = envInt('BENCH_ROUNDS', 5);
  const seconds = envSeconds('BENCH_SECONDS', 3);
  const think = envInt('BENCH_THINK_MS', 2);
  const laneStart = envInt('BENCH_LANE_START', 1);
  const variants = (process.env.BENCH_OVERLAP ?? '0,auto').split(',').map((v): number | 'auto' => (v === 'auto' ? 'auto' : Number(v)));
  console.log(`# audit-lanes: control-database CPU per event and record() latency by overlapAfterMs (laneStartEvents ${laneStart}, think ${think} ms)`);
  console.log(machineLine());
  const db = await createTempDatabase('bench_lanes');
  try {
    await runMigrations(db.url);
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    const out: string[][] = [];
    for (const c of concurrencyLevels([8, 32])) {
      const got = new Map<number | 'auto', { cpu: number[]; per: number[]; p50: number[]; p99: number[]; rate: number[] }>();
      for (let r = 0; r < rounds; r++) {
        for (const v of variants) {
          const pool = openAuditPool(db.url, 2000, undefined, 2);
          const sink = new GroupCommitAuditSink(pool, undefined, { commitTimeoutMs: 2000, laneStartEvents: laneStart, overlapAfterMs: v });
          // Open both connections (and the chains' geneses) before measuring.
          await Promise.all(Array.from({ length: 16 }, (_, i) => sink.record(toolCallEvent(`warm_${i}`))));
          const pids = (await admin.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE application_name = 'interlock-audit' AND datname = current_database()")).rows.map((x) => x.pid);
          const batches0 = Number((await admin.query<{ n: string }>('SELECT count(*) AS n FROM audit_batches')).rows[0].n);
          const cpu0 = pids.reduce((a, p) => a + procCpuMs(p), 0);
          const lat: number[] = [];
          const end = Date.now() + seconds;
          let n = 0;
          await Promise.all(
            Array.from({ length: c }, async () => {
              while (Date.now() < end) {
                await new Promise((res) => setTimeout(res, think));
                const t0 = process.hrtime.bigint();
                await sink.record(toolCallEvent(`req_${n++}`));
                lat.push(Number(process.hrtime.bigint() - t0) / 1e6);
              }
            }),
          );
          const cpu = pids.reduce((a, p) => a + procCpuMs(p), 0) - cpu0;
          const batches = Number((await admin.query<{ n: string }>('SELECT count(*) AS n FROM audit_batches')).rows[0].n) - batches0;
          await sink.close();
          await pool.end();
          lat.sort((a, b) => a - b);
          const g = got.get(v) ?? { cpu: [], per: [], p50: [], p99: [], rate: [] };
          g.cpu.push((cpu * 1000) / lat.length);
          g.per.push(lat.length / batches);
          g.p50.push(quantile(lat, 0.5));
          g.p99.push(quantile(lat, 0.99));
          g.rate.push((lat.length * 1000) / seconds);
          got.set(v, g);
        }
      }
      const med = (x: number[]) => [...x].sort((a, b) => a - b)[Math.floor(x.length / 2)];
      for (const [v, g] of got) out.push([String(c), String(v), med(g.cpu).toFixed(1), g.cpu.map((x) => x.toFixed(0)).join(' '), med(g.per).toFixed(2), med(g.p50).toFixed(2), med(g.p99).toFixed(2), med(g.rate).toFixed(0)]);
    }
    console.log(table(['concurrency', 'overlapAfterMs', 'control CPU µs/event', 'rounds', 'events/batch', 'p50 ms', 'p99 ms', 'events/s'], out));
    console.log(machineLine());
    await admin.end();
  } finally {
    await db.drop();
  }
}

runBench(main);
