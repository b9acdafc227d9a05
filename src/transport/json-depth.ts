/**
 * A guard run on every JSON body read from a client before JSON.parse (red-team F3): V8's
 * JSON.parse spends about a second on a body of half a million nested `[` (well under the 1 MiB
 * body limit), synchronously, stalling every other client. One linear pass over the text counts
 * the nesting of `[` and `{` outside strings (a backslash inside a string escapes the next
 * character, so `"\"["` opens nothing) and stops at the first level beyond the limit.
 *
 * No legitimate request nests deeply: the JSON-RPC envelope takes three levels (message, params,
 * arguments or _meta) and the tool schemas of spec/mcp-tools-v1.json add at most three more, so 64
 * leaves agents ample room for their own `_meta` and argument values. A body over the limit is
 * answered as unparseable JSON: POST /mcp rule JSON of spec/protocol-v1.json (HTTP 400, JSON-RPC
 * -32700, id null); the other routes 400 `invalid_json` (src/http/common.ts jsonBody).
 */

import { jsonStringEnd } from '../pipeline/json-numbers';

/** Deepest nesting of arrays and objects accepted in a request body (the top-level value is level 1). */
export const MAX_JSON_DEPTH = 64;

const QUOTE = 0x22; // "
const OPEN_ARRAY = 0x5b; // [
const CLOSE_ARRAY = 0x5d; // ]
const OPEN_OBJECT = 0x7b; // {
const CLOSE_OBJECT = 0x7d; // }

/**
 * True when `text` (a JSON text, well-formed or not) nests arrays and objects deeper than
 * `maxDepth` levels outside strings. Linear in the text's length, no allocation; never throws.
 * Stops (false) at the first closer without an opener: the text is malformed there and
 * JSON.parse rejects it no later than that point, having seen at most `maxDepth` levels.
 */
export function jsonNestsDeeperThan(text: string, maxDepth: number = MAX_JSON_DEPTH): boolean {
  let depth = 0;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      // Skip the string with indexOf (most of a normal body is string text).
      i = jsonStringEnd(text, i);
      if (i < 0) return false; // unterminated string: malformed, JSON.parse rejects it
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (++depth > maxDepth) return true;
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      if (--depth < 0) return false;
    }
  }
  return false;
}

/** The message of a refusal for a body nested deeper than MAX_JSON_DEPTH. */
export const TOO_DEEP_MESSAGE = `Parse error: the body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels`;
