/**
 * The value mapping's own cost (issue 23), in-process: per column type, decoding PostgreSQL's text
 * output and writing the JSON text, with node-postgres's default parsers (`pg.types` +
 * `JSON.stringify`, what e3f6e2e did) and with the mapping (`builtinDecoder` from values.ts +
 * `jsonText` from raw-json.ts, what main does). Alternating rounds, medians; nanoseconds per value.
 * No database needed. Run: `npx tsx bench/value-decode.ts` (BENCH_VALUES per round, default
 * 200000; BENCH_ROUNDS, default 7).
 */
import pg from 'pg';
import { builtinDecoder } from '../src/sources/postgres/values';
import { jsonText } from '../src/sources/postgres/raw-json';
import { envInt, machineLine, table } from './lib/stats';

/** Typical values as PostgreSQL writes them under the pinned settings; OIDs are PostgreSQL's. */
const CASES: Array<{ name: string; oid: number; text: string }> = [
  { name: 'int4', oid: 23, text: '3503' },
  { name: 'int8', oid: 20, text: '9007199254740993' },
  { name: 'varchar', oid: 1043, text: 'For Those About To Rock (We Salute You)' },
  { name: 'numeric', oid: 1700, text: '0.99' },
  { name: 'float8', oid: 701, text: '343719.123' },
  { name: 'bool', oid: 16, text: 't' },
  { name: 'timestamp', oid: 1114, text: '2026-12-03 16:30:00.123456' },
  { name: 'timestamptz', oid: 1184, text: '2026-12-03 16:30:00.123456+00' },
  { name: 'date', oid: 1082, text: '2026-12-03' },
  { name: 'jsonb', oid: 3802, text: '{"id": 12345, "tags": ["a", "b"], "n": 1.5}' },
  { name: 'int4[]', oid: 1007, text: '{1,2,3,4,5}' },
  { name: 'text[]', oid: 1009, text: '{alpha,"b c",NULL}' },
  { name: 'bytea', oid: 17, text: '\\x0102030405060708' },
];

function timeNs(n: number, decode: (s: string) => unknown, write: (v: unknown) => string, text: string): number {
  let sink = 0;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) sink += write(decode(text)).length;
  const ns = Number(process.hrtime.bigint() - t0) / n;
  if (sink < 0) console.log(sink);
  return ns;
}

const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];

function main(): void {
  const n = envInt('BENCH_VALUES', 200_000);
  const rounds = envInt('BENCH_ROUNDS', 7);
  console.log(`# value decode + JSON text per value: ${n} values × ${rounds} alternating rounds per side`);
  console.log(machineLine());
  const rows = CASES.map((c) => {
    const pgParse = pg.types.getTypeParser(c.oid, 'text') as (s: string) => unknown;
    const mapped = builtinDecoder(c.oid);
    const before: number[] = [];
    const after: number[] = [];
    for (let r = 0; r < rounds; r++) {
      const pair = () => {
        before.push(timeNs(n, pgParse, (v) => JSON.stringify(v), c.text));
        after.push(timeNs(n, mapped, jsonText, c.text));
      };
      if (r % 2 === 0) pair();
      else {
        after.push(timeNs(n, mapped, jsonText, c.text));
        before.push(timeNs(n, pgParse, (v) => JSON.stringify(v), c.text));
      }
    }
    const b = median(before);
    const a = median(after);
    return [c.name, b.toFixed(0), a.toFixed(0), `${(a / b).toFixed(2)}×`, jsonText(mapped(c.text)).slice(0, 40)];
  });
  console.log(table(['type', 'pg default ns/value', 'mapping ns/value', 'mapping/default', 'mapped JSON'], rows));
}

main();
