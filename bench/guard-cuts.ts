/**
 * What cheaper read-guard texts save (issue 28, task h28g), in process on one pooled reader
 * connection: the point read `SELECT … FROM customer WHERE customer_id = $1` with its two guards —
 * the function guard of its analysis (the connector's `functionGuard`: `=` in `public`) and the
 * hierarchy guard of `customer` (hierarchy.ts `standaloneGuard`) — sent apart as a read sends them,
 * against candidate texts given here, variants alternating per round:
 *  - none: the statement alone;
 *  - base: the guards of src/ (whatever this checkout's src/ makes);
 *  - generic: base on a connection with `plan_cache_mode = force_generic_plan` (set before the
 *    variant's reads, reset after: a per-connection generic plan);
 *  - h-nsp: base's function guard, and the hierarchy guard with its pg_namespace join replaced by
 *    `pg_class.relnamespace = to_regnamespace(quote_ident(schema))` (the schema looked up by name in
 *    the syscache, as the statement's own name lookup does; no catalogue relation for it);
 *  - f-nsp: base's hierarchy guard, and the function guard's InitPlan over pg_namespace replaced by
 *    the same syscache lookup of each schema name (`ARRAY(SELECT to_regnamespace(…) FROM unnest(…))`);
 *  - both: h-nsp's hierarchy guard and f-nsp's function guard;
 *  - h-old: base's function guard and the hierarchy guard before task h28g (a pg_namespace join);
 *  - flat: both, for this one name and one relation without the VALUES list (and the function
 *    guard without its LATERAL join): fewer plan nodes;
 *  - fn-only, hier-only: base's function guard alone, its hierarchy guard alone (the split);
 *  - trivial2: two `SELECT 1 WHERE false` in the guards' places (what any two preludes cost).
 * BENCH_DECOY=1 adds a partitioned `other.customer`: a read whose guard trips then does what the
 * pipeline does (query.ts: the full check's probe, then the read again without the hierarchy guard).
 * Prints per round the wall µs per read and the source backend's CPU µs per read (/proc of the
 * connection's backend, user + system), the medians, and each variant ÷ base per round.
 * Run: `npx tsx bench/guard-cuts.ts [rounds] [reads] [variants,…]`.
 */
import { standaloneGuard } from '../src/sources/postgres/hierarchy';
import type { ReadGuard } from '../src/sources/postgres/portal-read';
import { initSqlParser } from '../src/sql/parser';
import { procCpuSplitMs } from './lib/cpu';
import { openGuardBench } from './lib/guard-bench';
import { runBench } from './lib/stats';

/** The hierarchy guard for one relation, its schema found by to_regnamespace (syscache), not a pg_namespace join. */
const H_NSP = `
SELECT 1
FROM (VALUES ($1::text, $2::text)) AS u(s, n)
JOIN pg_catalog.pg_class c ON c.relnamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(u.s))::oid AND c.relname = u.n
WHERE CASE WHEN c.relhassubclass OR c.relispartition
             OR (SELECT true FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid LIMIT 1)
      THEN 1 / (c.relnatts * 0) = 1 ELSE false END
`;

/** The hierarchy guard before task h28g (a join on pg_namespace; pg_class probed by relname alone, the CASE tested before the schema). */
const H_OLD = `
SELECT 1
FROM (VALUES ($1::text, $2::text)) AS u(s, n)
JOIN pg_catalog.pg_namespace ns ON ns.nspname = u.s
JOIN pg_catalog.pg_class c ON c.relnamespace = ns.oid AND c.relname = u.n
WHERE CASE WHEN c.relhassubclass OR c.relispartition
             OR (SELECT true FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid LIMIT 1)
      THEN 1 / (c.relnatts * 0) = 1 ELSE false END
`;

/** H_NSP without the VALUES list (one relation: its parameters compared directly). */
const H_FLAT = `
SELECT 1
FROM pg_catalog.pg_class c
WHERE c.relnamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident($1::text))::oid AND c.relname = $2::text
  AND CASE WHEN c.relhassubclass OR c.relispartition
             OR (SELECT true FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid LIMIT 1)
      THEN 1 / (c.relnatts * 0) = 1 ELSE false END
`;

/** The function guard of one absent operator name (`$1`, schemas `$2`) without the VALUES list and LATERAL join, schemas by to_regnamespace. */
const F_FLAT = `
SELECT 1
FROM (SELECT z.oprnamespace AS ns FROM pg_catalog.pg_operator z
      WHERE z.oprname = $1::name AND z.oprnamespace = ANY (ARRAY(SELECT pg_catalog.to_regnamespace(pg_catalog.quote_ident(s.s))::oid FROM pg_catalog.unnest($2::name[]) AS s(s)))
        AND z.oprnamespace <> 'pg_catalog'::regnamespace AND z.oprnamespace IS DISTINCT FROM pg_catalog.to_regnamespace('information_schema')
        AND NOT pg_catalog.pg_is_other_temp_schema(z.oprnamespace) AND z.oprnamespace <> pg_catalog.pg_my_temp_schema() LIMIT 1) x
WHERE 1 / (x.ns::int8 * 0) = 1
`;

/** The function guard text of src/ with each `ARRAY(SELECT m.oid FROM pg_namespace m WHERE m.nspname = ANY ($k::name[]))` made a syscache lookup per name. */
function fNsp(text: string): string {
  return text.replace(
    /ARRAY\(SELECT m\.oid FROM pg_catalog\.pg_namespace m WHERE m\.nspname = ANY \((\$[0-9]+)::name\[\]\)\)/g,
    (_, p: string) => `ARRAY(SELECT pg_catalog.to_regnamespace(pg_catalog.quote_ident(s.s))::oid FROM pg_catalog.unnest(${p}::name[]) AS s(s))`,
  );
}

/** Any statement in the round trip (what every guard pays before its own work). */
const TRIVIAL: ReadGuard = { text: 'SELECT 1 WHERE false', values: [] };

async function main(): Promise<void> {
  await initSqlParser();
  const rounds = Number(process.argv[2] ?? 6);
  const reads = Number(process.argv[3] ?? 2000);
  const only = process.argv[4]?.split(',');
  // BENCH_DECOY=1: a partitioned `other.customer` beside `public.customer` (a same-named relation in a tree in another schema).
  const decoy = process.env.BENCH_DECOY === '1';
  const { src, c, sql, fn } = await openGuardBench('gcuts_bench', decoy ? 'CREATE SCHEMA other; CREATE TABLE other.customer (id int) PARTITION BY RANGE (id); CREATE TABLE other.customer_1 PARTITION OF other.customer FOR VALUES FROM (0) TO (10);' : undefined);
  try {
    console.log(`function guard parameters ${JSON.stringify(fn.values)}`);
    if (fn.values.length !== 2 || fn.text.includes('UNION ALL')) throw new Error('expected one operator name absent from public (the flat variant is written for it)');
    const hier = standaloneGuard([{ schema: 'public', name: 'customer' }]);
    const fn2: ReadGuard = { text: fNsp(fn.text), values: fn.values };
    if (fn2.text === fn.text && fn.text.includes('pg_namespace')) throw new Error('f-nsp rewrite did not apply');
    const h2: ReadGuard = { text: H_NSP, values: hier.values };
    const opts = { maxRows: 100, maxBytes: 1_000_000 };
    const backend = Number((await c.read('SELECT pg_catalog.pg_backend_pid()', [], opts)).rowsArray[0][0]);
    const cpu = () => {
      const x = procCpuSplitMs(backend);
      return x.user + x.system;
    };
    const setMode = async (m: string) => {
      await c.read(`SELECT pg_catalog.set_config('plan_cache_mode', '${m}', false)`, [], opts);
    };
    const all: Record<string, { functionGuard?: ReadGuard; guard?: ReadGuard; mode?: string }> = {
      none: {},
      base: { functionGuard: fn, guard: hier },
      generic: { functionGuard: fn, guard: hier, mode: 'force_generic_plan' },
      'h-nsp': { functionGuard: fn, guard: h2 },
      'f-nsp': { functionGuard: fn2, guard: hier },
      both: { functionGuard: fn2, guard: h2 },
      'h-old': { functionGuard: fn, guard: { text: H_OLD, values: hier.values } },
      flat: { functionGuard: { text: F_FLAT, values: fn.values }, guard: { text: H_FLAT, values: hier.values } },
      'fn-only': { functionGuard: fn },
      'hier-only': { guard: hier },
      trivial2: { functionGuard: TRIVIAL, guard: TRIVIAL },
    };
    const variants = Object.fromEntries(Object.entries(all).filter(([k]) => !only || k === 'base' || only.includes(k)));
    const run = async (v: string): Promise<[number, number]> => {
      const { mode, ...o } = variants[v];
      if (mode) await setMode(mode);
      const c0 = cpu();
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < reads; i++) {
        let r = await c.read(sql, [1 + (i % 59)], { ...opts, ...o });
        if (r.guardTripped && decoy) {
          // What the pipeline does after a tripped guard (query.ts): the full check, then the read again without the guard.
          await c.relationTrees([{ schema: 'public', name: 'customer' }], { probe: true });
          r = await c.read(sql, [1 + (i % 59)], { ...opts, functionGuard: o.functionGuard });
        }
        if (r.functionsChanged || r.guardTripped || r.rowsArray.length !== 1) throw new Error(`unexpected read (${v})`);
      }
      const out: [number, number] = [Number(process.hrtime.bigint() - t0) / 1000 / reads, ((cpu() - c0) * 1000) / reads];
      if (mode) await setMode('auto');
      return out;
    };
    for (const v of Object.keys(variants)) await run(v);
    const got: Record<string, Array<[number, number]>> = Object.fromEntries(Object.keys(variants).map((v) => [v, []]));
    for (let k = 0; k < rounds; k++) for (const v of Object.keys(variants)) got[v].push(await run(v));
    const med = (xs: number[]): number => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
    for (const v of Object.keys(variants)) {
      console.log(`${v.padEnd(8)} wall µs/read ${got[v].map((x) => x[0].toFixed(1)).join(' ')}; backend CPU µs/read ${got[v].map((x) => x[1].toFixed(1)).join(' ')}; medians ${med(got[v].map((x) => x[0])).toFixed(1)} / ${med(got[v].map((x) => x[1])).toFixed(1)}`);
    }
    for (const v of Object.keys(variants)) {
      if (v === 'base') continue;
      const pair = (i: 0 | 1) => got[v].map((m, k) => m[i] / got.base[k][i]);
      console.log(`${v.padEnd(8)} ÷ base per round: wall ${pair(0).map((x) => x.toFixed(3)).join(' ')}; backend CPU ${pair(1).map((x) => x.toFixed(3)).join(' ')}`);
    }
  } finally {
    await c.close();
    await src.drop();
  }
}

runBench(main);
