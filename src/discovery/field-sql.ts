/**
 * The SQL side of column decisions on indexed fields (issue 12; states decided in
 * src/discovery/fields.ts): which vector a row is searched with, and which fields of a row may be
 * filtered on or used to relate documents. Everything here goes into WHERE clauses, so a
 * restricted field is excluded before ranking and LIMIT; values travel as parameters.
 *
 * Searchable vector of a row: `tsv` (title A + body B) for documents files and for mapped rows
 * whose title and body are both shown; `tsv_title` when only the title is shown, `tsv_body` when
 * only the body is, none (NULL: matches nothing) when neither is.
 */
import { SqlParams, type DiscoveryScope } from './access';
import { restrictedRelations } from './fields';
import type { IndexedField } from './types';

function searchGroups(scope: DiscoveryScope): { restricted: string[]; titleOnly: string[]; bodyOnly: string[]; none: string[] } {
  const rel = scope.relations ?? [];
  const t = (r: (typeof rel)[number]) => r.fields.title === 'show';
  const b = (r: (typeof rel)[number]) => r.fields.body === 'show';
  const restricted = rel.filter((r) => !t(r) || !b(r));
  return {
    restricted: restricted.map((r) => r.relation),
    titleOnly: restricted.filter((r) => t(r)).map((r) => r.relation),
    bodyOnly: restricted.filter((r) => b(r)).map((r) => r.relation),
    none: restricted.filter((r) => !t(r) && !b(r)).map((r) => r.relation),
  };
}

/** SQL: "the row's relation is not one of `relations`" (documents files never are); 'TRUE' for an empty list. */
function notIn(alias: string, relations: string[], params: SqlParams): string {
  return relations.length ? `(${alias}.relation IS NULL OR NOT ${alias}.relation = ANY(${params.p(relations)}::text[]))` : 'TRUE';
}

/** SQL: "`field` of the row is shown to the scope's caller", so it may be filtered on or used to relate ('TRUE' when no visible relation restricts it). */
export function fieldShownSql(alias: string, scope: DiscoveryScope, field: IndexedField, params: SqlParams): string {
  return notIn(alias, restrictedRelations(scope.relations ?? [], field), params);
}

/** SQL: the row's searchable vector for the scope's caller (module comment), for ranking and term extraction. */
export function vectorSql(alias: string, scope: DiscoveryScope, params: SqlParams): string {
  const g = searchGroups(scope);
  if (g.restricted.length === 0) return `${alias}.tsv`;
  const when = (list: string[], v: string) => (list.length ? ` WHEN ${alias}.relation = ANY(${params.p(list)}::text[]) THEN ${v}` : '');
  return `(CASE${when(g.none, 'NULL::tsvector')}${when(g.titleOnly, `${alias}.tsv_title`)}${when(g.bodyOnly, `${alias}.tsv_body`)} ELSE ${alias}.tsv END)`;
}

/** SQL: "the row's searchable vector matches tsquery `q`", written so each branch can use its GIN index. */
export function matchSql(alias: string, scope: DiscoveryScope, q: string, params: SqlParams): string {
  const g = searchGroups(scope);
  if (g.restricted.length === 0) return `${alias}.tsv @@ ${q}`;
  const parts = [`(${notIn(alias, g.restricted, params)} AND ${alias}.tsv @@ ${q})`];
  if (g.titleOnly.length) parts.push(`(${alias}.relation = ANY(${params.p(g.titleOnly)}::text[]) AND ${alias}.tsv_title @@ ${q})`);
  if (g.bodyOnly.length) parts.push(`(${alias}.relation = ANY(${params.p(g.bodyOnly)}::text[]) AND ${alias}.tsv_body @@ ${q})`);
  return `(${parts.join(' OR ')})`;
}
