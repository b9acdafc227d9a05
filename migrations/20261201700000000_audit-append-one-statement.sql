-- InterLock control database: the audit writer seals a batch from the rows it inserted (issue 13).
--
-- Applied by src/control/db.ts (node-pg-migrate runner). Never edit an applied migration.
--
-- interlock_audit_append(jsonb) (20261201110000000) inserted the batch's events, then sealed it
-- through interlock_audit_seal, which read the events back from the partitioned audit_events
-- (a statement PostgreSQL plans again on every call: its partition depends on the batch's
-- recorded_at) before inserting the batch row. Measured on the control database's backend, one
-- event per batch (bench/audit-writer.ts and a per-statement breakdown): about 530 µs of CPU per
-- batch, of which the read-back was about 110 µs. Now the events, the batch hash and the batch row
-- are one statement: INSERT … RETURNING feeds the hash directly. The hash is the same function of
-- the same stored values (to_jsonb of the inserted row, event texts in id order), so
-- `interlock audit verify` and every existing batch are unchanged; interlock_audit_seal stays for
-- whoever sealed batches themselves.

-- Up Migration

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

-- Down Migration

CREATE OR REPLACE FUNCTION interlock_audit_append(events jsonb) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  batch bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(7264116111);
  batch := nextval('audit_batches_id_seq');
  INSERT INTO audit_events (kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version,
      decision, reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, batch_id, recorded_at)
    SELECT coalesce(r.kind, 'tool_call'), coalesce(r.time, now()), r.request_id, r.identity_id, r.key_id, r.tool, r.canonical_tool, r.dialect,
      r.protocol_version, r.decision, r.reason_code, r.source_id, r.action, r.fingerprint, r.relations, r.row_count, r.duration_ms,
      r.approval_id, r.operator, coalesce(r.details, '{}'::jsonb), batch, now()
    FROM jsonb_populate_recordset(NULL::audit_events, events) WITH ORDINALITY AS r
    ORDER BY r.ordinality;
  PERFORM interlock_audit_seal(batch, now());
  RETURN batch;
END
$$;
