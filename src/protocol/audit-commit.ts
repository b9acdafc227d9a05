/**
 * Audit before answer (issue 11, contract: Governance, "one canonical event per tools/call"): the
 * dispatcher releases a tool call's answer only after `commitAuditEvent` says its event committed.
 */
import type { Logger } from 'pino';
import type { AuditSink, ToolCallAuditEvent } from '../audit/types';
import type { ToolOutcome } from '../pipeline/types';
import { refusalCauseMessage } from '../errors/vocabulary';

/**
 * Records `event` through `sink` and resolves true once it has committed, false when the sink
 * failed or gave up (its bound passed): the caller then answers unavailable/audit_unavailable and
 * returns nothing. Never rejects. While the event waits, a client that goes away (`signal` aborts)
 * marks it details.delivered = false, unless the call was already cancelled; the outcome is
 * recorded either way. The returned promise (it never rejects) is kept in `pending` until it settles
 * (graceful shutdown awaits it). A failure is logged with the request id, tool and decision.
 * One promise of its own per call beside the sink's (issue 28 item 3: no async wrapper, await or
 * `finally` chain): the abort listener and the `pending` entry are dropped by the settling handler.
 */
export function commitAuditEvent(sink: AuditSink, event: ToolCallAuditEvent, signal: AbortSignal, logger: Logger, pending: Set<Promise<unknown>>): Promise<boolean> {
  const undelivered = () => {
    if (event.decision !== 'cancelled') event.details.delivered = false;
  };
  if (signal.aborted) undelivered();
  else signal.addEventListener('abort', undelivered, { once: true });
  let recorded: Promise<void>;
  try {
    recorded = sink.record(event);
  } catch (err) {
    recorded = Promise.reject(err);
  }
  const committed: Promise<boolean> = recorded.then(
    () => {
      signal.removeEventListener('abort', undelivered);
      pending.delete(committed);
      return true;
    },
    (err) => {
      signal.removeEventListener('abort', undelivered);
      pending.delete(committed);
      logger.error(
        { component: 'audit', requestId: event.requestId, tool: event.canonicalTool, decision: event.decision, reason: event.reasonCode, err: String((err as Error)?.message ?? err) },
        'audit event not committed; answering audit_unavailable',
      );
      return false;
    },
  );
  pending.add(committed);
  return committed;
}

/**
 * The refusal of a call whose event did not commit: `audit_unavailable` (status unavailable, no
 * retry_after_ms). While the keyed trail refuses `sink`'s audit key (AuditSink.keyRefusal: a fault of
 * the gateway's configuration, not a passing one), its message is the code's `audit_key_refused`
 * cause's (spec/errors-v1.json), which tells the agent a repeat will not help until an operator
 * fixes it; otherwise the code's default message (try again later).
 */
export function auditUnavailableOutcome(sink: AuditSink): ToolOutcome {
  if (sink.keyRefusal?.()) return { kind: 'refusal', code: 'audit_unavailable', message: refusalCauseMessage('audit_unavailable', 'audit_key_refused') };
  return { kind: 'refusal', code: 'audit_unavailable' };
}
