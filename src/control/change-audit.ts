/**
 * Who made a governance change, and its kind-config audit event (issue hgov item 1): every change
 * of roles, grants, identities, keys, policies, operator tokens and sources records one event in
 * the same transaction as the change, so both commit or neither does. Details name what changed
 * (names and ids); never a key secret, token, password or hash, never an attribute's value.
 */
import type pg from 'pg';
import { recordConfigEvent } from '../audit/writer';

/** Who makes a change: the operator recorded in the audit event. */
export interface ChangeActor {
  /**
   * The operator's name: the OS user name in direct-mode CLI, the token's or console session's
   * operator through /admin/v1 and /console. Absent: SYSTEM_OPERATOR (the gateway itself, e.g.
   * demo provisioning).
   */
  operator?: string;
}

/** The operator recorded for a change made without one (the gateway's own provisioning). */
export const SYSTEM_OPERATOR = 'system';

/**
 * Records one kind-config event for a governance change on `c`, the change's transaction client.
 * `decision` is e.g. role_created, grant_added; `sourceId` when the change concerns one source.
 * A change about one identity names it in `details.identityId`; that id is also stored as the
 * event's identity_id (so `audit search --identity` finds identity_created, grant_added,
 * key_created, key_revoked, identity_disabled, …).
 */
export async function recordChange(c: pg.ClientBase, actor: ChangeActor | undefined, decision: string, details: Record<string, unknown>, sourceId: string | null = null): Promise<void> {
  const identityId = typeof details.identityId === 'string' ? details.identityId : null;
  await recordConfigEvent(c, { decision, operator: actor?.operator ?? SYSTEM_OPERATOR, sourceId, identityId, details });
}

/**
 * Revokes one credential row (an API key or an operator token) on `c` inside the caller's
 * transaction, keeping a first revocation time. Returns the row's `column` value and whether this
 * call revoked it (false when it already was), or null when no row has that id.
 */
export async function revokeCredentialRow(c: pg.ClientBase, table: 'api_keys' | 'operator_tokens', column: 'identity_id' | 'name', id: string): Promise<{ value: string; fresh: boolean } | null> {
  const r = await c.query<{ value: string; fresh: boolean }>(
    `WITH t AS (SELECT id, ${column} AS value, revoked_at IS NULL AS fresh FROM ${table} WHERE id = $1 FOR UPDATE)
     UPDATE ${table} o SET revoked_at = COALESCE(o.revoked_at, now()) FROM t WHERE o.id = t.id RETURNING t.value, t.fresh`,
    [id],
  );
  return r.rows[0] ?? null;
}
