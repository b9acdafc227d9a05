/**
 * Red team rt48d target 1b: CPU of parseClientJson (src/pipeline/json-numbers.ts) against JSON.parse
 * alone on worst-case bodies up to the 1 MiB body cap (best of 5 each; report the ratios).
 * Run: npm run -s build; flock /tmp/bench.lock npx tsx bench/rt48d-json-numbers-cost.ts
 */
import { parseClientJson } from '../src/pipeline/json-numbers';
/** Best wall time in ms of `reps` runs of f. */
function t(f: () => unknown, reps = 5): number { let best = Infinity; for (let r = 0; r < reps; r++) { const s = process.hrtime.bigint(); f(); const e = Number(process.hrtime.bigint() - s) / 1e6; best = Math.min(best, e); } return best; }
const CAP = 1024 * 1024 - 200;
/** A POST /mcp tools/call body whose params array holds `inner`. */
function body(inner: string) { return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"interlock_query","arguments":{"source_id":"s","sql":"select $1","params":[${inner}]}}}`; }
const cases: Record<string, (n: number) => string> = {
  midZeros: (n) => body('1.' + '0'.repeat(n) + '1'),
  manyInexact: (n) => body(Array.from({ length: Math.floor(n / 22) }, () => '0.12345678901234567891').join(',')),
  manyShort: (n) => body(Array.from({ length: Math.floor(n / 4) }, () => '123').join(',')),
  manyExp: (n) => body(Array.from({ length: Math.floor(n / 5) }, () => '1e10').join(',')),
  longDigits: (n) => body('1' + '2'.repeat(n)),
  zerosTail: (n) => body('1' + '0'.repeat(n)),
  strings: (n) => body('"' + 'a\\"'.repeat(Math.floor(n / 3)) + '"'),
  backslashes: (n) => body(Array.from({ length: Math.floor(n / 12) }, () => '"\\\\\\\\\\\\\\\\"').join(',')),
};
for (const [name, mk] of Object.entries(cases)) {
  const out: string[] = [];
  for (const n of [CAP / 8, CAP / 4, CAP / 2, CAP]) {
    const text = mk(Math.floor(n));
    const a = t(() => JSON.parse(text)); const b = t(() => parseClientJson(text));
    out.push(`n=${Math.round(n/1024)}k JSON.parse ${a.toFixed(2)}ms parseClientJson ${b.toFixed(2)}ms ratio ${(b / a).toFixed(2)}`);
  }
  console.log(name + '\n  ' + out.join('\n  '));
}
