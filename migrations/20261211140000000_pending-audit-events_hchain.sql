-- InterLock control database: a sign-in never waits on the approval events' chain (task hchain; red
-- team rths, finding "a held sync that changed a grant holds the approval events' chain").
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- Before: interlock_provision_token_identity and interlock_sync_claim_grants (SECURITY DEFINER, called
-- by the gateway's runtime role at the sign-in of a token's identity) appended their events
-- (identity_created, grant_added, grant_revoked) through interlock_audit_append_chain on the format-2
-- chain, which serialises on the row of audit_chain_lock until the caller's transaction ends. A
-- runtime session (a stolen runtime credential, or any long transaction) that had appended and kept
-- its transaction open made every other sign-in that provisions or changes a claim grant, of any
-- issuer, wait for it: without bound, since the runtime pool sets no lock_timeout.
--
-- Now:
--
-- * audit_pending_events (id, time, event, deferred_at): events recorded but not yet chained, each as
--   format 2's canonical row text (interlock_system_config_event). Only the owner's functions write
--   it: PUBLIC holds nothing, row-level security allows SELECT only (no INSERT, UPDATE or DELETE
--   policy), and roles that could read the trail (SELECT on audit_events) may read it.
-- * interlock_audit_append_or_defer(events text[]) (owner's functions only): takes the chain's lock
--   row with FOR UPDATE SKIP LOCKED; when it gets it, appends the events as one format-2 batch as
--   before; when another transaction holds it, stores them (in their order) as pending and returns at
--   once. The two token functions record through it, in the statement that makes their change, so a
--   grant or identity never commits without its event, pending or chained.
-- * interlock_audit_append_chain (format 2, under the lock) first chains every pending event, in id
--   order, with its original time, as one format-2 batch of its own, then the caller's batch. Any
--   append on the format-2 chain (approval events, source-removal rejections, the token functions)
--   so drains them. interlock_audit_chain_batch is the batch insert itself (no lock), and
--   interlock_audit_chain_pending the drain (caller holds the lock); both owner's functions only.
-- * interlock_audit_seal_pending() (SECURITY DEFINER; EXECUTE for the roles that may run
--   interlock_sync_claim_grants, i.e. the gateway's runtime role): chains the pending events when the
--   lock is free (SKIP LOCKED: it never waits), returning how many (0: none), or NULL when some are
--   pending but the lock is held elsewhere. The gateway runs it every few seconds and at shutdown
--   (src/audit/pending.ts). It takes no argument: a caller can neither pick, reorder nor drop
--   pending events; rolled back, they stay pending.
-- * `interlock audit verify` reports pending events (count, oldest time) and names those older than
--   60 s (fault pending_stale): the chain's lock was held that long, or no gateway seals them.
--   Retention (`interlock audit archive`) drops partitions of audit_events only: never a pending event.
--
-- Down: chains the pending events (waiting for the lock), then restores the functions of
-- 20261208220000000 / 20261209210000000 and drops the table.

-- Up Migration

CREATE TABLE audit_pending_events (
  id          bigserial PRIMARY KEY,
  time        timestamptz NOT NULL,
  event       text NOT NULL CHECK (left(event, 1) = '{'),
  deferred_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
REVOKE ALL ON audit_pending_events FROM PUBLIC;
REVOKE ALL ON SEQUENCE audit_pending_events_id_seq FROM PUBLIC;
ALTER TABLE audit_pending_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY audit_pending_read ON audit_pending_events FOR SELECT USING (true);

-- One format-2 (or, when `config`, format-4) batch of `events` (a JSON array of canonical row texts),
-- without taking a lock: the caller holds the chain's lock row. As the body of
-- interlock_audit_append_chain of 20261208220000000. Returns the batch id.
CREATE FUNCTION interlock_audit_chain_batch(events text, config boolean) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  batch bigint;
  committed timestamptz := now();
  prev bytea;
BEGIN
  IF config THEN
    SELECT b.hash INTO prev FROM audit_batches b WHERE b.format = 4 ORDER BY b.id DESC LIMIT 1;
  ELSE
    SELECT b.hash INTO prev FROM audit_batches b WHERE b.format < 3 ORDER BY b.id DESC LIMIT 1;
  END IF;
  batch := nextval('audit_batches_id_seq');
  WITH ins AS (
    INSERT INTO audit_events (kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version,
        decision, reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, batch_id, recorded_at)
      SELECT r.kind, r.time, r.request_id, r.identity_id, r.key_id, r.tool, r.canonical_tool, r.dialect,
        r.protocol_version, r.decision, r.reason_code, r.source_id, r.action, r.fingerprint, r.relations, r.row_count, r.duration_ms,
        r.approval_id, r.operator, r.details, batch, committed
      FROM jsonb_populate_recordset(NULL::audit_events, events::jsonb) WITH ORDINALITY AS r
      ORDER BY r.ordinality
      RETURNING id, kind
  ), agg AS (
    SELECT count(*)::integer AS n, min(ins.id) AS lo, max(ins.id) AS hi, string_agg(ins.id::text, ',' ORDER BY ins.id) AS ids,
           bool_and(ins.kind = 'config') AS all_config, bool_or(ins.kind = 'config') AS any_config FROM ins
  )
  INSERT INTO audit_batches (id, committed_at, event_count, first_event_id, last_event_id, prev_hash, hash, format)
    SELECT batch, committed, agg.n, agg.lo, agg.hi, prev,
           CASE WHEN config THEN interlock_audit_batch_hash_v4(prev, batch, committed, agg.ids, events)
                ELSE interlock_audit_batch_hash_v2(prev, batch, committed, agg.ids, events) END,
           CASE WHEN config THEN 4 ELSE 2 END
      FROM agg
     -- The config chain holds config events only (checked on the stored rows, not on the text).
     WHERE CASE WHEN config THEN coalesce(agg.all_config, true) ELSE true END;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'the config chain holds kind-config events only' USING ERRCODE = '22023';
  END IF;
  RETURN batch;
END
$$;
REVOKE EXECUTE ON FUNCTION interlock_audit_chain_batch(text, boolean) FROM PUBLIC;

-- Chains every pending event (id order, original times) as one format-2 batch and deletes them; the
-- caller holds audit_chain_lock. Returns how many it chained.
CREATE FUNCTION interlock_audit_chain_pending() RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
  n integer;
  v_events text;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM audit_pending_events) THEN
    RETURN 0;
  END IF;
  WITH gone AS (DELETE FROM audit_pending_events RETURNING id, event)
  SELECT count(*)::integer, '[' || string_agg(gone.event, ',' ORDER BY gone.id) || ']' INTO n, v_events FROM gone;
  IF n > 0 THEN
    PERFORM interlock_audit_chain_batch(v_events, false);
  END IF;
  RETURN n;
END
$$;
REVOKE EXECUTE ON FUNCTION interlock_audit_chain_pending() FROM PUBLIC;

-- As 20261208220000000, and on the format-2 chain the pending events are chained first (above).
CREATE OR REPLACE FUNCTION interlock_audit_append_chain(events text, config boolean) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_variable
BEGIN
  IF events IS NULL OR config IS NULL THEN
    RAISE EXCEPTION 'events and config must not be null' USING ERRCODE = '22004';
  END IF;
  IF config THEN
    PERFORM 1 FROM audit_config_chain_lock WHERE id = 1 FOR UPDATE;
  ELSE
    PERFORM 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE;
    PERFORM interlock_audit_chain_pending();
  END IF;
  RETURN interlock_audit_chain_batch(events, config);
END
$$;
REVOKE EXECUTE ON FUNCTION interlock_audit_append_chain(text, boolean) FROM PUBLIC;

-- The token functions' events (canonical row texts, in order): chained now when the format-2 chain's
-- lock row is free (or this transaction holds it), else stored as pending, never waiting. Returns
-- true when chained, false when deferred; nothing to record is true.
CREATE FUNCTION interlock_audit_append_or_defer(events text[]) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
  IF events IS NULL OR cardinality(events) = 0 THEN
    RETURN true;
  END IF;
  PERFORM 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE SKIP LOCKED;
  IF FOUND THEN
    PERFORM interlock_audit_append_chain('[' || array_to_string(events, ',') || ']', false);
    RETURN true;
  END IF;
  INSERT INTO audit_pending_events (time, event)
  SELECT (u.e::jsonb ->> 'time')::timestamptz, u.e FROM unnest(events) WITH ORDINALITY AS u(e, o) ORDER BY u.o;
  RETURN false;
END
$$;
REVOKE EXECUTE ON FUNCTION interlock_audit_append_or_defer(text[]) FROM PUBLIC;

-- The gateway's background step (see above): never waits. Returns the events chained, or NULL when
-- some are pending but another transaction holds the chain's lock.
CREATE FUNCTION interlock_audit_seal_pending() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM audit_pending_events) THEN
    RETURN 0;
  END IF;
  PERFORM 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE SKIP LOCKED;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  RETURN interlock_audit_chain_pending();
END
$$;
REVOKE EXECUTE ON FUNCTION interlock_audit_seal_pending() FROM PUBLIC;

-- As 20261208220000000 (search_path as 20261208260000000), recording through interlock_audit_append_or_defer.
CREATE OR REPLACE FUNCTION interlock_provision_token_identity(p_id text, p_name text, p_issuer text, p_subject text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
  IF p_id IS NULL OR p_id !~ '^idn_[0-9a-f]{20}$' THEN
    RAISE EXCEPTION 'interlock_provision_token_identity: invalid identity id' USING ERRCODE = '22023';
  END IF;
  IF p_name IS NULL OR p_name !~ '^[a-z0-9][a-z0-9_.@-]{0,127}$' THEN
    RAISE EXCEPTION 'interlock_provision_token_identity: invalid identity name' USING ERRCODE = '22023';
  END IF;
  IF p_issuer IS NULL OR p_issuer !~ '^https?://' OR length(p_issuer) > 2048 THEN
    RAISE EXCEPTION 'interlock_provision_token_identity: invalid issuer' USING ERRCODE = '22023';
  END IF;
  IF p_subject IS NULL OR length(p_subject) = 0 OR length(p_subject) > 8192 THEN
    RAISE EXCEPTION 'interlock_provision_token_identity: invalid subject' USING ERRCODE = '22023';
  END IF;
  INSERT INTO identities (id, name) VALUES (p_id, p_name);
  INSERT INTO identity_subjects (issuer, subject, identity_id) VALUES (p_issuer, p_subject, p_id);
  PERFORM interlock_audit_append_or_defer(ARRAY[interlock_system_config_event('identity_created', NULL,
    '{"identity":' || to_json(p_name)::text || ',"identityId":' || to_json(p_id)::text || ',"issuer":' || to_json(p_issuer)::text || '}')]);
END
$$;

-- As 20261209210000000, recording through interlock_audit_append_or_defer.
CREATE OR REPLACE FUNCTION interlock_sync_claim_grants(p_issuer text, p_subject text, p_roles text[], p_sources text[])
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
  v_identity text;
  v_name text;
  v_disabled boolean;
  v_events text[] := '{}';
  v_head text;
BEGIN
  IF p_roles IS NULL OR p_sources IS NULL OR cardinality(p_roles) <> cardinality(p_sources) OR cardinality(p_roles) > 1024
     OR array_position(p_roles, NULL) IS NOT NULL OR array_position(p_sources, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'interlock_sync_claim_grants: roles and sources must be arrays of equal length (at most 1024) without nulls' USING ERRCODE = '22023';
  END IF;
  SELECT s.identity_id, i.name, i.disabled INTO v_identity, v_name, v_disabled
    FROM identity_subjects s JOIN identities i ON i.id = s.identity_id
   WHERE s.issuer = p_issuer AND s.subject = p_subject;
  IF v_identity IS NULL THEN
    RAISE EXCEPTION 'interlock_sync_claim_grants: no identity is linked to this token subject' USING ERRCODE = '22023';
  END IF;
  -- Only pairs some claim rule of this issuer names (red team rtop finding 5): a rule of the gateway
  -- configuration recorded in configured_claim_grants, or a rule of the issuer's claim mapping.
  -- Removals need no rule: a pair left out is taken back whatever the rules say.
  IF EXISTS (SELECT 1 FROM unnest(p_roles, p_sources) AS d(r, s)
              WHERE NOT EXISTS (SELECT 1 FROM configured_claim_grants c WHERE c.issuer = p_issuer AND c.role_name = d.r AND c.source_id = d.s)
                AND NOT EXISTS (SELECT 1 FROM claim_mappings m CROSS JOIN LATERAL jsonb_array_elements(m.role_grants) AS x(rule)
                                 WHERE m.issuer = p_issuer AND jsonb_typeof(x.rule) = 'object' AND x.rule->>'role' = d.r AND x.rule->>'source' = d.s)) THEN
    RAISE EXCEPTION 'interlock_sync_claim_grants: a (role, source) pair that no claim rule of this issuer names' USING ERRCODE = '42501';
  END IF;
  -- Details (keys sorted): grantedBy, identity, identityId, issuer, role.
  v_head := '{"grantedBy":"claims","identity":' || to_json(v_name)::text || ',"identityId":' || to_json(v_identity)::text
    || ',"issuer":' || to_json(p_issuer)::text || ',"role":';
  IF EXISTS (SELECT 1 FROM grants g WHERE g.identity_id = v_identity AND g.granted_by = 'claims'
               AND (g.role_name, g.source_id) NOT IN (SELECT d.r, d.s FROM unnest(p_roles, p_sources) AS d(r, s))) THEN
    WITH gone AS (
      DELETE FROM grants g WHERE g.identity_id = v_identity AND g.granted_by = 'claims'
         AND (g.role_name, g.source_id) NOT IN (SELECT d.r, d.s FROM unnest(p_roles, p_sources) AS d(r, s))
      RETURNING g.role_name, g.source_id
    )
    SELECT v_events || coalesce(array_agg(interlock_system_config_event('grant_revoked', gone.source_id, v_head || to_json(gone.role_name)::text || '}')
                                ORDER BY gone.source_id, gone.role_name), '{}')
      INTO v_events FROM gone;
  END IF;
  IF NOT v_disabled
     AND EXISTS (SELECT 1 FROM unnest(p_roles, p_sources) AS d(r, s) JOIN roles ro ON ro.name = d.r JOIN sources so ON so.id = d.s
                  WHERE NOT EXISTS (SELECT 1 FROM grants g WHERE g.identity_id = v_identity AND g.role_name = d.r AND g.source_id = d.s)) THEN
    WITH added AS (
      INSERT INTO grants (identity_id, role_name, source_id, granted_by)
      SELECT v_identity, ro.name, so.id, 'claims' FROM unnest(p_roles, p_sources) AS d(r, s)
        JOIN roles ro ON ro.name = d.r JOIN sources so ON so.id = d.s
      ON CONFLICT DO NOTHING
      RETURNING role_name, source_id
    )
    SELECT v_events || coalesce(array_agg(interlock_system_config_event('grant_added', added.source_id, v_head || to_json(added.role_name)::text || '}')
                                ORDER BY added.source_id, added.role_name), '{}')
      INTO v_events FROM added;
  END IF;
  PERFORM interlock_audit_append_or_defer(v_events);
END
$$;

-- The runtime roles (those that may run interlock_sync_claim_grants) may seal; roles that may read
-- the trail may read the pending events. An upgraded gateway so works before grant-runtime-role runs again.
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN
    SELECT DISTINCT g.rolname FROM pg_proc p CROSS JOIN LATERAL aclexplode(p.proacl) a JOIN pg_roles g ON g.oid = a.grantee
     WHERE p.oid = 'interlock_sync_claim_grants(text, text, text[], text[])'::regprocedure AND a.grantee <> p.proowner AND a.privilege_type = 'EXECUTE'
  LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION interlock_audit_seal_pending() TO %I', r.rolname);
  END LOOP;
  FOR r IN
    SELECT DISTINCT g.rolname FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a JOIN pg_roles g ON g.oid = a.grantee
     WHERE c.oid = 'audit_events'::regclass AND a.grantee <> c.relowner AND a.privilege_type = 'SELECT'
  LOOP
    EXECUTE format('GRANT SELECT ON audit_pending_events TO %I', r.rolname);
  END LOOP;
END
$$;

-- Down Migration

-- Pending events are chained first (as the owner, waiting for the lock), so none is lost.
DO $$
BEGIN
  PERFORM 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE;
  PERFORM interlock_audit_chain_pending();
END
$$;
-- The append itself (format 2, or format 4 when `config`), without any check of the caller: the
-- owner's functions only. Runs in the caller's transaction; returns the batch id.
CREATE OR REPLACE FUNCTION interlock_audit_append_chain(events text, config boolean) RETURNS bigint
LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  batch bigint;
  committed timestamptz := now();
  prev bytea;
BEGIN
  IF events IS NULL OR config IS NULL THEN
    RAISE EXCEPTION 'events and config must not be null' USING ERRCODE = '22004';
  END IF;
  IF config THEN
    PERFORM 1 FROM audit_config_chain_lock WHERE id = 1 FOR UPDATE;
    SELECT b.hash INTO prev FROM audit_batches b WHERE b.format = 4 ORDER BY b.id DESC LIMIT 1;
  ELSE
    PERFORM 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE;
    SELECT b.hash INTO prev FROM audit_batches b WHERE b.format < 3 ORDER BY b.id DESC LIMIT 1;
  END IF;
  batch := nextval('audit_batches_id_seq');
  WITH ins AS (
    INSERT INTO audit_events (kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version,
        decision, reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, batch_id, recorded_at)
      SELECT r.kind, r.time, r.request_id, r.identity_id, r.key_id, r.tool, r.canonical_tool, r.dialect,
        r.protocol_version, r.decision, r.reason_code, r.source_id, r.action, r.fingerprint, r.relations, r.row_count, r.duration_ms,
        r.approval_id, r.operator, r.details, batch, committed
      FROM jsonb_populate_recordset(NULL::audit_events, events::jsonb) WITH ORDINALITY AS r
      ORDER BY r.ordinality
      RETURNING id, kind
  ), agg AS (
    SELECT count(*)::integer AS n, min(ins.id) AS lo, max(ins.id) AS hi, string_agg(ins.id::text, ',' ORDER BY ins.id) AS ids,
           bool_and(ins.kind = 'config') AS all_config, bool_or(ins.kind = 'config') AS any_config FROM ins
  )
  INSERT INTO audit_batches (id, committed_at, event_count, first_event_id, last_event_id, prev_hash, hash, format)
    SELECT batch, committed, agg.n, agg.lo, agg.hi, prev,
           CASE WHEN config THEN interlock_audit_batch_hash_v4(prev, batch, committed, agg.ids, events)
                ELSE interlock_audit_batch_hash_v2(prev, batch, committed, agg.ids, events) END,
           CASE WHEN config THEN 4 ELSE 2 END
      FROM agg
     -- The config chain holds config events only (checked on the stored rows, not on the text).
     WHERE CASE WHEN config THEN coalesce(agg.all_config, true) ELSE true END;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'the config chain holds kind-config events only' USING ERRCODE = '22023';
  END IF;
  RETURN batch;
END
$$;
REVOKE EXECUTE ON FUNCTION interlock_audit_append_chain(text, boolean) FROM PUBLIC;
CREATE OR REPLACE FUNCTION interlock_provision_token_identity(p_id text, p_name text, p_issuer text, p_subject text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
  IF p_id IS NULL OR p_id !~ '^idn_[0-9a-f]{20}$' THEN
    RAISE EXCEPTION 'interlock_provision_token_identity: invalid identity id' USING ERRCODE = '22023';
  END IF;
  IF p_name IS NULL OR p_name !~ '^[a-z0-9][a-z0-9_.@-]{0,127}$' THEN
    RAISE EXCEPTION 'interlock_provision_token_identity: invalid identity name' USING ERRCODE = '22023';
  END IF;
  IF p_issuer IS NULL OR p_issuer !~ '^https?://' OR length(p_issuer) > 2048 THEN
    RAISE EXCEPTION 'interlock_provision_token_identity: invalid issuer' USING ERRCODE = '22023';
  END IF;
  IF p_subject IS NULL OR length(p_subject) = 0 OR length(p_subject) > 8192 THEN
    RAISE EXCEPTION 'interlock_provision_token_identity: invalid subject' USING ERRCODE = '22023';
  END IF;
  INSERT INTO identities (id, name) VALUES (p_id, p_name);
  INSERT INTO identity_subjects (issuer, subject, identity_id) VALUES (p_issuer, p_subject, p_id);
  PERFORM interlock_audit_append_chain('[' || interlock_system_config_event('identity_created', NULL,
    '{"identity":' || to_json(p_name)::text || ',"identityId":' || to_json(p_id)::text || ',"issuer":' || to_json(p_issuer)::text || '}') || ']', false);
END
$$;
CREATE OR REPLACE FUNCTION interlock_sync_claim_grants(p_issuer text, p_subject text, p_roles text[], p_sources text[])
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
  v_identity text;
  v_name text;
  v_disabled boolean;
  v_events text[] := '{}';
  v_head text;
BEGIN
  IF p_roles IS NULL OR p_sources IS NULL OR cardinality(p_roles) <> cardinality(p_sources) OR cardinality(p_roles) > 1024
     OR array_position(p_roles, NULL) IS NOT NULL OR array_position(p_sources, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'interlock_sync_claim_grants: roles and sources must be arrays of equal length (at most 1024) without nulls' USING ERRCODE = '22023';
  END IF;
  SELECT s.identity_id, i.name, i.disabled INTO v_identity, v_name, v_disabled
    FROM identity_subjects s JOIN identities i ON i.id = s.identity_id
   WHERE s.issuer = p_issuer AND s.subject = p_subject;
  IF v_identity IS NULL THEN
    RAISE EXCEPTION 'interlock_sync_claim_grants: no identity is linked to this token subject' USING ERRCODE = '22023';
  END IF;
  -- Details (keys sorted): grantedBy, identity, identityId, issuer, role.
  v_head := '{"grantedBy":"claims","identity":' || to_json(v_name)::text || ',"identityId":' || to_json(v_identity)::text
    || ',"issuer":' || to_json(p_issuer)::text || ',"role":';
  IF EXISTS (SELECT 1 FROM grants g WHERE g.identity_id = v_identity AND g.granted_by = 'claims'
               AND (g.role_name, g.source_id) NOT IN (SELECT d.r, d.s FROM unnest(p_roles, p_sources) AS d(r, s))) THEN
    WITH gone AS (
      DELETE FROM grants g WHERE g.identity_id = v_identity AND g.granted_by = 'claims'
         AND (g.role_name, g.source_id) NOT IN (SELECT d.r, d.s FROM unnest(p_roles, p_sources) AS d(r, s))
      RETURNING g.role_name, g.source_id
    )
    SELECT v_events || coalesce(array_agg(interlock_system_config_event('grant_revoked', gone.source_id, v_head || to_json(gone.role_name)::text || '}')
                                ORDER BY gone.source_id, gone.role_name), '{}')
      INTO v_events FROM gone;
  END IF;
  IF NOT v_disabled
     AND EXISTS (SELECT 1 FROM unnest(p_roles, p_sources) AS d(r, s) JOIN roles ro ON ro.name = d.r JOIN sources so ON so.id = d.s
                  WHERE NOT EXISTS (SELECT 1 FROM grants g WHERE g.identity_id = v_identity AND g.role_name = d.r AND g.source_id = d.s)) THEN
    WITH added AS (
      INSERT INTO grants (identity_id, role_name, source_id, granted_by)
      SELECT v_identity, ro.name, so.id, 'claims' FROM unnest(p_roles, p_sources) AS d(r, s)
        JOIN roles ro ON ro.name = d.r JOIN sources so ON so.id = d.s
      ON CONFLICT DO NOTHING
      RETURNING role_name, source_id
    )
    SELECT v_events || coalesce(array_agg(interlock_system_config_event('grant_added', added.source_id, v_head || to_json(added.role_name)::text || '}')
                                ORDER BY added.source_id, added.role_name), '{}')
      INTO v_events FROM added;
  END IF;
  IF cardinality(v_events) > 0 THEN
    PERFORM interlock_audit_append_chain('[' || array_to_string(v_events, ',') || ']', false);
  END IF;
END
$$;
DROP FUNCTION IF EXISTS interlock_audit_seal_pending();
DROP FUNCTION IF EXISTS interlock_audit_append_or_defer(text[]);
DROP FUNCTION IF EXISTS interlock_audit_chain_pending();
DROP FUNCTION IF EXISTS interlock_audit_chain_batch(text, boolean);
DROP TABLE IF EXISTS audit_pending_events;
