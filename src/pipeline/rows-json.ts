/**
 * One serialisation of a result's rows (issue 13): interlock_query's text item is the JSON array of
 * row objects (contract: interlock_query), and the wire serialiser (src/protocol/tool-results.ts,
 * serializeMessage) splices the same text into structuredContent.rows instead of serialising the
 * rows a second time. A cached result keeps its rows array, so a cache hit serialises no row at all.
 * Values of the `json` form (RawJson, issue 23) are written verbatim (jsonText).
 */
import { jsonText } from '../sources/postgres/raw-json';

const rowsJson = new WeakMap<object, string>();

/**
 * The JSON text of `rows`, computed once per array. The array must not change after this call
 * (results are built once and never edited).
 */
export function rowsText(rows: object[]): string {
  let j = rowsJson.get(rows);
  if (j === undefined) {
    j = jsonText(rows);
    rowsJson.set(rows, j);
  }
  return j;
}

/** The text rowsText() made for this array, or undefined when it never went through rowsText(). */
export function serializedRows(rows: object): string | undefined {
  return rowsJson.get(rows);
}
