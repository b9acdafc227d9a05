-- InterLock control database: column lineage of indexed fields (issue 12, item 2).
--
-- Applied by src/control/db.ts (node-pg-migrate runner). Never edit an applied migration.
--
-- A row of a mapped SQL table is indexed from columns of that table; interlock_discover,
-- interlock_related_documents and get_document apply the caller's read decision and column masks
-- to those columns (src/discovery/fields.ts). So the index records:
-- * assets.relation: the mapped relation ("schema.table") of a mapped row; NULL for documents
--   files (they have no column lineage).
-- * asset_relations: per source and mapped relation, the source columns feeding each indexed
--   field, as {"<field>": ["<column>", ...]} (fields: id, title, body, document_type,
--   category_path, timestamp, audience, entities, links). Written by the indexer in the same
--   transaction as the rows. A relation with no entry here is shown to nobody (fail closed).
-- * assets.tsv_title / tsv_body: the title (weight A) and body (weight B) vectors of mapped rows
--   on their own, so a caller for whom one of the two is denied or masked searches only the other
--   (filtering before ranking and LIMIT, GIN-indexed). NULL for documents files.

-- Up Migration

ALTER TABLE assets ADD COLUMN relation text;
ALTER TABLE assets
  ADD COLUMN tsv_title tsvector GENERATED ALWAYS AS (
    CASE WHEN relation IS NULL THEN NULL ELSE setweight(to_tsvector('english'::regconfig, title), 'A') END
  ) STORED,
  ADD COLUMN tsv_body tsvector GENERATED ALWAYS AS (
    CASE WHEN relation IS NULL THEN NULL ELSE setweight(to_tsvector('english'::regconfig, body), 'B') END
  ) STORED;
CREATE INDEX assets_tsv_title_idx ON assets USING gin (tsv_title) WHERE relation IS NOT NULL;
CREATE INDEX assets_tsv_body_idx ON assets USING gin (tsv_body) WHERE relation IS NOT NULL;

CREATE TABLE asset_relations (
  source_id text NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
  relation  text NOT NULL CHECK (relation ~ '^[^.]+\.[^.]+$'),
  fields    jsonb NOT NULL CHECK (jsonb_typeof(fields) = 'object'),
  PRIMARY KEY (source_id, relation)
);

-- Rows of mapped tables indexed before this migration carry no lineage: they get a relation
-- without an asset_relations entry, so nobody sees them until the next `interlock index`
-- rewrites them (their content hash changes because it now covers the lineage).
UPDATE assets SET relation = split_part(substr(asset_id, length(source_id) + 2), '/', 1)
 WHERE source_type = 'postgres' AND position('/' IN substr(asset_id, length(source_id) + 2)) > 0;

-- Down Migration

DROP TABLE IF EXISTS asset_relations;
DROP INDEX IF EXISTS assets_tsv_body_idx;
DROP INDEX IF EXISTS assets_tsv_title_idx;
ALTER TABLE assets DROP COLUMN IF EXISTS tsv_body, DROP COLUMN IF EXISTS tsv_title, DROP COLUMN IF EXISTS relation;
