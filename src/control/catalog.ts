/**
 * Catalog snapshots (issue 3, Build 12): what each source exposes to its reader role, as scanned
 * by src/sources/postgres/catalog.ts, stored with scanned_at and the truncation flag. One snapshot
 * per source; saving replaces it (and notifies replicas on CONTROL_CHANNEL).
 */
import type { SourceCatalog } from '../sql/catalog-types';
import type { ControlDb } from './db';
import { iso } from './ids';

/** Stores (replaces) the snapshot of `sourceId`. The source must exist (foreign key). */
export async function saveCatalog(db: ControlDb, sourceId: string, catalog: SourceCatalog): Promise<void> {
  await db.pool.query(
    `INSERT INTO catalog_snapshots (source_id, scanned_at, truncated, catalog) VALUES ($1, $2, $3, $4)
     ON CONFLICT (source_id) DO UPDATE SET scanned_at = EXCLUDED.scanned_at, truncated = EXCLUDED.truncated, catalog = EXCLUDED.catalog`,
    [sourceId, catalog.scannedAt, catalog.truncated, JSON.stringify(catalog)],
  );
}

/** The stored snapshot of `sourceId`, or null when it was never scanned. */
export async function loadCatalog(db: ControlDb, sourceId: string): Promise<SourceCatalog | null> {
  const r = await db.pool.query<{ catalog: SourceCatalog; scanned_at: Date; truncated: boolean }>(
    'SELECT catalog, scanned_at, truncated FROM catalog_snapshots WHERE source_id = $1',
    [sourceId],
  );
  if (!r.rows[0]) return null;
  return { ...r.rows[0].catalog, scannedAt: iso(r.rows[0].scanned_at)!, truncated: r.rows[0].truncated };
}

/** Scan time, truncation and relation count of every stored snapshot, keyed by source id. */
export async function catalogSummaries(db: ControlDb): Promise<Map<string, { scannedAt: string; truncated: boolean; relations: number }>> {
  const r = await db.pool.query<{ source_id: string; scanned_at: Date; truncated: boolean; relations: number }>(
    `SELECT source_id, scanned_at, truncated, COALESCE(jsonb_array_length(catalog->'relations'), 0) AS relations FROM catalog_snapshots`,
  );
  return new Map(r.rows.map((x) => [x.source_id, { scannedAt: iso(x.scanned_at)!, truncated: x.truncated, relations: Number(x.relations) }]));
}
