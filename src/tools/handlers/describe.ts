/**
 * interlock_describe_access and interlock_describe_source (contract sections of the same names).
 * Both read the AccessEvaluator that enforces requests, so a description cannot drift from the
 * decision; both name nothing the caller cannot read (describe_access) or describe (describe_source).
 */
import type { Policy } from '../../../generated/policy-v1';
import { AccessEvaluator } from '../../governance/evaluator';
import { evaluatePolicies, maskFor } from '../../governance/policies';
import type { GovernanceStore, SourceRecord } from '../../governance/store';
import type { SourceCatalog } from '../../sql/catalog-types';
import type { ToolCallContext, ToolHandler, ToolOutcome } from '../types';
import { sourceStep } from '../../pipeline/02-source';
import { rateLimitStep, type RateLimiter } from '../../pipeline/05-rate-limit';

/** Most tables listed per source in describe_access (contract: "At most 200 tables are listed per source"). */
export const DESCRIBE_ACCESS_TABLE_LIMIT = 200;

/** Dependencies of the describe tools. */
export interface DescribeDeps {
  store: GovernanceStore;
  rateLimiter: RateLimiter;
  catalog(source: SourceRecord): Promise<SourceCatalog | null>;
  now?: () => Date;
}

function text(value: unknown, structured?: Record<string, unknown>): ToolOutcome {
  return { kind: 'result', content: [{ type: 'text', text: JSON.stringify(value) }], structuredContent: structured ?? (value as Record<string, unknown>) };
}

/** The policy that would refuse `action` on the table for this subject, if any. */
function refusingPolicy(policies: Policy[], subject: { identityId: string; identityName: string; roles: string[]; sourceId: string }, schema: string, table: string, now: Date) {
  const v = evaluatePolicies(policies, subject, { action: 'read', relations: [{ schema, table, action: 'read' }], writes: [], now });
  return v.ok ? null : { refused: true, rule: v.policy, reason: v.reason };
}

/** Builds describe_access's `resources` for one SQL source. */
export function sqlResources(evaluator: AccessEvaluator, sourceId: string, catalog: SourceCatalog | null, policies: Policy[], subject: { identityId: string; identityName: string; roles: string[]; sourceId: string }, now: Date): Record<string, unknown> {
  if (!catalog) return { enforced: true, catalogued: false };
  const tables: Array<Record<string, unknown>> = [];
  let truncated = false;
  const relations = [...catalog.relations].sort((a, b) => `${a.schema}.${a.name}`.localeCompare(`${b.schema}.${b.name}`));
  for (const rel of relations) {
    const columns = rel.columns.map((c) => c.name).filter((column) => evaluator.decide(sourceId, 'read', { schema: rel.schema, table: rel.name, column }) === 'allow');
    if (columns.length === 0) continue;
    if (tables.length >= DESCRIBE_ACCESS_TABLE_LIMIT) {
      truncated = true;
      break;
    }
    const entry: Record<string, unknown> = { table: `${rel.schema}.${rel.name}`, columns, all_columns: columns.length === rel.columns.length };
    const policy = refusingPolicy(policies, subject, rel.schema, rel.name, now);
    if (policy) entry.policy = policy;
    // Columns a policy masks: selectable as they are (masked), never usable in conditions or expressions.
    const v = evaluatePolicies(policies, subject, { action: 'read', relations: [], writes: [], now });
    if (v.ok && v.maskPatterns.length) {
      const masked = columns.filter((c) => maskFor(v.maskPatterns, rel.schema, rel.name, c) !== null);
      if (masked.length) entry.masked_columns = masked;
    }
    tables.push(entry);
  }
  return { enforced: true, catalogued: true, scanned_at: catalog.scannedAt, catalog_truncated: catalog.truncated, tables, truncated };
}

/** interlock_describe_access: roles, allow/deny statements and readable resources per granted, enabled source. */
export function describeAccessHandler(deps: DescribeDeps): ToolHandler {
  const now = deps.now ?? (() => new Date());
  return async (args, ctx: ToolCallContext) => {
    // Contract: without a resolved identity the tool refuses with 403 rather than answering {}.
    if (!ctx.identity) return { kind: 'refusal', code: 'identity_required' };
    const limited = await rateLimitStep(deps.rateLimiter, ctx.identity.id, null);
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
      const resources = source.type === 'postgres' ? sqlResources(evaluator, sourceId, await deps.catalog(source), policies, subject, now()) : { enforced: false };
      out[sourceId] = { roles, allow, deny, resources };
    }
    return text(out);
  };
}

/** interlock_describe_source: catalog rows {table_schema, table_name, column_name, data_type} the caller may describe. */
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
    const limited = await rateLimitStep(deps.rateLimiter, ctx.identity.id, sourceId);
    if (limited) return limited;
    if (src.source.type !== 'postgres') {
      return text({ source_id: sourceId, type: src.source.type, name: src.source.name, description: src.source.description ?? null });
    }
    const catalog = await deps.catalog(src.source);
    if (!catalog) return { kind: 'refusal', code: 'source_not_catalogued' };
    const policies = await deps.store.activePolicies();
    const subject = { identityId: ctx.identity.id, identityName: ctx.identity.name, roles: evaluator.roleNames(sourceId), sourceId };
    const rows: Array<{ table_schema: string; table_name: string; column_name: string; data_type: string }> = [];
    const relations = [...catalog.relations].sort((a, b) => `${a.schema}.${a.name}`.localeCompare(`${b.schema}.${b.name}`));
    for (const rel of relations) {
      const v = evaluatePolicies(policies, subject, { action: 'describe', relations: [{ schema: rel.schema, table: rel.name, action: 'describe' }], writes: [], now: now() });
      if (!v.ok) continue;
      for (const c of rel.columns) {
        if (evaluator.decide(sourceId, 'describe', { schema: rel.schema, table: rel.name, column: c.name }) === 'allow') {
          rows.push({ table_schema: rel.schema, table_name: rel.name, column_name: c.name, data_type: c.dataType });
        }
      }
    }
    audit.row_count = rows.length;
    return text(rows, { rows });
  };
}
