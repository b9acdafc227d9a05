-- InterLock control database: one B-tree fewer on every audit insert (issue 28 item 2).
--
-- Applied by src/control/db.ts (node-pg-migrate runner). Never edit an applied migration.
--
-- audit_events_source_idx (source_id, id) was written once per event and read by nothing the
-- planner chose: a search by source (`interlock audit search --source`, the console's audit page)
-- asks for the newest events of one of a handful of sources, ORDER BY id DESC LIMIT n, which walks
-- the primary key (id, recorded_at) backwards and stops after n matches (bench/audit-index-plans.ts,
-- 100,000 events over 20 sources: the plan is the primary key's backward scan with or without this
-- index, 0.3–0.6 ms). What stays, and who needs it: the primary key (id order: search, tail, the
-- webhook dispatcher's cursor); (identity_id, id) for a search by one of many identities (8 ms at
-- 1 of 200 without it, growing with the trail); the partial request_id index for a search by
-- request id (a point lookup: 23 ms without it at 100,000 events, a full scan); the partial
-- approval_id index (approval status, console, webhooks; it holds approval events only); the BRIN
-- indexes on time and batch_id (search windows, verify's batch ranges, retention). The events are
-- unchanged: verify reads them the same way.

-- Up Migration

DROP INDEX IF EXISTS audit_events_source_idx;

-- Down Migration

CREATE INDEX IF NOT EXISTS audit_events_source_idx ON audit_events (source_id, id);
