-- InterLock control database: a claim grant counts only while a claim rule names it (task hcl; red
-- team rtcg's race, red team rths finding "a runtime session holding a sync open makes every removal
-- of the rule fail").
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- Before (20261210210000000, task hsm2): interlock_sync_claim_grants locked the claim rules it relied
-- on (FOR KEY SHARE / FOR SHARE) so that a removal of a rule waited for a sync still open and then took
-- its grant back. With the runtime credential alone, `BEGIN; SELECT interlock_sync_claim_grants(…)`
-- left open then blocked every removal of that rule for as long as the session lived (each failing
-- after the operator connection's 10 s lock_timeout) and kept the grant.
--
-- Now:
--
-- * interlock_effective_grants: the rows of grants that count. An operator grant always counts; a
--   claim grant (granted_by = 'claims') counts only while some issuer the identity has a token
--   subject of (identity_subjects) has a claim rule naming its (role_name, source_id): a row of
--   configured_claim_grants, or an object of that issuer's claim_mappings.role_grants with those
--   "role" and "source" (the test interlock_sync_claim_grants makes). Every loader of grants for
--   authorization and discovery reads this view (src/control/grants.ts grantsForIdentity), so a claim
--   grant committed after its rule was removed (the race) is stored but grants nothing. A plain view
--   (owner's rights): roles that may read grants may read it.
-- * interlock_sync_claim_grants locks nothing again: as 20261209210000000 (hsm2's body minus the two
--   PERFORM … FOR … statements; search_path unchanged). A removal of a rule never waits for a sync.
-- * Removing a rule notifies as before (interlock_control, 'claim_mappings' / 'configured_claim_grants');
--   the gateway's cache of grants is dropped on those too (src/governance/db-store.ts).

-- Up Migration

CREATE VIEW interlock_effective_grants AS
SELECT g.*
  FROM grants g
 WHERE g.granted_by <> 'claims'
    OR EXISTS (SELECT 1 FROM identity_subjects s
                WHERE s.identity_id = g.identity_id
                  AND (EXISTS (SELECT 1 FROM configured_claim_grants c
                                WHERE c.issuer = s.issuer AND c.role_name = g.role_name AND c.source_id = g.source_id)
                       OR EXISTS (SELECT 1 FROM claim_mappings m CROSS JOIN LATERAL jsonb_array_elements(m.role_grants) AS x(rule)
                                   WHERE m.issuer = s.issuer AND jsonb_typeof(x.rule) = 'object'
                                     AND x.rule->>'role' = g.role_name AND x.rule->>'source' = g.source_id)));

COMMENT ON VIEW interlock_effective_grants IS 'Grants that count: operator grants, and claim grants some claim rule of an issuer of the identity names (task hcl)';

DO $$
DECLARE
  r record;
BEGIN
  FOR r IN
    SELECT DISTINCT g.rolname
      FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a JOIN pg_roles g ON g.oid = a.grantee
     WHERE c.oid = 'grants'::regclass AND a.grantee <> c.relowner AND a.privilege_type = 'SELECT'
  LOOP
    EXECUTE format('GRANT SELECT ON interlock_effective_grants TO %I', r.rolname);
  END LOOP;
END
$$;

-- As 20261209210000000: no locks on the claim rules (above).
CREATE OR REPLACE FUNCTION interlock_sync_claim_grants(p_issuer text, p_subject text, p_roles text[], p_sources text[])
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
  v_identity text;
  v_name text;
  v_disabled boolean;
  v_events text[] := '{}';
  v_head text;
BEGIN
  IF p_roles IS NULL OR p_sources IS NULL OR cardinality(p_roles) <> cardinality(p_sources) OR cardinality(p_roles) > 1024
     OR array_position(p_roles, NULL) IS NOT NULL OR array_position(p_sources, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'interlock_sync_claim_grants: roles and sources must be arrays of equal length (at most 1024) without nulls' USING ERRCODE = '22023';
  END IF;
  SELECT s.identity_id, i.name, i.disabled INTO v_identity, v_name, v_disabled
    FROM identity_subjects s JOIN identities i ON i.id = s.identity_id
   WHERE s.issuer = p_issuer AND s.subject = p_subject;
  IF v_identity IS NULL THEN
    RAISE EXCEPTION 'interlock_sync_claim_grants: no identity is linked to this token subject' USING ERRCODE = '22023';
  END IF;
  -- Only pairs some claim rule of this issuer names (red team rtop finding 5): a rule of the gateway
  -- configuration recorded in configured_claim_grants, or a rule of the issuer's claim mapping.
  -- Removals need no rule: a pair left out is taken back whatever the rules say.
  IF EXISTS (SELECT 1 FROM unnest(p_roles, p_sources) AS d(r, s)
              WHERE NOT EXISTS (SELECT 1 FROM configured_claim_grants c WHERE c.issuer = p_issuer AND c.role_name = d.r AND c.source_id = d.s)
                AND NOT EXISTS (SELECT 1 FROM claim_mappings m CROSS JOIN LATERAL jsonb_array_elements(m.role_grants) AS x(rule)
                                 WHERE m.issuer = p_issuer AND jsonb_typeof(x.rule) = 'object' AND x.rule->>'role' = d.r AND x.rule->>'source' = d.s)) THEN
    RAISE EXCEPTION 'interlock_sync_claim_grants: a (role, source) pair that no claim rule of this issuer names' USING ERRCODE = '42501';
  END IF;
  -- Details (keys sorted): grantedBy, identity, identityId, issuer, role.
  v_head := '{"grantedBy":"claims","identity":' || to_json(v_name)::text || ',"identityId":' || to_json(v_identity)::text
    || ',"issuer":' || to_json(p_issuer)::text || ',"role":';
  IF EXISTS (SELECT 1 FROM grants g WHERE g.identity_id = v_identity AND g.granted_by = 'claims'
               AND (g.role_name, g.source_id) NOT IN (SELECT d.r, d.s FROM unnest(p_roles, p_sources) AS d(r, s))) THEN
    WITH gone AS (
      DELETE FROM grants g WHERE g.identity_id = v_identity AND g.granted_by = 'claims'
         AND (g.role_name, g.source_id) NOT IN (SELECT d.r, d.s FROM unnest(p_roles, p_sources) AS d(r, s))
      RETURNING g.role_name, g.source_id
    )
    SELECT v_events || coalesce(array_agg(interlock_system_config_event('grant_revoked', gone.source_id, v_head || to_json(gone.role_name)::text || '}')
                                ORDER BY gone.source_id, gone.role_name), '{}')
      INTO v_events FROM gone;
  END IF;
  IF NOT v_disabled
     AND EXISTS (SELECT 1 FROM unnest(p_roles, p_sources) AS d(r, s) JOIN roles ro ON ro.name = d.r JOIN sources so ON so.id = d.s
                  WHERE NOT EXISTS (SELECT 1 FROM grants g WHERE g.identity_id = v_identity AND g.role_name = d.r AND g.source_id = d.s)) THEN
    WITH added AS (
      INSERT INTO grants (identity_id, role_name, source_id, granted_by)
      SELECT v_identity, ro.name, so.id, 'claims' FROM unnest(p_roles, p_sources) AS d(r, s)
        JOIN roles ro ON ro.name = d.r JOIN sources so ON so.id = d.s
      ON CONFLICT DO NOTHING
      RETURNING role_name, source_id
    )
    SELECT v_events || coalesce(array_agg(interlock_system_config_event('grant_added', added.source_id, v_head || to_json(added.role_name)::text || '}')
                                ORDER BY added.source_id, added.role_name), '{}')
      INTO v_events FROM added;
  END IF;
  IF cardinality(v_events) > 0 THEN
    PERFORM interlock_audit_append_chain('[' || array_to_string(v_events, ',') || ']', false);
  END IF;
END
$$;


-- Down Migration

DROP VIEW IF EXISTS interlock_effective_grants;

-- As 20261210210000000.
CREATE OR REPLACE FUNCTION interlock_sync_claim_grants(p_issuer text, p_subject text, p_roles text[], p_sources text[])
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
  v_identity text;
  v_name text;
  v_disabled boolean;
  v_events text[] := '{}';
  v_head text;
BEGIN
  IF p_roles IS NULL OR p_sources IS NULL OR cardinality(p_roles) <> cardinality(p_sources) OR cardinality(p_roles) > 1024
     OR array_position(p_roles, NULL) IS NOT NULL OR array_position(p_sources, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'interlock_sync_claim_grants: roles and sources must be arrays of equal length (at most 1024) without nulls' USING ERRCODE = '22023';
  END IF;
  SELECT s.identity_id, i.name, i.disabled INTO v_identity, v_name, v_disabled
    FROM identity_subjects s JOIN identities i ON i.id = s.identity_id
   WHERE s.issuer = p_issuer AND s.subject = p_subject;
  IF v_identity IS NULL THEN
    RAISE EXCEPTION 'interlock_sync_claim_grants: no identity is linked to this token subject' USING ERRCODE = '22023';
  END IF;
  -- Lock the rules the given pairs rely on before checking them (task hsm2; red team rtcg's race):
  -- FOR KEY SHARE on their configured_claim_grants rows and FOR SHARE on the issuer's claim_mappings
  -- row, held to the end of the caller's transaction. A removal of such a rule (a privileged sync's
  -- DELETE, apply's UPDATE or DELETE of the mapping) waits for this transaction and its take-back then
  -- sees the committed grant; a removal not yet committed makes this wait, and the check below (a new
  -- statement, READ COMMITTED) then sees no rule and refuses.
  IF cardinality(p_roles) > 0 THEN
    PERFORM 1 FROM configured_claim_grants c JOIN unnest(p_roles, p_sources) AS d(r, s) ON c.role_name = d.r AND c.source_id = d.s
     WHERE c.issuer = p_issuer FOR KEY SHARE OF c;
    PERFORM 1 FROM claim_mappings m WHERE m.issuer = p_issuer FOR SHARE OF m;
  END IF;
  -- Only pairs some claim rule of this issuer names (red team rtop finding 5): a rule of the gateway
  -- configuration recorded in configured_claim_grants, or a rule of the issuer's claim mapping.
  -- Removals need no rule: a pair left out is taken back whatever the rules say.
  IF EXISTS (SELECT 1 FROM unnest(p_roles, p_sources) AS d(r, s)
              WHERE NOT EXISTS (SELECT 1 FROM configured_claim_grants c WHERE c.issuer = p_issuer AND c.role_name = d.r AND c.source_id = d.s)
                AND NOT EXISTS (SELECT 1 FROM claim_mappings m CROSS JOIN LATERAL jsonb_array_elements(m.role_grants) AS x(rule)
                                 WHERE m.issuer = p_issuer AND jsonb_typeof(x.rule) = 'object' AND x.rule->>'role' = d.r AND x.rule->>'source' = d.s)) THEN
    RAISE EXCEPTION 'interlock_sync_claim_grants: a (role, source) pair that no claim rule of this issuer names' USING ERRCODE = '42501';
  END IF;
  -- Details (keys sorted): grantedBy, identity, identityId, issuer, role.
  v_head := '{"grantedBy":"claims","identity":' || to_json(v_name)::text || ',"identityId":' || to_json(v_identity)::text
    || ',"issuer":' || to_json(p_issuer)::text || ',"role":';
  IF EXISTS (SELECT 1 FROM grants g WHERE g.identity_id = v_identity AND g.granted_by = 'claims'
               AND (g.role_name, g.source_id) NOT IN (SELECT d.r, d.s FROM unnest(p_roles, p_sources) AS d(r, s))) THEN
    WITH gone AS (
      DELETE FROM grants g WHERE g.identity_id = v_identity AND g.granted_by = 'claims'
         AND (g.role_name, g.source_id) NOT IN (SELECT d.r, d.s FROM unnest(p_roles, p_sources) AS d(r, s))
      RETURNING g.role_name, g.source_id
    )
    SELECT v_events || coalesce(array_agg(interlock_system_config_event('grant_revoked', gone.source_id, v_head || to_json(gone.role_name)::text || '}')
                                ORDER BY gone.source_id, gone.role_name), '{}')
      INTO v_events FROM gone;
  END IF;
  IF NOT v_disabled
     AND EXISTS (SELECT 1 FROM unnest(p_roles, p_sources) AS d(r, s) JOIN roles ro ON ro.name = d.r JOIN sources so ON so.id = d.s
                  WHERE NOT EXISTS (SELECT 1 FROM grants g WHERE g.identity_id = v_identity AND g.role_name = d.r AND g.source_id = d.s)) THEN
    WITH added AS (
      INSERT INTO grants (identity_id, role_name, source_id, granted_by)
      SELECT v_identity, ro.name, so.id, 'claims' FROM unnest(p_roles, p_sources) AS d(r, s)
        JOIN roles ro ON ro.name = d.r JOIN sources so ON so.id = d.s
      ON CONFLICT DO NOTHING
      RETURNING role_name, source_id
    )
    SELECT v_events || coalesce(array_agg(interlock_system_config_event('grant_added', added.source_id, v_head || to_json(added.role_name)::text || '}')
                                ORDER BY added.source_id, added.role_name), '{}')
      INTO v_events FROM added;
  END IF;
  IF cardinality(v_events) > 0 THEN
    PERFORM interlock_audit_append_chain('[' || array_to_string(v_events, ',') || ']', false);
  END IF;
END
$$;

