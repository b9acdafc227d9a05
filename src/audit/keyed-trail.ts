/**
 * The keyed trail's registration (migration 20261216100000000_audit-keyed-chain_f1, red team rt46b
 * G2): the owner of the control tables marks the trail keyed and registers the ids of the audit keys
 * in use (audit_keyed_trail.key_ids). From then on the owner's trigger refuses every unkeyed
 * (format-3) batch and every keyed genesis (format 5, seq 0) whose key id is not registered (42501),
 * and verify names a format-3 batch after `since_batch` (`unkeyed_batch`). Only the owner can write
 * the row: no batch anyone inserts keys the trail. Called by `interlock audit require-key`
 * (src/cli/audit.ts) and, at start, by a gateway whose role owns the trail (src/gateway.ts).
 * docs/operators.md ("The audit key").
 */
import type pg from 'pg';

/** What registerAuditKeyIds did. */
export interface KeyedTrailRegistration {
  /** The trail was keyed before this call (then `sinceBatch` and `setBy` are the row's, unchanged). */
  already: boolean;
  /** The batch id after which an unkeyed batch is a fault (the newest batch id when first keyed, 0 on an empty trail), decimal text. */
  sinceBatch: string;
  /** Who first keyed the trail: 'require_key' (`interlock audit require-key`) or 'gateway_start' (a gateway owning the trail). */
  setBy: 'require_key' | 'gateway_start';
  /** Every registered key id, sorted (AUDIT_KEY_ID_LENGTH hex digits each). */
  keyIds: string[];
  /** The ids of `keyIds` this call registered (those not registered before), sorted. */
  added: string[];
}

/**
 * Marks the trail keyed (when it is not) and registers `keyIds` (AuditKey ids: the signing key and the
 * previous keys of the configuration) beside those already registered; never removes one. Owner only:
 * the runtime role gets 42501 (no privilege on audit_keyed_trail). Throws a pg error on failure; the
 * caller checks `keyIds` is not empty (the table's CHECK refuses an empty list: 23514).
 */
export async function registerAuditKeyIds(pool: pg.Pool | pg.ClientBase, keyIds: readonly string[], setBy: 'require_key' | 'gateway_start'): Promise<KeyedTrailRegistration> {
  const ids = [...new Set(keyIds)].sort();
  const before = await pool.query<{ key_ids: string[] }>('SELECT key_ids FROM audit_keyed_trail');
  const r = await pool.query<{ since: string; set_by: 'require_key' | 'gateway_start'; key_ids: string[] }>(
    `INSERT INTO audit_keyed_trail (since_batch, set_by, key_ids) SELECT coalesce(max(id), 0), $2, $1::text[] FROM audit_batches
     ON CONFLICT (only_row) DO UPDATE SET key_ids = ARRAY(SELECT DISTINCT k FROM unnest(audit_keyed_trail.key_ids || EXCLUDED.key_ids) k ORDER BY k)
     RETURNING since_batch::text AS since, set_by, key_ids`,
    [ids, setBy],
  );
  const had = new Set(before.rows[0]?.key_ids ?? []);
  const row = r.rows[0];
  return { already: before.rows.length > 0, sinceBatch: row.since, setBy: row.set_by, keyIds: row.key_ids, added: row.key_ids.filter((k) => !had.has(k)) };
}

/**
 * Whether the current role of `pool` owns audit_keyed_trail (or is a member of its owner, a superuser
 * included), so registerAuditKeyIds would succeed; false when the table does not exist (a control
 * database not migrated to format 5). Throws a pg error when the query fails.
 */
export async function ownsKeyedTrail(pool: pg.Pool | pg.ClientBase): Promise<boolean> {
  const r = await pool.query<{ owns: boolean | null }>("SELECT pg_has_role(c.relowner, 'USAGE') AS owns FROM pg_class c WHERE c.oid = to_regclass('audit_keyed_trail')");
  return r.rows[0]?.owns === true;
}
