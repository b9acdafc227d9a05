/**
 * Bench 11's feasibility frontier (part 1: admission off, wrk closed loop, one identity, uncached
 * point reads) for two gateways side by side in the same rounds (issue 29, h29x: move the curve,
 * not the limit). Side `before`: the checkout BEFORE_ROOT (default this one) with node flags
 * BEFORE_FLAGS and config file BEFORE_CONFIG; side `after`: this checkout with AFTER_FLAGS and
 * AFTER_CONFIG (flags split on spaces; a config file reaches the child as INTERLOCK_CONFIG). Both
 * run like bench 11's admission-off gateway (cache off, client caps lifted), are warmed for 2 s at
 * 16 connections, then BENCH_ROUNDS rounds (default 3) of wrk for BENCH_SECONDS (default 4) at each
 * of BENCH_CAPACITY_LEVELS (default 1,8,16,24,32,48,64), the two sides in turn per level (which
 * goes first alternates by round). Prints every run (goodput, wrk p50/p99, 1-minute load), then per
 * level and side the median goodput and p99 over the rounds, each side's P (highest median goodput)
 * and U (median p99 at 1 connection), goodput ÷ P and p99 ÷ U, and the same in the before side's P
 * and U (so the after side's curve is read against the same yardstick); then each side's n* (fewest
 * connections with goodput ≥ 0.9 P) and its p99 ÷ U, and the best goodput ÷ P within p99 ≤ 3 U.
 * Not a timed test: medians of same-run rounds; the load beside each run says how far to trust them.
 *
 * Run: `npm run -s build && AFTER_FLAGS=--max-semi-space-size=64 flock /tmp/bench.lock npx tsx bench/frontier-ab.ts`.
 */
import { loadavg } from 'node:os';
import path from 'node:path';
import { gatewayVars, ROOT, startServe, withBenchEnv, type BenchEnv, type GatewayChild } from './lib/env';
import { POINT_SQL, TRACKS } from './lib/point-read';
import { envInt } from './lib/stats';
import { runWrkOverload, wrkAvailable } from './lib/wrk';

const MODERN = '2026-07-28';
const META = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} };
const HEADERS = (apiKey: string) => ({ 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${apiKey}`, 'MCP-Protocol-Version': MODERN, 'Mcp-Method': 'tools/call', 'Mcp-Name': 'interlock_query' });
const BODIES = Array.from({ length: 500 }, (_, i) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: POINT_SQL, params: [1 + ((i * 7919) % TRACKS)] }, _meta: META } }));

/** One side of the comparison. */
interface Side {
  name: 'before' | 'after';
  root: string;
  flags: string[];
  config?: string;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

function startSide(env: BenchEnv, s: Side): Promise<GatewayChild> {
  return startServe(
    { ...gatewayVars(env.controlUrl, { cacheTtlMs: 0 }), INTERLOCK_ADMISSION_ENABLED: 'false', INTERLOCK_STREAMS_PER_IDENTITY: '100000', INTERLOCK_STREAMS_PER_ADDRESS: '100000', INTERLOCK_BODY_READS_PER_ADDRESS: '100000', ...(s.config ? { INTERLOCK_CONFIG: s.config } : {}) },
    s.flags,
    s.root,
  );
}

async function main(): Promise<void> {
  if (!wrkAvailable()) throw new Error('needs wrk (/usr/bin/wrk)');
  const split = (v: string | undefined) => (v ?? '').split(' ').filter(Boolean);
  const sides: Side[] = [
    { name: 'before', root: path.resolve(process.env.BEFORE_ROOT ?? ROOT), flags: split(process.env.BEFORE_FLAGS), config: process.env.BEFORE_CONFIG },
    { name: 'after', root: ROOT, flags: split(process.env.AFTER_FLAGS), config: process.env.AFTER_CONFIG },
  ];
  const levels = (process.env.BENCH_CAPACITY_LEVELS ?? '1,8,16,24,32,48,64').split(',').map(Number);
  const rounds = envInt('BENCH_ROUNDS', 3);
  const seconds = envInt('BENCH_SECONDS', 4);
  for (const s of sides) console.log(`# ${s.name}: ${s.root} flags [${s.flags.join(' ')}] config ${s.config ?? '-'}`);
  await withBenchEnv({}, async (env) => {
    const gws = new Map<string, GatewayChild>();
    for (const s of sides) gws.set(s.name, await startSide(env, s));
    const runs = new Map<string, Array<{ goodput: number; p99: number }>>();
    try {
      const headers = HEADERS(env.apiKey);
      for (const s of sides) await runWrkOverload({ url: gws.get(s.name)!.url, connections: 16, seconds: 2, bodies: BODIES, headers, expect: '"track_id"' });
      for (let r = 0; r < rounds; r++) {
        for (const n of levels) {
          const order = r % 2 === 0 ? sides : [...sides].reverse();
          for (const s of order) {
            const w = await runWrkOverload({ url: gws.get(s.name)!.url, connections: n, seconds, bodies: BODIES, headers, expect: '"track_id"' });
            const goodput = w.served / w.seconds;
            const key = `${s.name}:${n}`;
            runs.set(key, [...(runs.get(key) ?? []), { goodput, p99: w.p99Ms }]);
            console.log(`round ${r + 1} n=${n} ${s.name}: ${Math.round(goodput)} calls/s, p50 ${w.p50Ms.toFixed(2)} p99 ${w.p99Ms.toFixed(2)} ms, other ${w.other + w.refused}, socket errors ${w.socketErrors}, load ${loadavg()[0].toFixed(2)}`);
          }
        }
      }
    } finally {
      for (const gw of gws.values()) await gw.stop();
    }
    const med = (s: string, n: number, k: 'goodput' | 'p99') => median(runs.get(`${s}:${n}`)!.map((x) => x[k]));
    const yard = new Map(sides.map((s) => [s.name, { P: Math.max(...levels.map((n) => med(s.name, n, 'goodput'))), U: levels.includes(1) ? med(s.name, 1, 'p99') : NaN }]));
    const b = yard.get('before')!;
    for (const s of sides) {
      const { P, U } = yard.get(s.name)!;
      console.log(`\n${s.name}: P = ${Math.round(P)} calls/s, U = ${U.toFixed(2)} ms`);
      console.log(`| n | ${levels.join(' | ')} |`);
      console.log(`|---|${levels.map(() => '---').join('|')}|`);
      console.log(`| goodput calls/s | ${levels.map((n) => Math.round(med(s.name, n, 'goodput'))).join(' | ')} |`);
      console.log(`| p99 ms | ${levels.map((n) => med(s.name, n, 'p99').toFixed(2)).join(' | ')} |`);
      console.log(`| goodput ÷ own P | ${levels.map((n) => (med(s.name, n, 'goodput') / P).toFixed(2)).join(' | ')} |`);
      console.log(`| p99 ÷ own U | ${levels.map((n) => (med(s.name, n, 'p99') / U).toFixed(2)).join(' | ')} |`);
      console.log(`| goodput ÷ before's P | ${levels.map((n) => (med(s.name, n, 'goodput') / b.P).toFixed(2)).join(' | ')} |`);
      console.log(`| p99 ÷ before's U | ${levels.map((n) => (med(s.name, n, 'p99') / b.U).toFixed(2)).join(' | ')} |`);
      const star = levels.find((n) => med(s.name, n, 'goodput') >= 0.9 * P);
      const within = levels.filter((n) => med(s.name, n, 'p99') <= 3 * U);
      const best = within.length ? Math.max(...within.map((n) => med(s.name, n, 'goodput') / P)) : NaN;
      console.log(`${s.name}: n* = ${star} (goodput ≥ 0.9 P), its p99 = ${star === undefined ? '-' : (med(s.name, star, 'p99') / U).toFixed(2)} U; best goodput within p99 ≤ 3 U: ${best.toFixed(2)} P`);
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
