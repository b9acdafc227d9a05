/**
 * CPU profile of one gateway under the uncached (or cached) point read at concurrency 8 (issue 13,
 * "Lean request handling"): starts `node --cpu-prof <root>/bin/interlock.js serve` on a fresh bench
 * environment, warms it, drives BENCH_SECONDS of closed-loop interlock_query calls, stops it, and
 * prints the top self-time frames and the self time per area (src/, express, pg, tsx, node
 * internals, GC…). `PROFILE_ROOT` selects the checkout whose gateway is profiled (default this
 * one), so a before/after pair uses the same bench and environment. `PROFILE_CACHED=1` profiles
 * warm-cache reads; `PROFILE_LOAD=tools-list` profiles tools/list calls instead (the HTTP edge alone);
 * `PROFILE_KEEP=FILE` keeps the .cpuprofile there (for inclusive times or a flame graph). Run: `npx tsx bench/profile.ts`.
 */
import { spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
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

async function main(): Promise<void> {
  const root = path.resolve(process.env.PROFILE_ROOT ?? ROOT);
  const cached = process.env.PROFILE_CACHED === '1';
  const toolsList = process.env.PROFILE_LOAD === 'tools-list';
  const c = envInt('BENCH_CONCURRENCY', 8);
  const durationMs = envSeconds('BENCH_SECONDS', 6);
  const top = envInt('PROFILE_TOP', 20);
  console.log(`# profile: ${toolsList ? 'tools/list' : cached ? 'cached point read' : 'uncached point read'}, c=${c}, ${durationMs / 1000} s, gateway from ${root}`);
  console.log(machineLine());
  const dir = mkdtempSync(path.join(os.tmpdir(), 'il-prof-'));
  try {
    await withBenchEnv({}, async (env) => {
      const vars = gatewayVars(env.controlUrl, { cacheTtlMs: cached ? 600_000 : 1 });
      const childEnv: NodeJS.ProcessEnv = {};
      for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('INTERLOCK_')) childEnv[k] = v;
      const proc = spawn(process.execPath, ['--cpu-prof', `--cpu-prof-dir=${dir}`, path.join(root, 'bin', 'interlock.js'), 'serve', '--host', '127.0.0.1', '--port', '0'], { cwd: root, env: { ...childEnv, ...vars }, stdio: ['ignore', 'pipe', 'pipe'] });
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
      console.log(`\ntop ${top} frames by self time:`);
      console.log(table(['frame', 'ms', '%'], s.frames.slice(0, top).map(([f, ms]) => [f.slice(0, 110), ms.toFixed(0), ((ms / s.totalMs) * 100).toFixed(1)])));
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
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
