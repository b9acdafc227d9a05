/**
 * Which row rule governs a relation for one caller (issue 27, docs/row-rules.md), decided from the
 * caller's source roles by the one evaluator (src/governance/evaluator.ts `rowTerms`):
 * - the read allows (read or *) covering the relation or any of its ancestors in the partition and
 *   inheritance tree count, as an allow on an ancestor grants the relation (issue 22);
 * - an allow without `rows` grants every row: the relation is then unruled for the caller;
 * - otherwise the relation is ruled and its permitted rows are those matching any term (OR).
 * Policies' restricting predicates (AND) are not implemented yet (docs/row-rules.md, "Not yet").
 */
import type { AccessEvaluator } from './evaluator';
import type { RelationHierarchy } from '../sql/hierarchy';

/** One term of a rule: the allow statement it comes from and its predicate text. */
export interface RowRuleTerm {
  role: string;
  resource: string;
  rows: string;
}

/** A relation's rule for one caller: its terms (combined with OR), deduplicated by text and sorted. */
export interface RelationRowRule {
  schema: string;
  table: string;
  terms: RowRuleTerm[];
}

/**
 * The rule governing `schema.table` for the caller on `sourceId`, or null when the caller may read
 * every row of it (some covering allow has no `rows`) or no allow covers it (step 3 refuses then).
 */
export function relationRowRule(evaluator: AccessEvaluator, sourceId: string, schema: string, table: string, hierarchy: RelationHierarchy): RelationRowRule | null {
  const terms = new Map<string, RowRuleTerm>();
  for (const rel of [{ schema, name: table }, ...hierarchy.ancestors(schema, table)]) {
    for (const t of evaluator.rowTerms(sourceId, rel.schema, rel.name)) {
      if (t.rows === null) return null;
      if (!terms.has(t.rows)) terms.set(t.rows, { role: t.role, resource: t.resource, rows: t.rows });
    }
  }
  if (terms.size === 0) return null;
  return { schema, table, terms: [...terms.values()].sort((a, b) => (a.rows < b.rows ? -1 : a.rows > b.rows ? 1 : 0)) };
}

/** True when two rules permit the same rows by construction (the same set of predicate texts). */
export function sameRowRule(a: RelationRowRule | null, b: RelationRowRule | null): boolean {
  if (a === null || b === null) return a === b;
  return a.terms.length === b.terms.length && a.terms.every((t, i) => t.rows === b.terms[i].rows);
}
