/**
 * Admission settings side by side (issue 29, h29f): one gateway per setting, started together and
 * measured in alternating rounds (the order rotates per round), so a shared machine's drift falls on
 * all alike. BENCH_CONFIGS: comma-separated entries, each `default` (admission on, defaults), `off`
 * (INTERLOCK_ADMISSION_ENABLED=false) or the path of a gateway config file (e.g.
 * `{"admission": {"max_limit": 64}}`; default `default,off`). One identity, uncached point reads
 * (bench/lib/overload-calls.ts), wrk at each of BENCH_CONNECTIONS (default 512) for BENCH_SECONDS
 * (default 4), BENCH_ROUNDS rounds (default 3). One JSON line per run: goodput (HTTP 200 with rows
 * per second), refusals per second, late refusals (429 not rate_limited), other answers, wrk's
 * p50/p99 over all answers (a paused refused connection's wait included), gateway CPU µs per served
 * call, the 1-minute load average; then per setting and level the median goodput and p99.
 * BENCH_WARM_SECONDS (default 2) at BENCH_WARM_CONNECTIONS (default 16): each gateway's warm-up before
 * the rounds, in slices of at most 3 s taken by the gateways in turn (h29g: a gateway's CPU per call
 * settles over its first tens of seconds of load, so unequal warm-ups read as a difference of setting).
 * BENCH_FRESH=1 (h29i): instead, every run gets a gateway started just for it, with no warm-up and
 * no call before wrk's, and stopped after it: the first burst a replica meets, where
 * admission.initial_limit acts (after it the limit follows the load within ~0.1 s, bench/RESULTS.md h29g).
 * Not a timed test. Needs /usr/bin/wrk; compile first (`npm run -s build`).
 *
 * Run: `BENCH_CONFIGS=default,/tmp/a.json BENCH_CONNECTIONS=128,512 npx tsx bench/admission-configs.ts`.
 */
import { loadavg } from 'node:os';
import { gatewayVars, startServe, withBenchEnv, type BenchEnv, type GatewayChild } from './lib/env';
import { procCpuMs } from './lib/cpu';
import { callHeaders, POINT_BODIES } from './lib/overload-calls';
import { envInt } from './lib/stats';
import { runWrkOverload, wrkAvailable, type WrkOverloadRun } from './lib/wrk';

/** The gateway of one BENCH_CONFIGS entry: client caps lifted, cache off. */
function start(env: BenchEnv, entry: string): Promise<GatewayChild> {
  const setting: Record<string, string> = entry === 'default' ? {} : entry === 'off' ? { INTERLOCK_ADMISSION_ENABLED: 'false' } : { INTERLOCK_CONFIG: entry };
  return startServe({ ...gatewayVars(env.controlUrl, { cacheTtlMs: 0 }), INTERLOCK_STREAMS_PER_IDENTITY: '100000', INTERLOCK_STREAMS_PER_ADDRESS: '100000', INTERLOCK_BODY_READS_PER_ADDRESS: '100000', ...setting });
}

/** The median of `xs` (the mean of the middle two for an even count). */
function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

async function main(): Promise<void> {
  if (!wrkAvailable()) throw new Error('needs wrk (/usr/bin/wrk)');
  const entries = (process.env.BENCH_CONFIGS ?? 'default,off').split(',').filter(Boolean);
  const levels = (process.env.BENCH_CONNECTIONS ?? '512').split(',').map(Number);
  const rounds = envInt('BENCH_ROUNDS', 3);
  const seconds = envInt('BENCH_SECONDS', 4);
  const fresh = process.env.BENCH_FRESH === '1';
  await withBenchEnv({}, async (env) => {
    const gws: GatewayChild[] = [];
    try {
      if (!fresh) for (const e of entries) gws.push(await start(env, e));
      const run = async (i: number, connections: number, s: number): Promise<{ w: WrkOverloadRun; cpuMs: number }> => {
        // BENCH_FRESH: a gateway of its own for this run, stopped after it.
        const gw = fresh ? await start(env, entries[i]) : gws[i];
        try {
          const c0 = procCpuMs(gw.pid);
          const w = await runWrkOverload({ url: gw.url, connections, seconds: s, bodies: POINT_BODIES, headers: callHeaders(env.apiKey), expect: '"track_id"' });
          return { w, cpuMs: procCpuMs(gw.pid) - c0 };
        } finally {
          if (fresh) await gw.stop();
        }
      };
      // Warm-up: BENCH_WARM_SECONDS per gateway at BENCH_WARM_CONNECTIONS, in slices of ≤ 3 s taken in turn.
      const warmConnections = envInt('BENCH_WARM_CONNECTIONS', 16);
      for (let left = fresh ? 0 : envInt('BENCH_WARM_SECONDS', 2); left > 0; left -= 3) for (let i = 0; i < gws.length; i++) await run(i, warmConnections, Math.min(3, left));
      const got = new Map<string, Array<{ goodput: number; p99: number }>>();
      for (let r = 0; r < rounds; r++) {
        for (const c of levels) {
          for (let k = 0; k < entries.length; k++) {
            const i = (k + r) % entries.length;
            const { w, cpuMs } = await run(i, c, seconds);
            const goodput = w.served / w.seconds;
            const key = `${entries[i]} @ ${c}`;
            got.set(key, [...(got.get(key) ?? []), { goodput, p99: w.p99Ms }]);
            console.log(JSON.stringify({ config: entries[i], connections: c, round: r + 1, goodput: Math.round(goodput), refused: w.refused, refusedPerS: Math.round(w.refused / w.seconds), late: w.refusedOther, other: w.other, socketErrors: w.socketErrors, p50: w.p50Ms, p99: w.p99Ms, usPerServed: Math.round((cpuMs * 1000) / Math.max(1, w.served)), load1: loadavg()[0].toFixed(1) }));
          }
        }
      }
      for (const [key, xs] of got) console.log(`${key}: goodput median ${Math.round(median(xs.map((x) => x.goodput)))} (${xs.map((x) => Math.round(x.goodput)).join(', ')}), p99 median ${median(xs.map((x) => x.p99))} ms`);
    } finally {
      await Promise.all(gws.map((g) => g.stop()));
    }
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
