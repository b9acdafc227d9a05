/**
 * Document tables (issue 4, Build 2): rows of tables or views of a PostgreSQL source, mapped to
 * assets by the source's `settings.document_tables` (spec/source-v1.schema.json DocumentTableMapping)
 * and read as the source's READER role (the least-privilege role agents' reads use), in a
 * read-only transaction, 500 rows at a time through a cursor.
 *
 * Asset id of a row: `<source_id>:<schema>.<table>/<id>`. A row whose id is NULL or empty, or
 * whose mapped metadata cannot be read, is skipped and reported; a duplicate id keeps the first row.
 */
import pg from 'pg';
import Cursor from 'pg-cursor';
import type { DocumentTableMapping, PostgresSourceSettings } from '../../generated/source-v1';
import { connectSourceClient } from '../control/sources';
import { isSessionSettingsMismatch } from '../sources/postgres/pinned-client';
import type { ReadGuard } from '../sources/postgres/portal-read';
import { ControlError } from '../control/errors';
import type { AssetInput, FieldColumns, IndexProblem } from './types';
import {
  capBody,
  cleanText,
  MAX_ASSET_ID_LENGTH,
  MetadataError,
  normAudience,
  normCategoryPath,
  normDocumentType,
  normEntities,
  normLinkList,
  normTimestamp,
  normTitle,
} from './metadata';

/** Document type of a row when the mapping names none. */
export const DEFAULT_ROW_DOCUMENT_TYPE = 'record';
/** Rows indexed per table when the mapping sets no max_rows. */
export const DEFAULT_TABLE_MAX_ROWS = 100_000;
const BATCH = 500;

/** Thrown when a mapped table cannot be read (connection refused, missing table or column, no SELECT). Nothing is indexed then. A ControlError of kind unavailable (CLI exit code 1). */
export class DocumentTableError extends ControlError {
  constructor(message: string) {
    super('unavailable', message);
    this.name = 'DocumentTableError';
  }
}

/** The SELECT reading one mapping (identifiers quoted; the only parameter is the row cap). Exported for tests. */
export function documentTableSql(m: DocumentTableMapping): string {
  const q = (s: string) => pg.Client.prototype.escapeIdentifier(s);
  const [schema, table] = m.table.split('.');
  const col = (c: string | undefined, expr: (x: string) => string) => (c ? expr(q(c)) : 'NULL');
  const cols = [
    `(${q(m.id_column)})::pg_catalog.text AS id`,
    `(${q(m.title_column)})::pg_catalog.text AS title`,
    `(${q(m.body_column)})::pg_catalog.text AS body`,
    `${col(m.type_column, (x) => `(${x})::pg_catalog.text`)} AS document_type`,
    `${col(m.category_column, (x) => `pg_catalog.to_jsonb(${x})`)} AS category`,
    `${col(m.time_column, (x) => `(${x})::pg_catalog.timestamptz`)} AS ts`,
    `${col(m.audience_column, (x) => `pg_catalog.to_jsonb(${x})`)} AS audience`,
    `${col(m.entities_column, (x) => `pg_catalog.to_jsonb(${x})`)} AS entities`,
    `${col(m.links_column, (x) => `pg_catalog.to_jsonb(${x})`)} AS links`,
  ];
  return `SELECT ${cols.join(', ')} FROM ${q(schema)}.${q(table)} ORDER BY 1 LIMIT $1`;
}

/**
 * The source columns feeding each indexed field of a mapping's rows (issue 12): the title falls
 * back to the id when its column is NULL, so it is fed by both; a field the mapping gives no column
 * (a constant default) is fed by none.
 */
export function fieldColumns(m: DocumentTableMapping): FieldColumns {
  const one = (c: string | undefined) => (c ? [c] : []);
  return {
    id: [m.id_column],
    title: [...new Set([m.title_column, m.id_column])],
    body: [m.body_column],
    document_type: one(m.type_column),
    category_path: one(m.category_column),
    timestamp: one(m.time_column),
    audience: one(m.audience_column),
    entities: one(m.entities_column),
    links: one(m.links_column),
  };
}

interface RowShape {
  id: string | null;
  title: string | null;
  body: string | null;
  document_type: string | null;
  category: unknown;
  ts: Date | null;
  audience: unknown;
  entities: unknown;
  links: unknown;
}

/** Maps one row to an AssetInput (throws MetadataError). Exported for tests. */
export function rowToAsset(sourceId: string, m: DocumentTableMapping, row: RowShape): AssetInput {
  const id = row.id === null ? '' : cleanText(row.id).trim();
  if (id === '') throw new MetadataError('the id column is NULL or empty');
  const prefix = `${sourceId}:${m.table}/`;
  const assetId = prefix + id;
  if (assetId.length > MAX_ASSET_ID_LENGTH) throw new MetadataError(`asset id longer than ${MAX_ASSET_ID_LENGTH} characters`);
  const category = normCategoryPath(row.category);
  const audience = normAudience(row.audience);
  const links: string[] = [];
  for (const l of normLinkList(row.links)) {
    const target = /^[a-z0-9][a-z0-9_-]{0,62}:/.test(l) ? l : prefix + l;
    if (target.length <= MAX_ASSET_ID_LENGTH && !links.includes(target)) links.push(target);
  }
  return {
    assetId,
    documentType: normDocumentType(row.document_type, m.document_type ?? DEFAULT_ROW_DOCUMENT_TYPE),
    title: normTitle(row.title) ?? id,
    body: capBody(row.body ?? '').body,
    categoryPath: category.length ? category : m.category_path ? normCategoryPath(m.category_path) : m.table.split('.'),
    timestamp: normTimestamp(row.ts),
    audience: audience.length ? audience : normAudience(m.audience ?? []),
    entities: normEntities(row.entities),
    links,
    origin: { relation: m.table, fields: fieldColumns(m) },
  };
}

/**
 * Reads every mapped table of a PostgreSQL source as its reader role. `onItem(count)` is called
 * every 500 rows. `guard` (view-guard.ts `withViewGuard` of the mapped relations, red team rt49 V3)
 * runs first in the same transaction: a mapped view or generated column that is not the scanned
 * one, or a mapped table no longer of its scanned kind or generated columns (rt49c I1), fails the read. Returns the items and the rows skipped. Throws DocumentTableError naming the
 * table when a table cannot be read (the message carries the SQLSTATE, never credentials), or the
 * source when the guard trips.
 */
export async function readDocumentTables(sourceId: string, settings: PostgresSourceSettings, opts: { onItem?: (count: number) => void; guard?: ReadGuard | null } = {}): Promise<{ items: AssetInput[]; problems: IndexProblem[] }> {
  const mappings = settings.document_tables ?? [];
  const items: AssetInput[] = [];
  const problems: IndexProblem[] = [];
  if (mappings.length === 0) return { items, problems };
  let client: pg.Client;
  try {
    client = await connectSourceClient(settings, 'reader', { connectionTimeoutMillis: 10_000, application_name: 'interlock-index' });
  } catch (err) {
    const why = isSessionSettingsMismatch(err) ? err.message : ((err as { code?: string }).code ?? 'error');
    throw new DocumentTableError(`cannot connect to source "${sourceId}" as its reader (${why})`);
  }
  const seen = new Set<string>();
  try {
    await client.query('BEGIN READ ONLY');
    // The connection holds the pinned output settings (connectSourceClient, issue 22 item 2), so mapped
    // rows' text (timestamps cast to text, say) is the same on every source and host (issue 23).
    const timeout = settings.statement_timeout_ms ?? 15_000;
    // set_config(…, true) is SET LOCAL with a parameter: no text is built (issue 22 item 3).
    await client.query("SELECT pg_catalog.set_config('statement_timeout', $1, true)", [String(Math.max(60_000, Math.floor(timeout)))]);
    // The mapped views and generated columns as the catalogue scanned them (red team rt49 V3): search
    // decides a field's lineage on the scanned definitions, so rows of a view redefined since the
    // scan must not be indexed under them.
    if (opts.guard) {
      try {
        await client.query({ text: opts.guard.text, values: opts.guard.values, queryMode: 'extended' } as pg.QueryConfig);
      } catch (err) {
        const code = (err as { code?: string }).code;
        if (code === '22012') throw new DocumentTableError(`a mapped view, table or generated column of source "${sourceId}" changed since its catalogue was last scanned: scan the source (interlock source scan ${sourceId}), then index it again`);
        throw new DocumentTableError(`cannot check the mapped views of source "${sourceId}" as its reader${code ? ` (SQLSTATE ${code})` : ''}`);
      }
    }
    for (const m of mappings) {
      const cursor = client.query(new Cursor<RowShape>(documentTableSql(m), [m.max_rows ?? DEFAULT_TABLE_MAX_ROWS]));
      try {
        for (;;) {
          const rows = await cursor.read(BATCH);
          if (rows.length === 0) break;
          for (const row of rows) {
            try {
              const a = rowToAsset(sourceId, m, row);
              if (seen.has(a.assetId)) {
                problems.push({ item: a.assetId, reason: 'duplicate id: the first row was kept', skipped: true });
                continue;
              }
              seen.add(a.assetId);
              items.push(a);
            } catch (err) {
              const item = `${m.table}/${row.id ?? '(null id)'}`;
              problems.push({ item, reason: err instanceof MetadataError ? err.message : 'unreadable row', skipped: true });
            }
          }
          opts.onItem?.(items.length);
        }
      } catch (err) {
        const code = (err as { code?: string }).code;
        throw new DocumentTableError(`cannot read document table ${m.table} of source "${sourceId}" as its reader${code ? ` (SQLSTATE ${code})` : ''}`);
      } finally {
        await cursor.close().catch(() => undefined);
      }
    }
    await client.query('COMMIT');
  } finally {
    await client.end().catch(() => undefined);
  }
  return { items, problems };
}
