/**
 * The live relation hierarchy (issue 22 item 1): right before a governed read, the ancestors and
 * descendants of the relations it touches, as the server has them now. A partition attached,
 * detached or created after the catalogue scan is thereby governed by its tree's rules on the very
 * next read, not after the next scan (src/pipeline/hierarchy-check.ts compares and re-decides).
 *
 * Two queries, so that the common case costs almost nothing (bench 01, issue 23):
 * - standaloneProbeSql: index lookups on pg_class and pg_inherits for the named relations only.
 *   A relation with `relhassubclass` false (PostgreSQL sets it when a child or partition is
 *   created or attached and clears it only when none is left), `relispartition` false and no
 *   pg_inherits row as a child provably stands alone: its live tree is empty. That is the server's
 *   own answer, taken in the same way as the walk's; nothing is remembered between calls.
 * - HIERARCHY_SQL: the recursive walk, only for the relations the probe could not prove standalone
 *   (all of them, when the caller does not ask for the probe: it knows some relation sits in a tree).
 */
import type { RelationName } from '../../sql/catalog-types';
import { relationKey, type LiveRelationTree } from '../../sql/hierarchy';
import { loadSqlQualifier, qualifySql } from './qualify-sql';

/** Most rows the query may return: beyond, the answer is incomplete and the caller must refuse. */
export const MAX_HIERARCHY_ROWS = 10_000;

/**
 * $1 schemas, $2 names (parallel text arrays). One row per (relation, related relation, direction):
 * direction 'a' = ancestor, 'd' = descendant, at any depth (pg_inherits holds both partition and
 * inheritance edges; depth capped at 64 like the scan). Names are returned as text.
 */
export const HIERARCHY_SQL = `
WITH RECURSIVE t AS (
  SELECT u.s, u.n, c.oid
  FROM ROWS FROM (unnest($1::text[]), unnest($2::text[])) AS u(s, n)
  JOIN pg_catalog.pg_namespace ns ON ns.nspname = u.s
  JOIN pg_catalog.pg_class c ON c.relnamespace = ns.oid AND c.relname = u.n
), up(s, n, oid, depth) AS (
  SELECT t.s, t.n, i.inhparent, 1 FROM t JOIN pg_catalog.pg_inherits i ON i.inhrelid = t.oid
  UNION
  SELECT up.s, up.n, i.inhparent, up.depth + 1 FROM up JOIN pg_catalog.pg_inherits i ON i.inhrelid = up.oid WHERE up.depth < 64
), down(s, n, oid, depth) AS (
  SELECT t.s, t.n, i.inhrelid, 1 FROM t JOIN pg_catalog.pg_inherits i ON i.inhparent = t.oid
  UNION
  SELECT down.s, down.n, i.inhrelid, down.depth + 1 FROM down JOIN pg_catalog.pg_inherits i ON i.inhparent = down.oid WHERE down.depth < 64
)
SELECT x.s::text AS s, x.n::text AS n, x.dir, rn.nspname::text AS rs, rc.relname::text AS rr
FROM (SELECT s, n, 'a' AS dir, oid, min(depth) AS depth FROM up GROUP BY s, n, oid
      UNION ALL
      SELECT s, n, 'd' AS dir, oid, min(depth) AS depth FROM down GROUP BY s, n, oid) x
JOIN pg_catalog.pg_class rc ON rc.oid = x.oid
JOIN pg_catalog.pg_namespace rn ON rn.oid = rc.relnamespace
ORDER BY x.s, x.n, x.dir, x.depth, rn.nspname, rc.relname
`;

/**
 * The probe for `count` relations: parameters $1, $2 are the first relation's schema and name, $3,
 * $4 the second's, and so on. One row per named relation that may sit in a tree (has or once had a
 * child, is a partition, or is an inheritance child); a relation not returned exists with no parent
 * and no child, or does not exist. Index lookups only (pg_class_relname_nsp_index, and
 * pg_inherits_relid_seqno_index when pg_inherits is large): no walk, no scan of the catalogue.
 * A VALUES list rather than unnest(array): the planner then estimates the generic plan exactly as
 * a custom one, so the connection's prepared statement keeps one plan instead of planning every
 * call (planning cost more than the lookups themselves).
 */
export function standaloneProbeSql(count: number): string {
  const rows = Array.from({ length: count }, (_, i) => `($${2 * i + 1}::text, $${2 * i + 2}::text)`).join(', ');
  return `
SELECT u.s::text AS s, u.n::text AS n
FROM (VALUES ${rows}) AS u(s, n)
JOIN pg_catalog.pg_namespace ns ON ns.nspname = u.s
JOIN pg_catalog.pg_class c ON c.relnamespace = ns.oid AND c.relname = u.n
WHERE c.relhassubclass OR c.relispartition
   OR (SELECT true FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid LIMIT 1)
`;
}

/** standaloneGuardSql's texts for 0–31 relations, made on first use. */
const guardTexts: Array<string | undefined> = new Array(32).fill(undefined);

/**
 * The probe as a read guard (portal-read.ts ReadGuard): run in the same round trip right before a
 * read, it returns no rows when every named relation provably stands alone, and raises 22012
 * (division by zero; read.ts GUARD_SQLSTATE) at the first that may sit in a tree, so the read's
 * statement is never executed then. The CASE makes the division run only for such a relation.
 *
 * Each schema is looked up by name on the server when the guard runs, as the statement's own name
 * lookup does: `to_regnamespace` of the quoted name (the server's catalogue cache, no privilege
 * check; NULL, so no row, for a schema that does not exist), so a schema renamed, dropped or
 * created under that name since the scan is the one compared. Task h28g: not a join on
 * pg_namespace, whose plan probed pg_class by `relname` alone and tested the CASE before the
 * schema, so a same-named relation in a tree in another schema tripped the guard (and made every
 * such read take the full check and a second read); now both columns of
 * pg_class_relname_nsp_index are the probe's key.
 */
export function standaloneGuardSql(count: number): string {
  // The same text object for the same count (issue 28 item 3): no string built per read, and the
  // reader's statement lookup by text hashes it once.
  const hit = guardTexts[count];
  if (hit !== undefined) return hit;
  const text = qualifySql(guardText(count));
  if (count < guardTexts.length) guardTexts[count] = text;
  return text;
}

function guardText(count: number): string {
  const rows = Array.from({ length: count }, (_, i) => `($${2 * i + 1}::text, $${2 * i + 2}::text)`).join(', ');
  return `
SELECT 1
FROM (VALUES ${rows}) AS u(s, n)
JOIN pg_catalog.pg_class c ON c.relnamespace = pg_catalog.to_regnamespace(pg_catalog.quote_ident(u.s))::oid AND c.relname = u.n
WHERE CASE WHEN c.relhassubclass OR c.relispartition
             OR (SELECT true FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid LIMIT 1)
      THEN 1 / (c.relnatts * 0) = 1 ELSE false END
`;
}

/** Guards made for a relations array (the pipeline passes the same array for a repeated statement). */
const guards = new WeakMap<readonly RelationName[], { text: string; values: string[] }>();

/**
 * The guard for `relations` (see standaloneGuardSql): made once per relations array, which must not
 * change afterwards (the pipeline's arrays never do); the answer is frozen, values included.
 */
export function standaloneGuard(relations: readonly RelationName[]): { text: string; values: string[] } {
  let g = guards.get(relations);
  if (!g) {
    const values: string[] = [];
    for (const r of relations) values.push(r.schema, r.name);
    g = Object.freeze({ text: standaloneGuardSql(relations.length), values: Object.freeze(values) as string[] });
    guards.set(relations, g);
  }
  return g;
}

/** How the query is run: a read on the source's reader (read-only, time-limited, fair-shared). */
export type HierarchyRead = (sql: string, params: unknown[]) => Promise<{ rowsArray: unknown[][]; truncated: boolean }>;

/** Options of readRelationTrees: `probe` true sends the standalone probe first (default false: the walk at once). */
export interface RelationTreeOptions {
  probe?: boolean;
}

/**
 * Asks the server for the ancestors and descendants of `relations`: first which of them may sit in
 * a tree (standaloneProbeSql, when `opts.probe` is true), then the walk (HIERARCHY_SQL) for
 * those only; when the probe returns none, the walk is not run.
 * @returns a map keyed by `relationKey(schema, name)` with an entry for every requested relation
 *   (empty lists when it has no parent or child, or no longer exists)
 * @throws the read's error; Error('hierarchy answer incomplete') when an answer was cut or malformed
 *   (callers must then refuse the read rather than treat the relation as unruled)
 */
export async function readRelationTrees(read: HierarchyRead, relations: readonly RelationName[], opts: RelationTreeOptions = {}): Promise<Map<string, LiveRelationTree>> {
  await loadSqlQualifier();
  const out = new Map<string, LiveRelationTree>();
  for (const r of relations) out.set(relationKey(r.schema, r.name), { ancestors: [], descendants: [] });
  if (!relations.length) return out;
  let walk: readonly RelationName[] = relations;
  if (opts.probe === true) {
    const res = await read(qualifySql(standaloneProbeSql(relations.length)), relations.flatMap((r) => [r.schema, r.name]));
    if (res.truncated) throw new Error('hierarchy answer incomplete');
    const inTree = new Set<string>();
    for (const row of res.rowsArray) {
      const [s, n] = row;
      if (typeof s !== 'string' || typeof n !== 'string') throw new Error('hierarchy answer incomplete');
      inTree.add(relationKey(s, n));
    }
    walk = relations.filter((r) => inTree.has(relationKey(r.schema, r.name)));
    if (!walk.length) return out;
  }
  const res = await read(qualifySql(HIERARCHY_SQL), [walk.map((r) => r.schema), walk.map((r) => r.name)]);
  if (res.truncated) throw new Error('hierarchy answer incomplete');
  for (const row of res.rowsArray) {
    const [s, n, dir, rs, rr] = row;
    if (typeof s !== 'string' || typeof n !== 'string' || typeof rs !== 'string' || typeof rr !== 'string' || (dir !== 'a' && dir !== 'd')) throw new Error('hierarchy answer incomplete');
    const tree = out.get(relationKey(s, n));
    if (!tree) continue;
    (dir === 'a' ? tree.ancestors : tree.descendants).push({ schema: rs, name: rr });
  }
  return out;
}
