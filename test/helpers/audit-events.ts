/** Audit events for tests. */
import { randomBytes } from 'node:crypto';
import { auditKey, type AuditKey } from '../../src/audit/key';
import type pg from 'pg';
import type { AuditRowInput } from '../../src/audit/writer';
import type { ToolCallAuditEvent } from '../../src/audit/types';

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

/** One stored audit row for chain tests: an allowed interlock_query read of chinook with a fixed time. */
export const BASE_AUDIT_ROW: AuditRowInput = {
  kind: 'tool_call',
  time: '2026-12-01T10:00:00.123Z',
  request_id: 'req_x',
  identity_id: 'idn_0123456789abcdef0123',
  key_id: null,
  tool: 'interlock_query',
  canonical_tool: 'interlock_query',
  dialect: 'handshake',
  protocol_version: '2025-11-25',
  decision: 'allowed',
  reason_code: null,
  source_id: 'chinook',
  action: 'read',
  fingerprint: 'fp',
  relations: ['public.track'],
  row_count: 1,
  duration_ms: 0.25,
  approval_id: null,
  operator: null,
  details: {},
};

/** Runs `sql` on `pool` as its (superuser) role with triggers off: what only the owner or a superuser can do to the trail. */
export async function tamperAsSuperuser(pool: pg.Pool, sql: string, params: unknown[] = []): Promise<void> {
  const c = await pool.connect();
  try {
    await c.query("SET session_replication_role = 'replica'");
    await c.query(sql, params);
  } finally {
    await c.query("SET session_replication_role = 'origin'").catch(() => undefined);
    c.release();
  }
}

/**
 * Stalls every audit append on `client` (a superuser or the owner) in an open transaction: takes the
 * format-1/2 chain's lock (the row of audit_chain_lock, migration 20261201800000000) and a SHARE
 * lock on audit_batches, which every append's INSERT waits for (format 3, issue 28, takes no chain
 * lock); the returned function lets both go (ROLLBACK).
 */
export async function holdChainLock(client: pg.ClientBase): Promise<() => Promise<void>> {
  await client.query('BEGIN');
  await client.query('SELECT 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE');
  await client.query('LOCK TABLE audit_batches IN SHARE MODE');
  return async () => {
    await client.query('ROLLBACK');
  };
}

/** Appends `rows` through the format-1 function interlock_audit_append (what a gateway before format 2 does); returns the batch id. */
export async function appendFormat1(pool: pg.Pool, rows: Array<Partial<AuditRowInput>>): Promise<string> {
  return (await pool.query<{ b: string }>('SELECT interlock_audit_append($1::jsonb)::text AS b', [JSON.stringify(rows)])).rows[0].b;
}

/** A new random audit key (32 random bytes, base64), src/audit/key.ts. */
export function randomAuditKey(): AuditKey {
  return auditKey(randomBytes(32).toString('base64'));
}

/** BASE_AUDIT_ROW with request id `request` and the columns of `extra` over it. */
export function auditRow(request: string, extra: Partial<AuditRowInput> = {}): AuditRowInput {
  return { ...BASE_AUDIT_ROW, request_id: request, ...extra };
}

/** A verify report's mismatches as [batch id, fault] pairs, in its order. */
export function faultPairs(r: { mismatches: Array<{ batchId: string; fault: string }> }): string[][] {
  return r.mismatches.map((m) => [m.batchId, m.fault]);
}

/** The SQLSTATE `sql` fails with on `c` ('ok' when it succeeds; the error's text when it has none). */
export function sqlStateOf(c: { query: (s: string, p?: unknown[]) => Promise<unknown> }, sql: string, params: unknown[] = []): Promise<string> {
  return c.query(sql, params).then(
    () => 'ok',
    (e: { code?: string }) => e.code ?? String(e),
  );
}
