/**
 * Scenario 11 (issue 29, item 1, "Must show"): uncached point reads under overload, admission by
 * capacity on and off. wrk (closed loop, C, so the driver costs little CPU; one identity; the
 * modern dialect, so a refusal is an HTTP 429) drives `interlock serve`:
 *
 * 1. Capacity: admission off, wrk at BENCH_CAPACITY_LEVELS connections (default 1,2,4,8,16,32),
 *    BENCH_SECONDS each; the capacity C is the concurrency of peak goodput P, the unloaded p99 U
 *    is wrk's p99 at 1 connection.
 * 2. For admission on (the defaults) and off (INTERLOCK_ADMISSION_ENABLED=false), a fresh gateway,
 *    warmed up at C, then wrk at C ("1×"), 2C ("2×"), 4C ("4×") and 512 connections, BENCH_SECONDS
 *    each. Per run: goodput (HTTP 200 answers carrying rows, per second) and goodput ÷ P; refusals
 *    per second and how many carried Retry-After (wrk's Lua `response` hook sorts every answer);
 *    other answers and socket errors; wrk's p50/p99 over all answers; the p99 of admitted calls (a
 *    1-connection probe beside wrk, same identity, recording only its non-refused calls) and its
 *    ratio to U; gateway CPU per served call; CPU per refusal, from the same run:
 *    (gateway CPU − served × CPU per served call at 1×) ÷ refusals, and its ratio to a served
 *    call (noisy: a difference of two large figures); peak RSS (VmHWM) of the gateway; the
 *    machine's load average.
 * 3. A refusal's CPU on its own (refusalCpu): limit 1, no queue, its slot kept busy by slow reads,
 *    wrk at 32 connections refused; against a served call's CPU at 1× with admission on.
 *
 * The targets: goodput ≥ 0.9 × P at 1×, 2×, 4× and 512; CPU per refusal ≤ 0.1 × a served
 * call's; admitted p99 ≤ 3 × U; every refusal with Retry-After; RSS within the per-call budget of
 * issue 10. The client caps per identity and address are lifted (100,000) so admission by capacity,
 * not the stream caps, is what refuses. Not a timed test: one run's ratios; on a shared machine the
 * load average printed with each row says how far to trust them. Needs /usr/bin/wrk.
 *
 * Run: `npx tsx bench/11-overload.ts` (BENCH_SECONDS=10 default; `BENCH_SECONDS=2` proves it runs).
 */
import { loadavg } from 'node:os';
import { gatewayVars, procMemory, startServe, withBenchEnv, type BenchEnv, type GatewayChild } from './lib/env';
import { procCpuMs } from './lib/cpu';
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

/** A 1-connection probe beside wrk: latencies (ms) of its admitted (HTTP 200) calls until `stop`. */
function probe(url: string, apiKey: string): { stop(): Promise<number[]> } {
  let running = true;
  const lat: number[] = [];
  const headers = callHeaders(apiKey);
  const loop = (async () => {
    while (running) {
      const t0 = performance.now();
      try {
        const r = await fetch(url, { method: 'POST', headers, body: pointBody(1 + Math.floor(Math.random() * TRACKS)) });
        await r.text();
        if (r.status === 200) lat.push(performance.now() - t0);
        else await new Promise((res) => setTimeout(res, 20));
      } catch {
        await new Promise((res) => setTimeout(res, 20));
      }
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return lat;
    },
  };
}

/** The p-th percentile (0–100) of `xs`, NaN when empty. */
function pct(xs: number[], p: number): number {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

const round = (x: number, d = 1) => (Number.isFinite(x) ? Math.round(x * 10 ** d) / 10 ** d : NaN);

/** One measured run at a number of connections, with the gateway's CPU and the probe. */
interface Measured {
  w: WrkOverloadRun;
  cpuMs: number;
  admitted: number[];
}

async function measure(gw: GatewayChild, env: BenchEnv, connections: number, seconds: number, withProbe: boolean): Promise<Measured> {
  const cpu0 = procCpuMs(gw.pid);
  const p = withProbe ? probe(gw.url, env.apiKey) : null;
  const w = await runWrkOverload({ url: gw.url, connections, seconds, bodies: BODIES, headers: callHeaders(env.apiKey), expect: '"track_id"' });
  const admitted = p ? await p.stop() : [];
  return { w, cpuMs: procCpuMs(gw.pid) - cpu0, admitted };
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

/**
 * CPU of a refusal measured on its own: a gateway whose limit is 1 with no queue and no pause of
 * refused connections, its one slot kept busy by a loop of slow reads, wrk at 32 connections: (the
 * gateway's CPU − the few wrk calls served in between × `servedCpuMs`) ÷ refusals.
 */
async function refusalCpu(env: BenchEnv, seconds: number, servedCpuMs: number): Promise<{ perRefusalMs: number; refused: number; refusedWithRetryAfter: number; served: number }> {
  const gw = await startGateway(env, true, { INTERLOCK_ADMISSION_MIN_LIMIT: '1', INTERLOCK_ADMISSION_MAX_LIMIT: '1', INTERLOCK_ADMISSION_QUEUE_SIZE: '0', INTERLOCK_ADMISSION_PAUSE_REFUSED_CONNECTIONS: 'false' });
  let holding = true;
  const holder = (async () => {
    while (holding) await fetch(gw.url, { method: 'POST', headers: callHeaders(env.apiKey), body: SLOW_BODY }).then((r) => r.text()).catch(() => undefined);
  })();
  try {
    await measure(gw, env, 32, Math.min(2, seconds), false); // warm-up of the refusal path
    const m = await measure(gw, env, 32, seconds, false);
    return { perRefusalMs: (m.cpuMs - m.w.served * servedCpuMs) / Math.max(1, m.w.refused), refused: m.w.refused, refusedWithRetryAfter: m.w.refusedWithRetryAfter, served: m.w.served };
  } finally {
    holding = false;
    await gw.stop();
    await holder;
  }
}

interface Row {
  admission: string;
  load: string;
  connections: number;
  goodput: number;
  goodputVsPeak: number;
  refusedPerS: number;
  refusedWithRetryAfter: number;
  refused: number;
  other: number;
  socketErrors: number;
  p50: number;
  p99: number;
  admittedP99: number;
  admittedP99VsUnloaded: number;
  cpuPerServedMs: number;
  cpuPerRefusalMs: number;
  refusalVsServed: number;
  peakRssMiB: number;
  load1: number;
}

async function main(): Promise<void> {
  if (!wrkAvailable()) throw new Error('bench 11 needs wrk (/usr/bin/wrk, Debian package wrk)');
  const seconds = envInt('BENCH_SECONDS', 10);
  const levels = (process.env.BENCH_CAPACITY_LEVELS ?? '1,2,4,8,16,32').split(',').map(Number);
  console.log('# 11-overload: uncached point reads, one identity, wrk closed loop; capacity first, then 1×/2×/4×/512 with admission on and off');
  console.log(machineLine());
  const rows: Row[] = [];
  let refusalLine = '';
  await withBenchEnv({}, async (env) => {
    // 1. Capacity, admission off: the concurrency of peak goodput.
    const sweep: Array<{ c: number; goodput: number; p99: number }> = [];
    const gw0 = await startGateway(env, false);
    try {
      await measure(gw0, env, levels[Math.floor(levels.length / 2)], Math.min(3, seconds), false); // warm-up
      for (const c of levels) {
        const m = await measure(gw0, env, c, seconds, false);
        sweep.push({ c, goodput: m.w.served / m.w.seconds, p99: m.w.p99Ms });
        console.log(JSON.stringify({ capacity: c, goodput: round(m.w.served / m.w.seconds), p50: m.w.p50Ms, p99: m.w.p99Ms, other: m.w.other, socketErrors: m.w.socketErrors, load1: round(loadavg()[0]) }));
      }
    } finally {
      await gw0.stop();
    }
    const best = sweep.reduce((a, b) => (b.goodput > a.goodput ? b : a));
    const capacity = best.c;
    const peak = best.goodput;
    const unloadedP99 = sweep.find((s) => s.c === Math.min(...levels))!.p99;
    console.log(`capacity: ${capacity} connections, peak goodput ${round(peak)} calls/s; unloaded p99 (${Math.min(...levels)} connection) ${unloadedP99} ms`);

    // 2. 1×, 2×, 4× and 512, admission on and off.
    const loads: Array<[string, number]> = [
      ['1×', capacity],
      ['2×', 2 * capacity],
      ['4×', 4 * capacity],
      ['512', 512],
    ];
    for (const mode of ['on', 'off'] as const) {
      const gw = await startGateway(env, mode === 'on');
      try {
        await measure(gw, env, capacity, Math.min(3, seconds), false); // warm-up
        let servedCpu = NaN;
        for (const [label, c] of loads) {
          const m = await measure(gw, env, c, seconds, true);
          const served = m.w.served + m.admitted.length;
          const perServed = m.cpuMs / Math.max(1, served);
          if (label === '1×') servedCpu = perServed;
          const perRefusal = m.w.refused > 0 ? (m.cpuMs - served * servedCpu) / m.w.refused : NaN;
          const goodput = m.w.served / m.w.seconds;
          const admittedP99 = pct(m.admitted, 99);
          rows.push({
            admission: mode,
            load: label,
            connections: c,
            goodput: round(goodput),
            goodputVsPeak: round(goodput / peak, 2),
            refusedPerS: round(m.w.refused / m.w.seconds),
            refused: m.w.refused,
            refusedWithRetryAfter: m.w.refusedWithRetryAfter,
            other: m.w.other,
            socketErrors: m.w.socketErrors,
            p50: m.w.p50Ms,
            p99: m.w.p99Ms,
            admittedP99: round(admittedP99),
            admittedP99VsUnloaded: round(admittedP99 / unloadedP99, 2),
            cpuPerServedMs: round(perServed, 3),
            cpuPerRefusalMs: round(perRefusal, 3),
            refusalVsServed: round(perRefusal / servedCpu, 3),
            peakRssMiB: Math.round(procMemory(gw.pid).hwmKiB / 1024),
            load1: round(loadavg()[0]),
          });
          console.log(JSON.stringify(rows.at(-1)));
        }
      } finally {
        await gw.stop();
      }
    }
    // 3. A refusal's CPU on its own, against a served call's at 1× with admission on.
    const servedCpu = rows.find((r) => r.admission === 'on' && r.load === '1×')!.cpuPerServedMs;
    const rc = await refusalCpu(env, seconds, servedCpu);
    refusalLine = `refusal on its own (limit 1 kept full, 32 connections, no pause): ${round(rc.perRefusalMs, 3)} ms of gateway CPU per refusal over ${rc.refused} refusals (${rc.refusedWithRetryAfter} with Retry-After; ${rc.served} served in between) = ${round(rc.perRefusalMs / servedCpu, 3)} × a served call's ${servedCpu} ms`;
    console.log(refusalLine);
    console.log(`\ncapacity ${capacity} connections; peak goodput P = ${round(peak)} calls/s; unloaded p99 U = ${unloadedP99} ms\n`);
  });
  const dash = (x: number) => (Number.isNaN(x) ? '–' : String(x));
  console.log('| admission | load | connections | goodput calls/s | ÷ P | refused/s | refusals with Retry-After | other answers | socket errors | p50 ms (all) | p99 ms (all) | admitted p99 ms (probe) | ÷ U | CPU ms / served | CPU ms / refusal | refusal ÷ served | peak RSS MiB | load avg (1 min) |');
  console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of rows) {
    console.log(
      `| ${r.admission} | ${r.load} | ${r.connections} | ${r.goodput} | ${r.goodputVsPeak} | ${r.refusedPerS} | ${r.refusedWithRetryAfter} of ${r.refused} | ${r.other} | ${r.socketErrors} | ${r.p50} | ${r.p99} | ${dash(r.admittedP99)} | ${dash(r.admittedP99VsUnloaded)} | ${r.cpuPerServedMs} | ${dash(r.cpuPerRefusalMs)} | ${dash(r.refusalVsServed)} | ${r.peakRssMiB} | ${r.load1} |`,
    );
  }
  console.log(`\n${refusalLine}`);
  const on = rows.filter((r) => r.admission === 'on');
  console.log(`\nadmission on: goodput ≥ 0.9 P at every load: ${on.every((r) => r.goodputVsPeak >= 0.9)}; admitted p99 ≤ 3 U: ${on.every((r) => !(r.admittedP99VsUnloaded > 3))}; refusal ≤ 0.1 served CPU: ${on.every((r) => !(r.refusalVsServed > 0.1))}; every refusal with Retry-After: ${on.every((r) => r.refusedWithRetryAfter === r.refused)}`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
