/**
 * The source layer's own CPU per point read (issue 28 item 3, "the source layer over plain pg"): in
 * one process, closed loops of BENCH_CONCURRENCY (default 8) workers run BENCH_OPS (default 4,000)
 * point reads per side and round on a small table of its own database, and the process's CPU
 * (process.cpuUsage, user + system) per read is taken for each side:
 *  - `pg`: a plain pg.Pool (same pool size) running the same named statement (`client.query({ name,
 *    text, values })` after `pool.connect()`), rows as pg decodes them — the floor;
 *  - `after`: PostgresSourceConnector.read of this checkout's dist/ (identity slots, circuit breaker,
 *    pool checkout, wire budget, portal read with value decoding and byte cap, release);
 *  - `before`: the same from `BEFORE_ROOT/dist` when given.
 * Sides alternate within each round (order reversed every other round), BENCH_ROUNDS (default 7)
 * rounds, medians printed with the range, with the source database's backend CPU per read beside
 * each (/proc, 10 ms ticks). `BENCH_GUARD=1` adds `after+guard` (and `before+guard`): the read with
 * the live hierarchy guard for `track` (hierarchy.ts standaloneGuard), as an uncached governed
 * point read of a hierarchy-checked caller sends it (issue 28, h28x). Both trees must be built
 * (`npm run -s build`). Run: `BEFORE_ROOT=/path/to/built/checkout npx tsx bench/source-layer.ts`.
 *
 * `BENCH_PARTS=1` times the read's pieces apart instead (h28s), each in a sequential loop of
 * BENCH_PARTS_OPS (default 50,000) awaited operations, process CPU per operation in ns, sides
 * alternating per piece and round (BENCH_ROUNDS):
 *  - `breaker run`: SourceBreaker.run of a function returning an already-resolved promise (the
 *    breaker's own cost per call: opossum's fire() or what replaced it, and the promises around it);
 *  - `await only`: the same function awaited without the breaker (the reference for the line above);
 *  - `pool checkout+release`: SourcePools.checkout('reader') of an idle connection, then release();
 *  - `pg-pool bare`: pg.Pool's callback connect + release on an idle connection without a
 *    connection timeout (pg-pool's own floor; the line above arms one timer per checkout, as the
 *    connect-timeout guarantee needs, plus the idle timer per release);
 *  - `identity slot`: IdentitySlots.tryAcquire + release (the fair share's free-slot path).
 */
import path from 'node:path';
import pg from 'pg';
import { CpuMeter } from './lib/cpu';
import { ROOT } from './lib/env';
import { envInt, machineLine, table } from './lib/stats';

const DB = `interlock_bench_source_layer_${process.pid}`;
const SQL = 'SELECT id, name, album_id, genre_id, composer, milliseconds, unit_price FROM track WHERE id = $1';
const ROWS = 512;

type Reader = (id: number) => Promise<unknown>;

interface Side {
  name: string;
  read: Reader;
  close(): Promise<void>;
}

const conn = { host: process.env.PGHOST ?? '127.0.0.1', port: Number(process.env.PGPORT ?? 5432), user: process.env.PGUSER ?? 'root' };

/** A read guard (portal-read.ts ReadGuard). */
type Guard = { text: string; values: string[] };

/** A connector side built from the compiled tree at `root`; `guard`: the read carries it (the live hierarchy guard, issue 23). */
function connectorSide(name: string, root: string, poolSize: number, guard?: Guard, sql = SQL): Side {
  const { PostgresSourceConnector } = require(path.join(root, 'dist', 'src', 'sources', 'postgres', 'connector.js')) as {
    PostgresSourceConnector: new (id: string, s: unknown) => { read(sql: string, p: unknown[], o: unknown): Promise<unknown>; close(): Promise<void> };
  };
  const c = new PostgresSourceConnector('bench', { ...conn, database: DB, reader: { user: conn.user }, pool_size: poolSize, max_concurrent_per_identity: poolSize });
  return { name, read: (id) => c.read(sql, [id], { maxRows: 100, maxBytes: 4 * 1024 * 1024, identityId: 'bench-identity', ...(guard ? { guard } : {}) }), close: () => c.close() };
}

/** The floor: a plain pg pool and a named statement. */
function pgSide(poolSize: number): Side {
  const pool = new pg.Pool({ ...conn, database: DB, max: poolSize });
  pool.on('error', () => undefined); // idle connections ended by the final DROP DATABASE … WITH (FORCE)
  return {
    name: 'pg',
    read: async (id) => {
      const client = await pool.connect();
      try {
        return (await client.query({ name: 'point', text: SQL, values: [id] })).rows;
      } finally {
        client.release();
      }
    },
    close: () => pool.end(),
  };
}

/** The guard a pipeline read of `track` carries, from the compiled tree at `root` (hierarchy.ts standaloneGuard). */
function guardOf(root: string): Guard {
  const { standaloneGuard } = require(path.join(root, 'dist', 'src', 'sources', 'postgres', 'hierarchy.js')) as { standaloneGuard(r: Array<{ schema: string; name: string }>): Guard };
  return standaloneGuard([{ schema: 'public', name: 'track' }]);
}

/** CPU µs per read of `ops` reads by `c` closed-loop workers: this process's, and the source database's backends' (`db`). */
async function measure(side: Side, ops: number, c: number): Promise<{ own: number; db: number }> {
  let next = 0;
  const worker = async () => {
    while (next < ops) {
      const id = 1 + ((next++ * 7919) % ROWS);
      await side.read(id);
    }
  };
  const meter = new CpuMeter({ db: { databases: [DB] } });
  await meter.start();
  const u0 = process.cpuUsage();
  await Promise.all(Array.from({ length: c }, worker));
  const u = process.cpuUsage(u0);
  const db = (await meter.stop()).db;
  await meter.close();
  return { own: (u.user + u.system) / ops, db: (db * 1000) / ops };
}

/** One piece of the read: runs `n` operations sequentially. */
type Part = (n: number) => Promise<void>;

/** The read's pieces from the compiled tree at `root` (BENCH_PARTS=1); `close` ends its pool. */
function partsOf(root: string): { parts: Record<string, Part>; close(): Promise<void> } {
  const load = (rel: string) => require(path.join(root, 'dist', 'src', 'sources', 'postgres', rel)) as Record<string, unknown>;
  const { SourceBreaker } = load('breaker.js') as { SourceBreaker: new (name: string, threshold: number, reset: number, map: (e: unknown) => Error) => { run<T>(fn: () => Promise<T>): Promise<T>; shutdown(): void } };
  const { SourcePools } = load('pools.js') as { SourcePools: new (s: unknown, ssl: false, id: string, fail: (e: unknown) => Error) => { checkout(k: 'reader'): Promise<{ release(e?: unknown): void }>; close(): Promise<void> } };
  const { IdentitySlots } = load('fair-share.js') as { IdentitySlots: new (cap: number, waitMs: number) => { tryAcquire(id: string): (() => void) | null } };
  const { resolveSettings } = load('settings.js') as { resolveSettings: (s: unknown) => unknown };
  const breaker = new SourceBreaker('bench', 5, 30_000, (e) => e as Error);
  const pools = new SourcePools(resolveSettings({ ...conn, database: DB, reader: { user: conn.user }, pool_size: 5 }), false, 'bench', (e) => e as Error);
  const slots = new IdentitySlots(5, 0);
  const done = Promise.resolve(1);
  const ok = () => done;
  let sink = 0;
  return {
    parts: {
      'breaker run': async (n) => {
        for (let i = 0; i < n; i++) sink += await breaker.run(ok);
      },
      'await only': async (n) => {
        for (let i = 0; i < n; i++) sink += await ok();
      },
      'pool checkout+release': async (n) => {
        for (let i = 0; i < n; i++) (await pools.checkout('reader')).release();
      },
      'identity slot': async (n) => {
        for (let i = 0; i < n; i++) {
          const release = slots.tryAcquire('bench-identity');
          if (release) release();
          else sink++;
        }
      },
    },
    close: async () => {
      breaker.shutdown();
      await pools.close();
      if (sink < 0) console.log(sink);
    },
  };
}

/** pg-pool's own checkout + release on an idle connection (callback form, no connection timeout): the floor of the pool piece. */
function pgPoolPart(): { part: Part; close(): Promise<void> } {
  const pool = new pg.Pool({ ...conn, database: DB, max: 5 });
  pool.on('error', () => undefined);
  const once = () =>
    new Promise<void>((resolve, reject) =>
      pool.connect((err, c) => {
        if (err || !c) return reject(err);
        c.release();
        resolve();
      }),
    );
  return {
    part: async (n) => {
      for (let i = 0; i < n; i++) await once();
    },
    close: () => pool.end(),
  };
}

/** BENCH_PARTS=1: the pieces of both trees, ns of process CPU per operation, medians of `rounds`. */
async function runParts(before: string | null, rounds: number): Promise<void> {
  const ops = envInt('BENCH_PARTS_OPS', 50_000);
  console.log(`# source layer pieces: process CPU ns per operation, sequential, ${rounds} rounds × ${ops} ops`);
  console.log(machineLine());
  const sides: Array<{ name: string; parts: Record<string, Part>; close(): Promise<void> }> = [];
  if (before) sides.push({ name: 'before', ...partsOf(before) });
  sides.push({ name: 'after', ...partsOf(ROOT) });
  const bare = pgPoolPart();
  try {
    const names = [...Object.keys(sides[sides.length - 1].parts), 'pg-pool bare'];
    const partOf = (side: (typeof sides)[number], n: string): Part => (n === 'pg-pool bare' ? bare.part : side.parts[n]);
    const cpu = async (part: Part, n: number) => {
      const u0 = process.cpuUsage();
      await part(n);
      const u = process.cpuUsage(u0);
      return ((u.user + u.system) * 1000) / n;
    };
    for (const side of sides) for (const n of names) await cpu(partOf(side, n), ops / 5); // warm-up: JIT, connections
    const got = new Map<string, number[]>();
    for (let r = 0; r < rounds; r++) {
      for (const n of names) {
        const order = r % 2 ? [...sides].reverse() : sides;
        for (const side of order) {
          const k = `${side.name}\u0000${n}`;
          got.set(k, [...(got.get(k) ?? []), await cpu(partOf(side, n), ops)]);
        }
      }
    }
    const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    const cell = (side: string, n: string) => {
      const xs = got.get(`${side}\u0000${n}`);
      return xs ? `${med(xs).toFixed(0)} (${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)})` : '';
    };
    const ratio = (n: string) => {
      const a = got.get(`after\u0000${n}`);
      const b = got.get(`before\u0000${n}`);
      if (!a || !b) return '';
      const rs = a.map((x, i) => x / b[i]).sort((p, q) => p - q);
      return `${rs[Math.floor(rs.length / 2)].toFixed(2)}×`;
    };
    console.log(table(['piece', 'before ns/op (range)', 'after ns/op (range)', 'after ÷ before (paired)'], names.map((n) => [n, cell('before', n), cell('after', n), ratio(n)])));
    console.log(machineLine());
  } finally {
    for (const s of sides) await s.close().catch(() => undefined);
    await bare.close().catch(() => undefined);
  }
}

async function main(): Promise<void> {
  const ops = envInt('BENCH_OPS', 4000);
  const rounds = envInt('BENCH_ROUNDS', 7);
  const c = envInt('BENCH_CONCURRENCY', 8);
  const poolSize = 5;
  const before = process.env.BEFORE_ROOT ? path.resolve(process.env.BEFORE_ROOT) : null;
  console.log(`# source layer: CPU µs per point read in process, c=${c}, ${rounds} rounds × ${ops} reads per side`);
  console.log(machineLine());
  const admin = new pg.Client({ ...conn, database: 'postgres' });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${DB}`);
  const sides: Side[] = [];
  try {
    const setup = new pg.Client({ ...conn, database: DB });
    await setup.connect();
    await setup.query('CREATE TABLE track (id int PRIMARY KEY, name text NOT NULL, album_id int, genre_id int, composer text, milliseconds int NOT NULL, unit_price numeric(10,2) NOT NULL)');
    await setup.query(`INSERT INTO track SELECT i, 'Track number ' || i, i % 300, i % 25, CASE WHEN i % 3 = 0 THEN NULL ELSE 'Composer ' || i END, 200000 + i, 0.99 FROM generate_series(1, ${ROWS}) i`);
    await setup.end();
    if (process.env.BENCH_PARTS === '1') return await runParts(before, rounds);
    sides.push(pgSide(poolSize));
    if (before) sides.push(connectorSide('before', before, poolSize));
    sides.push(connectorSide('after', ROOT, poolSize));
    if (process.env.BENCH_GUARD === '1') {
      // The read as an uncached governed point read sends it when the caller is hierarchy-checked.
      if (before) sides.push(connectorSide('before+guard', before, poolSize, guardOf(before)));
      sides.push(connectorSide('after+guard', ROOT, poolSize, guardOf(ROOT)));
    }
    // Candidate guards to compare (JSON: one {"text", "values"} or an array of them), e.g. while designing a cheaper one.
    if (process.env.BENCH_GUARD_ALT) {
      const alts = ([] as Guard[]).concat(JSON.parse(process.env.BENCH_GUARD_ALT) as Guard | Guard[]);
      alts.forEach((g, i) => sides.push(connectorSide(`after+alt${i + 1}`, ROOT, poolSize, g)));
    }
    // A candidate statement text for the same read (its $1 the track id), run without a guard: e.g. the
    // read with the hierarchy check folded into it, to compare with after+guard's two statements.
    if (process.env.BENCH_SQL_ALT) sides.push(connectorSide('after+sqlalt', ROOT, poolSize, undefined, process.env.BENCH_SQL_ALT));
    for (const s of sides) await measure(s, ops, c); // warm-up: JIT, connections, prepared statements
    const got = new Map<string, number[]>(sides.map((s) => [s.name, []]));
    const gotDb = new Map<string, number[]>(sides.map((s) => [s.name, []]));
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 ? [...sides].reverse() : sides;
      for (const s of order) {
        const m = await measure(s, ops, c);
        got.get(s.name)!.push(m.own);
        gotDb.get(s.name)!.push(m.db);
      }
    }
    const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    const floor = med(got.get('pg')!);
    const dbFloor = med(gotDb.get('pg')!);
    const range = (xs: number[]) => `${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)}`;
    console.log(table(['side', 'µs/read (median)', 'range', 'above pg', 'source DB µs/read', 'range', 'above pg'], sides.map((s) => {
      const xs = got.get(s.name)!;
      const ds = gotDb.get(s.name)!;
      const isPg = s.name === 'pg';
      return [s.name, med(xs).toFixed(1), range(xs), isPg ? '' : (med(xs) - floor).toFixed(1), med(ds).toFixed(1), range(ds), isPg ? '' : (med(ds) - dbFloor).toFixed(1)];
    })));
    const paired = (a: string, b: string, m: Map<string, number[]>, what: string) => {
      if (!m.has(a) || !m.has(b)) return;
      const ratios = m.get(a)!.map((x, i) => x / m.get(b)![i]).sort((p, q) => p - q);
      console.log(`${what}, ${a} ÷ ${b}, paired by round: median ${ratios[Math.floor(ratios.length / 2)].toFixed(3)}× (rounds ${ratios[0].toFixed(2)}–${ratios[ratios.length - 1].toFixed(2)})`);
    };
    paired('after', 'before', got, 'process CPU');
    paired('after+guard', 'before+guard', got, 'process CPU');
    paired('after+guard', 'before+guard', gotDb, 'source DB CPU');
    console.log(machineLine());
  } finally {
    for (const s of sides) await s.close().catch(() => undefined);
    await admin.query(`DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`);
    await admin.end();
  }
}

void main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
