-- InterLock control database: the operator role rejects a removed source's pending approvals only
-- through a function that records each rejection in the same statement (red team rtop finding 4).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- Before: the operator role (`interlock db grant-operator-role`) held UPDATE of approvals.state,
-- decided_by and decided_at so that removing a source with force could reject its pending
-- approvals, and nothing limited the value: an operator credential could set any approval's state
-- (approved, rejected, executed…) with no approval event; one set to approved was stranded, never
-- executed.
--
-- Now grantOperatorRole gives no UPDATE of approvals (it revokes an earlier one) and EXECUTE of
-- interlock_reject_removed_source_approvals(source, operator) instead (SECURITY DEFINER, EXECUTE
-- revoked from PUBLIC): it rejects the pending approvals of a source that no longer exists (the
-- caller deletes the source first, in the same transaction) in the operator's name and appends one
-- approval event per rejection (decision rejected, reason_code source_removed, as
-- src/audit/writer.ts approvalRow) to the format-2 chain in one batch, in the same statement. The
-- event text is format 2's canonical row text (src/audit/event-text.ts eventJson), so `interlock
-- audit verify` rebuilds it from the stored rows. Returns the rejected approvals' ids, oldest first.
-- The runtime role keeps its own grants on approvals (queued writes, expiry, decisions).

-- Up Migration

CREATE FUNCTION interlock_reject_removed_source_approvals(p_source text, p_operator text)
RETURNS text[] LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
  v_ids text[];
  v_events text[];
  v_time text := to_json(to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))::text;
BEGIN
  IF p_source IS NULL OR p_operator IS NULL OR length(p_operator) = 0 OR length(p_operator) > 1024 THEN
    RAISE EXCEPTION 'interlock_reject_removed_source_approvals: source and operator must be given' USING ERRCODE = '22023';
  END IF;
  IF EXISTS (SELECT 1 FROM sources WHERE id = p_source) THEN
    RAISE EXCEPTION 'interlock_reject_removed_source_approvals: the source still exists (delete it first)' USING ERRCODE = '55000';
  END IF;
  WITH rej AS (
    UPDATE approvals a SET state = 'rejected', decided_by = p_operator, decided_at = now()
     WHERE a.source_id = p_source AND a.state = 'pending'
    RETURNING a.id, a.identity_id, a.key_id, a.request_id, a.source_id, a.created_at
  ), ev AS (
    -- The indexed columns cut as src/audit/event-text.ts indexedText does past 512 characters.
    SELECT rej.id, rej.created_at,
           '{"kind":"approval","time":' || v_time
        || ',"request_id":' || to_json(CASE WHEN length(rej.request_id) > 512 THEN left(rej.request_id, 500) || '…[truncated]' ELSE rej.request_id END)::text
        || ',"identity_id":' || to_json(CASE WHEN length(rej.identity_id) > 512 THEN left(rej.identity_id, 500) || '…[truncated]' ELSE rej.identity_id END)::text
        || ',"key_id":' || coalesce(to_json(rej.key_id)::text, 'null')
        || ',"tool":null,"canonical_tool":null,"dialect":null,"protocol_version":null,"decision":"rejected","reason_code":"source_removed","source_id":'
        || to_json(CASE WHEN length(rej.source_id) > 512 THEN left(rej.source_id, 500) || '…[truncated]' ELSE rej.source_id END)::text
        || ',"action":"write","fingerprint":null,"relations":null,"row_count":null,"duration_ms":null,"approval_id":' || to_json(rej.id)::text
        || ',"operator":' || to_json(p_operator)::text || ',"details":{}}' AS e
      FROM rej
  )
  SELECT array_agg(ev.id ORDER BY ev.created_at, ev.id), array_agg(ev.e ORDER BY ev.created_at, ev.id) INTO v_ids, v_events FROM ev;
  IF v_ids IS NULL THEN
    RETURN '{}';
  END IF;
  PERFORM interlock_audit_append_chain('[' || array_to_string(v_events, ',') || ']', false);
  RETURN v_ids;
END
$$;
REVOKE EXECUTE ON FUNCTION interlock_reject_removed_source_approvals(text, text) FROM PUBLIC;

-- Down Migration

DROP FUNCTION IF EXISTS interlock_reject_removed_source_approvals(text, text);
