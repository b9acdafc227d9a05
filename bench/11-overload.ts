/**
 * Scenario 11 (issue 29, item 1, "Must show"): uncached point reads under overload, admission by
 * capacity on and off. wrk (closed loop, C, so the driver costs little CPU; one identity; the
 * modern dialect, so a refusal is an HTTP 429) drives two `interlock serve` children started side
 * by side, admission on (the defaults) and off (INTERLOCK_ADMISSION_ENABLED=false), so the two are
 * measured in alternating rounds on the same machine minute (a shared machine's noise is larger
 * than the effects: one run's admission-off 1× once gave 0.78 of the P that the same
 * configuration had defined a minute before):
 *
 * 1. Capacity: the admission-off gateway, wrk at BENCH_CAPACITY_LEVELS connections (default
 *    1,2,4,6,8,12,16,24,32,48,64: finer around the knee, and past 32, where earlier runs' admission-off
 *    gateway still gained, 1.14–1.18 P at 64 and 128), BENCH_ROUNDS rounds (default 3) of BENCH_SECONDS
 *    each, the levels in turn within each round; per level the median goodput of its rounds. The
 *    capacity C is the level of the highest median, P that median; the unloaded p99 U is the median
 *    of wrk's p99 at 1 connection. Every round is printed. Then the **feasibility frontier** (h29f):
 *    per level goodput ÷ P, p50 and p99 (ms and ÷ U), and the smallest level n* whose goodput is
 *    ≥ 0.9 P with its p99 ÷ U. An admission limit can only choose how many calls are in flight (one
 *    identity, all calls alike: nothing to reorder), so when that p99 is > 3 U no policy meets both
 *    targets at 1× here, and the bench says so in one line. After part 3 the same for 512
 *    connections, each level's goodput less the served calls that ≤ 512 − n refusals a second (each
 *    refused connection paused ≥ 1 s) cost at part 3's CPU per refusal. Caveats, why the frontier
 *    is a bound and not a prediction: (a) a closed loop at n keeps n calls in the whole system (wrk,
 *    kernel, parse, slot, answer), while a limit of n counts only calls holding a slot (from
 *    admission after the body parse to the answer's flush): with a limit, calls being parsed and
 *    refused come on top, and their work runs in the same event loop as the admitted calls'; (b)
 *    those refusals cost CPU a closed loop never spends (estimated only for 512); (c) the admission
 *    queue (queue_size, up to queue_timeout_ms) adds waiting calls, whose wait is in their latency;
 *    (d) the frontier's p99 is wrk's over every answer at n (all served), part 2's admitted p99 is a
 *    1-connection Node.js probe's over its served calls (hundreds a round, its own client's delay
 *    in it, one connection more than the load): the same quantity measured by another client, the
 *    frontier's the lower one — and part 2's "÷ U" divides the probe's p99 by wrk's U, so the Node.js
 *    client's own delay is in the numerator only (a bias against admission on and off alike); (e) levels are medians of a few rounds on a shared machine, so
 *    neighbouring levels are often within noise of each other.
 * 2. Loads 1× (C), 2×, 4× and 512 connections, BENCH_ROUNDS rounds (the admission-on gateways first loaded at C
 *    for as long as part 1 loaded the off one, BENCH_PART2_WARM_SECONDS, default that, at most 60: JIT warmth); in each round every load runs
 *    on both gateways, on and off in turn (which goes first alternates by round). Per load and mode
 *    the row gives medians over the rounds and each round's goodput: goodput (HTTP 200 answers
 *    carrying rows, per second) and ÷ P; refusals per second and how many carried Retry-After
 *    (wrk's Lua `response` hook sorts every answer) and how many were late (a 429 whose code is not
 *    rate_limited: the source's `concurrency_limited` after the call was admitted); other answers and socket errors; wrk's p50/p99
 *    over all its answers (these include the wait of a connection paused after a refusal,
 *    admission.pause_refused_connections); the **admitted p99** from a 1-connection probe beside
 *    wrk (same identity) that records only calls that were served, and after a refusal opens a
 *    fresh connection, so the pause of the refused one is never counted, ÷ U; gateway CPU per
 *    served call; CPU per refusal in the same round, (gateway CPU − served × the CPU per served
 *    call at 1× of the same mode and round) ÷ refusals, and ÷ a served call (a difference of two
 *    large figures: noisy); peak RSS (VmHWM, reset before each run when /proc permits); the load
 *    average.
 * 3. A refusal's CPU on its own, BENCH_ROUNDS rounds, each round three runs in turn: a third
 *    gateway with limit 1, no queue and no pause, its slot kept busy by slow reads, refusing wrk at
 *    32 connections; the bare node:http refusal floor (bench/lib/refusal-floor-server.ts) under the
 *    same wrk; and served calls on the admission-on gateway at C. Per round: gateway CPU per
 *    refusal, per served call, their ratio, and the floor's CPU per request; and the CPU of the
 *    control and source databases' backends (bench/lib/cpu.ts CpuMeter, by database) per refusal
 *    and per served call, so the ratio is given both for the gateway alone and with the databases'
 *    work a refusal spares (the slot holder's slow reads are paused while the served calls run, so
 *    the source's CPU is theirs; a refusal's control-database CPU includes the holder's few events).
 *
 * With BENCH_VARIANT_CONFIG (the path of a gateway config file, e.g. `{"admission": {"tolerance": 1.5}}`)
 * a third gateway, admission on with that file's settings, runs every load of part 2 beside the two
 * (mode `variant`, the order rotating by round), so a limiter setting is compared in the same rounds.
 *
 * The issue's targets: goodput ≥ 0.9 × P at 1×, 2×, 4× and 512; CPU per refusal ≤ 0.1 × a served
 * call's; admitted p99 ≤ 3 × U; every refusal with Retry-After; RSS within the per-call budget of
 * issue 10. The client caps per identity and address are lifted (100,000) so admission by capacity,
 * not the stream caps, is what refuses. Not a timed test: medians of same-run rounds; on a shared
 * machine the load average printed with each row says how far to trust them. Needs /usr/bin/wrk.
 *
 * Run: `npx tsx bench/11-overload.ts` (BENCH_SECONDS=10, BENCH_ROUNDS=3 by default; compile first,
 * `npm run -s build`; `BENCH_SECONDS=2 BENCH_ROUNDS=1` proves it runs).
 */
import http from 'node:http';
import { loadavg } from 'node:os';
import { gatewayVars, procMemory, resetPeakRss, startServe, startTsChild, withBenchEnv, type BenchEnv, type GatewayChild } from './lib/env';
import { CpuMeter, procCpuMs } from './lib/cpu';
import { POINT_SQL, TRACKS } from './lib/point-read';
import { envInt, machineLine } from './lib/stats';
import { runWrkOverload, wrkAvailable, type WrkOverloadRun } from './lib/wrk';

const MODERN = '2026-07-28';
const META = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} };

/** The JSON-RPC body of a point read of track `id` (interlock_query, modern dialect). */
function pointBody(id: number): string {
  return JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: POINT_SQL, params: [id] }, _meta: META } });
}

/** The headers of every call (the modern dialect's mirrored method and name). */
function callHeaders(apiKey: string): Record<string, string> {
  return { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${apiKey}`, 'MCP-Protocol-Version': MODERN, 'Mcp-Method': 'tools/call', 'Mcp-Name': 'interlock_query' };
}

/** 500 point-read bodies over the whole track table (wrk cycles them from a random start per connection). */
const BODIES = Array.from({ length: 500 }, (_, i) => pointBody(1 + ((i * 7919) % TRACKS)));

/** What the probe saw: latencies (ms) of its served calls, and how many of its calls were refused. */
interface ProbeResult {
  admitted: number[];
  refused: number;
}

/**
 * A 1-connection probe beside wrk: the latency (ms) of each of its calls that was served (HTTP 200),
 * until `stop`. After any other answer it waits 20 ms and opens a fresh connection (its agent is
 * destroyed), so a refused connection's pause (admission.pause_refused_connections) is never part
 * of an admitted call's latency.
 */
function probe(url: string, apiKey: string): { stop(): Promise<ProbeResult> } {
  let running = true;
  const out: ProbeResult = { admitted: [], refused: 0 };
  const headers = callHeaders(apiKey);
  const target = new URL(url);
  let agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const call = (body: string) =>
    new Promise<number>((resolve, reject) => {
      const req = http.request({ host: target.hostname, port: target.port, path: target.pathname, method: 'POST', headers: { ...headers, 'Content-Length': Buffer.byteLength(body) }, agent }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(body);
    });
  const loop = (async () => {
    while (running) {
      const t0 = performance.now();
      let status = 0;
      try {
        status = await call(pointBody(1 + Math.floor(Math.random() * TRACKS)));
      } catch {
        status = -1;
      }
      if (status === 200) {
        out.admitted.push(performance.now() - t0);
        continue;
      }
      if (status === 429) out.refused++;
      agent.destroy();
      agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      await new Promise((res) => setTimeout(res, 20));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      agent.destroy();
      return out;
    },
  };
}

/** The p-th percentile (0–100) of `xs`, NaN when empty. */
function pct(xs: number[], p: number): number {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

/** The median of `xs` (NaN values left out; the mean of the middle two for an even count), NaN when none is left. */
function median(xs: number[]): number {
  const s = xs.filter((x) => !Number.isNaN(x)).sort((a, b) => a - b);
  if (!s.length) return NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

const round = (x: number, d = 1) => (Number.isFinite(x) ? Math.round(x * 10 ** d) / 10 ** d : NaN);

/** One measured run at a number of connections, with the gateway's CPU (ms), its peak RSS (MiB) and the probe. */
interface Measured {
  w: WrkOverloadRun;
  cpuMs: number;
  peakRssMiB: number;
  probe: ProbeResult;
  load1: number;
}

async function measure(gw: GatewayChild, env: BenchEnv, connections: number, seconds: number, withProbe: boolean): Promise<Measured> {
  resetPeakRss(gw.pid);
  const cpu0 = procCpuMs(gw.pid);
  const p = withProbe ? probe(gw.url, env.apiKey) : null;
  const w = await runWrkOverload({ url: gw.url, connections, seconds, bodies: BODIES, headers: callHeaders(env.apiKey), expect: '"track_id"' });
  const pr = p ? await p.stop() : { admitted: [], refused: 0 };
  return { w, cpuMs: procCpuMs(gw.pid) - cpu0, peakRssMiB: Math.round(procMemory(gw.pid).hwmKiB / 1024), probe: pr, load1: loadavg()[0] };
}

/** The gateway of one mode: the client caps lifted, admission on (defaults) or off; `extra` variables on top. */
function startGateway(env: BenchEnv, admission: boolean, extra: Record<string, string> = {}): Promise<GatewayChild> {
  return startServe({
    ...gatewayVars(env.controlUrl, { cacheTtlMs: 0 }),
    INTERLOCK_ADMISSION_ENABLED: admission ? 'true' : 'false',
    INTERLOCK_STREAMS_PER_IDENTITY: '100000',
    INTERLOCK_STREAMS_PER_ADDRESS: '100000',
    INTERLOCK_BODY_READS_PER_ADDRESS: '100000',
    ...extra,
  });
}

/** A slow read (a cross join counted in the source, ~1 s): held in a loop, it keeps a limit of 1 full. */
const SLOW_BODY = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: 'SELECT count(*) AS n FROM track a, track b' }, _meta: META } });

/** One round of scenario 3: µs of CPU per refusal (limit-1 gateway), per served call (admission on, at C), per floor request. */
interface RefusalRound {
  refusalUs: number;
  refused: number;
  refusedWithRetryAfter: number;
  servedUs: number;
  /** µs of the control database's backends per refusal (its aggregate audit; with the holder's few events: an upper bound) and per served call; of the source database's per served call (a refusal sends nothing to the source). */
  refusalControlUs: number;
  servedControlUs: number;
  servedSourceUs: number;
  floorUs: number;
  floorRequests: number;
  load1: number;
}

/**
 * Scenario 3: a refusal's CPU on its own, beside a served call's and the node:http floor's, in
 * alternating runs of one round: the limit-1 gateway `lim1` (its slot kept busy by the caller's
 * slow reads) refused at 32 connections, then the floor at 32, then `on` served at `capacity`.
 * A refusal's CPU is (lim1's CPU − the few calls it served × this round's served CPU) ÷ refusals.
 */
async function refusalRound(env: BenchEnv, lim1: GatewayChild, floor: GatewayChild, on: GatewayChild, capacity: number, seconds: number, holder: Holder): Promise<RefusalRound> {
  const dbs = { control: { databases: [databaseOf(env.controlUrl)] }, source: { databases: [databaseOf(env.sourceUrl)] } };
  const refusalDb = new CpuMeter(dbs);
  await refusalDb.start();
  const r = await measure(lim1, env, 32, seconds, false);
  const rDb = await refusalDb.stop();
  await refusalDb.close();
  const f0 = procCpuMs(floor.pid);
  const fw = await runWrkOverload({ url: floor.url, connections: 32, seconds, bodies: BODIES, headers: callHeaders(env.apiKey), expect: '"track_id"' });
  const floorMs = procCpuMs(floor.pid) - f0;
  // The holder's cross join would count in the source database's CPU: paused while the served calls run.
  await holder.pause();
  const servedDb = new CpuMeter(dbs);
  await servedDb.start();
  const s = await measure(on, env, capacity, seconds, false);
  const sDb = await servedDb.stop();
  await servedDb.close();
  holder.resume();
  const servedMs = s.cpuMs / Math.max(1, s.w.served);
  const refusalMs = (r.cpuMs - r.w.served * servedMs) / Math.max(1, r.w.refused);
  const per = (ms: number, n: number) => (ms * 1000) / Math.max(1, n);
  return { refusalUs: refusalMs * 1000, refused: r.w.refused, refusedWithRetryAfter: r.w.refusedWithRetryAfter, servedUs: servedMs * 1000, refusalControlUs: per(rDb.control, r.w.refused), servedControlUs: per(sDb.control, s.w.served), servedSourceUs: per(sDb.source, s.w.served), floorUs: (floorMs * 1000) / Math.max(1, fw.requests), floorRequests: fw.requests, load1: loadavg()[0] };
}

/** The database name of a PostgreSQL URL. */
function databaseOf(url: string): string {
  return decodeURIComponent(new URL(url).pathname.slice(1));
}

/** The loop of slow reads that keeps the limit-1 gateway's slot full; pause() resolves once its current read has ended. */
interface Holder {
  pause(): Promise<void>;
  resume(): void;
  stop(): Promise<void>;
}

/** Starts the holder of `lim1`'s slot (see Holder). */
function holdSlot(lim1: GatewayChild, apiKey: string): Holder {
  let holding = true;
  const state: { paused: { resume: () => void; idle: () => void } | null } = { paused: null };
  const loop = (async () => {
    while (holding) {
      const p = state.paused;
      if (p) {
        await new Promise<void>((resume) => {
          p.resume = resume;
          p.idle();
        });
        continue;
      }
      await fetch(lim1.url, { method: 'POST', headers: callHeaders(apiKey), body: SLOW_BODY }).then((r) => r.text()).catch(() => undefined);
    }
  })();
  return {
    pause() {
      const p = { resume: () => undefined, idle: () => undefined } as { resume: () => void; idle: () => void };
      const idleNow = new Promise<void>((idle) => (p.idle = idle));
      state.paused = p;
      return idleNow;
    },
    resume() {
      const p = state.paused;
      state.paused = null;
      p?.resume();
    },
    async stop() {
      holding = false;
      this.resume();
      await loop;
    },
  };
}

/** The gateways of scenario 2: admission on (defaults), off, and with BENCH_VARIANT_CONFIG the variant (admission on, that config file's settings). */
type Mode = 'on' | 'off' | 'variant';

/** One load and mode of scenario 2, over its rounds. */
interface Row {
  admission: Mode;
  load: string;
  connections: number;
  rounds: Measured[];
  /** CPU ms per served call at 1× of the same mode, per round (for CPU per refusal). */
  servedAt1x: number[];
}

/** One level of the capacity sweep (admission off, closed loop at `c` connections): medians over the rounds of goodput (calls/s), wrk's p50 and p99 (ms), and gateway CPU µs per served call. */
interface Level {
  c: number;
  goodput: number;
  p50: number;
  p99: number;
  cpuUs: number;
}

/** Share of P that the issue's goodput target asks for, and the multiple of U its admitted p99 allows. */
const GOODPUT_TARGET = 0.9;
const P99_TARGET = 3;

/**
 * The feasibility frontier (see the module, part 1): per level goodput ÷ P, p50 and p99 ÷ U; then
 * the smallest level whose goodput reaches GOODPUT_TARGET × P and its p99 ÷ U. An admission limit
 * only chooses how many calls are in flight, so when that p99 exceeds P99_TARGET × U no policy
 * meets both targets at 1× on this machine; the line says so with the figures.
 */
function printFrontier(byLevel: Level[], peak: number, unloadedP99: number): void {
  console.log('\nfeasibility frontier (admission off, closed loop at n connections; medians of the rounds):');
  console.log('| n | goodput ÷ P | p50 ms | p50 ÷ U | p99 ms | p99 ÷ U | gateway µs / served |');
  console.log('|---|---|---|---|---|---|---|');
  for (const l of byLevel) console.log(`| ${l.c} | ${round(l.goodput / peak, 2)} | ${round(l.p50, 2)} | ${round(l.p50 / unloadedP99, 2)} | ${round(l.p99, 2)} | ${round(l.p99 / unloadedP99, 2)} | ${round(l.cpuUs)} |`);
  const knee = byLevel.find((l) => l.goodput >= GOODPUT_TARGET * peak)!;
  const feasible = knee.p99 <= P99_TARGET * unloadedP99;
  console.log(`frontier: n* = ${knee.c} (the fewest connections with goodput ≥ ${GOODPUT_TARGET} P: ${round(knee.goodput / peak, 2)} P), its p99 = ${round(knee.p99 / unloadedP99, 2)} U`);
  if (!feasible) console.log(`INFEASIBLE at 1×: goodput ≥ ${GOODPUT_TARGET} P needs ≥ ${knee.c} calls in flight, whose p99 is ${round(knee.p99, 1)} ms = ${round(knee.p99 / unloadedP99, 2)} U > ${P99_TARGET} U (U = ${round(unloadedP99, 1)} ms): no admission policy can meet both targets on this machine`);
  else console.log(`feasible at 1×: a limit of ${knee.c} calls would give ${round(knee.goodput / peak, 2)} P at ${round(knee.p99 / unloadedP99, 2)} U`);
}

/**
 * The frontier at 512 connections: with n admitted, the other 512 − n connections are refused and
 * paused for the Retry-After (≥ 1 s), so at most 512 − n refusals a second, each costing
 * `refusalUs` of gateway CPU that a served call (the level's µs per served) no longer gets; the
 * level's goodput less those calls is the best any limit of n can do there (an estimate: it assumes
 * the gateway's CPU is what binds, and ignores the probe and the queue).
 */
function printFrontier512(byLevel: Level[], peak: number, unloadedP99: number, refusalUs: number): void {
  const at512 = byLevel.map((l) => ({ ...l, goodput: l.goodput - ((512 - l.c) * refusalUs) / l.cpuUs }));
  const knee = at512.find((l) => l.goodput >= GOODPUT_TARGET * peak);
  if (!knee) {
    console.log(`\nfrontier at 512: no level reaches ${GOODPUT_TARGET} P once (512 − n) refusals/s × ${round(refusalUs)} µs are paid: no admission policy can meet the goodput target at 512 on this machine`);
    return;
  }
  const feasible = knee.p99 <= P99_TARGET * unloadedP99;
  console.log(`\nfrontier at 512 (refusals at ${round(refusalUs)} µs each, ≤ 512 − n a second): n* = ${knee.c}, goodput ≈ ${round(knee.goodput / peak, 2)} P, p99 = ${round(knee.p99 / unloadedP99, 2)} U${feasible ? '' : ` > ${P99_TARGET} U: INFEASIBLE at 512, no admission policy can meet both targets on this machine`}`);
}

async function main(): Promise<void> {
  if (!wrkAvailable()) throw new Error('bench 11 needs wrk (/usr/bin/wrk, Debian package wrk)');
  const seconds = envInt('BENCH_SECONDS', 10);
  const rounds = envInt('BENCH_ROUNDS', 3);
  const levels = (process.env.BENCH_CAPACITY_LEVELS ?? '1,2,4,6,8,12,16,24,32,48,64').split(',').map(Number);
  console.log(`# 11-overload: uncached point reads, one identity, wrk closed loop; capacity first, then 1×/2×/4×/512 with admission on and off in alternating rounds (${rounds} rounds of ${seconds} s)`);
  console.log(machineLine());
  await withBenchEnv({}, async (env) => {
    const on = await startGateway(env, true);
    const off = await startGateway(env, false);
    const lim1 = await startGateway(env, true, { INTERLOCK_ADMISSION_MIN_LIMIT: '1', INTERLOCK_ADMISSION_MAX_LIMIT: '1', INTERLOCK_ADMISSION_QUEUE_SIZE: '0', INTERLOCK_ADMISSION_PAUSE_REFUSED_CONNECTIONS: 'false' });
    const floor = await startTsChild('bench/lib/refusal-floor-server.ts', {});
    const variantConfig = process.env.BENCH_VARIANT_CONFIG;
    const variant = variantConfig ? await startGateway(env, true, { INTERLOCK_CONFIG: variantConfig }) : null;
    const modes: Mode[] = variant ? ['on', 'off', 'variant'] : ['on', 'off'];
    const gatewayOf = (mode: Mode) => (mode === 'on' ? on : mode === 'off' ? off : variant!);
    const holder = holdSlot(lim1, env.apiKey);
    try {
      const warm = Math.min(3, seconds);
      for (const gw of [on, off, lim1, ...(variant ? [variant] : [])]) await measure(gw, env, 16, warm, false);

      // 1. Capacity, admission off: the level of the highest median goodput.
      const sweep = new Map<number, Measured[]>(levels.map((c) => [c, []]));
      for (let r = 0; r < rounds; r++) {
        for (const c of levels) {
          const m = await measure(off, env, c, seconds, false);
          sweep.get(c)!.push(m);
          console.log(JSON.stringify({ capacity: c, round: r + 1, goodput: round(m.w.served / m.w.seconds), p50: m.w.p50Ms, p99: m.w.p99Ms, other: m.w.other, socketErrors: m.w.socketErrors, load1: round(m.load1) }));
        }
      }
      const goodputOf = (m: Measured) => m.w.served / m.w.seconds;
      const byLevel: Level[] = levels.map((c) => ({ c, goodput: median(sweep.get(c)!.map(goodputOf)), p50: median(sweep.get(c)!.map((m) => m.w.p50Ms)), p99: median(sweep.get(c)!.map((m) => m.w.p99Ms)), cpuUs: median(sweep.get(c)!.map((m) => (m.cpuMs * 1000) / Math.max(1, m.w.served))) }));
      const best = byLevel.reduce((a, b) => (b.goodput > a.goodput ? b : a));
      const capacity = best.c;
      const peak = best.goodput;
      const unloadedP99 = byLevel.find((l) => l.c === Math.min(...levels))!.p99;
      console.log(`capacity: ${capacity} connections, P = ${round(peak)} calls/s (median of ${rounds}: ${sweep.get(capacity)!.map((m) => round(goodputOf(m))).join(', ')}); U = ${unloadedP99} ms (median p99 at ${Math.min(...levels)} connection)`);
      if (capacity === Math.max(...levels)) console.log(`(C is the highest level swept: the peak may lie beyond ${capacity} connections, and P be underestimated)`);
      printFrontier(byLevel, peak, unloadedP99);

      // 2. 1×, 2×, 4× and 512, admission on and off in turn, BENCH_ROUNDS rounds.
      const loads: Array<[string, number]> = [
        ['1×', capacity],
        ['2×', 2 * capacity],
        ['4×', 4 * capacity],
        ['512', 512],
      ];
      // The on-gateway idled through part 1 while the off one served (its pools closed idle
      // connections, its caches expired): warmed again here, else round 1 compared a cold gateway
      // with a warm one (bench/admission-trace.ts: a cold gateway, admission on or off, ramps for 1–2.5 s).
      // And as long as the off one was loaded in part 1 (h29g): a gateway's JIT keeps getting cheaper per call
      // for tens of seconds of load, and with only `warm` seconds the on-gateway paid ~15 % more CPU per served
      // call at 1× and 2× than the off one, which had served the whole sweep (a variant with a limit that
      // never binds paid the same: not the limiter's doing). BENCH_PART2_WARM_SECONDS (default: the seconds the
      // sweep loaded the off-gateway, at most 60) of load at C for each admission-on gateway, in slices that
      // alternate between them.
      const part2Warm = envInt('BENCH_PART2_WARM_SECONDS', Math.min(60, rounds * levels.length * seconds));
      const warmed = [on, ...(variant ? [variant] : [])];
      for (let done = 0; done < part2Warm; done += warm) for (const gw of warmed) await measure(gw, env, capacity, Math.min(warm, part2Warm - done), false);
      const rows: Row[] = [];
      for (const mode of modes) for (const [label, c] of loads) rows.push({ admission: mode, load: label, connections: c, rounds: [], servedAt1x: [] });
      const rowOf = (mode: Mode, label: string) => rows.find((x) => x.admission === mode && x.load === label)!;
      for (let r = 0; r < rounds; r++) {
        // Which mode goes first rotates by round.
        const order = modes.map((_, i) => modes[(i + r) % modes.length]);
        for (const [label, c] of loads) {
          for (const mode of order) {
            const m = await measure(gatewayOf(mode), env, c, seconds, true);
            rowOf(mode, label).rounds.push(m);
            console.log(JSON.stringify({ admission: mode, load: label, round: r + 1, goodput: round(goodputOf(m)), refused: m.w.refused, late: m.w.refusedOther, retryAfter: m.w.refusedWithRetryAfter, other: m.w.other, socketErrors: m.w.socketErrors, p99All: m.w.p99Ms, admittedP99: round(pct(m.probe.admitted, 99)), probeServed: m.probe.admitted.length, probeRefused: m.probe.refused, cpuMsPerServed: round(m.cpuMs / Math.max(1, m.w.served + m.probe.admitted.length), 3), peakRssMiB: m.peakRssMiB, load1: round(m.load1) }));
          }
        }
        for (const mode of order) {
          const m1 = rowOf(mode, '1×').rounds[r];
          const servedCpu = m1.cpuMs / Math.max(1, m1.w.served + m1.probe.admitted.length);
          for (const [label] of loads) rowOf(mode, label).servedAt1x.push(servedCpu);
        }
      }

      // 3. A refusal's CPU on its own, beside a served call's and the floor's.
      const refusalRounds: RefusalRound[] = [];
      for (let r = 0; r < rounds; r++) {
        const rr = await refusalRound(env, lim1, floor, on, capacity, seconds, holder);
        refusalRounds.push(rr);
        console.log(JSON.stringify({ refusalAlone: r + 1, refusalUs: round(rr.refusalUs), refused: rr.refused, retryAfter: rr.refusedWithRetryAfter, servedUs: round(rr.servedUs), ratio: round(rr.refusalUs / rr.servedUs, 3), floorUs: round(rr.floorUs), floorRequests: rr.floorRequests, refusalControlUs: round(rr.refusalControlUs), servedControlUs: round(rr.servedControlUs), servedSourceUs: round(rr.servedSourceUs), load1: round(rr.load1) }));
      }

      const dash = (x: number) => (Number.isNaN(x) ? '–' : String(x));
      console.log(`\ncapacity C = ${capacity} connections; P = ${round(peak)} calls/s; U = ${unloadedP99} ms; medians of ${rounds} rounds of ${seconds} s\n`);
      console.log('| admission | load | connections | goodput calls/s (median; each round) | ÷ P | refused/s | refusals with Retry-After | of them late (not rate_limited) | other answers | socket errors | p50 ms (all) | p99 ms (all) | admitted p99 ms (probe) | ÷ U | probe served / refused | CPU ms / served | CPU ms / refusal | refusal ÷ served | peak RSS MiB | load avg (1 min) |');
      console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
      const summary: Array<{ admission: string; load: string; goodputVsPeak: number; admittedVsU: number; refusalVsServed: number; allRetryAfter: boolean }> = [];
      for (const row of rows) {
        const ms = row.rounds;
        const sum = (f: (m: Measured) => number) => ms.reduce((a, m) => a + f(m), 0);
        const goodputs = ms.map(goodputOf);
        const goodput = median(goodputs);
        const perServed = median(ms.map((m) => m.cpuMs / Math.max(1, m.w.served + m.probe.admitted.length)));
        const perRefusal = median(ms.map((m, i) => (m.w.refused > 0 ? (m.cpuMs - (m.w.served + m.probe.admitted.length) * row.servedAt1x[i]) / m.w.refused : NaN)));
        const refusalVsServed = median(ms.map((m, i) => (m.w.refused > 0 ? (m.cpuMs - (m.w.served + m.probe.admitted.length) * row.servedAt1x[i]) / m.w.refused / row.servedAt1x[i] : NaN)));
        const admittedP99 = median(ms.map((m) => pct(m.probe.admitted, 99)));
        const refused = sum((m) => m.w.refused);
        const withRetry = sum((m) => m.w.refusedWithRetryAfter);
        summary.push({ admission: row.admission, load: row.load, goodputVsPeak: goodput / peak, admittedVsU: admittedP99 / unloadedP99, refusalVsServed, allRetryAfter: withRetry === refused });
        console.log(
          `| ${row.admission} | ${row.load} | ${row.connections} | ${round(goodput)} (${goodputs.map((g) => round(g)).join(', ')}) | ${round(goodput / peak, 2)} | ${round(median(ms.map((m) => m.w.refused / m.w.seconds)))} | ${withRetry} of ${refused} | ${sum((m) => m.w.refusedOther)} | ${sum((m) => m.w.other)} | ${sum((m) => m.w.socketErrors)} | ${round(median(ms.map((m) => m.w.p50Ms)))} | ${round(median(ms.map((m) => m.w.p99Ms)))} | ${dash(round(admittedP99))} | ${dash(round(admittedP99 / unloadedP99, 2))} | ${sum((m) => m.probe.admitted.length)} / ${sum((m) => m.probe.refused)} | ${round(perServed, 3)} | ${dash(round(perRefusal, 3))} | ${dash(round(refusalVsServed, 3))} | ${Math.max(...ms.map((m) => m.peakRssMiB))} | ${ms.map((m) => round(m.load1)).join(', ')} |`,
        );
      }
      console.log('\nrefusal alone (limit 1 kept full, 32 connections, no pause), per round: gateway µs per refusal / per served call at C (admission on) / ratio / node:http floor µs per request / load');
      for (const rr of refusalRounds) console.log(`  ${round(rr.refusalUs)} / ${round(rr.servedUs)} / ${round(rr.refusalUs / rr.servedUs, 3)} / ${round(rr.floorUs)} / ${round(rr.load1)}  (${rr.refusedWithRetryAfter} of ${rr.refused} refusals with Retry-After; floor ${rr.floorRequests} requests)`);
      const ratio = median(refusalRounds.map((rr) => rr.refusalUs / rr.servedUs));
      console.log(`  median: ${round(median(refusalRounds.map((rr) => rr.refusalUs)))} µs per refusal = ${round(ratio, 3)} × a served call (${round(median(refusalRounds.map((rr) => rr.servedUs)))} µs); floor ${round(median(refusalRounds.map((rr) => rr.floorUs)))} µs`);
      // The databases' side: a served call costs the source's backend its statement and the control database its audit row; a refusal sends nothing to the source and is audited in aggregate.
      const withDb = median(refusalRounds.map((rr) => (rr.refusalUs + rr.refusalControlUs) / (rr.servedUs + rr.servedControlUs + rr.servedSourceUs)));
      console.log(`  with the databases' backends (gateway + control + source): ${round(median(refusalRounds.map((rr) => rr.refusalUs + rr.refusalControlUs)))} µs per refusal (control ${round(median(refusalRounds.map((rr) => rr.refusalControlUs)))}, source 0) / ${round(median(refusalRounds.map((rr) => rr.servedUs + rr.servedControlUs + rr.servedSourceUs)))} µs per served call (control ${round(median(refusalRounds.map((rr) => rr.servedControlUs)))}, source ${round(median(refusalRounds.map((rr) => rr.servedSourceUs)))}) = ${round(withDb, 3)} ×`);
      // The frontier at 512: the same levels, less the served calls the refusals of the other connections' retries would cost.
      printFrontier512(byLevel, peak, unloadedP99, median(refusalRounds.map((rr) => rr.refusalUs)));
      for (const mode of modes.filter((m) => m !== 'off')) {
        const onRows = summary.filter((x) => x.admission === mode);
        console.log(`\nadmission ${mode}: goodput ≥ 0.9 P at every load: ${onRows.every((x) => x.goodputVsPeak >= 0.9)}; admitted p99 ≤ 3 U: ${onRows.every((x) => !(x.admittedVsU > 3))}; refusal ≤ 0.1 served CPU (alone, admission on): ${ratio <= 0.1}; every refusal with Retry-After: ${onRows.every((x) => x.allRetryAfter)}`);
      }
    } finally {
      const stopping = holder.stop();
      await Promise.all([on.stop(), off.stop(), lim1.stop(), floor.stop(), ...(variant ? [variant.stop()] : [])]);
      await stopping;
    }
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
