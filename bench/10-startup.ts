/**
 * Scenario 10 (issue 13, "Ship compiled JavaScript for serve and demo"): start-up time of
 * `interlock serve`, from spawn to its "listening on" line, with the compiled tree in dist/ against
 * the TypeScript sources through tsx (INTERLOCK_RUNTIME=source; tsx's transform cache warm, as after
 * the first start). Same run, sides alternating, BENCH_STARTS starts each (default 6); the ratio is
 * compiled / source. Needs an up-to-date dist/ (`npm run build`; npm ci makes it).
 * Run: `npx tsx bench/10-startup.ts`.
 */
import { emitResult, envInt, machineLine, round, summarize, table } from './lib/stats';
import { gatewayVars, startServe, withBenchEnv } from './lib/env';

async function timeStart(vars: Record<string, string>): Promise<number> {
  const t0 = process.hrtime.bigint();
  const child = await startServe(vars);
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  await child.stop();
  return ms;
}

async function main(): Promise<void> {
  const starts = envInt('BENCH_STARTS', 6);
  console.log('# 10-startup: interlock serve, spawn to listening, compiled dist/ vs sources through tsx');
  console.log(machineLine());
  await withBenchEnv({}, async (env) => {
    const base = gatewayVars(env.controlUrl);
    const sides = { compiled: { ...base, INTERLOCK_RUNTIME: 'compiled' }, source: { ...base, INTERLOCK_RUNTIME: 'source' } };
    // One untimed start each: tsx fills its transform cache, the OS its page cache.
    await timeStart(sides.source);
    await timeStart(sides.compiled);
    const ms: Record<'compiled' | 'source', number[]> = { compiled: [], source: [] };
    for (let i = 0; i < starts; i++) {
      const order: Array<'compiled' | 'source'> = i % 2 ? ['source', 'compiled'] : ['compiled', 'source'];
      for (const side of order) ms[side].push(await timeStart(sides[side]));
    }
    const c = summarize(ms.compiled);
    const s = summarize(ms.source);
    console.log(
      table(
        ['runtime', 'starts', 'p50 ms', 'min ms', 'max ms'],
        [
          ['compiled (dist/)', starts, round(c.p50, 0), round(Math.min(...ms.compiled), 0), round(c.max, 0)],
          ['sources (tsx)', starts, round(s.p50, 0), round(Math.min(...ms.source), 0), round(s.max, 0)],
        ],
      ),
    );
    console.log(`compiled / source (p50): ${round(c.p50 / s.p50, 2)}×`);
    emitResult('10-startup', { starts, compiledMs: ms.compiled, sourceMs: ms.source, ratioP50: c.p50 / s.p50 });
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
