-- InterLock control database: claim grants only for pairs a claim rule of the token's issuer names
-- (red team rtop finding 5; task hcg).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- Before: interlock_sync_claim_grants (SECURITY DEFINER, EXECUTE granted to the gateway's runtime
-- role) trusted the (role, source) pairs its caller passed; it checked only that they existed. A
-- stolen runtime credential could provision an identity for a token subject it controls and give it
-- any role on any source. The function could not check the pairs against the issuer's role_grants:
-- those of the gateway configuration (auth.issuers[].role_grants) never reached the database.
--
-- Now:
--
-- * configured_claim_grants (issuer, role_name, source_id): the (role, source) pairs of the gateway
--   configuration's role_grants rules, per issuer. Written at `interlock serve` start by a gateway
--   whose control role owns the tables or through its operator connection, or by `interlock db
--   sync-claim-rules --config FILE` (src/control/claim-rules.ts), never by the runtime role: it may
--   only SELECT (grant-runtime-role's SELECT on every table); the operator role gets INSERT and
--   DELETE (grant-operator-role). No foreign keys: a rule may name a role or source that does not
--   exist yet (the function skips those, as before). Changes are notified (interlock_control,
--   'configured_claim_grants').
-- * interlock_sync_claim_grants raises 42501, changing nothing, when a pair it is given is named by
--   no rule of that issuer: neither a row of configured_claim_grants nor a role_grants rule of the
--   issuer's claim_mappings row. Removing claim grants needs no rule. Otherwise as
--   20261208220000000 (search_path with pg_temp last, as 20261208260000000 set it).
-- * Upgrade: the table is seeded with the pairs of the claim grants that exist now (grants.granted_by
--   = 'claims', under each issuer the identity has a token subject of), so an honest deployment
--   keeps giving them until the first privileged sync replaces the rows with the configuration's
--   rules. Roles that may read claim_mappings may read the new table, and roles that may INSERT into
--   claim_mappings (the operator role) may INSERT and DELETE its rows, so an upgraded gateway works
--   before grant-runtime-role / grant-operator-role run again.

-- Up Migration

CREATE TABLE configured_claim_grants (
  issuer     text NOT NULL CHECK (issuer ~ '^https?://' AND length(issuer) <= 2048),
  role_name  text NOT NULL CHECK (length(role_name) BETWEEN 1 AND 128),
  source_id  text NOT NULL CHECK (length(source_id) BETWEEN 1 AND 128),
  added_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (issuer, role_name, source_id)
);
CREATE TRIGGER configured_claim_grants_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON configured_claim_grants
  FOR EACH STATEMENT EXECUTE FUNCTION interlock_notify_change();

INSERT INTO configured_claim_grants (issuer, role_name, source_id)
SELECT DISTINCT s.issuer, g.role_name, g.source_id
  FROM grants g JOIN identity_subjects s ON s.identity_id = g.identity_id
 WHERE g.granted_by = 'claims' AND s.issuer ~ '^https?://' AND length(s.issuer) <= 2048
ON CONFLICT DO NOTHING;

DO $$
DECLARE
  r record;
BEGIN
  FOR r IN
    SELECT DISTINCT g.rolname, a.privilege_type
      FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a JOIN pg_roles g ON g.oid = a.grantee
     WHERE c.oid = 'claim_mappings'::regclass AND a.grantee <> c.relowner AND a.privilege_type IN ('SELECT', 'INSERT')
  LOOP
    IF r.privilege_type = 'SELECT' THEN
      EXECUTE format('GRANT SELECT ON configured_claim_grants TO %I', r.rolname);
    ELSE
      EXECUTE format('GRANT INSERT, DELETE ON configured_claim_grants TO %I', r.rolname);
    END IF;
  END LOOP;
END
$$;

-- As 20261208220000000, and every pair must be named by a claim rule of the issuer (above).
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
DROP TABLE IF EXISTS configured_claim_grants;
