-- InterLock control database: the gateway's own config events about one identity name it in
-- identity_id (hnu2 item 3), so `audit search --kind config --identity NAME` finds them, as the
-- events recorded by src/control/change-audit.ts recordChange do: when the event's details hold
-- "identityId" (a string), identity_id is that id. interlock_provision_token_identity
-- (identity_created) and interlock_sync_claim_grants (grant_added, grant_revoked), SECURITY DEFINER
-- functions of 20261208220000000, build their events with interlock_system_config_event and are
-- unchanged. identity_id is part of the chained event text (src/audit/event-text.ts eventJson), so
-- it is set when the event is appended, never later: events appended before this migration keep
-- identity_id null and still verify.
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.

-- Up Migration

-- As 20261208220000000, with identity_id from details.identityId (null when absent or not a string).
CREATE OR REPLACE FUNCTION interlock_system_config_event(p_decision text, p_source text, p_details text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog AS $$
  SELECT '{"kind":"config","time":' || to_json(to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))::text
    || ',"request_id":null,"identity_id":'
    || coalesce(CASE WHEN jsonb_typeof(p_details::jsonb -> 'identityId') = 'string' THEN (p_details::jsonb -> 'identityId')::text END, 'null')
    || ',"key_id":null,"tool":null,"canonical_tool":null,"dialect":null,"protocol_version":null,"decision":'
    || to_json(p_decision)::text || ',"reason_code":null,"source_id":' || coalesce(to_json(p_source)::text, 'null')
    || ',"action":"config","fingerprint":null,"relations":null,"row_count":null,"duration_ms":null,"approval_id":null,"operator":"system","details":'
    || p_details || '}'
$$;

-- Down Migration

CREATE OR REPLACE FUNCTION interlock_system_config_event(p_decision text, p_source text, p_details text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog AS $$
  SELECT '{"kind":"config","time":' || to_json(to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))::text
    || ',"request_id":null,"identity_id":null,"key_id":null,"tool":null,"canonical_tool":null,"dialect":null,"protocol_version":null,"decision":'
    || to_json(p_decision)::text || ',"reason_code":null,"source_id":' || coalesce(to_json(p_source)::text, 'null')
    || ',"action":"config","fingerprint":null,"relations":null,"row_count":null,"duration_ms":null,"approval_id":null,"operator":"system","details":'
    || p_details || '}'
$$;
