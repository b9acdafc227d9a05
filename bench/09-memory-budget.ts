/**
 * Scenario 8 (issue 10): memory per call under the production byte budget. Peak RSS growth of the
 * gateway process above its idle RSS (bench/lib/memory.ts: VmHWM reset before the call) for
 *  - one call whose single value is 300 MB (`SELECT repeat('x', $1::int)`, $1 = 300,000,000): the
 *    wire budget refuses it (`result_too_large`) before pg buffers or decodes the row;
 *  - a 100,000-row read (scenario 5's statement, all 100,000 rows asked for): the read stops at the
 *    budget and answers the rows that fit, `truncated: true`.
 * Same run, same statements, the baseline is `pg` directly in its own process
 * (bench/lib/pg-direct-child.ts, every row kept as pool.query would), so the ratio shows what the
 * budget saves. The gateway child is bench/lib/gateway-harness.ts with the tool's row cap lifted to
 * 100,000 and the production 4 MiB result byte cap kept (BENCH_MAX_RESULT_BYTES).
 * The first call of each kind in the fresh processes is reported apart ("cold": it also commits
 * V8's young generation, which the process then keeps), then BENCH_MEMORY_RUNS warm calls
 * (default 2). Target (issue 10): each at most 64 MB above idle.
 * The gateway child runs with the node flags production uses (none; `--expose-gc` is the bench's
 * own, for the collection before each idle reading); BENCH_GATEWAY_NODE_FLAGS adds others (e.g.
 * `--max-semi-space-size=4`), BENCH_MEMORY_PREWARM=N sends N point reads before the first measured
 * call (a gateway that has served traffic).
 * Run: `npx tsx bench/09-memory-budget.ts`.
 */
import { McpHttpClient, type PostResult } from './lib/http';
import { emitResult, envInt, machineLine, round, summarize, table } from './lib/stats';
import { gatewayVars, startTsChild, withBenchEnv } from './lib/env';
import { LARGE_ROWS, LARGE_SQL, measure, type Measured } from './lib/memory';
import { POINT_SQL } from './lib/point-read';

/** The 300 MB value. */
const HUGE_SQL = "SELECT repeat('x', $1::int) AS v";
const HUGE_CHARS = 300_000_000;
/** The production result byte cap (JSON of the rows). */
const BUDGET_BYTES = 4 * 1024 * 1024;
/** Target: 64 MB. */
const TARGET_BYTES = 64e6;

/** The tool result's structuredContent, refusals included (this scenario measures refusals too). */
function answer(r: PostResult): Record<string, unknown> {
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${r.text.slice(0, 300)}`);
  const msg = JSON.parse(r.text) as { result?: { structuredContent?: Record<string, unknown> } };
  return msg.result?.structuredContent ?? {};
}

async function main(): Promise<void> {
  const runs = envInt('BENCH_MEMORY_RUNS', 2);
  console.log('# 8-memory-budget: peak RSS growth above idle for one 300 MB value and a 100,000-row read (gateway vs pg direct)');
  console.log(machineLine());
  await withBenchEnv({ sourceSettings: { max_rows: LARGE_ROWS, statement_timeout_ms: 120_000 } }, async (env) => {
    const gwFlags = (process.env.BENCH_GATEWAY_NODE_FLAGS ?? '').split(' ').filter(Boolean);
    console.log(`gateway node flags: ${gwFlags.join(' ') || '(none)'}`);
    const gw = await startTsChild('bench/lib/gateway-harness.ts', { ...gatewayVars(env.controlUrl, { cacheTtlMs: 1 }), BENCH_MAX_ROWS: String(LARGE_ROWS), BENCH_MAX_RESULT_BYTES: String(BUDGET_BYTES) }, [...gwFlags, '--expose-gc']);
    const direct = await startTsChild('bench/lib/pg-direct-child.ts', { BENCH_PG_CONFIG: JSON.stringify(env.reader) }, ['--expose-gc']);
    const client = new McpHttpClient(gw.url, { apiKey: env.apiKey, maxSockets: 1 });
    try {
      for (let i = 0; i < 10; i++) {
        answer(await client.callTool('interlock_query', { source_id: 'chinook', sql: LARGE_SQL.replace('100000', '200'), max_rows: 1000 }));
        await direct.ask({ cmd: 'read', sql: LARGE_SQL.replace('100000', '200') });
      }
      // BENCH_MEMORY_PREWARM: point reads before the first measured call (a gateway that has served traffic).
      const prewarm = envInt('BENCH_MEMORY_PREWARM', 0);
      for (let i = 0; i < prewarm; i++) answer(await client.callTool('interlock_query', { source_id: 'chinook', sql: POINT_SQL, params: [1 + (i % 3503)] }));
      if (prewarm) console.log(`prewarm: ${prewarm} point reads`);
      const cases = [
        {
          name: '300 MB value',
          gateway: async () => {
            const r = await client.callTool('interlock_query', { source_id: 'chinook', sql: HUGE_SQL, params: [HUGE_CHARS] });
            const sc = answer(r);
            if (sc.code !== 'result_too_large') throw new Error(`expected result_too_large, got ${JSON.stringify(sc).slice(0, 200)}`);
            return { ttfbMs: r.ttfbMs, totalMs: r.totalMs, bytes: r.bytes };
          },
          direct: async () => {
            const r = (await direct.ask({ cmd: 'read', sql: HUGE_SQL, params: [HUGE_CHARS] })) as { ttfbMs: number; totalMs: number; rows: number; error?: string };
            if (r.error || r.rows !== 1) throw new Error(`pg direct: ${r.error ?? `${r.rows} rows`}`);
            return r;
          },
        },
        {
          name: '100,000-row read',
          gateway: async () => {
            const r = await client.callTool('interlock_query', { source_id: 'chinook', sql: LARGE_SQL, max_rows: LARGE_ROWS });
            const sc = answer(r);
            if (sc.truncated !== true || typeof sc.row_count !== 'number') throw new Error(`expected a truncated result, got ${JSON.stringify(sc).slice(0, 200)}`);
            return { ttfbMs: r.ttfbMs, totalMs: r.totalMs, bytes: r.bytes, rows: sc.row_count };
          },
          direct: async () => {
            const r = (await direct.ask({ cmd: 'read', sql: LARGE_SQL })) as { ttfbMs: number; totalMs: number; rows: number };
            if (r.rows !== LARGE_ROWS) throw new Error(`pg direct returned ${r.rows} rows`);
            return r;
          },
        },
      ];
      // The first call of each kind in a fresh process also grows V8's heap (its young generation
      // is committed once and kept): it is reported apart, as "cold", then `runs` warm calls.
      const results: Record<string, { gw: Measured[]; pg: Measured[]; coldGw?: Measured; coldPg?: Measured; rows?: number }> = {};
      for (const c of cases) {
        const rec: { gw: Measured[]; pg: Measured[]; coldGw?: Measured; coldPg?: Measured; rows?: number } = (results[c.name] = { gw: [], pg: [] });
        for (let i = 0; i <= runs; i++) {
          const order: Array<'gw' | 'pg'> = i % 2 === 0 ? ['gw', 'pg'] : ['pg', 'gw'];
          for (const side of order) {
            let rows: number | undefined;
            const m =
              side === 'gw'
                ? await measure(gw, async () => {
                    const r = await c.gateway();
                    rows = (r as { rows?: number }).rows;
                    return r;
                  })
                : await measure(direct, c.direct);
            if (side === 'gw' && rows !== undefined) rec.rows = rows;
            if (i === 0) {
              if (side === 'gw') rec.coldGw = m;
              else rec.coldPg = m;
            } else (side === 'gw' ? rec.gw : rec.pg).push(m);
            console.log(`  ${c.name} ${i === 0 ? 'cold call' : `warm run ${i}/${runs}`} ${side === 'gw' ? 'gateway' : 'pg direct'}: idle ${(m.idleKiB / 1024).toFixed(1)} MiB, peak +${m.growthMiB.toFixed(1)} MiB, total ${m.totalMs.toFixed(0)} ms`);
          }
        }
      }
      const worst = (xs: Measured[]) => Math.max(...xs.map((x) => x.growthMiB));
      const med = (xs: Measured[]) => summarize(xs.map((x) => x.growthMiB)).p50;
      const verdict = (mib: number) => (mib * 2 ** 20 <= TARGET_BYTES ? 'MET' : 'MISSED');
      console.log('');
      console.log(
        table(
          ['call', 'pg direct cold', 'gateway cold', 'pg direct warm (worst)', 'gateway warm (worst)', 'gateway/pg warm', 'gateway answer', '≤ 64 MB cold / warm'],
          Object.entries(results).map(([name, r]) => [
            name,
            `${r.coldPg!.growthMiB.toFixed(1)} MiB`,
            `${r.coldGw!.growthMiB.toFixed(1)} MiB`,
            `${worst(r.pg).toFixed(1)} MiB`,
            `${worst(r.gw).toFixed(1)} MiB`,
            `${(worst(r.gw) / worst(r.pg)).toFixed(3)}×`,
            name === '300 MB value' ? 'result_too_large' : `${r.rows ?? '?'} rows, truncated`,
            `${verdict(r.coldGw!.growthMiB)} / ${verdict(worst(r.gw))}`,
          ]),
        ),
      );
      emitResult('8-memory-budget', {
        budgetBytes: BUDGET_BYTES,
        cases: Object.fromEntries(
          Object.entries(results).map(([name, r]) => [
            name,
            {
              coldGatewayMiB: round(r.coldGw!.growthMiB, 1),
              coldDirectMiB: round(r.coldPg!.growthMiB, 1),
              gatewayGrowthMiB: r.gw.map((m) => round(m.growthMiB, 1)),
              directGrowthMiB: r.pg.map((m) => round(m.growthMiB, 1)),
              medianGatewayMiB: round(med(r.gw), 1),
              rows: r.rows,
            },
          ]),
        ),
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
