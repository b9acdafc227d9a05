/**
 * What one interlock_query costs the control database, counted rather than timed (issue 13, "No
 * per-call write to the control database other than the audit"): runs BENCH_CALLS uncached point
 * reads at concurrency 8 against one `interlock serve` and prints, per call, the control
 * database's commits and the rows inserted or updated in each control table
 * (pg_stat_database / pg_stat_user_tables deltas). Run: `npx tsx bench/control-writes.ts`.
 */
import pg from 'pg';
import { envInt, machineLine, table } from './lib/stats';
import { gatewayVars, sleep, startServe, withBenchEnv } from './lib/env';
import { McpHttpClient, structuredResult } from './lib/http';
import { pointStatement } from './lib/point-read';

async function stats(c: pg.Client): Promise<{ commits: number; tables: Map<string, { ins: number; upd: number }> }> {
  const d = await c.query<{ n: string }>('SELECT xact_commit AS n FROM pg_stat_database WHERE datname = current_database()');
  const t = await c.query<{ relname: string; ins: string; upd: string }>('SELECT relname, n_tup_ins AS ins, n_tup_upd AS upd FROM pg_stat_user_tables');
  return { commits: Number(d.rows[0].n), tables: new Map(t.rows.map((r) => [r.relname, { ins: Number(r.ins), upd: Number(r.upd) }])) };
}

async function main(): Promise<void> {
  const calls = envInt('BENCH_CALLS', 3000);
  console.log(`# control-writes: control-database commits and row writes per uncached interlock_query (${calls} calls, c=8)`);
  console.log(machineLine());
  await withBenchEnv({}, async (env) => {
    const gw = await startServe(gatewayVars(env.controlUrl, { cacheTtlMs: 1 }));
    const c = new pg.Client({ connectionString: env.controlUrl });
    await c.connect();
    try {
      const client = new McpHttpClient(gw.url, { apiKey: env.apiKey, maxSockets: 8 });
      const st = pointStatement();
      const call = async () => void structuredResult(await client.callTool('interlock_query', { source_id: 'chinook', sql: st.sql, params: st.params() }));
      for (let i = 0; i < 50; i++) await call(); // warm: caches filled, first rate-limit block claimed
      await sleep(1000);
      await c.query('SELECT pg_stat_clear_snapshot()');
      const before = await stats(c);
      let done = 0;
      await Promise.all(Array.from({ length: 8 }, async () => {
        while (done < calls) {
          done++;
          await call();
        }
      }));
      await sleep(1500); // let batched writes and the statistics collector settle
      await c.query('SELECT pg_stat_clear_snapshot()');
      const after = await stats(c);
      client.close();
      const n = Math.min(done, calls);
      const rows: string[][] = [['(commits)', ((after.commits - before.commits) / n).toFixed(3), '']];
      for (const [rel, a] of after.tables) {
        const b = before.tables.get(rel) ?? { ins: 0, upd: 0 };
        if (a.ins - b.ins || a.upd - b.upd) rows.push([rel, ((a.ins - b.ins) / n).toFixed(4), ((a.upd - b.upd) / n).toFixed(4)]);
      }
      console.log(`${n} calls`);
      console.log(table(['control table', 'inserts/call (commits/call)', 'updates/call'], rows));
    } finally {
      await c.end();
      await gw.stop();
    }
  });
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
