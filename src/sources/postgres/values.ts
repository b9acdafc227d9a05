/**
 * The value mapping (issue 23; spec/value-mapping-v1.json, generated/value-mapping-v1.ts;
 * docs/values.md): how a PostgreSQL text-format value becomes the JSON a client receives. It
 * replaces node-postgres's default type parsers on every source read, which shifted `timestamp`
 * by the gateway host's zone, rounded big integers inside `jsonb`, wrote NaN/Infinity as null,
 * left enum arrays as `{…}` text and wrote `bytea` as Node's Buffer object.
 *
 * The decoders rely on the pinned output settings (src/sources/postgres/session-settings.ts:
 * DateStyle ISO, IntervalStyle postgres, TimeZone UTC, extra_float_digits 1, bytea_output
 * hex): under them PostgreSQL's own text output is already lossless and host-independent, so most
 * types are passed through as that text and nothing here depends on the gateway's TZ or locale.
 *
 * Built-in types (OIDs below 16384, fixed by PostgreSQL) are decoded from the generated table.
 * Other types (enums, composites, extension types, pseudo-types such as `record`, and arrays of
 * any of them) are text unless they are arrays; a type the table does not list is looked up once
 * per source in its pg_type (`SourceTypes.load`), because an array's elements are mapped by their
 * element type (a domain's by its base type).
 */
import { BUILTIN_TYPE_MAPPINGS, type ValueForm } from '../../../generated/value-mapping-v1';
import { RawJson } from './raw-json';

/** Decodes one non-NULL text-format value into its JSON form (a string, number, boolean, RawJson or array). */
export type Decoder = (text: string) => unknown;

/** `text` form: PostgreSQL's text output as it is. */
const asText: Decoder = (s) => s;

/** JSON -0 (JSON.stringify writes the number -0 as 0, which reads back as +0). */
const NEGATIVE_ZERO = new RawJson('-0');

const FORM_DECODERS: Record<Exclude<ValueForm, 'array'>, Decoder> = {
  text: asText,
  boolean: (s) => s === 't',
  number: (s) => Number(s),
  // Within ±(2^53−1) a number; beyond, Number() rounds to a value that is no longer a safe integer.
  int8: (s) => {
    const n = Number(s);
    return Number.isSafeInteger(n) ? n : s;
  },
  float: (s) => {
    if (s === 'NaN' || s === 'Infinity' || s === '-Infinity') return s;
    if (s === '-0') return NEGATIVE_ZERO;
    return Number(s);
  },
  json: (s) => new RawJson(s),
};

/**
 * Parses PostgreSQL's array text (`{a,"b c",NULL,{…}}`, elements separated by `delimiter`) into
 * nested JSON arrays of `element(text)`; NULL is null. An array with non-default lower bounds
 * (`[0:1]={…}`) cannot be a JSON array exactly, so it stays PostgreSQL's text; so does text this
 * parser cannot read (never expected from array_out).
 */
export function parseArrayText(s: string, element: Decoder, delimiter = ','): unknown {
  if (s.charCodeAt(0) !== 123 /* { */) return s;
  let i = 0;
  const n = s.length;
  const parse = (): unknown[] => {
    i++; // '{'
    const out: unknown[] = [];
    if (s[i] === '}') {
      i++;
      return out;
    }
    for (;;) {
      const c = s[i];
      if (c === '{') out.push(parse());
      else if (c === '"') {
        let buf = '';
        let start = ++i;
        while (i < n && s[i] !== '"') {
          if (s[i] === '\\') {
            buf += s.slice(start, i);
            start = ++i;
          }
          i++;
        }
        if (i >= n) throw new Error('unterminated');
        buf += s.slice(start, i);
        i++;
        out.push(element(buf));
      } else {
        const start = i;
        while (i < n && s[i] !== delimiter && s[i] !== '}') i++;
        const tok = s.slice(start, i);
        out.push(tok === 'NULL' ? null : element(tok));
      }
      if (s[i] === delimiter) i++;
      else if (s[i] === '}') {
        i++;
        return out;
      } else throw new Error('malformed');
    }
  };
  try {
    const v = parse();
    return i === n ? v : s;
  } catch {
    return s;
  }
}

/** An array decoder whose elements are decoded by `element`. */
function arrayDecoder(element: Decoder, delimiter: string): Decoder {
  return (s) => parseArrayText(s, element, delimiter);
}

/** Built-in type OID → decoder (the element types, then their arrays). */
const BUILTIN = new Map<number, Decoder>();
for (const t of BUILTIN_TYPE_MAPPINGS) BUILTIN.set(t.oid, FORM_DECODERS[t.form as Exclude<ValueForm, 'array'>]);
for (const t of BUILTIN_TYPE_MAPPINGS) if (t.arrayOid !== null) BUILTIN.set(t.arrayOid, arrayDecoder(BUILTIN.get(t.oid)!, t.arrayDelimiter));

/** A pg_type row as `SourceTypes.load` reads it. */
interface PgTypeRow {
  oid: string;
  typtype: string;
  typcategory: string;
  typelem: string;
  typbasetype: string;
  typdelim: string;
}

/** The pg_type rows of `$1` (oid[]) and, recursively, of their element and base types. */
export const PG_TYPE_SQL = `WITH RECURSIVE t AS (
  SELECT oid, typtype, typcategory, typelem, typbasetype, typdelim FROM pg_catalog.pg_type WHERE oid OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.oid[])
  UNION
  SELECT p.oid, p.typtype, p.typcategory, p.typelem, p.typbasetype, p.typdelim FROM pg_catalog.pg_type p JOIN t ON p.oid OPERATOR(pg_catalog.=) t.typelem OR p.oid OPERATOR(pg_catalog.=) t.typbasetype
) SELECT oid::pg_catalog.text, typtype::pg_catalog.text, typcategory::pg_catalog.text, typelem::pg_catalog.text, typbasetype::pg_catalog.text, typdelim::pg_catalog.text FROM t`;

/** What SourceTypes.load needs of a connection: one parameterised query. */
export interface TypeQueryable {
  query<R>(text: string, values: unknown[]): Promise<{ rows: R[] }>;
}

/**
 * The decoders of one source: built-in types from the table, other types from the source's
 * pg_type, loaded on first sight of their OID and kept for the source's life (a type's OID never
 * changes; a dropped type's OID is not reused before the OID counter wraps).
 */
export class SourceTypes {
  private readonly user = new Map<number, Decoder>();

  /** The decoder of `oid`, or undefined when it is neither built-in nor loaded yet (decode it as text meanwhile). */
  decoder(oid: number): Decoder | undefined {
    return BUILTIN.get(oid) ?? this.user.get(oid);
  }

  /** Whether reading a column of `oid` needs `load` first: neither in the table nor loaded (e.g. an enum array, or `record[]`). */
  needsLoad(oid: number): boolean {
    return !BUILTIN.has(oid) && !this.user.has(oid);
  }

  /**
   * Loads the types `oids` (with their element and base types) from the source's pg_type on `db`.
   * An OID the catalogue does not have is text. Rejects with the query's error.
   */
  async load(db: TypeQueryable, oids: number[]): Promise<void> {
    const r = await db.query<PgTypeRow>(PG_TYPE_SQL, [oids.map(String)]);
    const rows = new Map(r.rows.map((x) => [Number(x.oid), x]));
    const resolving = new Set<number>();
    const resolve = (oid: number): Decoder => {
      const known = this.decoder(oid);
      if (known) return known;
      const t = rows.get(oid);
      if (!t || resolving.has(oid)) return asText;
      resolving.add(oid);
      let d: Decoder = asText;
      if (t.typtype === 'd' && t.typbasetype !== '0') d = resolve(Number(t.typbasetype));
      else if (t.typcategory === 'A' && t.typelem !== '0') d = arrayDecoder(resolve(Number(t.typelem)), t.typdelim || ',');
      this.user.set(oid, d);
      return d;
    };
    for (const oid of oids) this.user.set(oid, resolve(oid));
  }
}

const bySource = new WeakMap<object, SourceTypes>();

/** The SourceTypes of the source `key` stands for (one per connector's pools). */
export function sourceTypesOf(key: object): SourceTypes {
  let t = bySource.get(key);
  if (!t) bySource.set(key, (t = new SourceTypes()));
  return t;
}

/** The decoder of a built-in `oid` (text for one the table does not list); for callers without a source's types. */
export function builtinDecoder(oid: number): Decoder {
  return BUILTIN.get(oid) ?? asText;
}

/** node-postgres `types` that decode every value by the mapping (built-in types; other types as text). */
export const MAPPED_PG_TYPES = {
  getTypeParser: (oid: number, format?: string): Decoder => (format === 'binary' ? asText : builtinDecoder(oid)),
};
