/**
 * `interlock approval requeue apr_…` (issue 14, item 4): a failed approval is final, but an
 * operator who fixed the cause (a grant, a sequence privilege, a constraint) can queue the exact
 * same write again. The new approval is pending, carries the same statement, parameters,
 * identity, key, source, classification and kept claim attributes, and names the failed one in `requeuedFrom`; the audit
 * records action "requeued" on the new approval. It goes through the normal approve/reject path.
 */
import { withTransaction, type ControlDb } from '../control/db';
import { createApproval, requireApproval, DEFAULT_APPROVAL_TTL_SECONDS, type ApprovalRecord } from '../control/approvals';
import { recordApprovalEvent } from '../audit/writer';
import { ControlError } from '../control/errors';
import { PERMANENT_REQUESTER_PROBLEMS, REQUESTER_PROBLEMS, requesterProblem } from './requester';

/**
 * Makes a new pending approval from failed approval `id`. Throws ControlError: not_found (no such
 * approval), conflict (not failed, it already has a pending requeue, or the API key that queued it
 * is revoked or expired: such a write could never run, the agent must ask again with a valid key).
 */
export async function requeueApproval(db: ControlDb, id: string, opts: { operator: string; ttlSeconds?: number }): Promise<ApprovalRecord> {
  const a = await requireApproval(db, id);
  if (a.state !== 'failed') throw new ControlError('conflict', `approval ${id} is ${a.state}: only a failed approval can be requeued`);
  // A revoked or expired key stays so: its write could never run (task hnu4b item a).
  const problem = await requesterProblem(db, a);
  if (problem && PERMANENT_REQUESTER_PROBLEMS.has(problem)) throw new ControlError('conflict', `approval ${id} cannot be requeued: ${REQUESTER_PROBLEMS[problem]}, so it could never run; the agent must send the write again with a valid key`);
  return withTransaction(db, async (c) => {
    // Concurrent requeues of one approval queue in turn on its row, so the second sees the first's
    // pending approval and is a conflict (never two pending requeues of one failed write).
    await c.query('SELECT id FROM approvals WHERE id = $1 FOR UPDATE', [id]);
    const open = await c.query<{ id: string }>("SELECT id FROM approvals WHERE requeued_from = $1 AND state = 'pending' LIMIT 1", [id]);
    if (open.rows[0]) throw new ControlError('conflict', `approval ${id} was already requeued as ${open.rows[0].id}, which is pending`);
    const created = await createApproval(c, {
      sourceId: a.sourceId,
      identityId: a.identityId,
      keyId: a.keyId,
      requestId: a.requestId,
      sql: a.sql,
      params: a.params,
      classification: a.classification,
      ttlSeconds: opts.ttlSeconds ?? DEFAULT_APPROVAL_TTL_SECONDS,
      requeuedFrom: a.id,
      claimAttributes: a.claimAttributes,
    });
    await recordApprovalEvent(c, {
      approvalId: created.id,
      action: 'requeued',
      operator: opts.operator,
      identityId: a.identityId,
      keyId: a.keyId,
      sourceId: a.sourceId,
      requestId: a.requestId,
      fingerprint: typeof a.classification.fingerprint === 'string' ? a.classification.fingerprint : null,
      details: { requeued_from: a.id },
    });
    return created;
  });
}
