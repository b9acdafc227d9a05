/**
 * Redaction planning and masking (sql-safety.md class 6: masking follows where values flow, not
 * column names).
 *
 * `planRedaction` is pure: from the analyser's output lineage (`OutputColumn[]`) and the caller's
 * mask rules it decides a method per output column, or refuses when it cannot prove an output is
 * free of masked data and the caller asked to refuse. `applyRedaction` then masks result rows.
 *
 * Rules:
 * - An output whose sources include a masked column is masked. If the output is passthrough (the
 *   unchanged value of that one column) it gets the rule's method; otherwise (expression, cast,
 *   aggregate, constructor, CASE, …) it gets `full`, or `null` when the rule's method is `null`.
 * - An opaque output (whole rows embedded: `row_to_json(t)`, `SELECT t FROM t`, `array_agg(t.*)`)
 *   over a relation with ANY masked column gets `full` (`null` if one of that relation's rules is
 *   `null`) with `onOpaque: 'mask'` (default), or makes the whole plan fail with
 *   `redaction_unprovable` with `onOpaque: 'refuse'`.
 * - A passthrough output seen through a view lists the view column and the columns it passes
 *   through (one value under several names): it gets the strongest of their rules' methods.
 * - An `unprovable` output (a view column whose lineage cannot be proven, src/sql/views.ts) may
 *   carry any column: it gets `opts.unprovable`, by default `full` when any rule exists (`null`
 *   when any rule is `null`), or fails the plan with `onOpaque: 'refuse'`.
 * - Several applicable methods: the strongest wins, `null` > `full` > `hash` > `partial`.
 * Columns used only in filters are not outputs; see `filterSources` in the analysis for those.
 */
import { createHash, createHmac } from 'node:crypto';
import type { ColumnRef, OutputColumn } from './types';
import { RawJson } from '../sources/postgres/raw-json';
import { cutText } from '../errors/cut-text';

/** How a value is masked; see `applyMask`. */
export type MaskMethod = 'full' | 'partial' | 'hash' | 'null';

/** Mask `column` with `method` wherever its values flow. */
export interface MaskRule {
  column: ColumnRef;
  method: MaskMethod;
}

/**
 * One entry per output column, in output order: `method` null means "returned unchanged".
 * `{ ok: false }` when an opaque output touches a masked relation and `onOpaque` is `'refuse'`.
 */
export type RedactionPlan =
  | { ok: true; columns: Array<{ index: number; name: string; method: MaskMethod | null }> }
  | { ok: false; code: 'redaction_unprovable'; message: string };

/** Options of `planRedaction`. */
export interface PlanOptions {
  /** What to do with opaque outputs over a relation with masked columns (default `'mask'`). */
  onOpaque: 'mask' | 'refuse';
  /**
   * Method for `unprovable` outputs (null: returned unchanged). Default: the strongest derived
   * method over `rules` (`full`, `null` when a rule is `null`; null when there are no rules). A
   * caller whose masks may cover relations outside `rules` passes the strongest over all of them.
   */
  unprovable?: MaskMethod | null;
}

const STRENGTH: Record<MaskMethod, number> = { partial: 1, hash: 2, full: 3, null: 4 };

/** The stronger of two methods (`null` > `full` > `hash` > `partial`; `null` argument = none). */
export function strongerMethod(a: MaskMethod | null, b: MaskMethod | null): MaskMethod | null {
  if (a === null) return b;
  if (b === null) return a;
  return STRENGTH[a] >= STRENGTH[b] ? a : b;
}

const key = (s: string, t: string, c: string): string => s + '\u0000' + t + '\u0000' + c;
const tkey = (s: string, t: string): string => s + '\u0000' + t;

/**
 * Decides a mask method per output column (rules above). Pure; never throws for well-typed input.
 * Several rules for the same column combine to the strongest.
 */
export function planRedaction(outputs: OutputColumn[], rules: MaskRule[], opts?: PlanOptions): RedactionPlan {
  const onOpaque = opts?.onOpaque ?? 'mask';
  const byColumn = new Map<string, MaskMethod>();
  const byRelation = new Map<string, MaskMethod>(); // strongest derived method for opaque values
  for (const r of rules) {
    const k = key(r.column.schema, r.column.table, r.column.column);
    byColumn.set(k, strongerMethod(byColumn.get(k) ?? null, r.method)!);
    const t = tkey(r.column.schema, r.column.table);
    byRelation.set(t, strongerMethod(byRelation.get(t) ?? null, r.method === 'null' ? 'null' : 'full')!);
  }
  let anyDerived: MaskMethod | null = null;
  for (const m of byRelation.values()) anyDerived = strongerMethod(anyDerived, m);
  const unprovableMethod = opts && opts.unprovable !== undefined ? opts.unprovable : anyDerived;
  const columns: Array<{ index: number; name: string; method: MaskMethod | null }> = [];
  for (let i = 0; i < outputs.length; i++) {
    const o = outputs[i];
    let method: MaskMethod | null = null;
    const passthrough = o.passthrough && o.sources.length >= 1 && !o.unprovable;
    if (o.unprovable && unprovableMethod) {
      if (onOpaque === 'refuse') {
        return { ok: false, code: 'redaction_unprovable', message: `output column ${JSON.stringify(cutText(o.name, 64))} comes from a view whose lineage cannot be proven` };
      }
      method = strongerMethod(method, unprovableMethod);
    }
    for (const s of o.sources) {
      const m = byColumn.get(key(s.schema, s.table, s.column));
      if (!m) continue;
      method = strongerMethod(method, passthrough ? m : m === 'null' ? 'null' : 'full');
    }
    if (o.opaque || o.opaqueRelations.length) {
      for (const rel of o.opaqueRelations) {
        const m = byRelation.get(tkey(rel.schema, rel.table));
        if (!m) continue;
        if (onOpaque === 'refuse') {
          return {
            ok: false,
            code: 'redaction_unprovable',
            message: `output column ${JSON.stringify(cutText(o.name, 64))} embeds whole rows of ${rel.schema}.${rel.table}, which has masked columns`,
          };
        }
        method = strongerMethod(method, m);
      }
    }
    columns.push({ index: i, name: o.name, method });
  }
  return { ok: true, columns };
}

/** What `full` masking returns for every value (nulls included: nothing about the value is shown). */
export const FULL_MASK = '***';

function partialString(s: string): string {
  const chars = Array.from(s);
  const len = chars.length;
  const budget = Math.floor(len / 4); // never reveal more than 25% of the characters
  const at = s.lastIndexOf('@');
  if (at > 0 && at < s.length - 1) {
    const local = Array.from(s.slice(0, at));
    const domain = s.slice(at + 1);
    const dot = domain.lastIndexOf('.');
    const tld = dot >= 0 ? Array.from(domain.slice(dot)) : [];
    if (tld.length > 1 && 1 + tld.length <= budget) return `${local[0]}***@***${tld.join('')}`;
  }
  const k = Math.min(4, budget);
  return k > 0 ? '***' + chars.slice(len - k).join('') : FULL_MASK;
}

function canonical(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value instanceof RawJson) return value.json;
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') return String(value);
  if (value instanceof Date) return value.toISOString();
  if (Buffer.isBuffer(value)) return value.toString('hex');
  return JSON.stringify(value) ?? String(value);
}

/**
 * Masks one value.
 * - `full`: `'***'` for every value, including null (type and nullness are hidden too).
 * - `partial`: null stays null; strings and numbers (as their decimal text) keep at most 4 trailing
 *   characters and never more than 25% of the characters, e.g. `'***1234'`; an email whose
 *   top-level domain fits that budget becomes `'j***@***.com'`; values shorter than 4 characters
 *   and other types (objects, dates, buffers, booleans) become `'***'`.
 * - `hash`: null stays null; otherwise `'sha256:' + first 16 hex digits of HMAC-SHA-256(secret,
 *   hex SHA-256 of the value as text)` (the inner digest is what a source computes when the mask is
 *   applied in SQL, mask-sql.ts; `hashTokenFromDigest` finishes it): equal values give equal tokens (joins and counts still work) without revealing
 *   them. Without a non-empty `secret` it falls back to `full` (an unkeyed hash of a low-entropy
 *   value is reversible by guessing).
 * - `null`: null.
 */
export function applyMask(value: unknown, method: MaskMethod, secret?: string): unknown {
  switch (method) {
    case 'null':
      return null;
    case 'full':
      return FULL_MASK;
    case 'partial':
      if (value === null || value === undefined) return null;
      if (typeof value === 'string') return partialString(value);
      if (typeof value === 'number' || typeof value === 'bigint') return partialString(String(value));
      return FULL_MASK;
    case 'hash':
      if (value === null || value === undefined) return null;
      if (!secret) return FULL_MASK;
      return hashTokenFromDigest(createHash('sha256').update(canonical(value)).digest('hex'), secret);
    default:
      return FULL_MASK; // unknown method: fail closed
  }
}

/**
 * The `hash` mask's token from the hex SHA-256 of a value's text (lower-case, as PostgreSQL's
 * `encode(sha256(…), 'hex')` prints it): `'sha256:'` + the first 16 hex digits of HMAC-SHA-256 keyed
 * with `secret`; `'***'` without a non-empty secret; null for a null digest.
 */
export function hashTokenFromDigest(digestHex: string | null, secret?: string): string | null {
  if (digestHex === null) return null;
  if (!secret) return FULL_MASK;
  return 'sha256:' + createHmac('sha256', secret).update(digestHex).digest('hex').slice(0, 16);
}

/** Thrown by `applyRedaction` when the rows do not match the plan (fail closed: return nothing). */
export class RedactionMismatchError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RedactionMismatchError';
  }
}

/**
 * Returns masked copies of `rows` (inputs are not modified).
 *
 * `fields` are the result's column names in order, as the driver reports them; they must match the
 * plan one for one (same count, same names), otherwise `RedactionMismatchError` is thrown: a
 * mismatch means the statement's shape differs from what was analysed (e.g. a column added since
 * the catalogue scan under `SELECT *`) and nothing may be returned. Rows may be objects keyed by
 * field name (several columns with the same name share one key; it gets the strongest of their
 * methods) or arrays in field order. Throws `Error` for a refused plan. `opts.secret` keys `hash`.
 */
export function applyRedaction<R extends Record<string, unknown> | unknown[]>(
  rows: R[],
  fields: string[],
  plan: RedactionPlan,
  opts?: { secret?: string },
): R[] {
  if (!plan.ok) throw new Error('cannot apply a refused redaction plan');
  if (fields.length !== plan.columns.length) {
    throw new RedactionMismatchError(`result has ${fields.length} columns but the analysed statement has ${plan.columns.length}`);
  }
  for (let i = 0; i < fields.length; i++) {
    if (plan.columns[i].name !== fields[i]) throw new RedactionMismatchError(`result column ${i + 1} is not the analysed column`);
  }
  const byName = new Map<string, MaskMethod>();
  const byIndex: Array<MaskMethod | null> = plan.columns.map((c) => c.method);
  for (let i = 0; i < fields.length; i++) {
    const m = byIndex[i];
    if (m) byName.set(fields[i], strongerMethod(byName.get(fields[i]) ?? null, m)!);
  }
  if (byName.size === 0) return rows.slice();
  const secret = opts?.secret;
  return rows.map((row) => {
    if (Array.isArray(row)) {
      const copy = row.slice();
      for (let i = 0; i < byIndex.length; i++) {
        const m = byIndex[i];
        if (m) copy[i] = applyMask(copy[i], m, secret);
      }
      return copy as R;
    }
    const copy: Record<string, unknown> = { ...row };
    for (const [name, m] of byName) copy[name] = applyMask(copy[name], m, secret);
    return copy as R;
  });
}
