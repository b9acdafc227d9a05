/**
 * The relation hierarchy of a source (issue 22 item 1): partitions, sub-partitions, default
 * partitions and inheritance children, from `pg_inherits` as the catalogue scan recorded it
 * (src/sources/postgres/catalog.ts), optionally corrected by what the server reports right before a
 * read (src/sources/postgres/hierarchy.ts). Governance uses it so that every rule written on a parent
 * applies to every descendant, and a rule written on a descendant applies when it is read through
 * its parent (src/governance/hierarchy.ts).
 *
 * Names are compared exactly, as PostgreSQL stores them. Pure; never throws for well-typed input.
 */
import type { RelationName, SourceCatalog } from './catalog-types';

/** Ancestors and descendants of relations; lists are de-duplicated, ancestors nearest first. */
export interface RelationHierarchy {
  /** Every ancestor of `schema.table` (empty for a root or an unknown name). */
  ancestors(schema: string, table: string): readonly RelationName[];
  /** Every descendant of `schema.table` (partitions at any depth, inheritance children). */
  descendants(schema: string, table: string): readonly RelationName[];
  /**
   * The column names of a catalogued relation (undefined: not known). Row rules use it for a child
   * of several parents: an ancestor's allow covers a column of it only when that ancestor has the
   * column (red team rt48b B7, src/governance/row-rules.ts).
   */
  columns?(schema: string, table: string): readonly string[] | undefined;
}

/** Ancestors and descendants of one relation as the server reported them at one moment. */
export interface LiveRelationTree {
  ancestors: RelationName[];
  descendants: RelationName[];
}

/** Key of a relation name in the maps of this module. */
export function relationKey(schema: string, table: string): string {
  return schema + '\u0000' + table;
}

const NONE: readonly RelationName[] = Object.freeze([]);

class MapHierarchy implements RelationHierarchy {
  constructor(
    private readonly up: ReadonlyMap<string, readonly RelationName[]>,
    private readonly down: ReadonlyMap<string, readonly RelationName[]>,
    private readonly cols: ReadonlyMap<string, readonly string[]> = new Map(),
  ) {}

  columns(schema: string, table: string): readonly string[] | undefined {
    return this.cols.get(relationKey(schema, table));
  }

  ancestors(schema: string, table: string): readonly RelationName[] {
    return this.up.get(relationKey(schema, table)) ?? NONE;
  }

  descendants(schema: string, table: string): readonly RelationName[] {
    return this.down.get(relationKey(schema, table)) ?? NONE;
  }
}

/** The hierarchy of a catalogue without trees (or none known): every relation stands alone. */
export const NO_HIERARCHY: RelationHierarchy = new MapHierarchy(new Map(), new Map());

const cache = new WeakMap<SourceCatalog, RelationHierarchy>();

/** Walks `parents` breadth-first (nearest first, each ancestor once, cycles impossible in PostgreSQL but cut anyway). */
function walkParents(start: string, parents: ReadonlyMap<string, readonly RelationName[]>): RelationName[] {
  const out: RelationName[] = [];
  const seen = new Set<string>([start]);
  let frontier = [start];
  while (frontier.length) {
    const next: string[] = [];
    for (const k of frontier) {
      for (const p of parents.get(k) ?? NONE) {
        const pk = relationKey(p.schema, p.name);
        if (seen.has(pk)) continue;
        seen.add(pk);
        out.push(p);
        next.push(pk);
      }
    }
    frontier = next;
  }
  return out;
}

/**
 * The hierarchy the catalogue recorded (cached per catalogue object). A relation's ancestors are its
 * recorded `ancestors` and the walk of catalogued `parents`; descendants are the catalogued
 * relations naming it as an ancestor. Snapshots taken before the hierarchy was scanned have none.
 */
export function catalogHierarchy(catalog: SourceCatalog): RelationHierarchy {
  const hit = cache.get(catalog);
  if (hit) return hit;
  const parents = new Map<string, readonly RelationName[]>();
  for (const r of catalog.relations) if (r.parents?.length) parents.set(relationKey(r.schema, r.name), r.parents);
  const up = new Map<string, readonly RelationName[]>();
  const down = new Map<string, RelationName[]>();
  for (const r of catalog.relations) {
    const key = relationKey(r.schema, r.name);
    // The scan's ancestor list stops at depth 64: the walk of the catalogued direct parents (uncapped)
    // completes it, so a rule on the root of a deeper tree still reaches its leaves (red team rt1 RT1-4).
    const walked = r.parents?.length ? walkParents(key, parents) : NONE;
    const ancestors = r.ancestors?.length ? [...r.ancestors, ...walked.filter((w) => !r.ancestors!.some((x) => x.schema === w.schema && x.name === w.name))] : walked;
    if (!ancestors.length) continue;
    up.set(key, ancestors);
    for (const a of ancestors) {
      const ak = relationKey(a.schema, a.name);
      const list = down.get(ak) ?? [];
      if (!list.some((d) => d.schema === r.schema && d.name === r.name)) list.push({ schema: r.schema, name: r.name });
      down.set(ak, list);
    }
  }
  // Columns of the relations in a tree only (what B7's check reads).
  const cols = new Map<string, readonly string[]>();
  for (const r of catalog.relations) {
    const key = relationKey(r.schema, r.name);
    if (up.has(key) || down.has(key)) cols.set(key, r.columns.map((c) => c.name));
  }
  const h = new MapHierarchy(up, down, cols);
  cache.set(catalog, h);
  return h;
}

function sameNames(a: readonly RelationName[], b: readonly RelationName[]): boolean {
  const key = (l: readonly RelationName[]) => l.map((r) => relationKey(r.schema, r.name)).sort().join('\u0001');
  return key(a) === key(b);
}

/**
 * True when the server's answer for some relation differs from `base` (a partition attached,
 * detached or created under a parent, or an inheritance edge added or removed since the scan).
 */
export function hierarchyChanged(base: RelationHierarchy, live: ReadonlyMap<string, LiveRelationTree>): boolean {
  for (const [key, tree] of live) {
    const [schema, table] = key.split('\u0000');
    if (!sameNames(base.ancestors(schema, table), tree.ancestors) || !sameNames(base.descendants(schema, table), tree.descendants)) return true;
  }
  return false;
}

/**
 * `base` corrected by the server's answer: the relations in `live` take their live ancestors and
 * descendants, and the old and the new ancestors both count, as do the old and the new descendants
 * (a partition detached after the scan keeps the rules of the tree it held rows of; one attached
 * gains them). Other relations keep `base`'s answer.
 */
export function overlayHierarchy(base: RelationHierarchy, live: ReadonlyMap<string, LiveRelationTree>): RelationHierarchy {
  const union = (a: readonly RelationName[], b: readonly RelationName[]): RelationName[] => {
    const out = [...a];
    for (const r of b) if (!out.some((x) => x.schema === r.schema && x.name === r.name)) out.push(r);
    return out;
  };
  const up = new Map<string, readonly RelationName[]>();
  const down = new Map<string, readonly RelationName[]>();
  for (const [key, tree] of live) {
    const [schema, table] = key.split('\u0000');
    up.set(key, union(tree.ancestors, base.ancestors(schema, table)));
    down.set(key, union(tree.descendants, base.descendants(schema, table)));
  }
  return {
    ancestors: (schema, table) => up.get(relationKey(schema, table)) ?? base.ancestors(schema, table),
    descendants: (schema, table) => down.get(relationKey(schema, table)) ?? base.descendants(schema, table),
    columns: (schema, table) => base.columns?.(schema, table),
  };
}
