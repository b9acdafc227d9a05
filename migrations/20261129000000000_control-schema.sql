-- InterLock control database, schema version 1.
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction, under the runner's
-- advisory lock). Never edit an applied migration: add a new file with a later timestamp.
--
-- Tables: settings, identities, api_keys, sources, roles, grants, policies, approvals,
-- audit_events (append-only), catalog_snapshots, rate_limits (rate-limiter-flexible's store).
-- Every change to identities, api_keys, sources, roles, grants, policies or catalog_snapshots sends
-- NOTIFY interlock_control, '<table>' so that replicas invalidate their caches.

-- Up Migration

-- Key/value settings owned by the control plane (e.g. the generated API-key pepper).
CREATE TABLE settings (
  key        text PRIMARY KEY CHECK (key ~ '^[a-z][a-z0-9_]{0,62}$'),
  value      text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE identities (
  id          text PRIMARY KEY CHECK (id ~ '^idn_[0-9a-f]{20}$'),
  name        text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_.@-]{0,127}$'),
  disabled    boolean NOT NULL DEFAULT false,
  created_at  timestamptz NOT NULL DEFAULT now(),
  disabled_at timestamptz
);

-- API keys: only HMAC-SHA-256(pepper, secret) is stored (32 bytes); the secret is shown once.
CREATE TABLE api_keys (
  id           text PRIMARY KEY CHECK (id ~ '^key_[0-9a-f]{20}$'),
  identity_id  text NOT NULL REFERENCES identities (id),
  hash         bytea NOT NULL UNIQUE CHECK (octet_length(hash) = 32),
  prefix       text NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz,
  revoked_at   timestamptz,
  last_used_at timestamptz
);
CREATE INDEX api_keys_identity_idx ON api_keys (identity_id);

CREATE TABLE sources (
  id          text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
  type        text NOT NULL CHECK (type IN ('postgres', 'documents')),
  name        text NOT NULL,
  description text NOT NULL DEFAULT '',
  enabled     boolean NOT NULL DEFAULT true,
  settings    jsonb NOT NULL CHECK (jsonb_typeof(settings) = 'object'),
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Source roles; `statements` is validated by spec/role-v1.schema.json before it gets here.
CREATE TABLE roles (
  name        text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
  description text NOT NULL DEFAULT '',
  audiences   text[] NOT NULL DEFAULT '{}',
  statements  jsonb NOT NULL CHECK (jsonb_typeof(statements) = 'array'),
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE grants (
  identity_id text NOT NULL REFERENCES identities (id),
  role_name   text NOT NULL REFERENCES roles (name),
  source_id   text NOT NULL REFERENCES sources (id),
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (identity_id, role_name, source_id)
);
CREATE INDEX grants_source_idx ON grants (source_id);
CREATE INDEX grants_role_idx ON grants (role_name);

-- Policies; `rule` and `applies_to` are validated by spec/policy-v1.schema.json before they get here.
CREATE TABLE policies (
  name        text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
  description text NOT NULL DEFAULT '',
  enabled     boolean NOT NULL DEFAULT true,
  applies_to  jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(applies_to) = 'object'),
  rule        jsonb NOT NULL CHECK (jsonb_typeof(rule) = 'object'),
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Writes held for approval. The request fields are immutable and the state only moves along
-- pending -> approved -> executed | failed, pending -> rejected | expired (trigger below).
CREATE TABLE approvals (
  id             text PRIMARY KEY CHECK (id ~ '^apr_[0-9a-f]{24}$'),
  source_id      text NOT NULL REFERENCES sources (id),
  identity_id    text NOT NULL REFERENCES identities (id),
  key_id         text,
  request_id     text NOT NULL,
  sql            text NOT NULL,
  params         jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(params) = 'array'),
  classification jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(classification) = 'object'),
  state          text NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'approved', 'executed', 'failed', 'rejected', 'expired')),
  created_at     timestamptz NOT NULL DEFAULT now(),
  expires_at     timestamptz NOT NULL,
  decided_by     text,
  decided_at     timestamptz,
  executed_at    timestamptz,
  outcome        jsonb
);
CREATE INDEX approvals_state_idx ON approvals (state, created_at);
CREATE INDEX approvals_identity_idx ON approvals (identity_id, created_at);
CREATE INDEX approvals_source_idx ON approvals (source_id, created_at);

CREATE FUNCTION interlock_approvals_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION 'approvals are kept as history: DELETE is not allowed';
  END IF;
  IF NEW.id IS DISTINCT FROM OLD.id OR NEW.source_id IS DISTINCT FROM OLD.source_id
     OR NEW.identity_id IS DISTINCT FROM OLD.identity_id OR NEW.key_id IS DISTINCT FROM OLD.key_id
     OR NEW.request_id IS DISTINCT FROM OLD.request_id OR NEW.sql IS DISTINCT FROM OLD.sql
     OR NEW.params IS DISTINCT FROM OLD.params OR NEW.classification IS DISTINCT FROM OLD.classification
     OR NEW.created_at IS DISTINCT FROM OLD.created_at OR NEW.expires_at IS DISTINCT FROM OLD.expires_at THEN
    RAISE EXCEPTION 'approval %: the requested statement and its context are immutable', OLD.id;
  END IF;
  IF NOT ((OLD.state = 'pending' AND NEW.state IN ('approved', 'rejected', 'expired'))
          OR (OLD.state = 'approved' AND NEW.state IN ('executed', 'failed'))) THEN
    RAISE EXCEPTION 'approval %: illegal state transition % -> %', OLD.id, OLD.state, NEW.state;
  END IF;
  RETURN NEW;
END
$$;
CREATE TRIGGER approvals_guard BEFORE UPDATE OR DELETE ON approvals
  FOR EACH ROW EXECUTE FUNCTION interlock_approvals_guard();

-- The audit trail: one event per tools/call (kind tool_call) and per approval action (kind
-- approval). Append-only: UPDATE, DELETE and TRUNCATE raise, whoever runs them; the gateway's own
-- role should hold INSERT and SELECT only (interlock db grant-runtime-role ROLE).
CREATE TABLE audit_events (
  id               bigserial PRIMARY KEY,
  kind             text NOT NULL DEFAULT 'tool_call' CHECK (kind IN ('tool_call', 'approval')),
  time             timestamptz NOT NULL DEFAULT now(),
  request_id       text,
  identity_id      text,
  key_id           text,
  tool             text,
  canonical_tool   text,
  dialect          text,
  protocol_version text,
  decision         text NOT NULL,
  reason_code      text,
  source_id        text,
  action           text,
  fingerprint      text,
  relations        text[],
  row_count        bigint,
  duration_ms      double precision,
  approval_id      text,
  operator         text,
  details          jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(details) = 'object')
);
CREATE INDEX audit_events_time_idx ON audit_events (time);
CREATE INDEX audit_events_identity_idx ON audit_events (identity_id, id);
CREATE INDEX audit_events_source_idx ON audit_events (source_id, id);
CREATE INDEX audit_events_approval_idx ON audit_events (approval_id) WHERE approval_id IS NOT NULL;

CREATE FUNCTION interlock_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit_events is append-only: % is not allowed', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_events
  FOR EACH STATEMENT EXECUTE FUNCTION interlock_audit_append_only();

CREATE TABLE catalog_snapshots (
  source_id  text PRIMARY KEY REFERENCES sources (id),
  scanned_at timestamptz NOT NULL,
  truncated  boolean NOT NULL DEFAULT false,
  catalog    jsonb NOT NULL CHECK (jsonb_typeof(catalog) = 'object')
);

-- rate-limiter-flexible's RateLimiterPostgres store (same shape as the table it would create),
-- shared by every replica.
CREATE TABLE IF NOT EXISTS rate_limits (
  key    varchar(255) PRIMARY KEY,
  points integer NOT NULL DEFAULT 0,
  expire bigint
);

-- Change notification: NOTIFY interlock_control, '<table>' after every change (delivered at commit;
-- identical payloads in one transaction are folded into one notification).
CREATE FUNCTION interlock_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('interlock_control', TG_TABLE_NAME);
  RETURN NULL;
END
$$;

CREATE TRIGGER identities_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON identities
  FOR EACH STATEMENT EXECUTE FUNCTION interlock_notify_change();
CREATE TRIGGER sources_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON sources
  FOR EACH STATEMENT EXECUTE FUNCTION interlock_notify_change();
CREATE TRIGGER roles_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON roles
  FOR EACH STATEMENT EXECUTE FUNCTION interlock_notify_change();
CREATE TRIGGER grants_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON grants
  FOR EACH STATEMENT EXECUTE FUNCTION interlock_notify_change();
CREATE TRIGGER policies_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON policies
  FOR EACH STATEMENT EXECUTE FUNCTION interlock_notify_change();
CREATE TRIGGER catalog_snapshots_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON catalog_snapshots
  FOR EACH STATEMENT EXECUTE FUNCTION interlock_notify_change();
-- api_keys: every change except the once-a-minute last_used_at bookkeeping.
CREATE TRIGGER api_keys_notify_ins_del AFTER INSERT OR DELETE OR TRUNCATE ON api_keys
  FOR EACH STATEMENT EXECUTE FUNCTION interlock_notify_change();
CREATE TRIGGER api_keys_notify_upd AFTER UPDATE ON api_keys
  FOR EACH ROW
  WHEN (OLD.revoked_at IS DISTINCT FROM NEW.revoked_at OR OLD.expires_at IS DISTINCT FROM NEW.expires_at
        OR OLD.identity_id IS DISTINCT FROM NEW.identity_id OR OLD.hash IS DISTINCT FROM NEW.hash)
  EXECUTE FUNCTION interlock_notify_change();

-- Down Migration

DROP TABLE IF EXISTS rate_limits;
DROP TABLE IF EXISTS catalog_snapshots;
DROP TABLE IF EXISTS audit_events;
DROP TABLE IF EXISTS approvals;
DROP TABLE IF EXISTS policies;
DROP TABLE IF EXISTS grants;
DROP TABLE IF EXISTS roles;
DROP TABLE IF EXISTS sources;
DROP TABLE IF EXISTS api_keys;
DROP TABLE IF EXISTS identities;
DROP TABLE IF EXISTS settings;
DROP FUNCTION IF EXISTS interlock_notify_change();
DROP FUNCTION IF EXISTS interlock_audit_append_only();
DROP FUNCTION IF EXISTS interlock_approvals_guard();
