/**
 * Scenario 8 driven by wrk (issue 28): the sides of bench/08-toolbox.ts, each loaded by `wrk` (a C
 * load generator, bench/lib/wrk.ts) instead of the bench's Node.js client, whose 100–450 µs of CPU
 * per call on the same two cores skewed every ratio. Sides, alternating per round at c=8 and 32
 * (BENCH_CONCURRENCY):
 *  - interlock: interlock_query with $1, cache missed on every call (time to live 1 ms), governance
 *    and durable audit on; interlock-cached: the same on a gateway whose cache is warm (64 ids);
 *  - toolbox-sql / toolbox-exec: MCP Toolbox's `postgres-sql` ($1) and `postgres-execute-sql`;
 *  - node-floor / node-floor-audit: node:http + `pg` with no governance, without and with a
 *    group-committed durable audit row per answer (bench/lib/node-floor-server.ts);
 *  - node-floor-governed / node-floor-governed-1 (issue 28, task h28f): the governed floor — the floor
 *    doing exactly the I/O InterLock does for this call, no governance JavaScript: InterLock's source
 *    preludes (guards) in the statement's round trip, and InterLock's own trail written by InterLock's
 *    own writer (format 3, chain hash per batch; the gateway's two overlapped lanes, or one commit in
 *    flight), bench/lib/governed-floor.ts; the targets block gives each target's value on it and a
 *    verdict (met / reachable in principle / unreachable here, with the I/O that sets it);
 *  - interlock-base (BENCH_BASE_ROOT: another checkout, compiled): its `interlock serve` as a further
 *    side, for a paired before/after in one run;
 *  - direct: `pg` in this process (no HTTP; the Node driver, as before): the cached read's baseline.
 *  - interlock-x2 / node-floor-audit-x2 (BENCH_WORKERS, default 2; 1 leaves them out): the same two
 *    as node:cluster primaries with that many worker processes on one port (bench/lib/cluster-serve.ts;
 *    BENCH_FLOOR_WORKERS of the floor), each worker a replica with its own pools and audit writer:
 *    what more than one event loop gives on this machine (issue 28). CPU = primary + workers;
 *  - dbhub: DBHub 1.4.0's `execute_sql` (read-only mode, the point read spliced like toolbox-exec;
 *    bench/lib/dbhub.ts), when the devDependency is installed; else its side is skipped.
 * Reports calls/s, wrk's p50, CPU µs per call of the server process, the control and source
 * databases' backends and the driver (wrk's own CPU from bash `times`; the Node client's for
 * direct), the machine's load average, the issue-28 targets, and node-floor-audit ÷ direct pg: the
 * bound on any answer that waits for its own durable audit commit, measured in the same run.
 * BENCH_SIDES (comma list of side names, `direct` included) measures only those sides, does not start interlock-cached,
 * node-floor or DBHub when they are left out (fewer processes and connections on a shared PostgreSQL server), and
 * leaves out the targets whose sides are absent.
 * Run: `BENCH_ROUNDS=3 npx tsx bench/08-wrk.ts` (needs /usr/bin/wrk and the Toolbox npm package).
 */
import { loadavg } from 'node:os';
import pg from 'pg';
import { CpuMeter, processTree } from './lib/cpu';
import { gatewayVars, SkipError, startServe, startTsChild, withBenchEnv, type GatewayChild } from './lib/env';
import { BENCH_PROTOCOL_VERSION, McpHttpClient, structuredResult } from './lib/http';
import type { LoadRun } from './lib/load';
import { governedFloorConfig } from './lib/governed-floor';
import { FLOOR_TOOL } from './lib/node-floor-server';
import { POINT_SQL, preflight, runDirectPointReads, SOURCE_POOL_SIZE, TRACKS } from './lib/point-read';
import { concurrencyLevels, emitResult, envInt, envSeconds, machineLine, ratio, round, table } from './lib/stats';
import { startToolbox, TOOLBOX_POINT_TOOL, TOOLBOX_SQL_TOOL, type ToolboxChild } from './lib/toolbox';
import { DBHUB_SQL_TOOL, startDbHub, type DbHubChild } from './lib/dbhub';
import { runWrk, wrkAvailable, type WrkRun } from './lib/wrk';

const rpc = (name: string, args: Record<string, unknown>) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: args } });
const ids = (n: number, hot?: number) => Array.from({ length: n }, (_, i) => (hot ? 1 + (i % hot) : 1 + ((i * 7919) % TRACKS)));

async function main(): Promise<void> {
  if (!wrkAvailable()) {
    console.log('SKIPPED: wrk is not installed (apt-get install -y wrk)');
    return;
  }
  const durationMs = envSeconds('BENCH_SECONDS', 4);
  const rounds = envInt('BENCH_ROUNDS', 3);
  const levels = concurrencyLevels([8, 32]);
  console.log('# 8-wrk: InterLock vs MCP Toolbox and the Node.js floor, every HTTP side driven by wrk');
  console.log(machineLine());
  console.log(`runs: ${rounds} rounds × concurrency ${levels.join(', ')} × ${durationMs / 1000} s, sides alternating; load average at start ${loadavg().map((x) => x.toFixed(1)).join(' ')}`);
  await withBenchEnv({}, async (env) => {
    let toolbox: ToolboxChild;
    try {
      toolbox = await startToolbox(env.reader, POINT_SQL);
    } catch (err) {
      if (err instanceof SkipError) return void console.log(`SKIPPED: ${err.message}`);
      throw err;
    }
    // BENCH_SIDES (comma list, e.g. "direct,interlock,interlock-x2,node-floor-audit,node-floor-audit-x2,toolbox-sql,toolbox-exec"):
    // only those sides are started and measured (fewer connections on a shared server); targets whose sides are absent are left out.
    const only = process.env.BENCH_SIDES ? new Set(process.env.BENCH_SIDES.split(',').map((x) => x.trim())) : null;
    const want = (side: string) => !only || only.has(side);
    let dbhub: DbHubChild | null = null;
    try {
      if (want('dbhub')) dbhub = await startDbHub(env.reader);
    } catch (err) {
      if (!(err instanceof SkipError)) throw err;
      console.log(`dbhub side skipped: ${err.message}`);
    }
    const gws: GatewayChild[] = [];
    const pool = new pg.Pool({ ...env.reader, max: SOURCE_POOL_SIZE, application_name: 'interlock-bench-direct' });
    try {
      const uncached = await startServe(gatewayVars(env.controlUrl, { cacheTtlMs: 1 }));
      const cached = want('interlock-cached') ? await startServe(gatewayVars(env.controlUrl, { cacheTtlMs: 600_000 })) : null;
      const floorVars = { BENCH_FLOOR_READER: JSON.stringify(env.reader), BENCH_FLOOR_SQL: POINT_SQL, BENCH_FLOOR_POOL: String(SOURCE_POOL_SIZE) };
      const floor = want('node-floor') ? await startTsChild('bench/lib/node-floor-server.ts', floorVars) : null;
      const floorAudit = await startTsChild('bench/lib/node-floor-server.ts', { ...floorVars, BENCH_FLOOR_AUDIT_URL: env.controlUrl });
      gws.push(...[uncached, cached, floor, floorAudit].filter((g): g is GatewayChild => g !== null));
      const base = process.env.BENCH_BASE_ROOT && want('interlock-base') ? await startServe(gatewayVars(env.controlUrl, { cacheTtlMs: 1 }), undefined, process.env.BENCH_BASE_ROOT) : null;
      if (base) gws.push(base);
      // The governed floor (h28f): configured from the gateway's own catalogue, guards and audit event (after its preflight).
      await preflight(uncached.url, env.apiKey, pool);
      const governedSide = async (lanes: number) => {
        const g = await startTsChild('bench/lib/node-floor-server.ts', { ...floorVars, BENCH_FLOOR_AUDIT_URL: env.controlUrl, BENCH_FLOOR_GOVERNED: JSON.stringify(await governedFloorConfig(env.db, env.controlUrl, 'chinook', POINT_SQL, lanes)) });
        gws.push(g);
        return g;
      };
      const governed = want('node-floor-governed') ? await governedSide(2) : null;
      const governed1 = want('node-floor-governed-1') ? await governedSide(1) : null;
      // More than one event loop (issue 28): both the gateway and the audited floor, so the comparison stays fair.
      const workers = envInt('BENCH_WORKERS', 2);
      const multi = workers > 1 ? { il: await startTsChild('bench/lib/cluster-serve.ts', { ...gatewayVars(env.controlUrl, { cacheTtlMs: 1 }), BENCH_CLUSTER_WORKERS: String(workers) }), floor: await startTsChild('bench/lib/node-floor-server.ts', { ...floorVars, BENCH_FLOOR_AUDIT_URL: env.controlUrl, BENCH_FLOOR_WORKERS: String(workers) }) } : null;
      if (multi) {
        gws.push(multi.il, multi.floor);
        await preflight(multi.il.url, env.apiKey, pool);
      }
      if (base) await preflight(base.url, env.apiKey, pool);
      if (cached) {
        await preflight(cached.url, env.apiKey, pool);
        const warm = new McpHttpClient(cached.url, { apiKey: env.apiKey, maxSockets: 1 });
        for (let id = 1; id <= 64; id++) structuredResult(await warm.callTool('interlock_query', { source_id: 'chinook', sql: POINT_SQL, params: [id] }));
        warm.close();
      }

      const mcpHeaders = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', 'MCP-Protocol-Version': BENCH_PROTOCOL_VERSION };
      const ilHeaders = { ...mcpHeaders, Authorization: `Bearer ${env.apiKey}` };
      const ilBodies = (hot?: number) => ids(256, hot).map((id) => rpc('interlock_query', { source_id: 'chinook', sql: POINT_SQL, params: [id] }));
      interface WrkSide { url: string; bodies: string[]; headers: Record<string, string>; expect: string; pids: number[] }
      const wrkSides: Record<string, WrkSide> = {
        interlock: { url: uncached.url, bodies: ilBodies(), headers: ilHeaders, expect: '"row_count":1,', pids: [uncached.pid] },
        ...(cached ? { 'interlock-cached': { url: cached.url, bodies: ilBodies(64), headers: ilHeaders, expect: '"cached":true', pids: [cached.pid] } } : {}),
        'toolbox-sql': { url: toolbox.url, bodies: ids(256).map((id) => rpc(TOOLBOX_POINT_TOOL, { track_id: id })), headers: mcpHeaders, expect: 'unit_price', pids: [toolbox.pid] },
        'toolbox-exec': { url: toolbox.url, bodies: ids(256).map((id) => rpc(TOOLBOX_SQL_TOOL, { sql: POINT_SQL.replace('$1', String(id)) })), headers: mcpHeaders, expect: 'unit_price\\":', pids: [toolbox.pid] },
        ...(floor ? { 'node-floor': { url: floor.url, bodies: ids(256).map((id) => rpc(FLOOR_TOOL, { track_id: id })), headers: mcpHeaders, expect: '"row_count":1', pids: [floor.pid] } } : {}),
        ...(dbhub ? { dbhub: { url: dbhub.url, bodies: ids(256).map((id) => rpc(DBHUB_SQL_TOOL, { sql: POINT_SQL.replace('$1', String(id)) })), headers: mcpHeaders, expect: 'unit_price', pids: [dbhub.pid] } } : {}),
        'node-floor-audit': { url: floorAudit.url, bodies: ids(256).map((id) => rpc(FLOOR_TOOL, { track_id: id })), headers: mcpHeaders, expect: '"row_count":1', pids: [floorAudit.pid] },
        ...(governed ? { 'node-floor-governed': { url: governed.url, bodies: ids(256).map((id) => rpc(FLOOR_TOOL, { track_id: id })), headers: mcpHeaders, expect: '"row_count":1', pids: [governed.pid] } } : {}),
        ...(governed1 ? { 'node-floor-governed-1': { url: governed1.url, bodies: ids(256).map((id) => rpc(FLOOR_TOOL, { track_id: id })), headers: mcpHeaders, expect: '"row_count":1', pids: [governed1.pid] } } : {}),
        ...(base ? { 'interlock-base': { url: base.url, bodies: ilBodies(), headers: ilHeaders, expect: '"row_count":1,', pids: [base.pid] } } : {}),
        ...(multi
          ? {
              [`interlock-x${workers}`]: { url: multi.il.url, bodies: ilBodies(), headers: ilHeaders, expect: '"row_count":1,', pids: processTree(multi.il.pid) },
              [`node-floor-audit-x${workers}`]: { url: multi.floor.url, bodies: ids(256).map((id) => rpc(FLOOR_TOOL, { track_id: id })), headers: mcpHeaders, expect: '"row_count":1', pids: processTree(multi.floor.pid) },
            }
          : {}),
      };
      if (multi) console.log(`multi-process sides: interlock-x${workers} pids ${wrkSides[`interlock-x${workers}`].pids.join(',')}, node-floor-audit-x${workers} pids ${wrkSides[`node-floor-audit-x${workers}`].pids.join(',')}`);
      const controlDb = { databases: [new URL(env.controlUrl).pathname.slice(1)] };
      const sourceDb = { databases: [env.demo.databaseName] };
      const sides = ['direct', ...Object.keys(wrkSides)].filter(want);
      const run = (side: string, c: number, ms: number): Promise<LoadRun | WrkRun> =>
        side === 'direct' ? runDirectPointReads(pool, c, { durationMs: ms, warmupMs: 0 }) : runWrk({ ...wrkSides[side], concurrency: c, durationMs: ms });
      const prewarmMs = envSeconds('BENCH_PREWARM_SECONDS', 6);
      // A multi-process side pre-warms `workers` times as long: each worker's JIT settles on its own share of the calls
      // (with equal time, 2 workers' per-call CPU stayed 2× one process's for the first ~12 s of load).
      for (const s of sides) console.log(`  pre-warm ${s}: ${(await run(s, 8, /-x\d+$/.test(s) ? prewarmMs * workers : prewarmMs)).allOps} calls (not measured)`);

      type Acc = { ops: number; all: number; ms: number; p50: number[]; cpu: Record<string, number>; driver: number; load: number[] };
      const acc = new Map<string, Acc>();
      /** calls/s of each side and concurrency, round by round (paired comparisons). */
      const perRound = new Map<string, number[]>();
      for (let r = 0; r < rounds; r++) {
        for (const c of levels) {
          for (const s of sides) {
            const meter = new CpuMeter({ client: { self: true }, gateway: { pids: s === 'direct' ? [] : wrkSides[s].pids }, controlDb, sourceDb });
            await meter.start();
            const x = await run(s, c, durationMs);
            const cpu = await meter.stop();
            await meter.close();
            const k = `${s}@${c}`;
            const a = acc.get(k) ?? { ops: 0, all: 0, ms: 0, p50: [], cpu: {}, driver: 0, load: [] };
            a.ops += x.ops;
            a.all += x.allOps;
            a.ms += x.elapsedMs;
            a.p50.push('p50Ms' in x ? x.p50Ms : NaN);
            for (const [g, v] of Object.entries(cpu)) a.cpu[g] = (a.cpu[g] ?? 0) + v;
            a.driver += 'driverCpuMs' in x ? x.driverCpuMs : cpu.client;
            a.load.push(loadavg()[0]);
            acc.set(k, a);
            perRound.set(k, [...(perRound.get(k) ?? []), (x.ops * 1000) / x.elapsedMs]);
            console.log(`  round ${r + 1}/${rounds} c=${c} ${s}: ${((x.ops * 1000) / x.elapsedMs).toFixed(0)} calls/s, load ${loadavg()[0].toFixed(1)}`);
          }
        }
      }
      const ops = (s: string, c: number) => { const a = acc.get(`${s}@${c}`); return a ? (a.ops * 1000) / a.ms : NaN; };
      const us = (s: string, c: number, g: string) => { const a = acc.get(`${s}@${c}`); return a ? round(((g === 'driver' ? a.driver : a.cpu[g]) / a.all) * 1000, 0) : NaN; };
      const loads = [...acc.values()].flatMap((a) => a.load);
      console.log(`\nload average (1 min) during the runs: ${Math.min(...loads).toFixed(1)}–${Math.max(...loads).toFixed(1)}`);
      console.log('\ncalls per second and CPU µs per call (server = the side\'s process; driver = wrk, or this process for direct):');
      console.log(table(['side', 'conc', 'calls/s', 'p50 ms', 'server', 'control DB', 'source DB', 'driver'], sides.flatMap((s) => levels.map((c) => [s, c, round(ops(s, c), 0), round(acc.get(`${s}@${c}`)!.p50.filter(Number.isFinite).sort((a, b) => a - b)[Math.floor(rounds / 2)] ?? NaN, 2), us(s, c, 'gateway'), us(s, c, 'controlDb'), us(s, c, 'sourceDb'), us(s, c, 'driver')]))));
      const targets: Array<[string, number, number, boolean, number?]> = [];
      // The audited floor ÷ direct pg bounds what any answer that waits for its own durable audit
      // commit (contract: "audited before its answer") can reach against direct pg in this run.
      const floors: Array<[number, number, number]> = [];
      // `governed`: the target's value on the governed floor (node-floor-governed, h28f), when measured.
      const t = (name: string, value: number, goal: number, atMost = false, governed = NaN) => void (Number.isFinite(value) && targets.push([name, round(value, 3), goal, atMost ? value <= goal : value >= goal, round(governed, 3)]));
      const gov = 'node-floor-governed';
      for (const c of levels) {
        t(`c=${c} IL / node-floor-audit`, ops('interlock', c) / ops('node-floor-audit', c), 0.8, false, ops(gov, c) / ops('node-floor-audit', c));
        t(`c=${c} IL / Toolbox postgres-sql`, ops('interlock', c) / ops('toolbox-sql', c), c === 8 ? 0.5 : 0.8, false, ops(gov, c) / ops('toolbox-sql', c));
        if (c === 32) t(`c=${c} IL / Toolbox execute-sql`, ops('interlock', c) / ops('toolbox-exec', c), 1.2, false, ops(gov, c) / ops('toolbox-exec', c));
        if (c === 8) t(`c=${c} gateway CPU µs/call`, us('interlock', c, 'gateway'), 250, true, us(gov, c, 'gateway'));
        t(`c=${c} control-DB CPU µs/call`, us('interlock', c, 'controlDb'), c === 8 ? 60 : 30, true, us(gov, c, 'controlDb'));
        t(`c=${c} cached / direct pg`, ops('interlock-cached', c) / ops('direct', c), 0.6);
        floors.push([c, ops('node-floor-audit', c) / ops('direct', c), ops('interlock-cached', c) / ops('node-floor-audit', c)]);
        if (c === 8 && dbhub) t(`c=${c} IL / DBHub 1.4.0`, ops('interlock', c) / ops('dbhub', c), 3, false, ops(gov, c) / ops('dbhub', c));
        if (multi) {
          const x = `interlock-x${workers}`;
          t(`c=${c} IL x${workers} / node-floor-audit`, ops(x, c) / ops('node-floor-audit', c), 0.8);
          t(`c=${c} IL x${workers} / Toolbox postgres-sql`, ops(x, c) / ops('toolbox-sql', c), c === 8 ? 0.5 : 0.8);
          if (c === 32) t(`c=${c} IL x${workers} / Toolbox execute-sql`, ops(x, c) / ops('toolbox-exec', c), 1.2);
          if (c === 8) t(`c=${c} IL x${workers} gateway CPU µs/call`, us(x, c, 'gateway'), 250, true);
          t(`c=${c} IL x${workers} control-DB CPU µs/call`, us(x, c, 'controlDb'), c === 8 ? 60 : 30, true);
        }
      }
      console.log('\ntargets (issue 28):');
      for (const [name, v, goal, met, g] of targets) {
        const atMost = name.includes('µs');
        // The verdict against the governed floor (h28f): met; reachable in principle (the floor is beyond the target); unreachable here.
        const gMeets = g !== undefined && Number.isFinite(g) && (atMost ? g <= goal : g >= goal);
        const verdict = g === undefined || !Number.isFinite(g) ? '' : ` | governed floor ${atMost ? g : ratio(g)}: ${met ? 'met' : gMeets ? 'reachable in principle (the floor is beyond the target)' : `unreachable here (even the governed floor misses it; ${name.includes('control-DB') ? "set by InterLock's trail append and commit" : name.includes('gateway') ? "set by the floor's own process: node:http, pg, the trail writer's hashing and rows" : 'set by the I/O below'})`}`;
        console.log(`  ${name}: ${atMost ? v : ratio(v)} (${atMost ? `≤ ${goal}` : `≥ ${goal}×`}) ${met ? 'MET' : 'NOT MET'}${verdict}`);
      }
      if (acc.has(`${gov}@${levels[0]}`)) {
        console.log(`\nthe governed floor's I/O over node-floor-audit's (CPU µs per call; h28f):`);
        for (const c of levels) {
          const d = (side: string, g: string) => round(us(side, c, g) - us('node-floor-audit', c, g), 0);
          console.log(`  c=${c} ${gov}: source DB +${d(gov, 'sourceDb')} (InterLock's source preludes), control DB +${d(gov, 'controlDb')} (InterLock's trail, chained format-3 batches), own process +${d(gov, 'gateway')}, calls/s ${ratio(ops(gov, c) / ops('node-floor-audit', c))} of the floor's` +
            (acc.has(`${gov}-1@${c}`) ? `; one commit in flight (${gov}-1): calls/s ${ratio(ops(`${gov}-1`, c) / ops(gov, c))} of two lanes', control DB ${us(`${gov}-1`, c, 'controlDb')} against ${us(gov, c, 'controlDb')} µs/call` : ''));
        }
      }
      if (acc.has(`interlock-base@${levels[0]}`)) {
        console.log(`\nbefore/after (BENCH_BASE_ROOT ${process.env.BENCH_BASE_ROOT}): interlock ÷ interlock-base, calls/s per round (paired), and CPU µs per call over all rounds:`);
        for (const c of levels) {
          const pairs = perRound.get(`interlock@${c}`)!.map((x, i) => ratio(x / perRound.get(`interlock-base@${c}`)![i]));
          console.log(`  c=${c}: ${ratio(ops('interlock', c) / ops('interlock-base', c))} (rounds ${pairs.join(', ')}); gateway ${us('interlock', c, 'gateway')} / ${us('interlock-base', c, 'gateway')}, source DB ${us('interlock', c, 'sourceDb')} / ${us('interlock-base', c, 'sourceDb')}, control DB ${us('interlock', c, 'controlDb')} / ${us('interlock-base', c, 'controlDb')}`);
        }
      }
      if (!dbhub && want('dbhub')) console.log('  IL / DBHub 1.4.0 at c=8 (≥ 3×): not measured, DBHub is not installed here');
      if (multi) {
        console.log(`\n${workers} worker processes against one (go / no-go: ≥ 1.15× calls/s at c=32 or c=8):`);
        for (const c of levels) console.log(`  c=${c}: interlock-x${workers} / interlock ${ratio(ops(`interlock-x${workers}`, c) / ops('interlock', c))}; node-floor-audit-x${workers} / node-floor-audit ${ratio(ops(`node-floor-audit-x${workers}`, c) / ops('node-floor-audit', c))}; interlock-x${workers} / node-floor-audit-x${workers} ${ratio(ops(`interlock-x${workers}`, c) / ops(`node-floor-audit-x${workers}`, c))}`);
      }
      console.log('\naudited floor (the bound on any answer audited before it leaves):');
      for (const [c, floorRatio, cachedOfFloor] of floors) {
        console.log(`  c=${c} node-floor-audit / direct pg: ${ratio(floorRatio)} (${floorRatio >= 0.6 ? '0.6× is below the floor: reachable in principle' : '0.6× is above the floor: unreachable while each answer waits for its own audit commit'}); cached / node-floor-audit: ${ratio(cachedOfFloor)}`);
      }
      emitResult('8-wrk', { rounds, durationMs, levels, calls: Object.fromEntries([...acc.keys()].map((k) => [k, round(ops(k.split('@')[0], Number(k.split('@')[1])), 0)])), cpuUsPerCall: Object.fromEntries([...acc.keys()].map((k) => { const [s, c] = k.split('@'); return [k, Object.fromEntries(['gateway', 'controlDb', 'sourceDb', 'driver'].map((g) => [g, us(s, Number(c), g)]))]; })), targets, auditedFloor: floors.map(([c, f, cf]) => ({ concurrency: c, floorAuditOverDirect: round(f, 3), cachedOverFloorAudit: round(cf, 3) })), loadAverage: [Math.min(...loads), Math.max(...loads)] });
    } finally {
      await pool.end();
      for (const gw of gws) await gw.stop();
      await toolbox.stop();
      await dbhub?.stop();
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
