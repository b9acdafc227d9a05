/**
 * Shapes shared by the discovery modules (issue 4): what a reader produces for the indexer, what
 * the indexer reports, and what the search functions return. Wire shapes (DiscoverHit,
 * RelatedDocument, DocumentContent) are declared in spec/mcp-tools-v1.json; the interfaces here
 * are their in-process form.
 */

/** A typed entity mentioned by an asset, e.g. {type: "service", value: "payments-api"}. */
export interface AssetEntity {
  type: string;
  value: string;
}

/**
 * One item to index, as a reader (documents folder, mapped table, generator) produces it.
 * Every string is already cleaned (no NUL, no lone surrogate) and every list deduplicated.
 */
export interface AssetInput {
  /** `<source_id>:<relative path>` (documents) or `<source_id>:<schema>.<table>/<id>` (mapped rows); at most 512 characters. */
  assetId: string;
  documentType: string;
  title: string;
  body: string;
  /** Outermost first; matched by role statements joined with '/'. */
  categoryPath: string[];
  /** ISO-8601 UTC, or null when the item has no time. */
  timestamp: string | null;
  /** Empty: visible to everyone who may discover it; otherwise only to roles carrying one of these. */
  audience: string[];
  entities: AssetEntity[];
  /** Resolved asset ids (possibly of other sources; those are never followed). */
  links: string[];
  /** Rows of mapped SQL tables only: the relation and the columns feeding each field (issue 12). Absent for documents files. */
  origin?: AssetOrigin;
}

/** The fields of an indexed asset that can be fed by columns of a mapped table. `id` feeds the asset id. */
export const INDEXED_FIELDS = ['id', 'title', 'body', 'document_type', 'category_path', 'timestamp', 'audience', 'entities', 'links'] as const;
/** One of INDEXED_FIELDS. */
export type IndexedField = (typeof INDEXED_FIELDS)[number];
/** For each field, the source columns feeding it (empty: a constant of the mapping, or not mapped). */
export type FieldColumns = Record<IndexedField, string[]>;

/** Where a mapped row comes from: the relation ("schema.table", exact names) and the columns feeding each field. */
export interface AssetOrigin {
  relation: string;
  fields: FieldColumns;
}

/** An item a reader could not index (skipped) or indexed with a remark, with the reason (for operators; never shown to agents). */
export interface IndexProblem {
  item: string;
  reason: string;
  /** True when the item was not indexed. */
  skipped: boolean;
}

/** Progress of one indexing run, reported as it goes (for the CLI's progress line or bar). */
export interface IndexProgress {
  sourceId: string;
  /** read: items being read from the source; write: changed items being written; done: finished. */
  phase: 'read' | 'write' | 'done';
  /** Items handled so far in this phase, and the phase's total when known (null while reading a folder). */
  done: number;
  total: number | null;
  added: number;
  updated: number;
  unchanged: number;
  removed: number;
  skipped: number;
}

/** What one indexing run changed. */
export interface IndexResult {
  sourceId: string;
  /** Assets of the source after the run. */
  assets: number;
  added: number;
  updated: number;
  unchanged: number;
  removed: number;
  /** Items that could not be indexed (and were removed from the index if they were in it). */
  skipped: number;
  problems: IndexProblem[];
  /** ISO-8601 time the run committed. */
  indexedAt: string;
  durationMs: number;
}

/** The per-source index status row (table asset_index_status). */
export interface IndexStatus {
  sourceId: string;
  indexedAt: string;
  durationMs: number;
  assets: number;
  added: number;
  updated: number;
  unchanged: number;
  removed: number;
  skipped: number;
  problems: IndexProblem[];
}

/** One interlock_discover hit (spec/mcp-tools-v1.json $defs DiscoverHit). */
export interface DiscoverHit {
  asset_id: string;
  title: string;
  /** Text around the matches with the matched words between <b> and </b>. */
  snippet: string;
  /** ts_rank_cd with normalisation 32, in [0, 1); for expansions the relation's score. */
  score: number;
  document_type: string;
  category_path: string[];
  timestamp: string | null;
  source_id: string;
  expansion: boolean;
  /** Expansions only. */
  related_to?: string;
  relation?: Relation;
}

/** How a related asset relates to its seed. */
export type Relation = 'link' | 'entity' | 'similar';

/** One interlock_related_documents entry and the full content of one asset: the types generated from spec/mcp-tools-v1.json ($defs RelatedDocument, DocumentContent). */
export type { RelatedDocument, DocumentContent } from '../../generated/mcp-tools-v1';
