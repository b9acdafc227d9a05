/**
 * The canonical audit event, one per tools/call (contract: Governance, "canonical audit").
 * Never carries an API key or a redacted value.
 */
import { createHmac } from 'node:crypto';
import { fingerprintSql } from '../sql/parser';

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
}

/** An AuditSink that keeps events in memory (tests, and the fixture-only server). */
export class MemoryAuditSink implements AuditSink {
  readonly events: ToolCallAuditEvent[] = [];
  async record(event: ToolCallAuditEvent): Promise<void> {
    this.events.push(event);
  }
}

/**
 * What the audit records of a statement's text (issue 11, Build 4), for every event that carries
 * one, refused or not: `{fingerprint}` = libpg-query's fingerprint (16 hex digits; constants,
 * comments and layout removed) when the text parses; otherwise `{fingerprint: "hmac:<64 hex>",
 * statement_unparsed: true}`, an HMAC-SHA-256 keyed with `secret` (derived from the server's key
 * pepper), so equal texts can be matched without the text, which may hold values, being stored.
 */
export function statementAuditFacts(sql: string, secret: string): { fingerprint: string; statement_unparsed?: true } {
  try {
    return { fingerprint: fingerprintSql(sql) };
  } catch {
    return { fingerprint: `hmac:${createHmac('sha256', secret).update('interlock-audit-statement-v1\u0000').update(sql).digest('hex')}`, statement_unparsed: true };
  }
}
