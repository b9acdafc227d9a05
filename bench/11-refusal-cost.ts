/**
 * A refusal at capacity on its own (issue 29, "a refusal costs at most a tenth of a served call's
 * CPU"), before and after, beside the bare node:http floor: BENCH_ROOTS (comma-separated checkouts,
 * each compiled with `npm run -s build`; default this checkout, or BEFORE_ROOT and this checkout)
 * each run a gateway with limit 1, no queue and no pause, its slot kept busy by slow reads; wrk
 * drives it at 32 connections (one identity, uncached point reads, modern dialect) for
 * BENCH_SECONDS, and so the floor (bench/lib/refusal-floor-server.ts), in alternating order per
 * round (BENCH_ROUNDS). Per run: gateway CPU (user + system from /proc) per answer, µs (and the system part
 * alone, the kernel's work for it); the answers
 * sorted (every refusal must carry Retry-After). With BENCH_PROFILE_DIR each gateway runs under
 * `--cpu-prof` and writes its profile there on exit (then the CPU figures include the profiler); with
 * BENCH_STRACE_DIR each run is counted by `strace -c -f` into that folder (system calls per answer;
 * the CPU figures then include the tracer's cost). With BENCH_PERF_DIR each run is sampled by `perf record
 * -g -p` into that folder (`<side>-<round>.data`; with BENCH_NODE_FLAGS=--perf-basic-prof the JavaScript frames
 * are named: `perf report -i … --no-children`). BENCH_NODE_FLAGS: node flags for every side's process.
 *
 * Beside each refusal, in the same rounds: a served call's gateway CPU (issue 29's denominator) from a
 * second gateway of the same build (BENCH_ROOTS' each) with the same settings but admission's default
 * limits, so the same identity is not refused there: wrk at c=8 (uncached point reads, the same bodies),
 * gateway CPU (user + system) per served call; the slow reads that keep the limit-1 gateways full are
 * paused while it runs. Per build: the paired ratio refusal ÷ served per round, its median, and the
 * verdict against issue 29's target (≤ 0.1). BENCH_SERVED=0 leaves the served side out.
 *
 * BENCH_NET_FLOOR=1 adds two sides: the node:http floor writing its answer straight to the socket past
 * ServerResponse (FLOOR_WRITE=raw), and the same refusal written by a plain node:net server
 * (bench/lib/refusal-floor-net.ts), the floor without node:http's parser, IncomingMessage and ServerResponse.
 *
 * Not a timed test. Needs /usr/bin/wrk. Run: `BEFORE_ROOT=/path/to/main BENCH_ROUNDS=5 npx tsx bench/11-refusal-cost.ts`.
 */
import { spawn } from 'node:child_process';
import { loadavg } from 'node:os';
import path from 'node:path';
import { gatewayVars, ROOT, startServe, startTsChild, withBenchEnv, type BenchEnv, type GatewayChild } from './lib/env';
import { procCpuSplitMs } from './lib/cpu';
import { callHeaders, POINT_BODIES as BODIES, SLOW_BODY } from './lib/overload-calls';
import { envInt } from './lib/stats';
import { runWrk, runWrkOverload, wrkAvailable } from './lib/wrk';

/** Issue 29's target: a refusal costs at most this share of a served call's gateway CPU. */
const TARGET_RATIO = 0.1;

/** The limit-1 gateway's variables: client caps lifted, cache off, limit 1, no queue, no pause. */
function lim1Vars(env: BenchEnv): Record<string, string> {
  return {
    ...gatewayVars(env.controlUrl, { cacheTtlMs: 0 }),
    INTERLOCK_STREAMS_PER_IDENTITY: '100000',
    INTERLOCK_STREAMS_PER_ADDRESS: '100000',
    INTERLOCK_BODY_READS_PER_ADDRESS: '100000',
    INTERLOCK_ADMISSION_MIN_LIMIT: '1',
    INTERLOCK_ADMISSION_MAX_LIMIT: '1',
    INTERLOCK_ADMISSION_QUEUE_SIZE: '0',
    INTERLOCK_ADMISSION_PAUSE_REFUSED_CONNECTIONS: 'false',
  };
}

/** The served gateway's variables: lim1Vars' without the admission settings (its defaults: the identity is not refused at c=8). */
function servedVars(env: BenchEnv): Record<string, string> {
  const v = lim1Vars(env);
  for (const k of Object.keys(v)) if (k.startsWith('INTERLOCK_ADMISSION_')) delete v[k];
  return v;
}

/**
 * The gateway's own count of the MCP endpoint's answers by HTTP status (interlock_mcp_requests_total, every method
 * and dialect), from its /metrics: beside wrk's answers it shows what wrk does not see (the holders' own calls and
 * refusals) and the calls a gateway served while it should only refuse.
 */
async function answersByStatus(url: string): Promise<Record<string, number>> {
  const u = new URL(url);
  const text = await (await fetch(`${u.protocol}//${u.host}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const m = /^interlock_mcp_requests_total\{[^}]*status="(\d+)"[^}]*\} ([0-9.eE+-]+)$/.exec(line);
    if (m) out[m[1]] = (out[m[1]] ?? 0) + Number(m[2]);
  }
  return out;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

async function main(): Promise<void> {
  if (!wrkAvailable()) throw new Error('needs wrk (/usr/bin/wrk)');
  const roots = (process.env.BENCH_ROOTS ?? (process.env.BEFORE_ROOT ? `${process.env.BEFORE_ROOT},${ROOT}` : ROOT)).split(',').filter(Boolean);
  const rounds = envInt('BENCH_ROUNDS', 3);
  const seconds = envInt('BENCH_SECONDS', 4);
  const prof = process.env.BENCH_PROFILE_DIR;
  // BENCH_NODE_FLAGS: node flags for every side's process (e.g. --perf-basic-prof for BENCH_PERF_DIR).
  const extra = (process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter(Boolean);
  const flags = (name: string): string[] => [...extra, ...(prof ? ['--cpu-prof', `--cpu-prof-dir=${prof}`, `--cpu-prof-name=${name}.cpuprofile`] : [])];
  const withServed = process.env.BENCH_SERVED !== '0';
  await withBenchEnv({}, async (env) => {
    const gws = await Promise.all(roots.map((r, i) => startServe(lim1Vars(env), flags(`refusal-${i}`), r)));
    const floor = await startTsChild('bench/lib/refusal-floor-server.ts', {}, flags('floor'));
    const sides: Array<{ name: string; gw: GatewayChild }> = [...gws.map((gw, i) => ({ name: roots[i], gw })), { name: 'node:http floor', gw: floor }];
    // BENCH_NET_FLOOR=1: the same refusal from a plain node:net server (bench/lib/refusal-floor-net.ts), no node:http objects.
    // With it, the node:http floor writing its answer past ServerResponse (FLOOR_WRITE=raw, one corked socket write).
    if (process.env.BENCH_NET_FLOOR === '1') {
      sides.push({ name: 'node:http floor, raw write', gw: await startTsChild('bench/lib/refusal-floor-server.ts', { FLOOR_WRITE: 'raw' }, flags('floor-raw')) });
      sides.push({ name: 'node:net floor', gw: await startTsChild('bench/lib/refusal-floor-net.ts', {}, flags('floor-net')) });
    }
    // The served side of each build: a second gateway of that build that does not refuse (servedVars).
    const served = withServed ? await Promise.all(roots.map((r) => startServe(servedVars(env), [], r))) : [];
    let holding = true;
    let paused: Promise<void> | null = null;
    const hold = (g: GatewayChild) =>
      (async () => {
        while (holding) {
          if (paused) await paused;
          else await fetch(g.url, { method: 'POST', headers: callHeaders(env.apiKey), body: SLOW_BODY }).then((r) => r.text()).catch(() => undefined);
        }
      })();
    const holders = gws.map(hold);
    const per = new Map<string, number[]>(sides.map((s) => [s.name, []]));
    const servedPer = new Map<string, number[]>(roots.map((r) => [r, []]));
    // One served run per build (wrk c=8): the gateway's CPU per served call, µs. The holders' slow reads
    // are paused (each finishes its current one) so the source is not busy with them, then resumed.
    const servedRound = async (round: number): Promise<void> => {
      let resume = (): void => undefined;
      paused = new Promise<void>((res) => (resume = res));
      await new Promise((res) => setTimeout(res, 1500));
      try {
        for (let i = 0; i < served.length; i++) {
          const k = (i + Math.max(0, round)) % served.length;
          const g = served[k];
          const root = roots[k];
          const c0 = procCpuSplitMs(g.pid);
          const w = await runWrk({ url: g.url, concurrency: 8, durationMs: seconds * 1000, bodies: BODIES, headers: callHeaders(env.apiKey), expect: '"track_id"' });
          const c1 = procCpuSplitMs(g.pid);
          const us = ((c1.user + c1.system - c0.user - c0.system) * 1000) / Math.max(1, w.allOps);
          if (round >= 0) servedPer.get(root)!.push(us);
          console.log(JSON.stringify({ side: `${root} served`, round: round >= 0 ? round + 1 : 'warm-up', calls: w.allOps, wrong: w.errors, callsPerSecond: Math.round(w.ops / (w.elapsedMs / 1000)), usPerCall: Math.round(us * 10) / 10, load1: loadavg()[0].toFixed(2) }));
        }
      } finally {
        paused = null;
        resume();
        // The holders take the limit-1 slots again before the next refusal run.
        await new Promise((res) => setTimeout(res, 500));
      }
    };
    try {
      if (withServed) await servedRound(-1);
      for (const s of sides) {
        const w = await runWrkOverload({ url: s.gw.url, connections: 32, seconds: 2, bodies: BODIES, headers: callHeaders(env.apiKey), expect: '"track_id"' });
        console.log(JSON.stringify({ side: s.name, warmUp: true, answers: w.refused + w.served + w.other }));
      }
      for (let r = 0; r < rounds; r++) {
        if (withServed && r % 2 === 0) await servedRound(r);
        const order = sides.map((_, i) => sides[(i + r) % sides.length]);
        for (const s of order) {
          const tag = `${s.name.replace(/[^a-z0-9]+/gi, '_')}-${r + 1}`;
          const tracer = process.env.BENCH_STRACE_DIR
            ? spawn('strace', ['-c', '-f', '-p', String(s.gw.pid), '-o', path.join(process.env.BENCH_STRACE_DIR, `${tag}.txt`)], { stdio: 'ignore' })
            : process.env.BENCH_PERF_DIR
              ? spawn('perf', ['record', '-q', '-g', '-p', String(s.gw.pid), '-o', path.join(process.env.BENCH_PERF_DIR, `${tag}.data`)], { stdio: 'ignore' })
              : null;
          if (tracer) await new Promise((res) => setTimeout(res, 500));
          const isGateway = roots.includes(s.name);
          const m0 = isGateway ? await answersByStatus(s.gw.url) : null;
          const c0 = procCpuSplitMs(s.gw.pid);
          const w = await runWrkOverload({ url: s.gw.url, connections: 32, seconds, bodies: BODIES, headers: callHeaders(env.apiKey), expect: '"track_id"' });
          const c1 = procCpuSplitMs(s.gw.pid);
          const m1 = isGateway ? await answersByStatus(s.gw.url) : null;
          // The gateway's answers in the run by status (its /metrics, one scrape before and after, outside the CPU window).
          const gatewayAnswers = m0 && m1 ? Object.fromEntries(Object.keys(m1).map((k) => [k, m1[k] - (m0[k] ?? 0)]).filter(([, n]) => n !== 0)) : undefined;
          const cpuMs = c1.user + c1.system - c0.user - c0.system;
          if (tracer) {
            tracer.kill('SIGINT');
            await new Promise((res) => tracer.once('exit', res));
          }
          const answers = w.refused + w.served + w.other;
          const us = (cpuMs * 1000) / Math.max(1, answers);
          per.get(s.name)!.push(us);
          console.log(JSON.stringify({ side: s.name, round: r + 1, answers, refused: w.refused, retryAfter: w.refusedWithRetryAfter, served: w.served, other: w.other, socketErrors: w.socketErrors, gatewayAnswers, usPerAnswer: Math.round(us * 10) / 10, systemUsPerAnswer: Math.round(((c1.system - c0.system) * 10000) / Math.max(1, answers)) / 10, load1: loadavg()[0].toFixed(2) }));
        }
        if (withServed && r % 2 === 1) await servedRound(r);
      }
      const r1 = (x: number) => Math.round(x * 10) / 10;
      for (const [name, xs] of per) console.log(`${name}: median ${r1(median(xs))} µs per answer (rounds ${xs.map(r1).join(', ')})`);
      // Paired per round against the first build (BEFORE_ROOT): each later build's refusal ÷ the first's.
      for (const root of roots.slice(1)) {
        const ratios = per.get(root)!.map((x, i) => x / per.get(roots[0])![i]);
        console.log(`${root} ÷ ${roots[0]} (refusal), paired per round: median ${median(ratios).toFixed(2)} (${ratios.map((x) => x.toFixed(2)).join(', ')})`);
      }
      for (const root of roots) {
        const sv = servedPer.get(root)!;
        if (!sv.length) continue;
        const rf = per.get(root)!;
        const ratios = rf.map((x, i) => x / sv[i]);
        const m = median(ratios);
        console.log(`${root} served (c=8): median ${r1(median(sv))} µs per call (rounds ${sv.map(r1).join(', ')}); refusal ÷ served, paired per round: median ${m.toFixed(3)} (${ratios.map((x) => x.toFixed(3)).join(', ')}) — target ≤ ${TARGET_RATIO}: ${m <= TARGET_RATIO ? 'MET' : 'NOT MET'}`);
      }
    } finally {
      holding = false;
      paused = null;
      await Promise.all(holders);
      await Promise.all([...sides, ...served.map((gw) => ({ gw }))].map((s) => s.gw.stop()));
    }
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
