/**
 * Indexed form of a `SourceCatalog` for fast name resolution by the analyser (sql-safety.md
 * layers 1 and 3: every relation, column, function and operator is resolved after parsing).
 */
import type { CatalogFunction, CatalogOperator, CatalogRelation, RelationName, SourceCatalog, Volatility } from './catalog-types';

/** A catalogued relation with a by-name column index. */
export interface PreparedRelation {
  readonly schema: string;
  readonly name: string;
  readonly kind: CatalogRelation['kind'];
  /** Column names in catalogue order. */
  readonly columnNames: readonly string[];
  readonly columnSet: ReadonlySet<string>;
  /** The defining SELECT of a view or materialized view (see `CatalogRelation.definition`). */
  readonly definition?: string;
  /**
   * Stored generated columns by name → the columns of this relation their expressions read
   * (`CatalogColumn.generatedFrom`; every other column when the snapshot does not say). Reading a
   * generated column reads its inputs too (red team rt42 G1). Absent when the relation has none.
   */
  readonly generatedInputs?: ReadonlyMap<string, readonly string[]>;
}

/** One candidate for a function or operator name: the schema that defines it and its volatility. */
export interface PreparedRoutine {
  readonly schema: string;
  readonly name: string;
  readonly volatility: Volatility;
  readonly returnsSet: boolean;
  readonly outColumns?: readonly string[];
  /** The row types its overloads return (`CatalogFunction.resultRowTypes`, task hs); absent: none. */
  readonly resultRowTypes?: readonly RelationName[];
}

/**
 * The indexed catalogue. `path` is the effective lookup order PostgreSQL uses for unqualified names:
 * `pg_catalog` first unless the search path names it explicitly.
 */
export interface PreparedCatalog {
  readonly prepared: true;
  readonly source: SourceCatalog;
  readonly path: readonly string[];
  /** Key `schema + '\u0000' + name`. */
  readonly relations: ReadonlyMap<string, PreparedRelation>;
  /** Key: bare function name; value: one entry per defining schema. */
  readonly functionsByName: ReadonlyMap<string, readonly PreparedRoutine[]>;
  /** Key: bare operator name; absent when the catalogue has no operator list. */
  readonly operatorsByName: ReadonlyMap<string, readonly PreparedRoutine[]> | null;
  readonly systemRelations: ReadonlySet<string>;
  /** Key: bare type name; value: schemas where a type of that name runs user code on input. */
  readonly unsafeTypes: ReadonlyMap<string, readonly string[]>;
  /** Keys `relKey(schema, name)` of `SourceCatalog.types`; null when the catalogue has no type list. */
  readonly types: ReadonlySet<string> | null;
  /** Keys `relKey(schema, name)` of `SourceCatalog.compositeTypes` (stand-alone composite types, task hs). */
  readonly compositeTypes: ReadonlySet<string>;
}

const cache = new WeakMap<SourceCatalog, PreparedCatalog>();
const RANK: Record<Volatility, number> = { immutable: 0, stable: 1, volatile: 2 };

/** Key used in `PreparedCatalog.relations`. */
export function relKey(schema: string, name: string): string {
  return schema + '\u0000' + name;
}

function addRoutine(map: Map<string, PreparedRoutine[]>, r: CatalogFunction | CatalogOperator): void {
  let list = map.get(r.name);
  if (!list) map.set(r.name, (list = []));
  const existing = list.findIndex((x) => x.schema === r.schema);
  const entry: PreparedRoutine = {
    schema: r.schema,
    name: r.name,
    volatility: r.volatility,
    returnsSet: 'returnsSet' in r ? r.returnsSet : false,
    ...('outColumns' in r && r.outColumns ? { outColumns: r.outColumns } : {}),
    ...('resultRowTypes' in r && r.resultRowTypes?.length ? { resultRowTypes: r.resultRowTypes } : {}),
  };
  if (existing < 0) list.push(entry);
  else {
    // Duplicate (schema, name) rows: keep the most volatile, drop the column list (ambiguous), keep every row type.
    const old = list[existing];
    const rowTypes = [...(old.resultRowTypes ?? []), ...(entry.resultRowTypes ?? [])];
    list[existing] = {
      schema: r.schema,
      name: r.name,
      volatility: RANK[old.volatility] >= RANK[entry.volatility] ? old.volatility : entry.volatility,
      returnsSet: old.returnsSet || entry.returnsSet,
      ...(rowTypes.length ? { resultRowTypes: rowTypes } : {}),
    };
  }
}

/**
 * Builds (once per catalogue object, cached in a WeakMap) the indexed form used by `analyzeSql`.
 * Accepts an already prepared catalogue and returns it unchanged. Never throws for well-typed input.
 * Treat the source catalogue as immutable after preparing it (the cache is keyed by identity).
 */
export function prepareCatalog(catalog: SourceCatalog | PreparedCatalog): PreparedCatalog {
  if ((catalog as PreparedCatalog).prepared === true) return catalog as PreparedCatalog;
  const src = catalog as SourceCatalog;
  const hit = cache.get(src);
  if (hit) return hit;
  const relations = new Map<string, PreparedRelation>();
  for (const r of src.relations) {
    const columnNames = r.columns.map((c) => c.name);
    let generatedInputs: Map<string, readonly string[]> | undefined;
    for (const c of r.columns) {
      if (c.generated !== true) continue;
      const inputs = Array.isArray(c.generatedFrom) ? c.generatedFrom : columnNames.filter((n) => n !== c.name);
      (generatedInputs ??= new Map()).set(c.name, inputs);
    }
    relations.set(relKey(r.schema, r.name), {
      schema: r.schema,
      name: r.name,
      kind: r.kind,
      columnNames,
      columnSet: new Set(columnNames),
      ...(typeof r.definition === 'string' ? { definition: r.definition } : {}),
      ...(generatedInputs ? { generatedInputs } : {}),
    });
  }
  const functionsByName = new Map<string, PreparedRoutine[]>();
  for (const f of src.functions) addRoutine(functionsByName, f);
  let operatorsByName: Map<string, PreparedRoutine[]> | null = null;
  if (src.operators) {
    operatorsByName = new Map();
    for (const o of src.operators) addRoutine(operatorsByName, o);
  }
  const unsafeTypes = new Map<string, string[]>();
  for (const t of src.unsafeTypes ?? []) {
    const list = unsafeTypes.get(t.name);
    if (list) list.push(t.schema);
    else unsafeTypes.set(t.name, [t.schema]);
  }
  const path = src.searchPath.includes('pg_catalog') ? [...src.searchPath] : ['pg_catalog', ...src.searchPath];
  const prepared: PreparedCatalog = {
    prepared: true,
    source: src,
    path,
    relations,
    functionsByName,
    operatorsByName,
    systemRelations: new Set(src.systemRelations ?? []),
    unsafeTypes,
    types: src.types ? new Set(src.types.map((t) => relKey(t.schema, t.name))) : null,
    compositeTypes: new Set((src.compositeTypes ?? []).map((t) => relKey(t.schema, t.name))),
  };
  cache.set(src, prepared);
  return prepared;
}
