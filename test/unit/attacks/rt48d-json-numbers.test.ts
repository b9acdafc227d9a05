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
 *  R2. medium, fixed (task r2): a body of many numbers that are not carried exactly
 *      (`0.12345678901234567891` × 47 000 in 1 MiB) cost ~34× JSON.parse alone (linear: ~100 ms per MiB,
 *      pre-auth): each literal judged by regular expressions and String(n), twice, then the whole text
 *      parsed again through a reviver. Now one JSON.parse, one scan that judges a literal by its digits
 *      (at most 15 significant digits within ±307: exact; more than 17: rounded; String(n) only in
 *      between) and, only when a literal may be rounded, one walk of the text beside the parsed value
 *      that records the first rounded element of each interlock_query params array (PARAMS_PATHS; the
 *      call is refused there; repeated keys: the occurrence JSON.parse keeps). 1 MiB: ~2× JSON.parse
 *      (17-digit exact numbers ~4×: String(n) each); bench/RESULTS.md (Addendum 7 December 2026, r2).
 *      The tests below hold the fast path equal to the reference judgement and the records equal to
 *      the reference places; the last one fails before the fix (JSON.parse called twice, with a reviver).
 * Held (property, fast-check): for arbitrary JSON texts and arbitrary strings (invalid JSON, BOM, lone
 * surrogates, escaped quotes and backslashes, numbers inside strings, -0, 1E400, 1e-400, leading zeros,
 * huge exponents, white space variants) parseClientJson's value or SyntaxError equals JSON.parse's.
 */
import fc from 'fast-check';
import { PARAMS_PATHS, inexactJsonNumber, jsonNumberIsExact, jsonNumberTokenIsExact, parseClientJson } from '../../../src/pipeline/json-numbers';

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

/**
 * The places parseClientJson must record, found the reference way: each number literal of `text`
 * (well-formed JSON) that jsonNumberIsExact refuses is replaced with a string and the text parsed
 * again; where the real value holds a number and the marked one a string, directly in a params array
 * (PARAMS_PATHS), the first of that array, is such a place. Returns the paths where inexactJsonNumber disagrees (empty when
 * the records are exactly those places) and how many places there were.
 */
function recordMismatches(text: string, real: unknown): { mismatches: string[]; places: number } {
  const marked: unknown = JSON.parse(text.replace(/"(?:[^"\\]|\\[^])*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g, (t) => (t[0] === '"' || jsonNumberIsExact(t) ? t : '"#"')));
  const at = (v: unknown, path: readonly string[]): unknown => path.reduce<unknown>((o, k) => (typeof o === 'object' && o !== null && !Array.isArray(o) && Object.prototype.hasOwnProperty.call(o, k) ? (o as Record<string, unknown>)[k] : undefined), v);
  const targets: unknown[] = PARAMS_PATHS.map((p) => at(real, p)).filter((t) => Array.isArray(t));
  const out = { mismatches: [] as string[], places: 0 };
  const firstFound = new Set<unknown>();
  const walk = (r: unknown, m: unknown, path: string): void => {
    if (typeof r !== 'object' || r === null) return;
    for (const k of Object.keys(r)) {
      const rv = (r as Record<string, unknown>)[k];
      const mv = (m as Record<string, unknown>)[k];
      // The first such element of a params array only (query.ts refuses the call there).
      const place = targets.includes(r) && typeof rv === 'number' && typeof mv === 'string' && !firstFound.has(r);
      if (place) {
        out.places++;
        firstFound.add(r);
      }
      if (inexactJsonNumber(r, k) !== place) out.mismatches.push(`${path}/${k}`);
      walk(rv, mv, `${path}/${k}`);
    }
  };
  walk(real, marked, '');
  return out;
}

/** Valid JSON number literals around the fast path's edges: 14-19 significant digits, magnitudes near ±308 and beyond, String(n) and toPrecision of doubles. */
const edgeLiteral = fc.oneof(
  fc.tuple(fc.constantFrom('', '-'), fc.stringMatching(/^[1-9]\d{13,18}$/), fc.integer({ min: 0, max: 19 }), fc.integer({ min: -345, max: 330 }))
    .map(([s, d, point, e]) => `${s}${point === 0 ? '0.' + d : d.slice(0, point) + (point < d.length ? '.' + d.slice(point) : '')}e${e}`),
  fc.double({ noNaN: true, noDefaultInfinity: true }).map((x) => String(x)),
  fc.tuple(fc.double({ noNaN: true, noDefaultInfinity: true }), fc.integer({ min: 14, max: 19 })).map(([x, p]) => x.toPrecision(p)),
  fc.tuple(fc.double({ noNaN: true, noDefaultInfinity: true }), fc.integer({ min: 14, max: 19 }), fc.constantFrom('0', '00', '1', '9')).map(([x, p, tail]) => {
    const t = x.toPrecision(p);
    return t.includes('e') ? t.replace('e', (t.includes('.') ? '' : '.') + tail + 'e') : t + (t.includes('.') ? '' : '.') + tail;
  }),
);
const anyLiteral = fc.oneof(numberText, edgeLiteral).filter((t) => run(() => JSON.parse(t)).ok && typeof JSON.parse(t) === 'number');
/** Objects that repeat keys (`"a"` and its escaped spelling `"\\u0061"`, `__proto__`, integer-like keys) over values holding numbers. */
const repeatedKeys = fc.letrec((tie) => ({
  v: fc.oneof({ depthSize: 'small' }, anyLiteral, fc.constantFrom('"x"', 'null'), fc.array(tie('v'), { maxLength: 4 }).map((a) => `[${a.join(',')}]`), fc.array(fc.tuple(fc.constantFrom('"a"', '"\\u0061"', '"b"', '"__proto__"', '"0"', '"1"'), tie('v')), { maxLength: 5 }).map((kv) => `{${kv.map(([k, v]) => `${k}:${v}`).join(',')}}`)),
}));
/** An array as a params array may be: number literals of every form, other values, nested containers holding rounded numbers. */
const paramsArray = fc.array(fc.oneof(anyLiteral, anyLiteral, fc.constantFrom('"s"', '"1e400"', 'null', 'true', '[1e400]', '{"a":1e400}', '{"params":[1e400]}')), { maxLength: 6 }).map((a) => `[${a.join(',')}]`);
/**
 * Bodies of the shapes routes read (`params`, `arguments.params`, `params.arguments.params`) and
 * near misses: keys `params`, `arguments` and `a`, escaped spellings, repeated keys, arrays where an
 * object is expected and the reverse, other members before and after.
 */
const bodyShapes = fc.letrec((tie) => ({
  obj: fc.array(fc.tuple(fc.constantFrom('"params"', '"params"', '"\\u0070arams"', '"arguments"', '"arguments"', '"a"'), tie('v')), { maxLength: 4 }).map((kv) => `{${kv.map(([k, v]) => `${k}:${v}`).join(',')}}`),
  v: fc.oneof({ maxDepth: 5, depthIdentifier: 'body' }, paramsArray, tie('obj'), tie('obj'), anyLiteral),
})).obj;
/** The three shapes themselves, with other members (repeating `params` or `arguments` too) before and after each level's. */
const noise = fc.constantFrom('', '"a":1e400,', '"params":[1e400],', '"arguments":{"params":[1e400]},', '"params":{"arguments":{"params":[0.12345678901234567891]}},', '"params":"x",');
const explicitShapes = fc.tuple(fc.integer({ min: 0, max: 2 }), paramsArray, fc.array(noise, { minLength: 6, maxLength: 6 }), fc.array(noise, { minLength: 3, maxLength: 3 }))
  .map(([shape, arr, b, a]) => {
    const end = (k: number) => a[k].replace(/,$/, '').replace(/^(?=.)/, ',');
    const level = (key: string, v: string, k: number) => `{${b[k]}${b[k + 3]}"${key}":${v}${end(k)}}`;
    if (shape === 0) return level('params', arr, 0);
    if (shape === 1) return level('arguments', level('params', arr, 1), 0);
    return level('params', level('arguments', level('params', arr, 2), 1), 0);
  });

describe('R2 (medium, fixed): the fast path parseClientJson took for it answers what the reference answers', () => {
  test('a number literal is judged as jsonNumberIsExact judges it', () => {
    fc.assert(fc.property(anyLiteral, (t) => expect([t, jsonNumberTokenIsExact(t)]).toEqual([t, jsonNumberIsExact(t)])), { numRuns: 20000 });
    for (const t of ['0.30000000000000004', '0.3000000000000000444', '123456789012345.6', '1234567890123456.7', '9007199254740993', '1.7976931348623157e308', '1.7976931348623159e308', '2.2250738585072014e-308', '2.225073858507201e-308', '5e-324', '4e-324', '3e-324', '1e-400', '1e308', '1e309', '100000000000000000000000e-23', '0.000001', '1e21', '1e-7', '-0.0e400']) {
      expect([t, jsonNumberTokenIsExact(t)]).toEqual([t, jsonNumberIsExact(t)]);
    }
  });
  test('the places recorded are exactly the first element jsonNumberIsExact refuses of each params array, repeated keys included', () => {
    let places = 0;
    fc.assert(fc.property(fc.oneof(explicitShapes, bodyShapes, jsonWithNumbers.v, repeatedKeys.v), (t) => {
      const r = recordMismatches(t, parseClientJson(t));
      places += r.places;
      expect(r.mismatches).toEqual([]);
    }), { numRuns: 6000 });
    expect(places).toBeGreaterThan(1000);
    for (const t of ['{"params":[1e400],"params":[1]}', '{"params":{"arguments":{"params":[1e400]}},"params":{"arguments":{"params":[1]}}}', '{"params":[1e400],"\\u0070arams":[1]}', '{"arguments":{"params":[0.12345678901234567891],"params":[2, 1e-400]},"a":[1e400]}', '{"params":[[1e400], {"params":[1e400]}, 1e400]}', '{"params":{"arguments":{"params":[1e400]}},"arguments":{"params":[2, 1e400]}}', '{"params":[1e400],"arguments":[1e400]}']) {
      expect([t, recordMismatches(t, parseClientJson(t)).mismatches]).toEqual([t, []]);
    }
  });
  test('the worst-case body (1 MiB of numbers a double rounds) is parsed by one JSON.parse, without a reviver; the first recorded', () => {
    const n = 47_000;
    const text = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"interlock_query","arguments":{"source_id":"s","sql":"select $1","params":[${Array(n).fill('0.12345678901234567891').join(',')}]}}}`;
    const spy = jest.spyOn(JSON, 'parse');
    let v: any;
    try {
      v = parseClientJson(text);
    } finally {
      // Before the fix: [1, 2], the second a parse of the text with markers through a reviver (~34× JSON.parse alone).
      expect(spy.mock.calls.map((c) => c.length)).toEqual([1]);
      spy.mockRestore();
    }
    const params = v.params.arguments.params as unknown[];
    expect([params.length, params.findIndex((_, i) => inexactJsonNumber(params, i))]).toEqual([n, 0]);
  });
});

describe('R0 (held): parseClientJson answers exactly what JSON.parse answers', () => {
  test('arbitrary JSON texts holding numbers of every form, with white space variants', () => {
    fc.assert(fc.property(jsonWithNumbers.v, fc.constantFrom('', ' ', '\n\t', '\r\n '), (t, ws) => agrees(ws + t + ws)), { numRuns: 3000 });
  });
  test('arbitrary strings and concatenations of JSON-ish pieces (mostly invalid JSON)', () => {
    fc.assert(fc.property(fc.array(piece, { maxLength: 12 }), (ps) => agrees(ps.join(''))), { numRuns: 5000 });
    fc.assert(fc.property(fc.string({ unit: 'binary', maxLength: 40 }), (s) => agrees(s)), { numRuns: 2000 });
    for (const t of ['\ufeff1', '\ufeff{"a":1e400}', '[1e400]\ufeff', '["\ud800", 1e400]', '{"__proto__": 1e400, "a": 1}', '{"a": 1e400, "a": 1}', '{"a": 1, "a": 1e400}', '[-0, -0.0, 1e-400, -1e-400]', '"\\\\" ', '["\\\\\\"", 1.0000000000000000001]', '1e400', '-0']) agrees(t);
  });
  test('where a number was rounded is recorded on its params array and index only, repeated keys included', () => {
    const o = parseClientJson('{"params": [0, 1e400], "params": [0, 1.0000000000000000001], "arguments": {"params": [1e-400, 0.12345678901234567891]}, "b": [1e400], "__proto__": 1e-400}') as Record<string, any>;
    expect([0, 1].map((i) => inexactJsonNumber(o.params, i))).toEqual([false, true]);
    // The first of an array only: query.ts refuses the call there.
    expect([0, 1].map((i) => inexactJsonNumber(o.arguments.params, i))).toEqual([true, false]);
    // Not in a params array (task r2: nothing else of a body reaches PostgreSQL as a parameter).
    expect([inexactJsonNumber(o.b, 0), inexactJsonNumber(o, '__proto__')]).toEqual([false, false]);
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
