-- InterLock control database: audit chain format 3, one chain per writer lane, sealed by the gateway (issue 28).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- Format 2 (20261201800000000) serialised every batch of every gateway on one lock row and sealed it
-- in plpgsql (jsonb parse, batch row, SHA-256): 159–162 µs of control-database CPU per event at three
-- events a batch, against 65–76 µs for a plain multi-row INSERT of the same rows (issue 28). In format 3
-- the gateway computes the chain itself and appends with one plain INSERT statement (src/audit/chain.ts):
--
-- * every writer lane of every gateway process has its own chain (`chain_id`, a random UUID drawn when
--   the lane starts, and `seq` 0, 1, 2, … with no gaps); a lane has at most one batch in flight, so it
--   always knows the hash of its previous batch without asking the database, and no two processes (or
--   lanes) ever wait for each other;
-- * hash = SHA-256(prev_hash ‖ UTF8("interlock-audit-v3\n" ‖ chain_id ‖ "\n" ‖ seq ‖ "\n" ‖ committed_at
--   in UTC with microseconds ‖ "\n" ‖ mark ‖ "\n" ‖ anchors ‖ "\n" ‖ the batch's canonical text)), the
--   text being format 2's (src/audit/event-text.ts), events in id order; prev_hash is null at seq 0;
-- * seq 0 (the genesis) carries `anchors`: the id and hash of the latest format-1/2 batch and of the
--   latest batch of every chain among the trail's newest batches when the lane started, so a chain
--   deleted or cut short before another lane's start is caught by that lane's genesis;
-- * a lane stopped cleanly (SIGTERM, `close`) appends a last batch with mark 'seal' and no events, so a
--   chain cut short after its seal is caught; a chain without one is reported open (running or crashed);
-- * `interlock audit verify` checks every chain: hashes, links, seq without gaps or repeats, nothing
--   after a seal, every anchor (src/audit/verify.ts).
--
-- Format-1 and format-2 batches keep their one global chain and keep verifying: the two functions now
-- link to the latest batch of those formats only (a partial index finds it), and stay the writers of
-- approval and configuration events, which commit inside the transaction of the change they record.
--
-- The runtime role gets INSERT (and the sequences' USAGE) on audit_events and audit_batches, never
-- UPDATE, DELETE or TRUNCATE (the triggers refuse them for every role anyway), and not on the id
-- columns: ids come from the sequences, so it cannot write an event or batch among older ones. What it
-- inserts outside its own chains is seen by verify as an inserted batch.
--
-- Indexes: audit_events keeps its primary key (id order: search, tail, webhooks), identity and source
-- (search), approval (console) and request id (search, answer lookup); the B-trees on `time` and
-- `batch_id` become BRIN (range scans of search and verify; a BRIN entry is written per block range,
-- not per row), as does audit_batches' index on committed_at.

-- Up Migration

ALTER TABLE audit_batches
  ADD COLUMN chain_id uuid,
  ADD COLUMN seq bigint CHECK (seq IS NULL OR seq >= 0),
  ADD COLUMN mark text CHECK (mark IS NULL OR mark = 'seal'),
  ADD COLUMN anchors text;
ALTER TABLE audit_batches DROP CONSTRAINT audit_batches_format_check;
ALTER TABLE audit_batches ADD CONSTRAINT audit_batches_format_check CHECK (format IN (1, 2, 3)) NOT VALID;
ALTER TABLE audit_batches ADD CONSTRAINT audit_batches_chain_check
  CHECK ((format = 3) = (chain_id IS NOT NULL AND seq IS NOT NULL)) NOT VALID;
ALTER TABLE audit_batches ALTER COLUMN id SET DEFAULT nextval('audit_batches_id_seq');

-- The latest format-1/2 batch, found without walking past format-3 batches.
CREATE INDEX audit_batches_legacy_idx ON audit_batches (id) WHERE format < 3;

DROP INDEX audit_batches_committed_idx;
CREATE INDEX audit_batches_committed_brin ON audit_batches USING brin (committed_at);
DROP INDEX audit_events_time_idx;
CREATE INDEX audit_events_time_brin ON audit_events USING brin (time);
DROP INDEX audit_events_batch_idx;
CREATE INDEX audit_events_batch_brin ON audit_events USING brin (batch_id);

-- Format 1 and 2 link to the latest batch of their own chain (format 3 chains are the lanes').
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

-- Roles that may append through format 2 (granted by `interlock db grant-runtime-role`) may append
-- format-3 batches: INSERT on the trail's columns other than the ids, and nextval on their sequences.
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN
    SELECT DISTINCT g.rolname
      FROM pg_proc p CROSS JOIN LATERAL aclexplode(p.proacl) a JOIN pg_roles g ON g.oid = a.grantee
     WHERE p.oid = 'interlock_audit_append_v2(text)'::regprocedure
       AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
  LOOP
    EXECUTE format('GRANT INSERT (kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version, decision, reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, batch_id, recorded_at) ON audit_events TO %I', r.rolname);
    EXECUTE format('GRANT INSERT (committed_at, event_count, prev_hash, hash, format, chain_id, seq, mark, anchors) ON audit_batches TO %I', r.rolname);
    EXECUTE format('GRANT USAGE ON SEQUENCE audit_events_id_seq, audit_batches_id_seq TO %I', r.rolname);
  END LOOP;
END
$$;

-- Down Migration

DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM audit_batches WHERE format = 3) THEN
    RAISE EXCEPTION 'audit_batches holds format-3 batches: migrating down would leave them unverifiable';
  END IF;
END
$$;
DROP INDEX IF EXISTS audit_events_batch_brin;
CREATE INDEX audit_events_batch_idx ON audit_events (batch_id);
DROP INDEX IF EXISTS audit_events_time_brin;
CREATE INDEX audit_events_time_idx ON audit_events (time);
DROP INDEX IF EXISTS audit_batches_committed_brin;
CREATE INDEX audit_batches_committed_idx ON audit_batches (committed_at);
DROP INDEX IF EXISTS audit_batches_legacy_idx;
ALTER TABLE audit_batches ALTER COLUMN id DROP DEFAULT;
ALTER TABLE audit_batches DROP CONSTRAINT audit_batches_chain_check;
ALTER TABLE audit_batches DROP CONSTRAINT audit_batches_format_check;
ALTER TABLE audit_batches ADD CONSTRAINT audit_batches_format_check CHECK (format IN (1, 2)) NOT VALID;
ALTER TABLE audit_batches DROP COLUMN anchors, DROP COLUMN mark, DROP COLUMN seq, DROP COLUMN chain_id;
