-- InterLock control database: the keyed audit chain, format 5 (red team rt45b finding F1; task f1).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- Before: a writer lane's batch (format 3) is tagged with an unkeyed SHA-256, so a holder of the
-- runtime role's credential could start a format-3 chain of its own that `interlock audit verify`
-- accepts like the gateway's (a forged event, or a second event for an answered call).
--
-- Now a gateway given an audit key (audit.key / INTERLOCK_AUDIT_KEY, kept outside this database;
-- src/audit/key.ts) writes format 5: the format-3 chain whose tag is HMAC-SHA-256 under the key, with
-- the key's id (a non-secret fingerprint) in the new column mac_key_id (src/audit/chain.ts).
--
-- Downgrade: once the trail is keyed, an unkeyed batch must not pass as honest. The trail becomes keyed
-- only by its owner (red team rt46b G2: never by a batch someone inserts, since a holder of the runtime
-- role's credential can insert a format-5 genesis under any key id): the owner-only table
-- audit_keyed_trail holds at most one row, written by `interlock audit require-key` (owner) or by a
-- gateway whose role owns the trail at its start (the embedded demo), with the key ids of the keys
-- configured (key_ids: signing and previous; running it again after a rotation adds the new ids).
-- While it holds its row, the owner's trigger refuses every format-3 batch, and every format-5 genesis
-- (seq 0) whose mac_key_id is not registered (42501, the message naming what to run), whoever inserts
-- it. A later format-5 batch of an unregistered key is not checked here: its chain has no accepted
-- genesis (verify: broken_link) or its tag is under another key (verify: unknown_key). The runtime role
-- can neither write that table nor drop or disable the trigger (it owns neither). Verify names a
-- format-3 batch whose id is past audit_keyed_trail.since_batch or, given a key, past the first batch
-- that key authenticates (`unkeyed_batch`): ids come from the owner's sequence (the runtime role has no
-- INSERT on audit_batches.id, nor setval). The triggers fire only for a format-3 batch or a format-5
-- genesis (WHEN on the new row, checked without calling a function): a keyed lane's ordinary batch
-- pays no trigger call.
--
-- Roles that may append format-3 batches (INSERT on audit_batches.format: `interlock db
-- grant-runtime-role`) get INSERT on mac_key_id, so an upgraded gateway works before grant-runtime-role
-- runs again; the row-level policy lets them insert format 3 or 5.
--
-- Down: refused while a format-5 batch exists (it would not verify); else everything is put back.

-- Up Migration

-- The key id's one-column invariant is a domain, as the trail's others (migration 20261214100000000:
-- PostgreSQL keeps a domain's check planned per backend, a table CHECK is compiled per statement); the
-- two-column invariants stay the one table CHECK, audit_batches_chain_check, extended.
CREATE DOMAIN audit_key_id AS text CONSTRAINT audit_key_id_check CHECK (VALUE ~ '^[0-9a-f]{16}$');
-- As the trail's other domains (migration 20261215100000000): only the owner may make objects depend on it.
REVOKE USAGE ON DOMAIN audit_key_id FROM PUBLIC;
ALTER TABLE audit_batches ADD COLUMN mac_key_id audit_key_id;
ALTER DOMAIN audit_format DROP CONSTRAINT audit_format_check;
ALTER DOMAIN audit_format ADD CONSTRAINT audit_format_check CHECK (VALUE IN (1, 2, 3, 4, 5)) NOT VALID;
ALTER TABLE audit_batches DROP CONSTRAINT audit_batches_chain_check;
ALTER TABLE audit_batches ADD CONSTRAINT audit_batches_chain_check
  CHECK ((format IN (3, 5)) = (chain_id IS NOT NULL AND seq IS NOT NULL) AND (format = 5) = (mac_key_id IS NOT NULL)) NOT VALID;
DROP POLICY audit_batches_lanes ON audit_batches;
CREATE POLICY audit_batches_lanes ON audit_batches FOR INSERT WITH CHECK (format IN (3, 5));

CREATE TABLE audit_keyed_trail (
  only_row    boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  since_batch bigint NOT NULL CHECK (since_batch >= 0),
  key_ids     text[] NOT NULL CHECK (cardinality(key_ids) BETWEEN 1 AND 64 AND array_position(key_ids, NULL) IS NULL
                AND array_to_string(key_ids, ',') ~ '^[0-9a-f]{16}(,[0-9a-f]{16})*$'),
  set_at      timestamptz NOT NULL DEFAULT now(),
  set_by      text NOT NULL CHECK (set_by IN ('require_key', 'gateway_start'))
);
REVOKE ALL ON audit_keyed_trail FROM PUBLIC;

CREATE FUNCTION interlock_audit_refuse_unkeyed() RETURNS trigger
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
REVOKE EXECUTE ON FUNCTION interlock_audit_refuse_unkeyed() FROM PUBLIC;

CREATE TRIGGER audit_batches_unkeyed_refused BEFORE INSERT ON audit_batches
  FOR EACH ROW WHEN (NEW.format = 3 OR (NEW.format = 5 AND NEW.seq = 0)) EXECUTE FUNCTION interlock_audit_refuse_unkeyed();

DO $$
DECLARE
  r record;
BEGIN
  FOR r IN
    SELECT DISTINCT g.rolname
      FROM pg_attribute a CROSS JOIN LATERAL aclexplode(a.attacl) x JOIN pg_roles g ON g.oid = x.grantee
     WHERE a.attrelid = 'audit_batches'::regclass AND a.attname = 'format' AND x.privilege_type = 'INSERT'
  LOOP
    EXECUTE format('GRANT INSERT (mac_key_id) ON audit_batches TO %I', r.rolname);
  END LOOP;
END
$$;

-- Down Migration

DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM audit_batches WHERE format = 5) THEN
    RAISE EXCEPTION 'audit_batches holds format-5 (keyed) batches: migrating down would leave them unverifiable';
  END IF;
END
$$;
DROP TRIGGER audit_batches_unkeyed_refused ON audit_batches;
DROP FUNCTION interlock_audit_refuse_unkeyed();
DROP TABLE audit_keyed_trail;
DROP POLICY audit_batches_lanes ON audit_batches;
CREATE POLICY audit_batches_lanes ON audit_batches FOR INSERT WITH CHECK (format = 3);
ALTER TABLE audit_batches DROP CONSTRAINT audit_batches_chain_check;
ALTER TABLE audit_batches ADD CONSTRAINT audit_batches_chain_check
  CHECK ((format = 3) = (chain_id IS NOT NULL AND seq IS NOT NULL)) NOT VALID;
ALTER DOMAIN audit_format DROP CONSTRAINT audit_format_check;
ALTER DOMAIN audit_format ADD CONSTRAINT audit_format_check CHECK (VALUE IN (1, 2, 3, 4)) NOT VALID;
ALTER TABLE audit_batches DROP COLUMN mac_key_id;
DROP DOMAIN audit_key_id;
