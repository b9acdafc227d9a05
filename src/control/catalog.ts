/**
 * Catalog snapshots (issue 3, Build 12): what each source exposes to its reader role, as scanned
 * by src/sources/postgres/catalog.ts, stored with scanned_at and the truncation flag. One snapshot
 * per source; saving replaces it (and notifies replicas on CONTROL_CHANNEL).
 */
import type { SourceCatalog } from '../sql/catalog-types';
import type { ControlDb } from './db';
import { iso } from './ids';

/**
 * Stores the snapshot of `sourceId`, replacing the stored one unless that one was scanned later
 * (`scannedAt`, taken when its scan began: scanCatalog). Two scans of one source may overlap (an
 * operator's `source scan` and the gateway's rescan after `catalog_stale`, or two replicas): the one
 * that began first, and so may have read the source before a schema change the other saw, must not
 * overwrite the newer picture when it finishes last (red team rt42c: an older snapshot saved over an
 * operator's newer scan). Resolves true when stored, false when a later scan's snapshot was kept.
 * The source must exist (foreign key).
 */
export async function saveCatalog(db: ControlDb, sourceId: string, catalog: SourceCatalog): Promise<boolean> {
  const r = await db.pool.query(
    `INSERT INTO catalog_snapshots (source_id, scanned_at, truncated, catalog) VALUES ($1, $2, $3, $4)
     ON CONFLICT (source_id) DO UPDATE SET scanned_at = EXCLUDED.scanned_at, truncated = EXCLUDED.truncated, catalog = EXCLUDED.catalog
     WHERE catalog_snapshots.scanned_at <= EXCLUDED.scanned_at`,
    [sourceId, catalog.scannedAt, catalog.truncated, JSON.stringify(catalog)],
  );
  return (r.rowCount ?? 0) > 0;
}

/** The stored snapshot of `sourceId`, or null when it was never scanned. */
export async function loadCatalog(db: ControlDb, sourceId: string): Promise<SourceCatalog | null> {
  return (await loadCatalogVersion(db, sourceId))?.catalog ?? null;
}

/**
 * A stored snapshot as loaded, with the version of its row: the row's transaction id (xmin: every
 * save writes a new row version), scan time and truncation flag, as one opaque string.
 */
export interface VersionedCatalog {
  catalog: SourceCatalog;
  version: string;
}

/**
 * The stored snapshot of `sourceId` with its version, or null when it was never scanned (or its
 * source is gone). When `known` (an earlier answer of this function) still has the stored row's
 * version, `known` itself is returned and the catalogue JSON is neither sent nor parsed: the same
 * catalogue object stays in use across reloads of an unchanged snapshot, so the caches keyed by it
 * (WeakMaps of src/sql and src/tools/handlers/describe.ts) stay warm (task hpriv item 2). Any save
 * of the snapshot (scan, apply) gives a new version, hence a new object. Rejects on a database error.
 */
export async function loadCatalogVersion(db: ControlDb, sourceId: string, known?: VersionedCatalog): Promise<VersionedCatalog | null> {
  const r = await db.pool.query<{ v: string; catalog: SourceCatalog | null; scanned_at: Date; truncated: boolean }>(
    `SELECT v, CASE WHEN v = $2 THEN NULL ELSE catalog END AS catalog, scanned_at, truncated
       FROM (SELECT xmin::text || '/' || to_char(scanned_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || '/' || truncated::text AS v, catalog, scanned_at, truncated
               FROM catalog_snapshots WHERE source_id = $1) s`,
    [sourceId, known?.version ?? null],
  );
  const row = r.rows[0];
  if (!row) return null;
  if (known && row.v === known.version) return known;
  if (row.catalog === null) throw new Error(`catalog snapshot of ${sourceId} has no catalogue`);
  return { catalog: { ...row.catalog, scannedAt: iso(row.scanned_at)!, truncated: row.truncated }, version: row.v };
}

/** Scan time, truncation and relation count of every stored snapshot, keyed by source id. */
export async function catalogSummaries(db: ControlDb): Promise<Map<string, { scannedAt: string; truncated: boolean; relations: number }>> {
  const r = await db.pool.query<{ source_id: string; scanned_at: Date; truncated: boolean; relations: number }>(
    `SELECT source_id, scanned_at, truncated, COALESCE(jsonb_array_length(catalog->'relations'), 0) AS relations FROM catalog_snapshots`,
  );
  return new Map(r.rows.map((x) => [x.source_id, { scannedAt: iso(x.scanned_at)!, truncated: x.truncated, relations: Number(x.relations) }]));
}
