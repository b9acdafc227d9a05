-- InterLock control database: operator tokens for the admin API (issue 6).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction, under the runner's
-- advisory lock). Never edit an applied migration: add a new file with a later timestamp.
--
-- An operator token authenticates a person (or an operator tool) on /admin/v1. It is not an agent
-- API key: it lives in its own table, has its own prefix ("ilo_" versus the keys' "ilk_"), and the
-- agent key resolver never reads this table, so a token can never be used on /mcp or /v1, and an
-- agent key is never found here. Like API keys, only HMAC-SHA-256(pepper, secret) is stored; the
-- secret is shown once by `interlock operator-token create NAME`.
-- `name` is the operator name recorded as decided_by on approvals (it shares the identity-name
-- pattern so the self-approval check compares like with like). One operator may hold several tokens.

-- Up Migration

CREATE TABLE operator_tokens (
  id           text PRIMARY KEY CHECK (id ~ '^opt_[0-9a-f]{20}$'),
  name         text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_.@-]{0,127}$'),
  hash         bytea NOT NULL UNIQUE CHECK (octet_length(hash) = 32),
  prefix       text NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz,
  revoked_at   timestamptz,
  last_used_at timestamptz
);
CREATE INDEX operator_tokens_name_idx ON operator_tokens (name);

-- Down Migration

DROP TABLE IF EXISTS operator_tokens;
