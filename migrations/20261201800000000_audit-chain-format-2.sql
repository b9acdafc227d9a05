-- InterLock control database: audit chain format 2, sealed from a digest the gateway computes (issue 13).
--
-- Applied by src/control/db.ts (node-pg-migrate runner). Never edit an applied migration.
--
-- Format 1 (20261201110000000, 20261201700000000) computed every event's canonical text in the
-- database (to_jsonb of the inserted row, two to_char per event) and hashed the batch there.
-- Measured on this project's 2-core machine (bench/RESULTS.md), that sealing was about 240 µs of
-- the control database's ~360 µs of CPU for a batch of three events: the largest cost left per
-- tool call at c=8. In format 2 the gateway sends the batch as one canonical JSON text
-- (src/control/audit-event-text.ts: every value first made storable, columns in the table's order,
-- details with sorted keys), and the database parses exactly that text into the rows it stores and
-- hashes the text itself:
--
--   hash = SHA-256(prev_hash ‖ UTF8("interlock-audit-v2\n" ‖ batch id ‖ "\n" ‖ committed_at as UTC
--                  microseconds ‖ "\n" ‖ the events' ids, ascending, joined by "," ‖ "\n" ‖ the text))
--
-- so the writer cannot seal anything but what was stored, and sealing costs one SHA-256 over bytes
-- the database already holds. `interlock audit verify` rebuilds the text from the stored rows (in
-- the CLI, with the same function the gateway used) and recomputes the hash; a stored value the
-- gateway never writes (sub-millisecond times, NaN, a number printed otherwise) cannot match.
-- Format-1 batches keep verifying as before; both formats link in one chain (prev_hash is the
-- previous batch's hash whatever its format). interlock_audit_append (format 1) stays for gateways
-- not yet upgraded.

-- Up Migration

-- The column with a constant default is added without a table rewrite or scan; its CHECK is added
-- NOT VALID (every existing row holds the default), so audit_batches is never scanned while locked:
-- appends of running gateways wait only for the catalogue change.
ALTER TABLE audit_batches ADD COLUMN format smallint NOT NULL DEFAULT 1;
ALTER TABLE audit_batches ADD CONSTRAINT audit_batches_format_check CHECK (format IN (1, 2)) NOT VALID;

-- The chain's lock: one row that only the owner (through the SECURITY DEFINER append functions) can
-- lock. It replaces pg_advisory_xact_lock(7264116111), which any role allowed to connect could take
-- (advisory locks need no privilege) and so stall every audit append: with a fail-closed audit,
-- every tool call of every agent.
CREATE TABLE audit_chain_lock (id smallint PRIMARY KEY CHECK (id = 1));
INSERT INTO audit_chain_lock VALUES (1);
REVOKE ALL ON audit_chain_lock FROM PUBLIC;

-- Format 1 (gateways not yet upgraded) takes the same lock, so both formats keep one linear chain.
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
    SELECT b.hash FROM audit_batches b ORDER BY b.id DESC LIMIT 1
  )
  INSERT INTO audit_batches (id, committed_at, event_count, first_event_id, last_event_id, prev_hash, hash)
    SELECT batch, committed, agg.n, agg.lo, agg.hi, prev.hash, interlock_audit_batch_hash(prev.hash, batch, agg.body)
      FROM agg LEFT JOIN prev ON true;
  RETURN batch;
END
$$;

-- The hash of a format-2 batch (see above). `committed` is rendered in UTC with microseconds.
CREATE FUNCTION interlock_audit_batch_hash_v2(prev bytea, batch bigint, committed timestamptz, ids text, events text) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
  SELECT sha256(coalesce(prev, '\x'::bytea)
    || convert_to('interlock-audit-v2' || E'\n' || batch::text || E'\n'
       || to_char(committed AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || E'\n'
       || coalesce(ids, '') || E'\n' || events, 'UTF8'))
$$;

-- The gateway's writer (format 2): stores `events` (the batch's canonical text: a JSON array of
-- audit_events rows without id, batch_id and recorded_at, every row with its time) as one batch
-- chained to the latest batch, and returns the batch id. The events get ids in the array's order.
-- Runs in the caller's transaction.
CREATE FUNCTION interlock_audit_append_v2(events text) RETURNS bigint
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
    SELECT b.hash FROM audit_batches b ORDER BY b.id DESC LIMIT 1
  )
  INSERT INTO audit_batches (id, committed_at, event_count, first_event_id, last_event_id, prev_hash, hash, format)
    SELECT batch, committed, agg.n, agg.lo, agg.hi, prev.hash, interlock_audit_batch_hash_v2(prev.hash, batch, committed, agg.ids, events), 2
      FROM agg LEFT JOIN prev ON true;
  RETURN batch;
END
$$;

REVOKE EXECUTE ON FUNCTION interlock_audit_append_v2(text) FROM PUBLIC;

-- Roles that may append through format 1 (granted by `interlock db grant-runtime-role`) may append
-- through format 2, so an upgraded gateway keeps its audit without a new grant. (Revoking a role's
-- right to append means revoking both functions.)
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN
    SELECT DISTINCT g.rolname
      FROM pg_proc p CROSS JOIN LATERAL aclexplode(p.proacl) a JOIN pg_roles g ON g.oid = a.grantee
     WHERE p.oid = 'interlock_audit_append(jsonb)'::regprocedure
       AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
  LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION interlock_audit_append_v2(text) TO %I', r.rolname);
  END LOOP;
END
$$;

-- Down Migration

-- Format-2 batches cannot be verified by format 1: refuse to go down while any exists.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM audit_batches WHERE format = 2) THEN
    RAISE EXCEPTION 'audit_batches holds format-2 batches: migrating down would leave them unverifiable';
  END IF;
END
$$;
CREATE OR REPLACE FUNCTION interlock_audit_append(events jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  batch bigint;
  committed timestamptz := now();
BEGIN
  PERFORM pg_advisory_xact_lock(7264116111);
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
    SELECT b.hash FROM audit_batches b ORDER BY b.id DESC LIMIT 1
  )
  INSERT INTO audit_batches (id, committed_at, event_count, first_event_id, last_event_id, prev_hash, hash)
    SELECT batch, committed, agg.n, agg.lo, agg.hi, prev.hash, interlock_audit_batch_hash(prev.hash, batch, agg.body)
      FROM agg LEFT JOIN prev ON true;
  RETURN batch;
END
$$;
DROP TABLE IF EXISTS audit_chain_lock;
DROP FUNCTION IF EXISTS interlock_audit_append_v2(text);
DROP FUNCTION IF EXISTS interlock_audit_batch_hash_v2(bytea, bigint, timestamptz, text, text);
ALTER TABLE audit_batches DROP COLUMN format;
