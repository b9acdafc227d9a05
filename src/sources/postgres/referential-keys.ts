/**
 * The foreign keys with a writing referential action as the server has them now (red team rtfk
 * finding 1): the catalogue scan records them (`CatalogRelation.referencedBy`,
 * src/sources/postgres/catalog.ts), but a key created since the last scan would let an approved
 * write cascade into a relation nobody decided. src/approvals/execute.ts reads them live before it
 * re-checks a write and decides it on the catalogue with these keys in place (`withReferentialKeys`).
 */
import type { ReferencingKey, SourceCatalog } from '../../sql/catalog-types';
import { relKey } from '../../sql/prepared-catalog';
import { referencingKeyOf } from './catalog';
import type { HierarchyRead } from './hierarchy';

/** Most key rows the read may return: beyond, the answer is incomplete and the caller must refuse. */
export const MAX_REFERENTIAL_KEY_ROWS = 100_000;

/**
 * One row per foreign key whose ON DELETE or ON UPDATE action writes the referencing rows: the
 * referenced relation's schema and name, then the fields of a scanned key (referencing schema and
 * name, confdeltype, confupdtype, referencing and referenced columns as JSON text, whether it is a
 * partition's clone as 'true'/'false'), in the scan's order.
 */
export const REFERENTIAL_KEYS_SQL = `SELECT rn.nspname::text, rc.relname::text, kn.nspname::text, kc.relname::text,
  con.confdeltype::text, con.confupdtype::text,
  (SELECT json_agg(ka.attname ORDER BY k.ord) FROM unnest(con.conkey) WITH ORDINALITY AS k(attnum, ord)
   JOIN pg_catalog.pg_attribute ka ON ka.attrelid = con.conrelid AND ka.attnum = k.attnum)::text,
  (SELECT json_agg(ka.attname ORDER BY k.ord) FROM unnest(con.confkey) WITH ORDINALITY AS k(attnum, ord)
   JOIN pg_catalog.pg_attribute ka ON ka.attrelid = con.confrelid AND ka.attnum = k.attnum)::text,
  (con.conparentid <> 0)::text
FROM pg_catalog.pg_constraint con
JOIN pg_catalog.pg_class kc ON kc.oid = con.conrelid
JOIN pg_catalog.pg_namespace kn ON kn.oid = kc.relnamespace
JOIN pg_catalog.pg_class rc ON rc.oid = con.confrelid
JOIN pg_catalog.pg_namespace rn ON rn.oid = rc.relnamespace
WHERE con.contype = 'f' AND (con.confdeltype IN ('c', 'n', 'd') OR con.confupdtype IN ('c', 'n', 'd'))
ORDER BY rn.nspname, rc.relname, kn.nspname, kc.relname, con.conname`;

const names = (v: unknown): string[] => {
  const a = typeof v === 'string' ? (JSON.parse(v) as unknown) : v;
  if (a === null || a === undefined) return [];
  if (!Array.isArray(a) || !a.every((x) => typeof x === 'string')) throw new Error('referential keys answer malformed');
  return a as string[];
};

/**
 * Reads the keys (REFERENTIAL_KEYS_SQL) through `read` (the source's reader).
 * @returns the keys referencing each relation, keyed by `relKey(schema, name)` of the referenced relation
 * @throws the read's error; Error when the answer was cut or malformed (the caller must refuse)
 */
export async function readReferentialKeys(read: HierarchyRead): Promise<Map<string, ReferencingKey[]>> {
  const res = await read(REFERENTIAL_KEYS_SQL, []);
  if (res.truncated) throw new Error('referential keys answer incomplete');
  const out = new Map<string, ReferencingKey[]>();
  for (const row of res.rowsArray) {
    const [rs, rr, s, n, d, u, c, rcols, cloned] = row;
    if (![rs, rr, s, n, d, u].every((x) => typeof x === 'string')) throw new Error('referential keys answer malformed');
    const k = relKey(rs as string, rr as string);
    const list = out.get(k) ?? [];
    list.push(referencingKeyOf([s as string, n as string, d as string, u as string, names(c), names(rcols), cloned === 'true' || cloned === true]));
    out.set(k, list);
  }
  return out;
}

/**
 * `catalog` with each relation's `referencedBy` replaced by the live `keys` (none: []); relations
 * whose scan recorded no `referencedBy` (a snapshot older than the records) stay unknown, and views
 * get none. Pure; the catalogue is not changed.
 */
export function withReferentialKeys(catalog: SourceCatalog, keys: ReadonlyMap<string, ReferencingKey[]>): SourceCatalog {
  return { ...catalog, relations: catalog.relations.map((r) => (r.referencedBy ? { ...r, referencedBy: keys.get(relKey(r.schema, r.name)) ?? [] } : r)) };
}
