/**
 * Syntax the analyser's grammar reads otherwise than an older source server (red team rt46a J1).
 *
 * libpg-query parses with PostgreSQL 18's grammar. Since PostgreSQL 16 that grammar reads the SQL/JSON
 * constructors and `IS JSON`, since 17 `JSON()`, `JSON_SCALAR()`, `JSON_SERIALIZE()`,
 * `JSON_VALUE()`/`JSON_QUERY()`/`JSON_EXISTS()` and `MERGE_ACTION()` as built-in constructs, and
 * since 16 it turns the legacy `json_object(…)` call into `pg_catalog.json_object(…)`. A server of an
 * earlier version parses the same text as an ordinary call of a function of that name looked up on
 * the search path: a user function of that name (created by anyone with CREATE on a schema of the
 * path, before or after the scan) would run without being judged, its reads unchecked and unmasked,
 * and without the function guard comparing it at run time.
 *
 * The analyser refuses these constructs unless the catalogue records a server that reads them as
 * constructs (analyzer/json.ts, analyzer/expr.ts), judges the legacy json_object call by its
 * unqualified name there (analyzer/func.ts), and a user function's string body that uses them on such
 * a server is judged as calling the named function (function-reads.ts).
 */

/** Per parse-node type: the `server_version_num` from which the server reads it as the construct, and what an older server calls instead. */
export const SYNTAX_SINCE: Readonly<Record<string, { readonly version: number; readonly call: string }>> = {
  JsonObjectConstructor: { version: 160000, call: 'json_object' },
  JsonArrayConstructor: { version: 160000, call: 'json_array' },
  JsonArrayQueryConstructor: { version: 160000, call: 'json_array' },
  JsonObjectAgg: { version: 160000, call: 'json_objectagg' },
  JsonArrayAgg: { version: 160000, call: 'json_arrayagg' },
  JsonIsPredicate: { version: 160000, call: 'IS JSON' },
  JsonParseExpr: { version: 170000, call: 'json' },
  JsonScalarExpr: { version: 170000, call: 'json_scalar' },
  JsonSerializeExpr: { version: 170000, call: 'json_serialize' },
  JsonFuncExpr: { version: 170000, call: 'json_value, json_query or json_exists' },
  JsonTable: { version: 170000, call: 'json_table' },
  MergeSupportFunc: { version: 170000, call: 'merge_action' },
};

/** From this version the grammar of the server, like the analyser's, calls `pg_catalog.json_object` for the legacy `json_object(…)`. */
export const JSON_OBJECT_QUALIFIED_SINCE = 160000;

/**
 * True when a server of `serverVersionNum` reads parse node `type` as the analyser does: a node not
 * in SYNTAX_SINCE always; one in it only from its version. An unknown version (a catalogue scanned
 * before versions were recorded) reads as an older server (fail closed).
 */
export function readsAsAnalysed(serverVersionNum: number | undefined, type: string): boolean {
  const since = sinceOf(type);
  if (!since) return true;
  return serverVersionNum !== undefined && serverVersionNum >= since.version;
}

/**
 * The function name(s) an older server calls for node `type` (`n` its fields): one name for most
 * constructs, JsonFuncExpr's by its `op` (json_value, json_query, json_exists); null for `IS JSON`
 * (a syntax error there, never a call) and types not in SYNTAX_SINCE.
 */
export function legacyCallName(type: string, n: Record<string, unknown> | undefined): string | null {
  if (type === 'JsonFuncExpr') {
    const op = String(n?.op ?? '');
    return op === 'JSON_VALUE_OP' ? 'json_value' : op === 'JSON_QUERY_OP' ? 'json_query' : op === 'JSON_EXISTS_OP' ? 'json_exists' : null;
  }
  if (type === 'JsonIsPredicate') return null;
  return sinceOf(type)?.call ?? null;
}

/** SYNTAX_SINCE's own entry for `type` (a tree key such as `constructor` or `toString` is not one). */
export function sinceOf(type: string): { readonly version: number; readonly call: string } | undefined {
  return Object.prototype.hasOwnProperty.call(SYNTAX_SINCE, type) ? SYNTAX_SINCE[type] : undefined;
}
