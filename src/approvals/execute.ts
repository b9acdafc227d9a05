/**
 * Approving and rejecting queued writes (contract: "A write never runs on the agent's call: it
 * waits for an operator's approval"; decisions.md: approved by an operator who is not the requesting
 * identity, through a channel agent keys cannot use; approval executes the exact stored statement once).
 *
 * Exactly once: the pending → approved transition is a conditional UPDATE, so of any number of
 * racing approvers one wins and only the winner executes. A crash between approved and executed
 * leaves the approval "approved" (never re-run automatically): at most once, visible to operators.
 */
import type { Logger } from 'pino';
import type { ControlDb } from '../control/db';
import { requireApproval, transitionApproval, type ApprovalFailureCause, type ApprovalRecord } from '../control/approvals';
import { failureCause, failureCode, recheckCause } from './causes';
import { recordApprovalEvent } from '../audit/writer';
import { ControlError } from '../control/errors';
import { requesterProblem } from './requester';
import { DbGovernanceStore } from '../governance/db-store';
import { AccessEvaluator } from '../governance/evaluator';
import { analyzeSql, complexityLimitsFromSettings, initSqlParser } from '../sql/analyze';
import { authorizeStatement } from '../pipeline/03-authorize';
import { policyStep } from '../pipeline/04-policy';
import { planRowRules } from '../pipeline/row-rules';
import { checkHierarchy } from '../pipeline/hierarchy-check';
import type { QueryConnector } from '../pipeline/07-execute';
import { SourceConnectorRegistry } from '../sources/registry';
import type { PostgresSourceSettings } from '../sources/postgres/connector';
import { CACHE_CHANNEL } from '../pipeline/cache';
import { cutText } from '../errors/cut-text';

/** Result of approveAndExecute. */
export interface ApprovalExecution {
  approvalId: string;
  state: 'executed' | 'failed';
  rowCount?: number;
  errorCode?: string;
  /** Operators only: why it failed (PostgreSQL's SQLSTATE, message, detail, hint). */
  failure?: ApprovalFailureCause;
}

/** Options: who approves, and optionally a shared connector registry and logger. */
export interface ApproveOptions {
  operator: string;
  /** Why the operator approves (recorded in the audit event's details, at most 1000 characters). */
  reason?: string;
  connectors?: SourceConnectorRegistry;
  logger?: Logger;
  now?: Date;
}

function assertNotSelf(a: ApprovalRecord, operator: string): void {
  if (operator === a.identityName || operator === a.identityId) {
    throw new ControlError('forbidden', `self_approval_forbidden: ${operator} requested this write and cannot approve or reject it.`);
  }
}

/**
 * Re-checks that the requester may still have the write run (its key neither revoked nor expired,
 * its identity enabled: src/approvals/requester.ts), and that the write is still allowed (source
 * enabled, source role, policy) against the current catalog. Returns null when allowed, else an
 * approvalFailures code.
 */
async function recheck(db: ControlDb, a: ApprovalRecord, now: Date, connectorFor: (settings: PostgresSourceSettings) => QueryConnector): Promise<string | null> {
  // The requester first (issue 24, item 4): the key that queued the write and its identity.
  const requester = await requesterProblem(db, a, now);
  if (requester) return requester;
  const store = new DbGovernanceStore(db, { ttlMs: 0 });
  const source = await store.getSource(a.sourceId);
  if (!source || !source.enabled) return 'source_disabled';
  const catalog = await store.loadCatalog(a.sourceId);
  if (!catalog) return 'source_not_catalogued';
  await initSqlParser();
  const analysis = analyzeSql(a.sql, catalog, { complexity: complexityLimitsFromSettings(source.settings) });
  if (!analysis.ok) return 'classification_changed';
  if (analysis.kind !== 'write' || analysis.fingerprint !== a.classification.fingerprint) return 'classification_changed';
  const evaluator = new AccessEvaluator(await store.grantsForIdentity(a.identityId));
  if (!evaluator.hasGrant(a.sourceId)) return 'source_role_denied';
  if (authorizeStatement(evaluator, a.sourceId, analysis, catalog)) return 'source_role_denied';
  const policies = await store.activePolicies();
  const subject = { identityId: a.identityId, identityName: a.identityName, roles: evaluator.roleNames(a.sourceId), sourceId: a.sourceId };
  const pol = policyStep(policies, subject, analysis, catalog, now);
  if (!pol.ok) return 'policy_denied';
  // Row rules (issue 27): a write touching a row-ruled relation is not supported yet, also when the
  // rule was added after the write was queued; the requester's roles no longer allow it as written.
  if (planRowRules({ evaluator, sourceId: a.sourceId, analysis, catalog, attributes: undefined, sql: a.sql }).kind === 'refused') return 'source_role_denied';
  // The relation hierarchy as the server has it now (issue 22 item 1): a partition attached under a
  // write-denied or masked parent since the scan (or since the write was queued) is refused (red team rt1).
  const connector = connectorFor(source.settings as unknown as PostgresSourceSettings);
  const hier = await checkHierarchy({ connector, evaluator, sourceId: a.sourceId, analysis, catalog, policies, subject, now, restrictions: pol.restrictions, identityId: a.identityId });
  if (!hier.ok) return hier.outcome.kind === 'refusal' && hier.outcome.code === 'policy_denied' ? 'policy_denied' : 'source_role_denied';
  return null;
}

/**
 * Approves a pending write and executes it once with the source's writer role, in a transaction.
 * Throws ControlError: not_found (no such approval), forbidden (self-approval), conflict (not
 * pending, or another operator decided first). Execution failures do not throw: the approval ends
 * `failed` with a stable error code (never driver text).
 */
export async function approveAndExecute(db: ControlDb, approvalId: string, opts: ApproveOptions): Promise<ApprovalExecution> {
  const a = await requireApproval(db, approvalId);
  assertNotSelf(a, opts.operator);
  if (a.state !== 'pending') throw new ControlError('conflict', `Approval ${approvalId} is ${a.state}, not pending.`);
  if (new Date(a.expiresAt).getTime() <= (opts.now ?? new Date()).getTime()) {
    await transitionApproval(db, approvalId, ['pending'], 'expired', { decidedBy: 'system:expiry' });
    throw new ControlError('conflict', `Approval ${approvalId} has expired.`);
  }
  const won = await transitionApproval(db, approvalId, ['pending'], 'approved', { decidedBy: opts.operator });
  if (!won) throw new ControlError('conflict', `Approval ${approvalId} was decided by someone else first.`);
  const base = { approvalId, operator: opts.operator, identityId: a.identityId, keyId: a.keyId, sourceId: a.sourceId, requestId: a.requestId, fingerprint: (a.classification.fingerprint as string) ?? null };
  await recordApprovalEvent(db, { ...base, action: 'approved', ...(opts.reason ? { details: { reason: cutText(opts.reason, 1000) } } : {}) } as Parameters<typeof recordApprovalEvent>[1]);

  const finish = async (state: 'executed' | 'failed', outcome: { row_count?: number; error_code?: string; sqlstate?: string }, failure?: ApprovalFailureCause): Promise<ApprovalExecution> => {
    await transitionApproval(db, approvalId, ['approved'], state, { outcome, failure });
    await recordApprovalEvent(db, { ...base, action: state, reasonCode: outcome.error_code ?? null, rowCount: outcome.row_count ?? null } as Parameters<typeof recordApprovalEvent>[1]);
    return { approvalId, state, rowCount: outcome.row_count, errorCode: outcome.error_code, ...(failure ? { failure } : {}) };
  };

  const registry = opts.connectors ?? new SourceConnectorRegistry({ logger: opts.logger });
  let denied: string | null;
  try {
    denied = await recheck(db, a, opts.now ?? new Date(), (settings) => registry.get(a.sourceId, settings));
  } catch (err) {
    if (!opts.connectors) await registry.closeAll();
    throw err;
  }
  if (denied) {
    if (!opts.connectors) await registry.closeAll();
    return finish('failed', { error_code: denied }, recheckCause(denied));
  }
  const store = new DbGovernanceStore(db, { ttlMs: 0 });
  const source = (await store.getSource(a.sourceId))!;
  try {
    const r = await registry.get(source.id, source.settings as unknown as PostgresSourceSettings).write(a.sql, a.params);
    await db.pool.query('SELECT pg_notify($1, $2)', [CACHE_CHANNEL, a.sourceId]).catch(() => undefined);
    return await finish('executed', { row_count: r.rowCount });
  } catch (err) {
    const e = err as { code?: string; sqlState?: string };
    opts.logger?.warn({ approvalId, code: e.code, sqlState: e.sqlState }, 'approved write failed');
    return finish('failed', { error_code: failureCode(err), ...(e.sqlState ? { sqlstate: e.sqlState } : {}) }, failureCause(err));
  } finally {
    if (!opts.connectors) await registry.closeAll();
  }
}

/** Rejects a pending write. Throws ControlError like approveAndExecute. */
export async function rejectApproval(db: ControlDb, approvalId: string, opts: { operator: string; reason?: string }): Promise<ApprovalRecord> {
  const a = await requireApproval(db, approvalId);
  assertNotSelf(a, opts.operator);
  const r = await transitionApproval(db, approvalId, ['pending'], 'rejected', { decidedBy: opts.operator });
  if (!r) throw new ControlError('conflict', `Approval ${approvalId} is ${a.state}, not pending.`);
  await recordApprovalEvent(db, { approvalId, action: 'rejected', operator: opts.operator, identityId: a.identityId, keyId: a.keyId, sourceId: a.sourceId, requestId: a.requestId, reasonCode: null, details: opts.reason ? { reason: cutText(opts.reason, 1000) } : {} } as Parameters<typeof recordApprovalEvent>[1]);
  return r;
}
