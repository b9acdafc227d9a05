/**
 * The relations behind a view, as the server records them (issue 27 item 1; red team rt1 RT1-3).
 *
 * The catalogue scan records, for each view and materialized view, the relations, user code and
 * options its stored query depends on (`CatalogRelation.view`, from `pg_rewrite`/`pg_depend`:
 * src/sources/postgres/catalog.ts). This module follows those records through nested views and
 * materialized views to the relations whose rows the view's rows come from. It does not parse the
 * definition: what the server says the query reads is what it reads, including relations no
 * output column comes from (a `count(*)`, a filter, an EXISTS).
 *
 * Fail closed: a view without recorded dependencies (a snapshot scanned before they existed), or a
 * dependency the catalogue does not hold (truncated snapshot, a schema the scan skips), is listed
 * in `unknown`; callers that need the lineage refuse then.
 */
import type { CatalogRelation, RelationName, SourceCatalog } from './catalog-types';
import { relKey } from './prepared-catalog';
import { RUNS_SQL_TEXT_NAMES } from './function-policy';

/**
 * A call of a built-in that runs SQL text, anywhere in a view's printed definition (string
 * literals and names included: a false match only refuses). PostgreSQL records no dependency on a
 * built-in, so the scan's `userCode` cannot list these (red team rt27z finding Z2).
 */
const RUNS_SQL_TEXT = new RegExp(`\\b(${RUNS_SQL_TEXT_NAMES})\\b`, 'i');

/** A view's lineage: see the module comment. */
export interface ViewLineage {
  /** Base relations (tables, partitioned and foreign tables) whose rows reach the view, each once. */
  bases: RelationName[];
  /** Every view and materialized view on the way, the view itself first, each once. */
  views: RelationName[];
  /** The materialized views among `views` (their rows were computed when last refreshed). */
  materialized: RelationName[];
  /**
   * "schema.name" of user functions, operators and unsafe types called anywhere on the way, and of
   * the built-ins that run SQL text found in a definition on the way (sorted).
   */
  userCode: string[];
  /** Views without recorded dependencies and dependencies missing from the catalogue ("schema.name"). */
  unknown: string[];
}

/** Schemas whose relations never carry InterLock rules and are never catalogued. */
const SYSTEM_SCHEMAS = new Set(['pg_catalog', 'information_schema']);

const index = new WeakMap<SourceCatalog, Map<string, CatalogRelation>>();

function byName(catalog: SourceCatalog): Map<string, CatalogRelation> {
  let m = index.get(catalog);
  if (!m) {
    m = new Map(catalog.relations.map((r) => [relKey(r.schema, r.name), r]));
    index.set(catalog, m);
  }
  return m;
}

/** True for a catalogue relation that is a view or a materialized view. */
export function isViewRelation(catalog: SourceCatalog, schema: string, name: string): boolean {
  const k = byName(catalog).get(relKey(schema, name))?.kind;
  return k === 'view' || k === 'materialized_view';
}

/** The catalogue's record of a view's facts (null for a non-view or an unknown relation). */
export function viewFacts(catalog: SourceCatalog, schema: string, name: string): CatalogRelation | null {
  const r = byName(catalog).get(relKey(schema, name));
  return r && (r.kind === 'view' || r.kind === 'materialized_view') ? r : null;
}

/**
 * The lineage of view `schema.name` in `catalog` (see the module comment and `ViewLineage`). Pure;
 * follows at most 10 000 views (a deeper web is reported in `unknown`). A relation that is not a
 * view has itself as its only base.
 */
export function viewLineage(catalog: SourceCatalog, schema: string, name: string): ViewLineage {
  const rels = byName(catalog);
  const out: ViewLineage = { bases: [], views: [], materialized: [], userCode: [], unknown: [] };
  const seen = new Set<string>();
  const code = new Set<string>();
  const stack: RelationName[] = [{ schema, name }];
  let budget = 10_000;
  while (stack.length) {
    const r = stack.pop()!;
    const k = relKey(r.schema, r.name);
    if (seen.has(k)) continue;
    seen.add(k);
    const rel = rels.get(k);
    if (!rel) {
      // pg_catalog and information_schema relations are never catalogued; anything else missing is unknown.
      if (SYSTEM_SCHEMAS.has(r.schema)) out.bases.push({ schema: r.schema, name: r.name });
      else out.unknown.push(`${r.schema}.${r.name}`);
      continue;
    }
    if (rel.kind !== 'view' && rel.kind !== 'materialized_view') {
      out.bases.push({ schema: rel.schema, name: rel.name });
      continue;
    }
    out.views.push({ schema: rel.schema, name: rel.name });
    if (rel.kind === 'materialized_view') out.materialized.push({ schema: rel.schema, name: rel.name });
    if (!rel.view || --budget < 0) {
      out.unknown.push(`${rel.schema}.${rel.name}`);
      continue;
    }
    for (const c of rel.view.userCode) code.add(c);
    const runsSql = rel.definition?.match(RUNS_SQL_TEXT);
    if (runsSql) code.add(`pg_catalog.${runsSql[1].toLowerCase()}`);
    // Depth-first in recorded order, so `views` lists the view itself first.
    for (let i = rel.view.reads.length - 1; i >= 0; i--) stack.push(rel.view.reads[i]);
  }
  out.userCode = [...code].sort();
  return out;
}
