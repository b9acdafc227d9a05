-- InterLock control database: the audit trail becomes partitioned by month and hash-chained (issue 11).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction, under the runner's
-- advisory lock). Never edit an applied migration: add a new file with a later timestamp.
--
-- * audit_events is re-created as a table partitioned by RANGE (recorded_at), one partition per
--   calendar month (UTC) named audit_events_pYYYYMM, plus audit_events_default for anything outside
--   them. recorded_at is the commit time of the event's batch (every event of a batch has the same
--   value, so a batch never spans two partitions); `time` stays the time the call started.
--   Every existing event is kept, with its id; existing events get recorded_at = date_trunc('month',
--   time) and one batch per month, so the chain covers them too.
-- * audit_batches holds one row per committed batch: hash = SHA-256(previous batch's hash ||
--   batch id || each event's canonical text, in id order). interlock_audit_append(jsonb) is the only
--   writer the gateway uses: it takes a transaction-scoped advisory lock (batches from every replica
--   form one chain), inserts the events and seals the batch, all in the caller's transaction.
-- * Append-only still holds for every row that stays: row triggers (cloned onto every partition)
--   refuse UPDATE and DELETE, statement triggers refuse TRUNCATE, on audit_events, on each partition
--   and on audit_batches. Removing a month is DETACH PARTITION + DROP TABLE, which only the owner
--   can do (`interlock audit archive`); it is recorded in audit_archives.

-- Up Migration

DROP TRIGGER audit_events_append_only ON audit_events;
ALTER TABLE audit_events RENAME TO audit_events_unpartitioned;
ALTER TABLE audit_events_unpartitioned DROP CONSTRAINT audit_events_pkey;
DROP INDEX audit_events_time_idx, audit_events_identity_idx, audit_events_source_idx, audit_events_approval_idx;

CREATE TABLE audit_batches (
  id             bigint PRIMARY KEY,
  committed_at   timestamptz NOT NULL,
  event_count    integer NOT NULL CHECK (event_count >= 0),
  first_event_id bigint,
  last_event_id  bigint,
  prev_hash      bytea CHECK (prev_hash IS NULL OR octet_length(prev_hash) = 32),
  hash           bytea NOT NULL CHECK (octet_length(hash) = 32)
);
CREATE SEQUENCE audit_batches_id_seq OWNED BY audit_batches.id;
CREATE INDEX audit_batches_committed_idx ON audit_batches (committed_at);

CREATE TABLE audit_events (
  id               bigint NOT NULL DEFAULT nextval('audit_events_id_seq'),
  kind             text NOT NULL DEFAULT 'tool_call' CHECK (kind IN ('tool_call', 'approval')),
  time             timestamptz NOT NULL DEFAULT now(),
  request_id       text,
  identity_id      text,
  key_id           text,
  tool             text,
  canonical_tool   text,
  dialect          text,
  protocol_version text,
  decision         text NOT NULL,
  reason_code      text,
  source_id        text,
  action           text,
  fingerprint      text,
  relations        text[],
  row_count        bigint,
  duration_ms      double precision,
  approval_id      text,
  operator         text,
  details          jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(details) = 'object'),
  batch_id         bigint NOT NULL,
  recorded_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (id, recorded_at)
) PARTITION BY RANGE (recorded_at);
ALTER SEQUENCE audit_events_id_seq OWNED BY audit_events.id;
CREATE INDEX audit_events_time_idx ON audit_events (time);
CREATE INDEX audit_events_identity_idx ON audit_events (identity_id, id);
CREATE INDEX audit_events_source_idx ON audit_events (source_id, id);
CREATE INDEX audit_events_approval_idx ON audit_events (approval_id) WHERE approval_id IS NOT NULL;
CREATE INDEX audit_events_request_idx ON audit_events (request_id) WHERE request_id IS NOT NULL;
CREATE INDEX audit_events_batch_idx ON audit_events (batch_id);
CREATE INDEX audit_events_id_idx ON audit_events (id);

-- Partitions removed by `interlock audit archive` (the owner's record; verify skips their batches
-- unless it is given the archive file).
CREATE TABLE audit_archives (
  partition      text PRIMARY KEY,
  range_from     timestamptz NOT NULL,
  range_to       timestamptz NOT NULL,
  event_count    bigint NOT NULL,
  first_batch_id bigint,
  last_batch_id  bigint,
  file_sha256    text NOT NULL,
  archived_at    timestamptz NOT NULL DEFAULT now(),
  archived_by    text NOT NULL DEFAULT current_user
);

-- Row triggers on a partitioned table are cloned onto every partition, present and future.
CREATE TRIGGER audit_events_append_only_rows BEFORE UPDATE OR DELETE ON audit_events
  FOR EACH ROW EXECUTE FUNCTION interlock_audit_append_only();
CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_events
  FOR EACH STATEMENT EXECUTE FUNCTION interlock_audit_append_only();
CREATE TRIGGER audit_batches_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_batches
  FOR EACH STATEMENT EXECUTE FUNCTION interlock_audit_append_only();

-- Creates the monthly partitions [from_month, from_month + months) that do not exist yet, each with
-- the TRUNCATE guard (statement triggers are not cloned). A month whose rows already sit in the
-- default partition is skipped (it stays served by the default partition).
CREATE FUNCTION interlock_audit_ensure_partitions(from_month date, months integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  m date := from_month - (extract(day FROM from_month)::integer - 1);
  n integer := 0;
  name text;
BEGIN
  FOR i IN 0 .. months - 1 LOOP
    name := format('audit_events_p%s', to_char(m, 'YYYYMM'));
    IF to_regclass(name) IS NULL THEN
      BEGIN
        EXECUTE format('CREATE TABLE %I PARTITION OF audit_events FOR VALUES FROM (%L) TO (%L)', name,
          (m::timestamp AT TIME ZONE 'UTC'), ((m + interval '1 month')::timestamp AT TIME ZONE 'UTC'));
        EXECUTE format('CREATE TRIGGER audit_events_append_only BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION interlock_audit_append_only()', name);
        n := n + 1;
      EXCEPTION WHEN check_violation THEN
        RAISE NOTICE 'audit partition % skipped: the default partition holds rows of that month', name;
      END;
    END IF;
    m := (m + interval '1 month')::date;
  END LOOP;
  RETURN n;
END
$$;

-- The canonical text of one event for the chain: its JSON with both times as UTC microsecond
-- strings (to_jsonb would render them in the session's time zone).
CREATE FUNCTION interlock_audit_event_text(e jsonb, t timestamptz, r timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT (e - 'time' - 'recorded_at' || jsonb_build_object(
    'time', to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'recorded_at', to_char(r AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')))::text
$$;

-- A batch's hash: SHA-256(prev_hash || "<batch id>\n" || event texts joined by "\n", in id order).
CREATE FUNCTION interlock_audit_batch_hash(prev bytea, batch bigint, body text) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
  SELECT sha256(coalesce(prev, '\x'::bytea) || convert_to(batch::text || E'\n' || coalesce(body, ''), 'UTF8'))
$$;

-- Seals batch `batch` (its events already inserted with recorded_at = committed): stores its row in
-- audit_batches chained to the latest batch. The caller holds the chain lock.
CREATE FUNCTION interlock_audit_seal(batch bigint, committed timestamptz) RETURNS bytea
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
  prev bytea;
  body text;
  n integer;
  lo bigint;
  hi bigint;
  h bytea;
BEGIN
  SELECT b.hash INTO prev FROM audit_batches b ORDER BY b.id DESC LIMIT 1;
  SELECT count(*), min(e.id), max(e.id), string_agg(interlock_audit_event_text(to_jsonb(e), e.time, e.recorded_at), E'\n' ORDER BY e.id)
    INTO n, lo, hi, body
    FROM audit_events e WHERE e.batch_id = batch AND e.recorded_at = committed;
  h := interlock_audit_batch_hash(prev, batch, body);
  INSERT INTO audit_batches (id, committed_at, event_count, first_event_id, last_event_id, prev_hash, hash)
    VALUES (batch, committed, n, lo, hi, prev, h);
  RETURN h;
END
$$;

-- The gateway's one writer: stores `events` (a JSON array of audit_events rows without id,
-- batch_id and recorded_at; a missing time means now()) as one batch and returns its id. Runs in
-- the caller's transaction, so an approval and its events commit together.
CREATE FUNCTION interlock_audit_append(events jsonb) RETURNS bigint
LANGUAGE plpgsql AS $$
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

-- The runtime role appends only through interlock_audit_append (granted by `interlock grant-runtime`):
-- it runs with the owner's rights, so the gateway cannot insert rows outside the chain.
ALTER FUNCTION interlock_audit_append(jsonb) SECURITY DEFINER SET search_path = public, pg_temp;
REVOKE EXECUTE ON FUNCTION interlock_audit_append(jsonb) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION interlock_audit_seal(bigint, timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION interlock_audit_ensure_partitions(date, integer) FROM PUBLIC;

-- Partitions: every month that holds existing events, and the next twelve months.
DO $$
DECLARE
  first_month date := (least(coalesce((SELECT min(time) FROM audit_events_unpartitioned), now()), now()) AT TIME ZONE 'UTC')::date;
  this_month date := (now() AT TIME ZONE 'UTC')::date;
BEGIN
  PERFORM interlock_audit_ensure_partitions(first_month,
    ((extract(year FROM this_month) - extract(year FROM first_month)) * 12 + extract(month FROM this_month) - extract(month FROM first_month))::integer + 13);
END
$$;
CREATE TABLE audit_events_default PARTITION OF audit_events DEFAULT;
CREATE TRIGGER audit_events_append_only BEFORE TRUNCATE ON audit_events_default
  FOR EACH STATEMENT EXECUTE FUNCTION interlock_audit_append_only();

-- Existing events: one sealed batch per month, in id order.
DO $$
DECLARE
  mo timestamptz;
  batch bigint;
BEGIN
  FOR mo IN SELECT date_trunc('month', time, 'UTC') FROM audit_events_unpartitioned GROUP BY 1 ORDER BY 1 LOOP
    batch := nextval('audit_batches_id_seq');
    INSERT INTO audit_events (id, kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version,
        decision, reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, batch_id, recorded_at)
      SELECT id, kind, time, request_id, identity_id, key_id, tool, canonical_tool, dialect, protocol_version,
        decision, reason_code, source_id, action, fingerprint, relations, row_count, duration_ms, approval_id, operator, details, batch, mo
      FROM audit_events_unpartitioned WHERE date_trunc('month', time, 'UTC') = mo ORDER BY id;
    PERFORM interlock_audit_seal(batch, mo);
  END LOOP;
END
$$;
DROP TABLE audit_events_unpartitioned;

-- Down Migration

DROP FUNCTION IF EXISTS interlock_audit_append(jsonb);
DROP FUNCTION IF EXISTS interlock_audit_seal(bigint, timestamptz);
DROP FUNCTION IF EXISTS interlock_audit_batch_hash(bytea, bigint, text);
DROP FUNCTION IF EXISTS interlock_audit_event_text(jsonb, timestamptz, timestamptz);
DROP FUNCTION IF EXISTS interlock_audit_ensure_partitions(date, integer);
DROP TABLE IF EXISTS audit_archives;
DROP TABLE IF EXISTS audit_events;
DROP TABLE IF EXISTS audit_batches;
