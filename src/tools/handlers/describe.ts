/**
 * interlock_describe_access and interlock_describe_source (contract sections of the same names).
 * Both read the AccessEvaluator that enforces requests, so a description cannot drift from the
 * decision; both name nothing the caller cannot read (describe_access) or describe (describe_source:
 * what a read or write would allow, or an explicit describe allow names; AccessEvaluator.decide).
 */
import { ColumnTypes } from '../../sql/column-types';
import type { Policy } from '../../../generated/policy-v1';
import { AccessEvaluator } from '../../governance/evaluator';
import { evaluatePolicies, policyRowRestrictions, type PolicyRowRestrictions } from '../../governance/policies';
import { decideInHierarchy, governingRelations, maskInHierarchy } from '../../governance/hierarchy';
import { catalogHierarchy, relationKey, type RelationHierarchy } from '../../sql/hierarchy';
import type { ColumnMask } from '../../governance/policies';
import type { GovernanceStore, MaybePromise, SourceRecord } from '../../governance/store';
import type { CatalogKey as CatalogKeyDef, CatalogColumn, CatalogRelation, SourceCatalog } from '../../sql/catalog-types';
import type { CatalogKey, CatalogRow } from '../../../generated/mcp-tools-v1';
import type { ToolCallContext, ToolHandler, ToolOutcome } from '../types';
import { sourceStep } from '../../pipeline/02-source';
import { rateLimitStep, type RateLimiter } from '../../pipeline/05-rate-limit';
import { relationRowRule, rowRuleText } from '../../governance/row-rules';
import { cachedPredicate } from '../../pipeline/row-rules';
import { isViewRelation, viewLineage } from '../../sql/view-lineage';
import { prepareCatalog, relKey } from '../../sql/prepared-catalog';
import { analyzeSql, type SqlAnalysis } from '../../sql/analyze';
import { viewLineageDenied } from '../../pipeline/03-authorize';

/** Most tables listed per source in describe_access (contract: "At most 200 tables are listed per source"). */
export const DESCRIBE_ACCESS_TABLE_LIMIT = 200;

/** Dependencies of the describe tools. */
export interface DescribeDeps {
  store: GovernanceStore;
  rateLimiter: RateLimiter;
  catalog(source: SourceRecord): MaybePromise<SourceCatalog | null>;
  now?: () => Date;
}

function text(value: unknown, structured?: Record<string, unknown>): ToolOutcome {
  return { kind: 'result', content: [{ type: 'text', text: JSON.stringify(value) }], structuredContent: structured ?? (value as Record<string, unknown>) };
}

/** The policy that would refuse `action` on the table (or, issue 22, on its ancestors or descendants) for this subject, if any. */
function refusingPolicy(policies: Policy[], subject: { identityId: string; identityName: string; roles: string[]; sourceId: string }, schema: string, table: string, now: Date, h: RelationHierarchy, action: 'read' | 'describe' = 'read') {
  const v = evaluatePolicies(policies, subject, { action, relations: [{ schema, table, action, governing: governingRelations(schema, table, h).slice(1) }], writes: [], now });
  return v.ok ? null : { refused: true, rule: v.policy, reason: v.reason };
}

const viewColumnReads = new WeakMap<SourceCatalog, Map<string, Extract<SqlAnalysis, { ok: true }> | null>>();

/** The key of a view column in viewColumnReads' per-catalogue map. */
function viewColumnKey(schema: string, view: string, column: string): string {
  return `${relKey(schema, view)}\u0000${column}`;
}

/**
 * The analysis of `SELECT "column" FROM "schema"."view"` against `catalog`, made once per
 * catalogue snapshot (the store caches the snapshot object); null when the analysis fails.
 */
function viewColumnRead(catalog: SourceCatalog, schema: string, view: string, column: string): Extract<SqlAnalysis, { ok: true }> | null {
  let memo = viewColumnReads.get(catalog);
  if (!memo) viewColumnReads.set(catalog, (memo = new Map()));
  const key = viewColumnKey(schema, view, column);
  let hit = memo.get(key);
  if (hit === undefined) {
    const ident = (x: string) => `"${x.replace(/"/g, '""')}"`;
    const a = analyzeSql(`SELECT ${ident(column)} FROM ${ident(schema)}.${ident(view)}`, prepareCatalog(catalog));
    memo.set(key, (hit = a.ok ? a : null));
  }
  return hit;
}

/**
 * View columns whose one-column read describe analyses in a row before it yields the event loop
 * (warmViewColumnReads; at ~0.17 ms per view column, a few milliseconds per chunk).
 */
export const VIEW_COLUMN_CHUNK = 32;

/**
 * Analyses the one-column read of every view column of `catalog` not yet analysed for this
 * snapshot (viewColumnRead's per-catalogue cache), yielding the event loop (setImmediate) after
 * each `chunk` analyses, so the first describe after a new snapshot cannot hold the loop for the
 * whole catalogue (red team rt41a: 2,000 views took 1.5 s in one turn). The describe decisions that
 * follow read the cache and decide exactly as before. Returns how many reads it analysed (0 when the
 * snapshot is warm). Never rejects on a bad view: a read that cannot be analysed is cached as null
 * (hidden, fail closed). Task hpriv item 2.
 */
export async function warmViewColumnReads(catalog: SourceCatalog, chunk: number = VIEW_COLUMN_CHUNK): Promise<number> {
  let analysed = 0;
  for (const rel of catalog.relations) {
    if (!isViewRelation(catalog, rel.schema, rel.name)) continue;
    for (const c of rel.columns) {
      if (viewColumnReads.get(catalog)?.has(viewColumnKey(rel.schema, rel.name, c.name))) continue;
      viewColumnRead(catalog, rel.schema, rel.name, c.name);
      if (++analysed % chunk === 0) await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }
  return analysed;
}

/** Before describe decides `sourceId`'s view columns through their lineage (callers with a read deny only), warms their analyses without holding the loop (warmViewColumnReads). */
async function readyViewColumns(evaluator: AccessEvaluator, sourceId: string, catalog: SourceCatalog | null): Promise<void> {
  if (catalog && evaluator.hasReadDeny(sourceId)) await warmViewColumnReads(catalog);
}

/**
 * True when column `column` of view (or materialized view) `schema.view` is hidden from both
 * describe tools although the view's own name allows it (red team rt40): a read of it is refused
 * through its lineage, as interlock_query decides it (viewLineageDenied, src/pipeline/03-authorize.ts:
 * a read deny on a base column or relation behind it, or unprovable lineage under any read deny),
 * or its one-column read cannot be analysed while the caller has a read deny (fail closed). False
 * for a relation that is not a view, and for a caller with no read deny on the source (no lineage
 * can be denied then). Contract: interlock_describe_access, "nothing the caller cannot read is named".
 */
export function viewColumnDenied(evaluator: AccessEvaluator, sourceId: string, catalog: SourceCatalog, h: RelationHierarchy, schema: string, view: string, column: string): boolean {
  if (!evaluator.hasReadDeny(sourceId) || !isViewRelation(catalog, schema, view)) return false;
  const a = viewColumnRead(catalog, schema, view, column);
  return a === null || viewLineageDenied(evaluator, sourceId, a, catalog, h);
}

/**
 * The input columns of a stored generated column of `schema.table` (CatalogColumn.generatedFrom;
 * every other column of the table when the snapshot does not record them, as the analyser takes
 * them), or null for any other column. Task hnu43 item 1: reading a generated column reads its
 * inputs (red team rt42 G1), so both describe tools decide it through them.
 */
export function generatedInputs(catalog: SourceCatalog, schema: string, table: string, column: string): readonly string[] | null {
  return prepareCatalog(catalog).relations.get(relKey(schema, table))?.generatedInputs?.get(column) ?? null;
}

/**
 * How describe treats a stored generated column (task hnu43 item 1), as interlock_query decides a
 * read of it: `hidden` when the column itself or one of its inputs is refused (describe_access: an
 * input whose read is not allowed; describe_source: an input whose read a deny refuses, or one the
 * caller may not describe), `masked` when an input is masked (a read answers it masked, `full`),
 * and `expression` true only when every input may be read unmasked (else describe_source shows
 * `column_default` null, so the generation expression never names what the caller cannot read).
 * `mask` is the caller's read mask patterns (evaluatePolicies' maskPatterns).
 */
export function generatedColumnView(evaluator: AccessEvaluator, sourceId: string, catalog: SourceCatalog, h: RelationHierarchy, mask: Array<{ parts: string[]; method: ColumnMask['method'] }>, schema: string, table: string, column: string, action: 'read' | 'describe'): { hidden: boolean; masked: boolean; expression: boolean } {
  const inputs = generatedInputs(catalog, schema, table, column);
  if (inputs === null) return { hidden: false, masked: false, expression: true };
  let hidden = false;
  let masked = false;
  let expression = true;
  for (const i of inputs) {
    const c = { schema, table, column: i };
    const read = decideInHierarchy(evaluator, sourceId, 'read', c, h);
    if (action === 'read' ? read !== 'allow' : read === 'deny' || decideInHierarchy(evaluator, sourceId, 'describe', c, h) !== 'allow') hidden = true;
    if (maskInHierarchy(mask, schema, table, i, h) !== null) masked = true;
    if (read !== 'allow') expression = false;
  }
  // A generated column cannot be written: a read deny on it hides it even where a write allow would
  // describe it, unless a describe allow names it (AccessEvaluator.describesExplicitly, hnu41).
  if (action === 'describe' && decideInHierarchy(evaluator, sourceId, 'read', { schema, table, column }, h) === 'deny' && !evaluator.describesExplicitly(sourceId, { schema, table, column })) hidden = true;
  return { hidden, masked, expression: expression && !masked };
}

/** Kinds reported by the describe tools (spec $defs CatalogRow.table_kind): a relation with relispartition is a `partition`. */
export type DescribedKind = CatalogRelation['kind'] | 'partition';

/** The reported kind of a catalogued relation (issue 22 item 1). */
export function describedKind(rel: CatalogRelation): DescribedKind {
  return rel.partition ? 'partition' : rel.kind;
}

/** `schema.name` of a partition's parent, or null when the relation is not a partition. */
function partitionOf(rel: CatalogRelation): string | null {
  const p = rel.partition ? rel.parents?.[0] : undefined;
  return p ? `${p.schema}.${p.name}` : null;
}

/**
 * Catalogue relations in describe order: by schema.name, except that partitions follow their
 * partition root, nested by level (issue 22: partitions are listed under their parent).
 */
function describeOrder(catalog: SourceCatalog): CatalogRelation[] {
  const path = (r: CatalogRelation) => [...(r.partition ? [...(r.ancestors ?? r.parents ?? [])].reverse() : []), r].map((x) => `${x.schema}.${x.name}`);
  const cmp = (a: string[], b: string[]) => {
    for (let i = 0; i < Math.min(a.length, b.length); i++) {
      const c = a[i].localeCompare(b[i]);
      if (c !== 0) return c;
    }
    return a.length - b.length;
  };
  return catalog.relations.map((r) => ({ r, k: path(r) })).sort((a, b) => cmp(a.k, b.k)).map((x) => x.r);
}

/**
 * Builds describe_access's `resources` for one SQL source. Each table entry is {table, kind, columns,
 * all_columns, policy?, masked_columns?, partitions?}; columns, masks and policy refusals are decided
 * across the relation hierarchy exactly as reads are (src/governance/hierarchy.ts), and a partition
 * whose parent is listed is nested in the parent's `partitions` instead of listed on its own.
 */
export function sqlResources(evaluator: AccessEvaluator, sourceId: string, catalog: SourceCatalog | null, policies: Policy[], subject: { identityId: string; identityName: string; roles: string[]; sourceId: string }, now: Date): Record<string, unknown> {
  if (!catalog) return { enforced: true, catalogued: false };
  const h = catalogHierarchy(catalog);
  const tables: Array<Record<string, unknown>> = [];
  const entries = new Map<string, Record<string, unknown>>();
  let count = 0;
  let truncated = false;
  // Masks do not depend on the relation: evaluated once.
  const v = evaluatePolicies(policies, subject, { action: 'read', relations: [], writes: [], now });
  const policyRows = policyRowRestrictions(policies, subject);
  for (const rel of describeOrder(catalog)) {
    const maskPatterns = v.ok ? v.maskPatterns : [];
    const columns = rel.columns
      .map((c) => c.name)
      .filter((column) => decideInHierarchy(evaluator, sourceId, 'read', { schema: rel.schema, table: rel.name, column }, h) === 'allow' && !viewColumnDenied(evaluator, sourceId, catalog, h, rel.schema, rel.name, column) && !generatedColumnView(evaluator, sourceId, catalog, h, maskPatterns, rel.schema, rel.name, column, 'read').hidden);
    if (columns.length === 0) continue;
    if (count >= DESCRIBE_ACCESS_TABLE_LIMIT) {
      truncated = true;
      break;
    }
    count++;
    const name = `${rel.schema}.${rel.name}`;
    const entry: Record<string, unknown> = { table: name, kind: describedKind(rel), columns, all_columns: columns.length === rel.columns.length };
    const rows = rowRuleEntry(evaluator, sourceId, rel.schema, rel.name, h, policyRows, rel.columns.map((c) => c.name));
    if (rows) entry.rows = rows;
    const from = isViewRelation(catalog, rel.schema, rel.name) ? viewRowRules(catalog, evaluator, sourceId, rel.schema, rel.name, h, policyRows) : [];
    if (from.length) entry.rows_from = from;
    const policy = refusingPolicy(policies, subject, rel.schema, rel.name, now, h);
    if (policy) entry.policy = policy;
    // Columns a policy masks: selectable as they are (masked), never usable in conditions or expressions.
    if (v.ok && v.maskPatterns.length) {
      // A generated column over a masked input reads masked (rt42 G1): listed as masked too (hnu43).
      const masked = columns.filter((c) => maskInHierarchy(v.maskPatterns, rel.schema, rel.name, c, h) !== null || generatedColumnView(evaluator, sourceId, catalog, h, v.maskPatterns, rel.schema, rel.name, c, 'read').masked);
      if (masked.length) entry.masked_columns = masked;
    }
    entries.set(name, entry);
    const parent = partitionOf(rel);
    const holder = parent ? entries.get(parent) : undefined;
    if (holder) ((holder.partitions ??= []) as Array<Record<string, unknown>>).push(entry);
    else tables.push(entry);
  }
  return { enforced: true, catalogued: true, scanned_at: catalog.scannedAt, catalog_truncated: catalog.truncated, tables, truncated };
}

/**
 * For a view or materialized view in describe_access (issue 27): the row rules of the base tables
 * its rows come from (viewLineage: the server's recorded dependencies, through nested views), as
 * `[{table, rule, attributes, policies?}]` — a read of the view sees only their permitted rows (a
 * plain view), or is refused `row_rule_unenforceable` (a materialized view or user code over a ruled
 * table: docs/row-rules.md). Every column of a base counts as used behind a view. Empty when no base
 * is ruled for the caller.
 */
function viewRowRules(catalog: SourceCatalog, evaluator: AccessEvaluator, sourceId: string, schema: string, name: string, h: RelationHierarchy, policyRows: PolicyRowRestrictions): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  const relations = prepareCatalog(catalog).relations;
  for (const b of viewLineage(catalog, schema, name).bases) {
    const rule = rowRuleEntry(evaluator, sourceId, b.schema, b.name, h, policyRows, relations.get(relKey(b.schema, b.name))?.columnNames);
    if (rule) out.push({ table: `${b.schema}.${b.name}`, ...rule });
  }
  return out;
}

/**
 * The row rule of a table for describe_access (issue 27): `{rule, attributes, policies?}` where rule
 * is the text of the caller's allows combined with OR, ANDed with each applicable policy's
 * `restrict_rows` predicate (as operators wrote them, with identity.<attr> names, never values),
 * attributes the identity attributes it needs, and policies the names of the restricting policies
 * (absent when none). Null when every row is readable.
 * With `columns` (the table's), the rule of a read of every column: a column allow without rows
 * lifts the rule for its own column only, so the table still shows the rule of the others; allows
 * covering different columns differently show as an AND of ORs (docs/row-rules.md "Column allows").
 */
export function rowRuleEntry(evaluator: AccessEvaluator, sourceId: string, schema: string, table: string, h: RelationHierarchy, policyRows?: PolicyRowRestrictions, columns?: readonly string[]): { rule: string; attributes: string[]; policies?: string[] } | null {
  const rule = relationRowRule(evaluator, sourceId, schema, table, h, policyRows, 'read', columns);
  if (!rule) return null;
  const attributes = new Set<string>();
  for (const t of [...rule.terms, ...rule.restrictions]) {
    const p = cachedPredicate(t.rows);
    if (!(p instanceof Error)) for (const a of [...p.attributes, ...p.listAttributes]) attributes.add(a);
  }
  const out: { rule: string; attributes: string[]; policies?: string[] } = { rule: rowRuleText(rule), attributes: [...attributes].sort() };
  if (rule.restrictions.length) out.policies = [...new Set(rule.restrictions.map((r) => r.policy))].sort();
  return out;
}

/** interlock_describe_access: roles, allow/deny statements and readable resources per granted, enabled source. */
export function describeAccessHandler(deps: DescribeDeps): ToolHandler {
  const now = deps.now ?? (() => new Date());
  return async (args, ctx: ToolCallContext) => {
    // Contract: without a resolved identity the tool refuses with 403 rather than answering {}.
    if (!ctx.identity) return { kind: 'refusal', code: 'identity_required' };
    const limited = await rateLimitStep(deps.rateLimiter, ctx, ctx.identity.id, null);
    if (limited) return limited;
    const evaluator = new AccessEvaluator(await deps.store.grantsForIdentity(ctx.identity.id));
    const wanted = typeof args.source_id === 'string' ? [args.source_id] : evaluator.grantedSources().sort();
    const policies = await deps.store.activePolicies();
    const out: Record<string, unknown> = {};
    for (const sourceId of wanted) {
      if (!evaluator.hasGrant(sourceId)) continue; // ungranted: omitted, never reported empty
      const source = await deps.store.getSource(sourceId);
      if (!source || !source.enabled) continue;
      const { allow, deny } = evaluator.statements(sourceId);
      const roles = evaluator.roleNames(sourceId);
      const subject = { identityId: ctx.identity.id, identityName: ctx.identity.name, roles, sourceId };
      let resources: Record<string, unknown> = { enforced: false };
      if (source.type === 'postgres') {
        const catalog = await deps.catalog(source);
        await readyViewColumns(evaluator, sourceId, catalog);
        resources = sqlResources(evaluator, sourceId, catalog, policies, subject, now());
      }
      out[sourceId] = { roles, allow, deny, resources };
    }
    return text(out);
  };
}

/** One describe_source row (spec/mcp-tools-v1.json $defs CatalogRow); the optional fields appear when the catalog scan recorded them. */
export type CatalogRowView = CatalogRow;
/** A primary or unique key whose every column the caller may describe (spec $defs CatalogKey). */
export type CatalogKeyView = CatalogKey & { columns: string[] };

/**
 * The describe_source row of one column (pure). `keys` are the relation's key constraints; `rel`
 * (when given) adds table_kind, partition_of and inherits (issue 22 item 1); `types` (when given)
 * adds type_kind, base_type, element_type, element_kind, enum_labels, range_subtype and value_form
 * (issue 23, src/sql/column-types.ts).
 */
export function catalogRow(schema: string, table: string, c: CatalogColumn, keys: CatalogKeyDef[] | undefined, rel?: CatalogRelation, types?: ColumnTypes): CatalogRowView {
  const row: CatalogRowView = { table_schema: schema, table_name: table, column_name: c.name, data_type: c.dataType };
  if (rel) {
    row.table_kind = describedKind(rel);
    const parent = partitionOf(rel);
    if (parent) row.partition_of = parent;
    else if (rel.parents?.length) row.inherits = rel.parents.map((p) => `${p.schema}.${p.name}`);
  }
  if (c.nullable !== undefined) {
    row.is_nullable = c.nullable;
    row.column_default = c.default ?? null;
    row.is_identity = !!c.identity;
    row.identity_generation = c.identity === 'always' ? 'ALWAYS' : c.identity === 'by_default' ? 'BY DEFAULT' : null;
    row.is_generated = c.generated === true;
    row.is_serial = typeof c.default === 'string' && /^nextval\(/.test(c.default);
  }
  if (keys) {
    row.primary_key = keys.some((k) => k.kind === 'primary' && k.columns.includes(c.name));
    row.unique = keys.some((k) => k.columns.length === 1 && k.columns[0] === c.name);
  }
  if (types) Object.assign(row, types.describe(c.typeOid));
  return row;
}

/**
 * interlock_describe_source: catalog rows {table_schema, table_name, column_name, data_type, and,
 * when scanned, is_nullable, column_default, is_identity, identity_generation, is_generated,
 * is_serial, primary_key, unique, table_kind…, type_kind…value_form} the caller may describe; structuredContent {rows, keys} where
 * keys lists only key constraints whose every column the caller may describe (contract:
 * interlock_describe_source, "Shape is connector-specific and additive").
 */
export function describeSourceHandler(deps: DescribeDeps): ToolHandler {
  const now = deps.now ?? (() => new Date());
  return async (args, ctx) => {
    if (!ctx.identity) return { kind: 'refusal', code: 'identity_required' };
    const audit = (ctx as ToolCallContext & { auditDetails?: Record<string, unknown> }).auditDetails ?? {};
    const sourceId = String(args.source_id);
    audit.source_id = sourceId;
    audit.action = 'describe';
    const evaluator = new AccessEvaluator(await deps.store.grantsForIdentity(ctx.identity.id));
    const src = await sourceStep(deps.store, evaluator, sourceId);
    if (!src.ok) return src.outcome;
    const limited = await rateLimitStep(deps.rateLimiter, ctx, ctx.identity.id, sourceId);
    if (limited) return limited;
    if (src.source.type !== 'postgres') {
      return text({ source_id: sourceId, type: src.source.type, name: src.source.name, description: src.source.description ?? null });
    }
    const catalog = await deps.catalog(src.source);
    if (!catalog) return { kind: 'refusal', code: 'source_not_catalogued' };
    await readyViewColumns(evaluator, sourceId, catalog);
    const policies = await deps.store.activePolicies();
    const subject = { identityId: ctx.identity.id, identityName: ctx.identity.name, roles: evaluator.roleNames(sourceId), sourceId };
    const rows: CatalogRowView[] = [];
    const keys: CatalogKeyView[] = [];
    const h = catalogHierarchy(catalog);
    const types = new ColumnTypes(catalog);
    const described: Array<{ rel: CatalogRelation; visible: Set<string>; noExpression: Set<string>; writeOnly: Set<string> }> = [];
    // The caller's read masks, for generated columns over masked inputs (task hnu43 item 1).
    const v = evaluatePolicies(policies, subject, { action: 'read', relations: [], writes: [], now: now() });
    const maskPatterns = v.ok ? v.maskPatterns : [];
    for (const rel of describeOrder(catalog)) {
      if (refusingPolicy(policies, subject, rel.schema, rel.name, now(), h, 'describe')) continue;
      const noExpression = new Set<string>();
      const writeOnly = new Set<string>();
      const visible = new Set(
        rel.columns
          .filter((c) => {
            const col = { schema: rel.schema, table: rel.name, column: c.name };
            if (decideInHierarchy(evaluator, sourceId, 'describe', col, h) !== 'allow' || viewColumnDenied(evaluator, sourceId, catalog, h, rel.schema, rel.name, c.name)) return false;
            // A generated column over an input the caller may not read is not described, and its
            // expression only when every input reads unmasked (task hnu43 item 1).
            const g = generatedColumnView(evaluator, sourceId, catalog, h, maskPatterns, rel.schema, rel.name, c.name, 'describe');
            if (g.hidden) return false;
            if (!g.expression) noExpression.add(c.name);
            // A column a read deny refuses, described because a write allow covers it: write-only.
            if (!c.generated && decideInHierarchy(evaluator, sourceId, 'read', col, h) === 'deny' && decideInHierarchy(evaluator, sourceId, 'write', col, h) === 'allow') writeOnly.add(c.name);
            return true;
          })
          .map((c) => c.name),
      );
      if (visible.size) described.push({ rel, visible, noExpression, writeOnly });
    }
    // partition_of / inherits name only parents the caller may describe themselves (red team rt1 RT1-5).
    const describedNames = new Set(described.map((d) => relationKey(d.rel.schema, d.rel.name)));
    for (const { rel: full, visible, noExpression, writeOnly } of described) {
      const parents = full.parents?.filter((p) => describedNames.has(relationKey(p.schema, p.name)));
      const rel: CatalogRelation = parents?.length === full.parents?.length ? full : { ...full, parents };
      // A key is described only when every one of its columns is: nothing hidden is named or hinted.
      const shown = rel.keys?.filter((k) => k.columns.every((c) => visible.has(c)));
      for (const c of rel.columns) {
        if (!visible.has(c.name)) continue;
        const row = catalogRow(rel.schema, rel.name, c, shown, rel, types);
        if (noExpression.has(c.name) && row.column_default !== undefined) row.column_default = null;
        if (writeOnly.has(c.name)) row.write_only = true;
        rows.push(row);
      }
      for (const k of shown ?? []) keys.push({ table_schema: rel.schema, table_name: rel.name, kind: k.kind, columns: k.columns as [string, ...string[]] });
    }
    audit.row_count = rows.length;
    return text(rows, { rows, keys });
  };
}
