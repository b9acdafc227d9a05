/**
 * Load from `wrk` (issue 28): a C load generator whose own CPU per call is a small fraction of the
 * Node.js driver's (bench/lib/load.ts), so the servers' figures are not skewed by the driver sharing
 * the two cores. One run posts JSON-RPC bodies (cycled from a list) over `concurrency` keep-alive
 * connections for a fixed time; a Lua `response` hook counts answers that are not HTTP 200 or lack
 * an expected substring, so a wrong answer is never counted as a call served. The driver's CPU comes
 * from bash's `times` (user + system of its finished child), so it is exact, not sampled.
 * Needs /usr/bin/wrk (Debian package `wrk`).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { LoadRun } from './load';

/** The wrk binary used (BENCH_WRK overrides). */
export const WRK = process.env.BENCH_WRK ?? '/usr/bin/wrk';

/** Whether wrk is installed. */
export function wrkAvailable(): boolean {
  return existsSync(WRK);
}

/** One wrk run: LoadRun figures (ops served and correct, elapsed ms) plus wrk's latency percentiles (ms) and the driver's CPU (ms). */
export interface WrkRun extends LoadRun {
  p50Ms: number;
  p99Ms: number;
  /** User + system CPU of the wrk process over the run, in milliseconds. */
  driverCpuMs: number;
}

/** Runs `cmd` with `args`; resolves its standard output followed by its standard error, rejects when it exits non-zero. */
function output(cmd: string, args: string[]): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let s = '';
    let e = '';
    p.stdout.setEncoding('utf8').on('data', (d: string) => (s += d));
    p.stderr.setEncoding('utf8').on('data', (d: string) => (e += d));
    p.on('error', reject);
    p.on('close', (code) => (code === 0 ? resolve(s + e) : reject(new Error(`wrk exited ${code}: ${(s + e).slice(-500)}`))));
  });
}

const luaString = (s: string) => `"${s.replace(/[\\"]/g, '\\$&').replace(/\n/g, '\\n')}"`;

/** The part every script shares: POST with `headers`, each body in turn from a random start per connection (`counters` zeroed per thread), `expect` and the thread list. */
function luaPrelude(bodies: string[], headers: Record<string, string>, expect: string, counters: string[]): string {
  return `wrk.method = "POST"
${Object.entries(headers)
  .map(([k, v]) => `wrk.headers[${luaString(k)}] = ${luaString(v)}`)
  .join('\n')}
local bodies = { ${bodies.map(luaString).join(',\n')} }
local expect = ${luaString(expect)}
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) ${counters.map((c) => `${c} = 0; `).join('')}i = math.random(#bodies) end
function request() i = i % #bodies + 1; return wrk.format(nil, nil, nil, bodies[i]) end
`;
}

/** The Lua script of a run: POST each body in turn (from a random start per connection), count bad answers, print one RESULT line. */
export function wrkScript(bodies: string[], headers: Record<string, string>, expect: string): string {
  return `${luaPrelude(bodies, headers, expect, ['bad'])}function response(status, headers, body)
  if status ~= 200 or not string.find(body, expect, 1, true) then bad = bad + 1 end
end
function done(summary, latency, requests)
  local b = 0
  for _, t in ipairs(threads) do b = b + t:get("bad") end
  io.write(string.format("RESULT %d %d %d %d %.1f %.1f\\n", summary.requests, b, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout, summary.duration, latency:percentile(50), latency:percentile(99)))
end
`;
}

/**
 * Runs wrk against `url` at `concurrency` connections (threads: min(2, concurrency)) for
 * `durationMs`, posting `bodies` with `headers`; an answer is correct when it is HTTP 200 and
 * contains `expect`. Rejects when wrk fails or more than 1% of answers are wrong (with the count).
 */
export async function runWrk(opts: { url: string; concurrency: number; durationMs: number; bodies: string[]; headers: Record<string, string>; expect: string }): Promise<WrkRun> {
  const dir = mkdtempSync(path.join(tmpdir(), 'il-wrk-'));
  try {
    const script = path.join(dir, 'post.lua');
    writeFileSync(script, wrkScript(opts.bodies, opts.headers, opts.expect));
    const threads = Math.max(1, Math.min(2, opts.concurrency));
    const seconds = Math.max(1, Math.round(opts.durationMs / 1000));
    const cmd = `${JSON.stringify(WRK)} -t${threads} -c${opts.concurrency} -d${seconds}s --timeout 10s -s ${JSON.stringify(script)} ${JSON.stringify(opts.url)}; rc=$?; times; exit $rc`;
    const out = await output('bash', ['-c', cmd]);
    const m = /RESULT (\d+) (\d+) (\d+) (\d+) ([\d.]+) ([\d.]+)/.exec(out);
    if (!m) throw new Error(`wrk printed no result: ${out.slice(-500)}`);
    const [requests, bad, socketErrors, durationUs] = [Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4])];
    // `times` prints the shell's own times, then its children's: "0m1.234s 0m0.567s".
    const t = [...out.matchAll(/(\d+)m([\d.]+)s (\d+)m([\d.]+)s/g)];
    const child = t[t.length - 1];
    const driverCpuMs = child ? (Number(child[1]) * 60 + Number(child[2]) + Number(child[3]) * 60 + Number(child[4])) * 1000 : NaN;
    const errors = bad + socketErrors;
    if (errors > requests * 0.01) throw new Error(`wrk against ${opts.url}: ${bad} wrong answers and ${socketErrors} socket errors out of ${requests}`);
    const ops = requests - bad;
    return { concurrency: opts.concurrency, ops, errors, elapsedMs: durationUs / 1000, allOps: requests, samples: new Float64Array(0), p50Ms: Number(m[5]) / 1000, p99Ms: Number(m[6]) / 1000, driverCpuMs };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** One wrk run under overload (runWrkOverload): every answer sorted by what it was. */
export interface WrkOverloadRun {
  connections: number;
  /** Answers in all. */
  requests: number;
  /** HTTP 200 answers containing the expected substring (goodput). */
  served: number;
  /** HTTP 429 answers, and those of them carrying a Retry-After header. */
  refused: number;
  refusedWithRetryAfter: number;
  /** Of the 429 answers, those whose body names a code other than rate_limited (e.g. a source's late `concurrency_limited`). */
  refusedOther: number;
  /** Any other answer (another status, or a 200 without the expected substring). */
  other: number;
  /** Connect, read, write and timeout errors. */
  socketErrors: number;
  /** Seconds the run lasted. */
  seconds: number;
  /** wrk's latency percentiles over all answers, ms. */
  p50Ms: number;
  p99Ms: number;
}

/** The Lua script of an overload run: POST the bodies in turn, sort each answer (served / 429 / 429 with Retry-After / 429 not rate_limited / other), print one OVERLOAD line. */
export function wrkOverloadScript(bodies: string[], headers: Record<string, string>, expect: string): string {
  return `${luaPrelude(bodies, headers, expect, ['ok', 'refused', 'retry', 'late', 'other'])}function response(status, headers, body)
  if status == 200 and string.find(body, expect, 1, true) then ok = ok + 1
  elseif status == 429 then
    refused = refused + 1
    if headers["Retry-After"] then retry = retry + 1 end
    if not string.find(body, '"code":"rate_limited"', 1, true) then late = late + 1 end
  else other = other + 1 end
end
function done(summary, latency, requests)
  local o, r, t, x, l = 0, 0, 0, 0, 0
  for _, th in ipairs(threads) do o = o + th:get("ok"); r = r + th:get("refused"); t = t + th:get("retry"); x = x + th:get("other"); l = l + th:get("late") end
  io.write(string.format("OVERLOAD %d %d %d %d %d %d %d %.1f %.1f %d\\n", summary.requests, o, r, t, x, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout, summary.duration, latency:percentile(50), latency:percentile(99), l))
end
`;
}

/**
 * Runs wrk against `url` at `connections` (2 threads, or 1 for one connection) for `seconds`,
 * posting `bodies` with `headers`, and sorts the answers (WrkOverloadRun): unlike runWrk, refusals
 * are expected and counted, not an error. Rejects only when wrk fails.
 */
export async function runWrkOverload(opts: { url: string; connections: number; seconds: number; bodies: string[]; headers: Record<string, string>; expect: string }): Promise<WrkOverloadRun> {
  const dir = mkdtempSync(path.join(tmpdir(), 'il-wrk-'));
  try {
    const script = path.join(dir, 'overload.lua');
    writeFileSync(script, wrkOverloadScript(opts.bodies, opts.headers, opts.expect));
    const threads = Math.max(1, Math.min(2, opts.connections));
    const out = await output(WRK, [`-t${threads}`, `-c${opts.connections}`, `-d${Math.max(1, Math.round(opts.seconds))}s`, '--timeout', '10s', '-s', script, opts.url]);
    const m = /OVERLOAD (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) ([\d.]+) ([\d.]+) (\d+)/.exec(out);
    if (!m) throw new Error(`wrk printed no result: ${out.slice(-500)}`);
    const n = m.slice(1).map(Number);
    return { connections: opts.connections, requests: n[0], served: n[1], refused: n[2], refusedWithRetryAfter: n[3], refusedOther: n[9], other: n[4], socketErrors: n[5], seconds: n[6] / 1e6, p50Ms: n[7] / 1000, p99Ms: n[8] / 1000 };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
