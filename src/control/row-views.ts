/**
 * `interlock source drop-row-views ID [--table schema.table]` (task hnu4a item 3): drops InterLock's
 * row views (schema `interlock_rows`, docs/row-rules.md) on a source, as its writer role, so that an
 * operator can change a table they depend on (`ALTER TABLE … ALTER … TYPE` is refused while a view
 * reads the column). The gateway makes them again on the next read that needs them, within that
 * read's call. Only views of `interlock_rows` are dropped, in one statement without CASCADE: a view
 * of the operator's own built on one of them stops the drop (nothing is dropped) instead of being
 * dropped with it.
 */
import type pg from 'pg';
import { connectFailureText, sqlStateClassName } from '../sources/postgres/errors';
import { ROW_VIEW_SCHEMA } from '../sql/row-rules/rewrite';
import type { ControlDb } from './db';
import { ControlError, NotFoundError, ValidationError } from './errors';
import { connectSourceClient, requireSource } from './sources';
import { loadSqlQualifier, qualifySql } from '../sources/postgres/qualify-sql';

/**
 * The statements drop-row-views sends as the writer (each through qualifySql before it is sent: red
 * team rt48c K2, where `d.refclassid = 'pg_class'::regclass`, an oid = regclass without an exact
 * operator in pg_catalog, ran an insider's `public.= (oid, regclass)` as the writer). The oid of
 * relation `$1`.`$2`:
 */
export const ROW_VIEW_TABLE_SQL = 'SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2';
/** The names of the views of schema `$2` that read relation oid `$1`, directly or through another view, sorted. */
export const ROW_VIEWS_OF_TABLE_SQL = `WITH RECURSIVE dep(oid) AS (
   SELECT $1::oid
   UNION
   SELECT r.ev_class FROM dep JOIN pg_depend d ON d.refclassid = 'pg_catalog.pg_class'::regclass AND d.refobjid = dep.oid AND d.classid = 'pg_catalog.pg_rewrite'::regclass
     JOIN pg_rewrite r ON r.oid = d.objid WHERE r.ev_class <> dep.oid
 )
 SELECT c.relname AS name FROM dep JOIN pg_class c ON c.oid = dep.oid JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $2 AND c.relkind = 'v' ORDER BY 1`;
/** The names of every view of schema `$1`, sorted. */
export const ROW_VIEWS_SQL = "SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'v' ORDER BY 1";

/** What dropRowViews did: the views dropped (names within `interlock_rows`, sorted). */
export interface DroppedRowViews {
  sourceId: string;
  dropped: string[];
}

/**
 * Drops the row views of `sourceId` (all of them, or with `table` those that read it, directly or
 * through another view) as the source's writer role. Throws NotFoundError (unknown source or table),
 * ValidationError (not PostgreSQL, no writer, `table` not schema.table) and ControlError
 * 'unavailable' when the source cannot be reached or refuses the drop (its message for operators).
 */
export async function dropRowViews(db: ControlDb, sourceId: string, opts: { table?: string } = {}): Promise<DroppedRowViews> {
  const source = await requireSource(db, sourceId);
  if (source.type !== 'postgres') throw new ValidationError(`source "${sourceId}" is of type ${source.type}: only PostgreSQL sources have row views`);
  if (!source.settings.writer) throw new ValidationError(`source "${sourceId}" has no writer role: row views are made and dropped by it`);
  const parts = opts.table?.split('.');
  if (parts && (parts.length !== 2 || parts.some((p) => p === ''))) throw new ValidationError(`--table takes schema.table (got ${opts.table})`);
  let client;
  try {
    client = await connectSourceClient(source.settings, 'writer', { connectionTimeoutMillis: 10_000, application_name: 'interlock-row-views' });
  } catch (err) {
    throw new ControlError('unavailable', `cannot connect to source "${sourceId}" as its writer: ${connectFailureText(err)}`);
  }
  try {
    let names: string[];
    await loadSqlQualifier();
    if (parts) {
      const t = await client.query<{ oid: number }>({ text: qualifySql(ROW_VIEW_TABLE_SQL), values: parts, queryMode: 'extended' } as pg.QueryConfig);
      if (!t.rows[0]) throw new NotFoundError(`source "${sourceId}" has no relation ${opts.table}`);
      names = (await client.query<{ name: string }>(qualifySql(ROW_VIEWS_OF_TABLE_SQL), [t.rows[0].oid, ROW_VIEW_SCHEMA])).rows.map((r) => r.name);
    } else {
      names = (await client.query<{ name: string }>(qualifySql(ROW_VIEWS_SQL), [ROW_VIEW_SCHEMA])).rows.map((r) => r.name);
    }
    if (names.length) {
      try {
        // One statement by construction (issue 22 item 3, test/unit/sources/one-statement.test.ts): the
        // extended protocol runs exactly one statement, whatever the escaped names hold.
        const text = `DROP VIEW IF EXISTS ${names.map((n) => `${ROW_VIEW_SCHEMA}.${client!.escapeIdentifier(n)}`).join(', ')}`;
        await client.query({ text, queryMode: 'extended' } as pg.QueryConfig);
      } catch (err) {
        const code = (err as { code?: unknown }).code;
        const why = typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? `${code} ${sqlStateClassName(code)}` : 'the statement failed';
        throw new ControlError('unavailable', `source "${sourceId}" refused to drop its row views: ${why}`);
      }
    }
    return { sourceId, dropped: names };
  } finally {
    await client.end().catch(() => undefined);
  }
}
