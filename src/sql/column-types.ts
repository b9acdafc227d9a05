/**
 * How describe_source names a column's type so a client can interpret its values (issue 23 item 1;
 * spec/mcp-tools-v1.json $defs CatalogRow `type_kind` … `value_form`). Built from the scan's
 * `columnTypes` (src/sources/postgres/catalog.ts); the value form follows the same rules as the
 * decoders (src/sources/postgres/values.ts): a domain reads as its base type, every array type has
 * the array form, a built-in type has its form in spec/value-mapping-v1.json, anything else is text.
 *
 * Pure; never throws. A column whose type the snapshot does not describe gets no type fields.
 */
import { BUILTIN_TYPE_MAPPINGS, type ValueForm } from '../../generated/value-mapping-v1';
import type { CatalogRow } from '../../generated/mcp-tools-v1';
import type { CatalogType, SourceCatalog } from './catalog-types';

/** The type fields of one describe_source row. */
export type ColumnTypeView = Pick<CatalogRow, 'type_kind' | 'base_type' | 'element_type' | 'element_kind' | 'enum_labels' | 'range_subtype' | 'value_form'>;

type Kind = NonNullable<CatalogRow['type_kind']>;

const KIND: Record<string, Exclude<Kind, 'array'>> = { b: 'base', d: 'domain', e: 'enum', c: 'composite', r: 'range', m: 'multirange', p: 'pseudo' };

const FORM_BY_OID = new Map<number, ValueForm>();
for (const t of BUILTIN_TYPE_MAPPINGS) {
  FORM_BY_OID.set(t.oid, t.form);
  if (t.arrayOid !== null) FORM_BY_OID.set(t.arrayOid, 'array');
}

/** Deepest domains followed (PostgreSQL allows any depth; a longer chain is described as far as this). */
const MAX_DOMAIN_DEPTH = 32;

const isArray = (t: CatalogType): boolean => t.category === 'A' && t.element !== 0;

/** Describes the types of one catalogue's columns; build once per describe_source call. */
export class ColumnTypes {
  private readonly byOid: Map<number, CatalogType>;

  constructor(catalog: SourceCatalog) {
    this.byOid = new Map((catalog.columnTypes ?? []).map((t) => [t.oid, t]));
  }

  /** The type under every domain of `t` (t itself when not a domain; the last known one when the chain is cut). */
  private underDomains(t: CatalogType): CatalogType {
    let cur = t;
    for (let i = 0; i < MAX_DOMAIN_DEPTH && cur.typtype === 'd'; i++) {
      const next = this.byOid.get(cur.base);
      if (!next) break;
      cur = next;
    }
    return cur;
  }

  private kindOf(t: CatalogType): Kind {
    return isArray(t) ? 'array' : (KIND[t.typtype] ?? 'base');
  }

  /** The value form of values of type `t` (see module doc). */
  private formOf(t: CatalogType): ValueForm {
    const under = this.underDomains(t);
    return FORM_BY_OID.get(under.oid) ?? (isArray(under) ? 'array' : 'text');
  }

  /**
   * The type fields of a column whose declared type is `oid`, or an empty object when the
   * snapshot does not describe it (scanned before issue 23, or hand-built).
   */
  describe(oid: number | undefined): ColumnTypeView {
    const t = oid === undefined ? undefined : this.byOid.get(oid);
    if (!t) return {};
    const out: ColumnTypeView = { type_kind: this.kindOf(t) };
    const under = this.underDomains(t);
    // A domain whose chain the snapshot cannot follow to a non-domain type names no base type.
    if (t.typtype === 'd' && under.typtype !== 'd') out.base_type = under.name;
    let described = under;
    if (isArray(under)) {
      const el = this.byOid.get(under.element);
      if (el) {
        out.element_type = el.name;
        out.element_kind = KIND[el.typtype] ?? 'base';
        described = this.underDomains(el);
      }
    }
    if (described.labels) out.enum_labels = described.labels;
    if (described.subtype !== undefined) out.range_subtype = described.subtype;
    out.value_form = this.formOf(t);
    return out;
  }
}
