-- InterLock control database: a claim grant counts only while a claim rule names it (task hcl; red
-- team rtcg's race: a claim sync still open while its rule is removed commits its grant afterwards).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- Rejected first (task hsm2, never released): interlock_sync_claim_grants locking the claim rules it
-- relies on, so that a removal waits for an open sync. With the runtime credential alone, `BEGIN;
-- SELECT interlock_sync_claim_grants(…)` left open then blocked every removal of that rule (red team
-- rths). The function stays as 20261209210000000: it locks nothing, and a removal never waits.
--
-- Now: interlock_effective_grants, the rows of grants that count. An operator grant always counts; a
-- claim grant (granted_by = 'claims') counts only while some issuer the identity has a token subject
-- of (identity_subjects) has a claim rule naming its (role_name, source_id): a row of
-- configured_claim_grants, or an object of that issuer's claim_mappings.role_grants with those "role"
-- and "source" (the test interlock_sync_claim_grants makes). Every loader of grants for authorization
-- and discovery reads this view (src/control/grants.ts grantsForIdentity), so a claim grant committed
-- after its rule was removed is stored but grants nothing. A plain view (owner's rights): the roles
-- that may read grants may read it. Removing a rule notifies as before (interlock_control,
-- 'claim_mappings' / 'configured_claim_grants'); the gateway's cache of grants is dropped on those too
-- (src/governance/db-store.ts).

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

-- Down Migration

DROP VIEW IF EXISTS interlock_effective_grants;
