/**
 * What the control database does per uncached point read (issue 28, task h28c), counted by the
 * server itself: every statement the control database ran during a wrk load, from
 * pg_stat_statements (calls, rows, execution and planning time, shared blocks, WAL records and
 * bytes), per call served; the commits per call (pg_stat_database), the WAL bytes per call
 * (pg_stat_wal, cluster-wide) and the control database's backend CPU per call (/proc). Sides:
 * `interlock` (compiled `interlock serve`, cache time to live 1 ms so every call misses) and, with
 * BENCH_FLOOR=1, the audited Node floor (bench/lib/node-floor-server.ts) for comparison.
 *
 * Needs a PostgreSQL server with `shared_preload_libraries = 'pg_stat_statements'` (a private
 * cluster: INTERLOCK_TEST_PG_URL=postgres://root@127.0.0.1:PORT/postgres) and the extension created
 * in that URL's database; `pg_stat_statements.track_planning = on` shows planning time too.
 * BENCH_DB=source counts the source database instead (what each prelude and the statement cost it; h28f);
 * BENCH_GOVERNED=1 adds the governed floor (bench/lib/governed-floor.ts). Statement texts are shortened to 110 characters. Environment: BENCH_SECONDS (4), BENCH_CONCURRENCY
 * (8,32), BENCH_FLOOR (0), BENCH_TOP (12 statements per side), BENCH_GAP_SECONDS (idle time before each
 * measured run, as a side waits between its rounds in bench 08), BENCH_SERVE_ROOT (the checkout whose compiled
 * `interlock serve` runs: another tree's build for a before/after). Run:
 * `INTERLOCK_TEST_PG_URL=… npx tsx bench/control-db-statements.ts` after `npm run -s build`.
 */
import { execFileSync } from 'node:child_process';
import pg from 'pg';
import { ADMIN_URL } from '../test/helpers/pg';
import { CpuMeter, procCpuSplitMs } from './lib/cpu';
import { gatewayVars, startServe, startTsChild, withBenchEnv, type GatewayChild } from './lib/env';
import { BENCH_PROTOCOL_VERSION } from './lib/http';
import { governedFloorConfig } from './lib/governed-floor';
import { FLOOR_TOOL } from './lib/node-floor-server';
import { POINT_SQL, preflight, SOURCE_POOL_SIZE, TRACKS } from './lib/point-read';
import { concurrencyLevels, envInt, envSeconds, machineLine, round, table } from './lib/stats';
import { runWrk, wrkAvailable } from './lib/wrk';

const rpc = (name: string, args: Record<string, unknown>) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: args } });
const ids = (n: number) => Array.from({ length: n }, (_, i) => 1 + ((i * 7919) % TRACKS));

interface StatementRow {
  query: string;
  calls: string;
  rows: string;
  total_exec_time: number;
  total_plan_time: number;
  plans: string;
  shared_blks_hit: string;
  shared_blks_dirtied: string;
  wal_records: string;
  wal_bytes: string;
}

async function main(): Promise<void> {
  if (!wrkAvailable()) return void console.log('SKIPPED: wrk is not installed');
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  try {
    await admin.query('SELECT 1 FROM pg_stat_statements LIMIT 1');
  } catch {
    await admin.end();
    return void console.log('SKIPPED: pg_stat_statements is not loaded on INTERLOCK_TEST_PG_URL (shared_preload_libraries) or not created in its database');
  }
  const durationMs = envSeconds('BENCH_SECONDS', 4);
  const levels = concurrencyLevels([8, 32]);
  const top = envInt('BENCH_TOP', 12);
  console.log('# control-db-statements: what the control database runs per call (pg_stat_statements)');
  console.log(machineLine());
  try {
    await withBenchEnv({}, async (env) => {
      // BENCH_DB=source: the source database's statements and backends instead (task h28f: what each prelude costs the source).
      const onSource = process.env.BENCH_DB === 'source';
      const dbName = onSource ? env.demo.databaseName : new URL(env.controlUrl).pathname.slice(1);
      const dbid = (await admin.query<{ oid: number }>('SELECT oid FROM pg_database WHERE datname = $1', [dbName])).rows[0].oid;
      const gws: GatewayChild[] = [];
      const pool = new pg.Pool({ ...env.reader, max: 2 });
      try {
        const il = await startServe(gatewayVars(env.controlUrl, { cacheTtlMs: 1 }), undefined, process.env.BENCH_SERVE_ROOT || undefined);
        gws.push(il);
        await preflight(il.url, env.apiKey, pool);
        const mcpHeaders = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', 'MCP-Protocol-Version': BENCH_PROTOCOL_VERSION };
        const sides: Array<{ name: string; url: string; bodies: string[]; headers: Record<string, string>; expect: string; pid: number }> = [
          { name: 'interlock', url: il.url, bodies: ids(256).map((id) => rpc('interlock_query', { source_id: 'chinook', sql: POINT_SQL, params: [id] })), headers: { ...mcpHeaders, Authorization: `Bearer ${env.apiKey}` }, expect: '"row_count":1,', pid: il.pid },
        ];
        if (process.env.BENCH_FLOOR === '1') {
          const floor = await startTsChild('bench/lib/node-floor-server.ts', { BENCH_FLOOR_READER: JSON.stringify(env.reader), BENCH_FLOOR_SQL: POINT_SQL, BENCH_FLOOR_POOL: String(SOURCE_POOL_SIZE), BENCH_FLOOR_AUDIT_URL: env.controlUrl });
          gws.push(floor);
          sides.push({ name: 'node-floor-audit', url: floor.url, bodies: ids(256).map((id) => rpc(FLOOR_TOOL, { track_id: id })), headers: mcpHeaders, expect: '"row_count":1', pid: floor.pid });
        }
        if (process.env.BENCH_GOVERNED === '1') {
          // The governed floor (h28f, bench/lib/governed-floor.ts): InterLock's source preludes and InterLock's own trail writer.
          const g = await startTsChild('bench/lib/node-floor-server.ts', { BENCH_FLOOR_READER: JSON.stringify(env.reader), BENCH_FLOOR_SQL: POINT_SQL, BENCH_FLOOR_POOL: String(SOURCE_POOL_SIZE), BENCH_FLOOR_AUDIT_URL: env.controlUrl, BENCH_FLOOR_GOVERNED: JSON.stringify(await governedFloorConfig(env.db, env.controlUrl, 'chinook', POINT_SQL)) });
          gws.push(g);
          sides.push({ name: 'node-floor-governed', url: g.url, bodies: ids(256).map((id) => rpc(FLOOR_TOOL, { track_id: id })), headers: mcpHeaders, expect: '"row_count":1', pid: g.pid });
        }
        for (const s of sides) console.log(`  pre-warm ${s.name}: ${(await runWrk({ ...s, concurrency: 8, durationMs: 4000 })).allOps} calls`);
        for (const c of levels) {
          for (const s of sides) {
            // BENCH_GAP_SECONDS: the side stays idle this long first, as between its rounds in bench 08 (other sides' turns).
            await new Promise((r) => setTimeout(r, envSeconds('BENCH_GAP_SECONDS', 0.001)));
            const commits = async () => Number((await admin.query<{ n: string }>('SELECT pg_stat_get_db_xact_commit($1::oid)::text AS n', [dbid])).rows[0].n);
            const wal = async () => Number((await admin.query<{ b: string }>('SELECT wal_bytes::text AS b FROM pg_stat_wal')).rows[0].b);
            await admin.query('SELECT pg_stat_clear_snapshot()');
            await admin.query('SELECT pg_stat_statements_reset()');
            const c0 = await commits();
            const w0 = await wal();
            const backends = (await admin.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [dbName])).rows.map((r) => r.pid);
            const split0 = backends.map((p) => procCpuSplitMs(p));
            const lsn0 = (await admin.query<{ l: string }>('SELECT pg_current_wal_lsn()::text AS l')).rows[0].l;
            const meter = new CpuMeter({ [onSource ? 'sourceDb' : 'controlDb']: { databases: [dbName] } });
            await meter.start();
            const x = await runWrk({ ...s, concurrency: c, durationMs });
            const cpuAll = await meter.stop();
            const cpu = { controlDb: onSource ? cpuAll.sourceDb : cpuAll.controlDb };
            await meter.close();
            const lsn1 = (await admin.query<{ l: string }>('SELECT pg_current_wal_lsn()::text AS l')).rows[0].l;
            const split1 = backends.map((p) => procCpuSplitMs(p));
            const sys = split1.reduce((a, v, i) => a + (Number.isFinite(v.system) && Number.isFinite(split0[i].system) ? v.system - split0[i].system : 0), 0);
            // The cumulative statistics of the backends are flushed at most once a second (PGSTAT_MIN_INTERVAL): wait for them.
            await new Promise((r) => setTimeout(r, 1500));
            await admin.query('SELECT pg_stat_clear_snapshot()');
            const c1 = await commits();
            const w1 = await wal();
            const st = await admin.query<StatementRow>(
              `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls::text, rows::text, total_exec_time, total_plan_time, plans::text,
                      shared_blks_hit::text, shared_blks_dirtied::text, wal_records::text, wal_bytes::text
                 FROM pg_stat_statements WHERE dbid = $1 ORDER BY total_exec_time + total_plan_time DESC`,
              [dbid],
            );
            const n = x.allOps;
            const per = (v: number | string, k = 1) => round((Number(v) / n) * k, 3);
            const all = st.rows.reduce((a, r) => ({ calls: a.calls + Number(r.calls), exec: a.exec + r.total_exec_time, plan: a.plan + r.total_plan_time, wal: a.wal + Number(r.wal_bytes) }), { calls: 0, exec: 0, plan: 0, wal: 0 });
            console.log(`\n${s.name} c=${c}: ${n} calls, ${round((x.ops * 1000) / x.elapsedMs, 0)} calls/s; ${onSource ? 'source' : 'control'} DB CPU ${per(cpu.controlDb, 1000)} µs/call; commits ${per(c1 - c0)}/call; WAL ${per(w1 - w0)} bytes/call (cluster); statements ${per(all.calls)}/call, exec ${per(all.exec, 1000)} µs/call, plan ${per(all.plan, 1000)} µs/call, statement WAL ${per(all.wal)} bytes/call`);
            console.log(`  of the backends present at the start: system (kernel) CPU ${per(sys, 1000)} µs/call`);
            if (process.env.BENCH_WALDUMP) {
              // BENCH_WALDUMP: the server's pg_wal directory, read by pg_waldump (same host): WAL by record type over the run.
              try {
                const out = execFileSync(process.env.BENCH_PG_WALDUMP ?? 'pg_waldump', ['--stats=record', '-p', process.env.BENCH_WALDUMP, '-s', lsn0, '-e', lsn1], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
                const lines = out.split('\n').filter((l) => /^\S/.test(l) && !/^-|^Type/.test(l));
                const recs = lines.map((l) => l.trim().split(/\s+/)).filter((f) => f.length >= 9 && /^\d+$/.test(f[1])).map((f) => ({ type: f[0], n: Number(f[1]), rec: Number(f[3]), fpi: Number(f[5]), all: Number(f[7]) }));
                recs.sort((a, b) => b.all - a.all);
                console.log(table(['WAL record type', 'records/call', 'record B/call', 'full-page B/call', 'total B/call'], recs.slice(0, 12).map((r) => [r.type, per(r.n), per(r.rec), per(r.fpi), per(r.all)])));
              } catch (err) {
                console.log(`  pg_waldump failed: ${String((err as Error).message).slice(0, 300)}`);
              }
            }
            console.log(
              table(
                ['statement', 'events', 'exec µs/stmt', 'calls/call', 'rows/call', 'exec µs/call', 'plan µs/call', 'plans/calls', 'blks hit/call', 'dirtied/call', 'WAL rec/call', 'WAL B/call'],
                st.rows.slice(0, top).map((r) => [r.query.slice(0, 60), (r.query.match(/\(SELECT id FROM b\)/g) ?? []).length, round((r.total_exec_time * 1000) / Math.max(1, Number(r.calls)), 1), per(r.calls), per(r.rows), per(r.total_exec_time, 1000), per(r.total_plan_time, 1000), round(Number(r.plans) / Math.max(1, Number(r.calls)), 2), per(r.shared_blks_hit), per(r.shared_blks_dirtied), per(r.wal_records), per(r.wal_bytes)]),
              ),
            );
          }
        }
      } finally {
        await pool.end();
        for (const gw of gws) await gw.stop();
      }
    });
  } finally {
    await admin.end();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
