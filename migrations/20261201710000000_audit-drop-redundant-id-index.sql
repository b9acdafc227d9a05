-- InterLock control database: one index fewer to maintain on every audit insert (issue 13).
--
-- Applied by src/control/db.ts (node-pg-migrate runner). Never edit an applied migration.
--
-- audit_events_id_idx (20261201110000000) indexes (id) alone, which the primary key
-- (id, recorded_at) already orders by: every lookup or range on id can use the primary key, so the
-- extra index only cost one more B-tree insert per event (with the partial indexes, eight per row).

-- Up Migration

DROP INDEX IF EXISTS audit_events_id_idx;

-- Down Migration

CREATE INDEX IF NOT EXISTS audit_events_id_idx ON audit_events (id);
