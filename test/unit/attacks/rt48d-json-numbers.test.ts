/**
 * Red team rt48d, target 1 (src/pipeline/json-numbers.ts parseClientJson, task low48): it parses every
 * client body at POST /mcp admission (before the key is checked) and on the Express routes.
 *
 * Findings (severity, state):
 *  R1. high, fixed: decimalKey stripped trailing zeros with /0+$/, which V8 runs in time quadratic in
 *      a run of zeros not at the end: one number `1.000…0001` (16 000 zeros: 0.18 s; a body-sized one:
 *      minutes, extrapolated) held the event loop, unauthenticated, on POST /mcp. Zeros are now stripped
 *      by index (the 1 MiB body: ~8 ms). Before the fix the R1 test below ran 54 s (jest does not
 *      interrupt synchronous code, so it did not fail: no timed assertion here); with it, well under 1 s.
 *  R2. medium, open: a body of many numbers that are not carried exactly (`0.12345678901234567891`
 *      × 47 000 in 1 MiB) costs ~34× JSON.parse alone (linear: ~100 ms per MiB, pre-auth); a body of
 *      exact numbers ≤ 2.7×; one long number (1 MiB of digits) 8-12× but ~10 ms; strings full of escaped
 *      quotes 3.5-5× (~5 ms per MiB). All linear after R1. bench/rt48d-json-numbers-cost.ts measures them.
 * Held (property, fast-check): for arbitrary JSON texts and arbitrary strings (invalid JSON, BOM, lone
 * surrogates, escaped quotes and backslashes, numbers inside strings, -0, 1E400, 1e-400, leading zeros,
 * huge exponents, white space variants) parseClientJson's value or SyntaxError equals JSON.parse's.
 */
import fc from 'fast-check';
import { inexactJsonNumber, jsonNumberIsExact, parseClientJson } from '../../../src/pipeline/json-numbers';

type Out = { ok: true; v: unknown } | { ok: false; cls: string; msg: string };
function run(f: () => unknown): Out {
  try {
    return { ok: true, v: f() };
  } catch (e) {
    return { ok: false, cls: (e as Error).constructor.name, msg: (e as Error).message };
  }
}
/** Object.is on leaves (keeps -0 apart from 0), same own keys in the same order, same array-ness. */
function same(a: unknown, b: unknown): boolean {
  if (typeof a !== 'object' || a === null || typeof b !== 'object' || b === null) return Object.is(a, b);
  if (Array.isArray(a) !== Array.isArray(b) || Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;
  const ka = Object.keys(a), kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k, i) => k === kb[i] && same((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}
function agrees(text: string): void {
  const want = run(() => JSON.parse(text));
  const got = run(() => parseClientJson(text));
  if (want.ok && got.ok) expect(same(got.v, want.v)).toBe(true);
  else expect(got).toEqual(want);
}

const numberText = fc.oneof(
  fc.constantFrom('-0', '0', '-0.0', '1E400', '-1e400', '1e-400', '01', '-01', '00', '1.', '.5', '+1', '1e', '1e+', '0x10', 'NaN', 'Infinity', '1e99999999999999999999', '1e-99999999999999999999', '9007199254740993', '0.1000000000000000055511151231257827', '1.0000000000000000001'),
  fc.tuple(fc.constantFrom('', '-'), fc.stringMatching(/^\d{1,30}$/), fc.option(fc.stringMatching(/^\d{1,25}$/)), fc.option(fc.tuple(fc.constantFrom('e', 'E'), fc.constantFrom('', '+', '-'), fc.stringMatching(/^\d{1,4}$/))))
    .map(([s, i, f, e]) => `${s}${i}${f === null ? '' : '.' + f}${e === null ? '' : e.join('')}`),
);
const piece = fc.oneof(numberText, fc.constantFrom('"', '\\', '\\"', '\\\\"', '"\\\\"', ',', ':', '[', ']', '{', '}', ' ', '\t', '\n', '\r', '\u00a0', '\ufeff', '\ud800', '\udc00', 'true', 'null', '"a"', '"1e400"', '"\\u0000inexact-"'), fc.string({ maxLength: 4 }));
const jsonWithNumbers = fc.letrec((tie) => ({
  v: fc.oneof({ depthSize: 'small' }, numberText.filter((t) => run(() => JSON.parse(t)).ok), fc.string().map((s) => JSON.stringify(s)), fc.constantFrom('true', 'false', 'null', '"\\"1e400\\\\"'), fc.array(tie('v'), { maxLength: 5 }).map((a) => `[${a.join(',')}]`), fc.array(fc.tuple(fc.string({ maxLength: 3 }), tie('v')), { maxLength: 5 }).map((kv) => `{${kv.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`)),
}));

describe('R0 (held): parseClientJson answers exactly what JSON.parse answers', () => {
  test('arbitrary JSON texts holding numbers of every form, with white space variants', () => {
    fc.assert(fc.property(jsonWithNumbers.v, fc.constantFrom('', ' ', '\n\t', '\r\n '), (t, ws) => agrees(ws + t + ws)), { numRuns: 3000 });
  });
  test('arbitrary strings and concatenations of JSON-ish pieces (mostly invalid JSON)', () => {
    fc.assert(fc.property(fc.array(piece, { maxLength: 12 }), (ps) => agrees(ps.join(''))), { numRuns: 5000 });
    fc.assert(fc.property(fc.string({ unit: 'binary', maxLength: 40 }), (s) => agrees(s)), { numRuns: 2000 });
    for (const t of ['\ufeff1', '\ufeff{"a":1e400}', '[1e400]\ufeff', '["\ud800", 1e400]', '{"__proto__": 1e400, "a": 1}', '{"a": 1e400, "a": 1}', '{"a": 1, "a": 1e400}', '[-0, -0.0, 1e-400, -1e-400]', '"\\\\" ', '["\\\\\\"", 1.0000000000000000001]', '1e400', '-0']) agrees(t);
  });
  test('where a number was rounded is recorded on its holder and key only, duplicates included', () => {
    const o = parseClientJson('{"a": 1e400, "a": 1, "b": [0, 1.0000000000000000001], "__proto__": 1e-400}') as Record<string, unknown>;
    expect([inexactJsonNumber(o, 'a'), inexactJsonNumber(o.b as object, 0), inexactJsonNumber(o.b as object, 1), inexactJsonNumber(o, '__proto__')]).toEqual([false, false, true, true]);
  });
});

describe('R1 (high, fixed): a long run of zeros inside one number', () => {
  test('1.000…0001 with 200 000 zeros is judged (and parsed) in linear time, within the default timeout', () => {
    const lit = `1.${'0'.repeat(200_000)}1`;
    expect(jsonNumberIsExact(lit)).toBe(false);
    const v = parseClientJson(`{"params":[${lit}]}`) as { params: unknown[] };
    expect([v.params[0], inexactJsonNumber(v.params, 0)]).toEqual([1, true]);
  });
});
