/**
 * `npm run bench`: runs every scenario script of bench/ in turn, each in its own process (so one
 * scenario's heap, JIT state and children cannot skew the next), streams their output, collects
 * their `BENCH_RESULT` lines, and prints a summary of the figures against the targets.
 * Arguments select scenarios by number (`npm run bench -- 1 3`). Each scenario is killed after
 * BENCH_SCENARIO_TIMEOUT seconds (default 900). BENCH_JSON_OUT=path writes the collected results.
 */
import { spawn } from 'node:child_process';
import { readdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { machineLine, RESULT_PREFIX, table } from './lib/stats';

/** Runs one scenario script; resolves to its exit code and result objects. */
function runScenario(file: string, timeoutMs: number): Promise<{ code: number | null; results: Array<Record<string, unknown>>; ms: number }> {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const child = spawn(process.execPath, ['-r', 'tsx/cjs', file], { cwd: path.resolve(__dirname, '..'), stdio: ['ignore', 'pipe', 'inherit'], env: process.env });
    const results: Array<Record<string, unknown>> = [];
    let buf = '';
    child.stdout.on('data', (c: Buffer) => {
      buf += c.toString();
      let i: number;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.startsWith(RESULT_PREFIX)) results.push(JSON.parse(line.slice(RESULT_PREFIX.length)) as Record<string, unknown>);
        else process.stdout.write(`${line}\n`);
      }
    });
    const timer = setTimeout(() => {
      process.stdout.write(`!! ${path.basename(file)} exceeded ${timeoutMs / 1000} s; stopping it\n`);
      child.kill('SIGTERM');
      setTimeout(() => child.kill('SIGKILL'), 15_000).unref();
    }, timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, results, ms: Date.now() - t0 });
    });
  });
}

type Row = Record<string, unknown>;
const num = (x: unknown): number => (typeof x === 'number' ? x : NaN);
const fx = (x: number, d = 2): string => (Number.isFinite(x) ? x.toFixed(d) : 'n/a');
const verdict = (ok: boolean | null): string => (ok === null ? 'n/a' : ok ? 'MET' : 'MISSED');

/** The summary lines (figure, value, target, verdict) of the collected results. */
export function summaryRows(results: Row[]): string[][] {
  const out: string[][] = [];
  const by = new Map(results.map((r) => [String(r.scenario), r]));
  const pr = by.get('1-point-read');
  if (pr) {
    for (const r of pr.rows as Row[]) out.push([`1 uncached point read c=${r.concurrency}`, `${fx(num(r.throughput_ratio))}× pg; +p50 ${fx(num(r.added_p50_ms))} ms`, r.concurrency === 32 ? '≥ 0.5×; +p50 ≤ 1 ms' : '', r.concurrency === 32 ? verdict(num(r.throughput_ratio) >= 0.5 && num(r.added_p50_ms) <= 1) : '']);
    for (const r of (pr.asyncCommitRows as Row[] | undefined) ?? []) out.push([`1 (diag.) async-commit control DB c=${r.concurrency}`, `${fx(num(r.throughput_ratio))}× pg; +p50 ${fx(num(r.added_p50_ms))} ms`, '-', '']);
  }
  const cr = by.get('2-cached-read');
  if (cr) {
    for (const r of cr.rows as Row[]) out.push([`2 cached point read c=${r.concurrency}`, `${fx(num(r.throughput_ratio))}× pg; +p50 ${fx(num(r.added_p50_ms))} ms`, r.concurrency === 32 ? '≥ 1.5×' : '', r.concurrency === 32 ? verdict(num(r.throughput_ratio) >= 1.5) : '']);
    for (const r of (cr.cachedAggregateRows as Row[] | undefined) ?? []) out.push([`2 (diag.) cached aggregate c=${r.concurrency}`, `${fx(num(r.throughput_ratio))}× pg`, '-', '']);
  }
  const tl = by.get('3-tools-list');
  if (tl) {
    const d = tl.dialects as Record<string, { rows: Row[] }>;
    for (const [dialect, v] of Object.entries(d)) {
      const ratios = v.rows.map((r) => r.throughput_ratio).filter((x): x is number => typeof x === 'number');
      const min = ratios.length ? Math.min(...ratios) : NaN;
      out.push([`3 tools/list (${dialect})`, tl.sdkSkipped ? 'SDK side skipped' : `${fx(min)}× SDK v2 (lowest over concurrencies)`, '≥ 1.0×', tl.sdkSkipped ? 'n/a' : verdict(min >= 1)]);
    }
  }
  const gv = by.get('4-governance');
  if (gv) {
    const us = gv.us as Record<string, { p50: number; p99: number }>;
    out.push(['4 governance per statement', `p50 ${fx(us.total.p50, 1)} µs, p99 ${fx(us.total.p99, 1)} µs (${fx(num(gv.ratioP50))}× bare parse)`, 'p50 ≤ 150 µs', verdict(us.total.p50 <= 150)]);
  }
  const lr = by.get('5-large-result');
  if (lr) {
    const g = lr.medianGrowthMiB as { gateway: number; direct: number };
    out.push(['5 100k rows peak RSS growth', `${fx(g.gateway, 1)} MiB (pg direct ${fx(g.direct, 1)} MiB)`, '≤ 64 MB', verdict(g.gateway * 2 ** 20 <= 64e6)]);
  }
  const ds = by.get('6-discovery');
  if (ds) {
    const ms = ds.ms as Record<string, { p50: number; p99: number }>;
    const ra = ds.ratios as Record<string, number>;
    out.push(['6 interlock_discover, no filters', `p50 ${fx(ms.mcp.p50)} ms, p99 ${fx(ms.mcp.p99)} ms (${fx(ra.mcpOverRawFts)}× raw FTS)`, '-', '']);
    out.push(['6 interlock_discover, filters', `p50 ${fx(ms.mcpFiltered.p50)} ms, p99 ${fx(ms.mcpFiltered.p99)} ms (${fx(ra.filteredMcpOverRawFts)}× raw FTS)`, '-', '']);
  }
  const so = by.get('7-scale-out');
  if (so) {
    for (const mode of ['uncached', 'cached']) {
      const m = so[mode] as { rows: Row[] } | undefined;
      if (m) out.push([`7 scale-out (${mode})`, m.rows.map((r) => `${r.processes}p ${fx(num(r.ratio_to_one))}×`).join(', '), '-', '']);
    }
  }
  const tb = by.get('8-toolbox');
  if (tb) {
    const cpu = tb.cpuMsPerCall as Record<string, Record<string, Record<string, number>>>;
    for (const r of tb.rows as Row[]) {
      const c = String(r.concurrency);
      out.push([`8 point read vs Toolbox postgres-sql c=${c}`, `${fx(num(r.il_vs_toolbox_sql))}×`, '≥ 1.0×', verdict(num(r.il_vs_toolbox_sql) >= 1)]);
      out.push([`8 point read vs Toolbox execute-sql c=${c}`, `${fx(num(r.il_vs_toolbox_exec))}×`, '≥ 1.5×', verdict(num(r.il_vs_toolbox_exec) >= 1.5)]);
      out.push([`8 cached point read vs pg c=${c}`, `${fx(num(r.cached_vs_direct))}×`, '≥ 1.0×', verdict(num(r.cached_vs_direct) >= 1)]);
      out.push([`8 two gateway processes vs one c=${c}`, `${fx(num(r.x2_vs_x1))}×`, '≥ 1.0×', verdict(num(r.x2_vs_x1) >= 1)]);
      if (c === '8') {
        const il = cpu[c]?.interlock ?? {};
        out.push(['8 gateway CPU per call c=8', `${fx(num(il.gateway) * 1000, 0)} µs`, '≤ 150 µs', verdict(num(il.gateway) * 1000 <= 150)]);
        out.push(['8 control-DB CPU per call c=8', `${fx(num(il.controlDb) * 1000, 0)} µs`, '≤ 30 µs', verdict(num(il.controlDb) * 1000 <= 30)]);
      }
    }
    const tl8 = tb.toolsList as { ratio: number };
    out.push(['8 tools/list vs Toolbox c=8', `${fx(tl8.ratio)}×`, '≥ 1.0×', verdict(tl8.ratio >= 1)]);
  }
  const rr = by.get('12-row-rules');
  if (rr) {
    for (const r of rr.rows as Row[]) out.push([`12 ruled point read vs unruled c=${r.concurrency}`, `${fx(num(r.ratio))}×; p50 ${fx(num(r.ruled_p50_ms))} vs ${fx(num(r.unruled_p50_ms))} ms`, '≥ 0.9×', verdict(num(r.ratio) >= 0.9)]);
  }
  return out;
}

async function main(): Promise<void> {
  const dir = __dirname;
  const wanted = process.argv.slice(2).map((a) => a.replace(/^0*/, ''));
  const files = readdirSync(dir)
    .filter((f) => /^\d\d-.*\.ts$/.test(f))
    .sort()
    .filter((f) => wanted.length === 0 || wanted.includes(f.slice(0, 2).replace(/^0*/, '')));
  const timeoutMs = (Number(process.env.BENCH_SCENARIO_TIMEOUT) || 900) * 1000;
  console.log(`InterLock bench — ${new Date().toISOString()}`);
  console.log(machineLine());
  console.log(`scenarios: ${files.join(', ')}\n`);
  const all: Row[] = [];
  const failed: string[] = [];
  for (const f of files) {
    console.log(`\n======== ${f} (load average ${os.loadavg().map((x) => x.toFixed(2)).join(' / ')}) ========`);
    const r = await runScenario(path.join(dir, f), timeoutMs);
    console.log(`-------- ${f}: exit ${r.code} after ${(r.ms / 1000).toFixed(0)} s`);
    if (r.code !== 0) failed.push(f);
    all.push(...r.results);
  }
  console.log('\n======== summary ========');
  console.log(machineLine());
  console.log(table(['figure', 'measured (ratio to the same-run baseline)', 'target', 'verdict'], summaryRows(all)));
  if (failed.length) console.log(`failed scenarios: ${failed.join(', ')}`);
  if (process.env.BENCH_JSON_OUT) writeFileSync(process.env.BENCH_JSON_OUT, JSON.stringify(all, null, 2));
  process.exit(failed.length ? 1 : 0);
}

if (require.main === module) void main();
