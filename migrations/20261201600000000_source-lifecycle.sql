-- InterLock control database: source removal and configuration audit events (issue 16).
--
-- Applied by src/control/db.ts (node-pg-migrate runner). Never edit an applied migration.
--
-- * A source can be removed (`interlock source remove ID`, `interlock apply --prune`). Its audit
--   events stay (audit_events has no foreign key), and so do its approvals: they are history, like
--   the audit trail, so approvals.source_id no longer references sources. Grants and the catalog
--   snapshot of a removed source are deleted with it (src/control/sources.ts removeSource).
-- * Configuration changes (source update/remove, `interlock apply`) are audited as kind "config":
--   decision names the change (source_updated, source_removed, applied), operator who made it,
--   details the change (never a secret).

-- Up Migration

ALTER TABLE approvals DROP CONSTRAINT IF EXISTS approvals_source_id_fkey;
-- The kind check's name depends on history (the partitioned table of 20261201110000000 was created
-- beside the old one, so its check may be audit_events_kind_check1): drop whichever checks kind.
DO $$
DECLARE c record;
BEGIN
  FOR c IN SELECT conname FROM pg_constraint
            WHERE conrelid = 'audit_events'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%kind%'
  LOOP
    EXECUTE format('ALTER TABLE audit_events DROP CONSTRAINT %I', c.conname);
  END LOOP;
END $$;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_kind_check CHECK (kind IN ('tool_call', 'approval', 'config'));

-- Down Migration

ALTER TABLE audit_events DROP CONSTRAINT IF EXISTS audit_events_kind_check;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_kind_check CHECK (kind IN ('tool_call', 'approval'));
ALTER TABLE approvals ADD CONSTRAINT approvals_source_id_fkey FOREIGN KEY (source_id) REFERENCES sources (id);
