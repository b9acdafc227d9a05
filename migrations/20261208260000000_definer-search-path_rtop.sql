-- InterLock control database: the token provisioning functions search the caller's temporary
-- schema last (red team rtop finding 1).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- interlock_provision_token_identity and interlock_sync_claim_grants run with the owner's rights
-- (SECURITY DEFINER) for the gateway's runtime role. Their search_path was "pg_catalog, public":
-- when pg_temp is not named, PostgreSQL searches the session's temporary schema FIRST for tables,
-- and every role may create temporary tables (PUBLIC holds TEMP on a database by default). A
-- runtime session could so shadow identities and identity_subjects with tables of its own and link
-- a token subject to any existing identity, or give a key-only or disabled identity any role on any
-- source. Naming pg_temp last makes it searched last; the runtime role's own objects in public are
-- ruled out already (no CREATE on public).

-- Up Migration

ALTER FUNCTION interlock_provision_token_identity(text, text, text, text) SET search_path = pg_catalog, public, pg_temp;
ALTER FUNCTION interlock_sync_claim_grants(text, text, text[], text[]) SET search_path = pg_catalog, public, pg_temp;

-- Down Migration

ALTER FUNCTION interlock_provision_token_identity(text, text, text, text) SET search_path = pg_catalog, public;
ALTER FUNCTION interlock_sync_claim_grants(text, text, text[], text[]) SET search_path = pg_catalog, public;
