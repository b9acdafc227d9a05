/**
 * Numbers in a client's JSON body that JSON.parse cannot carry exactly (task low48 item 1; the open
 * rest of red team rt46a P1). JSON.parse reads every number as a double, so a decimal with more
 * significant digits than a double keeps (`12345678901234567890.123`, `0.12345678901234567891`) or
 * beyond its range (`1e400`) reaches InterLock already rounded, and a `numeric` column would get a
 * value the agent did not write, silently. Node 20's JSON.parse gives a reviver no source text, and
 * the rounded double cannot tell (`1.0000000000000000001` reads as `1`), so the body's text is
 * looked at: `parseClientJson` parses with JSON.parse and, only when a params array of the body
 * (`PARAMS_PATHS`: where each route's interlock_query arguments hold `params`) holds a number and the
 * text a number literal that may be rounded, walks the text beside the parsed value once to record
 * the first element of each such array read from a literal whose value differs from the value pg
 * would send for the double it reads as (its `String(n)`): `inexactJsonNumber`. `src/pipeline/query.ts`
 * refuses the call at that parameter `invalid_arguments` (`inexactParamMessage`), telling the agent to
 * send it as a string, which PostgreSQL reads exactly (docs/values.md "Parameters"); no parameter of
 * the call is sent, so the ones after it need no record.
 *
 * Parsed by both places agents' bodies are parsed: POST /mcp (src/transport/admission.ts, before
 * the key is checked) and the Express routes (/v1, the legacy /mcp/* routes: src/http/common.ts
 * jsonBody). Cost beyond JSON.parse, linear (red team rt48d R2, task r2: bench/RESULTS.md): one pass
 * over the text outside strings (strings skipped by indexOf), no allocation, which is all when every
 * number literal has at most 15 significant digits and a magnitude within ±307 or no params array
 * holds a number; otherwise a second pass beside the parsed value that reads only the member
 * keys on the way to the params arrays, skips every other number, and calls String(n) only for
 * their elements of 16 or 17 significant digits or near the double's range, up to the first
 * rounded one; one WeakMap entry per params array holding one (three at most per body).
 */

/** A params array of a client's body (PARAMS_PATHS) → the index of its first element read from a number not carried exactly. */
const INEXACT = new WeakMap<object, number>();

const QUOTE = 0x22; // "
const BACKSLASH = 0x5c; // \
const MINUS = 0x2d; // -
const DIGIT_0 = 0x30;
const DIGIT_9 = 0x39;
const DOT = 0x2e;
const PLUS = 0x2b;
const COMMA = 0x2c;
const LOWER_E = 0x65;
const UPPER_E = 0x45;
const OPEN_ARRAY = 0x5b; // [
const CLOSE_ARRAY = 0x5d; // ]
const OPEN_OBJECT = 0x7b; // {
const CLOSE_OBJECT = 0x7d; // }

/** True for a character that can continue a JSON number token: digits, `.`, `e`, `E`, `+`, `-`. */
function numberChar(c: number): boolean {
  return (c >= DIGIT_0 && c <= DIGIT_9) || c === DOT || c === LOWER_E || c === UPPER_E || c === PLUS || c === MINUS;
}

/**
 * A decimal's value as a canonical key: sign, significant digits without leading or trailing
 * zeros, and the power of ten (`-12e-1` for -1.20); '0' for any zero. Null for text that is not a
 * decimal (e.g. `Infinity`).
 */
function decimalKey(s: string): string | null {
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(s);
  if (!m) return null;
  const frac = m[3] ?? '';
  const all = m[2] + frac;
  // Zeros stripped by index, not by regex: V8 runs /0+$/ in time quadratic in a run of zeros not at
  // the end (`1.000…0001` with 16 000 zeros took 0.1 s, a body-sized one minutes; red team rt48d R1).
  let a = 0;
  while (a < all.length && all.charCodeAt(a) === DIGIT_0) a++;
  if (a === all.length) return '0';
  let b = all.length;
  while (all.charCodeAt(b - 1) === DIGIT_0) b--;
  const exp = Number(m[4] ?? 0) - frac.length + (all.length - b);
  return `${m[1]}${all.slice(a, b)}e${exp}`;
}

/**
 * True when the JSON number `literal` (its source text) has the value of the double JSON.parse reads
 * it as, written as pg writes a number parameter (`String(n)`): what PostgreSQL receives is what
 * the agent wrote. `0.1`, `1.50`, `1e20` and `9007199254740993.0e-1` … are judged by value, so
 * `1.000000000000000000` is exact and `0.1000000000000000055511151231257827` (the double's exact
 * binary value, sent as `0.1`) is not; a number out of the double's range (`1e400`, `1e-400`) is not.
 */
export function jsonNumberIsExact(literal: string): boolean {
  const k = decimalKey(literal);
  return k !== null && k === decimalKey(String(Number(literal)));
}

/**
 * The index of the quote closing the JSON string whose opening quote is at `open` in `text` (the
 * first quote after it preceded by an even number of backslashes: `"\\"["` closes after `\\"`),
 * or -1 when the string is not closed. Uses indexOf, so a long string costs little.
 */
export function jsonStringEnd(text: string, open: number): number {
  let q = open;
  for (;;) {
    q = text.indexOf('"', q + 1);
    if (q < 0) return -1;
    let k = q - 1;
    while (text.charCodeAt(k) === BACKSLASH) k--;
    if ((q - 1 - k) % 2 === 0) return q;
  }
}

/** Verdicts of `numberToken` on a number token: surely carried exactly, surely not, or to compare with the double. */
const EXACT = 0;
const INEXACT_TOKEN = 1;
const COMPARE = 2;

/** Set by `numberToken`: the index just past the token and its verdict (EXACT, INEXACT_TOKEN or COMPARE). */
let tokenEnd = 0;
let tokenVerdict = EXACT;
/**
 * Set by `significand`: the indices of the first and last non-zero digit of a decimal's digits (-1
 * when all are zeros), their count (the `.` not counted) and the power of ten of the first one (its
 * magnitude: 2 for `123.4`, -2 for `0.0123`, exponent included).
 */
let sigFirst = -1;
let sigLast = -1;
let sigCount = 0;
let sigMagnitude = 0;

/**
 * Magnitude an exponent is clamped to: a string holds < 2^30 characters, so a decimal whose exponent
 * was clamped still has a magnitude beyond ±10^9, out of the double's range as its true one is.
 */
const EXPONENT_CLAMP = 1e10;

/** Set by `significand`: the index just past the decimal it read. */
let sigEnd = 0;

/**
 * Reads the decimal starting at `start` of `s` (a JSON number token, or String(n) of a finite
 * double: an optional `-`, digits, an optional `.` and fraction, an optional exponent), up to `end`
 * at most, into sigFirst, sigLast, sigCount, sigMagnitude and sigEnd (the index past it). One pass,
 * no allocation; the exponent is clamped to ±EXPONENT_CLAMP.
 */
function significand(s: string, start: number, end: number): void {
  let i = start;
  if (s.charCodeAt(i) === MINUS) i++;
  let first = -1;
  let last = -1;
  let dot = -1;
  let c = 0;
  for (; i < end; i++) {
    c = s.charCodeAt(i);
    if (c > DIGIT_0 && c <= DIGIT_9) {
      if (first < 0) first = i;
      last = i;
    } else if (c === DOT) dot = i;
    else if (c !== DIGIT_0) break;
  }
  const digitsEnd = i;
  let exp = 0;
  if (i < end && (c === LOWER_E || c === UPPER_E)) {
    i++;
    const sign = s.charCodeAt(i) === MINUS ? -1 : 1;
    if (s.charCodeAt(i) === MINUS || s.charCodeAt(i) === PLUS) i++;
    for (; i < end; i++) {
      const d = s.charCodeAt(i);
      if (d < DIGIT_0 || d > DIGIT_9) break;
      if (exp < EXPONENT_CLAMP) exp = exp * 10 + (d - DIGIT_0);
    }
    exp = sign * Math.min(exp, EXPONENT_CLAMP);
  }
  sigEnd = i;
  sigFirst = first;
  sigLast = last;
  if (first < 0) {
    sigCount = 0;
    sigMagnitude = 0;
    return;
  }
  const point = dot >= 0 ? dot : digitsEnd;
  sigCount = last - first + 1 - (first < point && point < last ? 1 : 0);
  sigMagnitude = (first < point ? point - first - 1 : point - first) + exp;
}

/**
 * Scans the JSON number token starting at `start` of `text` (a `-` or a digit outside strings) into
 * tokenEnd and tokenVerdict, in one pass without allocating. EXACT: a zero, or at most 15
 * significant digits with a magnitude between -307 and 307 (a normal double's range: any two such
 * decimals read as two different doubles, so the shortest text of the double, pg's String(n), is the
 * literal's value); INEXACT_TOKEN: more than 17 significant digits (String(n) of a double has at
 * most 17); COMPARE: anything else (16 or 17 digits, or near or beyond the double's range), for
 * `sameDecimal`. Agrees with jsonNumberIsExact (a fast-check property in
 * test/unit/attacks/rt48d-json-numbers.test.ts).
 */
function numberToken(text: string, start: number): void {
  significand(text, start, text.length);
  tokenEnd = sigEnd;
  tokenVerdict = verdict();
}

/** numberToken's verdict on the decimal significand has just read. */
function verdict(): number {
  if (sigCount === 0) return EXACT;
  if (sigCount > 17) return INEXACT_TOKEN;
  return sigCount <= 15 && sigMagnitude >= -307 && sigMagnitude <= 307 ? EXACT : COMPARE;
}

/**
 * True when the number token numberToken has just read (sigFirst, sigCount, sigMagnitude; in `text`)
 * has exactly the value of `x`, the double it reads as, written as pg writes it (String(x)):
 * jsonNumberIsExact without allocating but String(x).
 */
function sameDecimal(text: string, x: number): boolean {
  const first = sigFirst;
  const count = sigCount;
  const magnitude = sigMagnitude;
  if (!Number.isFinite(x)) return false;
  if (x === 0 || count === 0) return x === 0 && count === 0;
  const s = String(x);
  significand(s, 0, s.length);
  if (sigCount !== count || sigMagnitude !== magnitude) return false;
  for (let a = first, b = sigFirst, k = 0; k < count; a++, b++) {
    const ca = text.charCodeAt(a);
    if (ca === DOT) {
      b--;
      continue;
    }
    let cb = s.charCodeAt(b);
    if (cb === DOT) cb = s.charCodeAt(++b);
    if (ca !== cb) return false;
    k++;
  }
  return true;
}

/**
 * jsonNumberIsExact(literal) as parseClientJson judges it (numberToken's verdict, then sameDecimal
 * against Number(literal)) for a well-formed JSON number `literal`. Exported for the property test
 * that holds the two equal (test/unit/attacks/rt48d-json-numbers.test.ts).
 */
export function jsonNumberTokenIsExact(literal: string): boolean {
  numberToken(literal, 0);
  return tokenVerdict === EXACT || (tokenVerdict === COMPARE && sameDecimal(literal, Number(literal)));
}

/**
 * Length beyond which hasSuspectNumber counts a number token suspect without reading the rest of it
 * (recordInexact judges it): a decimal numberToken calls EXACT is rarely longer.
 */
const LONG_TOKEN = 40;

/**
 * True when `text` holds, outside strings, a number token that may not be carried exactly
 * (numberToken's verdict not EXACT, or longer than LONG_TOKEN characters). One linear pass, strings
 * skipped by indexOf, no allocation.
 */
function hasSuspectNumber(text: string): boolean {
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      i = jsonStringEnd(text, i);
      if (i < 0) return false;
    } else if (c === MINUS || (c >= DIGIT_0 && c <= DIGIT_9)) {
      // Most tokens: at most 15 characters without an exponent, so at most 15 significant digits
      // and a magnitude within ±15: EXACT, told by their length alone.
      let j = i + 1;
      let exponent = false;
      for (; j < n; j++) {
        const d = text.charCodeAt(j);
        if (!numberChar(d)) break;
        if (d === LOWER_E || d === UPPER_E) exponent = true;
        if (j - i >= LONG_TOKEN) return true;
      }
      if (j - i > 15 || exponent) {
        significand(text, i, j);
        if (verdict() !== EXACT) return true;
      }
      i = j - 1;
    }
  }
  return false;
}

/** The value of the JSON string token `text[open, close]` (quotes included): a slice unless it holds an escape. */
function stringAt(text: string, open: number, close: number): string {
  for (let i = open + 1; i < close; i++) if (text.charCodeAt(i) === BACKSLASH) return JSON.parse(text.slice(open, close + 1)) as string;
  return text.slice(open + 1, close);
}

/**
 * Where interlock_query's `params` array sits in a body a route hands to it, as paths of member keys
 * from the body's top level: `params` (POST /v1/sources/{id}/query, src/http/v1.ts), `arguments.params`
 * (legacy POST /mcp/tools/call, src/http/legacy.ts) and `params.arguments.params` (a JSON-RPC
 * tools/call: POST /mcp, src/transport/admission.ts; legacy /mcp/sse/messages). Numbers are recorded
 * in these arrays only (red team rt48d R2): a record costs a WeakMap entry per array, which a body of
 * many small arrays would otherwise make dear, and no other number of a body is sent to PostgreSQL as
 * a parameter. A route that hands interlock_query a params array from elsewhere must add its path.
 */
export const PARAMS_PATHS: ReadonlyArray<readonly string[]> = [['params'], ['arguments', 'params'], ['params', 'arguments', 'params']];

/** The value at `path` (member keys) under `value`, or undefined where a step is not an object's own member. */
function memberAt(value: unknown, path: readonly string[]): unknown {
  let v = value;
  for (const k of path) v = ownMember(v, k);
  return v;
}

/**
 * Records on `value` (JSON.parse(text), `text` well-formed) the first element of each of its params
 * arrays (at PARAMS_PATHS) read from a number not carried exactly: one pass over the text beside the parsed
 * value, each container of the text on the way to a params array matched to the array or object
 * JSON.parse made of it (its holder's member by key). A key an object repeats keeps its last member's
 * value (JSON.parse), so the records made under an earlier member of that key are dropped when the
 * object closes. Linear: each member key on the way is read at most twice, numbers elsewhere only
 * skipped, String(n) only for elements numberToken cannot judge.
 */
function recordInexact(text: string, value: unknown, targets: object[]): void {
  // The objects on the way to the params arrays: with the arrays, the only containers followed.
  const followed: object[] = [];
  for (const path of PARAMS_PATHS) {
    if (!targets.includes(memberAt(value, path) as object)) continue;
    for (let d = 0; d < path.length; d++) {
      const o = memberAt(value, path.slice(0, d)) as object;
      if (!followed.includes(o)) followed.push(o);
    }
  }
  const recHolder: Array<object | null> = [];
  const recKey: number[] = [];
  // The open containers, innermost last: the parsed array or object when followed (null otherwise,
  // and under an earlier member of a repeated key whose value is not kept), whether an array, the
  // element index, the first record made in it and its first member (objects).
  const holders: Array<object | null> = [];
  const isArray: boolean[] = [];
  const index: number[] = [];
  const recStart: number[] = [];
  const memberStart: number[] = [];
  // Members of the open objects: where each key's string token opens and closes, its first record.
  const keyOpen: number[] = [];
  const keyClose: number[] = [];
  const memberRec: number[] = [];
  let expectKey = false;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    const top = holders.length - 1;
    if (c === QUOTE) {
      const close = jsonStringEnd(text, i);
      if (expectKey) {
        keyOpen.push(i);
        keyClose.push(close);
        memberRec.push(recHolder.length);
        expectKey = false;
      }
      i = close;
    } else if (c === COMMA) {
      if (isArray[top]) index[top]++;
      else expectKey = true;
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      let child: unknown = top < 0 ? value : null;
      const h = top >= 0 ? holders[top] : null;
      // Only objects lead to a params array (followed holds no array but targets).
      if (h !== null && !isArray[top]) child = (h as Record<string, unknown>)[stringAt(text, keyOpen[keyOpen.length - 1], keyClose[keyClose.length - 1])];
      const open = c === OPEN_ARRAY ? (targets.includes(child as object) ? child : null) : followed.includes(child as object) && !Array.isArray(child) ? child : null;
      holders.push(open as object | null);
      isArray.push(c === OPEN_ARRAY);
      index.push(0);
      recStart.push(recHolder.length);
      memberStart.push(keyOpen.length);
      expectKey = c === OPEN_OBJECT;
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      if (c === CLOSE_OBJECT) {
        const base = memberStart[top];
        if (recHolder.length > recStart[top] && keyOpen.length - base > 1) dropRepeatedKeys(text, base, keyOpen, keyClose, memberRec, recHolder);
        keyOpen.length = keyClose.length = memberRec.length = base;
      }
      holders.pop();
      isArray.pop();
      index.pop();
      recStart.pop();
      memberStart.pop();
      expectKey = false;
    } else if (c === MINUS || (c >= DIGIT_0 && c <= DIGIT_9)) {
      const h = top >= 0 && isArray[top] ? holders[top] : null;
      if (h === null) {
        // Not an element of a params array: skipped.
        let j = i + 1;
        while (j < n && numberChar(text.charCodeAt(j))) j++;
        i = j - 1;
        continue;
      }
      numberToken(text, i);
      const end = tokenEnd;
      if (tokenVerdict !== EXACT) {
        const k = index[top];
        const x = (h as unknown[])[k];
        if (tokenVerdict === INEXACT_TOKEN || !sameDecimal(text, typeof x === 'number' ? x : Number(text.slice(i, end)))) {
          recHolder.push(h);
          recKey.push(k);
          // Its first such element is enough: query.ts refuses the call there, so no later one is sent.
          holders[top] = null;
        }
      }
      i = end - 1;
    }
  }
  for (let r = 0; r < recHolder.length; r++) {
    const h = recHolder[r];
    // A params array's first record is its first rounded element (of the occurrence its key kept).
    if (h !== null && !INEXACT.has(h)) INEXACT.set(h, recKey[r]);
  }
}

/**
 * At the close of an object whose members are keyOpen[base…] (with records made under them): drops
 * (sets to null in recHolder) the records made under a member whose key a later member repeats,
 * whose value JSON.parse did not keep.
 */
function dropRepeatedKeys(text: string, base: number, keyOpen: number[], keyClose: number[], memberRec: number[], recHolder: Array<object | null>): void {
  const members = keyOpen.length - base;
  const keys: string[] = [];
  const last = new Map<string, number>();
  for (let m = 0; m < members; m++) {
    const k = stringAt(text, keyOpen[base + m], keyClose[base + m]);
    keys.push(k);
    last.set(k, m);
  }
  if (last.size === members) return;
  for (let m = 0; m < members; m++) {
    if (last.get(keys[m]) === m) continue;
    const to = m + 1 < members ? memberRec[base + m + 1] : recHolder.length;
    for (let r = memberRec[base + m]; r < to; r++) recHolder[r] = null;
  }
}

/** The distinct arrays at PARAMS_PATHS of `value` that hold a number (PARAMS_PATHS spelled out: this runs on every body). */
function paramsArrays(value: unknown): object[] {
  const out: object[] = [];
  const p = ownMember(value, 'params');
  for (const t of [p, ownMember(ownMember(value, 'arguments'), 'params'), ownMember(ownMember(p, 'arguments'), 'params')]) {
    if (Array.isArray(t) && !out.includes(t) && t.some((x) => typeof x === 'number')) out.push(t);
  }
  return out;
}

/** `o[k]` when `o` is a (non-array) object with an own member `k`, else undefined. */
function ownMember(o: unknown, k: string): unknown {
  return typeof o === 'object' && o !== null && !Array.isArray(o) && Object.prototype.hasOwnProperty.call(o, k) ? (o as Record<string, unknown>)[k] : undefined;
}

/**
 * Parses a client's JSON request body exactly as `JSON.parse(text)` does (same value, same
 * SyntaxError on malformed text). When a params array of it (PARAMS_PATHS: where each route's
 * interlock_query arguments hold `params`) has elements read from a number literal that is not
 * carried exactly (jsonNumberIsExact false), the first one's index is recorded for `inexactJsonNumber`.
 * Only for bodies a client sent: the records live as long as the parsed value. Cost beyond
 * JSON.parse (bench/rt48d-json-numbers-cost.ts, bench/RESULTS.md task r2): one pass over the text
 * outside strings; when a number token may be rounded (more than 15 significant digits, or a
 * magnitude beyond ±307) and a params array holds a number, a second pass beside the parsed value
 * (`recordInexact`).
 */
export function parseClientJson(text: string): unknown {
  const value: unknown = JSON.parse(text);
  if (!hasSuspectNumber(text)) return value;
  const targets = paramsArrays(value);
  if (targets.length > 0) recordInexact(text, value, targets);
  return value;
}

/**
 * True when `holder[key]` is the first number of a params array (PARAMS_PATHS) that parseClientJson
 * read from a literal it could not carry exactly (e.g. `params[1]` of `{"params":[1, 1e-400, 1e400]}`;
 * `params[2]` false: the call is refused at the first); false for anything else: numbers elsewhere in
 * a body, values built in code.
 */
export function inexactJsonNumber(holder: object, key: string | number): boolean {
  const first = INEXACT.get(holder);
  // A string key counts in its canonical spelling only ('1', not '01').
  return first !== undefined && (typeof key === 'number' ? key === first : key === String(first));
}

/**
 * What an agent is told of params[i] of interlock_query when it is a number JSON cannot carry
 * exactly (an integer beyond ±(2^53−1), a decimal with more significant digits than a double keeps,
 * a number out of its range, 1e400 read as Infinity included): the message of the tool error
 * `invalid_arguments` (spec/errors-v1.json toolErrors; docs/values.md "Parameters"), given by
 * src/pipeline/query.ts and, for a non-finite number the argument schema refuses first, by
 * src/tools/registry.ts describeValidationErrors.
 */
export const inexactParamMessage = (i: number): string =>
  `params[${i}] is a number JSON cannot carry exactly (an integer beyond ±(2^53−1), or more significant digits than a double keeps, about 15): it would reach PostgreSQL rounded. Send it as a string, e.g. "9007199254740993" or "12345678901234567890.123", which PostgreSQL reads exactly.`;
