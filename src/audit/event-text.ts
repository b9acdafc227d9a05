/**
 * Audit chain format 2 (migration 20261201800000000; issue 13). The gateway sends a batch as one
 * canonical JSON text; the control database parses that text into the rows it stores and hashes
 * the text itself, so what is sealed is exactly what was stored (the writer cannot seal anything
 * else), and sealing costs the database one SHA-256 instead of rendering every stored row again.
 * `interlock audit verify` rebuilds the same text from the stored rows with `eventsText` and
 * recomputes the hash.
 *
 * That only works if a row's text is a function of the values PostgreSQL stores, so a row is first
 * normalised to values that survive the round trip unchanged:
 *
 * - text (every text column, every string inside `details`, every key): NUL (U+0000, which
 *   PostgreSQL's text and jsonb refuse) and lone UTF-16 surrogates (not encodable in UTF-8) become
 *   U+FFFD; the indexed columns (request_id, identity_id, source_id, approval_id) longer than 512
 *   code units are cut to 500 plus "…[truncated]" (a B-tree entry must stay under 2,704 bytes);
 * - `time`: a valid instant from year 1 to 9999, as `YYYY-MM-DDTHH:MM:SS.mmmZ` (milliseconds: what a
 *   JavaScript Date holds); anything else (missing, unparsable, out of range) is "now";
 * - `row_count`: a safe integer or null (−0 as 0); `duration_ms`: a finite number or null (−0 as 0);
 * - `relations`: strings only;
 * - `details`: without fields whose names say they hold secrets (api_key, password, token, …, at
 *   every level), a JSON object of plain values (objects by own enumerable keys, arrays with holes as
 *   null, strings, finite numbers, booleans, null; a BigInt becomes its decimal string, a Date its ISO
 *   string, undefined / functions / symbols are left out of objects and null in arrays; nesting
 *   deeper than 20 levels becomes "[depth]", a value met again inside itself "[cycle]", and past
 *   10,000 values in one row the rest "[truncated]").
 *
 * A row's text is a JSON object of its twenty columns in the table's order, `details` with keys
 * sorted by UTF-16 code units at every level; a batch's text is the JSON array of its rows' texts.
 * A batch's hash (computed by the database, recomputed by verify) is
 * SHA-256(prev_hash ‖ UTF8("interlock-audit-v2\n" ‖ batch id ‖ "\n" ‖ committed_at in UTC with
 * microseconds ‖ "\n" ‖ the events' ids, ascending, joined by "," ‖ "\n" ‖ the batch's text)).
 */
import { createHash } from 'node:crypto';
import type { AuditRowInput } from './types';
import { cutText } from '../errors/cut-text';

/** The first line of a format-2 batch's hashed header. */
export const CHAIN_V2_TAG = 'interlock-audit-v2';

const NEEDS_FIX = /[\u0000\uD800-\uDFFF]/;
const BAD_CHARS = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** `s` with NUL and lone surrogates replaced by U+FFFD (storable as PostgreSQL text and jsonb). */
export function storableText(s: string): string {
  return NEEDS_FIX.test(s) ? s.replace(BAD_CHARS, '\uFFFD') : s;
}

const text = (v: string | null | undefined): string | null => (typeof v === 'string' ? storableText(v) : null);

/** Longest value (UTF-16 code units) kept in an indexed column: a B-tree entry must stay under 2,704 bytes. */
const INDEXED_MAX = 512;

/** `v` for an indexed column (request_id, identity_id, source_id, approval_id): storable, and cut to 500 units plus "…[truncated]" past 512. */
const indexedText = (v: string | null | undefined): string | null =>
  typeof v === 'string' ? storableText(v.length > INDEXED_MAX ? `${cutText(v, 500)}…[truncated]` : v) : null;

/** 0001-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z in ms since the epoch (four-digit years render alike in JavaScript and PostgreSQL). */
const MIN_TIME = -62135596800000;
const MAX_TIME = 253402300799999;

/** The value of `t`'s `len` ASCII digits from `at`, or -1 when one of them is not 0–9. */
function digitsAt(t: string, at: number, len: number): number {
  let v = 0;
  for (let i = at; i < at + len; i++) {
    const c = t.charCodeAt(i) - 48;
    if (c < 0 || c > 9) return -1;
    v = v * 10 + c;
  }
  return v;
}

/**
 * True when `t` is already `YYYY-MM-DDTHH:MM:SS.mmmZ` naming a real instant of years 1–9999 (a month's
 * days, hours to 23, minutes and seconds to 59): then `new Date(t).toISOString()` is `t` itself, so
 * storableTime returns it without parsing and formatting a Date (issue 28 item 3: an event's time is
 * written by toISOString). Anything else (rolled-over days, 24:00, leap seconds, year 0000…) is
 * left to the Date round trip, as before. Read character by character (h28e: no regex match array
 * per event), exactly what `/^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.\d{3}Z$/` accepted
 * (test/unit/audit/canonical-time.test.ts).
 */
function isCanonicalInstant(t: string): boolean {
  if (t.length !== 24 || t.charCodeAt(4) !== 0x2d || t.charCodeAt(7) !== 0x2d || t.charCodeAt(10) !== 0x54 || t.charCodeAt(13) !== 0x3a || t.charCodeAt(16) !== 0x3a || t.charCodeAt(19) !== 0x2e || t.charCodeAt(23) !== 0x5a) return false;
  const y = digitsAt(t, 0, 4);
  const mo = digitsAt(t, 5, 2);
  const d = digitsAt(t, 8, 2);
  const h = digitsAt(t, 11, 2);
  const mi = digitsAt(t, 14, 2);
  const s = digitsAt(t, 17, 2);
  if (y < 0 || mo < 0 || d < 0 || h < 0 || mi < 0 || s < 0 || digitsAt(t, 20, 3) < 0) return false;
  if (y < 1 || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || s > 59) return false;
  const days = mo === 2 ? (y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0) ? 29 : 28) : mo === 4 || mo === 6 || mo === 9 || mo === 11 ? 30 : 31;
  return d <= days;
}

/** `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ` when it names an instant in years 1–9999, else `now`. */
function storableTime(t: string | Date | null | undefined, now: () => Date): string {
  if (typeof t === 'string' && isCanonicalInstant(t)) return t;
  if (t !== null && t !== undefined) {
    const d = t instanceof Date ? t : new Date(t);
    const ms = d.getTime();
    if (ms >= MIN_TIME && ms <= MAX_TIME) return d.toISOString();
  }
  return now().toISOString();
}

/** Names of fields that say they hold secrets: left out of `details` at every level (defence in depth). */
const SECRET_KEY = /^(api_?key|authorization|password|secret|token|bearer|key_?pepper)$/i;

/** Most values `details` keeps per row (objects, arrays and scalars counted alike). */
const MAX_DETAIL_VALUES = 10_000;

/**
 * A JSON-plain copy of `v` (see the module comment) whose every string is storable. `inArray` says
 * whether a value JSON cannot hold becomes null (array element) or is left out (undefined).
 * `path` holds the objects being copied (a cycle's way back), `budget.left` the values still allowed.
 */
function plain(v: unknown, depth: number, inArray: boolean, path: object[], budget: { left: number }): unknown {
  if (budget.left <= 0) return '[truncated]';
  budget.left--;
  if (v === null) return null;
  switch (typeof v) {
    case 'string':
      return storableText(v);
    case 'number':
      return Number.isFinite(v) ? (Object.is(v, -0) ? 0 : v) : null;
    case 'boolean':
      return v;
    case 'bigint':
      return v.toString();
    case 'object':
      break;
    default:
      return inArray ? null : undefined;
  }
  if (depth > 20) return '[depth]';
  if (v instanceof Date) return Number.isNaN(v.getTime()) ? null : v.toISOString();
  // The objects being copied, outermost first (at most 21: depth stops at 20), so a linear search.
  if (path.includes(v)) return '[cycle]';
  path.push(v);
  try {
    if (Array.isArray(v)) {
      const out: unknown[] = new Array(v.length);
      for (let i = 0; i < v.length; i++) out[i] = plain(v[i], depth + 1, true, path, budget);
      return out;
    }
    const out: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
    const o = v as Record<string, unknown>;
    // Own enumerable string keys, in Object.entries' order, each value read once (no pair arrays).
    const keys = Object.keys(o);
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i];
      if (SECRET_KEY.test(k)) continue;
      const p = plain(o[k], depth + 1, false, path, budget);
      if (p !== undefined) out[storableText(k)] = p;
    }
    return out;
  } finally {
    path.pop();
  }
}

/**
 * The row as it will be stored (see the module comment): what eventsText renders and
 * interlock_audit_append_v2 stores. `now` gives the time of a row without a valid one (default:
 * the current time).
 */
export function normalizeAuditRow(row: AuditRowInput, now: () => Date = () => new Date()): AuditRowInput {
  let details: unknown;
  try {
    details = plain(row.details ?? {}, 0, false, [], { left: MAX_DETAIL_VALUES });
  } catch {
    // A getter or proxy that throws: the event is still recorded, without its details.
    details = { audit_error: 'unreadable_details' };
  }
  return {
    kind: row.kind,
    time: storableTime(row.time, now),
    request_id: indexedText(row.request_id),
    identity_id: indexedText(row.identity_id),
    key_id: text(row.key_id),
    tool: text(row.tool),
    canonical_tool: text(row.canonical_tool),
    dialect: text(row.dialect),
    protocol_version: text(row.protocol_version),
    decision: storableText(String(row.decision ?? '')),
    reason_code: text(row.reason_code),
    source_id: indexedText(row.source_id),
    action: text(row.action),
    fingerprint: text(row.fingerprint),
    relations: Array.isArray(row.relations) ? row.relations.filter((x): x is string => typeof x === 'string').map(storableText) : null,
    row_count: typeof row.row_count === 'number' && Number.isSafeInteger(row.row_count) ? row.row_count + 0 : null, // + 0: −0 as 0, as stored
    duration_ms: typeof row.duration_ms === 'number' && Number.isFinite(row.duration_ms) ? (Object.is(row.duration_ms, -0) ? 0 : row.duration_ms) : null,
    approval_id: indexedText(row.approval_id),
    operator: text(row.operator),
    details: (details !== null && typeof details === 'object' && !Array.isArray(details) ? details : {}) as Record<string, unknown>,
  };
}

/** Thrown by canonicalAuditJson for a value nested deeper than any row format 2 writes. */
export class AuditTextDepthError extends Error {}

/** Deeper than this, a value cannot come from normalizeAuditRow (which stops at 21 levels). */
const MAX_CANONICAL_DEPTH = 64;

/**
 * Canonical JSON of a JSON-plain value: object keys sorted by UTF-16 code units at every level.
 * Throws AuditTextDepthError past 64 levels of nesting.
 */
export function canonicalAuditJson(v: unknown, depth = 0): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v) ?? 'null';
  if (depth > MAX_CANONICAL_DEPTH) throw new AuditTextDepthError('nested too deep');
  if (Array.isArray(v)) {
    let s = '[';
    for (let i = 0; i < v.length; i++) s += `${i ? ',' : ''}${canonicalAuditJson(v[i] === undefined ? null : v[i], depth + 1)}`;
    return `${s}]`;
  }
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o).sort();
  let s = '{';
  let first = true;
  for (const k of keys) {
    if (o[k] === undefined) continue;
    s += `${first ? '' : ','}${JSON.stringify(k)}:${canonicalAuditJson(o[k], depth + 1)}`;
    first = false;
  }
  return `${s}}`;
}

/**
 * The text of one normalised row (normalizeAuditRow): a JSON object of its columns in the table's
 * order. `detailsText`, when given, must be canonicalAuditJson(r.details) (the chain lane computes it
 * once for this text and the stored column: issue 28 item 3).
 */
export function eventJson(r: AuditRowInput, detailsText?: string): string {
  const head = JSON.stringify({
    kind: r.kind,
    time: r.time,
    request_id: r.request_id,
    identity_id: r.identity_id,
    key_id: r.key_id,
    tool: r.tool,
    canonical_tool: r.canonical_tool,
    dialect: r.dialect,
    protocol_version: r.protocol_version,
    decision: r.decision,
    reason_code: r.reason_code,
    source_id: r.source_id,
    action: r.action,
    fingerprint: r.fingerprint,
    relations: r.relations,
    row_count: r.row_count,
    duration_ms: r.duration_ms,
    approval_id: r.approval_id,
    operator: r.operator,
  });
  return `${head.slice(0, -1)},"details":${detailsText ?? canonicalAuditJson(r.details)}}`;
}

/**
 * The text of a batch of normalised rows: what the gateway sends and the database hashes.
 * `detailsTexts[i]`, when given, is canonicalAuditJson(rows[i].details) already computed.
 */
export function eventsText(rows: AuditRowInput[], detailsTexts?: readonly string[]): string {
  let s = '[';
  for (let i = 0; i < rows.length; i++) s += `${i ? ',' : ''}${eventJson(rows[i], detailsTexts?.[i])}`;
  return `${s}]`;
}

/** A format-2 batch's hash (see the module comment); `committed` in UTC with microseconds, `ids` ascending. */
export function batchHashV2(prev: Buffer | null, batchId: string, committed: string, ids: string[], batchText: string, tag: string = CHAIN_V2_TAG): Buffer {
  const h = createHash('sha256');
  if (prev) h.update(prev);
  h.update(`${tag}\n${batchId}\n${committed}\n${ids.join(',')}\n${batchText}`, 'utf8');
  return h.digest();
}

/** The first line of a format-4 (config chain) batch's hashed header (migration 20261208220000000). */
export const CHAIN_V4_TAG = 'interlock-audit-v4';

/**
 * A format-4 batch's hash: the config chain's (migration 20261208220000000_governance-audit-chain_hgov2.sql),
 * batchHashV2's with the tag "interlock-audit-v4", `prev` the previous format-4 batch's hash.
 */
export function batchHashV4(prev: Buffer | null, batchId: string, committed: string, ids: string[], batchText: string): Buffer {
  return batchHashV2(prev, batchId, committed, ids, batchText, CHAIN_V4_TAG);
}

/**
 * `x`'s shortest round-trip decimal (as JSON.stringify writes it) in the plain notation PostgreSQL's
 * numeric prints for it ("1e+21" → "1000000000000000000000", "1.5e-7" → "0.00000015").
 */
export function plainDecimal(x: number): string {
  const s = JSON.stringify(x);
  const m = /^(-?)(\d)(?:\.(\d+))?e([+-]\d+)$/.exec(s);
  if (!m) return s;
  const digits = m[2] + (m[3] ?? '');
  const point = 1 + Number(m[4]); // digits before the decimal point
  if (point <= 0) return `${m[1]}0.${'0'.repeat(-point)}${digits}`;
  if (point >= digits.length) return `${m[1]}${digits}${'0'.repeat(point - digits.length)}`;
  return `${m[1]}${digits.slice(0, point)}.${digits.slice(point)}`;
}

/**
 * Whether every number in `jsonbText` (a jsonb value as PostgreSQL prints it) is printed exactly as
 * a number format 2 wrote: the plain form of a finite double's shortest decimal. A stored number
 * another decimal (that may read back as the same double, "0.1000000000000000000001") was not
 * written by the gateway.
 */
export function jsonbNumbersCanonical(jsonbText: string): boolean {
  // One linear pass (a regex over long strings can exhaust V8's backtracking stack): strings are
  // skipped escape by escape, every other run of number characters is one number.
  const n = jsonbText.length;
  let i = 0;
  while (i < n) {
    const ch = jsonbText.charCodeAt(i);
    if (ch === 0x22) {
      // '"': to the closing quote, a backslash escaping the next character.
      for (i++; i < n; i++) {
        const c = jsonbText.charCodeAt(i);
        if (c === 0x5c) i++;
        else if (c === 0x22) break;
      }
      i++;
    } else if (ch === 0x2d || (ch >= 0x30 && ch <= 0x39)) {
      const start = i;
      for (i++; i < n; i++) {
        const c = jsonbText.charCodeAt(i);
        if (!((c >= 0x30 && c <= 0x39) || c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d)) break;
      }
      const lexeme = jsonbText.slice(start, i);
      const x = Number(lexeme);
      if (!Number.isFinite(x) || plainDecimal(x) !== lexeme) return false;
    } else i++;
  }
  return true;
}

/**
 * One stored event of a format-2 batch as verify reads it: the text columns as stored, and every
 * other value as PostgreSQL prints it (`time` in UTC with microseconds, `YYYY-MM-DDTHH:MM:SS.ffffffZ`;
 * `row_count` and `duration_ms` as text, float8 printed with extra_float_digits = 3; `details` as
 * jsonb text; `relations` as read, NULL elements included).
 */
export type StoredEventV2 = Omit<AuditRowInput, 'kind' | 'time' | 'relations' | 'row_count' | 'duration_ms' | 'details'> & {
  id: string;
  kind: string;
  time: string;
  relations: Array<string | null> | null;
  row_count: string | null;
  duration_ms: string | null;
  details: string;
};

/**
 * The normalised row whose text format 2 would have sealed for a stored event, or null when a
 * stored value is one format 2 never writes (a time with sub-millisecond digits, a row_count past
 * 2^53, a NaN, infinite or −0 duration, a number in `details` printed other than as written,
 * details nested past 64 levels): the stored event then cannot match its seal.
 */
export function rowFromStored(e: StoredEventV2): AuditRowInput | null {
  if (!/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}000Z$/.test(e.time)) return null;
  let rowCount: number | null = null;
  if (e.row_count !== null) {
    rowCount = Number(e.row_count);
    if (!Number.isSafeInteger(rowCount) || String(rowCount) !== e.row_count) return null;
  }
  let duration: number | null = null;
  if (e.duration_ms !== null) {
    duration = Number(e.duration_ms);
    if (!Number.isFinite(duration) || Object.is(duration, -0) || e.duration_ms === '-0') return null;
  }
  if (!jsonbNumbersCanonical(e.details)) return null;
  let details: unknown;
  try {
    details = JSON.parse(e.details);
    canonicalAuditJson(details);
  } catch {
    return null;
  }
  if (details === null || typeof details !== 'object' || Array.isArray(details)) return null;
  // Every text column as stored; eventJson reads the columns by name, so other fields of `e` (id, …) are ignored.
  return {
    ...e,
    kind: e.kind as AuditRowInput['kind'],
    time: `${e.time.slice(0, 23)}Z`,
    relations: e.relations as string[] | null,
    row_count: rowCount,
    duration_ms: duration,
    details: details as Record<string, unknown>,
  };
}
