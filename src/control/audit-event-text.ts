/**
 * Audit chain format 2 (migration 20261201800000000; issue 13): the gateway, not the control
 * database, computes each event's canonical text, and `interlock audit verify` recomputes it from the
 * stored row with the same function. That only works if what is hashed is exactly what is stored,
 * so a row is first normalised to values that survive the round trip through PostgreSQL unchanged:
 *
 * - text (every text column, every string inside `details`, every key): NUL (U+0000, which
 *   PostgreSQL's text and jsonb refuse) and lone UTF-16 surrogates (not encodable in UTF-8) become
 *   U+FFFD;
 * - `time`: a valid instant from year 1 to 9999, rendered `YYYY-MM-DDTHH:MM:SS.mmmZ` (milliseconds:
 *   what a JavaScript Date holds); anything else (missing, unparsable, out of range) is "now";
 * - `row_count`: a safe integer or null; `duration_ms`: a finite number or null (−0 as 0);
 * - `relations`: strings only;
 * - `details`: a JSON object of plain values (objects by own enumerable keys, arrays, strings,
 *   finite numbers, booleans, null; a BigInt becomes its decimal string, a Date its ISO string,
 *   undefined / functions / symbols are left out of objects and null in arrays, nesting deeper than
 *   20 levels becomes "[depth]").
 *
 * The canonical text of an event is the JSON array of its twenty stored columns in the table's
 * order (kind, time with microseconds in UTC, request_id, …, operator, details with keys sorted by
 * UTF-16 code units at every level). A batch's hash is
 * SHA-256(prev_hash ‖ UTF8("interlock-audit-v2\n" ‖ batch id ‖ "\n" ‖ committed_at ‖ "\n") ‖
 * SHA-256(the batch's event texts joined by "\n", in id order)).
 */
import { createHash } from 'node:crypto';
import type { AuditRowInput } from './audit';

/** The prefix of a format-2 batch's hashed header. */
export const CHAIN_V2_TAG = 'interlock-audit-v2';

const NEEDS_FIX = /[\u0000\uD800-\uDFFF]/;
const BAD_CHARS = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** `s` with NUL and lone surrogates replaced by U+FFFD (storable as PostgreSQL text and jsonb). */
export function storableText(s: string): string {
  return NEEDS_FIX.test(s) ? s.replace(BAD_CHARS, '\uFFFD') : s;
}

const text = (v: string | null | undefined): string | null => (typeof v === 'string' ? storableText(v) : null);

/** 0001-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z in ms since the epoch (four-digit years render alike in JavaScript and PostgreSQL). */
const MIN_TIME = -62135596800000;
const MAX_TIME = 253402300799999;

/** `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ` when it names an instant in years 1–9999, else `now`. */
function storableTime(t: string | Date | null | undefined, now: () => Date): string {
  if (t !== null && t !== undefined) {
    const d = t instanceof Date ? t : new Date(t);
    const ms = d.getTime();
    if (ms >= MIN_TIME && ms <= MAX_TIME) return d.toISOString();
  }
  return now().toISOString();
}

/**
 * A JSON-plain copy of `v` (see the module comment) whose every string is storable. `inArray` says
 * whether a value that JSON cannot hold becomes null (array element) or is left out (undefined).
 */
function plain(v: unknown, depth: number, inArray: boolean): unknown {
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
  if (Array.isArray(v)) return v.map((x) => plain(x, depth + 1, true));
  const out: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
  for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
    const p = plain(x, depth + 1, false);
    if (p !== undefined) out[storableText(k)] = p;
  }
  return out;
}

/**
 * The row as it will be stored (see the module comment): what interlock_audit_append_hashed gets
 * and what the event's canonical text is computed from. `now` gives the time of a row without a
 * valid one (default: the current time).
 */
export function normalizeAuditRow(row: AuditRowInput, now: () => Date = () => new Date()): AuditRowInput {
  const details = plain(row.details ?? {}, 0, false);
  return {
    kind: row.kind,
    time: storableTime(row.time, now),
    request_id: text(row.request_id),
    identity_id: text(row.identity_id),
    key_id: text(row.key_id),
    tool: text(row.tool),
    canonical_tool: text(row.canonical_tool),
    dialect: text(row.dialect),
    protocol_version: text(row.protocol_version),
    decision: storableText(String(row.decision ?? '')),
    reason_code: text(row.reason_code),
    source_id: text(row.source_id),
    action: text(row.action),
    fingerprint: text(row.fingerprint),
    relations: Array.isArray(row.relations) ? row.relations.filter((x): x is string => typeof x === 'string').map(storableText) : null,
    row_count: typeof row.row_count === 'number' && Number.isSafeInteger(row.row_count) ? row.row_count : null,
    duration_ms: typeof row.duration_ms === 'number' && Number.isFinite(row.duration_ms) ? (Object.is(row.duration_ms, -0) ? 0 : row.duration_ms) : null,
    approval_id: text(row.approval_id),
    operator: text(row.operator),
    details: (details !== null && typeof details === 'object' && !Array.isArray(details) ? details : {}) as Record<string, unknown>,
  };
}

/** Canonical JSON of a JSON-plain value: object keys sorted by UTF-16 code units at every level. */
export function canonicalAuditJson(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v) ?? 'null';
  if (Array.isArray(v)) return `[${v.map(canonicalAuditJson).join(',')}]`;
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o).sort();
  let s = '{';
  for (let i = 0; i < keys.length; i++) s += `${i ? ',' : ''}${JSON.stringify(keys[i])}:${canonicalAuditJson(o[keys[i]])}`;
  return `${s}}`;
}

/**
 * One event's stored values as the chain reads them: `time` in UTC with microseconds
 * (`YYYY-MM-DDTHH:MM:SS.ffffffZ`, as to_char(… 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') renders it),
 * `row_count` a number, `details` the parsed jsonb.
 */
export type StoredEventValues = Omit<AuditRowInput, 'time'> & { time: string };

/** The canonical text of one stored event (format 2): the JSON array of its twenty columns. */
export function auditEventText(e: StoredEventValues): string {
  const head = JSON.stringify([
    e.kind,
    e.time,
    e.request_id,
    e.identity_id,
    e.key_id,
    e.tool,
    e.canonical_tool,
    e.dialect,
    e.protocol_version,
    e.decision,
    e.reason_code,
    e.source_id,
    e.action,
    e.fingerprint,
    e.relations,
    e.row_count,
    e.duration_ms,
    e.approval_id,
    e.operator,
  ]);
  return `${head.slice(0, -1)},${canonicalAuditJson(e.details)}]`;
}

/** `YYYY-MM-DDTHH:MM:SS.mmmZ` (a normalised row's time) as the chain's microsecond text. */
export function microsecondTime(isoMs: string): string {
  return `${isoMs.slice(0, -1)}000Z`;
}

/** The canonical text of a normalised row (normalizeAuditRow) before it is stored. */
export function rowEventText(row: AuditRowInput): string {
  return auditEventText({ ...row, time: microsecondTime(row.time!) });
}

/** SHA-256 of event texts joined by "\n" (the `events_sha256` of interlock_audit_append_hashed). */
export function eventsSha256(texts: string[]): Buffer {
  return createHash('sha256').update(texts.join('\n'), 'utf8').digest();
}

/** A format-2 batch's hash (see the module comment); `committed` in UTC with microseconds. */
export function batchHashV2(prev: Buffer | null, batchId: string, committed: string, eventsDigest: Buffer): Buffer {
  const h = createHash('sha256');
  if (prev) h.update(prev);
  h.update(`${CHAIN_V2_TAG}\n${batchId}\n${committed}\n`, 'utf8');
  h.update(eventsDigest);
  return h.digest();
}
