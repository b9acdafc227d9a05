-- InterLock control database: no role but the owner may make an object depend on the audit trail's
-- domains or on its tables' row types (red team rt45b F2, low; task f2x).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- Before: PUBLIC held USAGE on every type by default, so a role that may only append to the trail
-- (the runtime role, `interlock db grant-runtime-role`) could keep a temporary table with a column of
-- a trail domain (audit_event_kind, audit_hash, …; migration 20261214100000000) or of a trail table's
-- row type (audit_events, a partition, …). While that session lived, the owner's ALTER DOMAIN … ADD
-- CONSTRAINT and ALTER TABLE … ALTER COLUMN … TYPE of the trail failed (0A000): a migration like
-- h28t's failed until the session ended.
--
-- Now USAGE on the seven domains and on the row types of the trail's tables (audit_*: the tables,
-- the partitioned audit_events and every partition that exists) is revoked from PUBLIC. USAGE on a
-- type only guards creating objects that depend on it (a column, a function's argument, a cast):
-- inserting into a column of a domain, a cast to one (`'x'::audit_event_kind`), `NULL::audit_events`
-- and jsonb_populate_record(set) do not need it, and the SECURITY DEFINER functions (appends, token
-- sign-in, seals) run as the owner, who keeps it. So the runtime and operator roles do what they did;
-- only CREATE TABLE / CREATE FUNCTION over these types is refused to them (42501).
--
-- New monthly partitions (interlock_audit_ensure_partitions: at migration and by `audit archive`, as
-- the owner) get the same REVOKE on their row type: PostgreSQL gives a table's row type no default
-- privileges (ALTER DEFAULT PRIVILEGES does not reach it), so the function does it. ALTER DEFAULT
-- PRIVILEGES REVOKE USAGE ON TYPES FROM PUBLIC (for the role that runs this migration, the owner)
-- covers the domains and types later migrations create.
--
-- Down: gives USAGE back to PUBLIC on the same types, the function its body before, and the owner's
-- default privileges on types their default.

-- Up Migration

REVOKE USAGE ON DOMAIN audit_event_count, audit_hash, audit_seq, audit_mark, audit_format, audit_event_kind, audit_details FROM PUBLIC;

DO $$
DECLARE
  t regclass;
BEGIN
  FOR t IN SELECT c.oid::regclass FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace
      AND c.relkind IN ('r', 'p') AND c.relname LIKE 'audit\_%' AND c.reltype <> 0 LOOP
    EXECUTE format('REVOKE USAGE ON TYPE %s FROM PUBLIC', t);
  END LOOP;
END
$$;

ALTER DEFAULT PRIVILEGES REVOKE USAGE ON TYPES FROM PUBLIC;

CREATE OR REPLACE FUNCTION interlock_audit_ensure_partitions(from_month date, months integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  m date := from_month - (extract(day FROM from_month)::integer - 1);
  n integer := 0;
  name text;
BEGIN
  FOR i IN 0 .. months - 1 LOOP
    name := format('audit_events_p%s', to_char(m, 'YYYYMM'));
    IF to_regclass(name) IS NULL THEN
      BEGIN
        EXECUTE format('CREATE TABLE %I PARTITION OF audit_events FOR VALUES FROM (%L) TO (%L)', name,
          (m::timestamp AT TIME ZONE 'UTC'), ((m + interval '1 month')::timestamp AT TIME ZONE 'UTC'));
        EXECUTE format('CREATE TRIGGER audit_events_append_only BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION interlock_audit_append_only()', name);
        EXECUTE format('REVOKE USAGE ON TYPE %I FROM PUBLIC', name);
        n := n + 1;
      EXCEPTION WHEN check_violation THEN
        RAISE NOTICE 'audit partition % skipped: the default partition holds rows of that month', name;
      END;
    END IF;
    m := (m + interval '1 month')::date;
  END LOOP;
  RETURN n;
END
$$;

-- Down Migration

CREATE OR REPLACE FUNCTION interlock_audit_ensure_partitions(from_month date, months integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  m date := from_month - (extract(day FROM from_month)::integer - 1);
  n integer := 0;
  name text;
BEGIN
  FOR i IN 0 .. months - 1 LOOP
    name := format('audit_events_p%s', to_char(m, 'YYYYMM'));
    IF to_regclass(name) IS NULL THEN
      BEGIN
        EXECUTE format('CREATE TABLE %I PARTITION OF audit_events FOR VALUES FROM (%L) TO (%L)', name,
          (m::timestamp AT TIME ZONE 'UTC'), ((m + interval '1 month')::timestamp AT TIME ZONE 'UTC'));
        EXECUTE format('CREATE TRIGGER audit_events_append_only BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION interlock_audit_append_only()', name);
        n := n + 1;
      EXCEPTION WHEN check_violation THEN
        RAISE NOTICE 'audit partition % skipped: the default partition holds rows of that month', name;
      END;
    END IF;
    m := (m + interval '1 month')::date;
  END LOOP;
  RETURN n;
END
$$;

ALTER DEFAULT PRIVILEGES GRANT USAGE ON TYPES TO PUBLIC;

DO $$
DECLARE
  t regclass;
BEGIN
  FOR t IN SELECT c.oid::regclass FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace
      AND c.relkind IN ('r', 'p') AND c.relname LIKE 'audit\_%' AND c.reltype <> 0 LOOP
    EXECUTE format('GRANT USAGE ON TYPE %s TO PUBLIC', t);
  END LOOP;
END
$$;

GRANT USAGE ON DOMAIN audit_event_count, audit_hash, audit_seq, audit_mark, audit_format, audit_event_kind, audit_details TO PUBLIC;
