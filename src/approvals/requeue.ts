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

/** SQL ($1 an approval id): the first approval of its write, found by following requeued_from up (bounded: ids are unique, a chain cannot loop). */
const REQUEUE_ROOT_SQL = `WITH RECURSIVE up(id, requeued_from, depth) AS (
    SELECT id, requeued_from, 0 FROM approvals WHERE id = $1
    UNION ALL SELECT a.id, a.requeued_from, up.depth + 1 FROM approvals a JOIN up ON a.id = up.requeued_from WHERE up.depth < 10000)
  SELECT id FROM up WHERE requeued_from IS NULL LIMIT 1`;

/** SQL ($1 the root): one requeue in the root's tree that is pending, approved or executed, or none. */
const REQUEUE_LIVE_COPY_SQL = `WITH RECURSIVE down(id, state, depth) AS (
    SELECT id, state, 0 FROM approvals WHERE requeued_from = $1
    UNION ALL SELECT a.id, a.state, down.depth + 1 FROM approvals a JOIN down ON a.requeued_from = down.id WHERE down.depth < 10000)
  SELECT id, state FROM down WHERE state IN ('pending', 'approved', 'executed') ORDER BY state = 'pending' DESC LIMIT 1`;

/**
 * Makes a new pending approval from failed approval `id`. Throws ControlError: not_found (no such
 * approval), conflict (not failed; a requeue of the same write — of `id`, of the approval `id` was
 * requeued from, or of any of their requeues — is pending, approved or executed, so requeuing would
 * run it again; or the API key that queued it is revoked or expired: such a write could never run,
 * the agent must ask again with a valid key).
 */
export async function requeueApproval(db: ControlDb, id: string, opts: { operator: string; ttlSeconds?: number }): Promise<ApprovalRecord> {
  const a = await requireApproval(db, id);
  if (a.state !== 'failed') throw new ControlError('conflict', `approval ${id} is ${a.state}: only a failed approval can be requeued`);
  // A revoked or expired key stays so: its write could never run (task hnu4b item a).
  const problem = await requesterProblem(db, a);
  if (problem && PERMANENT_REQUESTER_PROBLEMS.has(problem)) throw new ControlError('conflict', `approval ${id} cannot be requeued: ${REQUESTER_PROBLEMS[problem]}, so it could never run; the agent must send the write again with a valid key`);
  return withTransaction(db, async (c) => {
    // One write's copies are its first approval (the root of requeued_from) and every requeue of it
    // or of its requeues. Requeues anywhere in that tree queue in turn on the root's lock, so a
    // second sees the first's copy (never two live copies of one write).
    const root = (await c.query<{ id: string }>(REQUEUE_ROOT_SQL, [id])).rows[0]?.id ?? id;
    await c.query("SELECT pg_advisory_xact_lock(hashtextextended('interlock-requeue:' || $1, 0))", [root]);
    // A copy pending, approved (running) or executed: requeuing would run the write again (red team
    // rt48a K2: the failed original of a requeue that executed was requeued again and ran twice).
    const live = (await c.query<{ id: string; state: string }>(REQUEUE_LIVE_COPY_SQL, [root])).rows[0];
    if (live) {
      if (live.state === 'pending') throw new ControlError('conflict', `approval ${id} was already requeued as ${live.id}, which is pending`);
      const what = live.state === 'approved' ? 'is approved and running' : 'executed';
      throw new ControlError('conflict', `approval ${id} was already requeued as ${live.id}, which ${what}: requeuing would run the write again (the agent can send it again if it must run twice)`);
    }
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
