/**
 * Scenarios 1 and 2 (and the load of scenario 7): a primary-key lookup on Chinook's track table,
 * through InterLock (`interlock_query` over POST /mcp with the raw keep-alive client) and with
 * `pg` directly as the source's reader role (the same parameterised statement, extended protocol,
 * a pool as large as the gateway's reader pool).
 */
import pg from 'pg';
import { closedLoop, interleave, type LoadFigures, type LoadRun } from './load';
import { McpHttpClient, structuredResult } from './http';
import { concurrencyLevels, emitResult, envInt, envSeconds, machineLine, ratio, round, table } from './stats';
import { gatewayVars, startServe, withBenchEnv, type BenchEnv, type GatewayChild } from './env';
import { CpuMeter, describeWaits, machineJiffies, WaitSampler } from './cpu';

/** The statement of the point read (primary key of public.track). */
export const POINT_SQL = 'SELECT track_id, name, album_id, genre_id, composer, milliseconds, unit_price FROM track WHERE track_id = $1';
/** Chinook has tracks 1..3503. */
export const TRACKS = 3503;
/** Reader connections of the provisioned source (pool_size) — the direct baseline gets as many. */
export const SOURCE_POOL_SIZE = 5;

/** Picks a track id: uniformly over all tracks, or over the first `hot` ones (the warm set). */
export function trackId(hot?: number): number {
  return 1 + Math.floor(Math.random() * (hot ?? TRACKS));
}

/** A statement for the load runners: its text, a parameter generator and the row count every answer must have. */
export interface LoadStatement {
  sql: string;
  params: () => unknown[];
  rows: number;
}

/** The point read over all tracks, or over the first `hot` ones. */
export function pointStatement(hot?: number): LoadStatement {
  return { sql: POINT_SQL, params: () => [trackId(hot)], rows: 1 };
}

/** Revenue by genre: a three-table join and aggregate (a few milliseconds in PostgreSQL; 24 rows). */
export const AGGREGATE_SQL = 'SELECT g.name AS genre, sum(il.unit_price * il.quantity) AS revenue FROM invoice_line il JOIN track t ON t.track_id = il.track_id JOIN genre g ON g.genre_id = t.genre_id GROUP BY g.name ORDER BY revenue DESC';

/** One closed-loop run of interlock_query calls of `st` against one or several gateway URLs (round-robin per call). */
export async function runGatewayStatement(urls: string[], apiKey: string, c: number, st: LoadStatement, opts: { durationMs: number; warmupMs: number; expectCached?: boolean }): Promise<LoadRun & { uncachedAnswers: number }> {
  const clients = urls.map((u) => new McpHttpClient(u, { apiKey, maxSockets: c }));
  let next = 0;
  let uncachedAnswers = 0;
  try {
    const run = await closedLoop({
      concurrency: c,
      durationMs: opts.durationMs,
      warmupMs: opts.warmupMs,
      op: async () => {
        const client = clients[next++ % clients.length];
        const sc = structuredResult(await client.callTool('interlock_query', { source_id: 'chinook', sql: st.sql, params: st.params() }));
        if (sc.row_count !== st.rows) throw new Error(`expected ${st.rows} rows, got ${JSON.stringify(sc).slice(0, 200)}`);
        if (opts.expectCached && sc.cached !== true) uncachedAnswers++;
      },
    });
    return { ...run, uncachedAnswers };
  } finally {
    for (const cl of clients) cl.close();
  }
}

/** One closed-loop run of interlock_query point reads against one or several gateway URLs (round-robin per call). */
export function runGatewayPointReads(urls: string[], apiKey: string, c: number, opts: { durationMs: number; warmupMs: number; hot?: number; expectCached?: boolean }): Promise<LoadRun & { uncachedAnswers: number }> {
  return runGatewayStatement(urls, apiKey, c, pointStatement(opts.hot), opts);
}

/** One closed-loop run of `st` with `pg` directly. */
export function runDirectStatement(pool: pg.Pool, c: number, st: LoadStatement, opts: { durationMs: number; warmupMs: number }): Promise<LoadRun> {
  return closedLoop({
    concurrency: c,
    durationMs: opts.durationMs,
    warmupMs: opts.warmupMs,
    op: async () => {
      const r = await pool.query(st.sql, st.params());
      if (r.rows.length !== st.rows) throw new Error(`expected ${st.rows} rows`);
    },
  });
}

/** One closed-loop run of the point read with `pg` directly. */
export function runDirectPointReads(pool: pg.Pool, c: number, opts: { durationMs: number; warmupMs: number; hot?: number }): Promise<LoadRun> {
  return runDirectStatement(pool, c, pointStatement(opts.hot), opts);
}

/** Cache hits and misses from a gateway's /metrics. */
export async function cacheCounters(gw: GatewayChild): Promise<{ hits: number; misses: number }> {
  const m = await gw.metrics();
  return { hits: m.interlock_cache_hits ?? NaN, misses: m.interlock_cache_misses ?? NaN };
}

/** Checks that one gateway answer equals the direct answer for the same id (the bench must compare like with like). */
export async function preflight(gwUrl: string, apiKey: string, pool: pg.Pool): Promise<void> {
  const client = new McpHttpClient(gwUrl, { apiKey, maxSockets: 1 });
  try {
    const sc = structuredResult(await client.callTool('interlock_query', { source_id: 'chinook', sql: POINT_SQL, params: [42] }));
    const direct = (await pool.query(POINT_SQL, [42])).rows[0] as Record<string, unknown>;
    const viaGw = (sc.rows as Array<Record<string, unknown>>)[0];
    if (JSON.stringify(viaGw) !== JSON.stringify(direct)) throw new Error(`gateway and direct answers differ: ${JSON.stringify(viaGw)} vs ${JSON.stringify(direct)}`);
  } finally {
    client.close();
  }
}

/** Table rows and result data for one comparison. */
export function pointReadReport(levels: number[], direct: Map<number, LoadFigures>, gw: Map<number, LoadFigures>): { text: string; rows: Array<Record<string, number>> } {
  const rows = levels.map((c) => {
    const d = direct.get(c)!;
    const g = gw.get(c)!;
    return {
      concurrency: c,
      direct_ops_s: round(d.throughput, 0),
      gateway_ops_s: round(g.throughput, 0),
      throughput_ratio: round(g.throughput / d.throughput, 3),
      direct_p50_ms: round(d.latency.p50, 3),
      gateway_p50_ms: round(g.latency.p50, 3),
      added_p50_ms: round(g.latency.p50 - d.latency.p50, 3),
      direct_p99_ms: round(d.latency.p99, 3),
      gateway_p99_ms: round(g.latency.p99, 3),
      added_p99_ms: round(g.latency.p99 - d.latency.p99, 3),
      added_mean_ms: round(g.latency.mean - d.latency.mean, 3),
      direct_ops: d.ops,
      gateway_ops: g.ops,
    };
  });
  const text = table(
    ['conc', 'pg ops/s', 'IL ops/s', 'ratio', 'pg p50', 'IL p50', '+p50', 'pg p99', 'IL p99', '+p99', '+mean'],
    rows.map((r) => [String(r.concurrency), String(r.direct_ops_s), String(r.gateway_ops_s), ratio(r.throughput_ratio), ms(r.direct_p50_ms), ms(r.gateway_p50_ms), ms(r.added_p50_ms), ms(r.direct_p99_ms), ms(r.gateway_p99_ms), ms(r.added_p99_ms), ms(r.added_mean_ms)]),
  );
  return { text, rows };
}

function ms(x: number): string {
  return `${x.toFixed(2)} ms`;
}

/** CPU groups of a point-read run: the bench client, the gateway processes, and the backends of the control and source databases. */
export function pointReadMeter(env: BenchEnv, gatewayPids: number[]): CpuMeter {
  return new CpuMeter({
    client: { self: true },
    gateway: { pids: gatewayPids },
    controlDb: { databases: [new URL(env.controlUrl).pathname.slice(1)] },
    sourceDb: { databases: [env.demo.databaseName] },
  });
}

/** Accumulates CPU milliseconds and operations per (side, concurrency); renders CPU ms per operation. */
export class CpuLedger {
  private readonly m = new Map<string, { ops: number; cpu: Record<string, number>; busy: number; total: number; waits: { samples: number; counts: Map<string, number> } }>();

  /** `waits`, when given, samples the control database's wait events during every metered run. */
  constructor(private readonly waits?: WaitSampler) {}

  /** Runs `fn` (a LoadRun producer) under `meter` and records its CPU against `side` at `c`, and the whole machine's busy share. */
  async metered<T extends LoadRun>(meter: CpuMeter, side: string, c: number, fn: () => Promise<T>): Promise<T> {
    await meter.start();
    await this.waits?.start();
    const j0 = machineJiffies();
    const run = await fn();
    const j1 = machineJiffies();
    const w = this.waits?.stop();
    const cpu = await meter.stop();
    const k = `${side}@${c}`;
    const e = this.m.get(k) ?? { ops: 0, cpu: {}, busy: 0, total: 0, waits: { samples: 0, counts: new Map<string, number>() } };
    e.ops += run.allOps;
    if (w) {
      e.waits.samples += w.samples;
      for (const [ev, n] of w.counts) e.waits.counts.set(ev, (e.waits.counts.get(ev) ?? 0) + n);
    }
    e.busy += j1.busy - j0.busy;
    e.total += j1.total - j0.total;
    for (const [g, v] of Object.entries(cpu)) e.cpu[g] = (e.cpu[g] ?? 0) + v;
    this.m.set(k, e);
    return run;
  }

  /** The control database's active backends and top wait events during the runs of `side` at `c` ('' without a sampler). */
  waitLine(side: string, c: number): string {
    const e = this.m.get(`${side}@${c}`);
    return e && this.waits ? describeWaits(e.waits) : '';
  }

  /** Wait-event shares (0..1) of the control database during `side` at `c`, plus the average number of active backends. */
  waitShares(side: string, c: number): Record<string, number> {
    const e = this.m.get(`${side}@${c}`);
    if (!e || e.waits.samples === 0) return {};
    const total = [...e.waits.counts.values()].reduce((a, b) => a + b, 0);
    const out: Record<string, number> = { activeBackends: round(total / e.waits.samples, 2) };
    for (const [k, v] of e.waits.counts) out[k] = round(v / Math.max(1, total), 3);
    return out;
  }

  /** Share of the whole machine's CPU that was busy during the runs of `side` at `c` (all processes, other users included). */
  machineBusy(side: string, c: number): number {
    const e = this.m.get(`${side}@${c}`);
    return e && e.total > 0 ? round(e.busy / e.total, 3) : NaN;
  }

  /** CPU ms per operation by group for `side` at `c` (plus `total`). */
  perOp(side: string, c: number): Record<string, number> {
    const e = this.m.get(`${side}@${c}`);
    if (!e || e.ops === 0) return {};
    const out: Record<string, number> = {};
    let total = 0;
    for (const [g, v] of Object.entries(e.cpu)) {
      out[g] = round(v / e.ops, 3);
      total += v;
    }
    out.total = round(total / e.ops, 3);
    return out;
  }

  /** A table of CPU ms per operation for the given sides and concurrencies. */
  table(sides: string[], levels: number[]): string {
    const groups = ['client', 'gateway', 'controlDb', 'sourceDb', 'total'];
    const rows: string[][] = [];
    for (const c of levels) for (const s of sides) {
      const p = this.perOp(s, c);
      rows.push([String(c), s, ...groups.map((g) => (p[g] === undefined ? '-' : p[g].toFixed(3))), `${(this.machineBusy(s, c) * 100).toFixed(0)}%`]);
    }
    return table(['conc', 'side', 'client', 'gateway', 'control DB', 'source DB', 'total', 'machine busy'], rows);
  }
}

/** The control database URL with every commit of the gateway's sessions asynchronous (synchronous_commit=off). */
export function asyncCommitUrl(controlUrl: string): string {
  const u = new URL(controlUrl);
  u.searchParams.set('options', '-c synchronous_commit=off');
  return u.toString();
}

/**
 * Runs scenario 1 (`cached: false`: every read misses — cache time to live 1 ms and ids drawn
 * from all 3,503 tracks) or scenario 2 (`cached: true`: a warm set of 64 ids, read once each
 * before timing, time to live 10 minutes). Prints the table and the result line.
 *
 * Unless BENCH_DIAGNOSE=0, a third side runs a second gateway on the same control database whose
 * sessions commit asynchronously (synchronous_commit=off): the same code, without waiting for the
 * WAL flush of the rate-limit upserts and the audit insert on every call. It is a diagnostic of
 * where the gateway's time goes, not a supported configuration. For the cached scenario it also
 * compares a heavier statement (AGGREGATE_SQL, cached) with pg direct at concurrency 8 and 32.
 */
export async function pointReadScenario(cached: boolean): Promise<void> {
  const scenario = cached ? '2-cached-read' : '1-point-read';
  const durationMs = envSeconds('BENCH_SECONDS', 4);
  const warmupMs = envSeconds('BENCH_WARMUP_SECONDS', 1);
  const rounds = envInt('BENCH_ROUNDS', 2);
  const levels = concurrencyLevels();
  const diagnose = process.env.BENCH_DIAGNOSE !== '0';
  const hot = cached ? 64 : undefined;
  const ttl = cached ? 600_000 : 1;
  console.log(`# ${scenario}: interlock_query primary-key read over /mcp vs pg direct${cached ? ' (cache warm)' : ' (cache missed on every call)'}`);
  console.log(machineLine());
  console.log(`runs: ${rounds} rounds × concurrency ${levels.join(', ')} × ${durationMs / 1000} s (+${warmupMs / 1000} s warm-up), sides alternating`);
  await withBenchEnv({}, async (env) => {
    const gateways: Array<{ name: string; gw: GatewayChild }> = [{ name: 'gateway', gw: await startServe(gatewayVars(env.controlUrl, { cacheTtlMs: ttl })) }];
    if (diagnose) gateways.push({ name: 'gateway-async-commit', gw: await startServe(gatewayVars(asyncCommitUrl(env.controlUrl), { cacheTtlMs: ttl })) });
    const pool = new pg.Pool({ ...env.reader, max: envInt('BENCH_PG_POOL', SOURCE_POOL_SIZE), application_name: 'interlock-bench-direct' });
    try {
      for (const { gw } of gateways) {
        await preflight(gw.url, env.apiKey, pool);
        if (cached) {
          const warm = new McpHttpClient(gw.url, { apiKey: env.apiKey, maxSockets: 1 });
          for (let id = 1; id <= hot!; id++) structuredResult(await warm.callTool('interlock_query', { source_id: 'chinook', sql: POINT_SQL, params: [id] }));
          warm.close();
        }
      }
      const before = await Promise.all(gateways.map(({ gw }) => cacheCounters(gw)));
      const uncachedAnswers: Record<string, number> = {};
      const meters = new Map(gateways.map(({ name, gw }) => [name, pointReadMeter(env, [gw.pid])]));
      const waits = new WaitSampler(new URL(env.controlUrl).pathname.slice(1));
      const ledger = new CpuLedger(waits);
      const res = await interleave(
        [
          { name: 'direct', run: (c) => ledger.metered(meters.get('gateway')!, 'direct', c, () => runDirectPointReads(pool, c, { durationMs, warmupMs, hot })) },
          ...gateways.map(({ name, gw }) => ({
            name,
            run: async (c: number) => {
              const r = await ledger.metered(meters.get(name)!, name, c, () => runGatewayPointReads([gw.url], env.apiKey, c, { durationMs, warmupMs, hot, expectCached: cached }));
              uncachedAnswers[name] = (uncachedAnswers[name] ?? 0) + r.uncachedAnswers;
              return r;
            },
          })),
        ],
        levels,
        rounds,
        (l) => console.log(l),
      );
      for (const m of meters.values()) await m.close();
      await waits.close();
      const after = await Promise.all(gateways.map(({ gw }) => cacheCounters(gw)));
      const hits = after[0].hits - before[0].hits;
      const misses = after[0].misses - before[0].misses;
      const hitRate = hits / Math.max(1, hits + misses);
      const report = pointReadReport(levels, res.get('direct')!, res.get('gateway')!);
      console.log('');
      console.log(report.text);
      let diagRows: Array<Record<string, number>> = [];
      if (diagnose) {
        const d = pointReadReport(levels, res.get('direct')!, res.get('gateway-async-commit')!);
        diagRows = d.rows;
        console.log('\ndiagnostic — the same gateway with asynchronous commits on its control-database sessions:');
        console.log(d.text);
      }
      console.log('\nCPU milliseconds per request (warm-up included; /proc and pg_stat_activity):');
      console.log(ledger.table(['direct', ...gateways.map((g) => g.name)], levels));
      console.log('control database, active backends and what they wait on (pg_stat_activity every 25 ms):');
      for (const c of levels) for (const g of gateways) console.log(`  c=${c} ${g.name}: ${ledger.waitLine(g.name, c)}`);
      console.log(`gateway cache during the runs: ${hits} hits, ${misses} misses (hit rate ${(hitRate * 100).toFixed(1)}%)${cached ? `; answers not marked cached: ${uncachedAnswers.gateway ?? 0}` : ''}`);
      const c32 = report.rows.find((r) => r.concurrency === 32);
      if (c32) {
        if (cached) console.log(`target cached ≥ 1.5× direct at c=32: ${ratio(c32.throughput_ratio)} → ${c32.throughput_ratio >= 1.5 ? 'MET' : 'MISSED'}`);
        else console.log(`targets at c=32: throughput ≥ 0.5× direct: ${ratio(c32.throughput_ratio)} → ${c32.throughput_ratio >= 0.5 ? 'MET' : 'MISSED'}; added p50 ≤ 1 ms: ${c32.added_p50_ms.toFixed(2)} ms → ${c32.added_p50_ms <= 1 ? 'MET' : 'MISSED'}`);
      }
      const c1 = report.rows.find((r) => r.concurrency === 1);
      if (c1) console.log(`added latency per call at c=1 (no queueing): p50 ${c1.added_p50_ms.toFixed(2)} ms, mean ${c1.added_mean_ms.toFixed(2)} ms`);
      let aggregateRows: Array<Record<string, number>> = [];
      if (cached && diagnose) {
        const agg: LoadStatement = { sql: AGGREGATE_SQL, params: () => [], rows: 24 };
        const gw = gateways[0].gw;
        const warm = new McpHttpClient(gw.url, { apiKey: env.apiKey, maxSockets: 1 });
        structuredResult(await warm.callTool('interlock_query', { source_id: 'chinook', sql: AGGREGATE_SQL, params: [] }));
        warm.close();
        const aggLevels = levels.filter((c) => c >= 8);
        console.log(`\ndiagnostic — a heavier statement cached (revenue by genre: three-table join and aggregate), 1 round:`);
        const r = await interleave(
          [
            { name: 'direct', run: (c) => runDirectStatement(pool, c, agg, { durationMs, warmupMs }) },
            { name: 'gateway', run: (c) => runGatewayStatement([gw.url], env.apiKey, c, agg, { durationMs, warmupMs, expectCached: true }) },
          ],
          aggLevels,
          1,
          (l) => console.log(l),
        );
        const rep = pointReadReport(aggLevels, r.get('direct')!, r.get('gateway')!);
        aggregateRows = rep.rows;
        console.log(rep.text);
      }
      const cpuPerRequest = Object.fromEntries(levels.map((c) => [c, Object.fromEntries(['direct', ...gateways.map((g) => g.name)].map((s) => [s, ledger.perOp(s, c)]))]));
      const controlWaits = Object.fromEntries(levels.map((c) => [c, Object.fromEntries(gateways.map((g) => [g.name, ledger.waitShares(g.name, c)]))]));
      emitResult(scenario, { rounds, durationMs, warmupMs, directPool: pool.options.max, rows: report.rows, asyncCommitRows: diagRows, cpuMsPerRequest: cpuPerRequest, controlDbWaits: controlWaits, cachedAggregateRows: aggregateRows, cache: { hits, misses, hitRate: round(hitRate, 4) } });
    } finally {
      await pool.end();
      for (const { gw } of gateways) await gw.stop();
    }
  });
}
