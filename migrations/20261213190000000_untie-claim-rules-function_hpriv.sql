-- InterLock control database: the source governance family unties a removed source's claim mapping
-- rules only through a function that takes out exactly the rules naming that source (red team rt41a,
-- low, hostile operator; task hpriv).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- Before: to take the rules naming a source out of the claim mappings on a forced removal (task hlow,
-- src/control/claim-mappings.ts untieClaimRules), the `source` family (src/control/governance-privileges.ts)
-- needed UPDATE of the whole claim_mappings table: a role given only that family could rewrite any
-- mapping's role_grants (give an IdP group any role on any source), a write of apply's family.
--
-- Now the family needs EXECUTE of interlock_untie_removed_source_claim_rules(source) instead
-- (SECURITY DEFINER, owned by the schema owner who runs this migration, search_path pinned, EXECUTE
-- revoked from PUBLIC). It refuses while the source exists (the caller deletes the source first, in
-- the same transaction, as for interlock_reject_removed_source_approvals), locks the mappings whose
-- role_grants (an array) hold a rule whose "source" is that id (JSON string equality), takes those
-- rules out (the other elements keep their order; identity_claim and unknown_subjects untouched),
-- and returns one row per changed mapping: issuer and the removed rules (a JSON array, in their
-- order), by issuer. The caller records each change (claim_mapping_updated) as before.
--
-- Grants: every role other than the owner that held UPDATE on claim_mappings (the source family or
-- apply) gets EXECUTE of the function, so an upgraded operator role keeps removing sources; a role
-- that held UPDATE on claim_mappings but not INSERT (the source family without apply's claim mapping
-- writes) loses that UPDATE. Roles holding INSERT too (apply; `interlock db grant-operator-role`)
-- keep it: apply writes claim mappings. No row changes.
--
-- Down: drops the function and gives UPDATE on claim_mappings back to the roles that may execute it
-- (the grant before this migration).

-- Up Migration

CREATE FUNCTION interlock_untie_removed_source_claim_rules(p_source text)
RETURNS TABLE (issuer text, removed jsonb) LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
DECLARE
  v_source jsonb;
  m record;
BEGIN
  IF p_source IS NULL THEN
    RAISE EXCEPTION 'interlock_untie_removed_source_claim_rules: the source must be given' USING ERRCODE = '22023';
  END IF;
  IF EXISTS (SELECT 1 FROM public.sources s WHERE s.id = p_source) THEN
    RAISE EXCEPTION 'interlock_untie_removed_source_claim_rules: the source still exists (delete it first)' USING ERRCODE = '55000';
  END IF;
  v_source := to_jsonb(p_source);
  FOR m IN
    SELECT cm.issuer AS i, cm.role_grants AS g
      FROM public.claim_mappings cm
     WHERE jsonb_typeof(cm.role_grants) = 'array'
       AND EXISTS (SELECT 1 FROM jsonb_array_elements(cm.role_grants) AS x(rule) WHERE x.rule -> 'source' = v_source)
     ORDER BY cm.issuer
       FOR UPDATE
  LOOP
    UPDATE public.claim_mappings cm
       SET role_grants = coalesce((SELECT jsonb_agg(x.rule ORDER BY x.n) FROM jsonb_array_elements(m.g) WITH ORDINALITY AS x(rule, n)
                                    WHERE (x.rule -> 'source') IS DISTINCT FROM v_source), '[]'::jsonb),
           updated_at = now()
     WHERE cm.issuer = m.i;
    issuer := m.i;
    removed := (SELECT jsonb_agg(x.rule ORDER BY x.n) FROM jsonb_array_elements(m.g) WITH ORDINALITY AS x(rule, n) WHERE x.rule -> 'source' = v_source);
    RETURN NEXT;
  END LOOP;
END
$$;
REVOKE EXECUTE ON FUNCTION interlock_untie_removed_source_claim_rules(text) FROM PUBLIC;

DO $$
DECLARE
  r record;
BEGIN
  FOR r IN
    -- Table grants and column grants (REVOKE on the table takes back both).
    SELECT DISTINCT g.rolname, has_table_privilege(g.oid, 'claim_mappings', 'INSERT') AS may_insert
      FROM (SELECT c.relowner AS owner, c.relacl AS acl FROM pg_class c WHERE c.oid = 'claim_mappings'::regclass
            UNION ALL
            SELECT c.relowner, att.attacl FROM pg_class c JOIN pg_attribute att ON att.attrelid = c.oid
             WHERE c.oid = 'claim_mappings'::regclass AND att.attnum > 0 AND NOT att.attisdropped AND att.attacl IS NOT NULL) t
      CROSS JOIN LATERAL aclexplode(t.acl) a JOIN pg_roles g ON g.oid = a.grantee
     WHERE a.grantee <> t.owner AND a.privilege_type = 'UPDATE'
  LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION interlock_untie_removed_source_claim_rules(text) TO %I', r.rolname);
    IF NOT r.may_insert THEN
      EXECUTE format('REVOKE UPDATE ON claim_mappings FROM %I', r.rolname);
    END IF;
  END LOOP;
END
$$;

-- Down Migration

DO $$
DECLARE
  r record;
BEGIN
  FOR r IN
    SELECT DISTINCT g.rolname
      FROM pg_proc p CROSS JOIN LATERAL aclexplode(p.proacl) a JOIN pg_roles g ON g.oid = a.grantee
     WHERE p.oid = 'interlock_untie_removed_source_claim_rules(text)'::regprocedure AND a.grantee <> p.proowner AND a.privilege_type = 'EXECUTE'
  LOOP
    EXECUTE format('GRANT UPDATE ON claim_mappings TO %I', r.rolname);
  END LOOP;
END
$$;
DROP FUNCTION IF EXISTS interlock_untie_removed_source_claim_rules(text);
