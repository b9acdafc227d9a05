/**
 * The types a statement involves (task hcast; red team rt43b F1, F3; `SqlAnalysisOk.typeUses`).
 *
 * PostgreSQL finds a cast WITH FUNCTION (pg_cast, by source and target type oid) and a domain's
 * CHECK constraints (pg_constraint, by `contypid`) by the type's oid, never by a name, so the
 * function guard (which compares functions by name) cannot see one created after the scan. The
 * type guard (src/sources/postgres/type-guard.ts) compares them per type instead; this module
 * answers which types to compare, from the scanned catalogue:
 * - `columnTypeOids`: the declared types of a relation's columns (`CatalogColumn.typeOid`);
 * - `routineTypeOids`: the parameter, result and body types of a user function's overloads
 *   (`CatalogRoutine.depends.types`);
 * - `closeOver`: each with the types it is built on (domain bases, array elements; recursively,
 *   as far as `SourceCatalog.columnTypes` records them).
 * Built-in types (oid < 16384, FirstNormalObjectId: made by initdb, owned by the bootstrap
 * superuser, so nobody else may create a cast for them) are left out. Fail closed: it
 * over-approximates (a read column's type counts even where no cast runs on it).
 */
import type { SourceCatalog } from './catalog-types';
import { type PreparedCatalog, relKey } from './prepared-catalog';

/**
 * True when `catalog` is a catalogue scan (it records cast versions, routines, the server version or
 * column types), whose statements the type guard checks: only then does the analysis record
 * `typeUses`. A hand-built catalogue (tests, fixtures) has no types to compare. A scan without
 * `castVersions` (before task hcast) counts: its reads are stale (`lacksTypeFacts`) and its guard
 * trips (type-guard.ts).
 */
export function guardsTypes(catalog: SourceCatalog): boolean {
  return catalog.castVersions !== undefined || catalog.routines !== undefined || catalog.serverVersionNum !== undefined || catalog.columnTypes !== undefined;
}

/** The first oid PostgreSQL gives an object made after initdb (FirstNormalObjectId). */
export const FIRST_USER_OID = 16384;

interface TypeUseIndex {
  /** relKey → column name → declared type oid. */
  columns: Map<string, Map<string, number>>;
  /** type oid → the types it is built on directly (domain base, array element). */
  parents: Map<number, number[]>;
  /** `schema\u0000name` → the types of every overload (parameters, result, body). */
  routines: Map<string, number[]>;
}

const cache = new WeakMap<SourceCatalog, TypeUseIndex>();

function index(src: SourceCatalog): TypeUseIndex {
  const hit = cache.get(src);
  if (hit) return hit;
  const out: TypeUseIndex = { columns: new Map(), parents: new Map(), routines: new Map() };
  for (const r of src.relations) {
    const cols = new Map<string, number>();
    for (const c of r.columns) if (typeof c.typeOid === 'number') cols.set(c.name, c.typeOid);
    if (cols.size) out.columns.set(relKey(r.schema, r.name), cols);
  }
  for (const t of src.columnTypes ?? []) {
    const p = [t.base, t.element].filter((x) => typeof x === 'number' && x !== 0);
    if (p.length) out.parents.set(t.oid, p);
  }
  for (const r of src.routines ?? []) {
    const k = r.schema + '\u0000' + r.name;
    const list = out.routines.get(k) ?? [];
    for (const t of r.depends?.types ?? []) list.push(Number(t));
    out.routines.set(k, list);
  }
  cache.set(src, out);
  return out;
}

/** Adds `oid` and every type it is built on (as recorded) to `into`, built-in ones left out. */
export function closeOver(cat: PreparedCatalog, oid: number, into: Set<number>): void {
  const idx = index(cat.source);
  const queue = [oid];
  const seen = new Set<number>();
  while (queue.length) {
    const t = queue.pop()!;
    if (seen.has(t)) continue;
    seen.add(t);
    if (t >= FIRST_USER_OID) into.add(t);
    for (const p of idx.parents.get(t) ?? []) queue.push(p);
  }
}

/** The declared type oids of relation `schema.name`'s columns `columns` (every column when omitted); empty when not recorded. */
export function columnTypeOids(cat: PreparedCatalog, schema: string, name: string, columns?: Iterable<string>): number[] {
  const cols = index(cat.source).columns.get(relKey(schema, name));
  if (!cols) return [];
  const out: number[] = [];
  for (const c of columns ?? cols.keys()) {
    const t = cols.get(c);
    if (t !== undefined) out.push(t);
  }
  return out;
}

/** The parameter, result and body type oids of every overload of user function `schema.name`; empty when not recorded. */
export function routineTypeOids(cat: PreparedCatalog, schema: string, name: string): readonly number[] {
  return index(cat.source).routines.get(schema + '\u0000' + name) ?? [];
}

/**
 * The schemas outside the system ones a type named `names` (`[name]` or `[schema, name]`, as in a
 * `TypeName`) may resolve from: the named schema; for an unqualified name every schema of `path`
 * (the effective lookup order, `pg_catalog` first unless placed) before the first system schema
 * holding a type of that name (`PreparedCatalog.types`; without that list, every schema of `path`
 * but the system ones).
 */
export function typeNameSchemas(cat: PreparedCatalog, names: readonly string[], path: readonly string[], system: ReadonlySet<string>): string[] {
  const name = names[names.length - 1];
  if (names.length === 2) return system.has(names[0]) ? [] : [names[0]];
  const out: string[] = [];
  for (const s of path) {
    if (system.has(s)) {
      if (cat.types !== null && cat.types.has(relKey(s, name))) break;
      continue;
    }
    out.push(s);
  }
  return out;
}
