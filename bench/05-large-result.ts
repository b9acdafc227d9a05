/**
 * Scenario 5: a 100,000-row read. interlock_query through POST /mcp on a gateway child
 * (bench/lib/gateway-harness.ts: production pipeline, with the tool's 10,000-row schema maximum and
 * the 4 MiB result byte cap lifted for this read; the source's own max_rows set to 100,000) vs the
 * same statement with `pg` directly in a child process (bench/lib/pg-direct-child.ts). For each
 * side: peak RSS growth of that process above its idle RSS (Linux VmHWM, reset through
 * /proc/PID/clear_refs just before the read; idle = RSS after a full GC), time to first byte (the
 * gateway: response head at the client; pg: first row) and total time. Runs alternate sides.
 * Run: `npx tsx bench/05-large-result.ts`.
 */
import { McpHttpClient, structuredResult } from './lib/http';
import { emitResult, envInt, machineLine, round, summarize, table } from './lib/stats';
import { gatewayVars, startTsChild, withBenchEnv } from './lib/env';
import { LARGE_ROWS, LARGE_SQL, measure, type Measured } from './lib/memory';


async function main(): Promise<void> {
  const runs = envInt('BENCH_LARGE_RUNS', 3);
  console.log('# 5-large-result: 100,000-row read through /mcp vs pg direct: peak RSS growth and time to first byte');
  console.log(machineLine());
  console.log(`statement: ${LARGE_SQL}`);
  await withBenchEnv({ sourceSettings: { max_rows: LARGE_ROWS } }, async (env) => {
    // Cache time to live 1 ms: the read is a miss (its result is still stored, as for any miss).
    const gw = await startTsChild('bench/lib/gateway-harness.ts', { ...gatewayVars(env.controlUrl, { cacheTtlMs: 1 }), BENCH_MAX_ROWS: String(LARGE_ROWS) }, ['--expose-gc']);
    const direct = await startTsChild('bench/lib/pg-direct-child.ts', { BENCH_PG_CONFIG: JSON.stringify(env.reader) }, ['--expose-gc']);
    const client = new McpHttpClient(gw.url, { apiKey: env.apiKey, maxSockets: 1 });
    try {
      // Warm both processes on small reads of the same shape.
      for (let i = 0; i < 20; i++) {
        structuredResult(await client.callTool('interlock_query', { source_id: 'chinook', sql: LARGE_SQL.replace('100000', '200'), max_rows: 1000 }));
        await direct.ask({ cmd: 'read', sql: LARGE_SQL.replace('100000', '200') });
      }
      const gwRuns: Measured[] = [];
      const pgRuns: Measured[] = [];
      const viaGateway = async () => {
        const r = await client.callTool('interlock_query', { source_id: 'chinook', sql: LARGE_SQL, max_rows: LARGE_ROWS });
        const sc = structuredResult(r);
        if (sc.row_count !== LARGE_ROWS || sc.truncated !== false) throw new Error(`expected ${LARGE_ROWS} rows untruncated, got row_count ${String(sc.row_count)} truncated ${String(sc.truncated)}`);
        return { ttfbMs: r.ttfbMs, totalMs: r.totalMs, bytes: r.bytes };
      };
      const viaPg = async () => {
        const r = (await direct.ask({ cmd: 'read', sql: LARGE_SQL })) as { ttfbMs: number; totalMs: number; rows: number };
        if (r.rows !== LARGE_ROWS) throw new Error(`pg direct returned ${r.rows} rows`);
        return r;
      };
      for (let i = 0; i < runs; i++) {
        const order: Array<'gw' | 'pg'> = i % 2 === 0 ? ['gw', 'pg'] : ['pg', 'gw'];
        for (const side of order) {
          const m = side === 'gw' ? await measure(gw, viaGateway) : await measure(direct, viaPg);
          (side === 'gw' ? gwRuns : pgRuns).push(m);
          console.log(`  run ${i + 1}/${runs} ${side === 'gw' ? 'gateway' : 'pg direct'}: idle ${(m.idleKiB / 1024).toFixed(1)} MiB, peak ${(m.peakKiB / 1024).toFixed(1)} MiB (+${m.growthMiB.toFixed(1)} MiB; sampled peak ${(m.sampledPeakKiB / 1024).toFixed(1)} MiB), TTFB ${m.ttfbMs.toFixed(0)} ms, total ${m.totalMs.toFixed(0)} ms${m.bytes ? `, ${(m.bytes / 2 ** 20).toFixed(1)} MiB on the wire` : ''}`);
        }
      }
      const med = (xs: Measured[], k: 'growthMiB' | 'ttfbMs' | 'totalMs') => summarize(xs.map((x) => x[k])).p50;
      const maxGrowth = (xs: Measured[]) => Math.max(...xs.map((x) => x.growthMiB));
      const rows = [
        ['peak RSS growth (median of runs)', `${med(pgRuns, 'growthMiB').toFixed(1)} MiB`, `${med(gwRuns, 'growthMiB').toFixed(1)} MiB`, `${(med(gwRuns, 'growthMiB') / med(pgRuns, 'growthMiB')).toFixed(2)}×`],
        ['peak RSS growth (worst run)', `${maxGrowth(pgRuns).toFixed(1)} MiB`, `${maxGrowth(gwRuns).toFixed(1)} MiB`, `${(maxGrowth(gwRuns) / maxGrowth(pgRuns)).toFixed(2)}×`],
        ['time to first byte (median)', `${med(pgRuns, 'ttfbMs').toFixed(0)} ms`, `${med(gwRuns, 'ttfbMs').toFixed(0)} ms`, `${(med(gwRuns, 'ttfbMs') / med(pgRuns, 'ttfbMs')).toFixed(1)}×`],
        ['total time (median)', `${med(pgRuns, 'totalMs').toFixed(0)} ms`, `${med(gwRuns, 'totalMs').toFixed(0)} ms`, `${(med(gwRuns, 'totalMs') / med(pgRuns, 'totalMs')).toFixed(2)}×`],
      ];
      console.log('');
      console.log(table(['', 'pg direct', 'gateway', 'gateway/pg'], rows));
      const g = med(gwRuns, 'growthMiB');
      console.log(`target peak RSS growth ≤ 64 MB (61.0 MiB) above idle: median ${g.toFixed(1)} MiB → ${g * 2 ** 20 <= 64e6 ? 'MET' : 'MISSED'}`);
      emitResult('5-large-result', {
        rows: LARGE_ROWS,
        sql: LARGE_SQL,
        responseBytes: gwRuns[0]?.bytes,
        gateway: gwRuns.map((m) => ({ idleMiB: round(m.idleKiB / 1024, 1), peakMiB: round(m.peakKiB / 1024, 1), growthMiB: round(m.growthMiB, 1), ttfbMs: round(m.ttfbMs, 0), totalMs: round(m.totalMs, 0) })),
        direct: pgRuns.map((m) => ({ idleMiB: round(m.idleKiB / 1024, 1), peakMiB: round(m.peakKiB / 1024, 1), growthMiB: round(m.growthMiB, 1), ttfbMs: round(m.ttfbMs, 0), totalMs: round(m.totalMs, 0) })),
        medianGrowthMiB: { gateway: round(g, 1), direct: round(med(pgRuns, 'growthMiB'), 1) },
      });
    } finally {
      client.close();
      await gw.stop();
      await direct.stop();
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
