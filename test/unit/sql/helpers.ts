/**
 * Test catalogues for the SQL analyser.
 *
 * `fixtures/pg15-chinook-catalog.json` is the output of `scanCatalog` on PostgreSQL 15 with the
 * Chinook sample loaded plus `CREATE TABLE t (a int, b text)`, `CREATE SEQUENCE s`,
 * `CREATE FUNCTION sidefx() ... VOLATILE` and `CREATE PROCEDURE p_commit()`: real pg_catalog
 * functions, operators and system relation names, so unit tests see what production sees.
 */
import type { CatalogRelation, SourceCatalog } from '../../../src/sql/catalog-types';
import { analyzeSql, SqlAnalysis, SqlAnalysisOk } from '../../../src/sql/analyze';
import fixture from './fixtures/pg15-chinook-catalog.json';

/** The scanned catalogue, unchanged. */
export const PG_CATALOG: SourceCatalog = fixture as unknown as SourceCatalog;

/** Extra relations used by resolution tests: a schema `s` outside the search path, a view (with its definition as `pg_get_viewdef` prints it). */
export const EXTRA_RELATIONS: CatalogRelation[] = [
  { schema: 's', name: 't', kind: 'table', columns: [{ name: 'x', dataType: 'integer' }, { name: 'y', dataType: 'text' }] },
  { schema: 's', name: 'only_in_s', kind: 'table', columns: [{ name: 'z', dataType: 'integer' }] },
  {
    schema: 'public',
    name: 'customer_view',
    kind: 'view',
    columns: [{ name: 'customer_id', dataType: 'integer' }, { name: 'email', dataType: 'character varying(60)' }],
    definition: ' SELECT customer.customer_id,\n    customer.email\n   FROM customer;',
  },
  { schema: 'public', name: 'MixedCase', kind: 'table', columns: [{ name: 'Id', dataType: 'integer' }, { name: 'id', dataType: 'integer' }] },
];

/** Chinook + `t` + the extra relations; search path `public`. */
export const CATALOG: SourceCatalog = { ...PG_CATALOG, relations: [...PG_CATALOG.relations, ...EXTRA_RELATIONS] };

/** Analyses and asserts success; returns the ok result. */
export function ok(sql: string, catalog: SourceCatalog = CATALOG): SqlAnalysisOk {
  const r = analyzeSql(sql, catalog);
  if (!r.ok) throw new Error(`expected ok for ${sql}: ${r.code} ${r.message}`);
  return r;
}

/** Analyses and asserts a refusal; returns the result. */
export function refused(sql: string, catalog: SourceCatalog = CATALOG): Extract<SqlAnalysis, { ok: false }> {
  const r = analyzeSql(sql, catalog);
  if (r.ok) throw new Error(`expected a refusal for ${sql}, got ${r.kind}`);
  return r;
}

/** `{table: columns}` view of reads for compact assertions (`schema.table` when not public). */
export function readMap(r: SqlAnalysisOk): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const x of r.reads) out[x.schema === 'public' ? x.table : `${x.schema}.${x.table}`] = x.columns;
  return out;
}

/** `table.column` strings of a ColumnRef list (`schema.table.column` when not public), sorted. */
export function refs(list: Array<{ schema: string; table: string; column: string }>): string[] {
  return list.map((c) => (c.schema === 'public' ? `${c.table}.${c.column}` : `${c.schema}.${c.table}.${c.column}`)).sort();
}

/** Compact lineage view of outputs: `name: [sources] (pass|derived)(+opaque:rels)`. */
export function lineage(r: SqlAnalysisOk): string[] {
  return r.outputs.map(
    (o) =>
      `${o.name}: [${refs(o.sources).join(',')}] ${o.passthrough ? 'pass' : 'derived'}` +
      (o.opaque ? ` opaque:${o.opaqueRelations.map((t) => t.table).sort().join(',')}` : ''),
  );
}

/**
 * Structural scan of a raw parse tree: every node type key and every called function's bare name
 * (lower-cased). Used as an independent oracle: it knows nothing about scopes or catalogues.
 */
export function genericScan(tree: unknown): { types: Set<string>; functions: Set<string> } {
  const types = new Set<string>();
  const functions = new Set<string>();
  const stack: unknown[] = [tree];
  while (stack.length) {
    const cur = stack.pop();
    if (!cur || typeof cur !== 'object') continue;
    if (Array.isArray(cur)) {
      stack.push(...cur);
      continue;
    }
    for (const [k, v] of Object.entries(cur as Record<string, unknown>)) {
      if (/^[A-Z]/.test(k)) types.add(k);
      if (k === 'FuncCall') {
        const names = ((v as { funcname?: Array<{ String?: { sval?: string } }> }).funcname ?? []).map((n) => n.String?.sval ?? '');
        functions.add((names[names.length - 1] ?? '').toLowerCase());
      }
      if (typeof v === 'object') stack.push(v);
    }
  }
  return { types, functions };
}
