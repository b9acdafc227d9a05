-- InterLock control database: a token sign-in outside READ COMMITTED defers its events instead of
-- chaining them on a stale head (red team rt40, finding "a REPEATABLE READ sign-in that waited for
-- the chain forks it").
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- Before (20261212101000000_chain-lock-bounded-wait_hfix): interlock_audit_try_chain_lock waited up
-- to 50 ms for the format-2 chain's lock row. The lock row is only locked, never updated, so a
-- sign-in whose transaction runs at REPEATABLE READ (a runtime session's own choice, or a control
-- database whose default_transaction_isolation is repeatable read) got the lock when the holder
-- committed without a serialization failure, and interlock_audit_chain_batch then read the chain's
-- head from the transaction's snapshot, taken before that commit: two format-2 batches on the same
-- prev_hash, and `interlock audit verify` reports broken_link. The 50 ms wait made this the ordinary
-- contended case (SKIP LOCKED left only a race of microseconds).
--
-- Now: outside READ COMMITTED (current_setting('transaction_isolation')) the function returns false
-- at once, so the sign-in stores its events as pending (no snapshot read); the gateway's seal (READ
-- COMMITTED) or the next append chains them. READ COMMITTED callers, the gateway's own, are unchanged.
-- Other appends on the chain (interlock_audit_append_v2 and older) are not changed here: a holder
-- of the runtime credential can still fork the chain through them at REPEATABLE READ (open, see
-- test/integration/attacks/rt40-redteam.test.ts).
--
-- Down: restores 20261212101000000's body.

-- Up Migration

CREATE OR REPLACE FUNCTION interlock_audit_try_chain_lock() RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp SET lock_timeout = '50ms' AS $$
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    -- The chain's head would be read from a snapshot older than the lock: defer instead.
    RETURN false;
  END IF;
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

-- Down Migration

CREATE OR REPLACE FUNCTION interlock_audit_try_chain_lock() RETURNS boolean
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
