/**
 * Issue 28's multi-process prototype, a bench child: a node:cluster primary that forks
 * BENCH_CLUSTER_WORKERS (default 2) workers, each running the ordinary `interlock serve` of
 * BENCH_CLUSTER_ROOT (default this checkout; compiled when dist/ is up to date, bin/runtime.js) on
 * 127.0.0.1 and one shared port (listen(0) in cluster workers gives them all the primary's one
 * random port; connections are handed out round-robin by the primary, Node's default on Linux).
 * Each worker is a replica on the one control database (as bench/07-scale-out.ts runs them), with
 * its own pools, caches and audit writer; the control database is already migrated by the bench.
 * The workers' environment is this process's (INTERLOCK_* variables from startTsChild).
 *
 * Prints "READY <url>" once every worker listens, then "WORKERS <pid,pid,…>". SIGTERM is passed to
 * the workers; the primary exits when they have. Not the product's `serve --workers`: a measurement.
 */
import cluster from 'node:cluster';
import path from 'node:path';

const ROOT = process.env.BENCH_CLUSTER_ROOT ? path.resolve(process.env.BENCH_CLUSTER_ROOT) : path.resolve(__dirname, '..', '..');
const n = Math.max(1, Number(process.env.BENCH_CLUSTER_WORKERS ?? 2));

cluster.setupPrimary({ exec: path.join(ROOT, 'bin', 'interlock.js'), args: ['serve', '--host', '127.0.0.1', '--port', '0'], execArgv: [], silent: true });
let listening = 0;
cluster.on('listening', (_w, address) => {
  if (++listening !== n) return;
  process.stdout.write(`READY http://127.0.0.1:${address.port}/mcp\nWORKERS ${Object.values(cluster.workers ?? {}).map((w) => w!.process.pid).join(',')}\n`);
});
cluster.on('exit', (w, code, signal) => {
  if (!stopping) process.stderr.write(`worker ${w.process.pid} exited (${code ?? signal})\n`);
  if (Object.keys(cluster.workers ?? {}).length === 0) process.exit(0);
});
for (let i = 0; i < n; i++) {
  const w = cluster.fork();
  w.process.stderr?.on('data', (c: Buffer) => process.stderr.write(c));
  w.process.stdout?.resume();
}
let stopping = false;
const stop = () => {
  stopping = true;
  for (const w of Object.values(cluster.workers ?? {})) w!.process.kill('SIGTERM');
};
process.on('SIGTERM', stop);
process.on('disconnect', stop);
