/**
 * Shared arithmetic and reporting for the bench scripts: latency summaries, the machine line
 * (cores, memory, load), fixed-width tables and the one machine-readable result line each scenario
 * prints (`BENCH_RESULT {...}`), which `bench/run-all.ts` collects.
 */
import os from 'node:os';

/** Latency summary; every time is in milliseconds unless the field name says otherwise. */
export interface Summary {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  mean: number;
  max: number;
}

/** The `p`-quantile (0..1) of an ascending array by the nearest-rank method; 0 for an empty array. */
export function quantile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1));
  return sorted[i];
}

/** n, p50, p90, p99, mean and max of `samples` (any unit; the caller's). Does not modify `samples`. */
export function summarize(samples: ArrayLike<number>): Summary {
  const s = Float64Array.from(samples as ArrayLike<number>).sort();
  let sum = 0;
  for (let i = 0; i < s.length; i++) sum += s[i];
  return { n: s.length, p50: quantile(s, 0.5), p90: quantile(s, 0.9), p99: quantile(s, 0.99), mean: s.length ? sum / s.length : 0, max: s.length ? s[s.length - 1] : 0 };
}

/** The machine as the report states it: logical cores, CPU model, memory, load averages, Node. */
export interface MachineInfo {
  cores: number;
  cpuModel: string;
  memoryGiB: number;
  loadavg: [number, number, number];
  node: string;
  platform: string;
}

/** Reads the machine facts once (load averages are sampled at the call). */
export function machineInfo(): MachineInfo {
  const cpus = os.cpus();
  const la = os.loadavg();
  return {
    cores: typeof os.availableParallelism === 'function' ? os.availableParallelism() : cpus.length,
    cpuModel: cpus[0]?.model?.trim() ?? 'unknown',
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    loadavg: [round(la[0], 2), round(la[1], 2), round(la[2], 2)],
    node: process.version,
    platform: `${os.platform()} ${os.release()}`,
  };
}

/** One line describing the machine, printed at the top of every scenario. */
export function machineLine(m: MachineInfo = machineInfo()): string {
  return `machine: ${m.cores} cores (${m.cpuModel}), ${m.memoryGiB} GiB, load average ${m.loadavg.join(' / ')} (1/5/15 min), node ${m.node}`;
}

/** Rounds to `digits` decimals. */
export function round(x: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/** Formats a ratio as e.g. "0.62×". */
export function ratio(x: number): string {
  return Number.isFinite(x) ? `${x.toFixed(2)}×` : 'n/a';
}

/** Renders rows (arrays of cells) as a fixed-width table with a header row and a rule. */
export function table(header: string[], rows: Array<Array<string | number>>): string {
  const cells = [header, ...rows.map((r) => r.map((c) => (typeof c === 'number' ? String(c) : c)))];
  const widths = header.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  return [line(cells[0]), widths.map((w) => '-'.repeat(w)).join('  '), ...cells.slice(1).map(line)].join('\n');
}

/** Prefix of the machine-readable result line. */
export const RESULT_PREFIX = 'BENCH_RESULT ';

/**
 * Prints the scenario's machine-readable result as one line (`BENCH_RESULT {json}`) after its
 * human-readable output; `bench/run-all.ts` collects these lines.
 */
export function emitResult(scenario: string, data: Record<string, unknown>): void {
  process.stdout.write(`${RESULT_PREFIX}${JSON.stringify({ scenario, machine: machineInfo(), at: new Date().toISOString(), ...data })}\n`);
}

/** Milliseconds from an environment variable (seconds), or the default. */
export function envSeconds(name: string, defaultSeconds: number): number {
  const v = Number(process.env[name]);
  return (Number.isFinite(v) && v > 0 ? v : defaultSeconds) * 1000;
}

/** A positive integer from an environment variable, or the default. */
export function envInt(name: string, dflt: number): number {
  const v = Number(process.env[name]);
  return Number.isInteger(v) && v > 0 ? v : dflt;
}

/** Concurrency levels from BENCH_CONCURRENCY ("1,8,32"), or the default list. */
export function concurrencyLevels(dflt: number[] = [1, 8, 32]): number[] {
  const raw = process.env.BENCH_CONCURRENCY;
  if (!raw) return dflt;
  const xs = raw.split(',').map((s) => Number(s.trim())).filter((n) => Number.isInteger(n) && n > 0);
  return xs.length ? xs : dflt;
}

/** Runs a bench script's `main`: exit code 0 when it resolves, 1 (with the error printed) when it rejects. */
export function runBench(main: () => Promise<void>): void {
  main().then(
    () => process.exit(0),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}

/** Median of the finite values of `xs` (the mean of the middle two for an even count); NaN when there are none. */
export function median(xs: number[]): number {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  if (!s.length) return NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}
