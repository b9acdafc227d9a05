-- InterLock control database: governance changes on a chain of their own, appended only by callers
-- that may change governance; changes made from access-token claims recorded (red team rtgov
-- findings 3, 4 and 6; issue hgov).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- Before: config events (governance changes) and approval events shared the format-2 chain and its
-- lock row (audit_chain_lock), which interlock_audit_append_v2 holds until its caller's transaction
-- ends. The gateway's runtime role may call that function (for approval events), so it could (a)
-- append a config event naming any operator (finding 4) and (b) append anything and hold its
-- transaction open, stalling every governance change (finding 6). Identities provisioned from
-- access tokens and grants that follow claims recorded nothing (finding 3).
--
-- Now:
--
-- * Format 4, the config chain: batches of kind-config events only, hashed as format 2 but with the
--   tag "interlock-audit-v4" and linked to the previous format-4 batch (not to the format-2 chain),
--   under their own lock row (audit_config_chain_lock), which no role but the owner can lock:
--
--     hash = SHA-256(prev_hash ‖ UTF8("interlock-audit-v4\n" ‖ batch id ‖ "\n" ‖ committed_at as UTC
--            microseconds ‖ "\n" ‖ the events' ids, ascending, joined by "," ‖ "\n" ‖ the text))
--
-- * interlock_audit_append_v2(events) stores a batch of config events on the config chain, any other
--   batch on the format-2 chain as before; a batch mixing config with other kinds is refused (22023).
--   A config batch is refused (42501) unless the session's login role may INSERT into grants (the
--   owner, a superuser, or an operator role that makes governance changes): the runtime role may not.
--   The format-1 interlock_audit_append refuses config events for every caller (42501).
-- * interlock_audit_append_chain(events, config) is that append without the check, for the owner's
--   functions only (EXECUTE revoked from PUBLIC): interlock_provision_token_identity and
--   interlock_sync_claim_grants (SECURITY DEFINER, called by the runtime role) record their changes
--   through it (identity_created, grant_added, grant_revoked; operator "system"; details name the
--   identity, its id, the issuer and the role, never the token subject or another claim value) in the
--   statement that makes them. They append to the format-2 chain, whose lock the runtime role can
--   hold anyway, not to the config chain: a runtime session holding its transaction open after
--   provisioning stalls approval events, never an operator's governance change.
-- * The runtime role may INSERT into audit_batches only format-3 batches (its writer lanes): a
--   row-level security policy, checked per batch row (the owner and superusers are not subject to it;
--   the functions above run as the owner). Without it the runtime could insert a format-2 or
--   format-4 batch of its own, correctly hashed and linked, holding forged config events. A config
--   event inside a format-3 batch is named by `interlock audit verify` (fault misplaced_config):
--   the lanes write tool calls only.

-- Up Migration

ALTER TABLE audit_batches DROP CONSTRAINT audit_batches_format_check;
ALTER TABLE audit_batches ADD CONSTRAINT audit_batches_format_check CHECK (format IN (1, 2, 3, 4)) NOT VALID;
-- The latest format-4 batch, found without walking past other formats.
CREATE INDEX audit_batches_config_idx ON audit_batches (id) WHERE format = 4;

-- The config chain's lock: one row only the owner's functions lock.
CREATE TABLE audit_config_chain_lock (id smallint PRIMARY KEY CHECK (id = 1));
INSERT INTO audit_config_chain_lock VALUES (1);
REVOKE ALL ON audit_config_chain_lock FROM PUBLIC;

CREATE FUNCTION interlock_audit_batch_hash_v4(prev bytea, batch bigint, committed timestamptz, ids text, events text) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
  SELECT sha256(coalesce(prev, '\x'::bytea)
    || convert_to('interlock-audit-v4' || E'\n' || batch::text || E'\n'
       || to_char(committed AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || E'\n'
       || coalesce(ids, '') || E'\n' || events, 'UTF8'))
$$;

-- The append itself (format 2, or format 4 when `config`), without any check of the caller: the
-- owner's functions only. Runs in the caller's transaction; returns the batch id.
CREATE FUNCTION interlock_audit_append_chain(events text, config boolean) RETURNS bigint
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

-- The writer of approval and configuration events (see above). Callers are unchanged: the gateway's
-- runtime role (approval events), the CLI, admin API and console (config events).
CREATE OR REPLACE FUNCTION interlock_audit_append_v2(events text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  n integer;
  configs integer;
BEGIN
  IF events IS NULL THEN
    RAISE EXCEPTION 'events must not be null' USING ERRCODE = '22004';
  END IF;
  SELECT count(*)::integer, count(*) FILTER (WHERE e->>'kind' = 'config')::integer INTO n, configs FROM jsonb_array_elements(events::jsonb) AS e;
  IF configs = 0 THEN
    RETURN interlock_audit_append_chain(events, false);
  END IF;
  IF configs <> n THEN
    RAISE EXCEPTION 'a batch of config events holds config events only' USING ERRCODE = '22023';
  END IF;
  IF NOT has_table_privilege(session_user, 'public.grants', 'INSERT') THEN
    RAISE EXCEPTION 'only a role that may change governance state may append config events' USING ERRCODE = '42501';
  END IF;
  RETURN interlock_audit_append_chain(events, true);
END
$$;

-- Format 1 (gateways not yet upgraded: tool-call and approval events) never stores config events.
CREATE OR REPLACE FUNCTION interlock_audit_append(events jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  batch bigint;
  committed timestamptz := now();
BEGIN
  IF EXISTS (SELECT 1 FROM jsonb_array_elements(events) AS e WHERE e->>'kind' = 'config') THEN
    RAISE EXCEPTION 'config events are appended through interlock_audit_append_v2' USING ERRCODE = '42501';
  END IF;
  PERFORM 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE;
  batch := nextval('audit_batches_id_seq');
  WITH ins AS (
    INSERT INTO audit_events (kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version,
        decision, reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, batch_id, recorded_at)
      SELECT coalesce(r.kind, 'tool_call'), coalesce(r.time, now()), r.request_id, r.identity_id, r.key_id, r.tool, r.canonical_tool, r.dialect,
        r.protocol_version, r.decision, r.reason_code, r.source_id, r.action, r.fingerprint, r.relations, r.row_count, r.duration_ms,
        r.approval_id, r.operator, coalesce(r.details, '{}'::jsonb), batch, committed
      FROM jsonb_populate_recordset(NULL::audit_events, events) WITH ORDINALITY AS r
      ORDER BY r.ordinality
      RETURNING *
  ), agg AS (
    SELECT count(*)::integer AS n, min(e.id) AS lo, max(e.id) AS hi,
           string_agg(interlock_audit_event_text(to_jsonb(e), e.time, e.recorded_at), E'\n' ORDER BY e.id) AS body
      FROM ins e
  ), prev AS (
    SELECT b.hash FROM audit_batches b WHERE b.format < 3 ORDER BY b.id DESC LIMIT 1
  )
  INSERT INTO audit_batches (id, committed_at, event_count, first_event_id, last_event_id, prev_hash, hash, format)
    SELECT batch, committed, agg.n, agg.lo, agg.hi, prev.hash, interlock_audit_batch_hash(prev.hash, batch, agg.body), 1
      FROM agg LEFT JOIN prev ON true;
  RETURN batch;
END
$$;

-- One kind-config event of the gateway's own (operator "system") as format 2's canonical row text
-- (src/audit/event-text.ts eventJson: columns in the table's order, no spaces, details with sorted
-- keys, the time in milliseconds), so `audit verify` rebuilds the same text from the stored row.
-- `details` must already be canonical (keys sorted, no spaces). Owner's functions only.
CREATE FUNCTION interlock_system_config_event(p_decision text, p_source text, p_details text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog AS $$
  SELECT '{"kind":"config","time":' || to_json(to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))::text
    || ',"request_id":null,"identity_id":null,"key_id":null,"tool":null,"canonical_tool":null,"dialect":null,"protocol_version":null,"decision":'
    || to_json(p_decision)::text || ',"reason_code":null,"source_id":' || coalesce(to_json(p_source)::text, 'null')
    || ',"action":"config","fingerprint":null,"relations":null,"row_count":null,"duration_ms":null,"approval_id":null,"operator":"system","details":'
    || p_details || '}'
$$;
REVOKE EXECUTE ON FUNCTION interlock_system_config_event(text, text, text) FROM PUBLIC;

-- As 20261203140000000, and the new identity is recorded (identity_created) in the same statement.
CREATE OR REPLACE FUNCTION interlock_provision_token_identity(p_id text, p_name text, p_issuer text, p_subject text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
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

-- As 20261203140000000, and every grant added or removed is recorded (grant_added, grant_revoked;
-- source_id the grant's source) in one batch, in the same statement; nothing when nothing changes.
CREATE OR REPLACE FUNCTION interlock_sync_claim_grants(p_issuer text, p_subject text, p_roles text[], p_sources text[])
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
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

-- The runtime role's direct INSERTs (its writer lanes) may store format-3 batches only. Every role
-- may read the trail's batches as before (SELECT still needs the table privilege).
ALTER TABLE audit_batches ENABLE ROW LEVEL SECURITY;
CREATE POLICY audit_batches_read ON audit_batches FOR SELECT USING (true);
CREATE POLICY audit_batches_lanes ON audit_batches FOR INSERT WITH CHECK (format = 3);

-- Down Migration

DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM audit_batches WHERE format = 4) THEN
    RAISE EXCEPTION 'audit_batches holds format-4 batches: migrating down would leave them unverifiable';
  END IF;
END
$$;
DROP POLICY IF EXISTS audit_batches_lanes ON audit_batches;
DROP POLICY IF EXISTS audit_batches_read ON audit_batches;
ALTER TABLE audit_batches DISABLE ROW LEVEL SECURITY;
CREATE OR REPLACE FUNCTION interlock_provision_token_identity(p_id text, p_name text, p_issuer text, p_subject text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
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
END
$$;
CREATE OR REPLACE FUNCTION interlock_sync_claim_grants(p_issuer text, p_subject text, p_roles text[], p_sources text[])
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  v_identity text;
  v_disabled boolean;
BEGIN
  IF p_roles IS NULL OR p_sources IS NULL OR cardinality(p_roles) <> cardinality(p_sources) OR cardinality(p_roles) > 1024
     OR array_position(p_roles, NULL) IS NOT NULL OR array_position(p_sources, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'interlock_sync_claim_grants: roles and sources must be arrays of equal length (at most 1024) without nulls' USING ERRCODE = '22023';
  END IF;
  SELECT s.identity_id, i.disabled INTO v_identity, v_disabled
    FROM identity_subjects s JOIN identities i ON i.id = s.identity_id
   WHERE s.issuer = p_issuer AND s.subject = p_subject;
  IF v_identity IS NULL THEN
    RAISE EXCEPTION 'interlock_sync_claim_grants: no identity is linked to this token subject' USING ERRCODE = '22023';
  END IF;
  IF EXISTS (SELECT 1 FROM grants g WHERE g.identity_id = v_identity AND g.granted_by = 'claims'
               AND (g.role_name, g.source_id) NOT IN (SELECT d.r, d.s FROM unnest(p_roles, p_sources) AS d(r, s))) THEN
    DELETE FROM grants g WHERE g.identity_id = v_identity AND g.granted_by = 'claims'
       AND (g.role_name, g.source_id) NOT IN (SELECT d.r, d.s FROM unnest(p_roles, p_sources) AS d(r, s));
  END IF;
  IF v_disabled THEN
    RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM unnest(p_roles, p_sources) AS d(r, s) JOIN roles ro ON ro.name = d.r JOIN sources so ON so.id = d.s
              WHERE NOT EXISTS (SELECT 1 FROM grants g WHERE g.identity_id = v_identity AND g.role_name = d.r AND g.source_id = d.s)) THEN
    INSERT INTO grants (identity_id, role_name, source_id, granted_by)
    SELECT v_identity, ro.name, so.id, 'claims' FROM unnest(p_roles, p_sources) AS d(r, s)
      JOIN roles ro ON ro.name = d.r JOIN sources so ON so.id = d.s
    ON CONFLICT DO NOTHING;
  END IF;
END
$$;
DROP FUNCTION IF EXISTS interlock_system_config_event(text, text, text);
-- Format 1 and 2 as 20261203160000000 left them.
CREATE OR REPLACE FUNCTION interlock_audit_append(events jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  batch bigint;
  committed timestamptz := now();
BEGIN
  PERFORM 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE;
  batch := nextval('audit_batches_id_seq');
  WITH ins AS (
    INSERT INTO audit_events (kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version,
        decision, reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, batch_id, recorded_at)
      SELECT coalesce(r.kind, 'tool_call'), coalesce(r.time, now()), r.request_id, r.identity_id, r.key_id, r.tool, r.canonical_tool, r.dialect,
        r.protocol_version, r.decision, r.reason_code, r.source_id, r.action, r.fingerprint, r.relations, r.row_count, r.duration_ms,
        r.approval_id, r.operator, coalesce(r.details, '{}'::jsonb), batch, committed
      FROM jsonb_populate_recordset(NULL::audit_events, events) WITH ORDINALITY AS r
      ORDER BY r.ordinality
      RETURNING *
  ), agg AS (
    SELECT count(*)::integer AS n, min(e.id) AS lo, max(e.id) AS hi,
           string_agg(interlock_audit_event_text(to_jsonb(e), e.time, e.recorded_at), E'\n' ORDER BY e.id) AS body
      FROM ins e
  ), prev AS (
    SELECT b.hash FROM audit_batches b WHERE b.format < 3 ORDER BY b.id DESC LIMIT 1
  )
  INSERT INTO audit_batches (id, committed_at, event_count, first_event_id, last_event_id, prev_hash, hash)
    SELECT batch, committed, agg.n, agg.lo, agg.hi, prev.hash, interlock_audit_batch_hash(prev.hash, batch, agg.body)
      FROM agg LEFT JOIN prev ON true;
  RETURN batch;
END
$$;

CREATE OR REPLACE FUNCTION interlock_audit_append_v2(events text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  batch bigint;
  committed timestamptz := now();
BEGIN
  IF events IS NULL THEN
    RAISE EXCEPTION 'events must not be null' USING ERRCODE = '22004';
  END IF;
  PERFORM 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE;
  batch := nextval('audit_batches_id_seq');
  WITH ins AS (
    INSERT INTO audit_events (kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version,
        decision, reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, batch_id, recorded_at)
      SELECT r.kind, r.time, r.request_id, r.identity_id, r.key_id, r.tool, r.canonical_tool, r.dialect,
        r.protocol_version, r.decision, r.reason_code, r.source_id, r.action, r.fingerprint, r.relations, r.row_count, r.duration_ms,
        r.approval_id, r.operator, r.details, batch, committed
      FROM jsonb_populate_recordset(NULL::audit_events, events::jsonb) WITH ORDINALITY AS r
      ORDER BY r.ordinality
      RETURNING id
  ), agg AS (
    SELECT count(*)::integer AS n, min(ins.id) AS lo, max(ins.id) AS hi, string_agg(ins.id::text, ',' ORDER BY ins.id) AS ids FROM ins
  ), prev AS (
    SELECT b.hash FROM audit_batches b WHERE b.format < 3 ORDER BY b.id DESC LIMIT 1
  )
  INSERT INTO audit_batches (id, committed_at, event_count, first_event_id, last_event_id, prev_hash, hash, format)
    SELECT batch, committed, agg.n, agg.lo, agg.hi, prev.hash, interlock_audit_batch_hash_v2(prev.hash, batch, committed, agg.ids, events), 2
      FROM agg LEFT JOIN prev ON true;
  RETURN batch;
END
$$;
DROP FUNCTION IF EXISTS interlock_audit_append_chain(text, boolean);
DROP FUNCTION IF EXISTS interlock_audit_batch_hash_v4(bytea, bigint, timestamptz, text, text);
DROP TABLE IF EXISTS audit_config_chain_lock;
DROP INDEX IF EXISTS audit_batches_config_idx;
ALTER TABLE audit_batches DROP CONSTRAINT audit_batches_format_check;
ALTER TABLE audit_batches ADD CONSTRAINT audit_batches_format_check CHECK (format IN (1, 2, 3)) NOT VALID;
