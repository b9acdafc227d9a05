/** Audit events for tests. */
import type { ToolCallAuditEvent } from '../../src/pipeline/audit-types';

/** A tool-call audit event for tests: an allowed interlock_query read of chinook (1 row) with `details` merged in. */
export function toolCallEvent(requestId: string, details: Record<string, unknown> = {}): ToolCallAuditEvent {
  return {
    requestId,
    time: new Date().toISOString(),
    identityId: null,
    keyId: null,
    tool: 'interlock_query',
    canonicalTool: 'interlock_query',
    dialect: 'handshake',
    protocolVersion: '2025-11-25',
    decision: 'allowed',
    reasonCode: null,
    durationMs: 3,
    details: { source_id: 'chinook', action: 'read', row_count: 1, ...details },
  };
}
