-- InterLock control database: identities from the organisation's identity provider (issue 26).
--
-- Applied by src/control/db.ts (node-pg-migrate runner). Never edit an applied migration.
--
-- identity_subjects links a token's (issuer, subject) to an identity; a disabled identity is refused
-- whatever its token says. grants.granted_by tells operator grants from grants kept in step with a
-- token's claims (auth.issuers[].role_grants): only the latter are ever removed by a sign-in.

-- Up Migration

CREATE TABLE identity_subjects (
  issuer       text NOT NULL,
  subject      text NOT NULL,
  identity_id  text NOT NULL REFERENCES identities (id) ON DELETE CASCADE,
  created_at   timestamptz NOT NULL DEFAULT now(),
  last_used_at timestamptz,
  PRIMARY KEY (issuer, subject)
);
CREATE INDEX identity_subjects_identity_idx ON identity_subjects (identity_id);

ALTER TABLE grants ADD COLUMN granted_by text NOT NULL DEFAULT 'operator' CHECK (granted_by IN ('operator', 'claims'));

-- Down Migration

ALTER TABLE grants DROP COLUMN IF EXISTS granted_by;
DROP TABLE IF EXISTS identity_subjects;
