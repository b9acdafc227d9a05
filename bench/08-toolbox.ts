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
 *    the id written into the statement text.
 * Then tools/list at concurrency 8, InterLock vs Toolbox. Reports ratios per the targets and
 * CPU µs per call of the gateway (or Toolbox) process and of the control database's backends.
 * Figures are noisy: the machine is shared and has two cores. Run: `npx tsx bench/08-toolbox.ts`.
 */
import pg from 'pg';
import { closedLoop, interleave, type Side } from './lib/load';
import { McpHttpClient, structuredResult } from './lib/http';
import { concurrencyLevels, emitResult, envInt, envSeconds, machineLine, ratio, round, table } from './lib/stats';
import { gatewayVars, SkipError, startServe, withBenchEnv, type GatewayChild } from './lib/env';
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
      for (const gw of gws) await preflight(gw.url, env.apiKey, pool);
      const warm = new McpHttpClient(cached.url, { apiKey: env.apiKey, maxSockets: 1 });
      for (let id = 1; id <= 64; id++) structuredResult(await warm.callTool('interlock_query', { source_id: 'chinook', sql: POINT_SQL, params: [id] }));
      warm.close();
      const tb = new McpHttpClient(toolbox.url, { maxSockets: 1 });
      const probe = toolboxText(await tb.callTool(TOOLBOX_POINT_TOOL, { track_id: 42 }));
      const probeSql = toolboxText(await tb.callTool(TOOLBOX_SQL_TOOL, { sql: POINT_SQL.replace('$1', '42') }));
      tb.close();
      const want = ((await pool.query(POINT_SQL, [42])).rows[0] as { name: string }).name;
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
      };
      const ledger = new CpuLedger();
      const toolboxRun = (c: number, tool: string, args: () => Record<string, unknown>) => {
        const client = new McpHttpClient(toolbox.url, { maxSockets: c });
        return closedLoop({ concurrency: c, durationMs, warmupMs, op: async () => void toolboxText(await client.callTool(tool, args())) }).finally(() => client.close());
      };
      const sides: Side[] = [
        { name: 'direct', run: (c) => ledger.metered(meters.direct, 'direct', c, () => runDirectPointReads(pool, c, { durationMs, warmupMs })) },
        { name: 'interlock', run: (c) => ledger.metered(meters.interlock, 'interlock', c, () => runGatewayPointReads([uncached[0].url], env.apiKey, c, { durationMs, warmupMs })) },
        { name: 'interlock-cached', run: (c) => ledger.metered(meters['interlock-cached'], 'interlock-cached', c, () => runGatewayPointReads([cached.url], env.apiKey, c, { durationMs, warmupMs, hot: 64, expectCached: true })) },
        { name: 'interlock-x2', run: (c) => ledger.metered(meters['interlock-x2'], 'interlock-x2', c, () => runGatewayPointReads(uncached.map((g) => g.url), env.apiKey, c, { durationMs, warmupMs })) },
        { name: 'toolbox-sql', run: (c) => ledger.metered(meters['toolbox-sql'], 'toolbox-sql', c, () => toolboxRun(c, TOOLBOX_POINT_TOOL, () => ({ track_id: trackId() }))) },
        { name: 'toolbox-exec', run: (c) => ledger.metered(meters['toolbox-exec'], 'toolbox-exec', c, () => toolboxRun(c, TOOLBOX_SQL_TOOL, () => ({ sql: POINT_SQL.replace('$1', String(trackId())) }))) },
      ];
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
