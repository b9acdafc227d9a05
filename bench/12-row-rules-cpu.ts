/**
 * Scenario 12, in process (issue 27): what a row rule adds to a point read, as CPU of this process
 * per call (process.cpuUsage over N calls: less sensitive to a shared machine's load than calls/s)
 * and of the source database's backends, for the two parts bench 12 names:
 *
 * Planning (no database), POINT_SQL on Chinook's track, `genre_id = ANY(identity.genres)` with all
 * 25 genres:
 * - `plan uncached`: planRowRules on every call (main before this change: two parses and a scan);
 * - `plan cached`: the analysis-cache lookup, its cached row-rule shape, and bindRowRules (this change);
 * - `lookup unruled`: the analysis-cache lookup alone (what an unruled caller pays here).
 *
 * The read (one PostgresSourceConnector, pool of 1 connection so the two-query side binds on the
 * connection it reads on; concurrency 1; every answer checked to be the one expected row):
 * - `read table`: the point read on the table (an unruled caller);
 * - `read view, set_config round trip`: a session-level `set_config` query, then the read of the
 *   row view (what the reader did before this change: one more round trip);
 * - `read view, bound in its Sync`: the read of the row view carrying the settings, bound by
 *   `set_config(…, true)` in the read's own round trip (this change);
 * - `read view, bound in its Sync + guard`: the same with the live hierarchy guard in that round
 *   trip too, as the gateway reads for a ruled caller (a caller with a row rule is hierarchy-
 *   sensitive, issue 22/23; the unruled caller of bench 12 is not, so it reads as `read table`).
 *
 * The whole interlock_query pipeline in process (queryHandler on that connector, an in-memory
 * governance store, no result cache, no HTTP): `pipeline unruled` and `pipeline ruled`, the two
 * identities of bench 12 — everything the gateway does for a call but the transport and the audit.
 *
 * Sides alternate, BENCH_ROUNDS rounds (3) of BENCH_CALLS calls (planning: BENCH_PLAN_CALLS, 5000;
 * reads: BENCH_CALLS, 2000). Run: `npx tsx bench/12-row-rules-cpu.ts`.
 */
import pg from 'pg';
import { PostgresSourceConnector } from '../src/sources/postgres/connector';
import { scanCatalog } from '../src/sources/postgres/catalog';
import { initSqlParser } from '../src/sql/analyze';
import { AnalysisCache, evaluatorFor } from '../src/pipeline/analysis-cache';
import { authorizeSql, queryHandler } from '../src/pipeline/query';
import { ResultCache } from '../src/pipeline/cache';
import { rowViewProvisioner } from '../src/pipeline/row-views';
import { MemoryGovernanceStore } from '../src/governance/store';
import type { ToolCallContext } from '../src/pipeline/types';
import { bindRowRules, planRowRules, rowViewStatements, shapeRowRules, type RowRuleDecision } from '../src/pipeline/row-rules';
import type { RoleGrant } from '../src/governance/evaluator';
import { createSourceDb } from '../test/integration/sources/source-db';
import { CpuMeter } from './lib/cpu';
import { envInt, machineLine, runBench, table } from './lib/stats';
import { POINT_SQL, TRACKS } from './lib/point-read';

const RULE = 'genre_id = ANY(identity.genres)';
/** The reader's binding before this change (src/sources/postgres/read.ts at main): its own query, session-level. */
const SESSION_BIND = 'SELECT pg_catalog.set_config(s.name, s.value, false) FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) AS s(name, value)';

type Figures = { ms: number; self: number; db: number; n: number };

/** Runs `sides` alternately for `rounds` rounds of `calls` calls each; prints and returns the figures per side. */
async function alternate(sides: Record<string, (i: number) => unknown>, rounds: number, calls: number, dbName: string | null): Promise<Record<string, Figures[]>> {
  const names = Object.keys(sides);
  const out: Record<string, Figures[]> = Object.fromEntries(names.map((n) => [n, []]));
  for (let r = 0; r < rounds; r++) {
    for (const name of r % 2 === 0 ? names : [...names].reverse()) {
      const meter = new CpuMeter({ self: { self: true }, ...(dbName ? { db: { databases: [dbName] } } : {}) });
      await meter.start();
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < calls; i++) await sides[name](i);
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      const cpu = await meter.stop();
      await meter.close();
      out[name].push({ ms, self: cpu.self, db: cpu.db ?? 0, n: calls });
      console.log(`  round ${r + 1}/${rounds} ${name}: ${((ms * 1000) / calls).toFixed(1)} µs/call wall, this process ${((cpu.self * 1000) / calls).toFixed(1)} µs/call${dbName ? `, source DB ${((cpu.db * 1000) / calls).toFixed(1)} µs/call` : ''}`);
    }
  }
  return out;
}

/** Median of each side's per-call figures (µs), with the range. */
function summary(res: Record<string, Figures[]>, db: boolean): string {
  const med = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
  const fmt = (v: number[]) => `${med(v).toFixed(1)} (${Math.min(...v).toFixed(1)}–${Math.max(...v).toFixed(1)})`;
  const rows = Object.entries(res).map(([name, f]) => [
    name,
    fmt(f.map((x) => (x.ms * 1000) / x.n)),
    fmt(f.map((x) => (x.self * 1000) / x.n)),
    ...(db ? [fmt(f.map((x) => (x.db * 1000) / x.n))] : []),
  ]);
  return table(['side', 'wall µs/call, median (range)', 'this process CPU µs/call', ...(db ? ['source DB CPU µs/call'] : [])], rows);
}

async function main(): Promise<void> {
  const rounds = envInt('BENCH_ROUNDS', 3);
  const planCalls = envInt('BENCH_PLAN_CALLS', 5000);
  const calls = envInt('BENCH_CALLS', 2000);
  console.log(`# 12-row-rules-cpu: row-rule planning and the ruled read in process, ${rounds} rounds, sides alternating`);
  console.log(machineLine());
  await initSqlParser();
  const src = await createSourceDb('bench_rr_cpu');
  const c = new PostgresSourceConnector('chinook', src.settings({ pool_size: 1, max_concurrent_per_identity: 1 }));
  try {
    const rc = new pg.Client({ host: src.host, port: src.port, database: src.db.name, user: src.readerRole });
    await rc.connect();
    const catalog = await scanCatalog(rc);
    const genres = (await rc.query<{ genre_id: number }>('SELECT genre_id FROM genre ORDER BY 1')).rows.map((r) => r.genre_id);
    const expected = new Map((await rc.query<Record<string, unknown>>(POINT_SQL.replace('WHERE track_id = $1', 'ORDER BY track_id'))).rows.map((r) => [Number(r.track_id), JSON.stringify(r)]));
    await rc.end();
    const ruled: RoleGrant[] = [{ sourceId: 'chinook', role: { name: 'ruled', statements: [{ effect: 'allow', action: 'read', resource: 'public.track', rows: RULE }] } }];
    const unruled: RoleGrant[] = [{ sourceId: 'chinook', role: { name: 'unruled', statements: [{ effect: 'allow', action: 'read', resource: 'public.track' }] } }];
    const attributes = { genres };
    const analyses = new AnalysisCache();
    const lookup = (grants: RoleGrant[]) => analyses.analyse({ sourceId: 'chinook', sql: POINT_SQL, catalog, grants }, () => authorizeSql(evaluatorFor(grants), 'chinook', POINT_SQL, catalog));
    const analysis = lookup(ruled).entry.analysis;
    if (!analysis.ok) throw new Error('POINT_SQL did not analyse');
    const input = { evaluator: evaluatorFor(ruled), sourceId: 'chinook', analysis, catalog, attributes, sql: POINT_SQL };
    const uncached = planRowRules(input);
    if (uncached.kind !== 'ruled') throw new Error(`the rule was not planned: ${JSON.stringify(uncached)}`);
    const plan = uncached.plan;
    const cachedPlan = (): RowRuleDecision => {
      const l = lookup(ruled);
      return bindRowRules(l.rowRules(POINT_SQL, () => shapeRowRules(input)), attributes);
    };
    if (JSON.stringify(cachedPlan()) !== JSON.stringify(uncached)) throw new Error('the cached plan differs from the uncached one');

    console.log(`\nplanning (${planCalls} calls per round):`);
    const planRes = await alternate(
      {
        'plan uncached': () => planRowRules(input),
        'plan cached': () => cachedPlan(),
        'lookup unruled': () => lookup(unruled),
      },
      rounds,
      planCalls,
      null,
    );

    // The row view, made as the gateway makes it (the superuser here stands in for the writer role).
    for (const v of plan.views) for (const sql of rowViewStatements(v, src.readerRole)) await src.admin.query(sql);
    const names = plan.settings.map((s) => s[0]);
    const values = plan.settings.map((s) => s[1]);
    const opts = { maxRows: 100, maxBytes: 4 * 1024 * 1024 };
    const check = (rows: unknown[][], fields: Array<{ name: string }>, id: number) => {
      const obj = rows.length === 1 ? Object.fromEntries(fields.map((f, i) => [f.name, rows[0][i]])) : null;
      if (!obj || JSON.stringify(obj) !== expected.get(id)) throw new Error(`track ${id}: unexpected answer ${JSON.stringify(rows).slice(0, 200)}`);
    };
    const id = (i: number) => 1 + ((i * 7919) % TRACKS);
    const guard = c.standaloneGuard([{ schema: 'public', name: 'track' }]);
    const readSides = {
      'read table': async (i: number) => {
        const r = await c.read(POINT_SQL, [id(i)], opts);
        check(r.rowsArray, r.fields, id(i));
      },
      'read view, set_config round trip': async (i: number) => {
        await c.read(SESSION_BIND, [names, values], opts);
        const r = await c.read(plan.sql, [id(i)], opts);
        check(r.rowsArray, r.fields, id(i));
      },
      'read view, bound in its Sync': async (i: number) => {
        const r = await c.read(plan.sql, [id(i)], { ...opts, settings: plan.settings });
        check(r.rowsArray, r.fields, id(i));
      },
      'read view, bound in its Sync + guard': async (i: number) => {
        const r = await c.read(plan.sql, [id(i)], { ...opts, settings: plan.settings, guard });
        if (r.guardTripped) throw new Error('the guard tripped');
        check(r.rowsArray, r.fields, id(i));
      },
    };
    // Warm-up: the connection open, every statement prepared, generic plans chosen.
    for (const f of Object.values(readSides)) for (let i = 0; i < 200; i++) await f(i);
    console.log(`\nthe read (${calls} calls per round, 1 connection, concurrency 1):`);
    const readRes = await alternate(readSides, rounds, calls, src.db.name);

    // The pipeline: the same connector, both identities, nothing cached but the analysis.
    const store = new MemoryGovernanceStore();
    store.sources.set('chinook', { id: 'chinook', type: 'postgres', name: 'chinook', enabled: true, settings: src.settings() as unknown as Record<string, unknown> });
    store.grants.push({ identityId: 'ruled', ...ruled[0] }, { identityId: 'unruled', ...unruled[0] });
    const handler = queryHandler({
      store,
      connectors: { reader: () => c },
      rateLimiter: { consume: async () => ({ ok: true as const }) },
      cache: new ResultCache({ ttlMs: 0, maxBytes: 0 }),
      catalog: async () => catalog,
      maskSecret: 'bench',
      analysisCache: new AnalysisCache(),
      rowViews: rowViewProvisioner(async (_s, sql) => void (await src.admin.query(sql))),
    });
    const call = async (who: 'ruled' | 'unruled', i: number) => {
      const ctx = { requestId: `b${i}`, apiKey: null, identity: { id: who, name: who, keyId: 'k', ...(who === 'ruled' ? { attributes } : {}) }, dialect: 'modern', protocolVersion: '2025-11-25', toolName: 'interlock_query', canonicalTool: 'interlock_query', signal: new AbortController().signal, auditDetails: {} } as unknown as ToolCallContext;
      const o = await handler({ source_id: 'chinook', sql: POINT_SQL, params: [id(i)], max_rows: 100 }, ctx);
      const rows = o.kind === 'result' ? (o.structuredContent as { rows: unknown[] }).rows : null;
      if (!rows || rows.length !== 1 || JSON.stringify(rows[0]) !== expected.get(id(i))) throw new Error(`${who}: track ${id(i)}: unexpected answer ${JSON.stringify(o).slice(0, 300)}`);
    };
    const pipelineSides = { 'pipeline unruled': (i: number) => call('unruled', i), 'pipeline ruled': (i: number) => call('ruled', i) };
    for (const f of Object.values(pipelineSides)) for (let i = 0; i < 200; i++) await f(i);
    console.log(`\nthe pipeline (${calls} calls per round, 1 connection, concurrency 1):`);
    const pipeRes = await alternate(pipelineSides, rounds, calls, src.db.name);

    console.log('\nplanning:');
    console.log(summary(planRes, false));
    console.log('\nthe read:');
    console.log(summary(readRes, true));
    console.log('\nthe pipeline:');
    console.log(summary(pipeRes, true));
    console.log(machineLine());
  } finally {
    await c.close();
    await src.drop();
  }
}

runBench(main);
