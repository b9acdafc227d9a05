/**
 * The direct-`pg` side of scenario 5, in its own process so its memory is measured alone: one
 * pg.Client connected as the source's reader role (BENCH_PG_CONFIG, JSON). IPC {cmd: 'read', sql,
 * params} runs the statement over the extended protocol and keeps every row as a parsed object
 * (what pool.query returns), answering the time to the first row, the total time and the row
 * count; {cmd: 'gc'} answers the RSS after a full collection. Run under
 * `node --expose-gc -r tsx/cjs`; prints "READY pg://direct".
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';

async function main(): Promise<void> {
  const client = new pg.Client(JSON.parse(process.env.BENCH_PG_CONFIG ?? '{}') as pg.ClientConfig);
  await client.connect();
  process.on('message', (m: { id: number; cmd: string; sql?: string; params?: unknown[] }) => {
    if (m.cmd === 'gc') {
      const g = (globalThis as { gc?: () => void }).gc;
      g?.();
      g?.();
      process.send!({ id: m.id, gc: !!g, rssKiB: Math.round(process.memoryUsage().rss / 1024) });
      return;
    }
    if (m.cmd !== 'read') {
      process.send!({ id: m.id, error: `unknown command ${m.cmd}` });
      return;
    }
    const t0 = performance.now();
    let ttfbMs = -1;
    const rows: unknown[] = [];
    const q = new pg.Query(m.sql!, m.params ?? []);
    q.on('row', (row: unknown) => {
      if (ttfbMs < 0) ttfbMs = performance.now() - t0;
      rows.push(row);
    });
    q.on('error', (err: Error) => process.send!({ id: m.id, error: err.message }));
    q.on('end', () => process.send!({ id: m.id, ttfbMs, totalMs: performance.now() - t0, rows: rows.length }));
    client.query(q);
  });
  process.on('disconnect', () => void client.end().finally(() => process.exit(0)));
  process.on('SIGTERM', () => void client.end().finally(() => process.exit(0)));
  process.stdout.write('READY pg://direct\n');
}

main().catch((err) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
