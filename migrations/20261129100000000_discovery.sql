-- InterLock control database: the discovery index (issue 4).
--
-- Applied by src/control/db.ts (node-pg-migrate runner, one transaction, under the runner's
-- advisory lock). Never edit an applied migration: add a new file with a later timestamp.
--
-- assets: one row per indexed item (a file of a documents source, or a row of a mapped table of a
-- PostgreSQL source), written only by the indexer (src/discovery/indexer.ts) and read by
-- interlock_discover, interlock_related_documents and get_document connector requests.
-- asset_index_status: when each source was last indexed and what changed.
-- The gateway's runtime role needs SELECT on both (the indexer runs as the owner).

-- Up Migration

CREATE TABLE assets (
  asset_id      text PRIMARY KEY CHECK (length(asset_id) BETWEEN 3 AND 512),
  source_id     text NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
  source_type   text NOT NULL CHECK (source_type IN ('postgres', 'documents')),
  document_type text NOT NULL,
  title         text NOT NULL,
  body          text NOT NULL,
  -- The category path (outermost first) and the same joined with '/' (what discover/request
  -- statements of source roles are matched against, exactly as AccessEvaluator.decideOpaque does).
  category_path text[] NOT NULL DEFAULT '{}',
  category_key  text NOT NULL DEFAULT '',
  ts            timestamptz,
  audience      text[] NOT NULL DEFAULT '{}',
  -- [{type, value}] as given, and the same as keys JSON.stringify([type, value]) for GIN lookups.
  entities      jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(entities) = 'array'),
  entity_keys   text[] NOT NULL DEFAULT '{}',
  -- Links resolved to asset ids (possibly of other sources: those are never followed).
  links         text[] NOT NULL DEFAULT '{}',
  content_hash  text NOT NULL,
  indexed_at    timestamptz NOT NULL DEFAULT now(),
  tsv           tsvector GENERATED ALWAYS AS (
                  setweight(to_tsvector('english'::regconfig, title), 'A') ||
                  setweight(to_tsvector('english'::regconfig, body), 'B')
                ) STORED,
  CHECK (starts_with(asset_id, source_id || ':'))
);
CREATE INDEX assets_tsv_idx ON assets USING gin (tsv);
CREATE INDEX assets_source_idx ON assets (source_id, asset_id);
CREATE INDEX assets_entity_keys_idx ON assets USING gin (entity_keys);
CREATE INDEX assets_links_idx ON assets USING gin (links);

CREATE TABLE asset_index_status (
  source_id   text PRIMARY KEY REFERENCES sources (id) ON DELETE CASCADE,
  indexed_at  timestamptz NOT NULL,
  duration_ms double precision NOT NULL,
  assets      integer NOT NULL,
  added       integer NOT NULL,
  updated     integer NOT NULL,
  unchanged   integer NOT NULL,
  removed     integer NOT NULL,
  skipped     integer NOT NULL,
  -- Items that could not be indexed: [{item, reason}] (at most 100 kept).
  problems    jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(problems) = 'array')
);

-- Down Migration

DROP TABLE IF EXISTS asset_index_status;
DROP TABLE IF EXISTS assets;
