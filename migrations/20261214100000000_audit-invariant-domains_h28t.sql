-- InterLock control database: the audit trail's one-column row invariants as domains (issue 28, task h28t).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction). Never edit an applied migration.
--
-- PostgreSQL (15 and later) reads and prepares every CHECK constraint of a result relation afresh for
-- each INSERT statement (ExecRelCheck: stringToNode and ExecPrepareExpr of each expression), so the
-- seven CHECKs of audit_batches and the two of audit_events cost every format-3 append the same
-- compile again (11 % of an append's backend CPU, h28c's profile). A domain's checks are kept planned
-- in the backend's type cache: a statement only initialises them (CoerceToDomain). The invariants are
-- the same expressions, now on the columns' types:
--
--   audit_batches.event_count   audit_event_count  VALUE >= 0
--   audit_batches.hash          audit_hash         octet_length(VALUE) = 32 (NOT NULL stays on the column)
--   audit_batches.prev_hash     audit_hash         the same (NULL passes a domain check, as it passed the CHECK)
--   audit_batches.seq           audit_seq          VALUE >= 0
--   audit_batches.mark          audit_mark         VALUE = 'seal'
--   audit_batches.format        audit_format       VALUE IN (1, 2, 3, 4) (NOT VALID, as the CHECK was)
--   audit_events.kind           audit_event_kind   VALUE IN ('tool_call', 'approval', 'config')
--   audit_events.details        audit_details      jsonb_typeof(VALUE) = 'object'
--
-- The one invariant over two columns, format 3 ⇔ chain_id and seq present (audit_batches_chain_check),
-- stays a CHECK. Each domain is created without its check, the column's type changed (binary
-- coercible: no rewrite, no index rebuilt but audit_batches' two partial indexes on format, which are
-- reused), then the check added to the domain, which checks every existing row (format's NOT VALID, as
-- before), and only then the table CHECK dropped: no row is rewritten or lost, and the trail verifies
-- as before (the hashed text is built from the values, which do not change). The RLS insert policy on
-- format is dropped and created again around the type change (PostgreSQL refuses to change the type of
-- a column a policy uses). The gateway's append statement casts kind and details to their base types
-- (src/audit/chain.ts), so the checks run in the plan, not once per value in Bind's domain_in.
-- Domains get USAGE for PUBLIC by default, as every type: the runtime role's INSERT needs nothing more.

-- Up Migration

CREATE DOMAIN audit_event_count AS integer;
CREATE DOMAIN audit_hash AS bytea;
CREATE DOMAIN audit_seq AS bigint;
CREATE DOMAIN audit_mark AS text;
CREATE DOMAIN audit_format AS smallint;
CREATE DOMAIN audit_event_kind AS text;
CREATE DOMAIN audit_details AS jsonb;

DROP POLICY audit_batches_lanes ON audit_batches;
ALTER TABLE audit_batches
  ALTER COLUMN event_count TYPE audit_event_count,
  ALTER COLUMN hash TYPE audit_hash,
  ALTER COLUMN prev_hash TYPE audit_hash,
  ALTER COLUMN seq TYPE audit_seq,
  ALTER COLUMN mark TYPE audit_mark,
  ALTER COLUMN format TYPE audit_format;
CREATE POLICY audit_batches_lanes ON audit_batches FOR INSERT WITH CHECK (format = 3);
ALTER TABLE audit_events
  ALTER COLUMN kind TYPE audit_event_kind,
  ALTER COLUMN details TYPE audit_details;

ALTER DOMAIN audit_event_count ADD CONSTRAINT audit_event_count_check CHECK (VALUE >= 0);
ALTER DOMAIN audit_hash ADD CONSTRAINT audit_hash_check CHECK (octet_length(VALUE) = 32);
ALTER DOMAIN audit_seq ADD CONSTRAINT audit_seq_check CHECK (VALUE >= 0);
ALTER DOMAIN audit_mark ADD CONSTRAINT audit_mark_check CHECK (VALUE = 'seal');
ALTER DOMAIN audit_format ADD CONSTRAINT audit_format_check CHECK (VALUE IN (1, 2, 3, 4)) NOT VALID;
ALTER DOMAIN audit_event_kind ADD CONSTRAINT audit_event_kind_check CHECK (VALUE IN ('tool_call', 'approval', 'config'));
ALTER DOMAIN audit_details ADD CONSTRAINT audit_details_check CHECK (jsonb_typeof(VALUE) = 'object');

ALTER TABLE audit_batches
  DROP CONSTRAINT audit_batches_event_count_check,
  DROP CONSTRAINT audit_batches_hash_check,
  DROP CONSTRAINT audit_batches_prev_hash_check,
  DROP CONSTRAINT audit_batches_seq_check,
  DROP CONSTRAINT audit_batches_mark_check,
  DROP CONSTRAINT audit_batches_format_check;
ALTER TABLE audit_events
  DROP CONSTRAINT audit_events_kind_check,
  DROP CONSTRAINT audit_events_details_check1;

-- Down Migration

ALTER TABLE audit_batches
  ADD CONSTRAINT audit_batches_event_count_check CHECK (event_count >= 0),
  ADD CONSTRAINT audit_batches_hash_check CHECK (octet_length(hash) = 32),
  ADD CONSTRAINT audit_batches_prev_hash_check CHECK (prev_hash IS NULL OR octet_length(prev_hash) = 32),
  ADD CONSTRAINT audit_batches_seq_check CHECK (seq IS NULL OR seq >= 0),
  ADD CONSTRAINT audit_batches_mark_check CHECK (mark IS NULL OR mark = 'seal'),
  ADD CONSTRAINT audit_batches_format_check CHECK (format IN (1, 2, 3, 4)) NOT VALID;
ALTER TABLE audit_events
  ADD CONSTRAINT audit_events_kind_check CHECK (kind IN ('tool_call', 'approval', 'config')),
  ADD CONSTRAINT audit_events_details_check1 CHECK (jsonb_typeof(details) = 'object');

DROP POLICY audit_batches_lanes ON audit_batches;
ALTER TABLE audit_batches
  ALTER COLUMN event_count TYPE integer,
  ALTER COLUMN hash TYPE bytea,
  ALTER COLUMN prev_hash TYPE bytea,
  ALTER COLUMN seq TYPE bigint,
  ALTER COLUMN mark TYPE text,
  ALTER COLUMN format TYPE smallint;
CREATE POLICY audit_batches_lanes ON audit_batches FOR INSERT WITH CHECK (format = 3);
ALTER TABLE audit_events
  ALTER COLUMN kind TYPE text,
  ALTER COLUMN details TYPE jsonb;

DROP DOMAIN audit_event_count;
DROP DOMAIN audit_hash;
DROP DOMAIN audit_seq;
DROP DOMAIN audit_mark;
DROP DOMAIN audit_format;
DROP DOMAIN audit_event_kind;
DROP DOMAIN audit_details;
