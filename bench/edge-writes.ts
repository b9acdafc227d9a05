/**
 * Socket writes and reads per call of one gateway (issue 13, "one socket write per answer"): starts
 * `<root>/bin/interlock.js serve` on a fresh bench environment, attaches `strace -f -c` to it for
 * the timed window of closed-loop calls at concurrency 8, and prints the write-side and read-side
 * system calls per call: first uncached interlock_query point reads (the HTTP answer, the source
 * query, the audit insert all write), then tools/list (only the HTTP answer writes). `EDGE_ROOT`
 * selects the checkout (default this one). Needs strace and permission to attach (ptrace).
 * Run: `npx tsx bench/edge-writes.ts`.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { McpHttpClient, runToolsList, structuredResult } from './lib/http';
import { envInt, envSeconds, machineLine, table } from './lib/stats';
import { gatewayVars, ROOT, startServe, withBenchEnv } from './lib/env';
import { POINT_SQL, runGatewayPointReads } from './lib/point-read';

const CALLS = 'write,writev,sendto,sendmsg,read,readv,recvfrom,recvmsg';

/** Runs `load` while strace counts the system calls of `pid` (all threads); returns calls per syscall name. */
async function counted(pid: number, load: () => Promise<number>): Promise<{ ops: number; counts: Record<string, number> }> {
  const st = spawn('strace', ['-f', '-c', '-e', `trace=${CALLS}`, '-p', String(pid)], { stdio: ['ignore', 'ignore', 'pipe'] });
  let out = '';
  st.stderr!.on('data', (b: Buffer) => (out += b.toString()));
  await new Promise((r) => setTimeout(r, 500));
  const ops = await load();
  await new Promise<void>((resolve) => {
    st.once('exit', () => resolve());
    st.kill('SIGINT');
  });
  const counts: Record<string, number> = {};
  for (const line of out.split('\n')) {
    const m = /^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$/.exec(line);
    if (m && m[2] !== 'total') counts[m[2]] = Number(m[1]);
  }
  return { ops, counts };
}

async function main(): Promise<void> {
  const root = path.resolve(process.env.EDGE_ROOT ?? ROOT);
  const c = envInt('BENCH_CONCURRENCY', 8);
  const durationMs = envSeconds('BENCH_SECONDS', 3);
  console.log(`# edge-writes: system calls per call at c=${c}, ${durationMs / 1000} s per load, gateway from ${root}`);
  console.log(machineLine());
  await withBenchEnv({}, async (env) => {
    const gw = await startServe(gatewayVars(env.controlUrl, { cacheTtlMs: 1 }), [], root);
    try {
      const warm = new McpHttpClient(gw.url, { apiKey: env.apiKey, maxSockets: 1 });
      for (let id = 1; id <= 32; id++) structuredResult(await warm.callTool('interlock_query', { source_id: 'chinook', sql: POINT_SQL, params: [id] }));
      warm.close();
      const rows: Array<Array<string | number>> = [];
      const report = (name: string, r: { ops: number; counts: Record<string, number> }) => {
        const per = (n: string[]) => (n.reduce((s, k) => s + (r.counts[k] ?? 0), 0) / r.ops).toFixed(2);
        rows.push([name, r.ops, per(['write', 'writev', 'sendto', 'sendmsg']), per(['writev']), per(['write']), per(['read', 'readv', 'recvfrom', 'recvmsg'])]);
      };
      report('uncached point read', await counted(gw.pid, async () => (await runGatewayPointReads([gw.url], env.apiKey, c, { durationMs, warmupMs: 0 })).allOps));
      report('tools/list', await counted(gw.pid, async () => (await runToolsList(gw.url, env.apiKey, c, { durationMs, warmupMs: 0 })).allOps));
      console.log(table(['load', 'calls', 'writes per call (write, writev, send*)', 'writev', 'write', 'reads per call'], rows));
    } finally {
      await gw.stop();
    }
  });
}

void main().catch((err) => {
  console.error(err);
  process.exit(1);
});
