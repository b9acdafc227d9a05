/**
 * Which row rule governs a relation for one caller (issue 27, docs/row-rules.md), decided from the
 * caller's source roles by the one evaluator (src/governance/evaluator.ts `rowTerms`) and the
 * policies' `restrict_rows` predicates (src/governance/policies.ts `policyRowRestrictions`):
 * - the allows for the action (read or *; write or * for a write's target) covering the relation
 *   or any of its ancestors in the partition and inheritance tree count, as an allow on an
 *   ancestor grants the relation (issue 22); for a column inherited from some ancestors (a child
 *   of several parents), only theirs (rt48b B7);
 * - an allow without `rows` grants every row; otherwise the permitted rows are those matching any
 *   term (OR); with the statement's used columns given, a column allow covers its own columns only:
 *   the rule is then the AND over the used columns of the OR over the allows covering each (rt27
 *   finding 3; docs/row-rules.md "Column allows");
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
 * With `groups` (only when the used columns are covered by different allows): the roles' part is
 * the AND of the groups, each an OR of its terms, and `terms` lists every term of them once.
 */
export interface RelationRowRule {
  schema: string;
  table: string;
  terms: RowRuleTerm[];
  restrictions: RowRuleRestriction[];
  groups?: RowRuleTerm[][];
}

/** The roles' part of a rule as an AND of ORs ([] : every row). */
export function ruleGroups(rule: RelationRowRule): RowRuleTerm[][] {
  return rule.groups ?? (rule.terms.length ? [rule.terms] : []);
}

const byRows = (a: { rows: string }, b: { rows: string }) => (a.rows < b.rows ? -1 : a.rows > b.rows ? 1 : 0);

/**
 * The terms of the allows for `action` covering `schema.table` (or `column` of it) or any ancestor:
 * `every` when one has no `rows`; `covered` false when none covers it.
 */
function coveringTerms(evaluator: AccessEvaluator, sourceId: string, schema: string, table: string, hierarchy: RelationHierarchy, action: 'read' | 'write', column?: string): { covered: boolean; every: boolean; terms: RowRuleTerm[] } {
  const terms = new Map<string, RowRuleTerm>();
  let every = false;
  let covered = false;
  const ancestors = hierarchy.ancestors(schema, table);
  // A column some ancestor has comes from the ancestors that have it: another parent's allow (a child
  // of several parents) does not cover it (red team rt48b B7: pb's allow without rows freed pa's ruled
  // column on pc's rows). A column no ancestor has (the child's own) is covered by every ancestor's
  // allow, as is any column of an ancestor whose columns are not known.
  const has = (rel: { schema: string; name: string }) => hierarchy.columns?.(rel.schema, rel.name)?.includes(column!);
  const inherited = column !== undefined && ancestors.some((a) => has(a) === true);
  for (const rel of [{ schema, name: table }, ...ancestors.filter((a) => !inherited || has(a) !== false)]) {
    for (const t of evaluator.rowTerms(sourceId, rel.schema, rel.name, action, column)) {
      covered = true;
      if (t.rows === null) every = true;
      else if (!terms.has(t.rows)) terms.set(t.rows, { role: t.role, resource: t.resource, rows: t.rows });
    }
  }
  return { covered, every, terms: every ? [] : [...terms.values()].sort(byRows) };
}

/**
 * The rule governing `action` (default read) on `schema.table` for the caller on `sourceId`, or
 * null when the caller may reach every row of it (some covering allow has no `rows` and no policy
 * restricts it) or no allow covers it (step 3 refuses then). `policies` are the caller's
 * applicable `restrict_rows` predicates (default none).
 *
 * `columns`: the columns the statement uses of the relation (behind a view: all of them). Absent
 * or empty (a read using no column, `count(*)`; describe_access; discovery without columns): every
 * covering allow counts, a column allow included. Given: for each used column, the OR of the allows
 * covering it (one without `rows`: that column on every row); the roles' part is the AND of these
 * over the used columns, so a row is returned only when every used column is granted on it
 * (rt27 finding 3). Columns no allow covers add nothing; when none is covered, the table-level
 * rule applies. Policy restrictions are ANDed either way.
 */
export function relationRowRule(
  evaluator: AccessEvaluator,
  sourceId: string,
  schema: string,
  table: string,
  hierarchy: RelationHierarchy,
  policies: PolicyRowRestrictions = NO_POLICY_ROW_RESTRICTIONS,
  action: 'read' | 'write' = 'read',
  columns?: readonly string[],
): RelationRowRule | null {
  const whole = coveringTerms(evaluator, sourceId, schema, table, hierarchy, action);
  if (!whole.covered) return null;
  const restrictions = new Map<string, RowRuleRestriction>();
  for (const rel of [{ schema, name: table }, ...hierarchy.ancestors(schema, table)]) {
    if (policies.any) for (const p of policies.of(rel.schema, rel.name, action)) if (!restrictions.has(p.rows)) restrictions.set(p.rows, p);
  }
  let groups: RowRuleTerm[][] = whole.terms.length ? [whole.terms] : [];
  if (columns && columns.length > 0) {
    const byColumn = new Map<string, RowRuleTerm[]>();
    let any = false;
    for (const column of columns) {
      const c = coveringTerms(evaluator, sourceId, schema, table, hierarchy, action, column);
      if (!c.covered) continue;
      any = true;
      if (!c.every) byColumn.set(JSON.stringify(c.terms.map((t) => t.rows)), c.terms);
    }
    if (any) groups = [...byColumn.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, g]) => g);
  }
  if (groups.length === 0 && restrictions.size === 0) return null;
  const all = new Map<string, RowRuleTerm>();
  for (const g of groups) for (const t of g) if (!all.has(t.rows)) all.set(t.rows, t);
  return { schema, table, terms: [...all.values()].sort(byRows), restrictions: [...restrictions.values()].sort(byRows), ...(groups.length > 1 ? { groups } : {}) };
}

/** True when two rules permit the same rows by construction (the same sets of predicate texts). */
export function sameRowRule(a: RelationRowRule | null, b: RelationRowRule | null): boolean {
  if (a === null || b === null) return a === b;
  const same = (x: Array<{ rows: string }>, y: Array<{ rows: string }>) => x.length === y.length && x.every((t, i) => t.rows === y[i].rows);
  const ga = ruleGroups(a);
  const gb = ruleGroups(b);
  return ga.length === gb.length && ga.every((g, i) => same(g, gb[i])) && same(a.restrictions, b.restrictions);
}

/**
 * The rule's text as operators wrote it (with identity.<attr> names, never values): the terms
 * ORed (each group's, the groups ANDed), then each restriction ANDed, e.g. `((a) OR (b)) AND (c)`.
 * Used by describe_access.
 */
export function rowRuleText(rule: RelationRowRule): string {
  const or = (g: RowRuleTerm[]): string => (g.length === 1 ? g[0].rows : g.map((t) => `(${t.rows})`).join(' OR '));
  const parts = [...ruleGroups(rule).map(or), ...rule.restrictions.map((r) => r.rows)];
  return parts.length === 1 ? parts[0] : parts.map((p) => `(${p})`).join(' AND ');
}
