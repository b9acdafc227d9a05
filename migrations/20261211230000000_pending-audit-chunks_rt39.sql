-- InterLock control database: pending audit events chained in bounded batches (red team rt39,
-- finding "a pending backlog past jsonb's size limit fails the seal and every later append").
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- Before (20261211140000000_pending-audit-events_hchain): interlock_audit_chain_pending chained every
-- pending event as ONE format-2 batch: the texts of all of them joined, then cast to jsonb. A holder
-- of the runtime role's credential holds the chain's lock in one session and provisions token
-- identities in another (issuers of 2048 four-byte characters: 8 KiB an event, each stored pending
-- at once). Past 256 MiB of pending text the cast fails (54000, jsonb's size limit): the gateway's
-- seal failed on every run and, since every append on the format-2 chain drains the pending events
-- first, so did every approval event, source-removal rejection and sign-in that got the lock, for ever.
--
-- Now the drain chains the pending events that exist when it starts, in id order, as consecutive
-- format-2 batches of at most 1000 events and at most 8 MiB of text each (a batch holds at least one
-- event, whatever its size), with their original times. Same callers, same return (events chained).

-- Up Migration

CREATE OR REPLACE FUNCTION interlock_audit_chain_pending() RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
  n integer := 0;
  k integer;
  top bigint;
  v_events text;
BEGIN
  SELECT max(p.id) INTO top FROM audit_pending_events p;
  IF top IS NULL THEN
    RETURN 0;
  END IF;
  LOOP
    WITH head AS (
      SELECT p.id, octet_length(p.event) AS len FROM audit_pending_events p WHERE p.id <= top ORDER BY p.id LIMIT 1000
    ), pick AS (
      SELECT h.id FROM (SELECT head.id, sum(head.len) OVER (ORDER BY head.id) AS run, row_number() OVER (ORDER BY head.id) AS rn FROM head) h
       WHERE h.rn = 1 OR h.run <= 8388608
    ), gone AS (
      DELETE FROM audit_pending_events p USING pick WHERE p.id = pick.id RETURNING p.id, p.event
    )
    SELECT count(*)::integer, '[' || string_agg(gone.event, ',' ORDER BY gone.id) || ']' INTO k, v_events FROM gone;
    EXIT WHEN k = 0;
    PERFORM interlock_audit_chain_batch(v_events, false);
    n := n + k;
  END LOOP;
  RETURN n;
END
$$;
REVOKE EXECUTE ON FUNCTION interlock_audit_chain_pending() FROM PUBLIC;

-- Down Migration

CREATE OR REPLACE FUNCTION interlock_audit_chain_pending() RETURNS integer
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
