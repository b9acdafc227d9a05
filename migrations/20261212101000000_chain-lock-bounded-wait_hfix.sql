-- InterLock control database: a token sign-in waits a little for the approval events' chain before
-- deferring its events (task hfix item 2; follows task hchain, 20261211140000000).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- Before: interlock_audit_append_or_defer (called by interlock_provision_token_identity and
-- interlock_sync_claim_grants in the statement that makes their change) took the format-2 chain's
-- lock row with FOR UPDATE SKIP LOCKED, so two sign-ins at once (the second finding the lock held by
-- the first for the few ms of its commit) left the second's events pending in audit_pending_events
-- until the next append or the gateway's seal (every 2 s): unchained under ordinary contention.
--
-- Now: interlock_audit_try_chain_lock() (owner's functions only) takes the lock row with a plain
-- FOR UPDATE under lock_timeout = 50 ms (its own SET clause: restored when it returns, so nothing else
-- of the caller's statement is bounded by it) and returns true, or false when the wait passed 50 ms
-- (lock_not_available, caught). While events are already pending (the lock was held past the bound
-- and nothing has chained them since) it does not wait but skips the lock as before (SKIP LOCKED), so
-- a session holding the lock for long costs one 50 ms wait, not one per sign-in.
-- interlock_audit_append_or_defer chains the events when it got the lock, and stores them as pending
-- otherwise, as before. A sign-in so waits at most 50 ms on the chain (a session holding the lock for
-- longer still has the others defer, task hchain / red team rths), and two ordinary sign-ins at once
-- both chain their events at once. A deadlock cannot outlast it either: PostgreSQL looks for one only
-- after deadlock_timeout (1 s by default).
--
-- Down: restores 20261211140000000's interlock_audit_append_or_defer (SKIP LOCKED) and drops the helper.

-- Up Migration

CREATE FUNCTION interlock_audit_try_chain_lock() RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp SET lock_timeout = '50ms' AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM audit_pending_events) THEN
    -- Events already wait: the lock has been held past the bound; do not wait again.
    PERFORM 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE SKIP LOCKED;
    RETURN FOUND;
  END IF;
  PERFORM 1 FROM audit_chain_lock WHERE id = 1 FOR UPDATE;
  RETURN FOUND;
EXCEPTION WHEN lock_not_available THEN
  RETURN false;
END
$$;
REVOKE EXECUTE ON FUNCTION interlock_audit_try_chain_lock() FROM PUBLIC;

CREATE OR REPLACE FUNCTION interlock_audit_append_or_defer(events text[]) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
  IF events IS NULL OR cardinality(events) = 0 THEN
    RETURN true;
  END IF;
  IF interlock_audit_try_chain_lock() THEN
    PERFORM interlock_audit_append_chain('[' || array_to_string(events, ',') || ']', false);
    RETURN true;
  END IF;
  INSERT INTO audit_pending_events (time, event)
  SELECT (u.e::jsonb ->> 'time')::timestamptz, u.e FROM unnest(events) WITH ORDINALITY AS u(e, o) ORDER BY u.o;
  RETURN false;
END
$$;
REVOKE EXECUTE ON FUNCTION interlock_audit_append_or_defer(text[]) FROM PUBLIC;

-- Down Migration

CREATE OR REPLACE FUNCTION interlock_audit_append_or_defer(events text[]) RETURNS boolean
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
DROP FUNCTION IF EXISTS interlock_audit_try_chain_lock();
