/**
 * Rules across the relation hierarchy (issue 22 item 1). A partition or inheritance child holds rows
 * its parent shows, and a parent read without ONLY shows its descendants' rows, so:
 *
 * - reading or writing relation R is decided on R and on every ancestor of R: a deny on any of them
 *   wins, and an allow on R or on any ancestor grants (an operator who allows `public.measurements`
 *   may read `public.measurements_2024`, masked the same way);
 * - a deny on a descendant of R also refuses R (R's rows include the descendant's; `ONLY R` is
 *   decided the same way, which can only refuse more);
 * - masks and `deny_relations` policies on R, its ancestors and its descendants all apply, the
 *   strongest mask winning. Partitions share their parent's columns; a column an inheritance child
 *   adds is governed by the parent's table-wide rules and the child's own; a column a child of several
 *   parents inherits is granted only by an allow on the child or on an ancestor that has the column.
 *
 * The one evaluator (src/governance/evaluator.ts) still makes every single decision; this module
 * only chooses which relations each decision is asked about.
 */
import type { RelationHierarchy } from '../sql/hierarchy';
import { describeOutcome, type AccessEvaluator, type Action, type Decision, type ResourceRef } from './evaluator';
import type { Policy } from '../../generated/policy-v1';
import { maskFor, policyApplies, type ColumnMask, type PolicySubject } from './policies';

/**
 * Decides `action` on a relation or column of it across the hierarchy (see module doc).
 * `tableColumns` are the relation's columns, used when no column is named (count(*), DELETE): see
 * `AccessEvaluator.decideTable`. Returns 'deny' when R, an ancestor or a descendant denies;
 * 'allow' when R or an ancestor allows; else 'none'.
 */
export function decideInHierarchy(evaluator: AccessEvaluator, sourceId: string, action: Action, ref: ResourceRef, h: RelationHierarchy, tableColumns: string[] = []): Decision {
  if (action === 'describe') return describeInHierarchy(evaluator, sourceId, ref, h, tableColumns);
  const one = (table: { schema: string; name: string }): Decision =>
    ref.column !== undefined
      ? evaluator.decide(sourceId, action, { schema: table.schema, table: table.name, column: ref.column })
      : evaluator.decideTable(sourceId, action, table.schema, table.name, tableColumns);
  let allowed = false;
  const ancestors = h.ancestors(ref.schema, ref.table);
  // A column some ancestor has comes from the ancestors that have it (a child of several parents,
  // `pc INHERITS (pa, pb)`): pb's allow does not grant pa's column on pc's rows, as it does not on
  // pa's (red team rt48b, B7's residue); the child's own columns, and any column of an ancestor whose
  // columns are not known, are granted by every ancestor's allow. Every ancestor's deny still counts.
  const has = (t: { schema: string; name: string }) => h.columns?.(t.schema, t.name)?.includes(ref.column!);
  const inherited = ref.column !== undefined && ancestors.some((a) => has(a) === true);
  for (const t of [{ schema: ref.schema, name: ref.table }, ...ancestors]) {
    const d = one(t);
    if (d === 'deny') return 'deny';
    if (d === 'allow' && (t.name === ref.table && t.schema === ref.schema ? true : !inherited || has(t) !== false)) allowed = true;
  }
  for (const t of h.descendants(ref.schema, ref.table)) {
    const d = ref.column !== undefined ? evaluator.decide(sourceId, action, { schema: t.schema, table: t.name, column: ref.column }) : evaluator.decide(sourceId, action, { schema: t.schema, table: t.name });
    if (d === 'deny') return 'deny';
  }
  return allowed ? 'allow' : 'none';
}

/**
 * `describe` across the hierarchy (red team rt40): the tree's own describe (or `*`) statements
 * first, walked as decideInHierarchy walks a read (a deny on R, an ancestor or a descendant wins);
 * then a read or a write of R decided across the tree implies it: allowed when either is; when one
 * is denied and neither allowed, only a describe allow naming R's column (or R) itself, on R or an
 * ancestor, describes it (task hnu41 item 1); else the tree's describe allows decide (allow or none). Deciding the implication per relation instead (AccessEvaluator.decide on each)
 * let a write deny on a parent or partition, where that relation has no allow of its own, hide what
 * the caller may read.
 */
function describeInHierarchy(evaluator: AccessEvaluator, sourceId: string, ref: ResourceRef, h: RelationHierarchy, tableColumns: string[]): Decision {
  const named = (table: { schema: string; name: string }, whole: boolean): Decision => {
    if (ref.column !== undefined) return evaluator.decideNamed(sourceId, 'describe', { schema: table.schema, table: table.name, column: ref.column });
    const t = evaluator.decideNamed(sourceId, 'describe', { schema: table.schema, table: table.name });
    if (t !== 'none' || !whole) return t;
    return tableColumns.some((column) => evaluator.decideNamed(sourceId, 'describe', { schema: table.schema, table: table.name, column }) === 'allow') ? 'allow' : 'none';
  };
  let own: Decision = 'none';
  for (const t of [{ schema: ref.schema, name: ref.table }, ...h.ancestors(ref.schema, ref.table)]) {
    const d = named(t, true);
    if (d === 'deny') return 'deny';
    if (d === 'allow') own = 'allow';
  }
  for (const t of h.descendants(ref.schema, ref.table)) if (named(t, false) === 'deny') return 'deny';
  const read = decideInHierarchy(evaluator, sourceId, 'read', ref, h, tableColumns);
  const write = decideInHierarchy(evaluator, sourceId, 'write', ref, h, tableColumns);
  // Past a read or write deny, only a describe allow naming the resource on R or an ancestor describes it (task hnu41 item 1).
  const explicit = () => [{ schema: ref.schema, name: ref.table }, ...h.ancestors(ref.schema, ref.table)].some((t) => evaluator.describesExplicitly(sourceId, { schema: t.schema, table: t.name, ...(ref.column !== undefined ? { column: ref.column } : {}) }));
  return describeOutcome(own, read, write, explicit);
}

/** R, its ancestors and its descendants: the relations whose policies govern a use of R. */
export function governingRelations(schema: string, table: string, h: RelationHierarchy): Array<{ schema: string; table: string }> {
  return [{ schema, name: table }, ...h.ancestors(schema, table), ...h.descendants(schema, table)].map((r) => ({ schema: r.schema, table: r.name }));
}

/** The strongest mask any of R's governing relations puts on the same-named column (null > full > hash > partial), or null. */
export function maskInHierarchy(patterns: Array<{ parts: string[]; method: ColumnMask['method'] }>, schema: string, table: string, column: string, h: RelationHierarchy): ColumnMask['method'] | null {
  const rank = { partial: 1, hash: 2, full: 3, null: 4 } as const;
  let best: ColumnMask['method'] | null = null;
  for (const r of governingRelations(schema, table, h)) {
    const m = maskFor(patterns, r.schema, r.table, column);
    if (m && (best === null || rank[m] > rank[best])) best = m;
  }
  return best;
}

/** True when the caller's rules on the source can refuse or mask something (the check is needed). */
export function hierarchySensitive(evaluator: AccessEvaluator, sourceId: string, policies: Policy[], subject: PolicySubject): boolean {
  // A write deny counts too: a write into a partition attached under a write-denied parent (red team rt1).
  if (evaluator.hasReadDeny(sourceId) || evaluator.statements(sourceId).deny.some((s) => s.action === 'write')) return true;
  // A row rule counts too: a table attached under a ruled parent after the scan carries the parent's rule (issue 27).
  if (evaluator.hasRowRules(sourceId)) return true;
  // So does a policy's restrict_rows predicate (issue 27): it is carried to descendants the same way.
  return policies.some((p) => (p.rule.type === 'mask_columns' || p.rule.type === 'deny_relations' || p.rule.type === 'restrict_rows') && policyApplies(p, subject));
}
