/**
 * The keyed trail's registration (migration 20261216100000000_audit-keyed-chain_f1, red team rt46b
 * G2): the owner of the control tables marks the trail keyed and registers the ids of the audit keys
 * in use (audit_keyed_trail.key_ids). From then on the owner's trigger refuses every unkeyed
 * (format-3) batch and every keyed genesis (format 5, seq 0) whose key id is not registered (42501),
 * and verify names a format-3 batch after `since_batch` (`unkeyed_batch`). Only the owner can write
 * the row: no batch anyone inserts keys the trail. Called by `interlock audit require-key`
 * (src/cli/audit.ts) and, at start, by a gateway whose role owns the trail (src/gateway.ts).
 * A registered id can be retired (retireAuditKeyId, `interlock audit retire-key`; migration
 * 20261216110000000_audit-key-retire_low47): the trigger then refuses every batch under it, and verify
 * names anything under it stored after the retirement (`retired_key`, task ret47).
 * docs/operators.md ("The audit key").
 */
import type pg from 'pg';
import { withTransaction, type ControlDb } from '../control/db';
import { NotFoundError, ValidationError } from '../control/errors';
import { recordChange, type ChangeActor } from '../control/change-audit';
import { AUDIT_KEY_ID_LENGTH } from './key';

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
 * previous keys of the configuration) beside those already registered; never removes one. When it
 * registers an id not registered before, records config event `audit_key_registered` ({keyIds: the
 * ids added, setBy, sinceBatch}) in `actor`'s name (absent: the gateway itself) in the same
 * transaction, so a rotation leaves a trace in `audit search --kind config` (nu47). Owner only: the
 * runtime role gets 42501 (no privilege on audit_keyed_trail). Throws a pg error on failure; the
 * caller checks `keyIds` is not empty (the table's CHECK refuses an empty list: 23514).
 */
export async function registerAuditKeyIds(pool: pg.Pool, keyIds: readonly string[], setBy: 'require_key' | 'gateway_start', actor?: ChangeActor): Promise<KeyedTrailRegistration> {
  const ids = [...new Set(keyIds)].sort();
  return withTransaction({ pool }, async (c) => {
    const before = await c.query<{ key_ids: string[] }>('SELECT key_ids FROM audit_keyed_trail FOR UPDATE');
    const r = await c.query<{ since: string; set_by: 'require_key' | 'gateway_start'; key_ids: string[] }>(
      `INSERT INTO audit_keyed_trail (since_batch, set_by, key_ids) SELECT coalesce(max(id), 0), $2, $1::text[] FROM audit_batches
       ON CONFLICT (only_row) DO UPDATE SET key_ids = ARRAY(SELECT DISTINCT k FROM unnest(audit_keyed_trail.key_ids || EXCLUDED.key_ids) k ORDER BY k)
       RETURNING since_batch::text AS since, set_by, key_ids`,
      [ids, setBy],
    );
    const had = new Set(before.rows[0]?.key_ids ?? []);
    const row = r.rows[0];
    const added = row.key_ids.filter((k) => !had.has(k));
    if (added.length > 0) await recordChange(c, actor, 'audit_key_registered', { keyIds: added, setBy, sinceBatch: row.since });
    return { already: before.rows.length > 0, sinceBatch: row.since, setBy: row.set_by, keyIds: row.key_ids, added };
  });
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

/**
 * The retired key ids of the trail (audit_keyed_trail.retired_key_ids, sorted); empty when the trail is
 * not keyed. Throws a pg error (42501 for a role that may not read the table).
 */
export async function retiredAuditKeyIds(pool: pg.Pool | pg.ClientBase): Promise<string[]> {
  const r = await pool.query<{ retired_key_ids: string[] }>('SELECT retired_key_ids FROM audit_keyed_trail');
  return [...(r.rows[0]?.retired_key_ids ?? [])].sort();
}

/** What retireAuditKeyId did. */
export interface KeyRetirement {
  /** The id retired (AUDIT_KEY_ID_LENGTH hex digits). */
  keyId: string;
  /** It was retired before this call (then nothing changed and no event was recorded). */
  already: boolean;
  /** Every retired id, sorted. */
  retired: string[];
  /** The registered ids not retired, sorted (never empty). */
  active: string[];
}

/**
 * Retires the registered audit key id `keyId` (`interlock audit retire-key`, task low47): from the
 * commit on, the owner's trigger refuses every batch under it (42501, "is retired"), a running
 * gateway's open chains included; batches stored under it stay, and verify authenticates them with the
 * key given. The database function also records the batch id sequence's high-water mark, read with no
 * batch in flight (audit_keyed_trail.retired_after, task ret47): verify names a batch under the id, or a
 * queued call tagged under it (call-tag.ts), stored past it (`retired_key`). Recorded as config event `audit_key_retired` ({keyId}) in `actor`'s name, in the same
 * transaction. Owner only (the runtime role gets 42501). Throws ValidationError when `keyId` is not
 * AUDIT_KEY_ID_LENGTH lowercase hex digits, is `configured` (the signing key's id of the caller's
 * configuration), is the last registered id not retired, or the trail is not keyed; NotFoundError when
 * the id is not registered. Retiring a retired id changes nothing (`already`).
 */
export async function retireAuditKeyId(db: ControlDb, keyId: string, configured: string | null, actor: ChangeActor): Promise<KeyRetirement> {
  if (!new RegExp(`^[0-9a-f]{${AUDIT_KEY_ID_LENGTH}}$`).test(keyId)) {
    throw new ValidationError(`not an audit key id: ${JSON.stringify(keyId)} (${AUDIT_KEY_ID_LENGTH} lowercase hex digits, as \`interlock audit require-key\` and the gateway's start log print them)`);
  }
  if (keyId === configured) {
    throw new ValidationError(`audit key id ${keyId} is the key configured now (audit.key / INTERLOCK_AUDIT_KEY): configure the new key as audit.key and this one in audit.previous_keys, run \`interlock audit require-key\`, move every gateway to the new key, then retire ${keyId}`);
  }
  return withTransaction(db, async (c) => {
    const row = (await c.query<{ key_ids: string[]; retired_key_ids: string[] }>('SELECT key_ids, retired_key_ids FROM audit_keyed_trail FOR UPDATE')).rows[0];
    if (!row) throw new ValidationError('the audit trail is not keyed: there is no registered audit key id to retire (`interlock audit require-key` registers them)');
    const done = (retired: string[], already: boolean): KeyRetirement => ({ keyId, already, retired, active: row.key_ids.filter((k) => !retired.includes(k)).sort() });
    if (!row.key_ids.includes(keyId)) throw new NotFoundError(`audit key id ${keyId} is not registered (registered: ${[...row.key_ids].sort().join(', ')})`);
    if (row.retired_key_ids.includes(keyId)) return done(row.retired_key_ids, true);
    if (row.key_ids.every((k) => k === keyId || row.retired_key_ids.includes(k))) {
      throw new ValidationError(`audit key id ${keyId} is the last registered key id not retired: configure a new key as audit.key, register it with \`interlock audit require-key\`, then retire ${keyId}`);
    }
    const retired = (await c.query<{ r: string[] }>('SELECT interlock_audit_retire_key($1) AS r', [keyId])).rows[0].r;
    await recordChange(c, actor, 'audit_key_retired', { keyId });
    return done(retired, false);
  });
}
