/**
 * Closed-loop load: `concurrency` workers each issue one operation, wait for it, and issue the
 * next, for a fixed time after an untimed warm-up. Sides of a comparison (the gateway and its
 * baseline) are run alternately, round after round, at the same concurrency, so drift in the
 * machine's load hits both; the rounds are then pooled.
 */
import { performance } from 'node:perf_hooks';
import { summarize, type Summary } from './stats';

/** One timed run. Latencies in milliseconds. */
export interface LoadRun {
  concurrency: number;
  ops: number;
  errors: number;
  firstError?: string;
  elapsedMs: number;
  /** Operations finished including the warm-up (for per-operation CPU over the whole run). */
  allOps: number;
  /** Per-operation latencies of the timed window. */
  samples: Float64Array;
}

/** Pooled figures of one side at one concurrency. */
export interface LoadFigures {
  concurrency: number;
  ops: number;
  errors: number;
  /** Operations per second. */
  throughput: number;
  latency: Summary;
}

/**
 * Runs `op` closed-loop: `concurrency` workers, `warmupMs` untimed, then `durationMs` timed.
 * Operations started inside the timed window are counted; the window ends when the last of them
 * has finished. `op` must throw on a wrong answer; more than 1% failures (or any failure when
 * `strict`) rejects with the first error.
 */
export async function closedLoop(opts: { concurrency: number; durationMs: number; warmupMs: number; op: (worker: number) => Promise<unknown>; strict?: boolean }): Promise<LoadRun> {
  const { concurrency, durationMs, warmupMs, op } = opts;
  const t0 = performance.now();
  const warmEnd = t0 + warmupMs;
  const end = warmEnd + durationMs;
  let cap = 1 << 16;
  let samples = new Float64Array(cap);
  let n = 0;
  let errors = 0;
  let firstError: string | undefined;
  let startedTimed = 0;
  let allOps = 0;
  const worker = async (w: number) => {
    for (;;) {
      const s = performance.now();
      if (s >= end) return;
      const timed = s >= warmEnd;
      if (timed) startedTimed++;
      try {
        await op(w);
      } catch (err) {
        if (timed) errors++;
        firstError ??= err instanceof Error ? err.message : String(err);
        if (!timed && warmupMs > 0) throw err; // a warm-up failure means the setup is wrong
        continue;
      }
      allOps++;
      if (!timed) continue;
      if (n === cap) {
        cap *= 2;
        const next = new Float64Array(cap);
        next.set(samples);
        samples = next;
      }
      samples[n++] = performance.now() - s;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  const elapsedMs = Math.max(performance.now(), end) - warmEnd;
  if (errors > 0 && (opts.strict || errors > 0.01 * startedTimed)) throw new Error(`${errors} of ${startedTimed} operations failed; first: ${firstError}`);
  return { concurrency, ops: n, errors, firstError, elapsedMs, allOps, samples: samples.subarray(0, n) };
}

/** Pools several runs at the same concurrency (sums operations and time; merges latencies). */
export function pool(runs: LoadRun[]): LoadFigures {
  const ops = runs.reduce((a, r) => a + r.ops, 0);
  const ms = runs.reduce((a, r) => a + r.elapsedMs, 0);
  const all = new Float64Array(ops);
  let k = 0;
  for (const r of runs) {
    all.set(r.samples, k);
    k += r.samples.length;
  }
  return { concurrency: runs[0]?.concurrency ?? 0, ops, errors: runs.reduce((a, r) => a + r.errors, 0), throughput: ms > 0 ? (ops * 1000) / ms : 0, latency: summarize(all) };
}

/** A side of a comparison: a name and how to run it at a concurrency. */
export interface Side {
  name: string;
  run(concurrency: number): Promise<LoadRun>;
}

/**
 * Runs every side at every concurrency, `rounds` times, alternating sides within each
 * (concurrency, round) pair and swapping which side goes first each round. Returns pooled
 * figures by side name and concurrency. `log` receives one line per run.
 */
export async function interleave(sides: Side[], levels: number[], rounds: number, log: (line: string) => void = () => undefined): Promise<Map<string, Map<number, LoadFigures>>> {
  const runs = new Map<string, Map<number, LoadRun[]>>(sides.map((s) => [s.name, new Map(levels.map((c) => [c, [] as LoadRun[]]))]));
  for (let r = 0; r < rounds; r++) {
    for (const c of levels) {
      const order = r % 2 === 0 ? sides : [...sides].reverse();
      for (const s of order) {
        const run = await s.run(c);
        runs.get(s.name)!.get(c)!.push(run);
        log(`  round ${r + 1}/${rounds} c=${c} ${s.name}: ${((run.ops * 1000) / run.elapsedMs).toFixed(0)} ops/s over ${(run.elapsedMs / 1000).toFixed(1)} s${run.errors ? ` (${run.errors} errors: ${run.firstError})` : ''}`);
      }
    }
  }
  const out = new Map<string, Map<number, LoadFigures>>();
  for (const [name, byC] of runs) out.set(name, new Map([...byC].map(([c, rs]) => [c, pool(rs)])));
  return out;
}
