/**
 * The rules that classify every built-in function (every pg_proc row of `pg_catalog` and
 * `information_schema`) of PostgreSQL 15 to 18 as `allowed`, `refused` or `resource_checked`
 * (issue 12, Build 3; sql-safety.md layer 3).
 *
 * Rules are tried in order and the first that matches decides, so every row lands in exactly one
 * class. Refusal rules go by family: by name (the deny-list of function-policy.ts, the `pg_`
 * prefix of server-state functions), by argument and return types (internal/cstring support
 * functions, object identifiers and `reg*` types, transaction ids, privileges, handlers) and by
 * language (C functions load libraries). Nothing is allowed by a pattern: an allowed function is
 * named in the reviewed allow-list (allowed.json). A function that no rule matches is
 * unclassified; the analyser refuses it, and the tests fail, so a PostgreSQL upgrade cannot
 * silently widen the surface.
 */
import { deniedFunctionReason, HARMLESS_VOLATILE, RESOURCE_CHECKED, SERVER_STATE_TYPES } from '../function-policy';
import type { ProcRow } from './snapshot';
import ALLOWED_NAMES from './allowed.json';

/** The three classes of the policy. */
export type FunctionClass = 'allowed' | 'refused' | 'resource_checked';

/** One rule: an id (shown in docs/function-policy.md), its class, what it matches, and the reason told to agents. */
export interface FunctionRule {
  id: string;
  class: FunctionClass;
  /** What the rule matches, for the published table. */
  matches: string;
  /** Completes "function X is not allowed: it …" for refusals; a short note otherwise. */
  reason: (row: ProcRow) => string;
  test: (row: ProcRow) => boolean;
}

/** Object-identifier types: a value of one names a catalogue object, and its I/O looks it up. */
export const OBJECT_ID_TYPES: ReadonlySet<string> = new Set([
  'oid', 'oidvector', 'regclass', 'regcollation', 'regconfig', 'regdictionary', 'regnamespace', 'regoper', 'regoperator', 'regproc',
  'regprocedure', 'regrole', 'regtype',
]);

/** Pseudo-types of support functions (type I/O, planner support, handlers, triggers). */
const SUPPORT_TYPES: ReadonlySet<string> = new Set(['internal', 'cstring']);
const HANDLER_TYPES: ReadonlySet<string> = new Set(['language_handler', 'fdw_handler', 'index_am_handler', 'table_am_handler', 'tsm_handler', 'trigger', 'event_trigger']);

/**
 * `pg_` functions reviewed as harmless: they compute on their arguments (sizes, encodings) and
 * reveal nothing about other objects, sessions or the server. Every other `pg_` function is refused.
 */
export const HARMLESS_PG_FUNCTIONS: ReadonlySet<string> = new Set([
  'pg_size_pretty', 'pg_size_bytes', 'pg_column_size', 'pg_column_compression', 'pg_encoding_to_char', 'pg_char_to_encoding',
  'pg_encoding_max_length', 'pg_trigger_depth', 'pg_typeof',
]);

/**
 * Functions allowed although a type rule would refuse them, each for a stated reason.
 * `pg_typeof` returns `regtype`, but only ever names the type of its own argument, whose value is
 * analysed like any other.
 */
const TYPE_EXCEPTIONS: ReadonlyMap<string, string> = new Map([['pg_typeof', 'names the type of its own argument only']]);

/** Functions that describe the server build or the connection (encodings, library versions). */
const SERVER_DETAIL_FUNCTIONS: ReadonlySet<string> = new Set(['getdatabaseencoding', 'pg_client_encoding', 'icu_unicode_version', 'unicode_version']);
const SERVER_DETAIL_FUNCTIONS_TEXT = [...SERVER_DETAIL_FUNCTIONS].map((n) => '`' + n + '`').join(', ');

/** Functions that look a catalogue object up by a name given as text (text search parsers). */
const CATALOGUE_BY_NAME: ReadonlySet<string> = new Set(['ts_parse', 'ts_token_type']);
const CATALOGUE_BY_NAME_TEXT = [...CATALOGUE_BY_NAME].map((n) => '`' + n + '`').join(', ') + ' (a parser named as text)';

/** The argument and return type names of a row, arrays folded to their element type (`_oid` → `oid`). */
function typesOf(row: ProcRow): string[] {
  const list = row[2] === '' ? [] : row[2].split(' ');
  list.push(row[3]);
  return list.map((t) => (t.startsWith('_') ? t.slice(1) : t));
}

const anyType = (set: ReadonlySet<string>) => (row: ProcRow) => typesOf(row).some((t) => set.has(t));
const allowedNames: ReadonlySet<string> = new Set(ALLOWED_NAMES as string[]);

/** The ordered rules; the first that matches a row decides its class. */
export const FUNCTION_RULES: ReadonlyArray<FunctionRule> = [
  {
    id: 'information-schema',
    class: 'refused',
    matches: 'every function of schema `information_schema`',
    reason: () => 'is an information_schema helper that reads the catalogue by object id (use the describe tool)',
    test: (r) => r[0] === 'information_schema',
  },
  {
    id: 'deny-list',
    class: 'refused',
    matches: 'names and prefixes of function-policy.ts (side effects, files, sessions, administration, SQL text, privileges, connection details)',
    reason: (r) => deniedFunctionReason(r[1]) ?? '',
    test: (r) => deniedFunctionReason(r[1]) !== null,
  },
  {
    id: 'loads-code',
    class: 'refused',
    matches: 'language C, names ending in `_validator` or `_handler`, and functions returning a handler or trigger type',
    reason: () => 'loads or validates code (language handlers and validators, triggers)',
    test: (r) => r[4] === 'c' || /_(validator|handler)$/.test(r[1]) || HANDLER_TYPES.has(r[3]),
  },
  {
    id: 'support-function',
    class: 'refused',
    matches: 'any argument or result of type `internal` or `cstring` (type input/output, planner and index support)',
    reason: () => 'is a type input/output or planner support function',
    test: anyType(SUPPORT_TYPES),
  },
  {
    id: 'binary-output',
    class: 'refused',
    matches: 'type binary output functions (names ending in `send` returning `bytea`)',
    reason: () => 'is a type input/output or planner support function',
    test: (r) => r[1].endsWith('send') && r[3] === 'bytea',
  },
  {
    id: 'index-support',
    class: 'refused',
    matches: 'index support functions (names starting with `gin_`, `gist_`, `spg_`, `brin_`)',
    reason: () => 'is an index support function',
    test: (r) => /^(gin|gist|spg|brin)_/.test(r[1]),
  },
  {
    id: 'server-details',
    class: 'refused',
    matches: SERVER_DETAIL_FUNCTIONS_TEXT,
    reason: () => 'reveals details of the server or the connection',
    test: (r) => SERVER_DETAIL_FUNCTIONS.has(r[1]),
  },
  {
    id: 'catalogue-by-name',
    class: 'refused',
    matches: CATALOGUE_BY_NAME_TEXT,
    reason: () => 'reads the catalogue by object id or by name',
    test: (r) => CATALOGUE_BY_NAME.has(r[1]),
  },
  {
    id: 'type-exception',
    class: 'allowed',
    matches: 'reviewed exceptions to the type rules below: ' + [...TYPE_EXCEPTIONS.keys()].map((n) => '`' + n + '`').join(', '),
    reason: (r) => TYPE_EXCEPTIONS.get(r[1]) ?? '',
    test: (r) => r[0] === 'pg_catalog' && TYPE_EXCEPTIONS.has(r[1]),
  },
  {
    id: 'object-identifier',
    class: 'refused',
    matches: 'any argument or result of an object-identifier type: ' + [...OBJECT_ID_TYPES].map((t) => '`' + t + '`').join(', ') + ' (and arrays of them)',
    reason: () => 'reads the catalogue by object id or by name',
    test: anyType(OBJECT_ID_TYPES),
  },
  {
    id: 'server-state-type',
    class: 'refused',
    matches: 'any argument or result of type ' + [...SERVER_STATE_TYPES].map((t) => '`' + t + '`').join(', '),
    reason: () => 'reveals transaction ids, snapshots, tuple ids or write-ahead log positions',
    test: anyType(SERVER_STATE_TYPES),
  },
  {
    id: 'privileges',
    class: 'refused',
    matches: 'any argument or result of type `aclitem`',
    reason: () => 'reveals privileges of database objects',
    test: anyType(new Set(['aclitem'])),
  },
  {
    id: 'extensions',
    class: 'refused',
    matches: 'extension functions (`pg_available_extension*`, `pg_extension_*`)',
    reason: () => "reads the server's extension directory or extension state",
    test: (r) => /^pg_(available_extension|extension_)/.test(r[1]),
  },
  {
    id: 'server-state',
    class: 'refused',
    matches: 'names starting with `pg_`, except ' + [...HARMLESS_PG_FUNCTIONS].map((n) => '`' + n + '`').join(', '),
    reason: () => 'reveals or changes server state',
    test: (r) => r[1].startsWith('pg_') && !HARMLESS_PG_FUNCTIONS.has(r[1]),
  },
  {
    id: 'volatile',
    class: 'refused',
    matches: 'volatile functions, except ' + [...HARMLESS_VOLATILE].map((n) => '`' + n + '`').join(', '),
    reason: () => 'is volatile (may have side effects)',
    test: (r) => r[6] === 'v' && !HARMLESS_VOLATILE.has(r[1]),
  },
  {
    id: 'resource-checked',
    class: 'resource_checked',
    matches: [...RESOURCE_CHECKED].map((n) => '`' + n + '`').join(', ') + ': constant sizes are checked before the statement runs; the byte budget bounds the result',
    reason: () => 'constant sizes are checked before the statement runs',
    test: (r) => r[0] === 'pg_catalog' && RESOURCE_CHECKED.has(r[1]),
  },
  {
    id: 'allow-list',
    class: 'allowed',
    matches: 'the reviewed allow-list (src/sql/builtin-functions/allowed.json)',
    reason: () => 'reviewed: computes on its arguments only',
    test: (r) => r[0] === 'pg_catalog' && allowedNames.has(r[1]),
  },
];

/** The rule that decides a row, or null when the row is unclassified (then it is refused). */
export function classifyRow(row: ProcRow): FunctionRule | null {
  for (const rule of FUNCTION_RULES) if (rule.test(row)) return rule;
  return null;
}
