/**
 * target.ts — the select list and assignment targets (PostgreSQL: parse_target.c,
 * transformTargetList, ExpandColumnRefStar, FigureColname, checkInsertTargets): output columns
 * with their names and lineage (also RETURNING lists), `*` and `t.*` expansion, and the columns an
 * INSERT, UPDATE or MERGE assigns (with their subscripts).
 */
import { figureColname } from '../colname';
import type { PreparedRelation } from '../prepared-catalog';
import { columnRef, ex } from './expr';
import { checkFields, hasOwn, type N, nodeType, q, Refusal, unwrap } from './nodes';
import { starColumns } from './relation';
import { charge, type Ctx, type OutCol, type WalkState } from './state';
import { consume, use } from './uses';

/**
 * Select list (or RETURNING list). `top`: this is the statement's own output, where a bare
 * whole-row reference (`SELECT c FROM customer c`) is an output (redacted as opaque) rather than
 * a use of every column.
 */
export function targetList(st: WalkState, list: N[], ctx: Ctx, top: boolean): OutCol[] {
  const outs: OutCol[] = [];
  charge(st, list.length);
  for (const t of list) {
    const rt = unwrap(t, 'ResTarget');
    if (rt.indirection) throw new Refusal('statement_not_allowed', 'unsupported select-list form');
    const val = rt.val as N | undefined;
    if (!val) throw new Refusal('statement_not_allowed', 'empty select-list item');
    if (hasOwn.call(val, 'ColumnRef')) {
      const cr = val.ColumnRef as N;
      checkFields('ColumnRef', cr);
      const fields: N[] = cr.fields ?? [];
      if (fields.length && hasOwn.call(fields[fields.length - 1], 'A_Star')) {
        if (rt.name !== undefined) throw new Refusal('invalid_sql', 'a star cannot have an alias');
        const star = starColumns(st, fields, ctx);
        charge(st, star.length);
        for (const c of star) outs.push({ name: c.name, lin: use(st, c) });
        continue;
      }
      if (top) {
        const lin = columnRef(st, cr, ctx, true);
        outs.push({ name: rt.name !== undefined ? String(rt.name) : figureColname(val, (s) => st.sublinkNames.get(s)), lin });
        continue;
      }
    }
    if (hasOwn.call(val, 'A_Indirection')) {
      const ind = (val.A_Indirection as N).indirection as N[] | undefined;
      if (ind && ind.length && hasOwn.call(ind[ind.length - 1], 'A_Star')) {
        throw new Refusal('statement_not_allowed', 'composite expansion (x).* is not supported in the select list');
      }
    }
    const lin = ex(st, val, ctx);
    outs.push({ name: rt.name !== undefined ? String(rt.name) : figureColname(val, (s) => st.sublinkNames.get(s)), lin });
  }
  return outs;
}

/** The target columns of an assignment list (INSERT columns, SET, MERGE actions), in order without repeats; subscripts are consumed. */
export function dmlCols(st: WalkState, rel: PreparedRelation, list: N[] | undefined, ctx: Ctx | null): string[] {
  const out: string[] = [];
  for (const t of list ?? []) {
    const rt = unwrap(t, 'ResTarget');
    const name = String(rt.name);
    if (!rel.columnSet.has(name)) throw new Refusal('unknown_column', `unknown column ${q(name)} of ${q(rel.name)}`);
    if (!out.includes(name)) out.push(name);
    for (const i of rt.indirection ?? []) {
      const it = nodeType(i);
      if (it === 'String') continue;
      if (it !== 'A_Indices' || !ctx) throw new Refusal('statement_not_allowed', 'unsupported assignment target');
      const ai = i.A_Indices as N;
      checkFields('A_Indices', ai);
      consume(st, ex(st, ai.lidx, ctx));
      consume(st, ex(st, ai.uidx, ctx));
    }
  }
  return out;
}
