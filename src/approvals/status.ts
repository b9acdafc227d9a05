/**
 * What an agent may learn about its own queued write (issue 14, item 3; tool
 * interlock_approval_status, spec/mcp-tools-v1.json $defs ApprovalStatus). Pure: `agentApprovalView`
 * maps an approval to the agent-safe shape. A failure is a stable code from spec/errors-v1.json
 * `approvalFailures` with its fixed message, never the database's text (that stays with operators,
 * approvals.failure). `approvalLookup` reads the control database for the handler.
 */
import errors from '../../spec/errors-v1.json';
import type { ApprovalStatus } from '../../generated/mcp-tools-v1';
import type { ControlDb } from '../control/db';
import { getApproval, type ApprovalRecord } from '../control/approvals';
import { statementSqlstateInfo } from '../errors/vocabulary';
import { requesterProblem, type RequesterProblem } from './requester';

const FAILURES = new Map<string, string>((errors as unknown as { approvalFailures: Array<{ code: string; message: string }> }).approvalFailures.map((f) => [f.code, f.message]));

/** The code agents see for a stored error code: itself when listed in approvalFailures, else execution_failed. */
export function agentFailureCode(code: string | undefined): string {
  return code && FAILURES.has(code) ? code : 'execution_failed';
}

const STATE_MESSAGES: Record<ApprovalRecord['state'], string> = {
  pending: 'Waiting for an operator to approve or reject it. Nothing has run yet; do not queue it again.',
  approved: 'An operator approved it and it is running now.',
  executed: 'An operator approved it and it ran once.',
  failed: 'An operator approved it but it did not complete.',
  rejected: 'An operator rejected it; it was not run.',
  expired: 'Nobody decided in time; it expired and was not run.',
};

/**
 * What an agent is told of a pending write that cannot run as queued (task nu47fix item 1), by the
 * requester problem operators are warned of (src/approvals/requester.ts: `approval list`'s ⚠, the
 * console, `approval show`): approving it would end failed with that code, so "wait" would be false.
 */
const CANNOT_RUN_MESSAGES: Record<RequesterProblem, string> = {
  key_revoked:
    'It cannot run as queued: the API key that queued it has been revoked, so approving it would not run it (it would end failed, key_revoked). Nothing has run. To have the write made, queue it again with a valid API key.',
  key_expired:
    'It cannot run as queued: the API key that queued it has expired, so approving it would not run it (it would end failed, key_expired). Nothing has run. To have the write made, queue it again with a valid API key.',
  identity_disabled:
    'It cannot run as queued: your identity is disabled, so approving it would not run it (it would end failed, identity_disabled). Nothing has run. It can run only if an operator enables your identity before deciding it.',
};

/** An approval plus what only the audit trail holds (the operator's rejection reason). */
export interface ApprovalLookup {
  approval: ApprovalRecord;
  rejectionReason: string | null;
  /**
   * For a pending approval: the requester problem that stops it from running (its key revoked or
   * expired, its identity disabled; src/approvals/requester.ts), else null/absent.
   */
  requesterProblem?: RequesterProblem | null;
  /** For a failed approval: the newest approval an operator requeued from it (same requester), else null/absent. */
  requeuedAs?: string | null;
}

/**
 * The agent-safe status of an approval (spec $defs ApprovalStatus). A pending approval with a
 * requester problem keeps state `pending` (it is still undecided) and carries `cannot_run` (the
 * code) and a message saying it cannot run as queued and what to do.
 */
export function agentApprovalView(l: ApprovalLookup): ApprovalStatus {
  const a = l.approval;
  let outcome: ApprovalStatus['outcome'] = null;
  let message = STATE_MESSAGES[a.state];
  if (a.state === 'executed') {
    outcome = { row_count: a.outcome?.row_count ?? 0 };
    message = `${message} ${outcome.row_count} row(s) changed.`;
  } else if (a.state === 'failed') {
    const code = agentFailureCode(a.outcome?.error_code);
    outcome = { error_code: code, message: FAILURES.get(code)! };
    // The statement's own error (a constraint, a bad value): its SQLSTATE and condition name, never
    // PostgreSQL's text (spec/errors-v1.json statementSqlstates; the text stays with operators).
    const sqlstate = a.outcome?.sqlstate;
    const info = code === 'statement_failed' && typeof sqlstate === 'string' && /^[0-9A-Z]{5}$/.test(sqlstate) ? statementSqlstateInfo(sqlstate) : undefined;
    if (info) outcome = { ...outcome, sqlstate: sqlstate!, ...(info.condition ? { condition: info.condition } : {}) };
    message = `${message} ${outcome.message}`;
  } else if (a.state === 'rejected' && l.rejectionReason) {
    outcome = { reason: l.rejectionReason };
  }
  // A pending write its requester can no longer have run: not "wait", but why and what to do.
  const cannotRun = a.state === 'pending' && l.requesterProblem ? l.requesterProblem : null;
  if (cannotRun) message = CANNOT_RUN_MESSAGES[cannotRun];
  return {
    approval_id: a.id,
    source_id: a.sourceId,
    state: a.state,
    requested_at: a.createdAt,
    expires_at: a.expiresAt,
    decided_at: a.decidedAt,
    executed_at: a.executedAt,
    outcome,
    ...(a.requeuedFrom ? { requeued_from: a.requeuedFrom } : {}),
    ...(l.requeuedAs ? { requeued_as: l.requeuedAs } : {}),
    ...(cannotRun ? { cannot_run: cannotRun } : {}),
    message,
  };
}

/**
 * Reads approval `id` and, when rejected, the operator's reason from the audit; when pending, its
 * requester problem (its key and identity); null when unknown. With `identityId` (the caller), an
 * approval another identity requested is null too, read no further than the id: nothing about it
 * (its requester's keys included) is looked up for a caller who may not see it.
 */
export function approvalLookup(db: ControlDb): (id: string, identityId?: string) => Promise<ApprovalLookup | null> {
  return async (id, identityId) => {
    if (!/^apr_[0-9a-f]{24}$/.test(id)) return null;
    const approval = await getApproval(db, id);
    if (!approval || (identityId !== undefined && approval.identityId !== identityId)) return null;
    let rejectionReason: string | null = null;
    if (approval.state === 'rejected') {
      const r = await db.pool.query<{ reason: string | null }>("SELECT details->>'reason' AS reason FROM audit_events WHERE approval_id = $1 AND kind = 'approval' AND decision = 'rejected' ORDER BY id DESC LIMIT 1", [id]);
      rejectionReason = r.rows[0]?.reason ?? null;
    }
    // A requeue keeps the requester (src/approvals/requeue.ts), so the new id is the agent's own.
    let requeuedAs: string | null = null;
    if (approval.state === 'failed') {
      const r = await db.pool.query<{ id: string }>('SELECT id FROM approvals WHERE requeued_from = $1 AND identity_id = $2 ORDER BY created_at DESC, id DESC LIMIT 1', [id, approval.identityId]);
      requeuedAs = r.rows[0]?.id ?? null;
    }
    const problem = approval.state === 'pending' ? await requesterProblem(db, approval) : null;
    return { approval, rejectionReason, requeuedAs, requesterProblem: problem };
  };
}
