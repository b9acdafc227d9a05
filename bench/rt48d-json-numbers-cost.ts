/**
 * Red team rt48d target 1b: CPU of parseClientJson (src/pipeline/json-numbers.ts) against JSON.parse
 * alone on worst-case bodies up to the 1 MiB body cap (best of 5 each; report the ratios), each body
 * decoded from bytes as the body readers do (a flat string; since task r2: the red team's run used ropes).
 * Run: npm run -s build; flock /tmp/bench.lock npx tsx bench/rt48d-json-numbers-cost.ts
 * RT48D_IMPL=<path of another json-numbers module> compares that one instead (task r2: the code before
 * its fix, `git show b244dd3:src/pipeline/json-numbers.ts`). Last, a typical tools/call body: µs per
 * parse, JSON.parse and parseClientJson (best of 5 runs of 20 000 parses); with RT48D_BASE=<path of
 * another json-numbers module> also paired with that one (15 alternating rounds, medians).
 */
import * as path from 'node:path';
const { parseClientJson } = require(process.env.RT48D_IMPL ? path.resolve(process.env.RT48D_IMPL) : '../src/pipeline/json-numbers') as typeof import('../src/pipeline/json-numbers');
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
  many17Exact: (n) => body(Array.from({ length: Math.floor(n / 20) }, () => '0.30000000000000004').join(',')),
  many17Inexact: (n) => body(Array.from({ length: Math.floor(n / 20) }, () => '0.12345678901234567').join(',')),
  objectsInexact: (n) => body(Array.from({ length: Math.floor(n / 14) }, () => '{"a":1e400}').join(',')),
  repeatedKeys: (n) => body('{' + Array.from({ length: Math.floor(n / 12) }, () => '"a":[1e400]').join(',') + '}'),
  arraysInexact: (n) => body(Array.from({ length: Math.floor(n / 8) }, () => '[1e400]').join(',')),
  // arguments (on the way to params) with many members holding containers, params repeated: each key read.
  wideArguments: (n) => `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"interlock_query","arguments":{${Array.from({ length: Math.floor(n / 16) }, (_, i) => `"k${i}":[1e400]`).join(',')},"params":[1e400],"params":[0.1]}}}`,
  longDigits: (n) => body('1' + '2'.repeat(n)),
  zerosTail: (n) => body('1' + '0'.repeat(n)),
  strings: (n) => body('"' + 'a\\"'.repeat(Math.floor(n / 3)) + '"'),
  backslashes: (n) => body(Array.from({ length: Math.floor(n / 12) }, () => '"\\\\\\\\\\\\\\\\"').join(',')),
};
for (const [name, mk] of Object.entries(cases)) {
  const out: string[] = [];
  for (const n of [CAP / 8, CAP / 4, CAP / 2, CAP]) {
    // Decoded from bytes as the body readers do (src/transport/body.ts): a flat string, not the rope `+` builds.
    const text = new TextDecoder().decode(Buffer.from(mk(Math.floor(n))));
    const a = t(() => JSON.parse(text)); const b = t(() => parseClientJson(text));
    out.push(`n=${Math.round(n/1024)}k JSON.parse ${a.toFixed(2)}ms parseClientJson ${b.toFixed(2)}ms ratio ${(b / a).toFixed(2)}`);
  }
  console.log(name + '\n  ' + out.join('\n  '));
}

{
  const typical = '{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"interlock_query","arguments":{"source_id":"chinook","sql":"SELECT name, unit_price FROM track WHERE album_id = $1 AND unit_price > $2 ORDER BY name LIMIT 20","params":[42, 0.99],"max_rows":100},"_meta":{"progressToken":"p-17"}}}';
  const per = (f: () => unknown) => (t(() => { for (let k = 0; k < 20_000; k++) f(); }) * 1000) / 20_000;
  for (let w = 0; w < 3; w++) { per(() => JSON.parse(typical)); per(() => parseClientJson(typical)); }
  const a = per(() => JSON.parse(typical)); const b = per(() => parseClientJson(typical));
  console.log(`typical tools/call (${typical.length} B): JSON.parse ${a.toFixed(3)}µs parseClientJson ${b.toFixed(3)}µs ratio ${(b / a).toFixed(2)}`);
  // RT48D_BASE=<path of another json-numbers module>: the typical body paired, 15 alternating rounds, medians.
  if (process.env.RT48D_BASE) {
    const base = (require(path.resolve(process.env.RT48D_BASE)) as typeof import('../src/pipeline/json-numbers')).parseClientJson;
    const xs: number[] = [], ys: number[] = [], ps: number[] = [];
    for (let r = 0; r < 15; r++) { ps.push(per(() => JSON.parse(typical))); xs.push(per(() => base(typical))); ys.push(per(() => parseClientJson(typical))); }
    const med = (v: number[]) => [...v].sort((p, q) => p - q)[v.length >> 1];
    console.log(`typical paired medians: JSON.parse ${med(ps).toFixed(3)}µs base ${med(xs).toFixed(3)}µs this ${med(ys).toFixed(3)}µs (this − base ${(med(ys) - med(xs)).toFixed(3)}µs)`);
  }
}
