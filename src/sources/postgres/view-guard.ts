/**
 * The definition guard (red team rt49 V1, V2): a read guard (portal-read.ts `ReadGuard`) that lets
 * a statement run only while every view and materialized view it goes through still has the
 * definition the catalogue scan recorded (`CatalogRelation.definition`, `pg_get_viewdef` as the
 * reader's pinned path prints it).
 *
 * The analyser follows a view's columns to the columns behind them through the scanned definition
 * (src/sql/views.ts): masks, denies and row rules are decided on that lineage. `CREATE OR REPLACE
 * VIEW` may keep every column's name and type while reading other columns (`SELECT id, ssn AS
 * name`), and a materialized view can be dropped and created again under its name; the server
 * then runs a query the analysis never saw, and a denied or masked column reached the agent under
 * an allowed name until someone rescanned.
 *
 * The views checked: those the statement reads (`SqlAnalysisOk.reads`), those behind the view
 * columns it uses (`viewSources`), those the user functions it may run read (`functionReads`), and,
 * from each, every view its scanned query reads (`CatalogRelation.view.reads`, at any depth). Sent
 * with the function, type and shape guards as one more UNION ALL part of one prelude in the
 * statement's own round trip, right before it (connector.ts `functionGuard`); a statement that
 * reads no view and no generated column sends nothing more (but the kinds below). It returns no rows when every definition matches and raises
 * 22012 (read.ts GUARD_SQLSTATE) at the first that does not (or a view gone, or no longer a view),
 * so the statement is never executed; the read resolves with `functionsChanged`, the pipeline
 * answers `catalog_stale` and the gateway rescans. A view the snapshot holds no definition for is
 * compared with the empty text, which no view prints: it trips, and the rescan records one.
 *
 * The same holds for a stored generated column, whose value the analyser takes from the columns its
 * scanned expression reads (`CatalogColumn.generatedFrom`, red team rt42 G1): one dropped and added
 * again under its name (`ADD COLUMN c text GENERATED ALWAYS AS (ssn) STORED`) is computed from
 * other columns. So every generated column the statement reads (named, behind a view column it
 * uses, in a relation whose whole rows it uses or a user function's body reads) carries one more
 * part comparing `pg_get_expr` of its expression with the scanned one (`CatalogColumn.default`).
 *
 * And a table replaced by a view of its name and columns (DROP TABLE + CREATE VIEW, a migration's
 * compatibility view; on PostgreSQL 15 and older also CREATE RULE "_RETURN" turning an empty table
 * into a view in place, red team rt49 R1) is read through a query the analysis never saw: for a
 * caller whose rules can refuse or mask something (the callers the hierarchy guard is sent for),
 * every table, partitioned or foreign table the statement reads or goes through carries one more
 * part comparing its `pg_class.relkind` with the scanned kind, and its set of generated columns with
 * the scanned set (red team rt49c G1: a plain column replaced by one generated from a denied column,
 * which the part per generated column above never sees, the scan having recorded none there).
 *
 * What it cannot see: a definition committed between the guard's snapshot and the statement's own
 * (the same round trip, READ COMMITTED); CREATE OR REPLACE VIEW takes an ACCESS EXCLUSIVE lock,
 * which waits for a read holding the view.
 */
import type { CatalogRelation, SourceCatalog } from '../../sql/catalog-types';
import type { ReadGuard } from './portal-read';
import { qualifySql } from './qualify-sql';

/** The guard parts' texts by kind, width, count and offset, made on first use (at most 256 kept). */
const texts = new Map<string, string>();

/**
 * One guard part: `count` rows of `width` text parameters each (numbered from `$offset+1`) as
 * VALUES `u(columns…)`, joined to `lateral` (the server's facts, a LATERAL sub-select `x`), raising
 * 22012 where `trips` holds (`x.k`: a count of the rows found, so the division cannot be folded).
 */
function partSql(columns: readonly string[], lateral: string, trips: string, count: number, offset: number): string {
  const key = `${lateral}\u0000${count}\u0000${offset}`;
  const hit = texts.get(key);
  if (hit) return hit;
  const w = columns.length;
  const rows = Array.from({ length: count }, (_, i) => '(' + columns.map((_c, j) => `$${offset + w * i + j + 1}::text`).join(', ') + ')').join(', ');
  const text = qualifySql(`
SELECT 1
FROM (VALUES ${rows}) AS u(${columns.join(', ')})
CROSS JOIN LATERAL (${lateral}) x
WHERE CASE WHEN ${trips} THEN 1 / (x.k * 0) = 1 ELSE false END
`);
  if (texts.size < 256) texts.set(key, text);
  return text;
}

/**
 * The guard's SQL for `count` views, its parameters numbered from `$offset+1`: per view `$k+1`
 * schema, `$k+2` name, `$k+3` the scanned definition ('' for none).
 */
export function viewGuardSql(count: number, offset = 0): string {
  return partSql(['s', 'n', 'd'], `
  SELECT pg_catalog.max(pg_catalog.pg_get_viewdef(c.oid)) AS d, pg_catalog.count(c.oid) AS k
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace
  WHERE ns.nspname = u.s AND c.relname = u.n AND c.relkind = ANY (ARRAY['v', 'm']::"char"[])`, 'coalesce(x.d <> u.d, true)', count, offset);
}

/**
 * The guard's SQL for `count` stored generated columns, its parameters numbered from `$offset+1`:
 * per column `$k+1` schema, `$k+2` relation, `$k+3` column name, `$k+4` the scanned expression.
 */
export function generatedGuardSql(count: number, offset = 0): string {
  return partSql(['s', 'n', 'a', 'e'], `
  SELECT pg_catalog.max(pg_catalog.pg_get_expr(d.adbin, d.adrelid)) AS e, pg_catalog.count(a.attnum) AS k
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace
  JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = u.a AND NOT a.attisdropped AND a.attgenerated = 's'
  JOIN pg_catalog.pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
  WHERE ns.nspname = u.s AND c.relname = u.n`, 'coalesce(x.e <> u.e, true)', count, offset);
}

/**
 * The guard's SQL for `count` relations whose kind must be the scanned one (red team rt49 R1), and
 * whose set of generated columns must be the scanned set (red team rt49c G1: a plain column dropped
 * and added again under its name as `GENERATED ALWAYS AS (ssn) STORED` is computed from a column
 * the analysis never saw it read), its parameters numbered from `$offset+1`: per relation `$k+1`
 * schema, `$k+2` name, `$k+3` the scanned `pg_class.relkind` (`r`, `p` or `f`), `$k+4` the scanned
 * stored generated columns' names as a JSON array of strings (any order; compared as sets; stored
 * only, as the scan records `generated`: PostgreSQL 18's virtual ones would otherwise trip it on
 * every read). A relation
 * that no longer exists does not trip it (the statement then fails as it would without the guard).
 */
export function kindGuardSql(count: number, offset = 0): string {
  return partSql(['s', 'n', 'r', 'g'], `
  SELECT pg_catalog.max(c.relkind::text) AS r, pg_catalog.count(c.oid) AS k,
    pg_catalog.bool_and((coalesce(ga.g, '[]'::jsonb) @> (u.g::jsonb)) AND (coalesce(ga.g, '[]'::jsonb) <@ (u.g::jsonb))) AS same
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace
  LEFT JOIN LATERAL (SELECT pg_catalog.jsonb_agg(a.attname::text) AS g FROM pg_catalog.pg_attribute a
    WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = 's') ga ON true
  WHERE ns.nspname = u.s AND c.relname = u.n`, '(x.r <> u.r) OR NOT x.same', count, offset);
}

/** `pg_class.relkind` of the relation kinds a view can replace under the same name (red team rt49 R1). */
const TABLE_KINDS: Partial<Record<CatalogRelation['kind'], string>> = { table: 'r', partitioned_table: 'p', foreign_table: 'f' };

/** What of a statement's analysis names the relations and columns it reads (SqlAnalysisOk's fields of these names). */
export interface ViewUses {
  reads?: ReadonlyArray<{ schema: string; table: string; columns?: readonly string[] }>;
  viewSources?: ReadonlyArray<{ schema: string; table: string; column?: string }>;
  functionReads?: ReadonlyArray<{ relations: ReadonlyArray<{ schema: string; table: string }> }>;
  rowShapes?: ReadonlyArray<{ schema: string; name: string }>;
}

/** The catalogue's relations by `schema.name`, and whether any is a view or has a stored generated column (made once per snapshot). */
const defIndex = new WeakMap<SourceCatalog, { all: Map<string, CatalogRelation>; defined: boolean }>();

function indexOf(catalog: SourceCatalog): { all: Map<string, CatalogRelation>; defined: boolean } {
  let m = defIndex.get(catalog);
  if (!m) {
    m = { all: new Map(), defined: false };
    for (const r of catalog.relations) {
      m.all.set(JSON.stringify([r.schema, r.name]), r);
      if (r.kind === 'view' || r.kind === 'materialized_view' || r.columns.some((c) => c.generated)) m.defined = true;
    }
    defIndex.set(catalog, m);
  }
  return m;
}

/** A stored generated column a statement reads, with its scanned expression. */
export interface GeneratedUse {
  schema: string;
  name: string;
  column: string;
  expression: string;
}

const byName = <T extends { schema: string; name: string }>(a: T, b: T): number => (a.schema === b.schema ? (a.name < b.name ? -1 : a.name > b.name ? 1 : 0) : a.schema < b.schema ? -1 : 1);

/**
 * The views and materialized views of `catalog` that a statement whose analysis is `uses` goes
 * through, and the stored generated columns it reads (see the module comment), each once, sorted
 * by schema then name (then column); empty for none. With `kinds`, also the tables, partitioned and
 * foreign tables it reads or goes through (`tables`, red team rt49 R1), else `tables` is empty.
 */
export function statementDefinitions(catalog: SourceCatalog, uses: ViewUses | undefined, kinds = false): { views: CatalogRelation[]; generated: GeneratedUse[]; tables: CatalogRelation[] } {
  const none = { views: [], generated: [], tables: [] };
  if (!uses) return none;
  const { all, defined } = indexOf(catalog);
  if (!defined && !kinds) return none;
  const views = new Map<string, CatalogRelation>();
  const generated = new Map<string, GeneratedUse>();
  const tables = new Map<string, CatalogRelation>();
  /** `columns`: the columns read (undefined: all of them). */
  const visit = (schema: string, name: string, columns: readonly string[] | undefined): void => {
    const key = JSON.stringify([schema, name]);
    const r = all.get(key);
    if (!r) return;
    if (kinds && TABLE_KINDS[r.kind] !== undefined) tables.set(key, r);
    for (const c of r.columns) {
      if (!c.generated || (columns && !columns.includes(c.name))) continue;
      const gk = JSON.stringify([schema, name, c.name]);
      if (!generated.has(gk)) generated.set(gk, { schema, name, column: c.name, expression: c.default ?? '' });
    }
    if ((r.kind !== 'view' && r.kind !== 'materialized_view') || views.has(key)) return;
    views.set(key, r);
    for (const b of r.view?.reads ?? []) visit(b.schema, b.name, undefined);
  };
  for (const r of uses.reads ?? []) visit(r.schema, r.table, r.columns ?? undefined);
  for (const c of uses.viewSources ?? []) visit(c.schema, c.table, c.column === undefined ? undefined : [c.column]);
  for (const f of uses.functionReads ?? []) for (const r of f.relations) visit(r.schema, r.table, undefined);
  for (const r of uses.rowShapes ?? []) visit(r.schema, r.name, undefined);
  return {
    views: [...views.values()].sort(byName),
    generated: [...generated.values()].sort((a, b) => byName(a, b) || (a.column < b.column ? -1 : a.column > b.column ? 1 : 0)),
    tables: [...tables.values()].sort(byName),
  };
}

/** Guards made per analysis and catalogue, with the guard each was made after. */
const made = new WeakMap<object, WeakMap<SourceCatalog, { before: ReadGuard | null; kinds: boolean; guard: ReadGuard | null }>>();

/**
 * `before` (the function, type and shape guards, or null) followed by the definition guard of the
 * views the statement of analysis `uses` goes through and the generated columns it reads, and with
 * `kinds` (a caller whose rules can refuse or mask something) of the kinds of the tables it reads or
 * goes through (red team rt49 R1: a table replaced by a view of its name); `before` alone when there
 * are none. Frozen; memoised per `uses` object (the analysis cache hands the same one for a repeated
 * statement), catalogue and `before`.
 */
export function withViewGuard(catalog: SourceCatalog, before: ReadGuard | null, uses: ViewUses | undefined, kinds = false): ReadGuard | null {
  if (!uses) return before;
  let byCat = made.get(uses);
  if (!byCat) made.set(uses, (byCat = new WeakMap()));
  const hit = byCat.get(catalog);
  if (hit && hit.before === before && hit.kinds === kinds) return hit.guard;
  const { views, generated, tables } = statementDefinitions(catalog, uses, kinds);
  let guard = before;
  if (views.length > 0 || generated.length > 0 || tables.length > 0) {
    const parts = before ? [before.text] : [];
    const values = [...(before?.values ?? [])];
    if (views.length > 0) {
      parts.push(viewGuardSql(views.length, values.length));
      for (const v of views) values.push(v.schema, v.name, v.definition ?? '');
    }
    if (generated.length > 0) {
      parts.push(generatedGuardSql(generated.length, values.length));
      for (const g of generated) values.push(g.schema, g.name, g.column, g.expression);
    }
    if (tables.length > 0) {
      parts.push(kindGuardSql(tables.length, values.length));
      for (const t of tables) values.push(t.schema, t.name, TABLE_KINDS[t.kind]!, JSON.stringify(t.columns.filter((c) => c.generated).map((c) => c.name)));
    }
    guard = Object.freeze({ text: parts.join(' UNION ALL '), values: Object.freeze(values) as string[] });
  }
  byCat.set(catalog, { before, kinds, guard });
  return guard;
}
