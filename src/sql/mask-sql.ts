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
 * Per method (each function schema-qualified, so nothing on the source's search_path can stand in):
 * - `full`: the text `'***'` (nullness and type hidden too);
 * - `null`: a text NULL;
 * - `partial`: the same string as `applyMask(value, 'partial')` computes in the gateway, built from
 *   the value's text; values whose type the gateway would not have read as a string or a number
 *   (booleans, dates and times, JSON, arrays, bytea, geometric types, domains…) become `'***'`;
 * - `hash`: the hex SHA-256 of the value's text (null stays null); the gateway turns it into the
 *   keyed token with `hashTokenFromDigest`, the same token `applyMask(value, 'hash')` gives for a
 *   value whose text is the same.
 *
 * Columns are referred to by their output names when the names are unique, so a stale catalogue that
 * placed a masked column elsewhere fails (the name is missing) or still masks the right column. When
 * names repeat (a join's `SELECT *`), they are renamed by position through a column alias list.
 */
import { parseSql } from './parser';
import type { MaskMethod } from './redaction';

/** A column of the redaction plan: its position in the output, its name and its mask (null: none). */
export interface PlannedColumn {
  index: number;
  name: string;
  method: MaskMethod | null;
}

/** Types node-postgres reads as a string or a number, for which `partial` keeps trailing characters. */
const PARTIAL_TYPES = ['text', 'character varying', 'character', 'name', 'smallint', 'integer', 'bigint', 'numeric', 'real', 'double precision', 'oid', 'uuid'];

/** A double-quoted identifier. */
export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/**
 * The SQL of a masked column's value given a reference `ref` to the unmasked one (see the module
 * comment). The expressions use only built-in functions, qualified with pg_catalog.
 */
export function maskExpression(ref: string, method: MaskMethod): string {
  switch (method) {
    case 'null':
      return 'NULL::text';
    case 'hash':
      return `CASE WHEN ${ref} IS NULL THEN NULL::text ELSE pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(${ref}::text, 'UTF8')), 'hex') END`;
    case 'partial': {
      const types = `'{${PARTIAL_TYPES.map((t) => `"${t}"`).join(',')}}'::pg_catalog.regtype[]`;
      // t: the value's text; b: at most a quarter of its characters; tld: an e-mail address's last
      // dotted label (with its dot) when the last '@' has text before and after it.
      const partial =
        '(SELECT CASE WHEN pg_catalog.char_length(m.tld) > 1 AND 1 + pg_catalog.char_length(m.tld) <= m.b ' +
        "THEN pg_catalog.concat(pg_catalog.\"left\"(m.t, 1), '***@***', m.tld) " +
        "WHEN LEAST(4, m.b) > 0 THEN pg_catalog.concat('***', pg_catalog.\"right\"(m.t, LEAST(4, m.b))) ELSE '***' END " +
        "FROM (SELECT s.t, pg_catalog.char_length(s.t) / 4 AS b, pg_catalog.substring(pg_catalog.substring(s.t, '^.+@([^@]+)$'), '([.][^.]*)$') AS tld " +
        `FROM (SELECT ${ref}::text AS t) AS s) AS m)`;
      return `CASE WHEN ${ref} IS NULL THEN NULL::text WHEN pg_catalog.pg_typeof(${ref}) = ANY (${types}) THEN ${partial} ELSE '***' END`;
    }
    case 'full':
    default:
      return "'***'::text"; // unknown method: fail closed
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

/**
 * The statement to run for a read of `sql` whose redaction plan is `columns` (one per output column,
 * in order): `sql` itself when nothing is masked, else the wrapping projection of the module comment.
 * Returns null when masks apply but `sql` cannot be wrapped (not exactly one statement): the caller
 * masks in the gateway only. The wrapped statement keeps the inner statement's row order (no
 * ORDER BY, join or aggregate is added around it) and its `$n` parameters.
 */
export function maskedStatement(sql: string, columns: PlannedColumn[]): string | null {
  if (!columns.some((c) => c.method !== null)) return sql;
  const inner = statementText(sql);
  if (inner === null) return null;
  const names = columns.map((c) => c.name);
  const unique = new Set(names).size === names.length;
  const ref = (c: PlannedColumn) => (unique ? `q.${quoteIdent(c.name)}` : `q.${quoteIdent(`c${c.index + 1}`)}`);
  const list = columns.map((c) => `${c.method === null ? ref(c) : maskExpression(ref(c), c.method)} AS ${quoteIdent(c.name)}`).join(', ');
  const alias = unique ? 'q' : `q(${columns.map((c) => quoteIdent(`c${c.index + 1}`)).join(', ')})`;
  // Newlines around the inner text: a trailing line comment in it cannot swallow the closing parenthesis.
  return `SELECT ${list} FROM (\n${inner}\n) AS ${alias}`;
}
