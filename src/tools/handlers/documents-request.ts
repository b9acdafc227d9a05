/**
 * Connector requests on non-SQL sources (issue 4, Build 6): interlock_query with
 * `request: {operation: "get_document", asset_id}` (spec/mcp-tools-v1.json ConnectorRequest)
 * returns one asset's full content (DocumentContent). Plugged into the query pipeline as
 * QueryPipelineDeps.connectorRequest, which has already resolved the source (granted, enabled) and
 * set audit action 'request'.
 *
 * Governance, in order: some role on the source allows `request` (else source_role_denied) →
 * policy refusals for action request (policy_denied) → rate limit → the asset must belong to THIS
 * source and be visible for `request` (category patterns, audience, hide_documents), else
 * not_found unknown_asset, the same answer as for a missing asset (a row of a mapped table the
 * caller may not read included: issue 12); fields fed by denied columns are empty, by masked
 * columns masked (src/discovery/fields.ts). Links in the answer keep only
 * same-source assets the caller may discover.
 * interlock_describe_access reports such sources with `enforced: false` (contract): their requests
 * are not checked against catalogued resources.
 */
import type { AccessEvaluator } from '../../governance/evaluator';
import type { GovernanceStore, SourceRecord } from '../../governance/store';
import type { ControlDb } from '../../control/db';
import { rateLimitStep, type RateLimiter } from '../../pipeline/05-rate-limit';
import type { ToolCallContext, ToolOutcome } from '../types';
import { mayAct, policyRefusal, resolveScope } from '../../discovery/access';
import { getDocument } from '../../discovery/search';
import { liveTreesFor, rowFilterFor, rowRulesRefusal, type DiscoveryDeps } from './discover';

/** What documentsConnectorRequest needs (the same objects the discovery handlers get). */
export interface ConnectorRequestDeps {
  store: GovernanceStore;
  rateLimiter: RateLimiter;
  db: Pick<ControlDb, 'pool'>;
  now?: () => Date;
  /** The gateway's mask secret (key of `hash` masks). */
  maskSecret?: string;
  /** The live relation hierarchy of a source (see DiscoveryDeps.liveTrees). */
  liveTrees?: DiscoveryDeps['liveTrees'];
  /** Row rules on mapped rows (see DiscoveryDeps.rowReads). */
  rowReads?: DiscoveryDeps['rowReads'];
}

/** The connector-request hook of src/pipeline/query.ts (QueryPipelineDeps.connectorRequest). */
export type ConnectorRequestHook = (source: SourceRecord, request: Record<string, unknown>, ctx: ToolCallContext, evaluator: AccessEvaluator) => Promise<ToolOutcome>;

/**
 * Builds the connector-request hook. Operation get_document → result whose text is the JSON of
 * DocumentContent {asset_id, source_id, title, body, document_type, category_path, timestamp,
 * entities, links, indexed_at} (also structuredContent). Refusals: identity_required,
 * source_role_denied, policy_denied, rate_limited, row_rules_unavailable (rowRulesRefusal),
 * unknown_asset; an unknown operation →
 * invalid_arguments. Audit details: row_count 1 and asset_id on success.
 */
export function documentsConnectorRequest(deps: ConnectorRequestDeps): ConnectorRequestHook {
  const now = deps.now ?? (() => new Date());
  return async (source, request, ctx, evaluator) => {
    const identity = ctx.identity;
    if (!identity) return { kind: 'refusal', code: 'identity_required' };
    const audit = (ctx as ToolCallContext & { auditDetails?: Record<string, unknown> }).auditDetails ?? {};
    audit.action = 'request';
    if (request.operation !== 'get_document' || typeof request.asset_id !== 'string') {
      return { kind: 'tool_error', code: 'invalid_arguments', message: 'request must be {"operation": "get_document", "asset_id": "<an asset_id from interlock_discover>"}.' };
    }
    const policies = await deps.store.activePolicies();
    const at = now();
    const subject = { identityId: identity.id, identityName: identity.name };
    const catalog = await deps.store.loadCatalog(source.id);
    const rows = rowFilterFor(deps, source, evaluator, identity, catalog, policies);
    const scope = await resolveScope(deps.db.pool, evaluator, policies, subject, source.id, 'request', at, deps.maskSecret, catalog, liveTreesFor(deps, source), rows);
    if (!mayAct(scope)) return { kind: 'refusal', code: 'source_role_denied', message: `No role granted on source '${source.id}' allows request.` };
    const refused = policyRefusal(policies, { ...subject, roles: evaluator.roleNames(source.id), sourceId: source.id }, 'request', at);
    if (refused) {
      audit.policy = refused.policy;
      return { kind: 'refusal', code: 'policy_denied', message: refused.reason };
    }
    const limited = await rateLimitStep(deps.rateLimiter, ctx, identity.id, source.id);
    if (limited) return limited;
    const unenforceable = rowRulesRefusal(scope);
    if (unenforceable) return unenforceable;
    const linkScope = await resolveScope(deps.db.pool, evaluator, policies, subject, source.id, 'discover', at, deps.maskSecret, catalog, liveTreesFor(deps, source), rows);
    const doc = await getDocument(deps.db.pool, scope, linkScope, request.asset_id);
    if (!doc) return { kind: 'refusal', code: 'unknown_asset', message: 'No asset with that id is visible to this identity. Use an asset_id returned by interlock_discover.' };
    audit.row_count = 1;
    audit.asset_id = doc.asset_id;
    return { kind: 'result', content: [{ type: 'text', text: JSON.stringify(doc) }], structuredContent: doc as unknown as Record<string, unknown> };
  };
}
