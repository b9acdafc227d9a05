-- InterLock control database: every append on a database-sealed hash chain (format 1 and 2, the
-- approval chain; format 4, the config chain) refuses to run outside READ COMMITTED (task hrr; red
-- team rt40's open finding "a runtime session at REPEATABLE READ forks the chain through the
-- approval append").
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- Before: the chains' lock rows (audit_chain_lock, audit_config_chain_lock) are only locked, never
-- updated, so a transaction at REPEATABLE READ or SERIALIZABLE whose snapshot was taken before
-- another append committed got the lock without a serialization failure and then read the chain's
-- head from that snapshot: two batches on one prev_hash, and `interlock audit verify` reports
-- broken_link. The runtime role may run interlock_audit_append_v2 and interlock_audit_append (and
-- interlock_audit_seal_pending), so a holder of the runtime credential could fork the approval chain
-- at will; an operator session at REPEATABLE READ could fork the config chain by accident.
-- 20261212140000000 made the token sign-ins defer outside READ COMMITTED; the other appends were open.
--
-- Now: interlock_audit_append (format 1), interlock_audit_append_v2 (format 2 and 4),
-- interlock_audit_append_chain (the owner's append used by the token functions, by
-- interlock_reject_removed_source_approvals and by append_v2) and interlock_audit_seal_pending (the
-- drain of pending events) begin with a check of current_setting('transaction_isolation'): anything
-- but 'read committed' raises SQLSTATE 0A000 (feature_not_supported) with a message naming the rule,
-- before any lock or read. The bodies are otherwise those of 20261208220000000 (append, append_v2)
-- and 20261211140000000 (append_chain, seal_pending). interlock_audit_chain_batch and
-- interlock_audit_chain_pending (owner's only) are reached only through these. The token functions
-- still defer (interlock_audit_try_chain_lock returns false outside READ COMMITTED, so they never
-- reach interlock_audit_append_chain there). Format-3 chains are sealed by the gateway, not here.
-- The gateway's own control connections start with default_transaction_isolation = read committed
-- (src/control/targets.ts controlConnectionConfig), so a control database or role whose default is
-- repeatable read does not refuse the gateway's honest appends.
--
-- Down: restores the four bodies of 20261208220000000 / 20261211140000000.

-- Up Migration

CREATE OR REPLACE FUNCTION interlock_audit_append(events jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  batch bigint;
  committed timestamptz := now();
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    -- A snapshot older than the chain's lock would chain on a stale head (fork): red team rt40.
    RAISE EXCEPTION 'audit chain appends run only at READ COMMITTED (this transaction is %)', current_setting('transaction_isolation')
      USING ERRCODE = '0A000';
  END IF;
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

CREATE OR REPLACE FUNCTION interlock_audit_append_v2(events text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  n integer;
  configs integer;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    -- A snapshot older than the chain's lock would chain on a stale head (fork): red team rt40.
    RAISE EXCEPTION 'audit chain appends run only at READ COMMITTED (this transaction is %)', current_setting('transaction_isolation')
      USING ERRCODE = '0A000';
  END IF;
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

CREATE OR REPLACE FUNCTION interlock_audit_append_chain(events text, config boolean) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_variable
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    -- A snapshot older than the chain's lock would chain on a stale head (fork): red team rt40.
    RAISE EXCEPTION 'audit chain appends run only at READ COMMITTED (this transaction is %)', current_setting('transaction_isolation')
      USING ERRCODE = '0A000';
  END IF;
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

CREATE OR REPLACE FUNCTION interlock_audit_seal_pending() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    -- A snapshot older than the chain's lock would chain on a stale head (fork): red team rt40.
    RAISE EXCEPTION 'audit chain appends run only at READ COMMITTED (this transaction is %)', current_setting('transaction_isolation')
      USING ERRCODE = '0A000';
  END IF;
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

-- Down Migration

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

CREATE OR REPLACE FUNCTION interlock_audit_seal_pending() RETURNS integer
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
