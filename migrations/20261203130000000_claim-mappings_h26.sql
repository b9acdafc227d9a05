-- InterLock control database: claim mappings from interlock files (issue 26 item 2).
--
-- Applied by src/control/db.ts (node-pg-migrate runner). Never edit an applied migration.
--
-- One row per token issuer: which claim names the identity, whether an unknown subject is
-- provisioned, and which claim values grant which source roles. Written only by `interlock apply`
-- (src/declarative/apply.ts) and read by the gateway (src/control/claim-mappings.ts), which merges
-- a row with the issuer's auth.issuers entry of its configuration; trust in the issuer (keys,
-- audience, algorithms) stays in that configuration. Replicas reload on the change notification.

-- Up Migration

CREATE TABLE claim_mappings (
  issuer            text PRIMARY KEY CHECK (issuer ~ '^https?://' AND length(issuer) <= 2048),
  identity_claim    text CHECK (identity_claim IS NULL OR length(identity_claim) BETWEEN 1 AND 128),
  unknown_subjects  text CHECK (unknown_subjects IN ('refuse', 'provision')),
  role_grants       jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(role_grants) = 'array'),
  updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER claim_mappings_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON claim_mappings
  FOR EACH STATEMENT EXECUTE FUNCTION interlock_notify_change();

-- Down Migration

DROP TABLE IF EXISTS claim_mappings;
