/**
 * Pipeline step 2, source resolution (contract: "Unavailable or unknown source"): the named source
 * must exist and be granted to the caller (else not_found, so ungranted sources are never
 * disclosed), and be enabled (else unavailable, source_disabled).
 */
import type { AccessEvaluator } from '../governance/evaluator';
import type { GovernanceStore, SourceRecord } from '../governance/store';
import type { ToolOutcome } from './types';

/** Resolves `sourceId` for the caller; returns the record or the refusal. */
export async function sourceStep(store: GovernanceStore, evaluator: AccessEvaluator, sourceId: string): Promise<{ ok: true; source: SourceRecord } | { ok: false; outcome: ToolOutcome }> {
  const source = await store.getSource(sourceId);
  if (!source || !evaluator.hasGrant(sourceId)) {
    return { ok: false, outcome: { kind: 'refusal', code: 'unknown_source', message: `No source with id '${sourceId}' is visible to this identity. Call interlock_list_sources for the ids you may use.` } };
  }
  if (!source.enabled) return { ok: false, outcome: { kind: 'refusal', code: 'source_disabled', message: `Source '${sourceId}' is disabled by an operator.` } };
  return { ok: true, source };
}
