-- InterLock control database: the attribute claims a token subject last presented (red team rt27m finding 3, issue 27).
--
-- Applied by src/control/db.ts (node-pg-migrate runner). Never edit an applied migration.
--
-- identity_subjects.claim_attributes: the usable attribute values (auth.issuers[].attribute_claims)
--   of the last token of this (issuer, subject) the gateway saw, written when they change (and with
--   last_used_at otherwise); claims_seen_at: when. An approval of a write queued with kept claim
--   values (approvals.claim_attributes) does not use a kept value that a token of the requester's
--   seen since the write was queued contradicts (src/control/identities.ts claimsStillHeld): the
--   issuer has moved it since. NULL: not recorded (before this migration, or a runtime role not yet
--   granted the columns: re-run `interlock db grant-runtime-role`).

-- Up Migration

ALTER TABLE identity_subjects
  ADD COLUMN claim_attributes jsonb
    CONSTRAINT identity_subjects_claim_attributes_object CHECK (claim_attributes IS NULL OR jsonb_typeof(claim_attributes) = 'object'),
  ADD COLUMN claims_seen_at timestamptz;

-- Down Migration

ALTER TABLE identity_subjects DROP COLUMN IF EXISTS claims_seen_at;
ALTER TABLE identity_subjects DROP COLUMN IF EXISTS claim_attributes;
