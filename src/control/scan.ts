/**
 * `interlock source scan`: reads a PostgreSQL source's catalog as its reader role (what the
 * gateway's reads can see) and stores the snapshot. Issue 3, Build 12.
 */
import type pg from 'pg';
import { connectFailureText, isTlsFailure, isTlsUnsupported } from '../sources/postgres/errors';
import { scanCatalog } from '../sources/postgres/catalog';
import { initSqlParser, unprovableViews } from '../sql/analyze';
import { saveCatalog } from './catalog';
import type { ControlDb } from './db';
import { ControlError, ValidationError } from './errors';
import { connectSourceClient, requireSource } from './sources';
import { pinnedStartupOptions } from '../sources/postgres/session-settings';
import { writerMissingList, type WritePrivilege } from '../sources/postgres/writer-privileges';

/** What a scan found. */
export interface ScanResult {
  sourceId: string;
  scannedAt: string;
  relations: number;
  truncated: boolean;
  /** Views and materialized views in the snapshot (each recorded with its definition). */
  views: number;
  /**
   * Views whose definition (parsed with the analyser's parser) gives no provable column lineage,
   * as `schema.name`: reads of their columns fail closed (issue 12; src/sql/views.ts).
   */
  unprovableViews: string[];
  /**
   * Relations of the snapshot the reader role may not SELECT, checked on the server as the reader
   * (has_schema_privilege USAGE, has_table_privilege and has_column_privilege SELECT; task hnu4a item
   * 2): `relation` as `schema.name`, and `columns` (in column order) when it may read some columns
   * but not these. Reads of them fail with source_permission_denied until an operator grants SELECT.
   * Empty when it may read everything.
   */
  unreadable: UnreadableRelation[];
  /**
   * Tables (plain and partitioned) of the snapshot the source's writer role may not INSERT, UPDATE
   * or DELETE (`privileges`, in that order), checked on the server for the writer role
   * (has_schema_privilege USAGE, has_any_column_privilege, has_table_privilege; task hnu42a finding
   * 3). Writes of them are refused with source_permission_denied before they are queued until an
   * operator grants it. Absent when the source has no writer role; empty when it may write every table.
   */
  unwritable?: UnwritableRelation[];
}

/** A table the writer role may not fully write: the privileges it lacks. */
export interface UnwritableRelation {
  relation: string;
  privileges: WritePrivilege[];
}

/** A relation (or some of its columns) the reader role may not SELECT. */
export interface UnreadableRelation {
  relation: string;
  columns?: string[];
}

/**
 * What the connected reader (`client`) may not SELECT among `relations`: the relations without
 * schema USAGE or any column it may read, and those with some columns it may not read (those
 * columns listed). One query; names as PostgreSQL stores them.
 */
export async function unreadableRelations(client: pg.ClientBase, relations: ReadonlyArray<{ schema: string; name: string }>): Promise<UnreadableRelation[]> {
  if (relations.length === 0) return [];
  const r = await client.query<{ schema: string; name: string; usable: boolean; readable: string[]; denied: string[] }>(
    // Every function and operator qualified (red team rt47b J3: the reader's path may hold a schema an insider creates in).
    `SELECT n.nspname AS schema, c.relname AS name, pg_catalog.has_schema_privilege(n.oid, 'USAGE') AS usable,
       ARRAY(SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.>) 0::pg_catalog.int2 AND NOT a.attisdropped AND pg_catalog.has_column_privilege(c.oid, a.attnum, 'SELECT') ORDER BY a.attnum) AS readable,
       ARRAY(SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.>) 0::pg_catalog.int2 AND NOT a.attisdropped AND NOT pg_catalog.has_column_privilege(c.oid, a.attnum, 'SELECT') ORDER BY a.attnum) AS denied
     FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.text[])) AS w(schema, name)
     JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) w.schema
     JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid AND c.relname OPERATOR(pg_catalog.=) w.name
     WHERE NOT pg_catalog.has_schema_privilege(n.oid, 'USAGE') OR NOT pg_catalog.has_table_privilege(c.oid, 'SELECT')
     ORDER BY 1, 2`,
    [relations.map((x) => x.schema), relations.map((x) => x.name)],
  );
  const out: UnreadableRelation[] = [];
  for (const row of r.rows) {
    const relation = `${row.schema}.${row.name}`;
    if (!row.usable || row.readable.length === 0) out.push({ relation });
    else if (row.denied.length > 0) out.push({ relation, columns: row.denied });
  }
  return out;
}

/**
 * What to change when the source's upstream TLS failed (issue 24 item 6): the setting in force
 * (settings.tls.mode, default verify-full) and the flags of `interlock source update` that fix it.
 * A stored password is bound to the TLS settings (password_required), so when the reader or writer
 * has one the hint adds the flags that give it again (task hnu4b item b): the command it names then works.
 * `unsupported`: the server does not accept TLS at all (isTlsUnsupported): the hint says so and
 * offers turning TLS on there or --tls-mode off, not a CA file (task hnu41 item 5).
 */
export function tlsHint(sourceId: string, settings: { tls?: { mode?: string }; reader?: { password?: string } | null; writer?: { password?: string } | null }, unsupported = false): string {
  const tls = settings.tls ?? {};
  const mode = tls.mode ?? 'verify-full';
  const again = (['reader', 'writer'] as const).filter((who) => settings[who]?.password).map((who) => `--${who}-password-env ${who.toUpperCase()}_VAR`);
  const passwords = again.length
    ? `; a stored password is kept only while the TLS settings are unchanged, so add ${again.join(' ')} to that command (each VAR an environment variable holding that password), ` +
      `e.g. for a local server \`interlock source update ${sourceId} --tls-mode off ${again.join(' ')}\``
    : '';
  if (unsupported) {
    return (
      `. The server does not accept TLS at all (ssl is off there), so settings.tls.mode ${mode}${tls.mode ? '' : ' (the default)'} cannot connect and no CA file would help: ` +
      `turn TLS on at the server (ssl = on with a certificate) and keep the mode, or, for a local server or a trusted network only, ` +
      `\`interlock source update ${sourceId} --tls-mode off\` (unencrypted; there is no prefer mode: InterLock never falls back to plaintext by itself)${passwords}`
    );
  }
  return (
    `. TLS failed with settings.tls.mode ${mode}${tls.mode ? '' : ' (the default)'}: give the server's CA with ` +
    `\`interlock source update ${sourceId} --tls-ca-file CA.pem\` (and --tls-servername NAME when the certificate names another host), ` +
    `or, for a server without a verifiable certificate, --tls-mode require (encrypted, not verified) or --tls-mode off (a local server only)${passwords}`
  );
}

/**
 * Connects to the source as its reader (TLS as configured, 10 s connect timeout), scans its
 * catalog (at most `maxRelations`, default 10 000) and stores the snapshot; lists what the reader
 * may not SELECT (`unreadable`) and what its writer role may not modify (`unwritable`).
 * Throws NotFoundError for an unknown source, ValidationError for a non-PostgreSQL one, and
 * ControlError('unavailable') when the source cannot be reached (message for operators).
 */
export async function scanSource(db: ControlDb, sourceId: string, opts: { maxRelations?: number } = {}): Promise<ScanResult> {
  const source = await requireSource(db, sourceId);
  if (source.type !== 'postgres') throw new ValidationError(`source "${sourceId}" is of type ${source.type}: only PostgreSQL sources have a catalog to scan`);
  let client: pg.Client;
  try {
    // Read-only, as the gateway's reader connections (red team rt47b J3: code an insider gets run in the scan writes nothing).
    client = await connectSourceClient(source.settings, 'reader', { connectionTimeoutMillis: 10_000, application_name: 'interlock-scan', options: `${pinnedStartupOptions()} -c default_transaction_read_only=on` });
  } catch (err) {
    throw new ControlError('unavailable', `cannot connect to source "${sourceId}" as its reader: ${connectFailureText(err)}${isTlsFailure(err) ? tlsHint(sourceId, source.settings, isTlsUnsupported(err)) : ''}`);
  }
  try {
    // The scan's statements are large joins over the system catalogues whose estimated cost passes
    // PostgreSQL's default jit_above_cost (100 000): with jit on (the default where PostgreSQL was
    // built with LLVM), compiling them took 7–11 s against 0.1–0.2 s without, on an 11-table source
    // (stop 43), and every catalog_stale rescan waits for it. This connection is the scan's own and
    // ends with it. Through pg_settings, so a server without the setting (before PostgreSQL 11) is left as it is.
    await client.query("SELECT pg_catalog.set_config(name, 'off', false) FROM pg_catalog.pg_settings WHERE name OPERATOR(pg_catalog.=) 'jit'");
    // Asked on the reader's connection for the writer role by name (any session may ask); the
    // write-hook fingerprints hold the writer's role settings (hook-guard.ts, task dgx).
    const writer = source.settings.writer?.user;
    const catalog = await scanCatalog(client, { maxRelations: opts.maxRelations, writer });
    const unreadable = await unreadableRelations(client, catalog.relations);
    const tables = catalog.relations.filter((r) => r.kind === 'table' || r.kind === 'partitioned_table');
    const unwritable = writer
      ? (await writerMissingList(async (sql, params) => ({ rowsArray: (await client.query({ text: sql, values: params, rowMode: 'array', queryMode: 'extended' } as pg.QueryConfig)).rows as unknown[][] }), writer, tables)).map((r) => ({ relation: `${r.schema}.${r.name}`, privileges: r.privileges }))
      : null;
    await saveCatalog(db, sourceId, catalog);
    await initSqlParser();
    return {
      sourceId,
      scannedAt: catalog.scannedAt,
      relations: catalog.relations.length,
      truncated: catalog.truncated,
      views: catalog.relations.filter((r) => r.kind === 'view' || r.kind === 'materialized_view').length,
      unprovableViews: unprovableViews(catalog),
      unreadable,
      ...(unwritable ? { unwritable } : {}),
    };
  } finally {
    await client.end().catch(() => undefined);
  }
}
