/**
 * Pipeline step 6, write safety (contract: "A write never runs on the agent's call: it waits for an
 * operator's approval"). The exact statement, parameters, identity, source and classification are
 * stored (with, for an identity from an access token, the claim values its row rules read: issue 27); the agent gets the queued result (isError false, must not be retried). When the identity
 * or source already has its cap of pending approvals (config approvals.max_pending_*), nothing is
 * stored and the call is refused approval_queue_full (retryable false; issue 24 item 2).
 */
import type { SqlAnalysis } from '../sql/analyze';
import type { GovernanceStore, SourceRecord } from '../governance/store';
import type { Identity } from '../control/identities';
import type { ToolOutcome } from './types';
import type { AuditHooks } from '../audit/types';
import { ApprovalQueueFullError } from '../control/approvals';
import type { QueryConnector } from './07-execute';
import { relKey } from '../sql/prepared-catalog';

/**
 * Refuses, before it is queued, a write whose target the source's writer role may not modify
 * (task hnu42a finding 3: a DELETE without the writer's DELETE privilege waited for an operator,
 * whose plan said "SQLSTATE 42501"): each written relation's privilege (INSERT, UPDATE, DELETE; for
 * MERGE, whose actions are not known here, at least one of them) read live from the source
 * (`connector.writerMissingPrivileges`). Answers `source_permission_denied` naming the relation and
 * the privilege, or null: may be queued. A check that cannot be made (no such method, no writer
 * role configured, the source unreachable or its answer malformed) is not a refusal: the write is
 * queued as before and the approval's own run stays the guard (an unreachable source must not stop
 * writes from queuing, as the live hierarchy check does not).
 */
export async function writerPrivilegeRefusal(connector: QueryConnector, analysis: Extract<SqlAnalysis, { ok: true }>, opts: { signal?: AbortSignal; identityId?: string }): Promise<{ outcome: ToolOutcome; missing: string } | null> {
  if (!connector.writerMissingPrivileges || analysis.writes.length === 0) return null;
  let missing: Map<string, Array<'INSERT' | 'UPDATE' | 'DELETE'>> | null;
  try {
    missing = await connector.writerMissingPrivileges(analysis.writes.map((w) => ({ schema: w.schema, name: w.table })), opts);
  } catch {
    return null;
  }
  if (!missing) return null;
  for (const w of analysis.writes) {
    const lacks = missing.get(relKey(w.schema, w.table)) ?? [];
    const needed = w.operation === 'merge' ? (lacks.length === 3 ? 'INSERT, UPDATE or DELETE' : null) : lacks.includes(w.operation.toUpperCase() as 'INSERT') ? w.operation.toUpperCase() : null;
    if (!needed) continue;
    const relation = `${w.schema}.${w.table}`;
    return {
      missing: `${relation}: ${needed}`,
      outcome: {
        kind: 'refusal',
        code: 'source_permission_denied',
        message: `The source's writer role, which runs approved writes, may not ${needed} on ${relation}, so this write was not queued: approving it would fail (SQLSTATE 42501, insufficient_privilege). The statement is not at fault; do not rewrite it. An operator must grant the writer role that privilege; \`interlock source scan\` lists what it may not modify.`,
      },
    };
  }
  return null;
}

/**
 * The claim-derived attribute values (Identity.claimAttributes) of the attributes `names` (those
 * the write's row rules read when it was queued), to keep with the write (issue 27): an approval
 * has no token to read them from. Only values in effect when it was queued: a claim the identity
 * record overrode then (Identity.attributes holds another value) is not kept (red team rt27m
 * finding 2: it was, so removing the record's value before approval ran the write with a claim
 * value it never had, one operators saw as its value). Null when none.
 */
export function keptClaims(identity: Identity, names: readonly string[] | undefined): Record<string, unknown> | null {
  const claims = identity.claimAttributes;
  if (!claims || !names) return null;
  const own = (o: Record<string, unknown> | undefined, n: string) => o !== undefined && Object.prototype.hasOwnProperty.call(o, n);
  const inEffect = (n: string) => own(claims, n) && own(identity.attributes, n) && JSON.stringify(identity.attributes![n]) === JSON.stringify(claims[n]);
  const kept = Object.fromEntries(names.filter(inEffect).map((n) => [n, claims[n]]));
  return Object.keys(kept).length > 0 ? kept : null;
}

/**
 * Queues the write and returns the queued outcome. `w.ruleAttributes`: the names of the attributes
 * the write's row rules read (RowRulePlan.attributes); their claim values are kept with it (keptClaims). With `audit` (the dispatcher's hooks) and
 * `details` (the call's audit details), the call's tool-call event (decision queued, with
 * details.approval_id) is committed in the same transaction as the approval row and its approval
 * event when the store can (issue 11), and `audit.committed` is set.
 */
export async function writeSafetyStep(
  store: GovernanceStore,
  w: { source: SourceRecord; identity: Identity; requestId: string; sql: string; params: unknown[]; analysis: Extract<SqlAnalysis, { ok: true }>; ruleAttributes?: readonly string[] },
  audit?: { hooks: AuditHooks; details: Record<string, unknown> },
): Promise<ToolOutcome> {
  const classification = {
    kind: w.analysis.kind,
    statement: w.analysis.statement,
    fingerprint: w.analysis.fingerprint,
    writes: w.analysis.writes,
    reads: w.analysis.reads.map((r) => ({ schema: r.schema, table: r.table })),
  };
  const toolCallEvent = audit
    ? (approvalId: string) => {
        audit.details.approval_id = approvalId;
        return audit.hooks.toolCallEvent('queued', 'approval_required');
      }
    : undefined;
  let a: Awaited<ReturnType<GovernanceStore['createApproval']>>;
  try {
    a = await store.createApproval({ sourceId: w.source.id, identityId: w.identity.id, keyId: w.identity.keyId, requestId: w.requestId, sql: w.sql, params: w.params, classification, claimAttributes: keptClaims(w.identity, w.ruleAttributes) }, toolCallEvent);
  } catch (err) {
    // A full queue (issue 24 item 2) stores nothing: the call is refused, not queued, and audited as a refusal.
    if (err instanceof ApprovalQueueFullError) return { kind: 'refusal', code: 'approval_queue_full', extra: { scope: err.scope, limit: err.cap } };
    throw err;
  }
  if (audit && a.audited) audit.hooks.committed = true;
  return { kind: 'queued', approvalId: a.id, approvalState: a.state };
}
