-- InterLock control database: token identities are provisioned only through checked functions
-- (issue 26). Applied by src/control/db.ts (node-pg-migrate runner). Never edit an applied migration.
--
-- The gateway's runtime role used to hold INSERT on identities and identity_subjects and
-- INSERT/DELETE on grants, so a stolen runtime credential could grant any role on any source to
-- any identity (one whose API key the thief holds included) or delete operator grants. Now it
-- holds none of these (src/control/db.ts grantRuntimeRole revokes them) and calls two SECURITY
-- DEFINER functions instead, which check their input:
--
--   interlock_provision_token_identity(id, name, issuer, subject): a new identity linked to one
--     token subject; id, name, issuer and subject must have their valid forms; an existing name or
--     subject is a unique violation (23505), so no existing identity is ever taken over.
--   interlock_sync_claim_grants(issuer, subject, roles[], sources[]): makes the claim-derived
--     grants (granted_by = 'claims') of the identity LINKED TO THAT SUBJECT exactly the given
--     (role, source) pairs that exist: an identity with no token subject (a key-only identity)
--     cannot be given anything, operator grants are never touched, a disabled identity gains
--     nothing, at most 1024 pairs. Writes (and so change notifications) only when something changes.
--
-- Bad input raises 22023 (invalid_parameter_value). EXECUTE is revoked from PUBLIC; the runtime
-- role gets it from grantRuntimeRole. search_path is pinned so a caller's schema cannot shadow a table.

-- Up Migration

CREATE FUNCTION interlock_provision_token_identity(p_id text, p_name text, p_issuer text, p_subject text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
  IF p_id IS NULL OR p_id !~ '^idn_[0-9a-f]{20}$' THEN
    RAISE EXCEPTION 'interlock_provision_token_identity: invalid identity id' USING ERRCODE = '22023';
  END IF;
  IF p_name IS NULL OR p_name !~ '^[a-z0-9][a-z0-9_.@-]{0,127}$' THEN
    RAISE EXCEPTION 'interlock_provision_token_identity: invalid identity name' USING ERRCODE = '22023';
  END IF;
  IF p_issuer IS NULL OR p_issuer !~ '^https?://' OR length(p_issuer) > 2048 THEN
    RAISE EXCEPTION 'interlock_provision_token_identity: invalid issuer' USING ERRCODE = '22023';
  END IF;
  IF p_subject IS NULL OR length(p_subject) = 0 OR length(p_subject) > 8192 THEN
    RAISE EXCEPTION 'interlock_provision_token_identity: invalid subject' USING ERRCODE = '22023';
  END IF;
  INSERT INTO identities (id, name) VALUES (p_id, p_name);
  INSERT INTO identity_subjects (issuer, subject, identity_id) VALUES (p_issuer, p_subject, p_id);
END
$$;
REVOKE ALL ON FUNCTION interlock_provision_token_identity(text, text, text, text) FROM PUBLIC;

CREATE FUNCTION interlock_sync_claim_grants(p_issuer text, p_subject text, p_roles text[], p_sources text[])
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  v_identity text;
  v_disabled boolean;
BEGIN
  IF p_roles IS NULL OR p_sources IS NULL OR cardinality(p_roles) <> cardinality(p_sources) OR cardinality(p_roles) > 1024
     OR array_position(p_roles, NULL) IS NOT NULL OR array_position(p_sources, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'interlock_sync_claim_grants: roles and sources must be arrays of equal length (at most 1024) without nulls' USING ERRCODE = '22023';
  END IF;
  SELECT s.identity_id, i.disabled INTO v_identity, v_disabled
    FROM identity_subjects s JOIN identities i ON i.id = s.identity_id
   WHERE s.issuer = p_issuer AND s.subject = p_subject;
  IF v_identity IS NULL THEN
    RAISE EXCEPTION 'interlock_sync_claim_grants: no identity is linked to this token subject' USING ERRCODE = '22023';
  END IF;
  IF EXISTS (SELECT 1 FROM grants g WHERE g.identity_id = v_identity AND g.granted_by = 'claims'
               AND (g.role_name, g.source_id) NOT IN (SELECT d.r, d.s FROM unnest(p_roles, p_sources) AS d(r, s))) THEN
    DELETE FROM grants g WHERE g.identity_id = v_identity AND g.granted_by = 'claims'
       AND (g.role_name, g.source_id) NOT IN (SELECT d.r, d.s FROM unnest(p_roles, p_sources) AS d(r, s));
  END IF;
  IF v_disabled THEN
    RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM unnest(p_roles, p_sources) AS d(r, s) JOIN roles ro ON ro.name = d.r JOIN sources so ON so.id = d.s
              WHERE NOT EXISTS (SELECT 1 FROM grants g WHERE g.identity_id = v_identity AND g.role_name = d.r AND g.source_id = d.s)) THEN
    INSERT INTO grants (identity_id, role_name, source_id, granted_by)
    SELECT v_identity, ro.name, so.id, 'claims' FROM unnest(p_roles, p_sources) AS d(r, s)
      JOIN roles ro ON ro.name = d.r JOIN sources so ON so.id = d.s
    ON CONFLICT DO NOTHING;
  END IF;
END
$$;
REVOKE ALL ON FUNCTION interlock_sync_claim_grants(text, text, text[], text[]) FROM PUBLIC;

-- Down Migration

DROP FUNCTION IF EXISTS interlock_sync_claim_grants(text, text, text[], text[]);
DROP FUNCTION IF EXISTS interlock_provision_token_identity(text, text, text, text);
