-- InterLock control database: bounded approval queues, the expiry sweeper and coalesced webhook
-- deliveries (issue 24, items 2 and 5).
--
-- Partial indexes over pending approvals: the per-identity and per-source caps count them on every
-- queued write, and the sweeper finds the overdue ones, without reading decided history.
-- webhook_deliveries: the sweeper's approval.expired event; a queued event sent inside another
-- delivery of the same identity is recorded with status 'coalesced'.

-- Up Migration

CREATE INDEX approvals_pending_identity_idx ON approvals (identity_id) WHERE state = 'pending';
CREATE INDEX approvals_pending_source_idx ON approvals (source_id) WHERE state = 'pending';
CREATE INDEX approvals_pending_expiry_idx ON approvals (expires_at) WHERE state = 'pending';

ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_event_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_event_check
  CHECK (event IN ('approval.queued', 'approval.decided', 'approval.expired', 'approval.executed', 'approval.failed'));
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_status_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_status_check
  CHECK (status IN ('sending', 'delivered', 'failed', 'coalesced'));

-- Down Migration

ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_status_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_status_check CHECK (status IN ('sending', 'delivered', 'failed'));
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_event_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_event_check CHECK (event IN ('approval.queued', 'approval.decided', 'approval.executed', 'approval.failed'));
DROP INDEX IF EXISTS approvals_pending_expiry_idx;
DROP INDEX IF EXISTS approvals_pending_source_idx;
DROP INDEX IF EXISTS approvals_pending_identity_idx;
