/**
 * JSON text that must reach the client verbatim (issue 23, spec/value-mapping-v1.json forms `json`
 * and `float`'s -0): a `json`/`jsonb` value as the server wrote it, so an integer above 2^53 inside
 * it keeps every digit, which `JSON.parse` would round.
 *
 * Node 20 has no `JSON.rawJSON`, so `jsonText()` serialises a value with `JSON.stringify` while
 * every RawJson inside it stands in as a placeholder string, then splices each raw text in place of
 * its placeholder. The placeholder's per-process random part cannot be guessed by a client, so no
 * value it controls can be mistaken for one. Anything that writes rows for a client (rowsText,
 * serializeMessage, the /v1 and legacy routes) goes through `jsonText()`.
 */
import { randomBytes } from 'node:crypto';

const MARK = `\u0000interlock-raw-${randomBytes(12).toString('hex')}:`;
/** A placeholder as JSON.stringify writes it: `"\u0000interlock-raw-<hex>:<n>"`. */
const PLACEHOLDER = new RegExp(`"${JSON.stringify(MARK).slice(1, -1).replace(/\\/g, '\\\\')}(\\d+)"`, 'g');

/** The raw texts of the jsonText() call in progress (null: none; JSON.stringify is synchronous). */
let pending: string[] | null = null;

/**
 * A value whose JSON form is `json`, a complete JSON text (a PostgreSQL `json`/`jsonb` output is
 * always one). Outside jsonText(), `JSON.stringify` writes `JSON.parse(json)` (lossy for integers
 * above 2^53), so every path that writes rows for a client must use jsonText().
 */
export class RawJson {
  /** The JSON text; line breaks (which valid JSON holds only as insignificant whitespace outside strings) become spaces. */
  readonly json: string;

  /**
   * @param json a complete JSON text (PostgreSQL's `json`/`jsonb` output). A `json` value keeps its
   * input's layout, line breaks included (`EXPLAIN (FORMAT JSON)` writes several lines); spliced
   * verbatim they would end an SSE `data:` line early, so CR and LF are written as spaces, which
   * changes no value (inside a JSON string they are always escaped).
   */
  constructor(json: string) {
    this.json = /[\r\n]/.test(json) ? json.replace(/[\r\n]/g, ' ') : json;
  }

  /** The placeholder inside jsonText(); the parsed value elsewhere. */
  toJSON(): unknown {
    if (pending === null) return JSON.parse(this.json);
    pending.push(this.json);
    return MARK + (pending.length - 1);
  }
}

/** `JSON.stringify(value)` with every RawJson inside it written verbatim. Throws as JSON.stringify does. */
export function jsonText(value: unknown): string {
  const outer = pending;
  const mine: string[] = [];
  pending = mine;
  let s: string;
  try {
    s = JSON.stringify(value);
  } finally {
    pending = outer;
  }
  if (mine.length === 0) return s;
  return s.replace(PLACEHOLDER, (_, i: string) => mine[Number(i)]);
}

/**
 * A string JSON.stringify writes verbatim between its quotes, one UTF-8 byte a character: printable
 * ASCII (U+0020–U+007E) without `"` and `\`.
 */
const PLAIN_JSON_STRING = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

/**
 * UTF-8 bytes of `jsonText(value)` (`undefined` counts as `null`, as in an array or a row). A
 * string's are counted without serialising it when every character is plain (PLAIN_JSON_STRING:
 * its length and the two quotes; h28z, the wire budget counts each value of each row), else from
 * `JSON.stringify` of the string itself (a string holds no RawJson).
 */
export function jsonBytes(value: unknown): number {
  if (typeof value === 'string') return PLAIN_JSON_STRING.test(value) ? value.length + 2 : Buffer.byteLength(JSON.stringify(value), 'utf8');
  if (value === null || value === undefined) return 4;
  if (typeof value === 'number') return Number.isFinite(value) ? String(value).length : 4;
  if (typeof value === 'boolean') return value ? 4 : 5;
  if (value instanceof RawJson) return Buffer.byteLength(value.json, 'utf8');
  return Buffer.byteLength(jsonText(value) ?? 'null', 'utf8');
}
