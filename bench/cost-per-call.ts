/**
 * The gateway's own CPU per uncached point read (issue 28 item 3): a low-noise figure for taking the
 * gateway's per-call costs one by one. One compiled `interlock serve` per checkout (this one, and
 * `BEFORE_ROOT` when given: alternating rounds in the same run), cache time to live 1 ms so every
 * call misses, driven over HTTP by `wrk` (a separate C process, bench/lib/wrk.ts) at
 * BENCH_CONCURRENCY (default 8) with interlock_query on POINT_SQL and 256 track ids; an answer
 * counts only when it is HTTP 200 with `"row_count":1,`.
 *
 * Per side and round it reads CPU from /proc (bench/lib/cpu.ts): the gateway process's utime+stime
 * (and stime alone, the kernel's share: socket writes and reads, scheduling),
 * the control database's backends and the source database's backends, each in µs per call; wrk's
 * own CPU from bash `times`. CPU per call is far less sensitive to the shared machine's load than
 * calls/s. It also counts, from pg_stat_database and pg_stat_user_tables of the control database,
 * the commits and the table scans (seq + index: one per statement that reads a table) per call, so
 * a per-call SELECT on the control database shows up by table, and the rows written per call by
 * table (n_tup_ins + n_tup_upd + n_tup_del: a per-call UPDATE of api_keys or rate_limits would show).
 *
 * BENCH_CACHED=1 measures the cached point read instead: cache time to live 10 minutes, so the
 * pre-warm fills the cache with the 256 answers and every measured call is a hit (its source-DB
 * CPU per call is then what a hit still asks of the source: nothing since issue 28's cache change,
 * the live hierarchy check before it).
 *
 * BENCH_FLOOR=1 adds a third side, bench/lib/node-floor-server.ts with its durable audit (node:http
 * + `pg` + one group-committed INSERT per batch, no governance): what any Node.js gateway with an
 * audit-before-answer costs on this machine in the same run, the floor under the 250 µs target.
 *
 * Per side and round it also counts, from /proc/PID/io and /proc/PID/status, the gateway's read and
 * write system calls (syscr, syscw) and its voluntary context switches (the event loop waiting for
 * the kernel) per call; with BENCH_TRACE_GC=1 every side runs with `--trace-gc` and the collections
 * it prints (scavenges, mark-compacts) and their pause milliseconds are counted per call too (h28z:
 * why the gateway's ratio to the floor differs between machines).
 *
 * Environment: BEFORE_ROOT (a checkout with a fresh `npm run build`), BENCH_BEFORE_VARS and
 * BENCH_AFTER_VARS (JSON objects of INTERLOCK_* variables for one side only: the same tree twice with
 * one setting changed, e.g. the result cache off), BENCH_ROUNDS (5),
 * BENCH_SECONDS (4), BENCH_PREWARM_SECONDS (10: the JIT settles; a shorter one left the first round 2× the last), BENCH_CONCURRENCY (8), BENCH_RUNTIME (compiled;
 * `source` runs the TypeScript through tsx). Both gateways must have an up-to-date dist/ unless
 * BENCH_RUNTIME=source (the child refuses to start otherwise). Run: `npx tsx bench/cost-per-call.ts`.
 */
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { CpuMeter, machineJiffies, procCpuSplitMs } from './lib/cpu';
import { gatewayVars, ROOT, sleep, startServe, startTsChild, withBenchEnv, type GatewayChild } from './lib/env';
import { FLOOR_TOOL } from './lib/node-floor-server';
import { BENCH_PROTOCOL_VERSION } from './lib/http';
import { POINT_SQL, preflight, SOURCE_POOL_SIZE, TRACKS } from './lib/point-read';
import { concurrencyLevels, emitResult, envInt, envSeconds, machineLine, median, round, table } from './lib/stats';
import { runWrk, wrkAvailable } from './lib/wrk';

/** Control-database counters: commits, statements that read each table (seq_scan + idx_scan), and rows each table had written (inserted + updated + deleted). */
interface ControlCounters {
  commits: number;
  scans: Map<string, number>;
  writes: Map<string, number>;
}

async function controlCounters(c: pg.Client): Promise<ControlCounters> {
  await c.query('SELECT pg_stat_clear_snapshot()');
  const d = await c.query<{ n: string }>('SELECT xact_commit AS n FROM pg_stat_database WHERE datname = current_database()');
  const t = await c.query<{ relname: string; n: string; w: string }>('SELECT relname, coalesce(seq_scan, 0) + coalesce(idx_scan, 0) AS n, n_tup_ins + n_tup_upd + n_tup_del AS w FROM pg_stat_user_tables');
  return { commits: Number(d.rows[0].n), scans: new Map(t.rows.map((r) => [r.relname, Number(r.n)])), writes: new Map(t.rows.map((r) => [r.relname, Number(r.w)])) };
}

/** Extra INTERLOCK_* variables of one side from a JSON object in `name` (none when unset), e.g. `{"INTERLOCK_CACHE_TTL_MS": "0"}`. */
function sideVars(name: string): Record<string, string> {
  const text = process.env[name];
  return text ? (JSON.parse(text) as Record<string, string>) : {};
}

/** Per-side sums over rounds. */
interface Acc {
  calls: number;
  ms: number;
  gateway: number[];
  /** The gateway's system (kernel) CPU, µs per call: part of `gateway`. */
  system: number[];
  controlDb: number[];
  sourceDb: number[];
  driver: number[];
  commits: number;
  scans: Map<string, number>;
  writes: Map<string, number>;
  busy: number[];
  load: number[];
  /** Read + write system calls per call, voluntary context switches per call. */
  syscalls: number[];
  switches: number[];
  /** With BENCH_TRACE_GC=1: collections per 1,000 calls (scavenges, mark-compacts) and pause µs per call. */
  scavenges: number[];
  markCompacts: number[];
  gcPauseUs: number[];
}

/** The process's read and write system calls (/proc/PID/io) and voluntary context switches (/proc/PID/status) so far. */
function procCounts(pid: number): { syscalls: number; switches: number } {
  const io = readFileSync(`/proc/${pid}/io`, 'utf8');
  const st = readFileSync(`/proc/${pid}/status`, 'utf8');
  const get = (text: string, k: string) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? NaN);
  return { syscalls: get(io, 'syscr') + get(io, 'syscw'), switches: get(st, 'voluntary_ctxt_switches') };
}

/** Collections a `--trace-gc` process printed so far (counted from its stdout). */
interface GcCount {
  scavenges: number;
  markCompacts: number;
  pauseMs: number;
  /** The last six lines counted. */
  last: string[];
}

/** Counts the `--trace-gc` lines of `gw`'s stdout from now on. */
function countGc(gw: GatewayChild): GcCount {
  const n: GcCount = { scavenges: 0, markCompacts: 0, pauseMs: 0, last: [] };
  let rest = '';
  gw.proc.stdout!.on('data', (b: Buffer) => {
    const lines = (rest + b.toString()).split('\n');
    rest = lines.pop() ?? '';
    for (const line of lines) {
      const m = /\b(Scavenge|Mark-Compact|Mark-sweep|Minor Mark-Compact)\b.*?MB, (?:pooled: [\d.]+ MB, )?([\d.]+) \/ ([\d.]+) ms/.exec(line);
      if (!m) continue;
      n.last = [...n.last.slice(-5), line.replace(/^\[[^\]]*\]\s*/, '')];
      if (m[1] === 'Scavenge' || m[1] === 'Minor Mark-Compact') n.scavenges++;
      else n.markCompacts++;
      n.pauseMs += Number(m[2]);
    }
  });
  return n;
}

const range = (xs: number[]) => `${round(Math.min(...xs), 0)}–${round(Math.max(...xs), 0)}`;

async function main(): Promise<void> {
  if (!wrkAvailable()) {
    console.log('SKIPPED: wrk is not installed (apt-get install -y wrk)');
    return;
  }
  const before = process.env.BEFORE_ROOT ? path.resolve(process.env.BEFORE_ROOT) : null;
  const durationMs = envSeconds('BENCH_SECONDS', 4);
  const prewarmMs = envSeconds('BENCH_PREWARM_SECONDS', 10);
  const rounds = envInt('BENCH_ROUNDS', 5);
  const [c] = concurrencyLevels([8]);
  const runtime = process.env.BENCH_RUNTIME ?? 'compiled';
  const withFloor = process.env.BENCH_FLOOR === '1';
  const cachedReads = process.env.BENCH_CACHED === '1';
  const traceGc = process.env.BENCH_TRACE_GC === '1';
  const gcFlags = traceGc ? ['--trace-gc'] : [];
  console.log(`# cost-per-call: CPU per ${cachedReads ? 'cached' : 'uncached'} point read at c=${c}, wrk-driven${before ? `, before = ${before} vs after = ${ROOT}` : ''}`);
  console.log(machineLine());
  console.log(`${rounds} rounds × ${durationMs / 1000} s per side, runtime ${runtime}; load average at start ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  await withBenchEnv({}, async (env) => {
    const vars = { ...gatewayVars(env.controlUrl, { cacheTtlMs: cachedReads ? 600_000 : 1 }), INTERLOCK_RUNTIME: runtime };
    const gws: Record<string, GatewayChild> = {};
    const pool = new pg.Pool({ ...env.reader, max: SOURCE_POOL_SIZE });
    const control = new pg.Client({ connectionString: env.controlUrl, application_name: 'interlock-bench-counters' });
    await control.connect();
    try {
      if (before) gws.before = await startServe({ ...vars, ...sideVars('BENCH_BEFORE_VARS') }, gcFlags, before);
      gws.after = await startServe({ ...vars, ...sideVars('BENCH_AFTER_VARS') }, gcFlags, ROOT);
      for (const gw of Object.values(gws)) await preflight(gw.url, env.apiKey, pool);
      // The audited Node floor (node:http + pg + a group-committed audit INSERT, no governance) as a same-run baseline.
      if (withFloor) gws['node-floor-audit'] = await startTsChild('bench/lib/node-floor-server.ts', { BENCH_FLOOR_READER: JSON.stringify(env.reader), BENCH_FLOOR_SQL: POINT_SQL, BENCH_FLOOR_POOL: String(SOURCE_POOL_SIZE), BENCH_FLOOR_AUDIT_URL: env.controlUrl }, gcFlags);
      const gcs = new Map(Object.entries(gws).map(([name, gw]) => [name, countGc(gw)]));
      const headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', 'MCP-Protocol-Version': BENCH_PROTOCOL_VERSION, Authorization: `Bearer ${env.apiKey}` };
      const ids = Array.from({ length: 256 }, (_, i) => 1 + ((i * 7919) % TRACKS));
      const bodies = ids.map((id) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: POINT_SQL, params: [id] } } }));
      const floorBodies = ids.map((id) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: FLOOR_TOOL, arguments: { track_id: id } } }));
      const drive = (gw: GatewayChild, ms: number) => (gw === gws['node-floor-audit'] ? runWrk({ url: gw.url, concurrency: c, durationMs: ms, bodies: floorBodies, headers, expect: '"row_count":1' }) : runWrk({ url: gw.url, concurrency: c, durationMs: ms, bodies, headers, expect: '"row_count":1,' }));
      for (const [name, gw] of Object.entries(gws)) console.log(`  pre-warm ${name}: ${(await drive(gw, prewarmMs)).allOps} calls (not measured)`);
      const controlDb = { databases: [new URL(env.controlUrl).pathname.slice(1)] };
      const sourceDb = { databases: [env.demo.databaseName] };
      const acc = new Map<string, Acc>();
      for (let r = 0; r < rounds; r++) {
        // Alternate the order each round so neither side always runs first.
        const order = Object.keys(gws);
        if (r % 2) order.reverse();
        for (const name of order) {
          const gw = gws[name];
          await sleep(1100); // the previous run's statistics flushed (PostgreSQL flushes at most once a second)
          const c0 = await controlCounters(control);
          const meter = new CpuMeter({ gateway: { pids: [gw.pid] }, controlDb, sourceDb });
          const j0 = machineJiffies();
          const s0 = procCpuSplitMs(gw.pid);
          const p0 = procCounts(gw.pid);
          const gc0 = { ...gcs.get(name)! };
          await meter.start();
          const x = await drive(gw, durationMs);
          const cpu = await meter.stop();
          const s1 = procCpuSplitMs(gw.pid);
          const p1 = procCounts(gw.pid);
          const gc1 = gcs.get(name)!;
          const j1 = machineJiffies();
          await meter.close();
          await sleep(1100);
          const c1 = await controlCounters(control);
          const a: Acc = acc.get(name) ?? { calls: 0, ms: 0, gateway: [], system: [], controlDb: [], sourceDb: [], driver: [], commits: 0, scans: new Map(), writes: new Map(), busy: [], load: [], syscalls: [], switches: [], scavenges: [], markCompacts: [], gcPauseUs: [] };
          const n = x.allOps;
          a.calls += n;
          a.ms += x.elapsedMs;
          a.gateway.push((cpu.gateway / n) * 1000);
          a.system.push(((s1.system - s0.system) / n) * 1000);
          a.controlDb.push((cpu.controlDb / n) * 1000);
          a.sourceDb.push((cpu.sourceDb / n) * 1000);
          a.driver.push((x.driverCpuMs / n) * 1000);
          a.commits += c1.commits - c0.commits;
          for (const [rel, v] of c1.scans) {
            const d = v - (c0.scans.get(rel) ?? 0);
            if (d) a.scans.set(rel, (a.scans.get(rel) ?? 0) + d);
          }
          for (const [rel, v] of c1.writes) {
            const d = v - (c0.writes.get(rel) ?? 0);
            if (d) a.writes.set(rel, (a.writes.get(rel) ?? 0) + d);
          }
          a.syscalls.push((p1.syscalls - p0.syscalls) / n);
          a.switches.push((p1.switches - p0.switches) / n);
          a.scavenges.push(((gc1.scavenges - gc0.scavenges) * 1000) / n);
          a.markCompacts.push(((gc1.markCompacts - gc0.markCompacts) * 1000) / n);
          a.gcPauseUs.push(((gc1.pauseMs - gc0.pauseMs) * 1000) / n);
          a.busy.push((100 * (j1.busy - j0.busy)) / Math.max(1, j1.total - j0.total));
          a.load.push(loadavg()[0]);
          acc.set(name, a);
          console.log(`  round ${r + 1}/${rounds} ${name}: ${round((n * 1000) / x.elapsedMs, 0)} calls/s, gateway ${round((cpu.gateway / n) * 1000, 0)} µs/call, control DB ${round((cpu.controlDb / n) * 1000, 0)}, source DB ${round((cpu.sourceDb / n) * 1000, 0)}, machine ${round(a.busy[a.busy.length - 1], 0)}% busy, load ${loadavg()[0].toFixed(2)}`);
        }
      }
      const names = Object.keys(gws);
      console.log(`\nCPU µs per call at c=${c}, median of ${rounds} rounds (range):`);
      console.log(
        table(
          ['side', 'calls/s', 'gateway', 'of which kernel', 'control DB', 'source DB', 'driver (wrk)', 'machine busy %', 'load (1 min)'],
          names.map((n) => {
            const a = acc.get(n)!;
            return [n, round((a.calls * 1000) / a.ms, 0), `${round(median(a.gateway), 0)} (${range(a.gateway)})`, `${round(median(a.system), 0)} (${range(a.system)})`, `${round(median(a.controlDb), 0)} (${range(a.controlDb)})`, `${round(median(a.sourceDb), 0)} (${range(a.sourceDb)})`, round(median(a.driver), 0), range(a.busy), `${Math.min(...a.load).toFixed(2)}–${Math.max(...a.load).toFixed(2)}`];
          }),
        ),
      );
      console.log(`\ngateway process per call, median of ${rounds} rounds: system calls (read + write, /proc/PID/io), voluntary context switches${traceGc ? ', collections per 1,000 calls and GC pause µs per call (--trace-gc)' : ''}:`);
      console.log(table(['side', 'syscalls', 'ctx switches', ...(traceGc ? ['scavenges /1k', 'mark-compacts /1k', 'GC pause µs'] : [])], names.map((n) => {
        const a = acc.get(n)!;
        return [n, median(a.syscalls).toFixed(2), median(a.switches).toFixed(2), ...(traceGc ? [median(a.scavenges).toFixed(1), median(a.markCompacts).toFixed(2), median(a.gcPauseUs).toFixed(1)] : [])];
      })));
      if (traceGc) for (const [name, g] of gcs) console.log(`last collections of ${name}:\n  ${g.last.join('\n  ')}`);
      if (before) {
        const b = acc.get('before')!;
        const a = acc.get('after')!;
        // Paired by round (the two sides ran back to back), so a drift in the machine's load cancels.
        const paired = (xa: number[], xb: number[]) => xa.map((v, i) => v / xb[i]);
        const g = paired(a.gateway, b.gateway);
        const d = paired(a.controlDb, b.controlDb);
        console.log(`after/before, paired by round: gateway CPU per call ${median(g).toFixed(3)}× (rounds ${g.map((x) => x.toFixed(2)).join(', ')}); control DB ${median(d).toFixed(3)}× (${d.map((x) => x.toFixed(2)).join(', ')})`);
      }
      if (withFloor) {
        const a = acc.get('after')!;
        const f = acc.get('node-floor-audit')!;
        console.log(`after / node-floor-audit: gateway CPU per call ${(median(a.gateway) / median(f.gateway)).toFixed(2)}× (kernel ${(median(a.system) / median(f.system)).toFixed(2)}×), control DB ${(median(a.controlDb) / median(f.controlDb)).toFixed(2)}×`);
      }
      console.log('\ncontrol database per call (counted: commits; statements reading each table = seq_scan + idx_scan):');
      const rels = [...new Set(names.flatMap((n) => [...acc.get(n)!.scans.keys()]))].sort();
      console.log(table(['counter', ...names], [['(commits)', ...names.map((n) => (acc.get(n)!.commits / acc.get(n)!.calls).toFixed(3))], ...rels.map((rel) => [rel, ...names.map((n) => ((acc.get(n)!.scans.get(rel) ?? 0) / acc.get(n)!.calls).toFixed(3))])]));
      console.log('\ncontrol database rows written per call (n_tup_ins + n_tup_upd + n_tup_del, by table or partition):');
      const wrels = [...new Set(names.flatMap((n) => [...acc.get(n)!.writes.keys()]))].sort();
      console.log(table(['table', ...names], wrels.map((rel) => [rel, ...names.map((n) => ((acc.get(n)!.writes.get(rel) ?? 0) / acc.get(n)!.calls).toFixed(3))])));
      emitResult('cost-per-call', {
        concurrency: c,
        rounds,
        durationMs,
        sides: Object.fromEntries(names.map((n) => { const a = acc.get(n)!; return [n, { callsPerSecond: round((a.calls * 1000) / a.ms, 0), gatewayUs: a.gateway.map((v) => round(v, 0)), gatewaySystemUs: a.system.map((v) => round(v, 0)), controlDbUs: a.controlDb.map((v) => round(v, 0)), sourceDbUs: a.sourceDb.map((v) => round(v, 0)), driverUs: a.driver.map((v) => round(v, 0)), commitsPerCall: a.commits / a.calls }]; })),
      });
    } finally {
      await control.end();
      await pool.end();
      for (const gw of Object.values(gws)) await gw.stop();
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
