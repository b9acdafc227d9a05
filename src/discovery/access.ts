/**
 * Who may see which asset (issue 4, Build 4–6), decided IN SQL so that every filter applies before
 * LIMIT and ranking (a hidden asset can neither take a slot nor change a count).
 *
 * An asset of source S is visible to an identity for action A (discover, or request for
 * get_document) when ALL of:
 * 1. Role statements: some statement of a role granted on S allows A (or `*`) on the asset's
 *    category key (its category path joined with '/'), and no deny statement for A (or `*`) matches
 *    it. Matching is AccessEvaluator.decideOpaque's, exactly: resource `*` (or `*.*`) matches every
 *    asset; `a/b` matches category key "a/b" only; `a/b/*` matches "a/b" and everything below it
 *    ("a/b/c", …). An asset with no category is matched only by `*`.
 * 2. Audience: the asset has no audience, or one of its audiences is carried by a role granted on S
 *    (AccessEvaluator.audiences(S)).
 * 3. Policies (hide_documents rules applying to the identity, its roles and S): its document type is
 *    not hidden and its category path does not start with a hidden prefix (element-wise).
 * 4. Column decisions (issue 12): a row of a mapped SQL table is visible only when its relation is
 *    in the scope's `relations` (src/discovery/fields.ts: read allowed on the id column, not masked,
 *    no policy refusing a read of the relation), and the recorded lineage is still the one those
 *    decisions were made from; documents files have no relation.
 * 5. Row rules (issue 27 item 3): for a caller with a row rule on the source, a mapped row is
 *    visible only when the source says the row passes the caller's rule now (resolveScope's
 *    `rowFilter`: the permitted ids are read through the same row views as interlock_query).
 *
 * The caller may use A on S at all when some allow statement for A exists on S (checked before any
 * query; otherwise source_role_denied).
 */
import type { Policy } from '../../generated/policy-v1';
import type { AccessEvaluator } from '../governance/evaluator';
import { evaluatePolicies } from '../governance/policies';
import { decideRelations, lineageDigestSql, loadLineage, type RelationAccess, type RelationLineage } from './fields';
import { cleanText } from './metadata';
import { viewColumnExpander } from './view-columns';
import type { SourceCatalog } from '../sql/catalog-types';
import { catalogHierarchy, hierarchyChanged, overlayHierarchy, type LiveRelationTree, type RelationHierarchy } from '../sql/hierarchy';
import type { RelationName } from '../sql/catalog-types';
import { hierarchySensitive } from '../governance/hierarchy';

/** Everything the SQL needs to decide visibility for one identity on one source and one action. */
export interface DiscoveryScope {
  sourceId: string;
  action: 'discover' | 'request';
  /** Resources of allow statements for the action (or `*`) on the source. */
  allow: string[];
  /** Resources of deny statements for the action (or `*`) on the source. */
  deny: string[];
  /** Audiences carried by the identity's roles on the source. */
  audiences: string[];
  hiddenDocumentTypes: string[];
  hiddenCategoryPrefixes: string[][];
  /** Mapped relations the caller may see, with the state of each field (src/discovery/fields.ts). Absent or empty: no mapped row is visible. */
  relations?: RelationAccess[];
  /** Digest of the lineage `relations` were decided from (fields.ts lineageDigestSql); required for any mapped row to show. */
  lineageDigest?: string;
  /** Key of `hash` masks (the gateway's mask secret); without it `hash` masks as `full`. */
  maskSecret?: string;
  /**
   * Mapped relations whose row rules for the caller cannot be enforced now (the row filter answered
   * `unavailable`: the source's row views cannot be created, e.g. no writer role). Non-empty: the
   * discovery tools refuse the call `row_rules_unavailable`, as interlock_query refuses a read of
   * such a relation, rather than answer a result that silently leaves those rows out (task hnu42b).
   */
  rowRulesUnavailable?: string[];
}

/**
 * Which rows of one mapped relation a caller with row rules may see (issue 27 item 3), decided
 * against the source by the caller (src/tools/handlers/discover.ts `rowFilterFor`): `all` (no rule
 * applies), `none` (refused: a missing attribute, an unenforceable rule, the source unreachable),
 * `unavailable` (the rule applies but the source's row views cannot be created: interlock_query's
 * `row_rules_unavailable`; the relation shows nothing and the scope records it), or the id-column
 * texts of the permitted rows, as the indexer reads them (`(id)::text`).
 */
export type RowFilterAnswer = { kind: 'all' } | { kind: 'none' } | { kind: 'unavailable' } | { kind: 'ids'; ids: string[] };

/** What the row filter is asked: the mapped relation and the columns feeding its documents (the id first). */
export interface RowFilterRequest {
  relation: string;
  schema: string;
  table: string;
  idColumn: string;
  columns: string[];
}

/** Decides the rows of one mapped relation for the caller (see RowFilterAnswer). Must not throw for source failures (answer `none`). */
export type RowFilter = (r: RowFilterRequest) => Promise<RowFilterAnswer>;

/** Who is asking, for policy selection. */
export interface DiscoverySubject {
  identityId: string;
  identityName: string;
}

/**
 * The hide_documents restrictions that apply to the subject on `sourceId`. Only hide_documents
 * rules are consulted, so a time window or another refusing rule never hides what should be hidden.
 */
export function hiddenFor(policies: Policy[], subject: DiscoverySubject & { roles: string[]; sourceId: string }, action: 'discover' | 'request', now: Date): { hiddenDocumentTypes: string[]; hiddenCategoryPrefixes: string[][] } {
  const hide = policies.filter((p) => p.rule.type === 'hide_documents');
  const v = evaluatePolicies(hide, { ...subject }, { action, relations: [], writes: [], now });
  return v.ok ? { hiddenDocumentTypes: v.hiddenDocumentTypes, hiddenCategoryPrefixes: v.hiddenCategoryPrefixes } : { hiddenDocumentTypes: [], hiddenCategoryPrefixes: [] };
}

/**
 * The refusal a policy imposes on the action for this subject (time windows and the like), or null.
 * Returns {policy, reason} of the first refusing policy (policies are evaluated in name order).
 */
export function policyRefusal(policies: Policy[], subject: DiscoverySubject & { roles: string[]; sourceId: string }, action: 'discover' | 'request', now: Date): { policy: string; reason: string } | null {
  const v = evaluatePolicies(policies, { ...subject }, { action, relations: [], writes: [], now });
  return v.ok ? null : { policy: v.policy, reason: v.reason };
}

/** Builds the scope of `subject` on `sourceId` for `action` from the one evaluator and the active policies. */
export function buildScope(evaluator: AccessEvaluator, policies: Policy[], subject: DiscoverySubject, sourceId: string, action: 'discover' | 'request', now: Date): DiscoveryScope {
  const st = evaluator.statements(sourceId);
  const pick = (list: Array<{ action: string; resource: string }>) => [...new Set(list.filter((s) => s.action === action || s.action === '*').map((s) => s.resource))].sort();
  const hidden = hiddenFor(policies, { ...subject, roles: evaluator.roleNames(sourceId), sourceId }, action, now);
  return { sourceId, action, allow: pick(st.allow), deny: pick(st.deny), audiences: evaluator.audiences(sourceId), ...hidden };
}

/**
 * buildScope plus the column decisions on the source's mapped relations (issue 12): reads the
 * recorded lineage from the index (`db`, table asset_relations) and decides it with the same
 * evaluator and policies (decideRelations), following view columns to their base columns when the
 * source's `catalog` is given. What the discovery tools and get_document use.
 */
export async function resolveScope(
  db: { query: (sql: string, values?: unknown[]) => Promise<{ rows: unknown[] }> },
  evaluator: AccessEvaluator,
  policies: Policy[],
  subject: DiscoverySubject,
  sourceId: string,
  action: 'discover' | 'request',
  now: Date,
  maskSecret?: string,
  catalog?: SourceCatalog | null,
  liveTrees?: (relations: readonly RelationName[]) => Promise<Map<string, LiveRelationTree>>,
  rowFilter?: RowFilter,
): Promise<DiscoveryScope> {
  const scope = buildScope(evaluator, policies, subject, sourceId, action, now);
  if (!mayAct(scope)) return scope;
  const lineage = await loadLineage(db, sourceId);
  // Mapped views: the base columns behind each view column are decided too (view-columns.ts).
  // Mapped partitions and inheritance children follow their trees' rules (issue 22 item 1), as the
  // server has them now when `liveTrees` is given (a mapped table attached under a masked parent
  // after the scan, red team rt1 RT1-6); when the server cannot be asked, no mapped relation is visible.
  let hierarchy: RelationHierarchy | undefined = catalog ? catalogHierarchy(catalog) : undefined;
  let treeChanged = false;
  if (catalog && hierarchy && liveTrees && hierarchySensitive(evaluator, sourceId, policies, { ...subject, roles: evaluator.roleNames(sourceId), sourceId })) {
    const byName = new Map(catalog.relations.map((r) => [`${r.schema}.${r.name}`, { schema: r.schema, name: r.name }]));
    const wanted = new Map<string, RelationName>();
    const expand = viewColumnExpander(catalog);
    for (const l of lineage.relations) {
      const rel = byName.get(l.relation);
      if (!rel) continue;
      wanted.set(`${rel.schema}\u0000${rel.name}`, rel);
      // A mapped view's base relations too (red team rt1 RT1-7): their trees govern the view's columns.
      for (const column of new Set(Object.values(l.fields).flat())) {
        for (const b of expand(rel.schema, rel.name, column)?.sources ?? []) wanted.set(`${b.schema}\u0000${b.table}`, { schema: b.schema, name: b.table });
      }
    }
    const mapped = [...wanted.values()];
    try {
      const live = await liveTrees(mapped);
      if (hierarchyChanged(hierarchy, live)) {
        hierarchy = overlayHierarchy(hierarchy, live);
        treeChanged = true;
      }
    } catch {
      return { ...scope, relations: [] };
    }
  }
  const decided = decideRelations(evaluator, policies, subject, sourceId, now, lineage.relations, catalog ? viewColumnExpander(catalog) : undefined, hierarchy);
  const unavailable: string[] = [];
  const relations = await filterRows(decided, lineage.relations, sourceId, treeChanged, rowFilter, unavailable);
  return { ...scope, relations, ...(lineage.digest ? { lineageDigest: lineage.digest } : {}), ...(maskSecret ? { maskSecret } : {}), ...(unavailable.length ? { rowRulesUnavailable: unavailable.sort() } : {}) };
}

/**
 * Row rules on mapped rows (issue 27 item 3): each relation marked `rowCheck` is asked of `rowFilter`
 * (in parallel); `none`, a missing filter, or a tree changed since the scan (the rules are planned on
 * the catalogue's tree) drops it; `unavailable` drops it and adds it to `unavailable`; `ids` keeps
 * only those rows' documents (`permitted`, as asset ids).
 */
async function filterRows(decided: RelationAccess[], lineage: readonly RelationLineage[], sourceId: string, treeChanged: boolean, rowFilter: RowFilter | undefined, unavailable: string[]): Promise<RelationAccess[]> {
  const byRelation = new Map(lineage.map((l) => [l.relation, l]));
  const answers = await Promise.all(
    decided.map(async (r): Promise<RelationAccess | null> => {
      if (!r.rowCheck) return r;
      const l = byRelation.get(r.relation);
      const dot = r.relation.indexOf('.');
      if (!rowFilter || treeChanged || !l || l.fields.id.length !== 1 || dot <= 0) return null;
      const columns = [...new Set(Object.values(l.fields).flat())];
      const idColumn = l.fields.id[0];
      const a = await rowFilter({ relation: r.relation, schema: r.relation.slice(0, dot), table: r.relation.slice(dot + 1), idColumn, columns: [idColumn, ...columns.filter((c) => c !== idColumn)] });
      if (a.kind === 'all') return r;
      if (a.kind === 'none') return null;
      if (a.kind === 'unavailable') {
        unavailable.push(r.relation);
        return null;
      }
      // The asset id of a row, as the indexer makes it (tables.ts rowToAsset).
      const prefix = `${sourceId}:${r.relation}/`;
      return { ...r, permitted: a.ids.map((id) => prefix + cleanText(id).trim()) };
    }),
  );
  return answers.filter((r): r is RelationAccess => r !== null);
}

/** True when the scope lets the identity use its action on the source at all (some allow statement). */
export function mayAct(scope: DiscoveryScope): boolean {
  return scope.allow.length > 0;
}

/** Collects positional parameters for one statement: `p(value)` returns "$n". */
export class SqlParams {
  readonly values: unknown[] = [];
  /** Adds a value; returns its placeholder. */
  p(v: unknown): string {
    this.values.push(v);
    return `$${this.values.length}`;
  }
}

/** SQL for "some pattern matches the asset's category key" (decideOpaque's matching); 'TRUE'/'FALSE' for trivial sets. */
function patternSql(alias: string, patterns: string[], params: SqlParams): string {
  if (patterns.length === 0) return 'FALSE';
  if (patterns.some((p) => p === '*' || p === '*.*')) return 'TRUE';
  const prefixes = patterns.filter((p) => p.endsWith('/*')).map((p) => p.slice(0, -1));
  const exact = `${alias}.category_key = ANY(${params.p(patterns)}::text[])`;
  if (prefixes.length === 0) return `(${exact})`;
  return `(${exact} OR EXISTS (SELECT 1 FROM unnest(${params.p(prefixes)}::text[]) AS px(p) WHERE starts_with(${alias}.category_key || '/', px.p)))`;
}

/** SQL for "the asset's category path starts with `prefix`" (element-wise). */
export function categoryPrefixSql(alias: string, prefix: string[], params: SqlParams): string {
  return `(${alias}.category_path[1:${params.p(prefix.length)}::int] = ${params.p(prefix)}::text[])`;
}

/**
 * The visibility predicate of the module comment for rows of `assets` aliased `alias`, with its
 * values added to `params`. Always restricts to the scope's source.
 */
export function visibilitySql(alias: string, scope: DiscoveryScope, params: SqlParams): string {
  const parts = [`${alias}.source_id = ${params.p(scope.sourceId)}`, patternSql(alias, scope.allow, params)];
  const visible = (scope.relations ?? []).map((r) => r.relation);
  if (visible.length && scope.lineageDigest) {
    // The digest check is one uncorrelated scalar (evaluated once per statement, in its snapshot).
    const current = lineageDigestSql(`${params.p(scope.sourceId)}::text`);
    parts.push(`(${alias}.relation IS NULL OR (${alias}.relation = ANY(${params.p(visible)}::text[]) AND ${current} = ${params.p(scope.lineageDigest)}))`);
    // Row rules (issue 27 item 3): a ruled relation's documents only for its permitted rows.
    for (const r of scope.relations ?? []) {
      if (r.permitted) parts.push(`(${alias}.relation IS DISTINCT FROM ${params.p(r.relation)} OR ${alias}.asset_id = ANY(${params.p(r.permitted)}::text[]))`);
    }
  } else parts.push(`${alias}.relation IS NULL`);
  if (scope.deny.length) parts.push(`NOT ${patternSql(alias, scope.deny, params)}`);
  parts.push(`(cardinality(${alias}.audience) = 0 OR ${alias}.audience && ${params.p(scope.audiences)}::text[])`);
  if (scope.hiddenDocumentTypes.length) parts.push(`NOT (${alias}.document_type = ANY(${params.p(scope.hiddenDocumentTypes)}::text[]))`);
  for (const prefix of scope.hiddenCategoryPrefixes) if (prefix.length) parts.push(`NOT ${categoryPrefixSql(alias, prefix, params)}`);
  return parts.join(' AND ');
}
