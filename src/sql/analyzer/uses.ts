/**
 * uses.ts — recording what the statement uses (PostgreSQL's nearest analogue: markVarForSelectPriv
 * in parse_relation.c): reads of columns and relations, values used as filters, every other
 * non-output use, writes' values, view columns' sources, and the per-row sub-select's `control`.
 *
 * The one place that knows what "filter", "non-output use", "count use" and "written" mean: the
 * family files call `addFilter`, `consume`, `calc`, `written` and `use`, never the maps directly.
 */
import { type FunctionReads, functionReads } from '../function-reads';
import { alwaysCode, codeOfColumns, hasTypeCode } from '../type-code';
import { closeOver, columnTypeOids, routineTypeOids } from '../type-uses';
import { viewLineage } from '../view-lineage';
import { type ColumnRef, derive, isPlaceholder, type Lin, LIN_NONE } from '../lineage';
import { type PreparedRelation, relKey } from '../prepared-catalog';
import { collectViewSources } from '../views';
import type { N } from './nodes';
import { charge, type Col, type CteEnv, type OutCol, type QueryOut, type ReadRef, type Scope, type WalkState } from './state';

/** The relation is read (even when none of its columns is: `SELECT count(*) FROM t`). */
export function touchRelation(st: WalkState, rel: PreparedRelation): void {
  const k = relKey(rel.schema, rel.name);
  if (!st.reads.has(k)) st.reads.set(k, { rel, cols: new Set() });
}

/** One column of a catalogue relation is read. */
function readColumn(st: WalkState, r: ReadRef): void {
  const k = relKey(r.rel.schema, r.rel.name);
  let e = st.reads.get(k);
  if (!e) st.reads.set(k, (e = { rel: r.rel, cols: new Set() }));
  e.cols.add(r.column);
}

/** A column visible through a FROM item is used: records its base reads (and view sources); returns its lineage. */
export function use(st: WalkState, col: Col): Lin {
  if (col.reads) for (const r of col.reads) readColumn(st, r);
  if (col.view) viewUse(st, col.lin);
  return col.lin;
}

/** A view column is used: every column behind it (whole relations for embedded rows) feeds the value. */
function viewUse(st: WalkState, l: Lin): void {
  const r = collectViewSources(l, st.cat, st.viewSources);
  charge(st, r.work);
  if (r.unprovable) st.viewUnprovable = true;
}

/** A value used to choose, order, group or limit rows (also a non-output use). */
export function addFilter(st: WalkState, l: Lin): void {
  if (l.src) for (const [k, v] of l.src) st.filter.set(k, v);
  consume(st, l);
}

/**
 * The value `l` is used other than by flowing unchanged into an output column: computed on,
 * compared, written, counted in a set operation, … Every source goes to `nonOutput`. A value that
 * embeds whole rows carries all their columns as sources (`wholeRow`), so they are included.
 */
export function consume(st: WalkState, l: Lin): void {
  if (l.src) {
    charge(st, l.src.size);
    for (const [k, v] of l.src) st.nonOutput.set(k, v);
    const into = st.perRowReads;
    if (into) for (const [k, v] of l.src) into.set(k, v);
  }
}

/**
 * Walks a sub-select whose value is computed per row of the enclosing query (a sublink, a LATERAL
 * sub-select) and returns, besides its outputs, `control`: the derived lineage of every value the
 * sub-select consumed (WHERE, JOIN conditions, GROUP BY/HAVING, ORDER BY/LIMIT, computations,
 * nested sub-selects), `LIN_NONE` when none. Which rows it yields, so its value, depends on them:
 * the caller merges `control` into the value, as a CASE condition is merged into the CASE's value,
 * so a view column computed this way over a masked column is masked (a view body's own filters
 * are not checked as non-output uses). The uses are recorded as before (`nonOutput`, `filter`).
 * Only the innermost walk collects: a nested sub-select's `control` reaches the outer one through
 * its value, which the outer sub-select consumes or outputs.
 */
export function perRowQuery(st: WalkState, node: N, scope: Scope | null, ctes: CteEnv | null): { out: QueryOut; control: Lin } {
  const saved = st.perRowReads;
  const reads = new Map<string, ColumnRef>();
  st.perRowReads = reads;
  let out: QueryOut;
  try {
    out = st.doors.query(st, node, scope, ctes);
  } finally {
    st.perRowReads = saved;
  }
  return { out, control: reads.size ? { src: reads, pass: false, opq: null } : LIN_NONE };
}

/** Computed value: its inputs are consumed, the result is derived from them (never passthrough). */
export function calc(st: WalkState, l: Lin): Lin {
  consume(st, l);
  return derive(l);
}

/** Output columns of a sub-select whose values are consumed (EXISTS, IN, INTERSECT, INSERT … SELECT, …). */
export function consumeAll(st: WalkState, cols: readonly OutCol[]): void {
  for (const c of cols) consume(st, c.lin);
}

/**
 * The statement depends on `rel`'s whole row shape (a whole-row value, its row type, a `*`
 * expansion, a function returning its rows or reading it: task hs): the read checks its live
 * columns against the scanned ones (`SqlAnalysisOk.rowShapes`). `rel` is a catalogued relation or
 * a stand-alone composite type (`SourceCatalog.compositeTypes`).
 */
export function dependsOnShape(st: WalkState, rel: { readonly schema: string; readonly name: string }): void {
  st.rowShapes.set(rel.schema + '\u0000' + rel.name, { schema: rel.schema, name: rel.name });
}

/** Reading every column of `rel` (whole-row values, the relation's row type used as a type). */
export function readAll(st: WalkState, rel: PreparedRelation): void {
  touchRelation(st, rel);
  dependsOnShape(st, rel);
  charge(st, rel.columnNames.length);
  for (const column of rel.columnNames) readColumn(st, { rel, column });
}

/**
 * After a WITH RECURSIVE item is solved: rewrites everything recorded while its recursive term
 * was walked (filters, non-output uses, counts) from placeholders to the final lineage.
 */
export function resolvePlaceholders(st: WalkState, id: number, finals: readonly Lin[]): void {
  for (const map of [st.filter, st.nonOutput, st.countUses]) {
    const hits: Array<[string, ColumnRef]> = [];
    charge(st, map.size);
    for (const [k, c] of map) if (isPlaceholder(c, id)) hits.push([k, c]);
    for (const [k, c] of hits) {
      map.delete(k);
      const f = finals[Number(c.column)];
      // A count over a value that is not one column unchanged is a computation on it.
      const into = map === st.countUses && !f?.pass ? st.nonOutput : map;
      if (f?.src) for (const [fk, fc] of f.src) into.set(fk, fc);
    }
  }
}

/** Values assigned to written columns (SET, VALUES, INSERT … SELECT): a non-output use. */
export function written(st: WalkState, lin: Lin): void {
  consume(st, lin);
}

/** A value counted by a plain `count(col)` (one column unchanged): reveals only how many are not null (`countUses`). */
export function countUse(st: WalkState, l: Lin): void {
  if (l.src) for (const [k, v] of l.src) st.countUses.set(k, v);
}

/**
 * User function `schema.name` may run (called, or implementing operator `operator`): records what
 * its body may read (task hfn; src/sql/function-reads.ts). `opaque` overrides the analysis (an
 * operator whose implementation the catalogue does not record). Every column of each relation the
 * body may read counts as read, as the scan recorded them; PostgreSQL plans a string body when it
 * runs, so `*` and whole rows there take the live columns: the statement depends on those
 * relations' row shapes (task hs), which the shape guard checks.
 */
export function functionRead(st: WalkState, schema: string, name: string, operator?: string, opaque?: string): void {
  const key = schema + '\u0000' + name + '\u0000' + (operator ?? '');
  if (st.functionReads.has(key)) return;
  const r = opaque === undefined ? functionReads(st.cat, schema, name) : { relations: [], opaque, securityDefiner: false, functions: [], lookups: { functions: [], operators: [] } };
  for (const f of r.functions) st.userFunctions.set(f.schema + '\u0000' + f.name, f);
  bodyLookups(st, r.lookups);
  charge(st, 1 + r.functions.length + r.relations.length);
  for (const x of r.relations) if (st.cat.relations.has(relKey(x.schema, x.name))) dependsOnShape(st, x);
  st.functionReads.set(key, {
    schema,
    name,
    ...(operator !== undefined ? { operator } : {}),
    relations: r.relations.map((x) => ({ schema: x.schema, table: x.name })),
    ...(r.opaque !== null ? { opaque: r.opaque } : {}),
    ...(r.securityDefiner ? { securityDefiner: true as const } : {}),
  });
}

/** The names string bodies of functions the statement may run look up, each in its schemas (task hg2; `FunctionReads.lookups`). */
function bodyLookups(st: WalkState, l: FunctionReads['lookups']): void {
  for (const f of l.functions) st.qualifiedFunctionNames.set(f.schema + '\u0000' + f.name, f);
  for (const o of l.operators) st.qualifiedOperatorNames.set(o.schema + '\u0000' + o.name, o);
  for (const t of l.types ?? []) st.typeNames.set(t.schema + '\u0000' + t.name, t);
}

/**
 * The user functions the views a statement reads call (task hf5): what the server's dependency
 * records of each view name (`view.userCode`, nested views included), with everything each calls,
 * added to `st.userFunctions` (their lineage is already the view's). Operators and types in
 * `userCode` are not functions and are skipped. Called once the walk is done.
 */
export function viewUserFunctions(st: WalkState): void {
  for (const { rel } of st.reads.values()) {
    if (rel.kind !== 'view' && rel.kind !== 'materialized_view') continue;
    for (const code of viewLineage(st.cat.source, rel.schema, rel.name).userCode) {
      const dot = code.indexOf('.');
      const s = code.slice(0, dot);
      const n = code.slice(dot + 1);
      // A built-in a view calls (view-lineage.ts counts those that run SQL text as user code, for
      // row rules) is not a user function: its pg_proc rows are the server's own, which the scan
      // does not record, so guarding it would refuse every read of the view (catalog_stale).
      if (s === 'pg_catalog') continue;
      if (!(st.cat.functionsByName.get(n) ?? []).some((f) => f.schema === s)) continue;
      const r = functionReads(st.cat, s, n);
      for (const f of r.functions) st.userFunctions.set(f.schema + '\u0000' + f.name, f);
      bodyLookups(st, r.lookups);
    }
  }
}

/**
 * User code attached to the types the statement's columns hold (task hcast, src/sql/type-code.ts):
 * the casts and operator-class support functions (every access method) of the type of every column read or
 * written (for a view read, of every relation behind it), and every user cast between two built-in
 * types, run as calls (`functionRead`). Called
 * once the walk is done (`st.reads` and `st.writes` are complete).
 */
export function typeCodeRuns(st: WalkState): void {
  if (!hasTypeCode(st.cat)) return;
  for (const f of alwaysCode(st.cat)) functionRead(st, f.schema, f.name);
  for (const { rel, cols } of st.reads.values()) {
    for (const f of codeOfColumns(st.cat, rel.schema, rel.name, cols)) functionRead(st, f.schema, f.name);
    if (rel.kind !== 'view') continue;
    // A view's query runs at read time: every column of every relation behind it counts (it may sort by one it does not return).
    const lin = viewLineage(st.cat.source, rel.schema, rel.name);
    for (const b of [...lin.views, ...lin.bases]) for (const f of codeOfColumns(st.cat, b.schema, b.name)) functionRead(st, f.schema, f.name);
  }
  for (const w of st.writes) for (const f of codeOfColumns(st.cat, w.schema, w.table, w.columns)) functionRead(st, f.schema, f.name);
}

/**
 * The types outside `pg_catalog` the statement involves (task hcast, `SqlAnalysisOk.typeUses`;
 * src/sql/type-uses.ts): besides the type names `typeName` and string bodies recorded, the types of
 * every column read or written (for a view, of all its columns and of every relation behind it),
 * of every column of the relations the user functions it may run read, those functions' parameter,
 * result and body types, each with the types it is built on; and the row types of `rowShapes` (by
 * name: a relation's row type has its name). Called once the walk is done, after
 * `viewUserFunctions`.
 */
export function typeUses(st: WalkState): void {
  if (!st.guardsTypes) {
    st.typeNames.clear();
    return;
  }
  const add = (oids: Iterable<number>): void => {
    for (const t of oids) closeOver(st.cat, t, st.typeOids);
  };
  for (const { rel, cols } of st.reads.values()) {
    const view = rel.kind === 'view' || rel.kind === 'materialized_view';
    add(columnTypeOids(st.cat, rel.schema, rel.name, view ? undefined : cols));
    if (!view) continue;
    const lin = viewLineage(st.cat.source, rel.schema, rel.name);
    for (const b of [...lin.views, ...lin.bases]) add(columnTypeOids(st.cat, b.schema, b.name));
  }
  for (const w of st.writes) add(columnTypeOids(st.cat, w.schema, w.table, w.columns));
  for (const r of st.functionReads.values()) for (const x of r.relations) add(columnTypeOids(st.cat, x.schema, x.table));
  for (const f of st.userFunctions.values()) add(routineTypeOids(st.cat, f.schema, f.name));
  for (const r of st.rowShapes.values()) st.typeNames.set(r.schema + '\u0000' + r.name, { schema: r.schema, name: r.name });
  charge(st, st.typeOids.size + st.typeNames.size);
}
