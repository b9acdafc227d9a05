/**
 * Which row rule governs a relation for one caller (issue 27, docs/row-rules.md), decided from the
 * caller's source roles by the one evaluator (src/governance/evaluator.ts `rowTerms`) and the
 * policies' `restrict_rows` predicates (src/governance/policies.ts `policyRowRestrictions`):
 * - the allows for the action (read or *; write or * for a write's target) covering the relation
 *   or any of its ancestors in the partition and inheritance tree count, as an allow on an
 *   ancestor grants the relation (issue 22);
 * - an allow without `rows` grants every row; otherwise the permitted rows are those matching any
 *   term (OR);
 * - each policy predicate covering the relation or an ancestor for the action is ANDed to that:
 *   a policy only ever narrows the rows (a relation with no role term but a policy predicate is
 *   ruled by the policy predicates alone).
 */
import type { AccessEvaluator } from './evaluator';
import type { RelationHierarchy } from '../sql/hierarchy';
import { NO_POLICY_ROW_RESTRICTIONS, type PolicyRowRestrictions } from './policies';

/** One term of a rule: the allow statement it comes from and its predicate text. */
export interface RowRuleTerm {
  role: string;
  resource: string;
  rows: string;
}

/** A restricting term of a rule: the policy it comes from and its predicate text. */
export interface RowRuleRestriction {
  policy: string;
  rows: string;
}

/**
 * A relation's rule for one caller: `terms` combined with OR (empty: the roles grant every row),
 * then ANDed with every `restrictions` predicate. Both deduplicated by text and sorted. Never both empty.
 */
export interface RelationRowRule {
  schema: string;
  table: string;
  terms: RowRuleTerm[];
  restrictions: RowRuleRestriction[];
}

const byRows = (a: { rows: string }, b: { rows: string }) => (a.rows < b.rows ? -1 : a.rows > b.rows ? 1 : 0);

/**
 * The rule governing `action` (default read) on `schema.table` for the caller on `sourceId`, or
 * null when the caller may reach every row of it (some covering allow has no `rows` and no policy
 * restricts it) or no allow covers it (step 3 refuses then). `policies` are the caller's
 * applicable `restrict_rows` predicates (default none).
 */
export function relationRowRule(
  evaluator: AccessEvaluator,
  sourceId: string,
  schema: string,
  table: string,
  hierarchy: RelationHierarchy,
  policies: PolicyRowRestrictions = NO_POLICY_ROW_RESTRICTIONS,
  action: 'read' | 'write' = 'read',
): RelationRowRule | null {
  const terms = new Map<string, RowRuleTerm>();
  const restrictions = new Map<string, RowRuleRestriction>();
  let everyRow = false;
  let covered = false;
  for (const rel of [{ schema, name: table }, ...hierarchy.ancestors(schema, table)]) {
    for (const t of evaluator.rowTerms(sourceId, rel.schema, rel.name, action)) {
      covered = true;
      if (t.rows === null) everyRow = true;
      else if (!terms.has(t.rows)) terms.set(t.rows, { role: t.role, resource: t.resource, rows: t.rows });
    }
    if (policies.any) for (const p of policies.of(rel.schema, rel.name, action)) if (!restrictions.has(p.rows)) restrictions.set(p.rows, p);
  }
  if (!covered) return null;
  if (everyRow) terms.clear();
  if (terms.size === 0 && restrictions.size === 0) return null;
  return { schema, table, terms: [...terms.values()].sort(byRows), restrictions: [...restrictions.values()].sort(byRows) };
}

/** True when two rules permit the same rows by construction (the same sets of predicate texts). */
export function sameRowRule(a: RelationRowRule | null, b: RelationRowRule | null): boolean {
  if (a === null || b === null) return a === b;
  const same = (x: Array<{ rows: string }>, y: Array<{ rows: string }>) => x.length === y.length && x.every((t, i) => t.rows === y[i].rows);
  return same(a.terms, b.terms) && same(a.restrictions, b.restrictions);
}

/**
 * The rule's text as operators wrote it (with identity.<attr> names, never values): the terms
 * ORed, then each restriction ANDed, e.g. `((a) OR (b)) AND (c)`. Used by describe_access.
 */
export function rowRuleText(rule: RelationRowRule): string {
  const or = rule.terms.length === 0 ? null : rule.terms.length === 1 ? rule.terms[0].rows : rule.terms.map((t) => `(${t.rows})`).join(' OR ');
  const parts = [...(or === null ? [] : [or]), ...rule.restrictions.map((r) => r.rows)];
  return parts.length === 1 ? parts[0] : parts.map((p) => `(${p})`).join(' AND ');
}
