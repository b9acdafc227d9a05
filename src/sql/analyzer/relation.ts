/**
 * relation.ts — names to relations and columns (PostgreSQL: parse_relation.c): catalogue lookup
 * through the search path, write targets, FROM items for tables and views, WITH-name lookup, and the
 * lookup of FROM items and columns across query levels (with the LATERAL correlation marks).
 *
 * A relation named in FROM, as a DML target or in `t.*` ends here: `resolveRelation` finds it in
 * the catalogue (system relations are never exposed) and `relationItem` makes its FROM item, a
 * view's columns carrying the lineage of its definition (views.ts, walked with a fresh state).
 */
import { derive, linColumn, merge } from '../lineage';
import { type PreparedRelation, relKey } from '../prepared-catalog';
import { isViewLike, viewColumnLineage, type ViewBodyAnalysis } from '../views';
import { checkFields, hasOwn, type N, q, Refusal, strings } from './nodes';
import { charge, type Col, type CteDef, type CteEnv, type Ctx, newWalkState, type NsItem, type Scope, type WalkState, WORK_BUDGET } from './state';
import { dependsOnShape, touchRelation } from './uses';

/** Schemas whose relations are never exposed, whatever the catalogue holds. */
export const SYSTEM_SCHEMAS = new Set(['pg_catalog', 'information_schema', 'pg_toast']);

const baseColsCache = new WeakMap<PreparedRelation, Col[]>();

/**
 * The columns of a catalogue relation as FROM-item columns (cached per prepared relation). A stored
 * generated column is computed from other columns of the row, so using it reads them too and its
 * value is derived from them: a deny or mask on an input holds for it (red team rt42 G1).
 */
function baseCols(rel: PreparedRelation): Col[] {
  let cols = baseColsCache.get(rel);
  if (!cols) {
    cols = rel.columnNames.map((c) => {
      const own = linColumn({ schema: rel.schema, table: rel.name, column: c });
      const inputs = rel.generatedInputs?.get(c);
      if (!inputs) return { name: c, lin: own, reads: [{ rel, column: c }] };
      let lin = derive(own);
      for (const i of inputs) lin = merge(lin, linColumn({ schema: rel.schema, table: rel.name, column: i }));
      return { name: c, lin, reads: [{ rel, column: c }, ...inputs.map((column) => ({ rel, column }))] };
    });
    baseColsCache.set(rel, cols);
  }
  return cols;
}

/** `cols` renamed by an alias column list (`AS t(a, b)`); more aliases than columns is refused. */
export function renameCols(cols: readonly Col[], alias: N | undefined, what: string): Col[] {
  if (!alias) return cols as Col[];
  checkFields('Alias', alias);
  const names = strings(alias.colnames, 'column alias');
  if (names.length > cols.length) throw new Refusal('unknown_column', `${what} has ${cols.length} columns but ${names.length} column aliases`);
  if (names.length === 0) return cols as Col[];
  return cols.map((c, i) => (i < names.length ? { ...c, name: names[i] } : c));
}

/** The columns of FROM items whose columns are visible (a JOIN hides its inputs behind its own item). */
export function visibleCols(items: readonly NsItem[]): Col[] {
  const out: Col[] = [];
  for (const it of items) if (it.colsVisible) for (const c of it.cols) out.push(c);
  return out;
}

/** A FROM item or write target: a view's columns carry the lineage of its definition (views.ts). */
export function relationItem(st: WalkState, rel: PreparedRelation, alias: N | undefined): NsItem {
  return isViewLike(rel) ? viewItem(st, rel, alias) : baseItem(rel, alias);
}

/**
 * A FROM item for a view or materialized view: its columns carry the lineage of its definition
 * (views.ts). A relation whose whole rows the definition embeds (a lineage's `opq`: `row_to_json(d)`,
 * `d AS r`) is built by the server from its live columns, so the statement depends on that
 * relation's row shape as if it used the whole row itself (red team rt42c S1: a column added after
 * the scan rode through such a view unguarded).
 */
function viewItem(st: WalkState, rel: PreparedRelation, alias: N | undefined): NsItem {
  const lins = viewColumnLineage(rel, (sel) => analyseViewBody(st, sel));
  for (const l of lins) {
    if (!l.opq) continue;
    for (const r of l.opq.values()) {
      const embedded = st.cat.relations.get(relKey(r.schema, r.table));
      if (embedded) dependsOnShape(st, embedded);
    }
  }
  const cols: Col[] = rel.columnNames.map((c, i) => ({ name: c, lin: lins[i], reads: [{ rel, column: c }], view: true }));
  return { ...baseItem(rel, alias), cols: renameCols(cols, alias, `relation ${q(rel.name)}`) };
}

/** Walks a view's definition with a fresh state over the same catalogue, in view-body mode (throws `Refusal` when refused). */
function analyseViewBody(st: WalkState, sel: N): ViewBodyAnalysis {
  const out = st.doors.top(newWalkState(st.cat, WORK_BUDGET, true, st.doors), 'SelectStmt', sel);
  return { outputs: out.cols.map((c) => c.lin) };
}

/** A relation named in SQL (`schema.name`, or `name` through the search path): the catalogue's, never a system relation. */
export function resolveRelation(st: WalkState, schema: string | undefined, name: string): PreparedRelation {
  if (schema !== undefined) {
    if (SYSTEM_SCHEMAS.has(schema) || schema.startsWith('pg_toast') || schema.startsWith('pg_temp')) {
      throw new Refusal('unknown_relation', `relation ${q(schema + '.' + name)} is a system relation and is not exposed`);
    }
    const rel = st.cat.relations.get(relKey(schema, name));
    if (!rel) throw new Refusal('unknown_relation', `unknown relation ${q(schema + '.' + name)}`);
    return rel;
  }
  for (const s of st.cat.path) {
    if (s === 'pg_catalog') {
      const sys = st.cat.systemRelations;
      if (sys.has(name) || (sys.size === 0 && name.startsWith('pg_'))) {
        throw new Refusal('unknown_relation', `relation ${q(name)} is a system relation and is not exposed`);
      }
      continue;
    }
    const rel = st.cat.relations.get(relKey(s, name));
    if (rel) return rel;
  }
  throw new Refusal('unknown_relation', `unknown relation ${q(name)}`);
}

/** The WITH item `name` visible in `env` (innermost first). */
export function lookupCte(env: CteEnv | null, name: string): CteDef | undefined {
  for (let e = env; e; e = e.parent) {
    const d = e.map.get(name);
    if (d) return d;
  }
  return undefined;
}

/** DML target: always a catalogue relation (CTE names are never write targets). */
export function writeTarget(st: WalkState, rv: N | undefined): PreparedRelation {
  if (!rv) throw new Refusal('statement_not_allowed', 'missing write target');
  if (rv.catalogname !== undefined) throw new Refusal('unknown_relation', 'cross-database references are not supported');
  checkFields('RangeVar', rv);
  return resolveRelation(st, rv.schemaname, String(rv.relname));
}

/** The FROM item of a base relation under its name or alias. */
function baseItem(rel: PreparedRelation, alias: N | undefined): NsItem {
  const cols = renameCols(baseCols(rel), alias, `relation ${q(rel.name)}`);
  return {
    refname: alias ? String(alias.aliasname) : rel.name,
    schema: alias ? null : rel.schema,
    cols,
    relVisible: true,
    colsVisible: true,
    base: rel,
  };
}

/** A name was resolved at query level `s`: marks the LATERAL sub-selects it is outside of as correlated. */
export function reached(st: WalkState, s: Scope): void {
  const frames = st.lateralFrames;
  if (frames.length === 0) return;
  charge(st, frames.length);
  for (const f of frames) if (f.outer.has(s)) f.correlated = true;
}

/** Columns a `*`, `t.*` or `s.t.*` select-list item expands to (current query level only). */
export function starColumns(st: WalkState, fields: N[], ctx: Ctx): readonly Col[] {
  const names = fields.slice(0, -1).map((f) => {
    if (!hasOwn.call(f, 'String')) throw new Refusal('statement_not_allowed', 'malformed column reference');
    return String(f.String.sval);
  });
  if (names.length === 0) {
    const out: Col[] = [];
    charge(st, ctx.scope.items.length);
    for (const it of ctx.scope.items) {
      if (!it.colsVisible) continue;
      if (it.base) dependsOnShape(st, it.base);
      for (const c of it.cols) out.push(c);
    }
    charge(st, out.length);
    if (ctx.scope.items.length === 0) throw new Refusal('invalid_sql', 'SELECT * with no tables specified is not valid');
    return out;
  }
  const item = findItem(st, names, ctx.scope);
  if (!item) throw new Refusal('unknown_relation', `missing FROM-clause entry for ${q(names.join('.'))}`);
  if (item.base) {
    touchRelation(st, item.base);
    dependsOnShape(st, item.base);
  }
  return item.cols;
}

/** Finds a FROM item by `[refname]` or `[schema, table]`, searching the query levels outward. */
export function findItem(st: WalkState, names: string[], scope: Scope | null): NsItem | null {
  if (names.length > 2) throw new Refusal('unknown_column', 'cross-database references are not supported');
  for (let s = scope; s; s = s.parent) {
    charge(st, s.items.length + 1);
    for (const it of s.items) {
      if (!it.relVisible || it.refname !== names[names.length - 1]) continue;
      if (names.length === 2 && it.schema !== names[0]) continue;
      reached(st, s);
      return it;
    }
  }
  return null;
}

/** Visible columns named `name` at the innermost level only (no reads recorded). */
export function columnsAtLevel(st: WalkState, name: string, scope: Scope): Col[] {
  const out: Col[] = [];
  charge(st, scope.items.length + 1);
  for (const it of scope.items) {
    if (!it.colsVisible) continue;
    charge(st, it.cols.length);
    for (const c of it.cols) if (c.name === name) out.push(c);
  }
  return out;
}

/** True when a column named `name` is visible at some query level (nothing recorded). */
export function hasColumn(st: WalkState, name: string, scope: Scope | null): boolean {
  for (let s = scope; s; s = s.parent) if (columnsAtLevel(st, name, s).length) return true;
  return false;
}
