/**
 * Pipeline step 8, redaction: applies the plan computed at step 4 to the rows by column position
 * (so duplicate output names cannot dodge a mask), then builds the row objects. If the executed
 * statement's columns do not line up with the analysed outputs (count or names: e.g. a column added
 * under SELECT * since the catalog scan) while masks apply, nothing is returned (fail closed).
 */
import type { SqlAnalysis } from '../sql/analyze';
import { applyMask } from '../sql/redaction';
import type { ToolOutcome } from '../tools/types';
import type { PolicyRestrictions } from './04-policy';
import type { ReadRows } from './07-execute';

/** Redacted rows and the names of masked output columns, or a refusal. */
export function redactRows(read: ReadRows, a: Extract<SqlAnalysis, { ok: true }>, r: PolicyRestrictions, secret: string): { ok: true; rows: Record<string, unknown>[]; maskedColumns: string[] } | { ok: false; outcome: ToolOutcome } {
  const names = read.fields.map((f) => f.name);
  const methods: Array<string | null> = names.map(() => null);
  if (r.redaction) {
    if (r.redaction.columns.length !== names.length || r.redaction.columns.some((c) => names[c.index] !== c.name)) {
      return { ok: false, outcome: { kind: 'refusal', code: 'redaction_unprovable', message: 'The result columns could not be matched to their sources, and masked columns are involved; select the columns individually.' } };
    }
    for (const c of r.redaction.columns) methods[c.index] = c.method;
  }
  const masked = names.filter((_, i) => methods[i] !== null);
  const rows = read.rowsArray.map((arr) => {
    // A prototype-less object: a column named __proto__ stays a plain key.
    const o: Record<string, unknown> = Object.create(null);
    for (let i = 0; i < names.length; i++) {
      const m = methods[i];
      o[names[i]] = m === null ? arr[i] : applyMask(arr[i], m as Parameters<typeof applyMask>[1], secret);
    }
    return o;
  });
  return { ok: true, rows, maskedColumns: masked };
}
