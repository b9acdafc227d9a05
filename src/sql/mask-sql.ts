/**
 * Masks applied inside PostgreSQL (sql-safety.md class 6, redaction; red-team finding F1 of
 * 1 December 2026). When a read's redaction plan masks any output column, the agent's statement
 * runs wrapped in a projection that replaces each masked column by its masked form, so the raw value
 * never leaves the source:
 *
 *   SELECT q."id" AS "id", '***'::text AS "email" FROM (<the agent's statement>) AS q
 *
 * Masking only in the gateway was not enough: the byte cap and the wire budget count what arrives,
 * so an agent padding its result next to a masked column could binary-search the raw value's length
 * (and a `full` mask's nullness) from where `result_too_large` begins. With the masks in SQL, what
 * arrives is what the agent receives.
 *
 * Per method (each function, type and operator pinned to pg_catalog — `OPERATOR(pg_catalog.=)`,
 * `::pg_catalog.text` — so nothing on the source's search_path can stand in: red team rt48c K1, an
 * insider's `public.= (oid, regtype)` ran as the reader in the partial mask; the wrapper is in
 * test/unit/sources/qualified-statements.test.ts; LEAST finds its operator through the type's default
 * btree operator class, which only a superuser can create):
 * - `full`: the text `'***'` (nullness and type hidden too);
 * - `null`: a text NULL;
 * - `partial`: the same string as `applyMask(value, 'partial')` computes in the gateway, built from
 *   the value's text as its output function writes it, which is the value's mapped text (issue 23,
 *   spec/value-mapping-v1.json: dates, timestamps, intervals, bytea, numeric, geometric and every
 *   other `text`-form type arrive as exactly that text); values of a (domain's base) type whose
 *   mapped form is not a string or a number (booleans, json/jsonb) and arrays become `'***'`.
 *   Floats are the one difference: the source writes `1.234e-05` where JavaScript writes
 *   `0.00001234`, so the trailing characters shown can differ for very large or small values;
 * - `hash`: the hex SHA-256 of the value's text (null stays null); the gateway turns it into the
 *   keyed token with `hashTokenFromDigest`, the same token `applyMask(value, 'hash')` gives for any
 *   value of the text form, an integer, or json/jsonb (hashed as the server's JSON text). Booleans
 *   (`t` against `true`), floats and arrays are written differently by the two paths, so a token from
 *   a query and one masked in the gateway (discovery) differ for them.
 *
 * Columns are referred to by their output names, so a stale catalogue that placed a masked column
 * elsewhere fails (the name is missing) or still masks the right column; when names repeat (a
 * join's `SELECT *`) the read is refused and the agent asked to alias its columns.
 */
import { BUILTIN_TYPE_MAPPINGS } from '../../generated/value-mapping-v1';
import { parseSql } from './parser';
import type { MaskMethod } from './redaction';
import { cutText } from '../errors/cut-text';

/** A column of the redaction plan: its position in the output, its name and its mask (null: none). */
export interface PlannedColumn {
  index: number;
  name: string;
  method: MaskMethod | null;
}

/**
 * Base types whose mapped form (spec/value-mapping-v1.json) is neither a string nor a number
 * (bool; json and jsonb), for which `partial` gives `'***'` as applyMask does; arrays too.
 * PostgreSQL describes a domain by its base type, so a domain is judged by that.
 */
const NON_STRING_BASE_TYPES = BUILTIN_TYPE_MAPPINGS.filter((t) => t.form === 'boolean' || t.form === 'json').map((t) => t.oid);

/** The value's text as its type's output function writes it (what node-postgres receives), not a `::text` cast (inet's adds `/32`). */
function valueText(ref: string): string {
  return `pg_catalog.format('%s', ${ref})`;
}

/** A double-quoted identifier. */
export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/**
 * The SQL of a masked column's value given a reference `ref` to the unmasked one (see the module
 * comment). The expressions use only built-in functions, types and operators, each qualified with
 * pg_catalog (red team rt48c K1).
 */
export function maskExpression(ref: string, method: MaskMethod): string {
  switch (method) {
    case 'null':
      return 'NULL::pg_catalog.text';
    case 'hash':
      return `CASE WHEN ${ref} IS NULL THEN NULL::pg_catalog.text ELSE pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(${valueText(ref)}, 'UTF8')), 'hex') END`;
    case 'partial': {
      const base =
        `(SELECT pg_catalog.bool_or(b.oid OPERATOR(pg_catalog.=) ANY ('{${NON_STRING_BASE_TYPES.join(',')}}'::pg_catalog.oid[]) OR b.typcategory OPERATOR(pg_catalog.=) 'A') ` +
        `FROM pg_catalog.pg_type AS d JOIN pg_catalog.pg_type AS b ON b.oid OPERATOR(pg_catalog.=) CASE WHEN d.typtype OPERATOR(pg_catalog.=) 'd' THEN d.typbasetype ELSE d.oid END ` +
        `WHERE d.oid OPERATOR(pg_catalog.=) pg_catalog.pg_typeof(${ref}))`;
      // t: the value's text; b: at most a quarter of its characters; tld: an e-mail address's last
      // dotted label (with its dot) when the last '@' has text before and after it.
      const partial =
        '(SELECT CASE WHEN pg_catalog.char_length(m.tld) OPERATOR(pg_catalog.>) 1 AND (1 OPERATOR(pg_catalog.+) pg_catalog.char_length(m.tld)) OPERATOR(pg_catalog.<=) m.b ' +
        "THEN pg_catalog.concat(pg_catalog.\"left\"(m.t, 1), '***@***', m.tld) " +
        "WHEN LEAST(4, m.b) OPERATOR(pg_catalog.>) 0 THEN pg_catalog.concat('***', pg_catalog.\"right\"(m.t, LEAST(4, m.b))) ELSE '***' END " +
        "FROM (SELECT s.t, pg_catalog.char_length(s.t) OPERATOR(pg_catalog./) 4 AS b, pg_catalog.substring(pg_catalog.substring(s.t, '^.+@([^@]+)$'), '([.][^.]*)$') AS tld " +
        `FROM (SELECT ${valueText(ref)} AS t) AS s) AS m)`;
      return `CASE WHEN ${ref} IS NULL THEN NULL::pg_catalog.text WHEN ${base} THEN '***' ELSE ${partial} END`;
    }
    case 'full':
    default:
      return "'***'::pg_catalog.text"; // unknown method: fail closed
  }
}

/**
 * The text of the one statement in `sql` without a trailing semicolon and what follows it (the
 * parser's statement bounds are UTF-8 byte offsets). Null when `sql` does not hold exactly one
 * statement.
 */
export function statementText(sql: string): string | null {
  const stmts = parseSql(sql).stmts ?? [];
  if (stmts.length !== 1) return null;
  const { stmt_location: loc = 0, stmt_len: len = 0 } = stmts[0];
  const bytes = Buffer.from(sql, 'utf8');
  return bytes.subarray(loc, len > 0 ? loc + len : bytes.length).toString('utf8');
}

/** PostgreSQL's longest identifier in bytes (NAMEDATALEN - 1); longer names are cut to it. */
const MAX_IDENTIFIER_BYTES = 63;

/** `name` as PostgreSQL stores it: cut to 63 bytes of UTF-8 at a character boundary. */
export function identifierAsStored(name: string): string {
  return cutToBytes(name, MAX_IDENTIFIER_BYTES);
}

/** The longest prefix of `text` made of whole characters that is at most `max` bytes of UTF-8. */
export function cutToBytes(text: string, max: number): string {
  if (Buffer.byteLength(text, 'utf8') <= max) return text;
  let out = '';
  let bytes = 0;
  for (const ch of text) {
    const n = Buffer.byteLength(ch, 'utf8');
    if (bytes + n > max) break;
    out += ch;
    bytes += n;
  }
  return out;
}

/**
 * The statement to run for a read of `sql` whose redaction plan is `columns` (one per output column,
 * in order):
 * - `{ sql }` unchanged when nothing is masked;
 * - `{ sql: wrapped }`, the projection of the module comment, referring to each column by its name;
 * - `{ refused }` when masks apply but the output names repeat (after PostgreSQL's 63-byte cut):
 *   columns could then only be matched by position, and a catalogue gone stale since the plan (a
 *   column added under `SELECT *`) would put a raw value under a masked column's neighbour's name;
 * - null when masks apply but `sql` is not exactly one statement: the caller masks in the gateway.
 * The wrapped statement keeps the inner statement's row order (no ORDER BY, join or aggregate is
 * added around it) and its `$n` parameters.
 */
export function maskedStatement(sql: string, columns: PlannedColumn[]): { sql: string } | { refused: string } | null {
  if (!columns.some((c) => c.method !== null)) return { sql };
  const stored = columns.map((c) => identifierAsStored(c.name));
  const seen = new Set<string>();
  for (const n of stored) {
    if (seen.has(n)) return { refused: `output columns share the name ${JSON.stringify(cutText(n, 64))} while masked columns are involved; give each output column its own alias.` };
    seen.add(n);
  }
  const inner = statementText(sql);
  if (inner === null) return null;
  const list = columns.map((c, i) => {
    const ref = `q.${quoteIdent(stored[i])}`;
    return `${c.method === null ? ref : maskExpression(ref, c.method)} AS ${quoteIdent(stored[i])}`;
  });
  // Newlines around the inner text: a trailing line comment in it cannot swallow the closing parenthesis.
  return { sql: `SELECT ${list.join(', ')} FROM (\n${inner}\n) AS q` };
}
