/**
 * Pipeline step 2, source resolution (contract: "Unavailable or unknown source"): the named source
 * must exist and be granted to the caller (else not_found, so ungranted sources are never
 * disclosed), and be enabled (else unavailable, source_disabled).
 */
import type { AccessEvaluator } from '../governance/evaluator';
import type { GovernanceStore, MaybePromise, SourceRecord } from '../governance/store';
import type { ToolOutcome } from './types';

/** The step's answer: the record, or the refusal to return. */
export type SourceStepResult = { ok: true; source: SourceRecord } | { ok: false; outcome: ToolOutcome };

/**
 * Resolves `sourceId` for the caller; returns the record or the refusal, synchronously when the
 * store answers from its cache (MaybePromise: no promise per call, issue 28 item 3). A store failure rejects.
 */
export function sourceStep(store: GovernanceStore, evaluator: AccessEvaluator, sourceId: string): MaybePromise<SourceStepResult> {
  const source = store.getSource(sourceId);
  return source instanceof Promise ? source.then((s) => decide(s, evaluator, sourceId)) : decide(source, evaluator, sourceId);
}

function decide(source: SourceRecord | null, evaluator: AccessEvaluator, sourceId: string): SourceStepResult {
  if (!source || !evaluator.hasGrant(sourceId)) {
    return { ok: false, outcome: { kind: 'refusal', code: 'unknown_source', message: `No source with id '${sourceId}' is visible to this identity. Call interlock_list_sources for the ids you may use.` } };
  }
  if (!source.enabled) return { ok: false, outcome: { kind: 'refusal', code: 'source_disabled', message: `Source '${sourceId}' is disabled by an operator.` } };
  return { ok: true, source };
}
