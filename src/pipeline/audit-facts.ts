/**
 * The statement facts an audit event carries (issue 11, Build 4). Kept in the pipeline, beside the
 * step that records them, because it needs the SQL parser; the event types are in `src/audit/types.ts`.
 */
import { createHmac } from 'node:crypto';
import { fingerprintSql } from '../sql/parser';

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
