-- InterLock control database: the issue time of the token whose attribute claims a subject's row records
-- (red team rt48b B5).
--
-- Applied by src/control/db.ts (node-pg-migrate runner). Never edit an applied migration.
--
-- Before: identity_subjects.claim_attributes (migration 20261206150000000_subject-claims_rt27m) held the
-- claims of the LAST token presented, whatever its age. A requester the issuer moved to another tenant
-- could present its older, still unexpired token after the newer one: the old claims were recorded
-- again, and the kept claim value of its queued write counted as held at approval (claimsStillHeld).
--
-- Now claims_issued_at holds the `iat` of the token whose claims are recorded; a token issued earlier
-- than it still authenticates (its own claims serve its own call) but no longer replaces the recorded
-- claims (src/auth/token-identities.ts touch). A token without `iat` cannot be ordered: it replaces them,
-- and clears claims_issued_at, as before. NULL: no ordered token recorded yet. The runtime role gets
-- UPDATE on the column from `interlock db grant-runtime-role` (a role granted before this migration
-- records claims unordered until it is run again).

-- Up Migration

ALTER TABLE identity_subjects ADD COLUMN IF NOT EXISTS claims_issued_at timestamptz;

-- Down Migration

ALTER TABLE identity_subjects DROP COLUMN IF EXISTS claims_issued_at;
