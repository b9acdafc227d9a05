/**
 * View expansion (issue 12, item 1; sql-safety.md class 6: masking follows where values flow).
 *
 * A reference to a view or materialized view is expanded into the lineage of its definition: the
 * catalogue scan records each definition (`pg_get_viewdef`, src/sources/postgres/catalog.ts), this
 * module parses it with the same parser and analyses it with the same walker, and each view column
 * gets the lineage `viewColumnLin(view column, lineage of the definition's output)`. Masks and
 * column denies on base columns therefore reach view columns under any name or expression, through
 * joins, unions and aggregates inside the view, and through nested views.
 *
 * Fail closed: when the lineage cannot be proven the column also carries `ANY_COLUMN`
 * (lineage.ts), which `analyzeSql` reports as `unprovable`:
 * - the relation has no recorded definition (catalogue scanned by an older version);
 * - the definition does not parse, is not one SELECT, or the walker refuses it (unknown relation,
 *   refused function or construct, work budget, nesting);
 * - the column's value is computed by an operator outside `pg_catalog`, or by a function outside it
 *   (or one such a function may shadow) whose body cannot be analysed (function-reads.ts: another
 *   language than SQL, …): only the columns computed through it are unprovable (the analyser's
 *   view-body mode marks the call's value). A function whose SQL body is analysed adds every column
 *   of every relation it may read to the value's lineage instead (task hfn);
 * - a cycle of views, or the definition's column count differs from the catalogue's.
 *
 * The expansion of a view is computed once per prepared catalogue and cached, so nested views cost
 * their analysis once; the walk of a definition has its own work budget and is not charged to the
 * statement that references the view.
 */
import { ANY_SCHEMA, colKey, type ColumnRef, LIN_ANY, Lin, lineageWork, viewColumnLin, isPlaceholder } from './lineage';
import { parseSql } from './parser';
import { type PreparedCatalog, type PreparedRelation, relKey } from './prepared-catalog';

/**
 * What analysing a definition returned: output lineages in order. A value computed by a function
 * whose body is not analysed already carries `ANY_COLUMN` (the analyser's view-body mode).
 */
export interface ViewBodyAnalysis {
  outputs: readonly Lin[];
}

/**
 * Analyses one parsed top-level SELECT of a definition against the same catalogue (supplied by the
 * analyser, which this module must not import). Throws on refusal; any throw makes the view's
 * columns unprovable.
 */
export type AnalyseViewBody = (selectStmt: Record<string, unknown>) => ViewBodyAnalysis;

/** True for the relation kinds whose reads are expanded (`view`, `materialized_view`). */
export function isViewLike(rel: PreparedRelation): boolean {
  return rel.kind === 'view' || rel.kind === 'materialized_view';
}

const cache = new WeakMap<PreparedRelation, readonly Lin[]>();
const inProgress = new Set<PreparedRelation>();

/**
 * Lineage of each column of view `rel`, in catalogue column order (see the module comment).
 * Never throws; an unprovable column's lineage includes `ANY_COLUMN`.
 */
export function viewColumnLineage(rel: PreparedRelation, analyse: AnalyseViewBody): readonly Lin[] {
  const hit = cache.get(rel);
  if (hit) return hit;
  // A cycle of views: the inner reference is unprovable (not cached here; every view of the cycle
  // is cached with that unprovable lineage when its own expansion finishes).
  if (inProgress.has(rel)) return columns(rel, null);
  inProgress.add(rel);
  // The definition's own walk does not count against the referencing statement's budget.
  const savedWork = lineageWork.n;
  let out: readonly Lin[];
  try {
    out = expand(rel, analyse);
  } finally {
    lineageWork.n = savedWork;
    inProgress.delete(rel);
  }
  cache.set(rel, out);
  return out;
}

function expand(rel: PreparedRelation, analyse: AnalyseViewBody): readonly Lin[] {
  const def = rel.definition;
  if (typeof def !== 'string' || def.trim() === '') return columns(rel, null);
  let body: ViewBodyAnalysis;
  try {
    const stmts = parseSql(def).stmts ?? [];
    const stmt = stmts.length === 1 ? (stmts[0].stmt as Record<string, unknown> | undefined) : undefined;
    if (!stmt || Object.keys(stmt).length !== 1 || !('SelectStmt' in stmt)) return columns(rel, null);
    body = analyse(stmt.SelectStmt as Record<string, unknown>);
  } catch {
    return columns(rel, null);
  }
  if (body.outputs.length !== rel.columnNames.length) return columns(rel, null);
  // Internal invariant of the walker (as in analyzeSql): no recursive placeholder leaves it.
  for (const l of body.outputs) {
    if (l.src) for (const c of l.src.values()) if (isPlaceholder(c)) return columns(rel, null);
    if (l.opq) for (const r of l.opq.values()) if (isPlaceholder(r)) return columns(rel, null);
  }
  return columns(rel, body.outputs);
}

/** The view's column lineages; `body` null: nothing is provable (every column carries `ANY_COLUMN`). */
function columns(rel: PreparedRelation, body: readonly Lin[] | null): Lin[] {
  return rel.columnNames.map((column, i) => viewColumnLin({ schema: rel.schema, table: rel.name, column }, body ? body[i] : LIN_ANY));
}

/**
 * A view column with lineage `l` is used: adds every column behind it to `into` (every column of a
 * relation whose whole rows it embeds). Returns the work done (entries visited, for the analyser's
 * budget) and whether the lineage is unprovable (`ANY_COLUMN`, or an embedded relation missing
 * from the catalogue).
 */
export function collectViewSources(l: Lin, cat: PreparedCatalog, into: Map<string, ColumnRef>): { work: number; unprovable: boolean } {
  let work = 0;
  let unprovable = false;
  if (l.src) {
    work += l.src.size;
    for (const [k, c] of l.src) {
      if (c.schema === ANY_SCHEMA) unprovable = true;
      else into.set(k, c);
    }
  }
  if (l.opq) {
    for (const r of l.opq.values()) {
      const rel = r.schema === ANY_SCHEMA ? undefined : cat.relations.get(relKey(r.schema, r.table));
      if (!rel) {
        unprovable = true;
        continue;
      }
      work += rel.columnNames.length;
      for (const column of rel.columnNames) into.set(colKey(rel.schema, rel.name, column), { schema: rel.schema, table: rel.name, column });
    }
  }
  return { work, unprovable };
}
