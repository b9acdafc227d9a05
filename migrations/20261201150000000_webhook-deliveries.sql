-- InterLock control database: approval webhook deliveries (issue 14, item 2).
--
-- One row per (webhook, approval audit event): the replica that inserts it first delivers it
-- (INSERT … ON CONFLICT DO NOTHING claims it), so replicas never send an event twice. Each attempt
-- updates attempts, last_status (HTTP status, null when the request failed) and last_error;
-- status ends delivered or failed (after the last retry).

-- Up Migration

CREATE TABLE webhook_deliveries (
  id           bigserial PRIMARY KEY,
  webhook      text NOT NULL,
  event_id     bigint NOT NULL,
  event        text NOT NULL CHECK (event IN ('approval.queued', 'approval.decided', 'approval.executed', 'approval.failed')),
  approval_id  text NOT NULL,
  status       text NOT NULL DEFAULT 'sending' CHECK (status IN ('sending', 'delivered', 'failed')),
  attempts     integer NOT NULL DEFAULT 0,
  last_status  integer,
  last_error   text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  finished_at  timestamptz,
  UNIQUE (webhook, event_id)
);
CREATE INDEX webhook_deliveries_approval_idx ON webhook_deliveries (approval_id);

-- Down Migration

DROP TABLE IF EXISTS webhook_deliveries;
