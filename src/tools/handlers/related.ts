/**
 * interlock_related_documents (contract: interlock_related_documents — "InterLock resolves the
 * seed asset's source and prevents cross-source expansion"; issue 4, Build 5).
 *
 * The seed's source is read from the index itself, never from the caller. Then, in order:
 * the caller must hold a grant on that source, a discover allow there, and be able to see the seed
 * (category patterns, audience, hide_documents) — every failure of these answers not_found
 * unknown_asset, exactly like an asset that does not exist (same code, same message); then the
 * source must be enabled (unavailable source_disabled); then policy refusals (policy_denied), the
 * rate limit, and the related assets of the SAME source only, under the same visibility rules.
 * Rows of mapped SQL tables follow interlock_query's read decisions and column masks (issue 12):
 * a seed of a denied table is unknown_asset, and only fields the caller may see unmasked relate.
 * Audit details: source_id (once the seed is visible), action 'discover', row_count.
 * Rate limit: a visible seed consumes the identity's and the source's points; an invisible or
 * missing one consumes the identity's point only (both cases alike).
 */
import { AccessEvaluator } from '../../governance/evaluator';
import { rateLimitStep } from '../../pipeline/05-rate-limit';
import { TOOL_DEFAULTS } from '../registry';
import type { ToolHandler, ToolOutcome } from '../types';
import { mayAct, policyRefusal, resolveScope } from '../../discovery/access';
import { assetSource, assetVisible, relatedAssets } from '../../discovery/search';
import { auditDetails, clampLimit, jsonResult, RELATED_MAX_LIMIT, liveTreesFor, rowFilterFor, rowRulesRefusal, searchRunRefusal, type DiscoveryDeps } from './discover';
import { DiscoverySearchSlots } from '../../discovery/search-slots';

/** The one answer for an asset that is missing or not visible to the caller. */
export function unknownAsset(): ToolOutcome {
  return { kind: 'refusal', code: 'unknown_asset', message: 'No asset with that id is visible to this identity. Use an asset_id returned by interlock_discover.' };
}

/**
 * Builds the interlock_related_documents handler. Result (text JSON and structuredContent):
 * {asset_id, source_id, related: RelatedDocument[]} with at most `limit` entries (default and
 * maximum from spec/: 10 and 50). Refusals: unknown_asset (404; also for any asset the caller
 * may not see), source_disabled (503), policy_denied (403), rate_limited (429), row_rules_unavailable
 * (503: a mapped relation's row rules for the caller cannot be enforced now; rowRulesRefusal; only for
 * an asset the caller may see, so it is no existence hint); concurrency_limited (429, retry_after_ms)
 * when no search slot freed in time (src/discovery/search-slots.ts); statement_timeout (503) when the
 * ranking ran past the discovery search limit (DISCOVERY_SEARCH_TIMEOUT_MS) and was cancelled.
 */
export function relatedDocumentsHandler(deps: DiscoveryDeps): ToolHandler {
  const now = deps.now ?? (() => new Date());
  const slots = deps.searchSlots ?? new DiscoverySearchSlots();
  return async (args, ctx) => {
    const identity = ctx.identity;
    if (!identity) return { kind: 'refusal', code: 'identity_required' };
    const audit = auditDetails(ctx);
    audit.action = 'discover';
    const assetId = String(args.asset_id);

    // Not visible, for whatever reason: one identity-level rate-limit point, then unknown_asset.
    const invisible = async (): Promise<ToolOutcome> => (await rateLimitStep(deps.rateLimiter, ctx, identity.id, null)) ?? unknownAsset();
    const located = await assetSource(deps.db.pool, assetId);
    if (!located) return invisible();
    const sourceId = located.sourceId;
    const evaluator = new AccessEvaluator(await deps.store.grantsForIdentity(identity.id));
    if (!evaluator.hasGrant(sourceId)) return invisible();
    const source = await deps.store.getSource(sourceId);
    if (!source) return invisible();
    const policies = await deps.store.activePolicies();
    const at = now();
    const subject = { identityId: identity.id, identityName: identity.name };
    const catalog = await deps.store.loadCatalog(sourceId);
    // A disabled source is not read for row rules (its ruled relations show nothing, fail closed).
    const rows = source.enabled ? rowFilterFor(deps, source, evaluator, identity, catalog, policies) : undefined;
    const scope = await resolveScope(deps.db.pool, evaluator, policies, subject, sourceId, 'discover', at, deps.maskSecret, catalog, liveTreesFor(deps, source), rows);
    // An asset the caller may not see is unknown_asset first, whatever the state of its row rules:
    // asset ids are guessable (`source:schema.table/id`), so answering row_rules_unavailable before
    // this told an existing hidden row (or a row of a relation the caller may not read) from a
    // missing one (red team rt42b D1). A ruled relation whose rules cannot be enforced shows nothing.
    if (!mayAct(scope) || !(await assetVisible(deps.db.pool, scope, assetId))) return invisible();
    // Row rules the source cannot enforce now (no row views): refused as interlock_query and
    // interlock_discover refuse, rather than a list that silently leaves the ruled rows out.
    const unenforceable = rowRulesRefusal(scope);
    if (unenforceable) {
      audit.source_id = sourceId;
      return (await rateLimitStep(deps.rateLimiter, ctx, identity.id, sourceId)) ?? unenforceable;
    }

    audit.source_id = sourceId;
    if (!source.enabled) return { kind: 'refusal', code: 'source_disabled', message: `Source '${sourceId}' is disabled by an operator.` };
    const refused = policyRefusal(policies, { ...subject, roles: evaluator.roleNames(sourceId), sourceId }, 'discover', at);
    if (refused) {
      audit.policy = refused.policy;
      return { kind: 'refusal', code: 'policy_denied', message: refused.reason };
    }
    const limited = await rateLimitStep(deps.rateLimiter, ctx, identity.id, sourceId);
    if (limited) return limited;

    const limit = clampLimit(args.limit, TOOL_DEFAULTS.related_limit, RELATED_MAX_LIMIT);
    // The similarity ranking holds a control-pool connection: one of a few search slots (rt49b D1).
    const ran = await slots.run(identity.id, deps.db.pool, (db) => relatedAssets(db, scope, assetId, limit), ctx.signal);
    if (!ran.ok) return searchRunRefusal(ran);
    const related = ran.value;
    audit.row_count = related.length;
    return jsonResult({ asset_id: assetId, source_id: sourceId, related });
  };
}
