/**
 * Allocation-sized built-in functions (issue 22, item 4): built-ins whose arguments size an
 * allocation or a result, and the constant-size check the analyser applies to them.
 *
 * The classification is derived from pg_proc: a built-in has a *sizing-shaped argument* when it
 * takes an integer, numeric or interval argument (or an integer array) and returns a string, bit
 * string, `bytea` or array value, or a set (`hasSizingShape`). Every such function that the
 * policy does not refuse is reviewed here, either as `ALLOCATION_SIZED` (its argument sizes the
 * result: checked) or as `BOUNDED_BY_INPUT` (its result is no larger than its other inputs, or
 * fixed). Tests walk the pg_proc snapshots and the live server's pg_proc and fail on a function with
 * that shape in neither list, so a new PostgreSQL version cannot add one silently.
 *
 * The check (`allocationSizeReason`) refuses a call whose constant arguments ask for more than
 * `RESOURCE_LIMIT` units (rows, characters, bits or array elements). Non-constant sizes (a column,
 * a parameter, a sub-select) are allowed, as for `generate_series` since issue 12: the statement
 * timeout and the wire byte budget bound them at execution.
 */

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type N = Record<string, any>;

/** Largest constant size accepted (rows, characters, bits or array elements). */
export const RESOURCE_LIMIT = 10_000_000;

/** How a function's arguments size its result. Argument indexes are 0-based. */
export type SizingRole =
  /** `generate_series(start, stop [, step])`: rows = (stop − start) / step + 1 (numbers, timestamps with an interval step). */
  | { kind: 'series' }
  /** One argument is a length in `unit`s; `offset` is subtracted first (a `bpchar` type modifier counts 4 header bytes). */
  | { kind: 'length'; arg: number; unit: 'characters' | 'bits'; offset?: number }
  /** One argument is an integer array of dimension lengths: elements = their product. */
  | { kind: 'dimensions'; arg: number };

/** Built-ins (`pg_catalog`) whose constant size arguments are checked, with how they size their result. */
export const ALLOCATION_SIZED: ReadonlyMap<string, SizingRole> = new Map<string, SizingRole>([
  ['generate_series', { kind: 'series' }],
  ['repeat', { kind: 'length', arg: 1, unit: 'characters' }],
  ['lpad', { kind: 'length', arg: 1, unit: 'characters' }],
  ['rpad', { kind: 'length', arg: 1, unit: 'characters' }],
  ['array_fill', { kind: 'dimensions', arg: 1 }],
  // bit(value, length [, explicit]): the length-coercion and integer-to-bit functions pad to `length` bits.
  ['bit', { kind: 'length', arg: 1, unit: 'bits' }],
  // bpchar(value, typmod, explicit): pads to typmod − 4 characters.
  ['bpchar', { kind: 'length', arg: 1, unit: 'characters', offset: 4 }],
]);

/** Names of `ALLOCATION_SIZED`: the policy's `resource_checked` class (rules.ts). */
export const RESOURCE_CHECKED: ReadonlySet<string> = new Set(ALLOCATION_SIZED.keys());

/**
 * Built-ins with a sizing-shaped argument whose result is bounded by their other inputs (or is of
 * fixed size), each with the reason. Reviewed; the tests require every such function to be here or
 * in `ALLOCATION_SIZED`.
 */
export const BOUNDED_BY_INPUT: ReadonlyMap<string, string> = new Map([
  ...['left', 'right', 'substr', 'substring', 'split_part', 'overlay', 'to_ascii', 'trim_array', 'regexp_replace', 'regexp_substr'].map(
    (n) => [n, 'the integer selects or counts within the input; the result is no longer than the inputs'] as [string, string],
  ),
  ...['bitshiftleft', 'bitshiftright', 'set_bit', 'set_byte', 'varbit', 'varchar'].map(
    (n) => [n, 'the result has the input\'s length (shifts, bit and byte updates, truncating length coercions)'] as [string, string],
  ),
  ...['json_array_element', 'json_array_element_text', 'jsonb_array_element', 'jsonb_array_element_text', 'jsonb_delete', 'generate_subscripts', 'unnest', 'ts_delete', 'tsquery_phrase'].map(
    (n) => [n, 'the integer indexes the input; the result (or its rows) is bounded by the input'] as [string, string],
  ),
  ...['chr', 'to_bin', 'to_hex', 'to_oct', 'pg_size_pretty', 'bytea', 'int2_avg_accum', 'int2_avg_accum_inv', 'int4_avg_accum', 'int4_avg_accum_inv', 'int4_avg_combine', 'float4_accum', 'float8_accum', 'float8_regr_accum', 'interval_accum', 'interval_accum_inv', 'percentile_cont', 'percentile_disc', 'to_char'].map(
    (n) => [n, 'fixed-size result (a number\'s text or bytes, an aggregate\'s fixed-size state)'] as [string, string],
  ),
]);

/** Argument types that can size a result. */
const SIZING_ARG_TYPES: ReadonlySet<string> = new Set(['int2', 'int4', 'int8', 'numeric', '_int2', '_int4', '_int8', 'interval']);
/** Result types whose size is not fixed: strings, bit strings, bytes, arrays. */
const SIZED_RESULTS: ReadonlySet<string> = new Set(['text', 'varchar', 'bpchar', 'bit', 'varbit', 'bytea', 'anyarray', 'anycompatiblearray', 'tsvector', 'tsquery', 'json', 'jsonb']);

/**
 * True when a pg_proc snapshot row (`[schema, name, argument types, return type, …, returns set]`,
 * snapshot.ts) has a sizing-shaped argument: an integer, numeric, interval or integer-array argument
 * and a string, bit string, bytea, array, JSON or text-search result, or a set result.
 */
export function hasSizingShape(argTypes: string, returnType: string, returnsSet: boolean): boolean {
  const args = argTypes === '' ? [] : argTypes.split(' ');
  if (!args.some((a) => SIZING_ARG_TYPES.has(a))) return false;
  return returnsSet || SIZED_RESULTS.has(returnType) || returnType.startsWith('_');
}

/**
 * Returns the agent-facing refusal ("resource limit: …" follows) when a call to `pg_catalog.name`
 * with the parse-tree arguments `args` asks, by constants alone, for more than `RESOURCE_LIMIT`
 * units; null otherwise (not allocation-sized, not constant, or within the limit).
 */
export function allocationSizeReason(name: string, args: readonly N[]): string | null {
  const role = ALLOCATION_SIZED.get(name);
  if (!role) return null;
  if (role.kind === 'series') return seriesReason(args);
  if (role.kind === 'length') {
    const n = constNumber(args[role.arg]);
    if (n !== null && n - (role.offset ?? 0) > RESOURCE_LIMIT) return `${name} would produce more than ${RESOURCE_LIMIT} ${role.unit}`;
    return null;
  }
  const dims = constIntArray(args[role.arg]);
  if (dims === null) return null;
  let elements = 1;
  for (const d of dims) elements *= Math.max(0, d);
  if (elements > RESOURCE_LIMIT) return `${name} would produce more than ${RESOURCE_LIMIT} array elements`;
  return null;
}

/**
 * Why a type modifier is refused: `bit(n)`, `varbit(n)` and `char(n)` with n over `RESOURCE_LIMIT`
 * (a cast pads to n), or null. `name` is the bare type name as parsed (`bpchar`, `bit`, …).
 */
export function typeModifierReason(name: string, typmods: readonly N[] | undefined): string | null {
  if (!typmods || typmods.length === 0) return null;
  const unit = name === 'bit' ? 'bits' : name === 'bpchar' || name === 'char' || name === 'character' ? 'characters' : null;
  if (!unit) return null;
  const n = constNumber(typmods[0]);
  if (n !== null && n > RESOURCE_LIMIT) return `a ${name}(${n}) value would hold more than ${RESOURCE_LIMIT} ${unit}`;
  return null;
}

function seriesReason(args: readonly N[]): string | null {
  if (args.length < 2) return null;
  const limit = `generate_series would produce more than ${RESOURCE_LIMIT} rows`;
  const start = constNumber(args[0]);
  const stop = constNumber(args[1]);
  if (start !== null || stop !== null) {
    const step = args.length >= 3 ? constNumber(args[2]) : 1;
    if (start === null || stop === null || step === null || step === 0) return null; // PostgreSQL refuses a zero step itself
    return Math.floor((stop - start) / step) + 1 > RESOURCE_LIMIT ? limit : null;
  }
  // Timestamps with an interval step.
  if (args.length < 3) return null;
  const step = constInterval(args[2]);
  const stopText = constText(args[1])?.trim().toLowerCase();
  // An infinite stop in the step's direction never ends.
  if (step !== null && ((step > 0 && stopText === 'infinity') || (step < 0 && stopText === '-infinity'))) return limit;
  const t0 = constTimestamp(args[0]);
  const t1 = constTimestamp(args[1]);
  if (t0 === null || t1 === null || step === null || step === 0) return null;
  return Math.floor((t1 - t0) / step) + 1 > RESOURCE_LIMIT ? limit : null;
}

function unwrapCast(node: N | undefined): N | undefined {
  let n = node;
  while (n && Object.prototype.hasOwnProperty.call(n, 'TypeCast')) n = (n.TypeCast as N).arg;
  return n;
}

/** The text of a string constant (through casts), else null. */
function constText(node: N | undefined): string | null {
  const n = unwrapCast(node);
  const c = n && Object.prototype.hasOwnProperty.call(n, 'A_Const') ? (n.A_Const as N) : null;
  return c && c.sval && typeof c.sval.sval === 'string' ? c.sval.sval : null;
}

/** Value of a constant numeric argument (`1e9`, `-5`, `'100'`, `10::bigint`), else null. */
export function constNumber(node: N | undefined): number | null {
  const n = unwrapCast(node);
  if (!n) return null;
  if (Object.prototype.hasOwnProperty.call(n, 'A_Expr')) {
    const e = n.A_Expr as N;
    const op = e.name?.[0]?.String?.sval;
    if (e.kind === 'AEXPR_OP' && !e.lexpr && (op === '-' || op === '+')) {
      const v = constNumber(e.rexpr);
      return v === null ? null : op === '-' ? -v : v;
    }
    return null;
  }
  if (!Object.prototype.hasOwnProperty.call(n, 'A_Const')) return null;
  const c = n.A_Const as N;
  let text: string | undefined;
  if (c.ival) text = String(c.ival.ival ?? 0);
  else if (c.fval) text = String(c.fval.fval);
  else if (c.sval && typeof c.sval.sval === 'string') text = c.sval.sval.trim();
  if (text === undefined || text === '') return null;
  const v = Number(text);
  return Number.isFinite(v) ? v : null;
}

/** A constant integer array: `ARRAY[a, b]` of constants or `'{a,b}'` (through casts), else null. */
function constIntArray(node: N | undefined): number[] | null {
  const n = unwrapCast(node);
  if (!n) return null;
  if (Object.prototype.hasOwnProperty.call(n, 'A_ArrayExpr')) {
    const out: number[] = [];
    for (const el of ((n.A_ArrayExpr as N).elements ?? []) as N[]) {
      const v = constNumber(el);
      if (v === null) return null;
      out.push(v);
    }
    return out;
  }
  const text = constText(n);
  const m = text === null ? null : /^\s*\{([^{}]*)\}\s*$/.exec(text);
  if (!m) return null;
  const out = m[1].split(',').map((s) => Number(s.trim()));
  return out.every((v) => Number.isFinite(v)) ? out : null;
}

/** Milliseconds of a constant ISO-style timestamp or date (`'2020-01-01'`, `'2020-01-01 10:00:00+02'`), else null. */
function constTimestamp(node: N | undefined): number | null {
  const text = constText(node)?.trim();
  if (!text || !/^\d{4}-\d{2}-\d{2}/.test(text)) return null;
  let iso = text.replace(' ', 'T');
  if (iso.length === 10) iso += 'T00:00:00';
  const zone = /([+-])(\d{2}):?(\d{2})?$/.exec(iso.slice(19));
  if (zone) iso = iso.slice(0, iso.length - zone[0].length) + `${zone[1]}${zone[2]}:${zone[3] ?? '00'}`;
  else if (!/[zZ]$/.test(iso)) iso += 'Z';
  const v = Date.parse(iso);
  return Number.isFinite(v) ? v : null;
}

const UNIT_MS: ReadonlyArray<readonly [RegExp, number]> = [
  [/^(microseconds?|usecs?|us)$/, 0.001],
  [/^(milliseconds?|msecs?|ms)$/, 1],
  [/^(seconds?|secs?|s)$/, 1000],
  [/^(minutes?|mins?|m)$/, 60_000],
  [/^(hours?|hrs?|h)$/, 3_600_000],
  [/^(days?|d)$/, 86_400_000],
  [/^(weeks?|w)$/, 7 * 86_400_000],
  [/^(months?|mons?)$/, 30 * 86_400_000],
  [/^(years?|yrs?|y)$/, 365 * 86_400_000],
];

/** Milliseconds of a constant interval in PostgreSQL's verbose form (`'1 day 2 hours'`, `'00:00:01'`), else null. */
function constInterval(node: N | undefined): number | null {
  const text = constText(node)?.trim().toLowerCase().replace(/^@\s*/, '');
  if (!text) return null;
  let total = 0;
  const re = /\s*([+-]?\d+(?:\.\d+)?)\s*([a-z]+)|\s*([+-]?)(\d+):(\d{2})(?::(\d{2}(?:\.\d+)?))?/y;
  let pos = 0;
  while (pos < text.length) {
    re.lastIndex = pos;
    const m = re.exec(text);
    if (!m) return null;
    pos = re.lastIndex;
    if (m[2] !== undefined) {
      const unit = UNIT_MS.find(([u]) => u.test(m[2]));
      if (!unit) return null;
      total += Number(m[1]) * unit[1];
    } else {
      const sign = m[3] === '-' ? -1 : 1;
      total += sign * (Number(m[4]) * 3_600_000 + Number(m[5]) * 60_000 + Number(m[6] ?? 0) * 1000);
    }
  }
  return Number.isFinite(total) ? total : null;
}
