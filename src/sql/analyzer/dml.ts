/**
 * dml.ts — INSERT, UPDATE, DELETE and MERGE (PostgreSQL: analyze.c transformInsertStmt,
 * transformUpdateStmt, transformDeleteStmt, transformReturningList; parse_merge.c): the write
 * target (always a catalogue relation, updatable views expanded like reads), the written columns
 * (`WriteAccess`), the values written (non-output uses), ON CONFLICT with `excluded`, UPDATE …
 * FROM, DELETE … USING, MERGE actions, and RETURNING (the statement's output when top-level).
 */
import { LIN_NONE } from '../lineage';
import { type PreparedRelation, relKey } from '../prepared-catalog';
import { isViewLike } from '../views';
import type { WriteAccess } from '../types';
import { withClause } from './cte';
import { columnRef, ex } from './expr';
import { fromItem } from './from';
import { checkFields, hasOwn, type N, Refusal, unwrap } from './nodes';
import { relationItem, writeTarget } from './relation';
import { type CteEnv, type Ctx, EMPTY_SCOPE_ITEMS, type NsItem, type OutCol, type QueryOut, type Scope, type WalkState } from './state';
import { dmlCols, targetList } from './target';
import { addFilter, written } from './uses';

/** A RETURNING clause: its output columns (WITH (OLD/NEW …) aliases are refused). */
function returning(st: WalkState, rc: N | undefined, ctx: Ctx, top: boolean): OutCol[] {
  if (!rc) return [];
  checkFields('ReturningClause', rc);
  if (rc.options && rc.options.length) throw new Refusal('statement_not_allowed', 'RETURNING WITH (OLD/NEW aliases) is not supported');
  return targetList(st, rc.exprs ?? [], ctx, top);
}

/**
 * Records a write of `columns` of `rel` (in catalogue order); a statement with a write is never
 * cached. `target`: the write target's FROM item; for an update of a view its columns' lineage
 * gives `WriteAccess.baseColumns` (viewUpdateBases).
 */
function addWrite(st: WalkState, rel: PreparedRelation, operation: WriteAccess['operation'], columns: string[], hasWhere: boolean, target?: NsItem): void {
  st.hasWrite = true;
  st.cacheable = false;
  const ordered = rel.columnNames.filter((c) => columns.includes(c));
  const bases = operation === 'update' && target && isViewLike(rel) ? viewUpdateBases(st, rel, target, ordered) : null;
  st.writes.push({ schema: rel.schema, table: rel.name, operation, columns: ordered, hasWhere, ...(bases ? { baseColumns: bases } : {}) });
}

/**
 * The base-relation column each written column of view `rel` passes through unchanged (its
 * lineage: the view column and, through nested views, one column of a base relation, all holding
 * the same value); null when any written column is computed, unprovable, or passes through other
 * than exactly one base column. PostgreSQL updates a column of an automatically updatable view
 * only when it is a plain reference to its base relation's column, which is what this finds.
 */
function viewUpdateBases(st: WalkState, rel: PreparedRelation, target: NsItem, written: readonly string[]): Array<{ schema: string; table: string; column: string }> | null {
  const out: Array<{ schema: string; table: string; column: string }> = [];
  for (const c of written) {
    const i = rel.columnNames.indexOf(c);
    const lin = i >= 0 ? target.cols[i]?.lin : undefined;
    if (!lin || !lin.pass || !lin.src || lin.opq) return null;
    const bases = [...lin.src.values()].filter((r) => {
      const k = st.cat.relations.get(relKey(r.schema, r.table));
      return !k || !isViewLike(k);
    });
    if (bases.length !== 1 || !st.cat.relations.has(relKey(bases[0].schema, bases[0].table))) return null;
    out.push({ schema: bases[0].schema, table: bases[0].table, column: bases[0].column });
  }
  return out;
}

/** The start of every write: its WITH clause, its target relation and the target's FROM item (under its alias). */
function writeStart(st: WalkState, s: N, parent: Scope | null, outer: CteEnv | null): { ctes: CteEnv | null; rel: PreparedRelation; target: NsItem } {
  const ctes = s.withClause ? withClause(st, s.withClause, parent, outer) : outer;
  const rv = s.relation as N;
  const rel = writeTarget(st, rv);
  return { ctes, rel, target: relationItem(st, rel, rv.alias) };
}

/** INSERT [… SELECT | VALUES] [ON CONFLICT …] [RETURNING …]. */
export function insert(st: WalkState, s: N, parent: Scope | null, outer: CteEnv | null): QueryOut {
  const { ctes, rel, target } = writeStart(st, s, parent, outer);
  const cols = s.cols ? dmlCols(st, rel, s.cols, null) : [...rel.columnNames];
  if (s.selectStmt) for (const o of st.doors.query(st, s.selectStmt, parent, ctes).cols) written(st, o.lin);
  addWrite(st, rel, 'insert', cols, false);
  if (s.onConflictClause) {
    const oc = s.onConflictClause as N;
    checkFields('OnConflictClause', oc);
    const excluded: NsItem = {
      refname: 'excluded',
      schema: null,
      cols: rel.columnNames.map((c) => ({ name: c, lin: LIN_NONE, reads: null })),
      relVisible: true,
      colsVisible: false,
      base: null,
    };
    const ctx: Ctx = { scope: { parent, items: [target, excluded] }, ctes, windows: null };
    if (oc.infer) {
      const inf = oc.infer as N;
      checkFields('InferClause', inf);
      for (const e of inf.indexElems ?? []) {
        const ie = unwrap(e, 'IndexElem');
        if (ie.name !== undefined) addFilter(st, columnRef(st, { fields: [{ String: { sval: ie.name } }] }, { ...ctx, scope: { parent, items: [target] } }));
        if (ie.expr) addFilter(st, ex(st, ie.expr, { ...ctx, scope: { parent, items: [target] } }));
      }
      if (inf.whereClause) addFilter(st, ex(st, inf.whereClause, { ...ctx, scope: { parent, items: [target] } }));
    }
    if (oc.action === 'ONCONFLICT_UPDATE') {
      const setCols = dmlCols(st, rel, oc.targetList, ctx);
      for (const t of oc.targetList ?? []) written(st, ex(st, t.ResTarget.val, ctx));
      if (oc.whereClause) addFilter(st, ex(st, oc.whereClause, ctx));
      addWrite(st, rel, 'update', setCols, true, target);
    } else if (oc.action !== 'ONCONFLICT_NOTHING') {
      throw new Refusal('statement_not_allowed', 'unsupported ON CONFLICT action');
    }
  }
  const rctx: Ctx = { scope: { parent, items: [target] }, ctes, windows: null };
  return { cols: returning(st, s.returningClause, rctx, s === st.topBody) };
}

/** UPDATE … SET … [FROM …] [WHERE …] [RETURNING …]. */
export function update(st: WalkState, s: N, parent: Scope | null, outer: CteEnv | null): QueryOut {
  const { ctes, rel, target } = writeStart(st, s, parent, outer);
  const items: NsItem[] = [target];
  for (const f of s.fromClause ?? []) for (const it of fromItem(st, f, { parent, ctes }, items)) items.push(it);
  const ctx: Ctx = { scope: { parent, items }, ctes, windows: null };
  const setCols = dmlCols(st, rel, s.targetList, ctx);
  for (const t of s.targetList ?? []) {
    const v = t.ResTarget.val as N;
    if (v && hasOwn.call(v, 'MultiAssignRef') && v.MultiAssignRef.colno !== 1) {
      checkFields('MultiAssignRef', v.MultiAssignRef);
      continue; // the shared source is analysed once, with column 1
    }
    written(st, ex(st, v, ctx));
  }
  if (s.whereClause) addFilter(st, ex(st, s.whereClause, ctx));
  addWrite(st, rel, 'update', setCols, !!s.whereClause, target);
  return { cols: returning(st, s.returningClause, ctx, s === st.topBody) };
}

/** DELETE … [USING …] [WHERE …] [RETURNING …]. */
export function del(st: WalkState, s: N, parent: Scope | null, outer: CteEnv | null): QueryOut {
  const { ctes, rel, target } = writeStart(st, s, parent, outer);
  const items: NsItem[] = [target];
  for (const f of s.usingClause ?? []) for (const it of fromItem(st, f, { parent, ctes }, items)) items.push(it);
  const ctx: Ctx = { scope: { parent, items }, ctes, windows: null };
  if (s.whereClause) addFilter(st, ex(st, s.whereClause, ctx));
  addWrite(st, rel, 'delete', [...rel.columnNames], !!s.whereClause);
  return { cols: returning(st, s.returningClause, ctx, s === st.topBody) };
}

/** MERGE INTO … USING … ON … WHEN [NOT] MATCHED … [RETURNING …]. */
export function mergeStmt(st: WalkState, s: N, parent: Scope | null, outer: CteEnv | null): QueryOut {
  const { ctes, rel, target } = writeStart(st, s, parent, outer);
  const items: NsItem[] = [target];
  for (const it of fromItem(st, s.sourceRelation, { parent, ctes }, EMPTY_SCOPE_ITEMS)) items.push(it);
  const ctx: Ctx = { scope: { parent, items }, ctes, windows: null };
  if (s.joinCondition) addFilter(st, ex(st, s.joinCondition, ctx));
  const cols = new Set<string>();
  for (const w of s.mergeWhenClauses ?? []) {
    const mw = unwrap(w, 'MergeWhenClause');
    if (mw.condition) addFilter(st, ex(st, mw.condition, ctx));
    switch (mw.commandType) {
      case 'CMD_UPDATE':
        for (const c of dmlCols(st, rel, mw.targetList, ctx)) cols.add(c);
        for (const t of mw.targetList ?? []) written(st, ex(st, t.ResTarget.val, ctx));
        break;
      case 'CMD_INSERT': {
        const named = mw.targetList ? dmlCols(st, rel, mw.targetList, ctx) : rel.columnNames;
        for (const c of named) cols.add(c);
        for (const v of mw.values ?? []) written(st, ex(st, v, ctx));
        break;
      }
      case 'CMD_DELETE':
        for (const c of rel.columnNames) cols.add(c);
        break;
      case 'CMD_NOTHING':
        break;
      default:
        throw new Refusal('statement_not_allowed', 'unsupported MERGE action');
    }
  }
  addWrite(st, rel, 'merge', [...cols], true);
  return { cols: returning(st, s.returningClause, ctx, s === st.topBody) };
}
