/**
 * User code attached to types (task hcast; docs/operators.md "User functions"; red team rt41b F3, F7).
 *
 * PostgreSQL runs functions the statement does not name when a value of a type is converted or
 * compared: a cast WITH FUNCTION (`CREATE CAST (tag AS text) WITH FUNCTION tag_text(tag)`, run by
 * `'x'::tag::text` or implicitly) and the support functions of the type's operator classes and
 * families (ORDER BY, DISTINCT, GROUP BY, hash joins sort or hash with btree/hash FUNCTION 1, not
 * with the `<` operator's function; an index scan or build runs gist, gin, brin and spgist support
 * functions; every access method is recorded since task hf5). The scan records them per type (`SourceCatalog.typeCode`, repeated for
 * every type built on one); this module answers which user functions a use of a type may run.
 *
 * A statement involves a type when it reads or writes a column of that type (or of a type built on
 * it), names it in a cast, or calls a user function whose parameter, result or body types include it
 * (function-reads.ts follows `CatalogRoutine.depends.types`). A user cast between two built-in types
 * may run anywhere: it is attached to every statement. Each attached function is then treated like a
 * call (function-reads.ts: pure → nothing, data-reading → its reads count, opaque → refused unless
 * trusted). Fail closed: over-approximates (a read column's type counts even where no comparison
 * or cast runs on it).
 */
import type { RelationName, SourceCatalog } from './catalog-types';
import { type PreparedCatalog, relKey } from './prepared-catalog';

/** The attached-code index of one prepared catalogue. */
interface TypeCodeIndex {
  /** Type oid → the user functions attached to it. */
  byOid: Map<number, RelationName[]>;
  /** Type name → [type schema, attached functions] (names as PostgreSQL stores them). */
  byName: Map<string, Array<{ schema: string; fns: RelationName[] }>>;
  /** User casts between two built-in types: attached to every statement. */
  always: RelationName[];
  /** relKey → column name → declared type oid. */
  columns: Map<string, Map<string, number>>;
}

const cache = new WeakMap<PreparedCatalog, TypeCodeIndex | null>();

function index(cat: PreparedCatalog): TypeCodeIndex | null {
  const hit = cache.get(cat);
  if (hit !== undefined) return hit;
  const rows = cat.source.typeCode;
  let out: TypeCodeIndex | null = null;
  if (rows && rows.length) {
    out = { byOid: new Map(), byName: new Map(), always: [], columns: new Map() };
    for (const [oid, ts, tn, fs, fn, always] of rows) {
      const f = { schema: fs, name: fn };
      const list = out.byOid.get(oid) ?? [];
      list.push(f);
      out.byOid.set(oid, list);
      const named = out.byName.get(tn) ?? [];
      const entry = named.find((e) => e.schema === ts);
      if (entry) entry.fns.push(f);
      else named.push({ schema: ts, fns: [f] });
      out.byName.set(tn, named);
      if (always && !out.always.some((a) => a.schema === fs && a.name === fn)) out.always.push(f);
    }
    for (const r of cat.source.relations) {
      const cols = new Map<string, number>();
      for (const c of r.columns) if (typeof c.typeOid === 'number' && out.byOid.has(c.typeOid)) cols.set(c.name, c.typeOid);
      if (cols.size) out.columns.set(relKey(r.schema, r.name), cols);
    }
  }
  cache.set(cat, out);
  return out;
}

/** The user functions attached to type `oid` (`pg_type` oid); empty when none or unknown. */
export function codeOfType(cat: PreparedCatalog, oid: number): readonly RelationName[] {
  return index(cat)?.byOid.get(oid) ?? [];
}

/**
 * The user functions attached to a type named `names` (`[name]` or `[schema, name]`, as in a
 * `TypeName`): an unqualified name counts every schema of `path` holding a type of that name.
 */
export function codeOfTypeName(cat: PreparedCatalog, names: readonly string[], path: readonly string[]): RelationName[] {
  const named = index(cat)?.byName.get(names[names.length - 1]);
  if (!named) return [];
  const schemas = names.length === 2 ? [names[0]] : path;
  return named.filter((e) => schemas.includes(e.schema)).flatMap((e) => e.fns);
}

/**
 * The user functions attached to the types of relation `schema.name`'s columns `columns` (every
 * column when omitted); empty for a relation the catalogue does not hold or whose columns carry no
 * type oid (older snapshots).
 */
export function codeOfColumns(cat: PreparedCatalog, schema: string, name: string, columns?: Iterable<string>): RelationName[] {
  const idx = index(cat);
  const cols = idx?.columns.get(relKey(schema, name));
  if (!idx || !cols) return [];
  const out: RelationName[] = [];
  for (const c of columns ?? cols.keys()) {
    const oid = cols.get(c);
    if (oid !== undefined) out.push(...(idx.byOid.get(oid) ?? []));
  }
  return out;
}

/** True when the catalogue records any user code attached to a type. */
export function hasTypeCode(cat: PreparedCatalog): boolean {
  return index(cat) !== null;
}

/** User casts between two built-in types (superuser-made): they may run in any statement. */
export function alwaysCode(cat: PreparedCatalog): readonly RelationName[] {
  return index(cat)?.always ?? [];
}

/**
 * True when `catalog` came from a catalogue scan made before the scan recorded the code attached to
 * types (`typeCode`, task hcast; red team rt41b F3, F7): casts WITH FUNCTION and operator-class
 * support functions would then run uncounted, so the pipeline treats the snapshot as stale
 * (`catalog_stale`, and the gateway rescans it; task hf5). A scan is told by the facts every scan
 * since issue 22 records (`routines`, `serverVersionNum`, `columnTypes`, `operatorResolution`); a
 * hand-built catalogue with none of them is not a scan and is left alone. A scan without
 * `compositeTypes` (before task hs) is stale too: its functions lack `resultRowTypes`, so a result
 * built from a relation's live columns would go unguarded. A scan without `castVersions` (before
 * task hcast's type guard) is stale too: a cast or domain constraint created since would go unseen.
 */
export function lacksTypeFacts(catalog: SourceCatalog): boolean {
  // Task hs: a scan without the composite types predates the functions' result row types.
  // Task hcast: a scan without the casts' and domain constraints' versions cannot be guarded for them.
  if (catalog.typeCode !== undefined && catalog.compositeTypes !== undefined && catalog.castVersions !== undefined) return false;
  return catalog.routines !== undefined || catalog.serverVersionNum !== undefined || catalog.columnTypes !== undefined || catalog.operatorResolution !== undefined;
}
