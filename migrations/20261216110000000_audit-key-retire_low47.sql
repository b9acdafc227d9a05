-- InterLock control database: retiring a registered audit key id (task low47 item 1).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- Before (migration 20261216100000000_audit-keyed-chain_f1): key ids registered in audit_keyed_trail
-- stay accepted for good, and the owner's trigger looks only at a chain's genesis (format 5, seq 0).
-- A key known stolen after a rotation could still start chains, and a gateway still configured with it
-- kept appending to its open chains.
--
-- Now audit_keyed_trail.retired_key_ids lists registered ids the owner retired (`interlock audit
-- retire-key <key-id>`, src/audit/keyed-trail.ts, recorded as config event audit_key_retired). The
-- table's CHECK keeps every retired id registered and at least one registered id not retired. The
-- trigger function refuses every format-5 batch under a retired id (42501, the message naming the key
-- id as retired and what to do), whoever inserts it; batches already stored under it stay, and verify
-- authenticates them with the key given (audit.previous_keys). Registering again (`require-key`, a
-- gateway owning the trail at start) never takes an id off the retired list.
--
-- So that a keyed lane's ordinary batch still pays no trigger call (the WHEN of the f1 migration),
-- interlock_audit_retire_key() (owner only: EXECUTE revoked from PUBLIC, and it alters the owner's
-- trigger) rebuilds the trigger with the retired ids as constants in its WHEN: a format-5 batch reaches
-- the function when it is a genesis or its mac_key_id is retired. Until an id is retired the trigger is
-- the f1 migration's, unchanged.
--
-- Where each retirement happened (task ret47): a queued write's tool-call event is stored on the format-2
-- chain (interlock_audit_append_v2, which the runtime role may run) with an HMAC tag under the gateway's
-- key (details.audit_tag, src/audit/call-tag.ts); no trigger judges that tag, so a thief holding the
-- retired (leaked) key and the runtime credential could still store a tagged call that verify, given the
-- retired key to check the old batches, authenticates. interlock_audit_retire_key therefore records in
-- audit_keyed_trail.retired_after ({key id: decimal text}) the high-water mark of audit_batches_id_seq
-- (last_value, less one when not yet called) when it retires the id, after taking the two chains' lock
-- rows (audit_chain_lock, audit_config_chain_lock: every format-1/2/4 append holds one from before it
-- draws its batch id until it commits) and then audit_batches in ACCESS EXCLUSIVE mode, which its DROP
-- TRIGGER takes anyway (every other insert holds ROW EXCLUSIVE from before its DEFAULT draws the id):
-- no batch is in flight while the mark is read, so
-- every batch committed before the retirement has an id at or below it and every batch stored after has
-- a greater one (the sequence only grows: the runtime role has USAGE on it, i.e. nextval, not setval;
-- an id it draws and never uses only raises the mark). Verify names a batch under a retired id, or a
-- tool-call event tagged under one, whose batch id is past that id's mark (`retired_key`). Retiring an
-- id again keeps its first mark. Rows retired by an earlier build of this migration get the mark of the
-- time it runs again.
--
-- Down: refused while an id is retired (going down would accept it again); else everything is put back.

-- Up Migration

ALTER TABLE audit_keyed_trail ADD COLUMN IF NOT EXISTS retired_key_ids text[] NOT NULL DEFAULT '{}'
  CONSTRAINT audit_keyed_trail_retired_check CHECK (array_position(retired_key_ids, NULL) IS NULL
    AND retired_key_ids <@ key_ids AND NOT (key_ids <@ retired_key_ids));
ALTER TABLE audit_keyed_trail ADD COLUMN IF NOT EXISTS retired_after jsonb NOT NULL DEFAULT '{}'
  CONSTRAINT audit_keyed_trail_retired_after_check CHECK (jsonb_typeof(retired_after) = 'object');
UPDATE audit_keyed_trail t SET retired_after = (
    SELECT jsonb_object_agg(k, s.mark::text)
      FROM unnest(t.retired_key_ids) k, (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END AS mark FROM audit_batches_id_seq) s) || t.retired_after
  WHERE cardinality(retired_key_ids) > 0;

CREATE OR REPLACE FUNCTION interlock_audit_refuse_unkeyed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
  registered text[];
  retired text[];
BEGIN
  SELECT key_ids, retired_key_ids INTO registered, retired FROM audit_keyed_trail;
  IF NOT FOUND THEN
    RETURN NEW;
  END IF;
  IF NEW.format = 3 THEN
    RAISE EXCEPTION 'audit_batches: the audit trail is keyed (audit_keyed_trail): an unkeyed (format-3) batch is refused; give the gateway its audit key (audit.key / INTERLOCK_AUDIT_KEY)'
      USING ERRCODE = '42501';
  ELSIF NEW.mac_key_id::text = ANY (retired) THEN
    RAISE EXCEPTION 'audit_batches: the audit trail is keyed (audit_keyed_trail) and audit key id % is retired (`interlock audit retire-key`): configure a registered key that is not retired as audit.key (the retired key only in audit.previous_keys, to verify its batches)', NEW.mac_key_id
      USING ERRCODE = '42501';
  ELSIF NOT (NEW.mac_key_id::text = ANY (registered)) THEN
    RAISE EXCEPTION 'audit_batches: the audit trail is keyed (audit_keyed_trail) and audit key id % is not registered: with that key configured (audit.key, the keys still in use in audit.previous_keys), run `interlock audit require-key` as the owner of the control tables', NEW.mac_key_id
      USING ERRCODE = '42501';
  END IF;
  RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION interlock_audit_retire_key(retire text) RETURNS text[]
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
  retired text[];
  mark bigint;
BEGIN
  -- No batch in flight while the mark is read (task ret47): the chains' lock rows first (the order the
  -- appends take them in: lock row, then audit_batches), then the table, held until commit.
  PERFORM 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE;
  PERFORM 1 FROM audit_config_chain_lock WHERE id = 1 FOR UPDATE;
  LOCK TABLE audit_batches IN ACCESS EXCLUSIVE MODE; -- what DROP TRIGGER below takes anyway
  SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END INTO mark FROM audit_batches_id_seq;
  -- The table's CHECK refuses an id not registered and the last one not retired (23514); no row: nothing to retire.
  -- An id retired before keeps its first mark (the right operand of || wins).
  UPDATE audit_keyed_trail SET retired_key_ids = ARRAY(SELECT DISTINCT k FROM unnest(retired_key_ids || retire) k ORDER BY k),
      retired_after = jsonb_build_object(retire, mark::text) || retired_after
    RETURNING retired_key_ids INTO retired;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'audit_keyed_trail: the audit trail is not keyed (run `interlock audit require-key` first)' USING ERRCODE = '55000';
  END IF;
  DROP TRIGGER audit_batches_unkeyed_refused ON audit_batches;
  EXECUTE format('CREATE TRIGGER audit_batches_unkeyed_refused BEFORE INSERT ON audit_batches FOR EACH ROW '
    'WHEN (NEW.format = 3 OR (NEW.format = 5 AND (NEW.seq = 0 OR NEW.mac_key_id::text = ANY (%L::text[])))) '
    'EXECUTE FUNCTION interlock_audit_refuse_unkeyed()', retired);
  RETURN retired;
END
$$;
REVOKE EXECUTE ON FUNCTION interlock_audit_retire_key(text) FROM PUBLIC;

-- Down Migration

DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM audit_keyed_trail WHERE cardinality(retired_key_ids) > 0) THEN
    RAISE EXCEPTION 'audit_keyed_trail has retired audit key ids: migrating down would accept their batches again';
  END IF;
END
$$;
DROP FUNCTION interlock_audit_retire_key(text);
CREATE OR REPLACE FUNCTION interlock_audit_refuse_unkeyed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
  registered text[];
BEGIN
  SELECT key_ids INTO registered FROM audit_keyed_trail;
  IF NOT FOUND THEN
    RETURN NEW;
  END IF;
  IF NEW.format = 3 THEN
    RAISE EXCEPTION 'audit_batches: the audit trail is keyed (audit_keyed_trail): an unkeyed (format-3) batch is refused; give the gateway its audit key (audit.key / INTERLOCK_AUDIT_KEY)'
      USING ERRCODE = '42501';
  ELSIF NOT (NEW.mac_key_id::text = ANY (registered)) THEN
    RAISE EXCEPTION 'audit_batches: the audit trail is keyed (audit_keyed_trail) and audit key id % is not registered: with that key configured (audit.key, the keys still in use in audit.previous_keys), run `interlock audit require-key` as the owner of the control tables', NEW.mac_key_id
      USING ERRCODE = '42501';
  END IF;
  RETURN NEW;
END
$$;
ALTER TABLE audit_keyed_trail DROP COLUMN IF EXISTS retired_after;
ALTER TABLE audit_keyed_trail DROP COLUMN retired_key_ids;
