/**
 * What the live hierarchy check (issue 22 item 1) adds to a point read, in-process, same run
 * (issue 23's bench 01 item): one PostgresSourceConnector on a Chinook source, calls of
 * - `read`: the point read alone (a caller without denies or masks);
 * - `walk`: the recursive pg_inherits walk (HIERARCHY_SQL), then the read (main before issue 23);
 * - `probe`: the standalone probe (standaloneProbeSql) as its own round trip, then the read;
 * - `guard`: the read carrying the probe as its guard, one round trip (this change's common case).
 * Alternating rounds; prints calls per second and CPU milliseconds per call of this process (the
 * gateway's share) and of the source database's backends. Noisy on a shared machine: compare the
 * sides of one run. Run: `npx tsx bench/hierarchy-check.ts` (BENCH_CALLS per round, default 2000;
 * BENCH_ROUNDS, default 3; BENCH_CONCURRENCY, default 4).
 */
import { PostgresSourceConnector } from '../src/sources/postgres/connector';
import { createSourceDb } from '../test/integration/sources/source-db';
import { CpuMeter } from './lib/cpu';
import { envInt, machineLine, table } from './lib/stats';
import { POINT_SQL, TRACKS } from './lib/point-read';

type Mode = 'read' | 'walk' | 'probe' | 'guard';
const MODES: Mode[] = ['read', 'walk', 'probe', 'guard'];

async function main(): Promise<void> {
  const calls = envInt('BENCH_CALLS', 2000);
  const rounds = envInt('BENCH_ROUNDS', 3);
  const conc = envInt('BENCH_CONCURRENCY', 4);
  console.log(`# hierarchy check cost per point read: ${calls} calls × ${rounds} rounds per side, concurrency ${conc}`);
  console.log(machineLine());
  const src = await createSourceDb('bench_hier');
  const c = new PostgresSourceConnector('chinook', src.settings({ pool_size: conc + 1, max_concurrent_per_identity: conc }));
  const track = [{ schema: 'public', name: 'track' }];
  const one = async (mode: Mode, i: number) => {
    if (mode === 'walk' || mode === 'probe') await c.relationTrees(track, { identityId: 'bench', probe: mode === 'probe' });
    const r = await c.read(POINT_SQL, [1 + (i % TRACKS)], { maxRows: 100, maxBytes: 4 * 1024 * 1024, identityId: 'bench', ...(mode === 'guard' ? { guard: c.standaloneGuard(track) } : {}) });
    if (r.guardTripped || r.rowsArray.length !== 1) throw new Error('unexpected answer');
  };
  const totals: Record<Mode, { ms: number; gw: number; db: number; n: number }[]> = { read: [], walk: [], probe: [], guard: [] };
  try {
    // Warm-up: every connection opened, statements prepared, generic plans chosen.
    for (const mode of MODES) await Promise.all(Array.from({ length: conc }, async (_, w) => { for (let i = 0; i < 50; i++) await one(mode, w * 50 + i); }));
    for (let r = 0; r < rounds; r++) {
      const order: Mode[] = r % 2 === 0 ? MODES : [...MODES].reverse();
      for (const mode of order) {
        const meter = new CpuMeter({ gw: { self: true }, db: { databases: [src.db.name] } });
        await meter.start();
        const t0 = process.hrtime.bigint();
        let next = 0;
        await Promise.all(Array.from({ length: conc }, async () => { while (next < calls) await one(mode, next++); }));
        const ms = Number(process.hrtime.bigint() - t0) / 1e6;
        const cpu = await meter.stop();
        await meter.close();
        totals[mode].push({ ms, gw: cpu.gw, db: cpu.db, n: calls });
        console.log(`  round ${r + 1}/${rounds} ${mode}: ${Math.round((calls * 1000) / ms)} calls/s, gateway ${(cpu.gw / calls).toFixed(3)} ms/call, source DB ${(cpu.db / calls).toFixed(3)} ms/call`);
      }
    }
  } finally {
    await c.close();
    await src.drop();
  }
  const rows = MODES.map((m) => {
    const t = totals[m];
    const per = (f: (x: (typeof t)[number]) => number) => t.map((x) => f(x) / x.n);
    const range = (v: number[], d: number) => `${Math.min(...v).toFixed(d)}–${Math.max(...v).toFixed(d)}`;
    return [m, range(t.map((x) => (x.n * 1000) / x.ms), 0), range(per((x) => x.gw), 3), range(per((x) => x.db), 3)];
  });
  console.log(table(['side', 'calls/s (range)', 'gateway CPU ms/call', 'source DB CPU ms/call'], rows));
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
