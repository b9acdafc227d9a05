/**
 * Numbers in a client's JSON body that JSON.parse cannot carry exactly (task low48 item 1; the open
 * rest of red team rt46a P1). JSON.parse reads every number as a double, so a decimal with more
 * significant digits than a double keeps (`12345678901234567890.123`, `0.12345678901234567891`) or
 * beyond its range (`1e400`) reaches InterLock already rounded, and a `numeric` column would get a
 * value the agent did not write, silently. Node 20's JSON.parse gives a reviver no source text, and
 * the rounded double cannot tell (`1.0000000000000000001` reads as `1`), so the body's text is
 * looked at: `parseClientJson` parses as JSON.parse does and, only when the text holds a number
 * literal whose value differs from the value pg would send for the double it reads as (its
 * `String(n)`), parses once more to record where that number sits (`inexactJsonNumber`).
 * `src/pipeline/query.ts` refuses such a parameter `invalid_arguments`, telling the agent to send it
 * as a string, which PostgreSQL reads exactly (docs/values.md "Parameters").
 *
 * Parsed by both places agents' bodies are parsed: POST /mcp (src/transport/admission.ts) and the
 * Express routes (/v1, the legacy /mcp/* routes: src/http/common.ts jsonBody). Cost on a body
 * without such a number: one linear pass over the text outside strings (strings skipped by
 * indexOf), no allocation.
 */

import { randomUUID } from 'node:crypto';

/** Holder (the array or object a number was read into) → keys whose number was not carried exactly. */
const INEXACT = new WeakMap<object, Set<string>>();

const QUOTE = 0x22; // "
const BACKSLASH = 0x5c; // \
const MINUS = 0x2d; // -
const DIGIT_0 = 0x30;
const DIGIT_9 = 0x39;

/** True for a character that can continue a JSON number token: digits, `.`, `e`, `E`, `+`, `-`. */
function numberChar(c: number): boolean {
  return (c >= DIGIT_0 && c <= DIGIT_9) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === MINUS;
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

/**
 * Calls `visit(start, end)` for each number token of the JSON text `text` outside strings that may
 * not be carried exactly: longer than 15 characters or with an exponent (a token of at most 15
 * characters without one has at most 15 significant digits and lies between 1e-14 and 1e15, which
 * a double always carries). Stops and returns true at the first call returning true.
 */
function suspectNumbers(text: string, visit: (start: number, end: number) => boolean): boolean {
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      i = jsonStringEnd(text, i);
      if (i < 0) return false;
    } else if (c === MINUS || (c >= DIGIT_0 && c <= DIGIT_9)) {
      let j = i + 1;
      let exponent = false;
      for (; j < n; j++) {
        const d = text.charCodeAt(j);
        if (!numberChar(d)) break;
        if (d === 0x65 || d === 0x45) exponent = true;
      }
      if ((j - i > 15 || exponent) && visit(i, j)) return true;
      i = j - 1;
    }
  }
  return false;
}

/**
 * Parses a client's JSON request body exactly as `JSON.parse(text)` does (same value, same
 * SyntaxError on malformed text). When the text holds a number that is not carried exactly
 * (jsonNumberIsExact false), the place each such number was read into is recorded for
 * `inexactJsonNumber`. Only for bodies a client sent: the records live as long as the parsed value.
 */
export function parseClientJson(text: string): unknown {
  const value: unknown = JSON.parse(text);
  if (!suspectNumbers(text, (a, b) => !jsonNumberIsExact(text.slice(a, b)))) return value;
  // Rare: parse once more with each such number as a marker string, which the reviver turns back
  // into the same double (Number() and JSON.parse round a JSON number alike), recording its holder.
  const nonce = `\u0000inexact-${randomUUID()}:`;
  const literals: string[] = [];
  let marked = '';
  let last = 0;
  suspectNumbers(text, (a, b) => {
    const lit = text.slice(a, b);
    if (jsonNumberIsExact(lit)) return false;
    marked += `${text.slice(last, a)}${JSON.stringify(nonce + literals.length)}`;
    literals.push(lit);
    last = b;
    return false;
  });
  marked += text.slice(last);
  return JSON.parse(marked, function (this: object, key: string, v: unknown): unknown {
    if (typeof v !== 'string' || !v.startsWith(nonce)) return v;
    const lit = literals[Number(v.slice(nonce.length))];
    if (lit === undefined) return v;
    let keys = INEXACT.get(this);
    if (!keys) INEXACT.set(this, (keys = new Set()));
    keys.add(key);
    return Number(lit);
  });
}

/**
 * True when `holder[key]` is a number parseClientJson read from a literal it could not carry
 * exactly (e.g. `params[0]` of `{"params":[0.12345678901234567891]}`); false for anything else,
 * values built in code included.
 */
export function inexactJsonNumber(holder: object, key: string | number): boolean {
  return INEXACT.get(holder)?.has(String(key)) ?? false;
}
