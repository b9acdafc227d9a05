-- InterLock control database: why an approved write failed, and requeued approvals (issue 14, item 4).
--
-- Applied by src/control/db.ts (node-pg-migrate runner). Never edit an applied migration.
--
-- approvals.failure: the operator-visible cause of a failed execution: PostgreSQL's SQLSTATE,
--   message, detail and hint (or the re-check that refused it). Shown to operators only (CLI,
--   admin API, console); never to agents, who get the stable outcome.error_code and a safe message.
-- approvals.requeued_from: the failed approval this pending one was made from by
--   `interlock approval requeue apr_…` (same statement, parameters, identity and source).
-- Both are write-once: requeued_from is fixed at insert; failure is set only by the move to failed.

-- Up Migration

ALTER TABLE approvals
  ADD COLUMN failure jsonb CHECK (failure IS NULL OR jsonb_typeof(failure) = 'object'),
  ADD COLUMN requeued_from text REFERENCES approvals (id);
CREATE INDEX approvals_requeued_from_idx ON approvals (requeued_from) WHERE requeued_from IS NOT NULL;

CREATE FUNCTION interlock_approvals_cause_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.requeued_from IS DISTINCT FROM OLD.requeued_from THEN
    RAISE EXCEPTION 'approval %: requeued_from is immutable', OLD.id;
  END IF;
  IF NEW.failure IS DISTINCT FROM OLD.failure AND NOT (OLD.failure IS NULL AND NEW.state = 'failed' AND OLD.state = 'approved') THEN
    RAISE EXCEPTION 'approval %: failure is recorded once, with the move to failed', OLD.id;
  END IF;
  RETURN NEW;
END
$$;
CREATE TRIGGER approvals_cause_guard BEFORE UPDATE ON approvals
  FOR EACH ROW EXECUTE FUNCTION interlock_approvals_cause_guard();

-- Down Migration

DROP TRIGGER IF EXISTS approvals_cause_guard ON approvals;
DROP FUNCTION IF EXISTS interlock_approvals_cause_guard();
ALTER TABLE approvals DROP COLUMN IF EXISTS requeued_from, DROP COLUMN IF EXISTS failure;
