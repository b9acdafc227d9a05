-- InterLock control database: identity attributes for row rules (issue 27).
--
-- Applied by src/control/db.ts (node-pg-migrate runner). Never edit an applied migration.
--
-- An identity's attributes (e.g. {"employee_id": 3, "regions": ["eu"]}) are the values a role's
-- row rules read as identity.<name>. Operators set them (CLI, admin API); an identity from an
-- access token also gets its issuer's attribute claims, and the values set here win over them.

-- Up Migration

ALTER TABLE identities ADD COLUMN attributes jsonb NOT NULL DEFAULT '{}'::jsonb
  CONSTRAINT identities_attributes_object CHECK (jsonb_typeof(attributes) = 'object');

-- Down Migration

ALTER TABLE identities DROP COLUMN IF EXISTS attributes;
