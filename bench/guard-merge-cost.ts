/**
 * What sending the function guard and the hierarchy guard as one statement would save (issue 28,
 * task h28f), in process on one pooled reader connection: the point read
 * `SELECT … FROM customer WHERE customer_id = $1` with its real guards (the connector's
 * `functionGuard` of its analysis: `=`; hierarchy.ts `standaloneGuard` of `customer`), variants
 * alternating per round:
 *  - apart: the two guards as two statements before the statement (what a read sends);
 *  - merged: the same two as one statement (the function guard's text, UNION ALL, the hierarchy
 *    guard's with its parameters renumbered after the function guard's; sent as the read's only
 *    guard): one Bind/Execute and CommandComplete fewer;
 *  - none: no guard (the statement alone).
 * Prints per round the wall µs per read and the source backend's CPU µs per read (/proc of the
 * connection's backend, user + system), and the medians. Run: `npx tsx bench/guard-merge-cost.ts [rounds] [reads]`.
 */
import { standaloneGuard } from '../src/sources/postgres/hierarchy';
import type { ReadGuard } from '../src/sources/postgres/portal-read';
import { initSqlParser } from '../src/sql/parser';
import { procCpuSplitMs } from './lib/cpu';
import { openGuardBench } from './lib/guard-bench';
import { runBench } from './lib/stats';

async function main(): Promise<void> {
  await initSqlParser();
  const rounds = Number(process.argv[2] ?? 6);
  const reads = Number(process.argv[3] ?? 2000);
  const { src, c, sql, fn } = await openGuardBench('gmerge_bench');
  try {
    const hier = standaloneGuard([{ schema: 'public', name: 'customer' }]);
    const offset = fn.values.length;
    const merged: ReadGuard = { text: `${fn.text}\nUNION ALL\n${hier.text.replace(/\$([0-9]+)/g, (_, k: string) => `$${Number(k) + offset}`)}`, values: [...fn.values, ...hier.values] };
    const opts = { maxRows: 100, maxBytes: 1_000_000 };
    const backend = Number((await c.read('SELECT pg_catalog.pg_backend_pid()', [], opts)).rowsArray[0][0]);
    const cpu = () => {
      const x = procCpuSplitMs(backend);
      return x.user + x.system;
    };
    const variants: Record<string, { functionGuard?: ReadGuard; guard?: ReadGuard }> = { merged: { functionGuard: merged }, apart: { functionGuard: fn, guard: hier }, none: {} };
    const run = async (v: string): Promise<[number, number]> => {
      const c0 = cpu();
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < reads; i++) {
        const r = await c.read(sql, [1 + (i % 59)], { ...opts, ...variants[v] });
        if (r.functionsChanged || r.guardTripped || r.rowsArray.length !== 1) throw new Error('unexpected read');
      }
      return [Number(process.hrtime.bigint() - t0) / 1000 / reads, ((cpu() - c0) * 1000) / reads];
    };
    for (const v of Object.keys(variants)) await run(v);
    const got: Record<string, Array<[number, number]>> = { merged: [], apart: [], none: [] };
    for (let k = 0; k < rounds; k++) for (const v of Object.keys(variants)) got[v].push(await run(v));
    const med = (xs: number[]): number => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
    for (const v of Object.keys(variants)) {
      console.log(`${v.padEnd(6)} wall µs/read ${got[v].map((x) => x[0].toFixed(1)).join(' ')}; backend CPU µs/read ${got[v].map((x) => x[1].toFixed(1)).join(' ')}; medians ${med(got[v].map((x) => x[0])).toFixed(1)} / ${med(got[v].map((x) => x[1])).toFixed(1)}`);
    }
    const pair = (i: 0 | 1) => got.merged.map((m, k) => m[i] / got.apart[k][i]);
    console.log(`merged ÷ apart per round: wall ${pair(0).map((x) => x.toFixed(3)).join(' ')}; backend CPU ${pair(1).map((x) => x.toFixed(3)).join(' ')}`);
  } finally {
    await c.close();
    await src.drop();
  }
}

runBench(main);
