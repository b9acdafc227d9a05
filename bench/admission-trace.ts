/**
 * The admission limiter's state through a burst after idle (issue 29, the first-round stall of
 * bench 11 at 1×): one admission-on gateway (defaults, cache off, client caps lifted, log level
 * debug, so src/gateway.ts logs CapacityLimiter.snapshot() every 100 ms), warmed for 2 s at 16
 * connections like bench 11, idle for BENCH_IDLE_SECONDS (default 60: the source and audit pools
 * close idle connections after 30 s), then wrk at BENCH_CONNECTIONS (default 32; one identity,
 * uncached point reads) for BENCH_SECONDS (default 6). Prints one row per 100 ms of the burst:
 * time from wrk's start (ms), limit, in flight, working (in flight less those waiting for their
 * identity's own source slots, CapacitySnapshot.working; all in flight with raise_on_slot_waiters), queued, calls finished in that 100 ms, shortRtt
 * and longRtt (ms), event-loop delay read (ms), audit queue, pressure, drop ceiling, refused and
 * dropped since start; then wrk's totals and the load average. BENCH_ROOT: the checkout whose
 * dist/ runs (default this one). BENCH_NEIGHBOUR_SECONDS (default 0): for that many seconds at the
 * end of the idle time, an admission-off gateway beside it is driven by wrk at 32 connections, as
 * bench 11 measures capacity on the off-gateway while the on-gateway idles (its event-loop delay
 * sampler then reads a loaded machine). BENCH_CONFIG: the path of a gateway config file (e.g.
 * `{"admission": {"controller": "min_rtt", "sample_pool_wait": true}}`) for the traced gateway:
 * bench/lib/env.ts drops INTERLOCK_* variables from a child's environment, so a setting reaches it
 * only this way (INTERLOCK_CONFIG). Each row also shows the fast averages of the calls' source time
 * and of its shared-pool wait (ms; CapacitySnapshot shortSource, shortPoolWait): the source time
 * less the pool wait is the identity's own slot wait and the statements; and the per-identity limit
 * (admission.identity_limit, h29i): identities limited, the lowest such limit, its refusals; and the fast averages of
 * the own-slot wait and of the statements' time (CapacitySnapshot shortSlotWait, shortStatement). Not a timed test. Needs /usr/bin/wrk.
 *
 * BENCH_SEQUENCE (comma-separated connection counts): instead of one burst, those loads in turn,
 * BENCH_SECONDS each with BENCH_GAP_SECONDS (default 4) idle between, one summary line per phase
 * (traceSequence): the order in which bench 11 loads its admission-on gateway, so state one load
 * leaves in the limiter (a drop's ceiling, a lowered limit) shows in the next. BENCH_SOURCE_BURNER=1: a
 * loop of bench 11's slow cross join straight on the source database throughout (its part 2 runs its
 * limit-1 gateway's holder all along), so the machine is as busy as in bench 11. BENCH_ROWS_AT
 * (comma-separated connection counts, h29i): the phases at those loads also print their 100 ms rows
 * (time from the phase's start, limit, in flight, queued, calls finished, shortRtt, longRtt,
 * event-loop delay, audit queue, pressure, drop ceiling, refusals in that 100 ms).
 *
 * Run: `npm run -s build && BENCH_IDLE_SECONDS=60 npx tsx bench/admission-trace.ts`.
 */
import { loadavg } from 'node:os';
import pg from 'pg';
import type { CapacitySnapshot } from '../src/transport/capacity';
import { gatewayVars, ROOT, sleep, startServe, withBenchEnv, type BenchEnv } from './lib/env';
import { POINT_SQL, TRACKS } from './lib/point-read';
import { envInt } from './lib/stats';
import { runWrkOverload, wrkAvailable } from './lib/wrk';

const MODERN = '2026-07-28';
const META = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} };

/** The headers of every call (modern dialect). */
function callHeaders(apiKey: string): Record<string, string> {
  return { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${apiKey}`, 'MCP-Protocol-Version': MODERN, 'Mcp-Method': 'tools/call', 'Mcp-Name': 'interlock_query' };
}

/** 500 point-read bodies over the track table. */
const BODIES = Array.from({ length: 500 }, (_, i) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: POINT_SQL, params: [1 + ((i * 7919) % TRACKS)] }, _meta: META } }));

/** One `admission state` log line (src/gateway.ts): the limiter's snapshot and pino's time (epoch ms). */
type StateLine = CapacitySnapshot & { time: number };

/** The median of `xs` (0 when empty). */
function median(xs: number[]): number {
  if (!xs.length) return 0;
  const v = [...xs].sort((a, b) => a - b);
  return v[Math.floor(v.length / 2)];
}

/**
 * BENCH_SEQUENCE (e.g. `64,128,256,512,64,128`): the loads bench 11 gives its admission-on gateway,
 * in order, each for `seconds`, with `gapSeconds` idle between (bench 11 runs the admission-off
 * gateway then). Per phase one line: goodput, refusals (late), wrk p99, and over the limiter's
 * 100 ms snapshots the median and lowest limit, the median (and mean) in flight and the median queued, the share of
 * snapshots with calls queued, the share of
 * snapshots under a drop ceiling or under pressure, the highest event-loop delay read, and the
 * refusals and drops the limiter counted in the phase.
 */
async function traceSequence(url: string, headers: Record<string, string>, lines: StateLine[], sequence: number[], seconds: number, gapSeconds: number): Promise<void> {
  const rowsAt = (process.env.BENCH_ROWS_AT ?? '').split(',').filter(Boolean).map(Number);
  for (const [i, c] of sequence.entries()) {
    if (i > 0) await sleep(gapSeconds * 1000);
    const t0 = Date.now();
    const w = await runWrkOverload({ url, connections: c, seconds, bodies: BODIES, headers, expect: '"track_id"' });
    await sleep(150);
    const rows = lines.filter((s) => s.time >= t0 && s.time <= t0 + seconds * 1000);
    const first = rows[0];
    const last = rows[rows.length - 1];
    if (rowsAt.includes(c)) {
      console.log(`phase ${i + 1} (${c} connections): t_ms limit infl queue done shortRtt longRtt loopDelay auditQ press ceiling refused`);
      let prev: StateLine | null = null;
      for (const s of rows) {
        console.log([s.time - t0, s.limit, s.inflight, s.queued, prev ? s.samples - prev.samples : '-', s.shortRtt, s.longRtt, s.loopDelayMs, s.auditQueue, s.pressured ? 'yes' : 'no', s.ceiling ?? '-', prev ? s.refused - prev.refused : '-'].join(' '));
        prev = s;
      }
    }
    console.log(JSON.stringify({
      phase: i + 1,
      connections: c,
      goodput: Math.round(w.served / w.seconds),
      refused: w.refused,
      late: w.refusedOther,
      p99: w.p99Ms,
      limitMedian: Math.round(median(rows.map((s) => s.limit))),
      limitMin: Math.round(Math.min(...rows.map((s) => s.limit))),
      limitAtStart: first ? Math.round(first.limit) : null,
      inflightMedian: median(rows.map((s) => s.inflight)),
      inflightMean: rows.length ? Math.round((10 * rows.reduce((a, s) => a + s.inflight, 0)) / rows.length) / 10 : null,
      queuedShare: rows.length ? Math.round((100 * rows.filter((s) => s.queued > 0).length) / rows.length) / 100 : null,
      queuedMedian: median(rows.map((s) => s.queued)),
      ceilingShare: rows.length ? Math.round((100 * rows.filter((s) => s.ceiling !== null).length) / rows.length) / 100 : null,
      pressuredShare: rows.length ? Math.round((100 * rows.filter((s) => s.pressured).length) / rows.length) / 100 : null,
      loopDelayMax: Math.max(0, ...rows.map((s) => s.loopDelayMs)),
      limiterRefused: first && last ? last.refused - first.refused : null,
      limiterDropped: first && last ? last.dropped - first.dropped : null,
      load1: loadavg()[0].toFixed(1),
    }));
  }
}

async function main(): Promise<void> {
  if (!wrkAvailable()) throw new Error('needs wrk (/usr/bin/wrk)');
  const idle = envInt('BENCH_IDLE_SECONDS', 60);
  const connections = envInt('BENCH_CONNECTIONS', 32);
  const seconds = envInt('BENCH_SECONDS', 6);
  const root = process.env.BENCH_ROOT ?? ROOT;
  const neighbourSeconds = envInt('BENCH_NEIGHBOUR_SECONDS', 0);
  await withBenchEnv({}, async (env: BenchEnv) => {
    const vars = { ...gatewayVars(env.controlUrl, { cacheTtlMs: 0 }), ...(process.env.BENCH_ADMISSION === 'off' ? { INTERLOCK_ADMISSION_ENABLED: 'false' } : {}), INTERLOCK_LOG_LEVEL: 'debug', INTERLOCK_STREAMS_PER_IDENTITY: '100000', INTERLOCK_STREAMS_PER_ADDRESS: '100000', INTERLOCK_BODY_READS_PER_ADDRESS: '100000', ...(process.env.BENCH_CONFIG ? { INTERLOCK_CONFIG: process.env.BENCH_CONFIG } : {}) };
    const gw = await startServe(vars, (process.env.BENCH_GATEWAY_NODE_FLAGS ?? '').split(" ").filter(Boolean), root);
    const { INTERLOCK_CONFIG: _traced, ...neighbourVars } = vars as Record<string, string>;
    const neighbour = neighbourSeconds > 0 ? await startServe({ ...neighbourVars, INTERLOCK_LOG_LEVEL: 'warn', INTERLOCK_ADMISSION_ENABLED: 'false' }, [], root) : null;
    const lines: StateLine[] = [];
    let buf = '';
    gw.proc.stdout!.on('data', (c: Buffer) => {
      buf += c.toString();
      let i: number;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (!line.includes('"admission state"')) continue;
        try {
          lines.push(JSON.parse(line) as StateLine);
        } catch {
          /* not a JSON line */
        }
      }
    });
    // BENCH_SOURCE_BURNER=1: bench 11's holder of its limit-1 gateway's slot runs a ~1 s cross join on the source in a
    // loop through all of part 2; the same statement in a loop here, straight on the source, so the machine is as busy.
    let burning = process.env.BENCH_SOURCE_BURNER === '1';
    const burner = burning
      ? (async () => {
          const client = new pg.Client({ connectionString: env.sourceUrl });
          await client.connect();
          while (burning) await client.query('SELECT count(*) AS n FROM track a, track b');
          await client.end();
        })()
      : Promise.resolve();
    try {
      const headers = callHeaders(env.apiKey);
      await runWrkOverload({ url: gw.url, connections: 16, seconds: 2, bodies: BODIES, headers, expect: '"track_id"' }); // warm-up, as bench 11
      console.log(`idle ${idle} s (load ${loadavg()[0].toFixed(1)})`);
      await sleep(Math.max(0, idle - neighbourSeconds) * 1000);
      if (neighbour) await runWrkOverload({ url: neighbour.url, connections: 32, seconds: neighbourSeconds, bodies: BODIES, headers, expect: '"track_id"' });
      const sequence = (process.env.BENCH_SEQUENCE ?? '').split(',').filter(Boolean).map(Number);
      if (sequence.length) return await traceSequence(gw.url, headers, lines, sequence, seconds, envInt('BENCH_GAP_SECONDS', 4));
      const t0 = Date.now();
      const w = await runWrkOverload({ url: gw.url, connections, seconds, bodies: BODIES, headers, expect: '"track_id"' });
      await sleep(200);
      console.log('t_ms   limit  infl  work  queue  done/100ms  shortRtt  longRtt  source  poolWait  slotWait  stmt  loopDelay  auditQ  press  ceiling  refused  dropped  idLim  idLow  idRef');
      let prev: StateLine | null = null;
      for (const s of lines) {
        if (s.time < t0 - 200 || s.time > t0 + seconds * 1000 + 200) {
          prev = s;
          continue;
        }
        const done = prev ? s.samples - prev.samples : 0;
        prev = s;
        console.log([String(s.time - t0).padStart(5), String(s.limit).padStart(6), String(s.inflight).padStart(5), String(s.working).padStart(5), String(s.queued).padStart(6), String(done).padStart(11), String(s.shortRtt).padStart(9), String(s.longRtt).padStart(8), String(s.shortSource).padStart(7), String(s.shortPoolWait).padStart(9), String(s.shortSlotWait).padStart(9), String(s.shortStatement).padStart(5), String(s.loopDelayMs).padStart(10), String(s.auditQueue).padStart(7), (s.pressured ? 'yes' : 'no').padStart(6), String(s.ceiling ?? '-').padStart(8), String(s.refused).padStart(8), String(s.dropped).padStart(8), String(s.identityLimited).padStart(6), String(s.identityLowest ?? '-').padStart(6), String(s.identityRefused).padStart(6)].join(' '));
      }
      console.log(JSON.stringify({ root, config: process.env.BENCH_CONFIG ?? null, connections, seconds, idle, neighbourSeconds, goodput: Math.round(w.served / w.seconds), refused: w.refused, late: w.refusedOther, other: w.other, socketErrors: w.socketErrors, p50: w.p50Ms, p99: w.p99Ms, load1: loadavg()[0].toFixed(1) }));
    } finally {
      burning = false;
      await burner;
      await gw.stop();
      await neighbour?.stop();
    }
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
