/**
 * Pipeline step 8, redaction: applies the plan computed at step 4 to the rows by column position
 * (so duplicate output names cannot dodge a mask), then builds the row objects. If the executed
 * statement's columns do not line up with the analysed outputs (count or names: e.g. a column added
 * under SELECT * since the catalog scan), nothing is returned (fail closed): `redaction_unprovable`
 * while masks apply, else `source_role_denied` for a SELECT, as for a column named that the catalogue
 * does not list (red team rt42 G2).
 *
 * When step 7 ran the statement with its masks applied in SQL (`premasked`, src/sql/mask-sql.ts),
 * the masked columns arrive masked: `full`, `null` and `partial` values pass as they are, and a
 * `hash` column's digest becomes its keyed token here (the key never goes to the source).
 */
import type { SqlAnalysis } from '../sql/analyze';
import { applyMask, hashTokenFromDigest } from '../sql/redaction';
import type { ToolOutcome } from './types';
import type { PolicyRestrictions } from './04-policy';
import type { ReadRows } from './07-execute';

/** The refusal's message when the result's columns are not the analysed ones (rt42 G2). */
const STALE_COLUMNS = "The statement's result has columns that the source's catalogue does not list (the source changed since it was scanned), so they cannot be checked against your access. Name the columns you need (interlock_describe_access lists them), or ask an operator to rescan the source.";

/** True when the result's column names are the analysed outputs' names, in order and number. */
function sameColumns(names: readonly string[], outputs: ReadonlyArray<{ name: string }>): boolean {
  if (names.length !== outputs.length) return false;
  for (let i = 0; i < names.length; i++) if (names[i] !== outputs[i]!.name) return false;
  return true;
}

/**
 * Redacted rows and the names of masked output columns, or a refusal (`redaction_unprovable`).
 * `premasked`: the read ran the statement from `maskedStatement` (masks already applied in SQL).
 */
export function redactRows(read: ReadRows, a: Extract<SqlAnalysis, { ok: true }>, r: PolicyRestrictions, secret: string, premasked = false): { ok: true; rows: Record<string, unknown>[]; maskedColumns: string[] } | { ok: false; outcome: ToolOutcome } {
  const names = read.fields.map((f) => f.name);
  const methods: Array<string | null> = names.map(() => null);
  if (a.kind === 'read' && a.statement === 'SelectStmt' && !sameColumns(names, a.outputs)) {
    // The server's result has other columns than the analysis decided on: `*` or `t.*` expanded over
    // a column added (or renamed) since the scan, which no grant was checked for (red team rt42 G2).
    return { ok: false, outcome: { kind: 'refusal', code: 'source_role_denied', message: STALE_COLUMNS } };
  }
  if (r.redaction) {
    if (r.redaction.columns.length !== names.length || r.redaction.columns.some((c) => names[c.index] !== c.name)) {
      return { ok: false, outcome: { kind: 'refusal', code: 'redaction_unprovable', message: 'The result columns could not be matched to their sources, and masked columns are involved; select the columns individually.' } };
    }
    for (const c of r.redaction.columns) methods[c.index] = c.method;
  }
  const masked = names.filter((_, i) => methods[i] !== null);
  const rows = read.rowsArray.map((arr) => {
    // A plain object literal keeps V8's fast, shape-shared layout (issue 10: about 110 bytes per
    // 6-column row; a prototype-less Object.create(null) object is a hash dictionary of about 490
    // bytes, and serialises half as fast). A column named __proto__ is defined as an own property,
    // because assigning it would set the prototype instead.
    const o: Record<string, unknown> = {};
    for (let i = 0; i < names.length; i++) {
      const m = methods[i];
      const v = m === null ? arr[i] : premasked ? (m === 'hash' ? hashTokenFromDigest(arr[i] as string | null, secret) : arr[i]) : applyMask(arr[i], m as Parameters<typeof applyMask>[1], secret);
      if (names[i] === '__proto__') Object.defineProperty(o, '__proto__', { value: v, enumerable: true, writable: true, configurable: true });
      else o[names[i]] = v;
    }
    return o;
  });
  return { ok: true, rows, maskedColumns: masked };
}
