/**
 * interlock_approval_status (issue 14, item 3): the agent asks what became of a write it queued.
 * It answers only for approvals the calling identity requested; any other id, existing or not,
 * answers the same `unknown_approval` refusal (not_found), so nothing about other identities'
 * writes is disclosed. The answer never carries database text (src/approvals/status.ts).
 */
import type { ToolCallContext, ToolHandler } from '../types';
import { rateLimitStep, type RateLimiter } from '../../pipeline/05-rate-limit';
import { agentApprovalView, type ApprovalLookup } from '../../approvals/status';

/**
 * Dependencies: the approval lookup (approvalLookup(db) in production: given the caller's identity
 * id, it answers null for another identity's approval) and the rate limiter.
 */
export interface ApprovalStatusDeps {
  lookup(id: string, identityId: string): Promise<ApprovalLookup | null>;
  rateLimiter: RateLimiter;
}

/** The tool handler. Result text and structuredContent: spec $defs ApprovalStatus. */
export function approvalStatusHandler(deps: ApprovalStatusDeps): ToolHandler {
  return async (args, ctx) => {
    if (!ctx.identity) return { kind: 'refusal', code: 'identity_required' };
    const limited = await rateLimitStep(deps.rateLimiter, ctx, ctx.identity.id, null);
    if (limited) return limited;
    const audit = (ctx as ToolCallContext & { auditDetails?: Record<string, unknown> }).auditDetails ?? {};
    const id = String(args.approval_id);
    const found = await deps.lookup(id, ctx.identity.id);
    // Someone else's approval answers exactly like one that does not exist.
    if (!found || found.approval.identityId !== ctx.identity.id) return { kind: 'refusal', code: 'unknown_approval' };
    audit.source_id = found.approval.sourceId;
    audit.approval_id = found.approval.id;
    const view = agentApprovalView(found);
    return { kind: 'result', content: [{ type: 'text', text: JSON.stringify(view) }], structuredContent: view as unknown as Record<string, unknown> };
  };
}
