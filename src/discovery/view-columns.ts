/**
 * Discovery over mapped views (issue 12 items 1 and 2; red-team F3): a documents mapping may read a
 * view or materialized view, whose columns carry values of base columns under other names. The
 * column decisions of fields.ts must then reach those base columns too, exactly as interlock_query's
 * do through view expansion (src/sql/views.ts). This module asks the analyser, with the source's
 * catalogue, which base columns feed one view column (`SELECT "col" FROM "schema"."view"`), and
 * whether that lineage is provable.
 */
import { analyzeSql, prepareCatalog } from '../sql/analyze';
import { relKey } from '../sql/prepared-catalog';
import type { SourceCatalog } from '../sql/catalog-types';

/** What feeds one column of a mapped relation: base columns behind a view column, and whether the lineage is unprovable. */
export interface ColumnExpansion {
  sources: Array<{ schema: string; table: string; column: string }>;
  /** True when the view column passes one base value through unchanged (a mask keeps its method, as in interlock_query). */
  passthrough: boolean;
  unprovable: boolean;
  /**
   * True for a STORED generated column of a table (task hrt42, red team rt42 G1): `sources` are the
   * columns its expression is computed from (CatalogColumn.generatedFrom), which the caller must be
   * allowed to read as interlock_query requires; never passthrough; every other column of the table
   * when the snapshot does not record them.
   */
  generated?: true;
}

/** Expands (schema, table, column) of a mapped relation; null when the relation is not a view and the column not generated (nothing behind it). */
export type ExpandColumn = (schema: string, table: string, column: string) => ColumnExpansion | null;

const ident = (s: string): string => `"${s.replace(/"/g, '""')}"`;

const expanders = new WeakMap<SourceCatalog, ExpandColumn>();

/** The expansion of a generated column of a table (see ColumnExpansion.generated); null for any other column. */
function generatedColumn(catalog: SourceCatalog, schema: string, table: string, column: string): ColumnExpansion | null {
  const rel = catalog.relations.find((r) => r.schema === schema && r.name === table);
  const col = rel?.columns.find((c) => c.name === column);
  if (!rel || !col?.generated) return null;
  // A snapshot without the inputs (scanned before rt42): every other column, as the analyser takes.
  const from = col.generatedFrom ?? rel.columns.filter((c) => c.name !== column).map((c) => c.name);
  return { sources: from.map((c) => ({ schema, table, column: c })), passthrough: false, unprovable: false, generated: true };
}

/**
 * The expansion function for `catalog`, made once per catalogue snapshot (the store caches the
 * snapshot object, so the per-column analyses are reused across calls). A view column whose
 * analysis fails is unprovable (fail closed).
 */
export function viewColumnExpander(catalog: SourceCatalog): ExpandColumn {
  const hit = expanders.get(catalog);
  if (hit) return hit;
  const prepared = prepareCatalog(catalog);
  const memo = new Map<string, ColumnExpansion>();
  const expand: ExpandColumn = (schema, table, column) => {
    const kind = prepared.relations.get(relKey(schema, table))?.kind;
    if (kind !== 'view' && kind !== 'materialized_view') return generatedColumn(catalog, schema, table, column);
    const key = `${relKey(schema, table)}\u0000${column}`;
    let e = memo.get(key);
    if (!e) {
      const a = analyzeSql(`SELECT ${ident(column)} FROM ${ident(schema)}.${ident(table)}`, prepared);
      e = a.ok
        ? { sources: a.viewSources.map((c) => ({ schema: c.schema, table: c.table, column: c.column })), passthrough: a.outputs[0]?.passthrough === true, unprovable: a.viewUnprovable || a.outputs.some((o) => o.unprovable === true) }
        : { sources: [], passthrough: false, unprovable: true };
      memo.set(key, e);
    }
    return e;
  };
  expanders.set(catalog, expand);
  return expand;
}
