-- InterLock control database: server-side console sessions (issue 24, item 3).
--
-- Applied by src/control/db.ts (node-pg-migrate runner). Never edit an applied migration.
--
-- The console's cookie holds only a random session id (256 bits); this table holds its SHA-256, so
-- a read of the table gives no usable cookie. Every replica checks a request's session here, so
-- signing out (ended_at) ends it everywhere at once, a revoked or expired operator token ends its
-- sessions (the check joins operator_tokens), and the idle (last_seen_at) and absolute
-- (expires_at) timeouts hold on every replica. Ended and expired rows are deleted a day later, at
-- the next sign-in (src/console/session.ts).

-- Up Migration

CREATE TABLE console_sessions (
  id_hash      bytea PRIMARY KEY CHECK (octet_length(id_hash) = 32),
  token_id     text NOT NULL REFERENCES operator_tokens (id),
  operator     text NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  last_seen_at timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz NOT NULL,
  ended_at     timestamptz,
  ended_reason text CHECK (ended_reason IN ('signed_out'))
);
CREATE INDEX console_sessions_token_idx ON console_sessions (token_id);
CREATE INDEX console_sessions_expires_idx ON console_sessions (expires_at);

-- Down Migration

DROP TABLE IF EXISTS console_sessions;
