/**
 * The audit module's shared types (issue 25, item 2): the canonical event, one per tools/call
 * (contract: Governance, "canonical audit"), the sink every layer records through, and the stored
 * row the writer appends. Types only (and the in-memory sink), so every layer may import them
 * without importing upward. Never carries an API key or a redacted value.
 */

/** How a tool call ended (the `decision` of kind tool_call). */
export const TOOL_CALL_DECISIONS = ['allowed', 'refused', 'queued', 'invalid', 'failed', 'cancelled'] as const;
/** How a tool call ended. */
export type AuditDecision = (typeof TOOL_CALL_DECISIONS)[number];

/** Approval actions recorded in the trail (the `decision` of kind approval). */
export const APPROVAL_ACTIONS = ['queued', 'approved', 'rejected', 'executed', 'failed', 'expired', 'refused', 'requeued'] as const;

/**
 * Configuration changes recorded in the trail (the `decision` of kind config; spec/openapi-v1.yaml
 * GET /admin/v1/audit `decision`; test/unit/audit/decisions.test.ts checks every one src/ records is here).
 */
export const CONFIG_DECISIONS = [
  'applied', 'source_added', 'source_updated', 'source_removed', 'source_disabled', 'source_enabled', 'role_created', 'role_updated', 'role_removed',
  'grant_added', 'grant_revoked', 'identity_created', 'identity_disabled', 'identity_enabled', 'identity_attributes_changed',
  'identity_subject_linked', 'identity_subject_unlinked', 'key_created', 'key_revoked', 'policy_added', 'policy_updated', 'policy_removed',
  'operator_token_created', 'operator_token_revoked', 'claim_rules_synced', 'claim_mapping_updated', 'audit_key_registered', 'audit_key_retired',
] as const;

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

/**
 * What the dispatcher lends the pipeline about the call's audit event (on the context as
 * `auditHooks`): `toolCallEvent` builds the event as it stands (details so far, duration until
 * now); a step that commits the event itself, in its own transaction (a queued write with its
 * approval row, issue 11), sets `committed` so the dispatcher does not record it again.
 */
export interface AuditHooks {
  toolCallEvent(decision: AuditDecision, reason: string | null): ToolCallAuditEvent;
  committed: boolean;
}

/** Where audit events go. `record` must not throw for a single bad event; it may throw when the store is down. */
export interface AuditSink {
  record(event: ToolCallAuditEvent): Promise<void>;
  /**
   * Why the control database's keyed trail refuses this sink's batches (a fault of the gateway's
   * configuration: no audit key, one not registered, or one retired; GroupCommitAuditSink.keyRefusal),
   * or null; absent: never.
   */
  keyRefusal?(): string | null;
}

/** An AuditSink that keeps events in memory (tests, and the fixture-only server). */
export class MemoryAuditSink implements AuditSink {
  readonly events: ToolCallAuditEvent[] = [];
  async record(event: ToolCallAuditEvent): Promise<void> {
    this.events.push(event);
  }
}

/** Kinds of audit event. */
export type AuditKind = 'tool_call' | 'approval' | 'config';

/**
 * One row for interlock_audit_append_v2 (migration 20261201800000000): the audit_events columns
 * without id, batch_id and recorded_at; a null `time` means the time it is appended.
 */
export interface AuditRowInput {
  kind: AuditKind;
  time: string | null;
  request_id: string | null;
  identity_id: string | null;
  key_id: string | null;
  tool: string | null;
  canonical_tool: string | null;
  dialect: string | null;
  protocol_version: string | null;
  decision: string;
  reason_code: string | null;
  source_id: string | null;
  action: string | null;
  fingerprint: string | null;
  relations: string[] | null;
  row_count: number | null;
  duration_ms: number | null;
  approval_id: string | null;
  operator: string | null;
  details: Record<string, unknown>;
}
