/**
 * The function guard's cost on a point read (task hg1): `SELECT … FROM customer WHERE customer_id =
 * $1` uses the operator `=`, so since hg1 its read carries the guard (one pg_operator probe by name
 * in the same round trip). Reads the same statement through the connector with and without the
 * guard its analysis makes, alternating rounds on one pooled connection, and prints the per-read
 * medians and their ratio (same run). Task hcast: the point read involves no user type, so its guard
 * has no type part (checked); a second statement reading a column of a user enum
 * (`customer.mood public.bench_mood`) is read with its whole guard (function and type parts) and
 * with the function part only, to price the type guard. Run: `npx tsx bench/function-guard-cost.ts [rounds] [reads]`.
 */
import { createSourceDb } from '../test/integration/sources/source-db';
import { PostgresSourceConnector } from '../src/sources/postgres/connector';
import { scanCatalog } from '../src/sources/postgres/catalog';
import { analyzeSql } from '../src/sql/analyze';
import { initSqlParser } from '../src/sql/parser';
import { functionGuard as fnGuardOnly } from '../src/sources/postgres/function-guard';
import { runBench } from './lib/stats';

async function main(): Promise<void> {
  await initSqlParser();
  const rounds = Number(process.argv[2] ?? 6);
  const reads = Number(process.argv[3] ?? 2000);
  const src = await createSourceDb('fguard_bench', { extraSql: "CREATE TYPE public.bench_mood AS ENUM ('calm', 'busy'); ALTER TABLE customer ADD COLUMN mood public.bench_mood DEFAULT 'calm';" });
  const c = new PostgresSourceConnector('fgbench', src.settings({ pool_size: 1, max_concurrent_per_identity: 1 }));
  try {
    const cat = await c.withReader((client) => scanCatalog(client));
    const sql = 'SELECT customer_id, first_name, last_name, email FROM customer WHERE customer_id = $1';
    const a = analyzeSql(sql, cat);
    if (!a.ok) throw new Error('analysis refused');
    const guard = c.functionGuard(cat, a);
    if (!guard) throw new Error('no guard for a statement using =');
    console.log(`names checked: ${JSON.stringify(a.resolvedNames)}; guard params ${guard.values.length}`);
    if (a.typeUses || guard.text.includes('pg_cast')) throw new Error('the point read involves no user type: no type part expected');
    const sql2 = 'SELECT customer_id, mood FROM customer WHERE customer_id = $1';
    const a2 = analyzeSql(sql2, cat);
    if (!a2.ok || !a2.typeUses) throw new Error('expected typeUses for the enum column');
    const typed = c.functionGuard(cat, a2)!;
    const untyped = fnGuardOnly(cat, a2)!;
    if (!typed.text.includes('pg_cast') || untyped.text.includes('pg_cast')) throw new Error('unexpected guard parts');
    console.log(`enum read: typeUses ${JSON.stringify(a2.typeUses)}; guard params ${typed.values.length} (function part only ${untyped.values.length})`);
    const opts = { maxRows: 100, maxBytes: 1_000_000 };
    // The floor: any second statement in the round trip (what every guard pays before its own work).
    const floor = { text: 'SELECT 1 WHERE false', values: [] as string[] };
    const run = async (g: typeof guard | null, text = sql): Promise<number> => {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < reads; i++) {
        const r = await c.read(text, [1 + (i % 59)], g ? { ...opts, functionGuard: g } : opts);
        if (r.functionsChanged || r.rowsArray.length !== 1) throw new Error('unexpected read');
      }
      return Number(process.hrtime.bigint() - t0) / 1000 / reads;
    };
    await run(null);
    await run(guard);
    await run(floor);
    const off: number[] = [];
    const on: number[] = [];
    const bare: number[] = [];
    const fnOnly: number[] = [];
    const withType: number[] = [];
    await run(untyped, sql2);
    await run(typed, sql2);
    for (let k = 0; k < rounds; k++) {
      off.push(await run(null));
      on.push(await run(guard));
      bare.push(await run(floor));
      fnOnly.push(await run(untyped, sql2));
      withType.push(await run(typed, sql2));
    }
    const med = (xs: number[]): number => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
    console.log(`without guard µs/read per round: ${off.map((x) => x.toFixed(1)).join(' ')}`);
    console.log(`with guard    µs/read per round: ${on.map((x) => x.toFixed(1)).join(' ')}`);
    console.log(`trivial second statement µs/read per round: ${bare.map((x) => x.toFixed(1)).join(' ')}`);
    console.log(`enum read, function part only µs/read per round: ${fnOnly.map((x) => x.toFixed(1)).join(' ')}`);
    console.log(`enum read, function + type parts µs/read per round: ${withType.map((x) => x.toFixed(1)).join(' ')}`);
    console.log(`enum read median function part only ${med(fnOnly).toFixed(1)} µs, with the type part ${med(withType).toFixed(1)} µs, ratio ${(med(withType) / med(fnOnly)).toFixed(3)}`);
    console.log(`median without ${med(off).toFixed(1)} µs, with ${med(on).toFixed(1)} µs, ratio ${(med(on) / med(off)).toFixed(3)}; trivial second statement ${med(bare).toFixed(1)} µs, ratio ${(med(bare) / med(off)).toFixed(3)}`);
  } finally {
    await c.close();
    await src.drop();
  }
}

runBench(main);
