/**
 * What a node/V8 flag costs on the hot path (issue 10, the semi-space trade): the same uncached
 * read against gateways of this checkout started with different node flags, one process each on
 * the same control database, alternating rounds at BENCH_CONCURRENCY (default 8). Prints calls per
 * second, CPU milliseconds per call of each gateway process (and of the client and databases), the
 * machine's busy share, and each gateway's RSS after the runs.
 *
 * BENCH_FLAG_SETS: flag sets separated by `;`, each a space-separated list; an empty set is the
 * default (default: `;--max-semi-space-size=2;--max-semi-space-size=4`).
 * BENCH_STATEMENT: `point` (default: the primary-key read of scenario 1, one row) or `rows`
 * (1,000 rows of scenario 5's statement, ≈ 70 KB of JSON per answer: more young-generation churn
 * per call).
 * BENCH_TRACE_GC=1 adds `--trace-gc` to every side and sums, per side, the collections V8 reports
 * on the gateway's stdout and their pause milliseconds (main thread) per call: the direct measure of
 * what a smaller young generation costs, less noisy than CPU time on a busy machine.
 * Noisy on a shared machine: read the CPU per call, and the ratio of each side to the default.
 * Run: `npx tsx bench/node-flags.ts`.
 */
import pg from 'pg';
import { interleave } from './lib/load';
import { concurrencyLevels, emitResult, envInt, envSeconds, machineLine, round, table } from './lib/stats';
import { gatewayVars, procMemory, startServe, withBenchEnv, type GatewayChild } from './lib/env';
import { CpuMeter, procCpuMs } from './lib/cpu';
import { CpuLedger, pointStatement, preflight, runGatewayStatement, SOURCE_POOL_SIZE, type LoadStatement } from './lib/point-read';
import { LARGE_SQL } from './lib/memory';

/** Rows of the `rows` statement. */
const ROWS = 1000;

/** The statement under load, from BENCH_STATEMENT. */
function statement(): { name: string; st: LoadStatement } {
  const which = process.env.BENCH_STATEMENT ?? 'point';
  if (which === 'point') return { name: 'uncached point read (1 row)', st: pointStatement() };
  if (which === 'rows') return { name: `uncached ${ROWS}-row read`, st: { sql: LARGE_SQL.replace('LIMIT 100000', `LIMIT ${ROWS}`), params: () => [], rows: ROWS } };
  throw new Error(`BENCH_STATEMENT must be point or rows, not ${which}`);
}

async function main(): Promise<void> {
  const sets = (process.env.BENCH_FLAG_SETS ?? ';--max-semi-space-size=2;--max-semi-space-size=4').split(';').map((s) => s.split(' ').filter(Boolean));
  const names = sets.map((f) => (f.length ? f.join(' ') : 'default'));
  const traceGc = process.env.BENCH_TRACE_GC === '1';
  const durationMs = envSeconds('BENCH_SECONDS', 4);
  const warmupMs = envSeconds('BENCH_WARMUP_SECONDS', 1);
  const rounds = envInt('BENCH_ROUNDS', 2);
  const levels = concurrencyLevels([8]);
  const { name: stName, st } = statement();
  console.log(`# node-flags: ${stName} against gateways started with: ${names.join(' | ')}`);
  console.log(machineLine());
  console.log(`runs: ${rounds} rounds × concurrency ${levels.join(', ')} × ${durationMs / 1000} s (+${warmupMs / 1000} s warm-up), sides alternating`);
  await withBenchEnv({}, async (env) => {
    // Cache time to live 1 ms: every read misses, and the rows statement's repeated text still runs.
    const vars = gatewayVars(env.controlUrl, { cacheTtlMs: 1 });
    const gws: Array<{ name: string; gw: GatewayChild }> = [];
    for (let i = 0; i < sets.length; i++) gws.push({ name: names[i], gw: await startServe(vars, traceGc ? [...sets[i], '--trace-gc'] : sets[i]) });
    // --trace-gc lines, e.g. "[pid:0x…]  1234 ms: Scavenge 9.1 (12.3) -> 8.0 (12.3) MB, 0.61 / 0.00 ms  (average mu = …".
    const gc = new Map(gws.map(({ name }) => [name, { counting: false, tail: '', scavenges: 0, scavengeMs: 0, markCompacts: 0, markCompactMs: 0, calls: 0 }]));
    for (const { name, gw } of gws)
      gw.proc.stdout!.on('data', (chunk: Buffer) => {
        const g = gc.get(name)!;
        const text = g.tail + chunk.toString();
        const cut = text.lastIndexOf('\n') + 1;
        g.tail = text.slice(cut);
        if (!g.counting) return;
        for (const m of text.slice(0, cut).matchAll(/ms: (Scavenge|Mark-Compact|Mark-sweep)[^\n]*?MB, ([0-9.]+) \/ ([0-9.]+) ms/g)) {
          if (m[1] === 'Scavenge') {
            g.scavenges++;
            g.scavengeMs += Number(m[2]);
          } else {
            g.markCompacts++;
            g.markCompactMs += Number(m[2]);
          }
        }
      });
    const pool = new pg.Pool({ ...env.reader, max: SOURCE_POOL_SIZE });
    try {
      for (const { gw } of gws) await preflight(gw.url, env.apiKey, pool);
      const controlDb = { databases: [new URL(env.controlUrl).pathname.slice(1)] };
      const ledger = new CpuLedger();
      const meters = new Map(gws.map(({ name, gw }) => [name, new CpuMeter({ client: { self: true }, gateway: { pids: [gw.pid] }, controlDb, sourceDb: { databases: [env.demo.databaseName] } })]));
      const res = await interleave(
        gws.map(({ name, gw }) => ({
          name,
          run: async (c: number) => {
            const cpu0 = procCpuMs(gw.pid);
            gc.get(name)!.counting = true;
            const r = await ledger.metered(meters.get(name)!, name, c, () => runGatewayStatement([gw.url], env.apiKey, c, st, { durationMs, warmupMs }));
            gc.get(name)!.counting = false;
            gc.get(name)!.calls += r.allOps;
            console.log(`    ${name}: gateway ${((procCpuMs(gw.pid) - cpu0) / r.allOps).toFixed(3)} ms CPU per call this round`);
            return r;
          },
        })),
        levels,
        rounds,
        (l) => console.log(l),
      );
      for (const m of meters.values()) await m.close();
      const base = names[0];
      console.log('');
      console.log(
        table(
          ['conc', 'flags', 'calls/s', `vs ${base}`, 'gateway CPU ms/call', `vs ${base}`, 'gateway RSS after'],
          levels.flatMap((c) =>
            gws.map(({ name, gw }) => {
              const f = res.get(name)!.get(c)!;
              const cpu = ledger.perOp(name, c).gateway;
              return [
                String(c),
                name,
                String(round(f.throughput, 0)),
                `${(f.throughput / res.get(base)!.get(c)!.throughput).toFixed(3)}×`,
                cpu.toFixed(3),
                `${(cpu / ledger.perOp(base, c).gateway).toFixed(3)}×`,
                `${(procMemory(gw.pid).rssKiB / 1024).toFixed(1)} MiB`,
              ];
            }),
          ),
        ),
      );
      console.log('CPU milliseconds per call (warm-up included):');
      console.log(ledger.table(names, levels));
      if (traceGc) {
        console.log('V8 collections in the gateway during the runs (--trace-gc; main-thread pause):');
        console.log(
          table(
            ['flags', 'calls', 'scavenges', 'calls per scavenge', 'scavenge ms/call', 'mark-compacts', 'mark-compact ms/call'],
            gws.map(({ name }) => {
              const g = gc.get(name)!;
              return [name, String(g.calls), String(g.scavenges), (g.calls / Math.max(1, g.scavenges)).toFixed(1), (g.scavengeMs / g.calls).toFixed(4), String(g.markCompacts), (g.markCompactMs / g.calls).toFixed(4)];
            }),
          ),
        );
      }
      emitResult('node-flags', {
        statement: process.env.BENCH_STATEMENT ?? 'point',
        rounds,
        durationMs,
        gc: traceGc ? Object.fromEntries([...gc].map(([k, { tail: _t, counting: _c, ...g }]) => [k, g])) : undefined,
        sides: Object.fromEntries(
          gws.map(({ name, gw }) => [
            name,
            Object.fromEntries(levels.map((c) => [c, { callsPerSecond: round(res.get(name)!.get(c)!.throughput, 1), cpuMsPerCall: ledger.perOp(name, c), machineBusy: ledger.machineBusy(name, c), rssMiB: round(procMemory(gw.pid).rssKiB / 1024, 1) }])),
          ]),
        ),
      });
    } finally {
      await pool.end();
      for (const { gw } of gws) await gw.stop();
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
