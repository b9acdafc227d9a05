-- InterLock control database: a change of who a token subject is reaches every gateway at once (task hfix item 1).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- identity_subjects had no change notification, so a link, an unlink or a re-pointed subject made by
-- SQL of its own (not through `interlock identity unlink`, whose take-back of claim grants notifies
-- 'grants') reached running gateways only when their caches expired: the cached grants (which
-- claim grants count depends on the identity's subjects: interlock_effective_grants, task hcl) and
-- the cached token resolutions (up to 2 s). Now it sends NOTIFY interlock_control, 'identity_subjects'
-- (interlock_notify_change, as the other control tables) on INSERT, DELETE, TRUNCATE and on an UPDATE
-- of the columns that say who a subject is (issuer, subject, identity_id). The sign-in's own
-- bookkeeping (last_used_at, claim_attributes, claims_seen_at, updated at sign-ins) does not fire it.
-- The gateway drops its grants and token resolutions on it (src/governance/db-store.ts, src/gateway.ts).

-- Up Migration

CREATE TRIGGER identity_subjects_notify_ins_del AFTER INSERT OR DELETE OR TRUNCATE ON identity_subjects
  FOR EACH STATEMENT EXECUTE FUNCTION interlock_notify_change();
CREATE TRIGGER identity_subjects_notify_upd AFTER UPDATE OF issuer, subject, identity_id ON identity_subjects
  FOR EACH STATEMENT EXECUTE FUNCTION interlock_notify_change();

-- Down Migration

DROP TRIGGER IF EXISTS identity_subjects_notify_upd ON identity_subjects;
DROP TRIGGER IF EXISTS identity_subjects_notify_ins_del ON identity_subjects;
