-- InterLock control database: a queued write keeps its requester's attribute values from token claims (issue 27).
--
-- Applied by src/control/db.ts (node-pg-migrate runner). Never edit an applied migration.
--
-- approvals.claim_attributes: for a write queued by an identity from an access token, the values its
--   token's attribute_claims gave for the attributes the write's row rules read (e.g. {"tenant": "a"}).
--   At approval the identity record's current values win and these fill in the rest
--   (src/approvals/execute.ts), as on a call. NULL: none (an API key, or no row rule read one).
--   Written once, with the row (the request's context is immutable, as interlock_approvals_guard
--   keeps the rest of it).

-- Up Migration

ALTER TABLE approvals ADD COLUMN claim_attributes jsonb
  CONSTRAINT approvals_claim_attributes_object CHECK (claim_attributes IS NULL OR jsonb_typeof(claim_attributes) = 'object');

CREATE FUNCTION interlock_approvals_claims_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.claim_attributes IS DISTINCT FROM OLD.claim_attributes THEN
    RAISE EXCEPTION 'approval %: claim_attributes is immutable', OLD.id;
  END IF;
  RETURN NEW;
END
$$;
CREATE TRIGGER approvals_claims_guard BEFORE UPDATE ON approvals
  FOR EACH ROW EXECUTE FUNCTION interlock_approvals_claims_guard();

-- Down Migration

DROP TRIGGER IF EXISTS approvals_claims_guard ON approvals;
DROP FUNCTION IF EXISTS interlock_approvals_claims_guard();
ALTER TABLE approvals DROP COLUMN IF EXISTS claim_attributes;
