/**
 * What a source's writer role may not do to relations (task hnu42a, finding 3): INSERT, UPDATE or
 * DELETE, checked on the server for the role by name (`has_schema_privilege` USAGE,
 * `has_any_column_privilege` INSERT/UPDATE, since a column grant lets those run, and
 * `has_table_privilege` DELETE), so any session can ask: the scan asks on its reader connection,
 * a queued write's check through the reader pool. A role that does not exist may do nothing.
 */
import { relKey } from '../../sql/prepared-catalog';
import type { RelationName } from '../../sql/catalog-types';
import { loadSqlQualifier, qualifySql } from './qualify-sql';

/** A privilege an INSERT, UPDATE, DELETE or MERGE needs on its target. */
export type WritePrivilege = 'INSERT' | 'UPDATE' | 'DELETE';

/** $1 the role's name, $2/$3 schemas and names: each named relation the role lacks a write privilege on, with those it lacks (comma-separated, in INSERT, UPDATE, DELETE order). */
export const WRITER_MISSING_SQL = `SELECT m.schema, m.name, pg_catalog.array_to_string(m.missing, ',') AS missing FROM (
  SELECT n.nspname::text AS schema, c.relname::text AS name,
    ARRAY(SELECT p.p FROM pg_catalog.unnest(ARRAY['INSERT', 'UPDATE', 'DELETE']) WITH ORDINALITY AS p(p, o)
      WHERE NOT coalesce(pg_catalog.has_schema_privilege(r.oid, n.oid, 'USAGE')
        AND CASE WHEN p.p = 'DELETE' THEN pg_catalog.has_table_privilege(r.oid, c.oid, 'DELETE') ELSE pg_catalog.has_any_column_privilege(r.oid, c.oid, p.p) END, false)
      ORDER BY p.o) AS missing
  FROM ROWS FROM (pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[])) AS w(schema, name)
  JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) w.schema
  JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid AND c.relname OPERATOR(pg_catalog.=) w.name
  LEFT JOIN pg_catalog.pg_roles r ON r.rolname OPERATOR(pg_catalog.=) $1) AS m
WHERE pg_catalog.cardinality(m.missing) > 0 ORDER BY 1, 2`;

/** Runs WRITER_MISSING_SQL with its parameters and gives back its rows as arrays. */
export type WriterRead = (sql: string, params: unknown[]) => Promise<{ rowsArray: unknown[][]; truncated?: boolean }>;

/**
 * The relations of `relations` on which `role` lacks a write privilege, with those it lacks, in
 * schema and name order (relations it may fully write, and names the server does not hold, are
 * absent). Throws what `read` throws, or Error for an incomplete or malformed answer.
 */
export async function writerMissingList(read: WriterRead, role: string, relations: readonly RelationName[]): Promise<Array<RelationName & { privileges: WritePrivilege[] }>> {
  if (relations.length === 0) return [];
  await loadSqlQualifier();
  const res = await read(qualifySql(WRITER_MISSING_SQL), [role, relations.map((r) => r.schema), relations.map((r) => r.name)]);
  if (res.truncated) throw new Error('writer privileges answer incomplete');
  return res.rowsArray.map(([schema, name, missing]) => {
    if (typeof schema !== 'string' || typeof name !== 'string' || typeof missing !== 'string') throw new Error('writer privileges answer malformed');
    return { schema, name, privileges: missing.split(',') as WritePrivilege[] };
  });
}

/** writerMissingList keyed by `relKey`. */
export async function writerMissingPrivileges(read: WriterRead, role: string, relations: readonly RelationName[]): Promise<Map<string, WritePrivilege[]>> {
  return new Map((await writerMissingList(read, role, relations)).map((r) => [relKey(r.schema, r.name), r.privileges]));
}
