/**
 * The discovery indexer (issue 4, Build 3): reads a source's items (a documents folder, or the
 * mapped tables of a PostgreSQL source), and brings table `assets` of the control database in line
 * with them in ONE transaction per run: items whose content hash changed are written, unchanged
 * ones are left alone, items no longer present (or no longer readable) are removed, and
 * `asset_index_status` records when the source was indexed and what changed. Concurrent runs on
 * the same source queue on an advisory lock; searches see the old or the new index, never a mix.
 *
 * The full-text vector is a generated column (migrations/20261129100000000_discovery.sql):
 * title weighted A, body weighted B, 'english' configuration, GIN-indexed. Rows of mapped tables
 * also carry their relation and, per relation, the columns feeding each field (table
 * asset_relations, migrations/20261201500000000_discovery-field-lineage.sql), so searches can
 * apply the caller's column decisions (src/discovery/fields.ts); they get separate title and body
 * vectors for that.
 */
import { createHash } from 'node:crypto';
import type pg from 'pg';
import type { ControlDb } from '../control/db';
import { withTransaction } from '../control/db';
import { requireSource } from '../control/sources';
import type { PostgresSourceSettings } from '../../generated/source-v1';
import { readDocumentsFolder } from './documents';
import { readDocumentTables } from './tables';
import { loadCatalog } from '../control/catalog';
import { loadSqlQualifier } from '../sources/postgres/qualify-sql';
import type { ReadGuard } from '../sources/postgres/portal-read';
import { withViewGuard } from '../sources/postgres/view-guard';
import { entityKey } from './metadata';
import type { AssetInput, FieldColumns, IndexProblem, IndexProgress, IndexResult, IndexStatus } from './types';
import { INDEXED_FIELDS } from './types';
import { cutText } from '../errors/cut-text';

/** Rows written per INSERT statement. */
const WRITE_BATCH = 250;
/** Problems kept in asset_index_status.problems. */
const MAX_STORED_PROBLEMS = 100;

/** Options of indexSource and indexAssets. */
export interface IndexOptions {
  /** Called as the run progresses (read, then write, then done). Must not throw. */
  onProgress?: (p: IndexProgress) => void;
}

/**
 * The content hash of an item: SHA-256 (hex) of a canonical JSON of every indexed field, so any
 * change of text or metadata (audience included) re-indexes the item. A mapped row's origin
 * (relation and feeding columns) is covered too ('v2'), so a changed mapping re-indexes its rows;
 * documents files keep their 'v1' hashes.
 */
export function contentHash(a: AssetInput): string {
  const canonical = JSON.stringify([
    a.origin ? 'v2' : 'v1',
    a.assetId,
    a.documentType,
    a.title,
    a.body,
    a.categoryPath,
    a.timestamp,
    [...a.audience].sort(),
    a.entities.map((e) => [e.type, e.value]),
    a.links,
    ...(a.origin ? [a.origin.relation, INDEXED_FIELDS.map((f) => a.origin!.fields[f])] : []),
  ]);
  return createHash('sha256').update(canonical).digest('hex');
}

function row(a: AssetInput, hash: string): Record<string, unknown> {
  return {
    asset_id: a.assetId,
    document_type: a.documentType,
    title: a.title,
    body: a.body,
    category_path: a.categoryPath,
    category_key: a.categoryPath.join('/'),
    ts: a.timestamp,
    audience: a.audience,
    entities: a.entities,
    entity_keys: a.entities.map(entityKey),
    links: a.links,
    content_hash: hash,
    relation: a.origin?.relation ?? null,
  };
}

/** The union, per mapped relation, of the columns feeding each field (several mappings may read one table). Exported for tests. */
export function relationLineage(items: Iterable<AssetInput>): Map<string, FieldColumns> {
  const out = new Map<string, FieldColumns>();
  for (const a of items) {
    if (!a.origin) continue;
    const cur = out.get(a.origin.relation);
    if (!cur) {
      out.set(a.origin.relation, Object.fromEntries(INDEXED_FIELDS.map((f) => [f, [...a.origin!.fields[f]]])) as FieldColumns);
      continue;
    }
    for (const f of INDEXED_FIELDS) for (const c of a.origin.fields[f]) if (!cur[f].includes(c)) cur[f].push(c);
  }
  return out;
}

const UPSERT = `
INSERT INTO assets (asset_id, source_id, source_type, document_type, title, body, category_path, category_key, ts, audience, entities, entity_keys, links, content_hash, relation, indexed_at)
SELECT r.asset_id, $2, $3, r.document_type, r.title, r.body, r.category_path, r.category_key, r.ts, r.audience, r.entities, r.entity_keys, r.links, r.content_hash, r.relation, now()
  FROM jsonb_to_recordset($1::jsonb) AS r(asset_id text, document_type text, title text, body text, category_path text[], category_key text,
                                          ts timestamptz, audience text[], entities jsonb, entity_keys text[], links text[], content_hash text, relation text)
ON CONFLICT (asset_id) DO UPDATE SET
  source_type = EXCLUDED.source_type, document_type = EXCLUDED.document_type, title = EXCLUDED.title, body = EXCLUDED.body,
  category_path = EXCLUDED.category_path, category_key = EXCLUDED.category_key, ts = EXCLUDED.ts, audience = EXCLUDED.audience,
  entities = EXCLUDED.entities, entity_keys = EXCLUDED.entity_keys, links = EXCLUDED.links, content_hash = EXCLUDED.content_hash,
  relation = EXCLUDED.relation, indexed_at = EXCLUDED.indexed_at
WHERE assets.source_id = EXCLUDED.source_id`;

/**
 * Writes `items` as the complete content of source `sourceId` (type `sourceType`): adds new items,
 * rewrites changed ones (content hash), leaves unchanged ones, removes the source's other assets,
 * and records the run in asset_index_status. `problems` are stored with the status (the items
 * they name are not in `items`, so a previously indexed version of them is removed).
 * Every asset id must start with `<sourceId>:`; throws otherwise (nothing written).
 * Used by indexSource and by benchmarks (bench/) with generated items.
 */
export async function indexAssets(db: ControlDb, sourceId: string, sourceType: 'postgres' | 'documents', items: AssetInput[], problems: IndexProblem[] = [], opts: IndexOptions = {}): Promise<IndexResult> {
  const started = Date.now();
  const prefix = `${sourceId}:`;
  const byId = new Map<string, AssetInput>();
  for (const a of items) {
    if (!a.assetId.startsWith(prefix)) throw new Error(`asset id ${cutText(a.assetId, 80)} does not belong to source ${sourceId}`);
    if (!byId.has(a.assetId)) byId.set(a.assetId, a);
  }
  const skipped = problems.filter((p) => p.skipped).length;
  const counts = { added: 0, updated: 0, unchanged: 0, removed: 0, skipped };
  const progress = (phase: IndexProgress['phase'], done: number, total: number | null) => opts.onProgress?.({ sourceId, phase, done, total, ...counts });

  const result = await withTransaction(db, async (c: pg.PoolClient) => {
    await c.query("SELECT pg_advisory_xact_lock(hashtext('interlock_index'), hashtext($1))", [sourceId]);
    const existing = new Map<string, string>();
    for (const r of (await c.query<{ asset_id: string; content_hash: string }>('SELECT asset_id, content_hash FROM assets WHERE source_id = $1', [sourceId])).rows) existing.set(r.asset_id, r.content_hash);
    const changed: Array<Record<string, unknown>> = [];
    for (const a of byId.values()) {
      const h = contentHash(a);
      const old = existing.get(a.assetId);
      if (old === h) counts.unchanged++;
      else {
        if (old === undefined) counts.added++;
        else counts.updated++;
        changed.push(row(a, h));
      }
    }
    const gone = [...existing.keys()].filter((id) => !byId.has(id));
    counts.removed = gone.length;
    progress('write', 0, changed.length);
    for (let i = 0; i < changed.length; i += WRITE_BATCH) {
      const batch = changed.slice(i, i + WRITE_BATCH);
      await c.query(UPSERT, [JSON.stringify(batch), sourceId, sourceType]);
      progress('write', Math.min(i + WRITE_BATCH, changed.length), changed.length);
    }
    for (let i = 0; i < gone.length; i += 5000) await c.query('DELETE FROM assets WHERE source_id = $1 AND asset_id = ANY($2::text[])', [sourceId, gone.slice(i, i + 5000)]);
    // The lineage of every mapped relation, rewritten with the rows (same transaction).
    await c.query('DELETE FROM asset_relations WHERE source_id = $1', [sourceId]);
    const lineage = [...relationLineage(byId.values())].map(([relation, fields]) => ({ relation, fields }));
    if (lineage.length) {
      await c.query('INSERT INTO asset_relations (source_id, relation, fields) SELECT $1, r.relation, r.fields FROM jsonb_to_recordset($2::jsonb) AS r(relation text, fields jsonb)', [sourceId, JSON.stringify(lineage)]);
    }
    const durationMs = Date.now() - started;
    const st = await c.query<{ indexed_at: Date }>(
      `INSERT INTO asset_index_status (source_id, indexed_at, duration_ms, assets, added, updated, unchanged, removed, skipped, problems)
       VALUES ($1, now(), $2, $3, $4, $5, $6, $7, $8, $9)
       ON CONFLICT (source_id) DO UPDATE SET indexed_at = EXCLUDED.indexed_at, duration_ms = EXCLUDED.duration_ms, assets = EXCLUDED.assets,
         added = EXCLUDED.added, updated = EXCLUDED.updated, unchanged = EXCLUDED.unchanged, removed = EXCLUDED.removed,
         skipped = EXCLUDED.skipped, problems = EXCLUDED.problems
       RETURNING indexed_at`,
      [sourceId, durationMs, byId.size, counts.added, counts.updated, counts.unchanged, counts.removed, counts.skipped, JSON.stringify(problems.slice(0, MAX_STORED_PROBLEMS))],
    );
    return { indexedAt: st.rows[0].indexed_at.toISOString(), durationMs };
  });
  progress('done', byId.size, byId.size);
  return { sourceId, assets: byId.size, ...counts, problems, indexedAt: result.indexedAt, durationMs: Date.now() - started };
}

/**
 * Indexes one registered source (`interlock index SOURCE`): a `documents` source's folder
 * (settings.path) or a `postgres` source's mapped tables (settings.document_tables, read as the
 * reader role; a source with no mapping ends up with no assets). Re-indexes only changed items,
 * removes deleted ones, records the run. Resolves to the counts {assets, added, updated,
 * unchanged, removed, skipped} with the problems (skipped files or rows and why).
 *
 * Throws NotFoundError (src/control/errors) for an unknown source; DocumentsFolderError when the
 * folder cannot be read and DocumentTableError when a mapped table cannot be read — in both cases
 * the index of the source is left as it was.
 */
export async function indexSource(db: ControlDb, sourceId: string, opts: IndexOptions = {}): Promise<IndexResult> {
  const source = await requireSource(db, sourceId);
  const onItem = (count: number) => opts.onProgress?.({ sourceId, phase: 'read', done: count, total: null, added: 0, updated: 0, unchanged: 0, removed: 0, skipped: 0 });
  const read =
    source.type === 'documents'
      ? await readDocumentsFolder(sourceId, source.settings.path, { onItem })
      : await readDocumentTables(sourceId, source.settings as PostgresSourceSettings, { onItem, guard: await mappedDefinitionsGuard(db, sourceId, source.settings as PostgresSourceSettings) });
  return indexAssets(db, sourceId, source.type, read.items, read.problems, opts);
}

/**
 * The definition guard (src/sources/postgres/view-guard.ts) of a PostgreSQL source's mapped
 * relations against its stored catalogue (red team rt49 V3): search takes a mapped view column's
 * lineage, and a generated column's inputs, from the scanned definitions, so the rows indexed must
 * come from those definitions; and each mapped table must still be a table of the scanned kind with
 * the scanned generated columns (red team rt49c I1). Null when nothing is mapped or the source was
 * never scanned.
 */
async function mappedDefinitionsGuard(db: ControlDb, sourceId: string, settings: PostgresSourceSettings): Promise<ReadGuard | null> {
  const mappings = settings.document_tables ?? [];
  if (mappings.length === 0) return null;
  const catalog = await loadCatalog(db, sourceId);
  if (!catalog) return null;
  await loadSqlQualifier();
  const reads = mappings.map((m) => {
    const dot = m.table.indexOf('.');
    return { schema: m.table.slice(0, dot), table: m.table.slice(dot + 1) };
  });
  // With the mapped tables' kinds and generated columns too (red team rt49c I1): the index serves
  // every caller, those whose rules deny or mask a column included, and a mapped table replaced by a
  // view of its name (or a plain column by one generated from another) is read through a query or
  // expression the scanned lineage never saw.
  return withViewGuard(catalog, null, { reads }, true);
}

/** The index status of one source (null when it was never indexed). */
export async function getIndexStatus(db: ControlDb, sourceId: string): Promise<IndexStatus | null> {
  const r = await db.pool.query('SELECT * FROM asset_index_status WHERE source_id = $1', [sourceId]);
  const s = r.rows[0];
  if (!s) return null;
  return {
    sourceId: s.source_id,
    indexedAt: (s.indexed_at as Date).toISOString(),
    durationMs: Number(s.duration_ms),
    assets: s.assets,
    added: s.added,
    updated: s.updated,
    unchanged: s.unchanged,
    removed: s.removed,
    skipped: s.skipped,
    problems: s.problems,
  };
}

/** The index status of every indexed source, by source id. */
export async function listIndexStatus(db: ControlDb): Promise<IndexStatus[]> {
  const r = await db.pool.query<{ source_id: string }>('SELECT source_id FROM asset_index_status ORDER BY source_id');
  const out: IndexStatus[] = [];
  for (const { source_id } of r.rows) {
    const s = await getIndexStatus(db, source_id);
    if (s) out.push(s);
  }
  return out;
}

/**
 * One plain progress line for an IndexProgress event (for `interlock index` without a progress-bar
 * library), e.g. "handbook: reading… 120 items", "handbook: writing 40/120 (added 3, updated 1,
 * unchanged 116, removed 0, skipped 0)", "handbook: done, 120 assets (…)".
 */
export function formatIndexProgress(p: IndexProgress): string {
  const counts = `added ${p.added}, updated ${p.updated}, unchanged ${p.unchanged}, removed ${p.removed}, skipped ${p.skipped}`;
  if (p.phase === 'read') return `${p.sourceId}: reading… ${p.done} items`;
  if (p.phase === 'write') return `${p.sourceId}: writing ${p.done}/${p.total ?? '?'} (${counts})`;
  return `${p.sourceId}: done, ${p.done} assets (${counts})`;
}
