/**
 * Column decisions on indexed fields (issue 12, item 2: "Discovery honours the same decisions as
 * interlock_query"). A row of a mapped SQL table is indexed from columns of that table
 * (AssetOrigin; table asset_relations). For one caller on one source, every mapped relation and
 * every field of it gets a state, decided with the SAME evaluator and policies interlock_query uses:
 *
 * - The relation is visible only when a read of it would pass steps 3 and 4 of interlock_query:
 *   the id column (it is part of the asset id) is allowed for `read` and not masked, and the
 *   policies applying to the caller for a read of the relation refuse nothing (deny_relations,
 *   time windows). Otherwise none of its documents exist for the caller. A relation the index has
 *   no lineage for is never visible (fail closed).
 * - A field is `show` when every column feeding it is allowed for `read` and unmasked; `hide` when
 *   one is not allowed (deny or no grant) or masked with method `null`; otherwise the strongest mask
 *   method of its columns (`full`, `hash`, `partial`).
 * - Only `show` fields are searched, filtered on, used to relate documents or highlighted; so a
 *   search or a filter for an exact value of a hidden or masked column confirms nothing. A masked
 *   field is shown masked with interlock_query's masking (src/sql/redaction.ts applyMask); a
 *   hidden one is shown empty ('' for text, [] for lists, null for the timestamp).
 *
 * Governance uses of the category path and audience (role patterns, audiences, hide_documents) are
 * not restricted by these states: they decide visibility, never show a value.
 */
import type { Policy } from '../../generated/policy-v1';
import type { AccessEvaluator } from '../governance/evaluator';
import { evaluatePolicies, policyRowRestrictions, unprovableMaskMethod } from '../governance/policies';
import { decideInHierarchy, governingRelations, maskInHierarchy } from '../governance/hierarchy';
import { relationRowRule } from '../governance/row-rules';
import { NO_HIERARCHY, type RelationHierarchy } from '../sql/hierarchy';
import { applyMask, FULL_MASK, type MaskMethod } from '../sql/redaction';
import type { AssetEntity, FieldColumns, IndexedField } from './types';
import type { ExpandColumn } from './view-columns';
import { INDEXED_FIELDS } from './types';

/** How one field of one relation is presented to one caller: shown, hidden, or shown masked with a method. */
export type FieldState = 'show' | 'hide' | Exclude<MaskMethod, 'null'>;

/** What one caller may see of one visible mapped relation. */
export interface RelationAccess {
  /** "schema.table". */
  relation: string;
  fields: Record<IndexedField, FieldState>;
  /**
   * True when the caller has a row rule on the source (issue 27): which rows of the relation it may
   * see is decided against the source (access.ts `resolveScope`'s row filter) before any is shown.
   */
  rowCheck?: true;
  /** After the row filter: the asset ids of the rows the caller may see (absent: every row). */
  permitted?: string[];
}

/** The lineage of one mapped relation as the index records it (table asset_relations). */
export interface RelationLineage {
  relation: string;
  fields: FieldColumns;
}

/** Anything with a pg-style query method. */
type Queryable = { query: (sql: string, values?: unknown[]) => Promise<{ rows: unknown[] }> };

/**
 * SQL (one scalar) digesting the recorded lineage of the source whose id is the placeholder `src`:
 * md5 of every relation and its fields in relation order, NULL when there is none. Statements
 * compare it with the digest the caller's decisions were made from (visibilitySql), so a re-index
 * that changes the lineage between the decision and the search shows no mapped row (fail closed).
 */
export function lineageDigestSql(src: string): string {
  return `(SELECT md5(string_agg(l.relation || ':' || l.fields::text, ',' ORDER BY l.relation)) FROM asset_relations l WHERE l.source_id = ${src})`;
}

/** The recorded lineage of every mapped relation of a source (relation order) and its digest (lineageDigestSql), read in one statement. */
export async function loadLineage(db: Queryable, sourceId: string): Promise<{ relations: RelationLineage[]; digest: string | null }> {
  const r = await db.query(`SELECT relation, fields, ${lineageDigestSql('$1')} AS digest FROM asset_relations WHERE source_id = $1 ORDER BY relation`, [sourceId]);
  const rows = r.rows as Array<{ relation: string; fields: Partial<FieldColumns>; digest: string }>;
  return {
    digest: rows.length ? rows[0].digest : null,
    relations: rows.map((x) => ({
      relation: x.relation,
      fields: Object.fromEntries(INDEXED_FIELDS.map((f) => [f, Array.isArray(x.fields[f]) ? x.fields[f]!.map(String) : []])) as FieldColumns,
    })),
  };
}

const RANK: Record<FieldState, number> = { show: 0, partial: 1, hash: 2, full: 3, hide: 4 };

/**
 * Decides, for one caller (its evaluator, the active policies and the policy subject) on
 * `sourceId` at `now`, the visible relations and their field states (module comment). Pure.
 * Relations left out of the answer are invisible. `hierarchy` (the source catalogue's partition and
 * inheritance trees) makes a mapped partition or child follow its ancestors' denies, masks and
 * `deny_relations`, as interlock_query does (issue 22 item 1).
 */
export function decideRelations(
  evaluator: AccessEvaluator,
  policies: Policy[],
  subject: { identityId: string; identityName: string },
  sourceId: string,
  now: Date,
  lineage: RelationLineage[],
  expand?: ExpandColumn,
  hierarchy: RelationHierarchy = NO_HIERARCHY,
): RelationAccess[] {
  const out: RelationAccess[] = [];
  const roles = evaluator.roleNames(sourceId);
  // A view column carries its base columns' values: their denies and masks apply too, as in
  // interlock_query (src/sql/views.ts). Unprovable lineage fails closed: hidden for a caller with any
  // read deny on the source, masked in full for a caller with any mask.
  const anyDeny = evaluator.hasReadDeny(sourceId);
  // A policy's restrict_rows predicates (issue 27) rule tables too: their mapped rows are withheld alike.
  const policyRows = policyRowRestrictions(policies, { ...subject, roles, sourceId });
  const rowRules = evaluator.hasRowRules(sourceId) || policyRows.any;
  for (const { relation, fields } of lineage) {
    const dot = relation.indexOf('.');
    if (dot <= 0) continue;
    const schema = relation.slice(0, dot);
    const table = relation.slice(dot + 1);
    const verdict = evaluatePolicies(policies, { ...subject, roles, sourceId }, { action: 'read', relations: [{ schema, table, action: 'read', governing: governingRelations(schema, table, hierarchy).slice(1) }], writes: [], now });
    if (!verdict.ok) continue;
    const ownState = (column: string): FieldState => {
      if (decideInHierarchy(evaluator, sourceId, 'read', { schema, table, column }, hierarchy) !== 'allow') return 'hide';
      const m = maskInHierarchy(verdict.maskPatterns, schema, table, column, hierarchy);
      return m === null ? 'show' : m === 'null' ? 'hide' : m;
    };
    const columnState = (column: string): FieldState => {
      let st = ownState(column);
      const e = expand?.(schema, table, column);
      if (!e) return st;
      for (const b of e.sources) {
        // Base columns need no read grant (the view's is enough), but an explicit deny or a mask on them
        // applies. A generated column's inputs must be readable (rt42 G1, as interlock_query decides).
        const d = decideInHierarchy(evaluator, sourceId, 'read', b, hierarchy);
        if (d === 'deny' || (e.generated && d !== 'allow')) return 'hide';
        // As interlock_query: a passthrough view column keeps its base column's method, a derived one is masked in full.
        const m = maskInHierarchy(verdict.maskPatterns, b.schema, b.table, b.column, hierarchy);
        const bs: FieldState = m === null ? 'show' : m === 'null' ? 'hide' : e.passthrough ? m : 'full';
        if (RANK[bs] > RANK[st]) st = bs;
      }
      if (e.unprovable) {
        if (anyDeny) return 'hide';
        const um = unprovableMaskMethod(verdict.maskPatterns);
        const us: FieldState = um === null ? 'show' : um === 'null' ? 'hide' : um;
        if (RANK[us] > RANK[st]) st = us;
      }
      return st;
    };
    const states = {} as Record<IndexedField, FieldState>;
    for (const f of INDEXED_FIELDS) {
      let st: FieldState = 'show';
      for (const c of fields[f]) {
        const cs = columnState(c);
        if (RANK[cs] > RANK[st]) st = cs;
      }
      states[f] = st;
    }
    if (fields.id.length === 0 || states.id !== 'show') continue;
    // Row rules (issue 27): a ruled table (over the columns its documents show) or a view (its
    // lineage may reach one) has its rows filtered against the source by resolveScope (access.ts).
    const columns = [...new Set(INDEXED_FIELDS.flatMap((f) => fields[f]))];
    const check = rowRules && (relationRowRule(evaluator, sourceId, schema, table, hierarchy, policyRows, 'read', columns) !== null || fields.id.some((c) => expand?.(schema, table, c)));
    out.push(check ? { relation, fields: states, rowCheck: true } : { relation, fields: states });
  }
  return out;
}

/** The relations whose `field` is not `show` (searching, filtering and relating on it are off). */
export function restrictedRelations(relations: RelationAccess[], field: IndexedField): string[] {
  return relations.filter((r) => r.fields[field] !== 'show').map((r) => r.relation);
}

/** Presents a text field (title, body, snippet, document type): the value, '' when hidden, or the value masked. */
export function presentText(value: string, state: FieldState, secret?: string): string {
  if (state === 'show') return value;
  if (state === 'hide') return '';
  return String(applyMask(value, state, secret));
}

/** Presents a list of strings (category path): the list, [] when hidden, or [FULL_MASK] when masked (a masked list is shown as one opaque value, as interlock_query masks an array). */
export function presentList(value: string[], state: FieldState): string[] {
  if (state === 'show') return value;
  return state === 'hide' || value.length === 0 ? [] : [FULL_MASK];
}

/** Presents a timestamp: shown, or null (a masked timestamp cannot keep its type). */
export function presentTime(value: string | null, state: FieldState): string | null {
  return state === 'show' ? value : null;
}

/** Presents entities or links: shown, or [] (masked structured values are not shown). */
export function presentItems<T extends AssetEntity | string>(value: T[], state: FieldState): T[] {
  return state === 'show' ? value : [];
}

/** The access entry of `relation` (null for documents files, which have no lineage); throws for a relation that is not visible (the SQL filters those). */
export function accessOf(relations: RelationAccess[] | undefined, relation: string | null): RelationAccess | null {
  if (relation === null) return null;
  const a = (relations ?? []).find((r) => r.relation === relation);
  if (!a) throw new Error('an invisible relation reached presentation');
  return a;
}

/** The state of `field` for a row of `relation` (documents files: always show). */
export function stateOf(access: RelationAccess | null, field: IndexedField): FieldState {
  return access ? access.fields[field] : 'show';
}
