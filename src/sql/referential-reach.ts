/**
 * What a write reaches beyond its targets without the caller's row rules (issue 27, rt27w finding B;
 * docs/row-rules.md "Writes"): PostgreSQL runs a foreign key's referential actions (`ON DELETE
 * CASCADE`, `SET NULL`, `SET DEFAULT`, `ON UPDATE CASCADE` …) and user triggers and rules with no
 * regard for the row views InterLock puts in place of the statement's references, as it ignores RLS
 * for them. This module follows the catalogue's records (`CatalogRelation.referencedBy`,
 * `writeHooks`: src/sources/postgres/catalog.ts) from a statement's write targets to every relation
 * a referential action writes, transitively; src/pipeline/row-rules.ts refuses the write for a
 * caller with row rules when one of them is ruled for it, or when user triggers or rules run.
 *
 * Events, as PostgreSQL fires them:
 * - DELETE of a row of R: each key referencing R with `ON DELETE CASCADE` deletes the referencing
 *   rows; with `SET NULL`/`SET DEFAULT` it updates their key columns.
 * - UPDATE of columns C of R: each key referencing R whose referenced columns meet C, with an
 *   `ON UPDATE` action other than NO ACTION/RESTRICT, updates the referencing rows' key columns.
 * - INSERT runs no referential action (only R's triggers and rules). `ON CONFLICT DO UPDATE` is an
 *   update (the analyser lists it as one), MERGE all three (without DELETE, which the analyser's
 *   column list shows, an update of its listed columns and an insert).
 * A write to a relation reaches its descendants' rows too (partitions, inheritance children), so
 * their keys, triggers and rules count. An UPDATE of a partitioned table can move a row to another
 * partition: PostgreSQL deletes it from the one it leaves, whose declared keys' ON DELETE actions run. A write through a view writes its base relations
 * (the view's recorded lineage), which count as targets: an UPDATE of view columns that each pass one
 * base column through unchanged (`WriteAccess.baseColumns`) writes those base columns, any other write
 * through a view (or through a view with user triggers) every column. An UPDATE of some columns of a
 * relation also writes its stored generated columns, and every column when it has user triggers.
 * The view definitions are the last scan's (a view redefined since is not seen: rtfk3 finding V3).
 *
 * Fail closed: a relation the catalogue lacks, or whose `referencedBy`/`writeHooks` are not recorded
 * (a snapshot scanned before they existed), or a view whose lineage is not recorded, is `unknown`.
 */
import type { ReferencingKey, RelationName, SourceCatalog } from './catalog-types';
import type { RelationHierarchy } from './hierarchy';
import { relKey } from './prepared-catalog';
import type { WriteAccess } from './types';
import { viewLineage } from './view-lineage';

/**
 * A relation a referential action writes: how (`delete` or `update`, the first action found), from
 * which relation, by which action; `columns`, the key columns that any `SET NULL`, `SET DEFAULT` or
 * `ON UPDATE CASCADE` action reaching it writes (the union over every such key; [] when only deleted).
 */
export interface ReachedRelation extends RelationName {
  event: 'delete' | 'update';
  columns: string[];
  /** The referenced relation whose write fires the action. */
  from: RelationName;
  /** e.g. "ON DELETE CASCADE". */
  action: string;
}

/** The outcome of `referentialReach`; `unknown` and `hooks` name a relation as "schema.name". */
export interface ReferentialReach {
  /** Relations written by referential actions (each relation once, first found first). */
  reached: ReachedRelation[];
  /** The first relation written (a target, a descendant or a reached one) with user triggers or rules, and which. */
  hooks: { relation: string; kind: 'triggers' | 'rules' } | null;
  /** The first relation written (as `hooks`) that has user rewrite rules, whether or not a trigger came first; null when none was met. */
  rules: string | null;
  /** The first relation whose keys or hooks the catalogue does not record. */
  unknown: string | null;
  /**
   * Every relation the walk met, each once, first met first: the targets, the views on a target's
   * path and their base relations, the descendants of each relation written and the relations
   * reached (task hhook: an approved write's guard compares the code each runs on a write with the
   * scan's, src/sources/postgres/hook-guard.ts). Complete only when `unknown` is null and the walk
   * went past hooks (`opts.pastHooks`).
   */
  touched: RelationName[];
}

const ACTION_SQL: Record<string, string> = { cascade: 'CASCADE', set_null: 'SET NULL', set_default: 'SET DEFAULT' };

/**
 * Follows `writes` (the analysis's write targets) through `catalog`'s foreign keys; see the module
 * comment. Pure; stops at the first unknown relation or hook-carrying relation (the answer is a
 * refusal then). `hierarchy`: descendants of each written relation (the catalogue's tree).
 * `opts.pastHooks`: record the first hook-carrying relation in `hooks` but go on following the keys
 * (every relation reached is listed; src/pipeline/03-authorize.ts decides each one for every caller).
 */
export function referentialReach(catalog: SourceCatalog, hierarchy: RelationHierarchy, writes: readonly Pick<WriteAccess, 'schema' | 'table' | 'operation' | 'columns' | 'baseColumns'>[], opts: { pastHooks?: boolean } = {}): ReferentialReach {
  const rels = new Map(catalog.relations.map((r) => [relKey(r.schema, r.name), r]));
  const out: ReferentialReach = { reached: [], hooks: null, rules: null, unknown: null, touched: [] };
  const reachedKeys = new Map<string, ReachedRelation>();
  // Per relation: deleted already followed, updated columns already followed, hooks checked.
  const deleted = new Set<string>();
  const updated = new Map<string, Set<string>>();
  const checked = new Set<string>();
  // Descendant partitions whose rows an update of an ancestor may move out (followed once).
  const moved = new Set<string>();
  const work: Array<{ rel: RelationName; event: 'delete' | 'update' | 'insert'; columns: readonly string[] | 'all' }> = [];

  /** False (and `out` set) when the relation is unknown or runs hooks. */
  const inspect = (r: RelationName): boolean => {
    const k = relKey(r.schema, r.name);
    if (checked.has(k)) return true;
    checked.add(k);
    out.touched.push({ schema: r.schema, name: r.name });
    const rel = rels.get(k);
    if (!rel || !rel.writeHooks || (!rel.referencedBy && rel.kind !== 'view' && rel.kind !== 'materialized_view')) {
      out.unknown = `${r.schema}.${r.name}`;
      return false;
    }
    if (rel.writeHooks.rules && !out.rules) out.rules = `${r.schema}.${r.name}`;
    if ((rel.writeHooks.triggers || rel.writeHooks.rules) && !out.hooks) {
      out.hooks = { relation: `${r.schema}.${r.name}`, kind: rel.writeHooks.triggers ? 'triggers' : 'rules' };
      if (!opts.pastHooks) return false;
    }
    return true;
  };

  for (const w of writes) {
    const target = { schema: w.schema, name: w.table };
    const rel = rels.get(relKey(target.schema, target.name));
    if (!inspect(target)) return out;
    // A MERGE lists every column of its target when a WHEN clause can DELETE (src/sql/analyzer/dml.ts);
    // one that lists fewer cannot delete, and updates at most the columns it lists (rtfk finding 4).
    const mayDelete = !rel || rel.columns.every((c) => w.columns.includes(c.name));
    const events: Array<['delete' | 'update' | 'insert', readonly string[] | 'all']> =
      w.operation === 'merge'
        ? mayDelete
          ? [['delete', 'all'], ['update', 'all'], ['insert', 'all']]
          : [['update', rel.kind === 'view' || rel.kind === 'materialized_view' ? 'all' : w.columns], ['insert', 'all']]
        : [[w.operation, w.operation === 'update' ? w.columns : 'all']];
    // A write through a view writes its base relations: an UPDATE whose written view columns each pass
    // one base column through (WriteAccess.baseColumns, the analyser's view lineage) writes those
    // columns of that base (rtfk finding 3); any other write through a view, every column of every base.
    if (rel && (rel.kind === 'view' || rel.kind === 'materialized_view')) {
      const lin = viewLineage(catalog, target.schema, target.name);
      if (lin.unknown.length) {
        out.unknown = lin.unknown[0];
        return out;
      }
      for (const v of lin.views) if (!inspect(v)) return out;
      // A view with user triggers (INSTEAD OF) writes its bases as its trigger's code does: every column (rtfk3 finding V2).
      const triggered = lin.views.some((v) => rels.get(relKey(v.schema, v.name))?.writeHooks?.triggers);
      const mapped = w.operation === 'update' && !triggered ? w.baseColumns : undefined;
      for (const b of lin.bases) {
        for (const [event] of events) {
          const columns = event === 'update' && mapped ? mapped.filter((c) => c.schema === b.schema && c.table === b.name).map((c) => c.column) : 'all';
          work.push({ rel: b, event, columns });
        }
      }
    } else {
      for (const [event, columns] of events) work.push({ rel: target, event, columns });
    }
  }

  const reach = (fk: ReferencingKey, from: RelationName, event: 'delete' | 'update', action: string) => {
    const key = relKey(fk.schema, fk.name);
    let entry = reachedKeys.get(key);
    if (!entry) {
      entry = { schema: fk.schema, name: fk.name, event, columns: [], from, action };
      reachedKeys.set(key, entry);
      out.reached.push(entry);
    }
    if (event === 'update') for (const c of fk.columns) if (!entry.columns.includes(c)) entry.columns.push(c);
    work.push({ rel: { schema: fk.schema, name: fk.name }, event, columns: event === 'update' ? fk.columns : 'all' });
  };

  while (work.length) {
    const { rel, event, columns } = work.shift()!;
    for (const r of [rel, ...hierarchy.descendants(rel.schema, rel.name)]) {
      if (!inspect(r)) return out;
      const k = relKey(r.schema, r.name);
      const keys = rels.get(k)?.referencedBy ?? [];
      if (event === 'insert') continue;
      if (event === 'delete') {
        if (deleted.has(k)) continue;
        deleted.add(k);
        for (const fk of keys) {
          if (fk.onDelete === 'cascade') reach(fk, r, 'delete', 'ON DELETE CASCADE');
          else if (fk.onDelete === 'set_null' || fk.onDelete === 'set_default') reach(fk, r, 'update', `ON DELETE ${ACTION_SQL[fk.onDelete]}`);
        }
        continue;
      }
      // A row an UPDATE of an ancestor moves out of this partition is deleted from it: the keys
      // declared on it (not a partitioned ancestor's clones) run their ON DELETE action (rtfk
      // finding 7). Which columns move a row (the partition keys) is not recorded: any update counts;
      // an inheritance child (partition false) keeps its rows, a snapshot without the flag is assumed a partition.
      if (r !== rel && rels.get(k)?.partition !== false && !moved.has(k)) {
        moved.add(k);
        for (const fk of keys) {
          if (fk.cloned) continue;
          if (fk.onDelete === 'cascade') reach(fk, r, 'delete', 'ON DELETE CASCADE');
          else if (fk.onDelete === 'set_null' || fk.onDelete === 'set_default') reach(fk, r, 'update', `ON DELETE ${ACTION_SQL[fk.onDelete]}`);
        }
      }
      // An update of some of its columns also writes, as PostgreSQL runs it: every column, when the
      // relation has user triggers (a BEFORE UPDATE trigger may set any column of the new row); its
      // stored generated columns, recomputed from the new row (which columns they read is not
      // recorded), and any column a key references that the scan did not see (one added since, with
      // the keys read live at approval, may be generated). A key may reference any of them (rtfk3
      // findings V1, V2).
      const relRec = rels.get(k);
      const all = columns === 'all' || (columns.length > 0 && !!relRec?.writeHooks?.triggers);
      const scanned = new Set((relRec?.columns ?? []).map((c) => c.name));
      const recomputed = (relRec?.columns ?? []).filter((c) => c.generated).map((c) => c.name);
      const unseen = keys.flatMap((fk) => fk.referencedColumns.filter((c) => !scanned.has(c)));
      const written = all || columns.length === 0 ? columns : [...columns, ...recomputed, ...unseen];
      // Only columns not followed yet for this relation can fire anything new.
      let seen = updated.get(k);
      if (!seen) updated.set(k, (seen = new Set()));
      const fresh = all ? ['\u0000all'] : (written as readonly string[]).filter((c) => !seen!.has(c) && !seen!.has('\u0000all'));
      if (fresh.length === 0 || seen.has('\u0000all')) continue;
      for (const c of fresh) seen.add(c);
      for (const fk of keys) {
        if (fk.onUpdate !== 'cascade' && fk.onUpdate !== 'set_null' && fk.onUpdate !== 'set_default') continue;
        if (!all && !fk.referencedColumns.some((c) => fresh.includes(c))) continue;
        reach(fk, r, 'update', `ON UPDATE ${ACTION_SQL[fk.onUpdate]}`);
      }
    }
  }
  return out;
}
