/**
 * The canonical audit event, one per tools/call (contract: Governance, "canonical audit").
 * Never carries an API key or a redacted value.
 */

/** How a tool call ended. */
export type AuditDecision = 'allowed' | 'refused' | 'queued' | 'invalid' | 'failed' | 'cancelled';

/** One audit event for one tools/call. Times are ISO-8601 UTC; durations in milliseconds. */
export interface ToolCallAuditEvent {
  requestId: string;
  time: string;
  identityId: string | null;
  keyId: string | null;
  tool: string;
  canonicalTool: string;
  dialect: 'modern' | 'handshake';
  protocolVersion: string;
  decision: AuditDecision;
  /** Refusal or tool-error code, e.g. "policy_denied"; null when allowed. */
  reasonCode: string | null;
  durationMs: number;
  /** Step-specific facts filled by the pipeline: source_id, action, statement fingerprint, relations, row_count, approval_id … */
  details: Record<string, unknown>;
}

/** Where audit events go. `record` must not throw for a single bad event; it may throw when the store is down. */
export interface AuditSink {
  record(event: ToolCallAuditEvent): Promise<void>;
}

/** An AuditSink that keeps events in memory (tests, and the fixture-only server). */
export class MemoryAuditSink implements AuditSink {
  readonly events: ToolCallAuditEvent[] = [];
  async record(event: ToolCallAuditEvent): Promise<void> {
    this.events.push(event);
  }
}
