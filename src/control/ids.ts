/**
 * Random identifiers of control-plane records: `idn_` identities, `key_` API keys, `apr_`
 * approvals, each a prefix plus lower-case hex from node:crypto (80 bits for identities and keys,
 * 96 bits for approvals). Ids are not secrets; API-key secrets are made in keys.ts.
 */
import { randomBytes } from 'node:crypto';

/** A new identity id, e.g. "idn_0f3a9c2e71b4d5a68c90". */
export function newIdentityId(): string {
  return 'idn_' + randomBytes(10).toString('hex');
}

/** A new API key id, e.g. "key_5be0c1d2e3f4a5b6c7d8". */
export function newKeyId(): string {
  return 'key_' + randomBytes(10).toString('hex');
}

/** A new approval id, e.g. "apr_0123456789abcdef01234567". */
export function newApprovalId(): string {
  return 'apr_' + randomBytes(12).toString('hex');
}

/** Converts a timestamp column value (Date or null) to ISO-8601 UTC text or null. */
export function iso(v: Date | string | null | undefined): string | null {
  if (v === null || v === undefined) return null;
  return (v instanceof Date ? v : new Date(v)).toISOString();
}
