/**
 * Scenario 11 as an A/B of two checkouts (issue 29): the same overload runs against gateways built
 * from BENCH_ROOTS (comma-separated checkout paths, each compiled with `npm run -s build`; default
 * /work/main and this checkout), started side by side and measured in alternating rounds (the order
 * rotates per round), so a shared machine's drift falls on both alike.
 *
 * 1. Refusal alone: each root's gateway with limit 1, no queue and no pause, its slot kept busy by
 *    slow reads, wrk at 32 connections for BENCH_SECONDS: gateway CPU (from /proc) per refusal.
 * 2. Admission on (defaults), one identity, uncached point reads at BENCH_CONNECTIONS (default
 *    16,512): goodput (HTTP 200 with rows per second), refusals, late refusals (429s whose code is
 *    not rate_limited: admitted, then refused by a source), wrk's p50/p99, CPU µs per served call.
 *
 * One JSON line per run (with the 1-minute load average). Not a timed test. Needs /usr/bin/wrk.
 * Run: `BENCH_ROUNDS=3 BENCH_SECONDS=4 npx tsx bench/11-overload-ab.ts`.
 */
import { loadavg } from 'node:os';
import { gatewayVars, ROOT, startServe, withBenchEnv, type BenchEnv, type GatewayChild } from './lib/env';
import { procCpuMs } from './lib/cpu';
import { callHeaders, POINT_BODIES as BODIES, SLOW_BODY } from './lib/overload-calls';
import { envInt } from './lib/stats';
import { runWrkOverload, wrkAvailable } from './lib/wrk';

/** The bench variables of a gateway: client caps lifted, cache off, `extra` on top. */
function vars(env: BenchEnv, extra: Record<string, string> = {}): Record<string, string> {
  return { ...gatewayVars(env.controlUrl, { cacheTtlMs: 0 }), INTERLOCK_STREAMS_PER_IDENTITY: '100000', INTERLOCK_STREAMS_PER_ADDRESS: '100000', INTERLOCK_BODY_READS_PER_ADDRESS: '100000', ...extra };
}

/** wrk against `gw` at `connections` for `seconds`: the answers sorted and the gateway's CPU over the run (ms). */
async function run(gw: GatewayChild, env: BenchEnv, connections: number, seconds: number) {
  const c0 = procCpuMs(gw.pid);
  const w = await runWrkOverload({ url: gw.url, connections, seconds, bodies: BODIES, headers: callHeaders(env.apiKey), expect: '"track_id"' });
  return { w, cpuMs: procCpuMs(gw.pid) - c0 };
}

async function main(): Promise<void> {
  if (!wrkAvailable()) throw new Error('needs wrk (/usr/bin/wrk)');
  const roots = (process.env.BENCH_ROOTS ?? `/work/main,${ROOT}`).split(',').filter(Boolean);
  const rounds = envInt('BENCH_ROUNDS', 3);
  const seconds = envInt('BENCH_SECONDS', 4);
  const levels = (process.env.BENCH_CONNECTIONS ?? '16,512').split(',').map(Number);
  await withBenchEnv({}, async (env) => {
    const lim1 = await Promise.all(roots.map((r) => startServe(vars(env, { INTERLOCK_ADMISSION_MIN_LIMIT: '1', INTERLOCK_ADMISSION_MAX_LIMIT: '1', INTERLOCK_ADMISSION_QUEUE_SIZE: '0', INTERLOCK_ADMISSION_PAUSE_REFUSED_CONNECTIONS: 'false' }), [], r)));
    const on = await Promise.all(roots.map((r) => startServe(vars(env), [], r)));
    let holding = true;
    const holders = lim1.map((g) =>
      (async () => {
        while (holding) await fetch(g.url, { method: 'POST', headers: callHeaders(env.apiKey), body: SLOW_BODY }).then((r) => r.text()).catch(() => undefined);
      })(),
    );
    try {
      for (const g of [...lim1, ...on]) await run(g, env, 16, 2); // warm-up
      const turn = (r: number) => roots.map((_, i) => (i + r) % roots.length);
      for (let r = 0; r < rounds; r++) {
        for (const i of turn(r)) {
          const m = await run(lim1[i], env, 32, seconds);
          console.log(JSON.stringify({ part: 'refusal alone', root: roots[i], round: r + 1, refused: m.w.refused, served: m.w.served, usPerRefusal: Math.round((m.cpuMs * 1000) / Math.max(1, m.w.refused)), load1: loadavg()[0].toFixed(1) }));
        }
      }
      for (let r = 0; r < rounds; r++) {
        for (const c of levels) {
          for (const i of turn(r)) {
            const m = await run(on[i], env, c, seconds);
            console.log(JSON.stringify({ part: 'admission on', root: roots[i], connections: c, round: r + 1, goodput: Math.round(m.w.served / m.w.seconds), refused: m.w.refused, late: m.w.refusedOther, other: m.w.other, socketErrors: m.w.socketErrors, p50: m.w.p50Ms, p99: m.w.p99Ms, cpuUsPerServed: Math.round((m.cpuMs * 1000) / Math.max(1, m.w.served)), load1: loadavg()[0].toFixed(1) }));
          }
        }
      }
    } finally {
      holding = false;
      await Promise.all([...lim1, ...on].map((g) => g.stop()));
      await Promise.all(holders);
    }
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
