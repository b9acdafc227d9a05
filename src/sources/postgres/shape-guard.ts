/**
 * The row-shape guard (task hrt42; red team rt42 G2): a read guard (portal-read.ts `ReadGuard`)
 * that lets a statement run only while every relation whose whole row shape it depends on
 * (`SqlAnalysisOk.rowShapes`: whole-row values, the row type used as a type, `*` expansions) still
 * has the columns the catalogue scan recorded — names and `format_type` types, in attnum order,
 * dropped and system columns left out. The server builds whole-row values from the live columns, so
 * a column added since the scan (`ALTER TABLE … ADD COLUMN`) would be carried by `SELECT d`,
 * `row_to_json(d)`, `d::text` or a row passed to a function, unseen by the analysis. Task hs: the
 * same holds for a function whose result is a relation's row type or a stand-alone composite type
 * (`RETURNS [SETOF] t`, a domain over it; `ALTER TYPE … ADD ATTRIBUTE`), and for the relations a
 * user function's body reads (a string body is planned with the live columns): those are in
 * `rowShapes` too, a composite type checked against `SourceCatalog.compositeTypes`.
 *
 * It is sent with the function guard (function-guard.ts) as one prelude in the statement's own round
 * trip, right before it (no extra round trip); a statement without such references sends nothing.
 * It returns no rows when every shape matches and raises 22012 (read.ts GUARD_SQLSTATE) at the first
 * that does not (or a relation gone), so the statement is never executed; the read resolves with
 * `functionsChanged` and the pipeline answers `catalog_stale` and has the source rescanned.
 *
 * What it cannot see: a column added between the guard's snapshot and the statement's own (the same
 * round trip, READ COMMITTED); the ALTER needs an ACCESS EXCLUSIVE lock, which waits for the read.
 */
import type { SourceCatalog } from '../../sql/catalog-types';
import type { ReadGuard } from './portal-read';
import { qualifySql } from './qualify-sql';

/**
 * The guard's SQL for `count` relations, its parameters numbered from `$offset+1`: per relation
 * `$k+1` schema, `$k+2` name, `$k+3` the expected column names and `$k+4` their types (text arrays).
 */
export function shapeGuardSql(count: number, offset = 0): string {
  const rows = Array.from({ length: count }, (_, i) => {
    const k = offset + 4 * i;
    return `($${k + 1}::text, $${k + 2}::text, $${k + 3}::text[], $${k + 4}::text[])`;
  }).join(', ');
  return qualifySql(`
SELECT 1
FROM (VALUES ${rows}) AS u(s, n, cn, ct)
CROSS JOIN LATERAL (
  SELECT coalesce(pg_catalog.array_agg(a.attname::text ORDER BY a.attnum), '{}') AS cn,
         coalesce(pg_catalog.array_agg(pg_catalog.format_type(a.atttypid, a.atttypmod) ORDER BY a.attnum), '{}') AS ct,
         pg_catalog.count(a.attnum) AS k
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace
  JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  WHERE ns.nspname = u.s AND c.relname = u.n) x
WHERE CASE WHEN coalesce(x.cn <> u.cn, (x.cn IS NULL) <> (u.cn IS NULL)) OR coalesce(x.ct <> u.ct, (x.ct IS NULL) <> (u.ct IS NULL)) THEN 1 / (x.k * 0) = 1 ELSE false END
`);
}

/** A text array as PostgreSQL's array input reads it: every element double-quoted, `\` and `"` escaped. */
export function textArrayLiteral(items: readonly string[]): string {
  return '{' + items.map((s) => '"' + s.replace(/[\\"]/g, '\\$&') + '"').join(',') + '}';
}

/**
 * The parameter values of the shape guard for `rels` against `catalog` (see shapeGuardSql): a
 * relation's scanned columns, or a stand-alone composite type's attributes
 * (`SourceCatalog.compositeTypes`, task hs: its `pg_class` row has them as `pg_attribute` rows too).
 * A name the catalogue holds neither way expects no columns, which no live relation has: the guard trips.
 */
export function shapeGuardValues(catalog: SourceCatalog, rels: ReadonlyArray<{ schema: string; name: string }>): string[] {
  const values: string[] = [];
  for (const r of rels) {
    const rel = catalog.relations.find((x) => x.schema === r.schema && x.name === r.name) ?? catalog.compositeTypes?.find((x) => x.schema === r.schema && x.name === r.name);
    const cols = rel?.columns ?? [];
    values.push(r.schema, r.name, textArrayLiteral(cols.map((c) => c.name)), textArrayLiteral(cols.map((c) => c.dataType)));
  }
  return values;
}

/** Guards made per `rels` array and catalogue, with the function guard each was made with: the analysis cache hands the same arrays for a repeated statement. */
const made = new WeakMap<object, WeakMap<SourceCatalog, { fn: ReadGuard | null; guard: ReadGuard }>>();

/**
 * One read guard for a statement: the function guard `fnGuard` (function-guard.ts; null for none)
 * followed by the shape guard for `rels` (null or empty for none); null when both are absent. Frozen;
 * memoised per `rels` array, `fnGuard` and catalogue.
 */
export function withShapeGuard(catalog: SourceCatalog, fnGuard: ReadGuard | null, rels: ReadonlyArray<{ schema: string; name: string }> | undefined): ReadGuard | null {
  if (!rels || rels.length === 0) return fnGuard;
  let byCat = made.get(rels);
  if (!byCat) made.set(rels, (byCat = new WeakMap()));
  const hit = byCat.get(catalog);
  if (hit && hit.fn === fnGuard) return hit.guard;
  const offset = fnGuard ? fnGuard.values.length : 0;
  const text = (fnGuard ? fnGuard.text + ' UNION ALL ' : '') + shapeGuardSql(rels.length, offset);
  const values = [...(fnGuard?.values ?? []), ...shapeGuardValues(catalog, rels)];
  const guard: ReadGuard = Object.freeze({ text, values: Object.freeze(values) as string[] });
  byCat.set(catalog, { fn: fnGuard, guard });
  return guard;
}
