/**
 * Scenario 11 (issue 29, item 1): point reads under overload, admission by capacity on and off.
 * wrk (closed loop, one identity, the modern dialect, so a refusal is HTTP 429 and counts as
 * "Non-2xx") drives `interlock serve` at 8 connections (where the gateway serves its most calls per
 * second on this machine: "1×"), then 16 ("2×"), 32 ("4×") and 512 connections, for BENCH_SECONDS
 * each (default 10), with admission on (the defaults) and off (INTERLOCK_ADMISSION_ENABLED=false).
 * Per run: goodput (answers that were not refusals, per second), refusals per second, wrk's latency
 * over all answers, the p99 of admitted calls (a 1-connection probe beside wrk that records the
 * latency of its non-refused calls), gateway CPU per served call and, from the same run, the CPU a
 * refusal costs ((cpu − served × cpu per served call at 8 connections) ÷ refused), peak RSS and the
 * machine's load average. Client limits per identity and per address are lifted (100,000) so
 * that admission by capacity, not the stream caps, is what refuses. Not a timed test: ratios of one
 * run on a shared machine. Run: `npx tsx bench/11-overload.ts`.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { execFile } from 'node:child_process';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { gatewayVars, procMemory, startServe, withBenchEnv, type GatewayChild } from './lib/env';
import { procCpuMs } from './lib/cpu';
import { POINT_SQL, TRACKS } from './lib/point-read';
import { envInt, machineLine } from './lib/stats';

const run = promisify(execFile);
const MODERN = '2026-07-28';

/** The wrk Lua script: POST interlock_query point reads with a random track id each. */
function wrkScript(apiKey: string): string {
  const body = (id: string) =>
    `'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"interlock_query","arguments":{"source_id":"chinook","sql":${JSON.stringify(JSON.stringify(POINT_SQL).slice(1, -1))},"params":[' .. ${id} .. ']},"_meta":{"io.modelcontextprotocol/protocolVersion":"${MODERN}","io.modelcontextprotocol/clientCapabilities":{}}}}'`;
  return [
    'wrk.method = "POST"',
    'wrk.headers["Content-Type"] = "application/json"',
    'wrk.headers["Accept"] = "application/json, text/event-stream"',
    `wrk.headers["Authorization"] = "Bearer ${apiKey}"`,
    `wrk.headers["MCP-Protocol-Version"] = "${MODERN}"`,
    'wrk.headers["Mcp-Method"] = "tools/call"',
    'wrk.headers["Mcp-Name"] = "interlock_query"',
    `request = function() return wrk.format(nil, nil, nil, ${body(`math.random(1, ${TRACKS})`)}) end`,
  ].join('\n');
}

interface WrkResult {
  requests: number;
  non2xx: number;
  seconds: number;
  p50Ms: number;
  p99Ms: number;
  socketErrors: string;
}

function ms(v: string): number {
  const m = /^([\d.]+)(us|ms|s)$/.exec(v.trim());
  if (!m) return NaN;
  return Number(m[1]) * (m[2] === 'us' ? 0.001 : m[2] === 's' ? 1000 : 1);
}

async function wrk(url: string, script: string, connections: number, seconds: number): Promise<WrkResult> {
  const r = await run('wrk', ['-t', '2', '-c', String(connections), '-d', `${seconds}s`, '--latency', '--timeout', '10s', '-s', script, url], { maxBuffer: 1 << 20 });
  const out = r.stdout;
  const requests = Number(/(\d+) requests in ([\d.]+)(s|m)/.exec(out)?.[1] ?? NaN);
  const secs = Number(/(\d+) requests in ([\d.]+)s/.exec(out)?.[2] ?? seconds);
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0);
  const p50 = ms(/\n\s+50%\s+(\S+)/.exec(out)?.[1] ?? '');
  const p99 = ms(/\n\s+99%\s+(\S+)/.exec(out)?.[1] ?? '');
  const socketErrors = /Socket errors: (.*)/.exec(out)?.[1] ?? 'none';
  return { requests, non2xx, seconds: secs, p50Ms: p50, p99Ms: p99, socketErrors };
}

/** A 1-connection probe beside wrk: latencies (ms) of its admitted (non-429) calls until `stop`. */
function probe(url: string, apiKey: string): { stop(): Promise<number[]> } {
  let running = true;
  const lat: number[] = [];
  const loop = (async () => {
    while (running) {
      const t0 = performance.now();
      try {
        const r = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${apiKey}`, 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'interlock_query' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: POINT_SQL, params: [1 + Math.floor(Math.random() * TRACKS)] }, _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} } } }),
        });
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

function pct(xs: number[], p: number): number {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

interface Row {
  mode: string;
  connections: number;
  goodput: number;
  refusedPerS: number;
  p50: number;
  p99: number;
  admittedP99: number;
  cpuPerServedMs: number;
  cpuPerRefusalMs: number;
  peakRssMiB: number;
  load1: number;
  socketErrors: string;
}

async function main(): Promise<void> {
  const seconds = envInt('BENCH_SECONDS', 10);
  const levels = (process.env.BENCH_CONNECTIONS ?? '8,16,32,512').split(',').map(Number);
  console.log('# 11-overload: point reads, one identity, wrk closed loop; admission by capacity on and off');
  console.log(machineLine());
  const rows: Row[] = [];
  await withBenchEnv({}, async (env) => {
    const dir = mkdtempSync(join(tmpdir(), 'il-bench-overload-'));
    const script = join(dir, 'point.lua');
    writeFileSync(script, wrkScript(env.apiKey));
    for (const mode of ['on', 'off'] as const) {
      const gw: GatewayChild = await startServe({
        ...gatewayVars(env.controlUrl),
        INTERLOCK_ADMISSION_ENABLED: mode === 'on' ? 'true' : 'false',
        INTERLOCK_STREAMS_PER_IDENTITY: '100000',
        INTERLOCK_STREAMS_PER_ADDRESS: '100000',
        INTERLOCK_BODY_READS_PER_ADDRESS: '100000',
      });
      try {
        await wrk(gw.url, script, 8, 3); // warm-up: analysis cache, pools, JIT
        let servedCpu = NaN;
        for (const c of levels) {
          const cpu0 = procCpuMs(gw.pid);
          const p = probe(gw.url, env.apiKey);
          const w = await wrk(gw.url, script, c, seconds);
          const lat = await p.stop();
          const cpu = procCpuMs(gw.pid) - cpu0;
          const served = w.requests - w.non2xx + lat.length;
          const refused = w.non2xx;
          const perServed = cpu / Math.max(1, served);
          if (c === levels[0]) servedCpu = perServed;
          rows.push({
            mode,
            connections: c,
            goodput: Math.round((w.requests - w.non2xx) / w.seconds),
            refusedPerS: Math.round(refused / w.seconds),
            p50: w.p50Ms,
            p99: w.p99Ms,
            admittedP99: Math.round(pct(lat, 99) * 10) / 10,
            cpuPerServedMs: Math.round(perServed * 1000) / 1000,
            cpuPerRefusalMs: refused > 0 ? Math.round(((cpu - served * servedCpu) / refused) * 1000) / 1000 : NaN,
            peakRssMiB: Math.round(procMemory(gw.pid).hwmKiB / 1024),
            load1: Math.round(loadavg()[0] * 10) / 10,
            socketErrors: w.socketErrors,
          });
          console.log(JSON.stringify(rows.at(-1)));
        }
      } finally {
        await gw.stop();
      }
    }
  });
  console.log('\n| admission | connections | goodput calls/s | refused/s | p50 ms (all) | p99 ms (all) | admitted p99 ms (probe) | CPU ms / served call | CPU ms / refusal | peak RSS MiB | load avg (1 min) | socket errors |');
  console.log('|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of rows) console.log(`| ${r.mode} | ${r.connections} | ${r.goodput} | ${r.refusedPerS} | ${r.p50} | ${r.p99} | ${r.admittedP99} | ${r.cpuPerServedMs} | ${Number.isNaN(r.cpuPerRefusalMs) ? '–' : r.cpuPerRefusalMs} | ${r.peakRssMiB} | ${r.load1} | ${r.socketErrors} |`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
