/**
 * Pipeline step 6, write safety (contract: "A write never runs on the agent's call: it waits for an
 * operator's approval"). The exact statement, parameters, identity, source and classification are
 * stored; the agent gets the queued result (isError false, must not be retried).
 */
import type { SqlAnalysis } from '../sql/analyze';
import type { GovernanceStore, SourceRecord } from '../governance/store';
import type { Identity, ToolOutcome } from '../tools/types';

/** Queues the write and returns the queued outcome. */
export async function writeSafetyStep(
  store: GovernanceStore,
  w: { source: SourceRecord; identity: Identity; requestId: string; sql: string; params: unknown[]; analysis: Extract<SqlAnalysis, { ok: true }> },
): Promise<ToolOutcome> {
  const classification = {
    kind: w.analysis.kind,
    statement: w.analysis.statement,
    fingerprint: w.analysis.fingerprint,
    writes: w.analysis.writes,
    reads: w.analysis.reads.map((r) => ({ schema: r.schema, table: r.table })),
  };
  const a = await store.createApproval({ sourceId: w.source.id, identityId: w.identity.id, keyId: w.identity.keyId, requestId: w.requestId, sql: w.sql, params: w.params, classification });
  return { kind: 'queued', approvalId: a.id, approvalState: a.state };
}
