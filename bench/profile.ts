/**
 * CPU profile of one gateway under the uncached (or cached) point read at concurrency 8 (issue 13,
 * "Lean request handling"): starts `node --cpu-prof <root>/bin/interlock.js serve` on a fresh bench
 * environment, warms it, drives BENCH_SECONDS of closed-loop interlock_query calls, stops it, and
 * prints the top self-time frames and the self time per area (src/, express, pg, tsx, node
 * internals, GC…). `PROFILE_ROOT` selects the checkout whose gateway is profiled (default this
 * one), so a before/after pair uses the same bench and environment. `PROFILE_CACHED=1` profiles
 * warm-cache reads; `PROFILE_LOAD=tools-list` profiles tools/list calls instead (the HTTP edge alone);
 * `PROFILE_KEEP=FILE` keeps the .cpuprofile there (for inclusive times or a flame graph).
 * `PROFILE_ALLOC=1` profiles allocations instead of CPU (issue 28 item 3, h28e): the gateway runs
 * with bench/lib/alloc-sample-preload.cjs (V8's sampling heap profiler, objects collected by either
 * collector included), sampled over the timed window only (warm-up apart), and the bytes allocated
 * per call are printed by phase (the same phases as the CPU table) and by allocating frame
 * (PROFILE_KEEP then keeps the .heapprofile). `PROFILE_ADMISSION=off` profiles a gateway with
 * admission by capacity turned off, `wide` one with it on and min_limit 128, so that its code runs
 * but its limit never binds below c=128 (issue 29: what the limiter costs a served call). Run: `npx tsx bench/profile.ts`.
 */
import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { McpHttpClient, runToolsList, structuredResult } from './lib/http';
import { envInt, envSeconds, machineLine, table } from './lib/stats';
import { gatewayVars, ROOT, withBenchEnv } from './lib/env';
import { POINT_SQL, runGatewayPointReads } from './lib/point-read';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  startTime: number;
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** The area a frame's script belongs to. */
export function areaOf(url: string, fn: string): string {
  if (fn === '(garbage collector)') return 'GC';
  if (fn === '(idle)' || fn === '(program)') return fn;
  if (!url) return 'native/V8';
  if (url.startsWith('node:')) return 'node internals';
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (m) return m[1];
  const s = /\/(src|generated|spec)\/(.*)$/.exec(url);
  if (s) return `${s[1]}/${s[2].split('/')[0]}`;
  return path.basename(url);
}

/**
 * Self time per frame and per area, in ms, from a .cpuprofile, counting only samples taken at or
 * after `fromUs` (CLOCK_MONOTONIC µs, the clock of V8's profile timestamps and of
 * process.hrtime on Linux): start-up and warm-up are left out.
 */
export function summarise(p: Profile, fromUs = 0): { frames: Array<[string, number]>; areas: Array<[string, number]>; totalMs: number } {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  let t = p.startTime;
  for (let i = 0; i < p.samples.length; i++) {
    t += p.timeDeltas[i] ?? 0;
    if (t < fromUs) continue;
    self.set(p.samples[i], (self.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0) / 1000);
  }
  const frames = new Map<string, number>();
  const areas = new Map<string, number>();
  let total = 0;
  for (const [id, ms] of self) {
    const n = byId.get(id)!;
    const { functionName, url, lineNumber } = n.callFrame;
    if (functionName === '(idle)') continue;
    total += ms;
    const key = `${functionName || '(anonymous)'} ${url ? `${url.replace(/^file:\/\//, '').replace(/^.*node_modules\//, '').replace(/^.*?\/(src|bench)\//, '$1/')}:${lineNumber + 1}` : ''}`;
    frames.set(key, (frames.get(key) ?? 0) + ms);
    const a = areaOf(url, functionName);
    areas.set(a, (areas.get(a) ?? 0) + ms);
  }
  const sort = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]);
  return { frames: sort(frames), areas: sort(areas), totalMs: total };
}

/** Files of dist/src (path below src/, without extension) → the phase of a call they belong to (issue 28, h28z). Checked in order; the first prefix that matches wins. */
const PHASE_OF_FILE: Array<[string, string]> = [
  ['protocol/tool-results', 'answer serialisation'],
  ['protocol/envelopes', 'answer serialisation'],
  ['pipeline/rows-json', 'answer serialisation'],
  ['protocol/audit-commit', 'audit row + writer'],
  ['audit/', 'audit row + writer'],
  ['protocol/dispatch', 'dispatch bookkeeping'],
  ['protocol/', 'HTTP edge + JSON-RPC'],
  ['transport/', 'HTTP edge + JSON-RPC'],
  ['server', 'HTTP edge + JSON-RPC'],
  ['pipeline/01-identity', 'identity'],
  ['control/keys', 'identity'],
  ['control/identities', 'identity'],
  ['auth/', 'identity'],
  ['pipeline/hierarchy-check', 'hierarchy guard'],
  ['sources/postgres/hierarchy', 'hierarchy guard'],
  ['pipeline/analysis-cache', 'analysis'],
  ['pipeline/audit-facts', 'analysis'],
  ['sql/', 'analysis'],
  ['pipeline/02-source', 'policy / authorize / rate'],
  ['pipeline/03-authorize', 'policy / authorize / rate'],
  ['pipeline/04-policy', 'policy / authorize / rate'],
  ['pipeline/05-rate-limit', 'policy / authorize / rate'],
  ['pipeline/06-write-safety', 'policy / authorize / rate'],
  ['pipeline/row-', 'policy / authorize / rate'],
  ['governance/', 'policy / authorize / rate'],
  ['control/rate-store', 'policy / authorize / rate'],
  ['pipeline/cache', 'result cache'],
  ['pipeline/08-redact', 'redaction'],
  ['sources/postgres/values', 'source leg: decode'],
  ['sources/postgres/raw-json', ''],
  ['pipeline/07-execute', 'source leg'],
  ['sources/', 'source leg'],
  ['pipeline/query', 'query orchestration'],
  ['observability/', 'metrics + logging'],
  ['control/', 'control store'],
  ['errors/', ''],
];
/** Native frames that are the socket's system calls (kernel time and descheduling under them). */
const SYSCALL_FRAMES = new Set(['writev', 'writeBuffer', 'writeUtf8String', 'writeLatin1String', 'writeAsciiString', 'close', 'shutdown']);

/** The phase of one sample's stack (leaf first): the innermost frame of dist/src that names one, else the leaf's library. */
function phaseOfStack(stack: ProfileNode[]): string {
  const leaf = stack[0].callFrame;
  let srcPhase: string | undefined;
  for (const n of stack) {
    const s = /\/dist\/src\/(.*)\.js$/.exec(n.callFrame.url);
    if (!s) continue;
    const hit = PHASE_OF_FILE.find(([prefix]) => s[1].startsWith(prefix));
    if (hit && hit[1] === '') continue;
    srcPhase = hit ? hit[1] : `other src (${s[1]})`;
    break;
  }
  if (!leaf.url && SYSCALL_FRAMES.has(leaf.functionName)) {
    const under = stack.some((n) => /node_modules\/pg\//.test(n.callFrame.url)) ? 'pg connections' : srcPhase ?? 'other';
    return `socket write syscall (${under === 'HTTP edge + JSON-RPC' || under === 'dispatch bookkeeping' || under === 'answer serialisation' ? 'HTTP answer' : under})`;
  }
  if (srcPhase) return srcPhase;
  const area = areaOf(leaf.url, leaf.functionName);
  if (area === 'lru-cache') return 'result cache';
  if (area === 'prom-client') return 'metrics + logging';
  if (area === 'pino' || area === 'pino-std-serializers') return 'metrics + logging';
  if (area === 'opossum') return 'source leg';
  if (area === 'pg' || area === 'pg-protocol' || area === 'pg-pool' || area === 'pg-types') return 'pg driver, outside src (source and audit connections)';
  if (area === 'GC') return 'GC';
  if (area === '(program)') return '(program)';
  if (leaf.functionName === 'runMicrotasks' || leaf.functionName === 'processTicksAndRejections') return 'promise / tick machinery';
  if (area === 'node internals') return 'node http/net/timers, outside src';
  if (area === 'native/V8') return 'native, outside src';
  return `other (${area})`;
}

/**
 * Busy time per phase of a call (HTTP edge, identity, analysis, policy, source leg, decode, result
 * cache, answer serialisation, audit, metrics, GC…; PHASE_OF_FILE), in ms, from a .cpuprofile's
 * samples at or after `fromUs`: each sample goes to the innermost frame of dist/src on its stack
 * that names a phase (so a library called from our code counts for the phase that called it), the
 * socket system calls apart, else to the leaf's library (pg's parser on a socket 'data' event
 * serves both the source and the audit connections). Idle samples are left out.
 */
export function phases(p: Profile, fromUs = 0): Array<[string, number]> {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const memo = new Map<number, string>();
  const out = new Map<string, number>();
  let t = p.startTime;
  for (let i = 0; i < p.samples.length; i++) {
    t += p.timeDeltas[i] ?? 0;
    if (t < fromUs) continue;
    const id = p.samples[i];
    let ph = memo.get(id);
    if (ph === undefined) {
      const stack: ProfileNode[] = [];
      for (let x: number | undefined = id; x !== undefined; x = parent.get(x)) stack.push(byId.get(x)!);
      ph = stack[0].callFrame.functionName === '(idle)' ? '' : phaseOfStack(stack);
      memo.set(id, ph);
    }
    if (ph) out.set(ph, (out.get(ph) ?? 0) + (p.timeDeltas[i] ?? 0) / 1000);
  }
  return [...out].sort((a, b) => b[1] - a[1]);
}

/** A node of V8's sampling heap profile (HeapProfiler.SamplingHeapProfileNode). */
interface HeapNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: HeapNode[];
}

/**
 * Bytes allocated per phase of a call and per allocating frame, from a sampling heap profile
 * (PROFILE_ALLOC): each node's selfSize goes to the phase of its stack (phaseOfStack, as for CPU
 * samples) and to its frame (function, file below src/ or the package, line).
 */
export function allocations(root: HeapNode): { phases: Array<[string, number]>; frames: Array<[string, number]>; total: number } {
  const phases = new Map<string, number>();
  const frames = new Map<string, number>();
  let total = 0;
  const stack: ProfileNode[] = [];
  const walk = (n: HeapNode): void => {
    stack.unshift({ id: 0, callFrame: n.callFrame });
    if (n.selfSize > 0) {
      total += n.selfSize;
      const ph = phaseOfStack(stack);
      phases.set(ph, (phases.get(ph) ?? 0) + n.selfSize);
      const { functionName, url, lineNumber } = n.callFrame;
      const key = `${functionName || '(anonymous)'} ${url ? `${url.replace(/^file:\/\//, '').replace(/^.*node_modules\//, '').replace(/^.*?\/(src|bench)\//, '$1/')}:${lineNumber + 1}` : ''}`;
      frames.set(key, (frames.get(key) ?? 0) + n.selfSize);
    }
    for (const c of n.children) walk(c);
    stack.shift();
  };
  walk(root);
  const sort = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]);
  return { phases: sort(phases), frames: sort(frames), total };
}

async function main(): Promise<void> {
  const root = path.resolve(process.env.PROFILE_ROOT ?? ROOT);
  const cached = process.env.PROFILE_CACHED === '1';
  const toolsList = process.env.PROFILE_LOAD === 'tools-list';
  const alloc = process.env.PROFILE_ALLOC === '1';
  const c = envInt('BENCH_CONCURRENCY', 8);
  const durationMs = envSeconds('BENCH_SECONDS', 6);
  const top = envInt('PROFILE_TOP', 20);
  console.log(`# profile${alloc ? ' (allocations)' : ''}: ${toolsList ? 'tools/list' : cached ? 'cached point read' : 'uncached point read'}, c=${c}, ${durationMs / 1000} s, gateway from ${root}`);
  console.log(machineLine());
  const dir = mkdtempSync(path.join(os.tmpdir(), 'il-prof-'));
  try {
    await withBenchEnv({}, async (env) => {
      const vars = { ...gatewayVars(env.controlUrl, { cacheTtlMs: cached ? 600_000 : 1 }), ...(process.env.PROFILE_ADMISSION === 'off' ? { INTERLOCK_ADMISSION_ENABLED: 'false' } : process.env.PROFILE_ADMISSION === 'wide' ? { INTERLOCK_ADMISSION_MIN_LIMIT: '128' } : {}) };
      const childEnv: NodeJS.ProcessEnv = {};
      for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('INTERLOCK_')) childEnv[k] = v;
      const heapFile = path.join(dir, 'alloc.heapprofile');
      const flags = alloc ? ['-r', path.join(ROOT, 'bench', 'lib', 'alloc-sample-preload.cjs')] : ['--cpu-prof', `--cpu-prof-dir=${dir}`];
      if (alloc) childEnv.IL_ALLOC_OUT = heapFile;
      const proc = spawn(process.execPath, [...flags, path.join(root, 'bin', 'interlock.js'), 'serve', '--host', '127.0.0.1', '--port', '0'], { cwd: root, env: { ...childEnv, ...vars }, stdio: ['ignore', 'pipe', 'pipe'] });
      const url = await new Promise<string>((resolve, reject) => {
        let out = '';
        proc.stdout!.on('data', (b: Buffer) => {
          out += b.toString();
          const m = /listening on (http:\/\/\S+\/mcp)/.exec(out);
          if (m) resolve(m[1]);
        });
        proc.once('exit', (code) => reject(new Error(`gateway exited (${code}): ${out}`)));
      });
      const warm = new McpHttpClient(url, { apiKey: env.apiKey, maxSockets: 1 });
      for (let id = 1; id <= 64; id++) structuredResult(await warm.callTool('interlock_query', { source_id: 'chinook', sql: POINT_SQL, params: [id] }));
      warm.close();
      if (alloc) return allocationRun(proc, url, env.apiKey, c, durationMs, top, heapFile);
      const fromUs = Number(process.hrtime.bigint() / 1000n) + 1_000_000; // after the 1 s warm-up
      const run = toolsList ? await runToolsList(url, env.apiKey, c, { durationMs, warmupMs: 1000 }) : await runGatewayPointReads([url], env.apiKey, c, { durationMs, warmupMs: 1000, hot: cached ? 64 : undefined });
      console.log(`load: ${((run.ops * 1000) / run.elapsedMs).toFixed(0)} calls/s, ${run.allOps} calls profiled (warm-up included), ${run.errors} errors`);
      await new Promise<void>((resolve) => {
        proc.once('exit', () => resolve());
        proc.kill('SIGINT');
      });
      const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
      if (!file) throw new Error('no .cpuprofile written');
      if (process.env.PROFILE_KEEP) copyFileSync(path.join(dir, file), path.resolve(process.env.PROFILE_KEEP));
      const s = summarise(JSON.parse(readFileSync(path.join(dir, file), 'utf8')) as Profile, fromUs);
      const perCall = (ms: number) => ((ms * 1000) / Math.max(1, run.ops)).toFixed(1);
      console.log(`\ntimed window only (start-up and warm-up left out): busy self time ${s.totalMs.toFixed(0)} ms = ${perCall(s.totalMs)} µs per call (profiler overhead included; on a loaded machine, time the process spends descheduled inside a system call is counted against that call, writev above all)`);
      console.log('\nself time by area:');
      console.log(table(['area', 'ms', '%', 'µs/call'], s.areas.slice(0, 14).map(([a, ms]) => [a, ms.toFixed(0), ((ms / s.totalMs) * 100).toFixed(1), perCall(ms)])));
      console.log('\nbusy time by phase of a call (innermost frame of dist/src on the stack; the socket system calls apart):');
      console.log(table(['phase', 'ms', '%', 'µs/call'], phases(JSON.parse(readFileSync(path.join(dir, file), 'utf8')) as Profile, fromUs).map(([a, ms]) => [a, ms.toFixed(0), ((ms / s.totalMs) * 100).toFixed(1), perCall(ms)])));
      console.log(`\ntop ${top} frames by self time:`);
      console.log(table(['frame', 'ms', '%'], s.frames.slice(0, top).map(([f, ms]) => [f.slice(0, 110), ms.toFixed(0), ((ms / s.totalMs) * 100).toFixed(1)])));
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** PROFILE_ALLOC's timed window: 2 s of warm-up, sampling on (SIGUSR2), the uncached point reads, sampling off and written (SIGUSR2), then the bytes per call. */
async function allocationRun(proc: ReturnType<typeof spawn>, url: string, apiKey: string, c: number, durationMs: number, top: number, heapFile: string): Promise<void> {
  await runGatewayPointReads([url], apiKey, c, { durationMs: 2000, warmupMs: 0 });
  proc.kill('SIGUSR2');
  await new Promise((r) => setTimeout(r, 200));
  const run = await runGatewayPointReads([url], apiKey, c, { durationMs, warmupMs: 0 });
  proc.kill('SIGUSR2');
  for (let i = 0; i < 100 && !existsSync(heapFile); i++) await new Promise((r) => setTimeout(r, 100));
  await new Promise<void>((resolve) => {
    proc.once('exit', () => resolve());
    proc.kill('SIGINT');
  });
  if (process.env.PROFILE_KEEP) copyFileSync(heapFile, path.resolve(process.env.PROFILE_KEEP));
  const a = allocations((JSON.parse(readFileSync(heapFile, 'utf8')) as { head: HeapNode }).head);
  const calls = Math.max(1, run.allOps);
  const perCall = (b: number) => (b / calls).toFixed(0);
  console.log(`load: ${((run.ops * 1000) / run.elapsedMs).toFixed(0)} calls/s, ${run.allOps} calls sampled, ${run.errors} errors; ${perCall(a.total)} bytes allocated per call (sampled estimate, all calls' bytes in the window ÷ calls)`);
  console.log('\nbytes allocated per call by phase (innermost frame of dist/src on the allocating stack):');
  console.log(table(['phase', 'B/call', '%'], a.phases.map(([ph, b]) => [ph, perCall(b), ((b / a.total) * 100).toFixed(1)])));
  console.log(`\ntop ${top} allocating frames:`);
  console.log(table(['frame', 'B/call', '%'], a.frames.slice(0, top).map(([f, b]) => [f.slice(0, 110), perCall(b), ((b / a.total) * 100).toFixed(1)])));
}

if (require.main === module) {
  main().then(
    () => process.exit(0),
    (err) => {
      console.error(err);
      process.exit(1);
    },
  );
}
