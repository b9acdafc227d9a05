/**
 * Which row rule governs a relation for one caller (issue 27, docs/row-rules.md), decided from the
 * caller's source roles by the one evaluator (src/governance/evaluator.ts `rowTerms`):
 * - the read allows (read or *) covering the relation or any of its ancestors in the partition and
 *   inheritance tree count, as an allow on an ancestor grants the relation (issue 22);
 * - an allow without `rows` grants every row (of the columns it covers: a column allow lifts the
 *   rule for its own columns only, when the statement's used columns are given);
 * - otherwise the relation is ruled and its permitted rows are those matching any term (OR), for
 *   every used column (AND).
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

/**
 * A relation's rule for one caller: its permitted rows are those matching, for EVERY group, SOME
 * term of the group (an AND of ORs). `terms` lists every term of every group once, sorted (for
 * display and the audit). A rule decided without columns has one group, all its terms.
 */
export interface RelationRowRule {
  schema: string;
  table: string;
  terms: RowRuleTerm[];
  /** The groups (AND of ORs), each sorted by text, deduplicated, in a stable order. */
  groups: RowRuleTerm[][];
}

const byText = (a: RowRuleTerm, b: RowRuleTerm): number => (a.rows < b.rows ? -1 : a.rows > b.rows ? 1 : 0);

/**
 * The terms of the read allows covering `schema.table` (or `column` of it) or any ancestor, as
 * `relationRowRule` counts them: null when one has no `rows` (every row), [] when none covers it.
 */
function coveringTerms(evaluator: AccessEvaluator, sourceId: string, schema: string, table: string, hierarchy: RelationHierarchy, column?: string): RowRuleTerm[] | null {
  const terms = new Map<string, RowRuleTerm>();
  for (const rel of [{ schema, name: table }, ...hierarchy.ancestors(schema, table)]) {
    for (const t of evaluator.rowTerms(sourceId, rel.schema, rel.name, 'read', column)) {
      if (t.rows === null) return null;
      if (!terms.has(t.rows)) terms.set(t.rows, { role: t.role, resource: t.resource, rows: t.rows });
    }
  }
  return [...terms.values()].sort(byText);
}

/**
 * The rule governing `schema.table` for the caller on `sourceId`, or null when the caller may read
 * every row of it or no allow covers it (step 3 refuses then). See docs/row-rules.md "Column allows".
 *
 * - `columns` absent or empty (a read using no column, `count(*)`; describe_access; discovery): the
 *   OR of every covering allow, a table, wildcard or column allow; one without `rows` grants every row.
 * - `columns` given: the columns the statement uses of the relation (or, behind a view, all of them).
 *   For each column, the OR of the allows covering it (one without `rows`: that column is granted on
 *   every row); the rule is the AND of these over the used columns, so a row is returned only when
 *   every column used of it is granted on it. A column allow without `rows` therefore lifts the rule
 *   for its own column only (rt27 finding 3). Columns no allow covers add nothing; when none is
 *   covered, the table-level rule applies.
 */
export function relationRowRule(evaluator: AccessEvaluator, sourceId: string, schema: string, table: string, hierarchy: RelationHierarchy, columns?: readonly string[]): RelationRowRule | null {
  const whole = (): RelationRowRule | null => {
    const terms = coveringTerms(evaluator, sourceId, schema, table, hierarchy);
    return terms === null || terms.length === 0 ? null : { schema, table, terms, groups: [terms] };
  };
  if (!columns || columns.length === 0) return whole();
  const groups = new Map<string, RowRuleTerm[]>();
  let covered = false;
  for (const column of columns) {
    const terms = coveringTerms(evaluator, sourceId, schema, table, hierarchy, column);
    if (terms === null) {
      covered = true;
      continue;
    }
    if (terms.length === 0) continue;
    covered = true;
    groups.set(JSON.stringify(terms.map((t) => t.rows)), terms);
  }
  if (!covered) return whole();
  if (groups.size === 0) return null;
  const sorted = [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, g]) => g);
  const all = new Map<string, RowRuleTerm>();
  for (const g of sorted) for (const t of g) if (!all.has(t.rows)) all.set(t.rows, t);
  return { schema, table, terms: [...all.values()].sort(byText), groups: sorted };
}

/** True when two rules permit the same rows by construction (the same groups of predicate texts). */
export function sameRowRule(a: RelationRowRule | null, b: RelationRowRule | null): boolean {
  if (a === null || b === null) return a === b;
  return a.groups.length === b.groups.length && a.groups.every((g, i) => g.length === b.groups[i].length && g.every((t, j) => t.rows === b.groups[i][j].rows));
}
