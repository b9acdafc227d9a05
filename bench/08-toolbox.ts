/**
 * Scenario 8 (issue 13 Targets): InterLock against MCP Toolbox (Go) on the same machine, in one
 * run, on the bench's own Chinook copy and reader role. Sides, alternating per round at
 * concurrency 8 and 32 (BENCH_CONCURRENCY):
 *  - direct: `pg` as the reader role (extended protocol, pool of 5);
 *  - interlock: interlock_query with $1, cache missed on every call (time to live 1 ms), with
 *    governance, redaction planning, rate limits and durable audit on (the served configuration);
 *  - interlock-cached: the same statement on a second gateway whose cache is warm (64 ids);
 *  - interlock-x2: two gateway processes on one control database, round-robin (scale-out);
 *  - toolbox-sql: Toolbox's `postgres-sql` tool with $1; toolbox-exec: `postgres-execute-sql` with
 *    the id written into the statement text;
 *  - node-floor: the floor of any Node.js gateway on the design's parts (node:http and `pg`, no
 *    governance at all; bench/lib/node-floor-server.ts); node-floor-audit: the same, with every
 *    answer waiting for a group-committed, unchained audit row on the control database;
 *    node-floor-audit-x2: two such processes, round-robin. They show
 *    how much of the gap to Toolbox is the runtime and the durable audit rather than InterLock.
 * Every side first runs BENCH_PREWARM_SECONDS (default 8) unmeasured at c=8. Then tools/list at concurrency 8, InterLock vs Toolbox. Reports ratios per the targets and
 * CPU µs per call of the gateway (or Toolbox) process and of the control database's backends.
 * Figures are noisy: the machine is shared and has two cores. Run: `npx tsx bench/08-toolbox.ts`.
 */
import pg from 'pg';
import { closedLoop, interleave, type LoadRun, type Side } from './lib/load';
import { McpHttpClient, structuredResult } from './lib/http';
import { concurrencyLevels, emitResult, envInt, envSeconds, machineLine, ratio, round, table } from './lib/stats';
import { gatewayVars, SkipError, startServe, startTsChild, withBenchEnv, type GatewayChild } from './lib/env';
import { FLOOR_TOOL } from './lib/node-floor-server';
import { CpuMeter } from './lib/cpu';
import { CpuLedger, POINT_SQL, preflight, runDirectPointReads, runGatewayPointReads, SOURCE_POOL_SIZE, trackId } from './lib/point-read';
import { startToolbox, toolboxText, TOOLBOX_POINT_TOOL, TOOLBOX_SQL_TOOL, type ToolboxChild } from './lib/toolbox';

type Row = Record<string, number | string>;

async function main(): Promise<void> {
  const durationMs = envSeconds('BENCH_SECONDS', 3);
  const warmupMs = envSeconds('BENCH_WARMUP_SECONDS', 1);
  const rounds = envInt('BENCH_ROUNDS', 2);
  const levels = concurrencyLevels([8, 32]);
  console.log('# 8-toolbox: InterLock vs MCP Toolbox (same run, same Chinook copy and reader role)');
  console.log(machineLine());
  console.log(`runs: ${rounds} rounds × concurrency ${levels.join(', ')} × ${durationMs / 1000} s (+${warmupMs / 1000} s warm-up), sides alternating; the machine is shared, so figures are noisy`);
  await withBenchEnv({}, async (env) => {
    let toolbox: ToolboxChild;
    try {
      toolbox = await startToolbox(env.reader, POINT_SQL);
    } catch (err) {
      if (err instanceof SkipError) {
        console.log(`SKIPPED: ${err.message}`);
        return;
      }
      throw err;
    }
    const gws: GatewayChild[] = [];
    const pool = new pg.Pool({ ...env.reader, max: envInt('BENCH_PG_POOL', SOURCE_POOL_SIZE), application_name: 'interlock-bench-direct' });
    try {
      const uncached = [await startServe(gatewayVars(env.controlUrl, { cacheTtlMs: 1 })), await startServe(gatewayVars(env.controlUrl, { cacheTtlMs: 1 }))];
      const cached = await startServe(gatewayVars(env.controlUrl, { cacheTtlMs: 600_000 }));
      gws.push(...uncached, cached);
      const floorVars = { BENCH_FLOOR_READER: JSON.stringify(env.reader), BENCH_FLOOR_SQL: POINT_SQL, BENCH_FLOOR_POOL: String(SOURCE_POOL_SIZE) };
      const floor = await startTsChild('bench/lib/node-floor-server.ts', floorVars);
      const floorAudits = [await startTsChild('bench/lib/node-floor-server.ts', { ...floorVars, BENCH_FLOOR_AUDIT_URL: env.controlUrl }), await startTsChild('bench/lib/node-floor-server.ts', { ...floorVars, BENCH_FLOOR_AUDIT_URL: env.controlUrl })];
      const floorAudit = floorAudits[0];
      gws.push(floor, ...floorAudits);
      for (const gw of [...uncached, cached]) await preflight(gw.url, env.apiKey, pool);
      const warm = new McpHttpClient(cached.url, { apiKey: env.apiKey, maxSockets: 1 });
      for (let id = 1; id <= 64; id++) structuredResult(await warm.callTool('interlock_query', { source_id: 'chinook', sql: POINT_SQL, params: [id] }));
      warm.close();
      const tb = new McpHttpClient(toolbox.url, { maxSockets: 1 });
      const probe = toolboxText(await tb.callTool(TOOLBOX_POINT_TOOL, { track_id: 42 }));
      const probeSql = toolboxText(await tb.callTool(TOOLBOX_SQL_TOOL, { sql: POINT_SQL.replace('$1', '42') }));
      tb.close();
      const want = ((await pool.query(POINT_SQL, [42])).rows[0] as { name: string }).name;
      for (const f of [floor, ...floorAudits]) {
        const fc = new McpHttpClient(f.url, { maxSockets: 1 });
        const sc = structuredResult(await fc.callTool(FLOOR_TOOL, { track_id: 42 }));
        fc.close();
        if ((sc.rows as Array<{ name: string }>)[0]?.name !== want) throw new Error(`the Node floor does not answer track 42 (${want}): ${JSON.stringify(sc).slice(0, 200)}`);
      }
      if (!probe.includes(JSON.stringify(want).slice(1, -1)) || !probeSql.includes(JSON.stringify(want).slice(1, -1))) throw new Error(`toolbox answers do not carry track 42 (${want}): ${probe.slice(0, 200)}`);

      const controlDb = { databases: [new URL(env.controlUrl).pathname.slice(1)] };
      const sourceDb = { databases: [env.demo.databaseName] };
      const meter = (pids: number[]) => new CpuMeter({ client: { self: true }, gateway: { pids }, controlDb, sourceDb });
      const meters = {
        direct: meter([]),
        interlock: meter([uncached[0].pid]),
        'interlock-cached': meter([cached.pid]),
        'interlock-x2': meter(uncached.map((g) => g.pid)),
        'toolbox-sql': meter([toolbox.pid]),
        'toolbox-exec': meter([toolbox.pid]),
        'node-floor': meter([floor.pid]),
        'node-floor-audit': meter([floorAudit.pid]),
        'node-floor-audit-x2': meter(floorAudits.map((f) => f.pid)),
      };
      const ledger = new CpuLedger();
      // Every load reads its timing from `t`, so the pre-warm below can run the same loads longer.
      const t = { durationMs, warmupMs };
      const toolboxRun = (c: number, tool: string, args: () => Record<string, unknown>) => {
        const client = new McpHttpClient(toolbox.url, { maxSockets: c });
        return closedLoop({ concurrency: c, ...t, op: async () => void toolboxText(await client.callTool(tool, args())) }).finally(() => client.close());
      };
      const floorRun = (c: number, urls: string[]) => {
        const clients = urls.map((u) => new McpHttpClient(u, { maxSockets: c }));
        let next = 0;
        return closedLoop({
          concurrency: c,
          ...t,
          op: async () => {
            const sc = structuredResult(await clients[next++ % clients.length].callTool(FLOOR_TOOL, { track_id: trackId() }));
            if (sc.row_count !== 1) throw new Error(`node floor: expected 1 row, got ${JSON.stringify(sc).slice(0, 200)}`);
          },
        }).finally(() => clients.forEach((cl) => cl.close()));
      };
      const loads: Record<keyof typeof meters, (c: number) => Promise<LoadRun>> = {
        direct: (c) => runDirectPointReads(pool, c, { ...t }),
        interlock: (c) => runGatewayPointReads([uncached[0].url], env.apiKey, c, { ...t }),
        'interlock-cached': (c) => runGatewayPointReads([cached.url], env.apiKey, c, { ...t, hot: 64, expectCached: true }),
        'interlock-x2': (c) => runGatewayPointReads(uncached.map((g) => g.url), env.apiKey, c, { ...t }),
        'toolbox-sql': (c) => toolboxRun(c, TOOLBOX_POINT_TOOL, () => ({ track_id: trackId() })),
        'toolbox-exec': (c) => toolboxRun(c, TOOLBOX_SQL_TOOL, () => ({ sql: POINT_SQL.replace('$1', String(trackId())) })),
        'node-floor': (c) => floorRun(c, [floor.url]),
        'node-floor-audit': (c) => floorRun(c, [floorAudit.url]),
        'node-floor-audit-x2': (c) => floorRun(c, floorAudits.map((f) => f.url)),
      };
      // Pre-warm, unmeasured: V8 compiles a large program's hot paths over the first thousands of
      // calls (on its helper threads, which /proc counts against the process), so a 1 s warm-up
      // left InterLock's first rounds measuring compilation. Every side gets the same pre-warm.
      const prewarmMs = envSeconds('BENCH_PREWARM_SECONDS', 8);
      if (prewarmMs > 0) {
        Object.assign(t, { durationMs: prewarmMs, warmupMs: 0 });
        for (const [name, load] of Object.entries(loads)) {
          const r = await load(8);
          console.log(`  pre-warm ${name}: ${r.allOps} calls over ${prewarmMs / 1000} s (not measured)`);
        }
        Object.assign(t, { durationMs, warmupMs });
      }
      const sides: Side[] = Object.entries(loads).map(([name, load]) => ({ name, run: (c: number) => ledger.metered(meters[name as keyof typeof meters], name, c, () => load(c)) }));
      const res = await interleave(sides, levels, rounds, (l) => console.log(l));
      for (const m of Object.values(meters)) await m.close();
      const ops = (side: string, c: number) => res.get(side)!.get(c)!.throughput;
      const p50 = (side: string, c: number) => res.get(side)!.get(c)!.latency.p50;
      const rows: Row[] = levels.map((c) => ({
        concurrency: c,
        direct: round(ops('direct', c), 0),
        interlock: round(ops('interlock', c), 0),
        interlock_cached: round(ops('interlock-cached', c), 0),
        interlock_x2: round(ops('interlock-x2', c), 0),
        toolbox_sql: round(ops('toolbox-sql', c), 0),
        toolbox_exec: round(ops('toolbox-exec', c), 0),
        node_floor: round(ops('node-floor', c), 0),
        node_floor_audit: round(ops('node-floor-audit', c), 0),
        floor_vs_toolbox_sql: round(ops('node-floor', c) / ops('toolbox-sql', c), 3),
        floor_audit_vs_toolbox_sql: round(ops('node-floor-audit', c) / ops('toolbox-sql', c), 3),
        il_vs_floor_audit: round(ops('interlock', c) / ops('node-floor-audit', c), 3),
        node_floor_audit_x2: round(ops('node-floor-audit-x2', c), 0),
        floor_x2_vs_x1: round(ops('node-floor-audit-x2', c) / ops('node-floor-audit', c), 3),
        floor_vs_direct: round(ops('node-floor', c) / ops('direct', c), 3),
        il_vs_toolbox_sql: round(ops('interlock', c) / ops('toolbox-sql', c), 3),
        il_vs_toolbox_exec: round(ops('interlock', c) / ops('toolbox-exec', c), 3),
        cached_vs_direct: round(ops('interlock-cached', c) / ops('direct', c), 3),
        x2_vs_x1: round(ops('interlock-x2', c) / ops('interlock', c), 3),
        il_p50_ms: round(p50('interlock', c), 3),
        toolbox_sql_p50_ms: round(p50('toolbox-sql', c), 3),
        direct_p50_ms: round(p50('direct', c), 3),
      }));
      console.log('\ncalls per second (pooled rounds):');
      console.log(table(['conc', 'pg', 'IL', 'IL cached', 'IL ×2', 'TB sql', 'TB exec', 'IL/TB sql', 'IL/TB exec', 'cached/pg', '×2/×1', 'IL p50', 'TB p50', 'pg p50'], rows.map((r) => [r.concurrency, r.direct, r.interlock, r.interlock_cached, r.interlock_x2, r.toolbox_sql, r.toolbox_exec, ratio(Number(r.il_vs_toolbox_sql)), ratio(Number(r.il_vs_toolbox_exec)), ratio(Number(r.cached_vs_direct)), ratio(Number(r.x2_vs_x1)), `${r.il_p50_ms} ms`, `${r.toolbox_sql_p50_ms} ms`, `${r.direct_p50_ms} ms`])));
      console.log('\nthe Node.js floor (node:http + pg, no governance) against Toolbox and InterLock:');
      console.log(table(['conc', 'floor', 'floor+audit', 'floor+audit ×2', 'floor/pg', 'floor/TB sql', 'floor+audit/TB sql', 'floor+audit ×2/×1', 'IL/floor+audit'], rows.map((r) => [r.concurrency, r.node_floor, r.node_floor_audit, r.node_floor_audit_x2, ratio(Number(r.floor_vs_direct)), ratio(Number(r.floor_vs_toolbox_sql)), ratio(Number(r.floor_audit_vs_toolbox_sql)), ratio(Number(r.floor_x2_vs_x1)), ratio(Number(r.il_vs_floor_audit))])));
      console.log('\nCPU milliseconds per call (warm-up included; /proc and pg_stat_activity; "gateway" is the Toolbox process on its sides):');
      console.log(ledger.table(Object.keys(meters), levels));
      const cpu = Object.fromEntries(levels.map((c) => [c, Object.fromEntries(Object.keys(meters).map((s) => [s, ledger.perOp(s, c)]))]));

      // tools/list at c=8.
      const listC = 8;
      const list = (url: string) => {
        const client = new McpHttpClient(url, { apiKey: env.apiKey, maxSockets: listC });
        return closedLoop({
          concurrency: listC,
          durationMs,
          warmupMs,
          op: async () => {
            const r = await client.rpc('tools/list');
            if (r.status !== 200 || !r.text.includes('"tools"')) throw new Error(`tools/list: HTTP ${r.status} ${r.text.slice(0, 200)}`);
          },
        }).finally(() => client.close());
      };
      const lr = await interleave([{ name: 'interlock', run: () => list(uncached[0].url) }, { name: 'toolbox', run: () => list(toolbox.url) }], [listC], rounds, (l) => console.log(l));
      const listRow = { concurrency: listC, interlock: round(lr.get('interlock')!.get(listC)!.throughput, 0), toolbox: round(lr.get('toolbox')!.get(listC)!.throughput, 0) };
      const listRatio = round(listRow.interlock / listRow.toolbox, 3);
      console.log(`tools/list c=${listC}: InterLock ${listRow.interlock}/s, Toolbox ${listRow.toolbox}/s → ${ratio(listRatio)} (InterLock serves 11 tools, Toolbox 2: the answers differ in size)`);

      console.log('\ntargets:');
      for (const r of rows) {
        const c = Number(r.concurrency);
        const il = cpu[c].interlock;
        console.log(`  c=${c}: IL/TB postgres-sql ${ratio(Number(r.il_vs_toolbox_sql))} (≥ 1.0×) ${Number(r.il_vs_toolbox_sql) >= 1 ? 'MET' : 'MISSED'}; IL/TB execute-sql ${ratio(Number(r.il_vs_toolbox_exec))} (≥ 1.5×) ${Number(r.il_vs_toolbox_exec) >= 1.5 ? 'MET' : 'MISSED'}; cached/pg ${ratio(Number(r.cached_vs_direct))} (≥ 1.0×) ${Number(r.cached_vs_direct) >= 1 ? 'MET' : 'MISSED'}; ×2/×1 ${ratio(Number(r.x2_vs_x1))} (≥ 1.0×) ${Number(r.x2_vs_x1) >= 1 ? 'MET' : 'MISSED'}`);
        console.log(`        gateway CPU ${(il.gateway * 1000).toFixed(0)} µs/call (≤ 150) ${il.gateway * 1000 <= 150 ? 'MET' : 'MISSED'}; control-DB CPU ${(il.controlDb * 1000).toFixed(0)} µs/call (≤ 30) ${il.controlDb * 1000 <= 30 ? 'MET' : 'MISSED'}; Toolbox process ${(cpu[c]['toolbox-sql'].gateway * 1000).toFixed(0)} µs/call`);
        const fl = cpu[c]['node-floor-audit'];
        console.log(`        the ungoverned Node floor with durable audit, same run: /TB postgres-sql ${ratio(Number(r.floor_audit_vs_toolbox_sql))}, /TB execute-sql ${ratio(ops('node-floor-audit', c) / ops('toolbox-exec', c))}, ×2/×1 ${ratio(Number(r.floor_x2_vs_x1))}, gateway CPU ${(fl.gateway * 1000).toFixed(0)} µs/call, control-DB CPU ${(fl.controlDb * 1000).toFixed(0)} µs/call; without audit /pg ${ratio(Number(r.floor_vs_direct))}`);
      }
      console.log(`  tools/list c=8: ${ratio(listRatio)} (≥ 1.0×) ${listRatio >= 1 ? 'MET' : 'MISSED'}`);
      emitResult('8-toolbox', { rounds, durationMs, warmupMs, rows, cpuMsPerCall: cpu, toolsList: { ...listRow, ratio: listRatio } });
    } finally {
      await pool.end();
      for (const gw of gws) await gw.stop();
      await toolbox.stop();
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
