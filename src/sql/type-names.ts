/**
 * Type names in agent SQL (issue 12, Build 4): a type that is neither built-in nor in the
 * source's catalogue must answer exactly as a nonexistent relation does. A relation's row type
 * used as a type counts as reading the relation (analyzer `rowTypeUse`), so an ungranted one is
 * refused by authorization as `source_role_denied`; a name that exists nowhere is refused here as
 * `unknown_relation`, which step 3 answers with the same code and text. Without this, the server
 * answered a missing type with an error, and the difference told the agent which tables exist.
 */
import { PreparedCatalog, relKey } from './prepared-catalog';

/**
 * True when `names` (a parsed type name: `[name]` or `[schema, name]`) resolves to a type the
 * catalogue lists (`SourceCatalog.types`) or to a catalogue relation's row type, in the order
 * PostgreSQL looks it up (`pg_catalog` first for unqualified names, then the search path). Row
 * types of system catalogues are not types here, as system catalogues are not relations here.
 * True as well when the catalogue has no type list (not checked). Pure.
 */
export function typeNameResolves(cat: PreparedCatalog, names: readonly string[]): boolean {
  if (!cat.types) return true;
  const name = names[names.length - 1];
  const known = (schema: string) => cat.types!.has(relKey(schema, name)) || cat.relations.has(relKey(schema, name));
  if (names.length === 2) return known(names[0]);
  return cat.path.some(known);
}
