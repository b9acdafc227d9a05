/**
 * Scenario 12 (issue 27, docs/row-rules.md): what a row rule costs a point read. Two identities on
 * the same gateway child read Chinook's track by primary key (POINT_SQL, uncached: cache time to
 * live 1 ms, ids uniform over every track) through interlock_query over POST /mcp:
 *
 * - `unruled`: its role allows `public.track` with no `rows`;
 * - `ruled`: its role allows `public.track` with `rows: "genre_id = ANY(identity.genres)"` and its
 *   `genres` attribute lists every genre, so it reads the same rows through InterLock's row view
 *   (the attribute bound by `set_config(…, true)` in the read's own round trip, the view's WHERE,
 *   the rewrite in the gateway, cached per statement).
 *
 * The sides alternate at each concurrency, round after round (`interleave`), and every answer must
 * be exactly the expected row (the row `pg` returns for that id, compared as JSON), or the run
 * fails. Before timing, a third identity with the same role and one genre checks that the rule is
 * really applied (a track of another genre reads as no row). Target: ruled calls/s ≥ 0.9× unruled.
 *
 * Unless BENCH_DIAGNOSE=0, a second interleave measures the database side alone with `pg` from the
 * bench process, on a pool as large as the gateway's reader pool: the point read on the table, the
 * same read through the row view with the attribute bound once per connection, and through the
 * view with the attribute bound by one `set_config` query before every read (what the gateway's
 * reader did before it bound in the statement's own Sync; `pg` cannot send both in one round trip:
 * bench/12-row-rules-cpu.ts measures the reader's own binding in process).
 *
 * With BEFORE_ROOT (another checkout, e.g. an extracted `git archive` of main with node_modules
 * linked), a second gateway from that checkout serves the same two identities on the same control
 * and source databases, as sides `before unruled` and `before ruled` alternating with the others:
 * a before/after comparison in one run, which a shared machine's drifting load skews less.
 *
 * Run: `npx tsx bench/12-row-rules.ts` (BENCH_SECONDS, BENCH_WARMUP_SECONDS, BENCH_ROUNDS (3),
 * BENCH_CONCURRENCY (1,8), BENCH_DIAGNOSE, BEFORE_ROOT).
 */
import pg from 'pg';
import path from 'node:path';
import { interleave, closedLoop, type LoadFigures, type LoadRun } from './lib/load';
import { McpHttpClient, structuredResult } from './lib/http';
import { concurrencyLevels, emitResult, envInt, envSeconds, machineLine, ratio, round, table } from './lib/stats';
import { gatewayVars, startServe, withBenchEnv, type BenchEnv } from './lib/env';
import { CpuLedger, POINT_SQL, pointReadMeter, SOURCE_POOL_SIZE } from './lib/point-read';
import type { ControlDb } from '../src/control/db';
import { createIdentity, setIdentityAttributes } from '../src/control/identities';
import { upsertRole } from '../src/control/roles';
import { grantRole } from '../src/control/grants';
import { createApiKey } from '../src/control/keys';
import { attributeListText, LIST_SETTING_PREFIX } from '../src/sql/row-rules/predicate';

/** The row rule of the ruled side. */
const RULE = 'genre_id = ANY(identity.genres)';
/** What the gateway's reader sent before a ruled statement until it bound in the statement's own Sync (src/sources/postgres/portal-read.ts BIND_SETTINGS_SQL). */
const BIND_SETTINGS = 'SELECT pg_catalog.set_config(s.name, s.value, false) FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) AS s(name, value)';

/** Creates an identity holding one role (created or replaced here: upsert) on `chinook`, with `attributes`; returns its API key. */
async function benchIdentity(db: ControlDb, name: string, role: { name: string; rows?: string }, attributes?: Record<string, unknown>): Promise<string> {
  const idn = await createIdentity(db, name);
  await upsertRole(db, { name: role.name, statements: [{ effect: 'allow', action: 'read', resource: 'public.track', ...(role.rows ? { rows: role.rows } : {}) }] });
  await grantRole(db, { identityId: idn.id, roleName: role.name, sourceId: 'chinook' });
  if (attributes) await setIdentityAttributes(db, name, attributes);
  return (await createApiKey(db, idn.id)).secret;
}

/** The expected answers: every track's row as `pg` returns it (JSON text), by track id. */
async function expectedRows(env: BenchEnv): Promise<Map<number, string>> {
  const c = new pg.Client(env.reader);
  await c.connect();
  try {
    const r = await c.query<Record<string, unknown>>(POINT_SQL.replace('WHERE track_id = $1', 'ORDER BY track_id'));
    return new Map(r.rows.map((row) => [Number(row.track_id), JSON.stringify(row)]));
  } finally {
    await c.end();
  }
}

/** One answer of interlock_query: its rows (throws on an error answer). */
async function callPoint(client: McpHttpClient, id: number, sql = POINT_SQL): Promise<{ rows: Array<Record<string, unknown>>; rowCount: unknown; cached: boolean }> {
  const sc = structuredResult(await client.callTool('interlock_query', { source_id: 'chinook', sql, params: sql === POINT_SQL ? [id] : [] }));
  return { rows: (sc.rows as Array<Record<string, unknown>>) ?? [], rowCount: sc.row_count, cached: sc.cached === true };
}

/** Throws unless `rows` is exactly the one expected row of track `id`. */
function checkAnswer(rows: Array<Record<string, unknown>>, id: number, expected: Map<number, string>, who: string): void {
  if (rows.length !== 1 || JSON.stringify(rows[0]) !== expected.get(id)) throw new Error(`${who}: track ${id}: expected exactly ${expected.get(id)}, got ${JSON.stringify(rows).slice(0, 300)}`);
}

/** Closed-loop interlock_query point reads with `apiKey`; every answer must be the expected row (strict: one wrong answer fails the run). */
async function runPointReads(url: string, apiKey: string, who: string, c: number, ids: number[], expected: Map<number, string>, opts: { durationMs: number; warmupMs: number }, counts: { cached: number; checked: number }): Promise<LoadRun> {
  const client = new McpHttpClient(url, { apiKey, maxSockets: c });
  try {
    return await closedLoop({
      concurrency: c,
      durationMs: opts.durationMs,
      warmupMs: opts.warmupMs,
      strict: true,
      op: async () => {
        const id = ids[Math.floor(Math.random() * ids.length)];
        const a = await callPoint(client, id);
        if (a.rowCount !== 1) throw new Error(`${who}: track ${id}: row_count ${String(a.rowCount)}`);
        checkAnswer(a.rows, id, expected, who);
        counts.checked++;
        if (a.cached) counts.cached++;
      },
    });
  } finally {
    client.close();
  }
}

/** Checks, before timing, that both sides answer alike and that the rule is applied (a one-genre identity sees only its genre); returns what the one-genre identity saw. Throws on any difference. */
async function preflight(url: string, keys: { unruled: string; ruled: string; oneGenre: string }, genreOf: Map<number, number>, expected: Map<number, string>, oneGenre: number): Promise<string> {
  const clients = Object.fromEntries(Object.entries(keys).map(([k, v]) => [k, new McpHttpClient(url, { apiKey: v, maxSockets: 1 })])) as Record<keyof typeof keys, McpHttpClient>;
  try {
    for (const id of [1, 42, 3503]) {
      checkAnswer((await callPoint(clients.unruled, id)).rows, id, expected, 'unruled');
      checkAnswer((await callPoint(clients.ruled, id)).rows, id, expected, 'ruled');
    }
    const count = 'SELECT count(*)::int AS n FROM track';
    for (const side of ['unruled', 'ruled'] as const) {
      const n = (await callPoint(clients[side], 0, count)).rows[0]?.n;
      if (n !== expected.size) throw new Error(`${side}: count(*) of track is ${String(n)}, expected ${expected.size}`);
    }
    const inGenre = [...genreOf].filter(([, g]) => g === oneGenre).map(([id]) => id);
    const other = [...genreOf].find(([, g]) => g !== oneGenre)![0];
    checkAnswer((await callPoint(clients.oneGenre, inGenre[0])).rows, inGenre[0], expected, 'one-genre');
    const hidden = await callPoint(clients.oneGenre, other);
    if (hidden.rows.length !== 0) throw new Error(`the rule is not applied: the one-genre identity read track ${other} of genre ${genreOf.get(other)}`);
    const n = (await callPoint(clients.oneGenre, 0, count)).rows[0]?.n;
    if (n !== inGenre.length) throw new Error(`the rule is not applied: the one-genre identity counts ${String(n)} tracks, expected ${inGenre.length}`);
    return `the one-genre identity (genre ${oneGenre}) read track ${other} (genre ${genreOf.get(other)}) as no row and counted ${inGenre.length} of ${expected.size} tracks`;
  } finally {
    for (const c of Object.values(clients)) c.close();
  }
}

/** Ratio table of ruled against unruled at each concurrency. */
function report(levels: number[], un: Map<number, LoadFigures>, ru: Map<number, LoadFigures>): { text: string; rows: Array<Record<string, number>> } {
  const rows = levels.map((c) => {
    const u = un.get(c)!;
    const r = ru.get(c)!;
    return {
      concurrency: c,
      unruled_calls_s: round(u.throughput, 0),
      ruled_calls_s: round(r.throughput, 0),
      ratio: round(r.throughput / u.throughput, 3),
      unruled_p50_ms: round(u.latency.p50, 3),
      ruled_p50_ms: round(r.latency.p50, 3),
      unruled_p99_ms: round(u.latency.p99, 3),
      ruled_p99_ms: round(r.latency.p99, 3),
      added_mean_ms: round(r.latency.mean - u.latency.mean, 3),
      unruled_calls: u.ops,
      ruled_calls: r.ops,
    };
  });
  const ms = (x: number) => `${x.toFixed(2)} ms`;
  const text = table(
    ['conc', 'unruled calls/s', 'ruled calls/s', 'ruled/unruled', 'unruled p50', 'ruled p50', 'unruled p99', 'ruled p99', '+mean'],
    rows.map((r) => [String(r.concurrency), String(r.unruled_calls_s), String(r.ruled_calls_s), ratio(r.ratio), ms(r.unruled_p50_ms), ms(r.ruled_p50_ms), ms(r.unruled_p99_ms), ms(r.ruled_p99_ms), ms(r.added_mean_ms)]),
  );
  return { text, rows };
}

/**
 * The database side alone: the point read with `pg` on the table, through the row view with the
 * attribute bound once per connection, and through the view bound per read. Returns the pooled
 * figures by side, or null when the view is not found.
 */
async function diagnose(env: BenchEnv, genres: number[], ids: number[], expected: Map<number, string>, levels: number[], rounds: number, ledger: CpuLedger, meter: ReturnType<typeof pointReadMeter>, opts: { durationMs: number; warmupMs: number }): Promise<Map<string, Map<number, LoadFigures>> | null> {
  const su = new pg.Client({ connectionString: env.sourceUrl });
  await su.connect();
  const setting = `${LIST_SETTING_PREFIX}genres`;
  let view: string | undefined;
  try {
    const v = await su.query<{ viewname: string; definition: string }>("SELECT viewname, definition FROM pg_views WHERE schemaname = 'interlock_rows'");
    view = v.rows.find((x) => x.viewname.startsWith('track') && x.definition.includes(setting))?.viewname;
  } finally {
    await su.end();
  }
  if (!view) {
    console.log(`diagnostic skipped: no row view of track reading ${setting} in schema interlock_rows`);
    return null;
  }
  const value = attributeListText(genres)!;
  const viewSql = POINT_SQL.replace('FROM track', `FROM interlock_rows."${view}" AS "track"`);
  const plain = new pg.Pool({ ...env.reader, max: SOURCE_POOL_SIZE, application_name: 'interlock-bench-direct' });
  const boundOnce = new pg.Pool({ ...env.reader, max: SOURCE_POOL_SIZE, application_name: 'interlock-bench-direct-view' });
  const bound = new WeakSet<pg.PoolClient>();
  const loop = (c: number, read: (id: number) => Promise<Array<Record<string, unknown>>>, who: string) =>
    closedLoop({
      concurrency: c,
      ...opts,
      strict: true,
      op: async () => {
        const id = ids[Math.floor(Math.random() * ids.length)];
        checkAnswer(await read(id), id, expected, who);
      },
    });
  try {
    console.log(`\ndiagnostic — pg direct as the reader role (pool ${SOURCE_POOL_SIZE}), view interlock_rows."${view}":`);
    return await interleave(
      [
        { name: 'pg table', run: (c) => ledger.metered(meter, 'pg table', c, () => loop(c, async (id) => (await plain.query(POINT_SQL, [id])).rows, 'pg table')) },
        {
          name: 'pg view, bound once',
          run: (c) =>
            ledger.metered(meter, 'pg view, bound once', c, () =>
              loop(
                c,
                async (id) => {
                  const cl = await boundOnce.connect();
                  try {
                    if (!bound.has(cl)) {
                      await cl.query(BIND_SETTINGS, [[setting], [value]]);
                      bound.add(cl);
                    }
                    return (await cl.query(viewSql, [id])).rows;
                  } finally {
                    cl.release();
                  }
                },
                'pg view, bound once',
              ),
            ),
        },
        {
          name: 'pg view, bound per read',
          run: (c) =>
            ledger.metered(meter, 'pg view, bound per read', c, () =>
              loop(
                c,
                async (id) => {
                  const cl = await plain.connect();
                  try {
                    await cl.query(BIND_SETTINGS, [[setting], [value]]);
                    return (await cl.query(viewSql, [id])).rows;
                  } finally {
                    cl.release();
                  }
                },
                'pg view, bound per read',
              ),
            ),
        },
      ],
      levels,
      rounds,
      (l) => console.log(l),
    );
  } finally {
    await plain.end();
    await boundOnce.end();
  }
}

async function main(): Promise<void> {
  const durationMs = envSeconds('BENCH_SECONDS', 4);
  const warmupMs = envSeconds('BENCH_WARMUP_SECONDS', 1);
  const rounds = envInt('BENCH_ROUNDS', 3);
  const levels = concurrencyLevels([1, 8]);
  const diag = process.env.BENCH_DIAGNOSE !== '0';
  console.log('# 12-row-rules: uncached point read on public.track, ruled (genre_id = ANY(identity.genres), every genre) vs unruled, same gateway');
  console.log(machineLine());
  console.log(`runs: ${rounds} rounds × concurrency ${levels.join(', ')} × ${durationMs / 1000} s (+${warmupMs / 1000} s warm-up), sides alternating`);
  await withBenchEnv({}, async (env) => {
    const expected = await expectedRows(env);
    const src = new pg.Client(env.reader);
    await src.connect();
    const genreOf = new Map((await src.query<{ track_id: number; genre_id: number }>('SELECT track_id, genre_id FROM track WHERE genre_id IS NOT NULL')).rows.map((r) => [r.track_id, r.genre_id]));
    const genres = (await src.query<{ genre_id: number }>('SELECT genre_id FROM genre ORDER BY genre_id')).rows.map((r) => r.genre_id);
    await src.end();
    // Both sides read the same rows: ids whose track has a genre (all of Chinook's).
    const ids = [...expected.keys()].filter((id) => genreOf.has(id));
    const oneGenre = genreOf.get(1)!;
    const keys = {
      unruled: await benchIdentity(env.db, 'bench-unruled', { name: 'bench-track' }),
      ruled: await benchIdentity(env.db, 'bench-ruled', { name: 'bench-track-ruled', rows: RULE }, { genres }),
      oneGenre: await benchIdentity(env.db, 'bench-ruled-one-genre', { name: 'bench-track-ruled', rows: RULE }, { genres: [oneGenre] }),
    };
    console.log(`tracks: ${expected.size} (${ids.length} with a genre, read by both sides); genres: ${genres.length}; rule "${RULE}"`);
    const beforeRoot = process.env.BEFORE_ROOT ? path.resolve(process.env.BEFORE_ROOT) : null;
    const gw = await startServe(gatewayVars(env.controlUrl, { cacheTtlMs: 1 }));
    const gwBefore = beforeRoot ? await startServe(gatewayVars(env.controlUrl, { cacheTtlMs: 1 }), undefined, beforeRoot).catch(async (err: unknown) => { await gw.stop(); throw err; }) : null;
    const meter = pointReadMeter(env, [gw.pid]);
    const meterBefore = gwBefore ? pointReadMeter(env, [gwBefore.pid]) : null;
    const ledger = new CpuLedger();
    try {
      const seen = await preflight(gw.url, keys, genreOf, expected, oneGenre);
      console.log(`preflight: both sides return the expected rows and count every track; ${seen}`);
      if (gwBefore) console.log(`preflight (before, ${beforeRoot}): ${await preflight(gwBefore.url, keys, genreOf, expected, oneGenre)}`);
      type SideName = 'unruled' | 'ruled' | 'before unruled' | 'before ruled';
      const sideList: SideName[] = gwBefore ? ['unruled', 'ruled', 'before unruled', 'before ruled'] : ['unruled', 'ruled'];
      const counts = Object.fromEntries(sideList.map((s) => [s, { cached: 0, checked: 0 }])) as Record<SideName, { cached: number; checked: number }>;
      const res = await interleave(
        sideList.map((side) => {
          const before = side.startsWith('before ');
          const key = keys[before ? (side.slice(7) as 'unruled' | 'ruled') : (side as 'unruled' | 'ruled')];
          const g = before ? gwBefore! : gw;
          return { name: side, run: (c: number) => ledger.metered(before ? meterBefore! : meter, side, c, () => runPointReads(g.url, key, side, c, ids, expected, { durationMs, warmupMs }, counts[side])) };
        }),
        levels,
        rounds,
        (l) => console.log(l),
      );
      const rep = report(levels, res.get('unruled')!, res.get('ruled')!);
      console.log('');
      console.log(rep.text);
      const repBefore = gwBefore ? report(levels, res.get('before unruled')!, res.get('before ruled')!) : null;
      if (repBefore) {
        console.log(`\nbefore (${beforeRoot}), same run:`);
        console.log(repBefore.text);
        for (const c of levels) console.log(`ruled calls/s, this checkout / before: c=${c}: ${ratio(res.get('ruled')!.get(c)!.throughput / res.get('before ruled')!.get(c)!.throughput)}`);
      }
      console.log(`answers checked equal to the expected row: ${sideList.map((s) => `${s} ${counts[s].checked}`).join(', ')} (served from the cache: ${sideList.map((s) => counts[s].cached).join(' / ')})`);
      let diagRes: Map<string, Map<number, LoadFigures>> | null = null;
      if (diag) diagRes = await diagnose(env, genres, ids, expected, levels, rounds, ledger, meter, { durationMs, warmupMs });
      let diagRows: Array<Record<string, number | string>> = [];
      if (diagRes) {
        const sides = [...diagRes.keys()];
        diagRows = levels.flatMap((c) => sides.map((s) => {
          const f = diagRes!.get(s)!.get(c)!;
          const base = diagRes!.get('pg table')!.get(c)!;
          return { concurrency: c, side: s, ops_s: round(f.throughput, 0), ratio_to_table: round(f.throughput / base.throughput, 3), p50_ms: round(f.latency.p50, 3), p99_ms: round(f.latency.p99, 3) };
        }));
        console.log(table(['conc', 'side', 'ops/s', 'ratio to table', 'p50', 'p99'], diagRows.map((r) => [String(r.concurrency), String(r.side), String(r.ops_s), ratio(Number(r.ratio_to_table)), `${Number(r.p50_ms).toFixed(3)} ms`, `${Number(r.p99_ms).toFixed(3)} ms`])));
      }
      const sides = [...sideList, ...(diagRes ? [...diagRes.keys()] : [])];
      console.log('\nCPU milliseconds per call (warm-up included; /proc and pg_stat_activity):');
      console.log(ledger.table(sides, levels));
      for (const r of rep.rows) console.log(`target c=${r.concurrency}: ruled calls/s ≥ 0.90× unruled: ${ratio(r.ratio)} → ${r.ratio >= 0.9 ? 'MET' : 'MISSED'}`);
      console.log(machineLine());
      const cpu = Object.fromEntries(levels.map((c) => [c, Object.fromEntries(sides.map((s) => [s, ledger.perOp(s, c)]))]));
      const busy = Object.fromEntries(levels.map((c) => [c, Object.fromEntries(sides.map((s) => [s, ledger.machineBusy(s, c)]))]));
      emitResult('12-row-rules', { rule: RULE, rounds, durationMs, warmupMs, rows: rep.rows, ...(repBefore ? { beforeRoot, beforeRows: repBefore.rows } : {}), checked: counts, diagnosticRows: diagRows, cpuMsPerCall: cpu, machineBusy: busy });
    } finally {
      await meter.close();
      await meterBefore?.close();
      await gw.stop();
      await gwBefore?.stop();
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
