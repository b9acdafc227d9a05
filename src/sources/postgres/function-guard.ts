/**
 * The function guard (task hf5; red team rt41b F5; tasks hg1 after red team rt42b G1, hg2): a read
 * guard (portal-read.ts `ReadGuard`, `ReadOptions.functionGuard`) that lets a statement run only
 * while every function and operator PostgreSQL may resolve for it is still one the catalogue scan saw.
 *
 * Per name, it compares only the schemas PostgreSQL could resolve that name from for this statement
 * (task hg2): a name the statement looks up unqualified (`SqlAnalysisOk.resolvedNames.functions`,
 * `.operators`: called functions and operators, implicit ones and built-ins included) in every
 * schema of the reader's pinned search path (`SourceCatalog.searchPath`, the scanned
 * `current_schemas(false)` that pools.ts `pinSearchPath` pins on every reader connection, `"$user"`
 * already resolved to the schema it named, schemas that did not exist then left out, as on the
 * connection); a name looked up in one schema (`resolvedNames.qualifiedFunctions`,
 * `.qualifiedOperators`: qualified in the statement, `s.f(…)`, `OPERATOR(s.=)`, or looked up by the
 * string body of a user function it may run, in each schema of that body's path) in that schema; a
 * user function the analysis assumed may run (`SqlAnalysisOk.userFunctions`) in its own schema. In
 * those schemas but `pg_catalog`, `information_schema`, `pg_toast` and the temporary ones (where the
 * scan does not look, and nobody but a superuser creates or PostgreSQL never searches for functions
 * and operators), the set of functions (pg_proc by `proname`, not procedures) or operators
 * (pg_operator by `oprname`) of that name must be exactly the scanned set there, row versions
 * included (`oid:xmin`, catalog.ts ROUTINE_VERSION_SQL; `operatorCode`'s version). So a function or
 * operator created, renamed (ALTER … RENAME TO), moved into or out of such a schema (SET SCHEMA),
 * replaced (`CREATE OR REPLACE`), altered (`SECURITY DEFINER`, `SET search_path`, `OWNER TO`, …) or
 * dropped and created again trips it: a candidate that wins resolution by an exact argument-type
 * match over a built-in reached by coercion (`public.lower(varchar)`, `public.=(varchar, varchar)`),
 * or one in a schema earlier on the path that hides the scanned one, is never run unchecked. One in
 * a schema the statement cannot resolve the name from (off the path, not named) does not: a role
 * with CREATE only there cannot keep the reads of a name refused and the source rescanning.
 *
 * Schemas are given by name (the scan's names) and resolved to oids on the server, in the guard:
 * a path schema renamed, dropped or created again since the scan is looked up as the connection's
 * path is, by name, and its functions compared with the scanned ones of that name.
 *
 * It runs in the statement's own round trip and implicit transaction, right before it: no extra
 * round trip, and a statement that looks up no function or operator name carries no guard at all.
 * It returns no rows when every name's versions match, and raises 22012 (read.ts GUARD_SQLSTATE) at
 * the first that does not, so the statement is never executed then; the read resolves with
 * `functionsChanged` (the pipeline answers `catalog_stale` and the gateway rescans). The division
 * runs only for a mismatch (the CASE) and on a value the planner cannot fold. Each name is one
 * probe of pg_proc_proname_args_nsp_index or pg_operator_oprname_l_r_n_index; its schemas' oids are
 * read from pg_namespace (an InitPlan) only once a row of the name outside `pg_catalog` is met. A
 * name the scan saw no row of in those schemas is only probed for one (for an operator without
 * reading a heap row: the index's last column is the namespace), and only a name with rows there
 * has their versions read and compared.
 *
 * What it cannot see: a definition committed between the guard's snapshot and the moment the
 * statement first resolves the name (the same round trip; READ COMMITTED takes a snapshot per
 * statement, and PostgreSQL resolves from the latest committed catalogue); names a LANGUAGE sql
 * function's string body resolves when it runs in a way the analysis does not follow (its function
 * calls, operators of A_Expr, sort and sub-link forms, `>=`/`<=` (`<`/`>`) of `[NOT] BETWEEN` (red
 * team rt43b F2) and the implicit `=` are checked in every schema of its path; other implicit
 * operators of the body are not). Code PostgreSQL finds by oid, not by name — a cast WITH FUNCTION
 * or a domain CHECK created after the scan (red team rt43b F1, F3) — is not compared here but by the
 * type guard (type-guard.ts, task hcast), sent as one more part of the same guard statement
 * (connector.ts `functionGuard`).
 */
import type { SourceCatalog } from '../../sql/catalog-types';
import type { ReadGuard } from './portal-read';
import { qualifySql } from './qualify-sql';

/** The guard texts per shape (GuardShape as `a:b:c:d`), made on first use (at most 512 kept). */
const texts = new Map<string, string>();

/**
 * The rows of a name the scan records and the guard compares (`x` the alias, `o` the name's schema
 * oids): in those schemas, outside `pg_catalog`, `information_schema`, toast (functions) and
 * temporary schemas; no procedures. By namespace oid, so no join.
 */
function rowsOf(kind: 'f' | 'o', x: string, o: string): string {
  const ns = `${x}.${kind === 'f' ? 'pronamespace' : 'oprnamespace'}`;
  return (
    `${ns} = ANY (${o}) AND ${ns} <> 'pg_catalog'::regnamespace AND coalesce(${ns} <> pg_catalog.to_regnamespace('information_schema'), true)` +
    ` AND NOT pg_catalog.pg_is_other_temp_schema(${ns}) AND ${ns} <> pg_catalog.pg_my_temp_schema()` +
    (kind === 'f' ? ` AND ${ns} <> 'pg_toast'::regnamespace AND ${x}.prokind <> 'p'` : '')
  );
}

/**
 * The oids of the schemas named by parameter `$k` (a name[]; those that exist now): an uncorrelated
 * sub-select, so an InitPlan the executor runs only when a row of the name outside `pg_catalog`
 * is met (the other conditions are tested first), at most once.
 */
const schemas = (k: number): string => `ARRAY(SELECT m.oid FROM pg_catalog.pg_namespace m WHERE m.nspname = ANY ($${k}::name[]))`;

/**
 * One part of the guard, for `count` names of one kind from parameter `$first` on, each with its
 * schemas (a `name[]` literal). `absent` (the scan saw no row of the name there; parameters: the
 * name and its schemas): one probe of the name's index, which for an operator reads no heap row
 * (index-only on `(oprname, …, oprnamespace)`), raising when a row exists. Otherwise (parameters:
 * the name, its schemas and the expected versions): the versions of the name's rows there, raising
 * when they differ.
 */
function part(kind: 'f' | 'o', absent: boolean, count: number, first: number): string {
  const [table, nameCol, nsCol] = kind === 'f' ? ['pg_proc', 'proname', 'pronamespace'] : ['pg_operator', 'oprname', 'oprnamespace'];
  if (absent) {
    const rows = Array.from({ length: count }, (_, i) => `($${first + 2 * i}::name, ${schemas(first + 2 * i + 1)})`).join(', ');
    return `
SELECT 1
FROM (VALUES ${rows}) AS u(n, o)
CROSS JOIN LATERAL (SELECT z.${nsCol} AS ns FROM pg_catalog.${table} z WHERE z.${nameCol} = u.n AND ${rowsOf(kind, 'z', 'u.o')} LIMIT 1) x
WHERE 1 / (x.ns::int8 * 0) = 1`;
  }
  const rows = Array.from({ length: count }, (_, i) => `($${first + 3 * i}::name, ${schemas(first + 3 * i + 1)}, $${first + 3 * i + 2}::text)`).join(', ');
  return `
SELECT 1
FROM (VALUES ${rows}) AS u(n, o, v)
CROSS JOIN LATERAL (
  SELECT coalesce(pg_catalog.string_agg(z.oid::text || ':' || z.xmin::text, ',' ORDER BY z.oid), '') AS have, pg_catalog.count(*) AS k
  FROM pg_catalog.${table} z WHERE z.${nameCol} = u.n AND ${rowsOf(kind, 'z', 'u.o')}) x
WHERE CASE WHEN x.have <> u.v THEN 1 / (x.k * 0) = 1 ELSE false END`;
}

/** How many names of each group a guard checks: functions and operators, each absent at the scan (in its schemas) or present. */
export interface GuardShape {
  fAbsent: number;
  fPresent: number;
  oAbsent: number;
  oPresent: number;
}

/**
 * The guard's SQL for a `shape`. Parameters, group by group in the order fAbsent, fPresent,
 * oAbsent, oPresent: for a name the scan saw no row of in its schemas, the name and its schemas
 * (a PostgreSQL `name[]` literal, schemaLiteral); otherwise the name, its schemas and the expected
 * versions (`oid:xmin` of every function that is not a procedure, or every operator, of that name
 * in those schemas, outside `pg_catalog`, `information_schema`, the temporary and (functions) toast
 * schemas, ordered by oid, joined by `,`). No rows when all match; 22012 at the first that does not.
 */
export function functionGuardSql(shape: GuardShape): string {
  const key = `${shape.fAbsent}:${shape.fPresent}:${shape.oAbsent}:${shape.oPresent}`;
  const hit = texts.get(key);
  if (hit !== undefined) return hit;
  const parts: string[] = [];
  let next = 1;
  for (const [kind, absent, count] of [
    ['f', true, shape.fAbsent],
    ['f', false, shape.fPresent],
    ['o', true, shape.oAbsent],
    ['o', false, shape.oPresent],
  ] as const) {
    if (count === 0) continue;
    parts.push(part(kind, absent, count, next));
    next += (absent ? 2 : 3) * count;
  }
  const text = qualifySql(parts.join('\nUNION ALL') + '\n');
  if (texts.size < 512) texts.set(key, text);
  return text;
}

/** `schemas` as a PostgreSQL array literal (each element double-quoted, `"` and `\` escaped), for a `name[]` parameter. */
export function schemaLiteral(schemas: readonly string[]): string {
  return '{' + schemas.map((s) => '"' + s.replace(/["\\]/g, (c) => '\\' + c) + '"').join(',') + '}';
}

/** The scanned rows per catalogue and kind: name → [schema, version] of each row. */
const scanned = new WeakMap<SourceCatalog, { f: Map<string, Array<readonly [string, string | undefined]>>; o: Map<string, Array<readonly [string, string | undefined]>> }>();

/** A value no server answer equals: the snapshot has no version for one of the name's rows (scanned before hf5/hg1). */
const UNKNOWN = '?';

/** Schemas the guard never compares (the scan does not record their functions and operators). */
const UNCOMPARED: ReadonlySet<string> = new Set(['pg_catalog', 'information_schema', 'pg_toast']);

/** `name` → its rows `[schema, version]` (from `rows`: [schema, name, version]). */
function byName(rows: Iterable<readonly [string, string, string | undefined]>): Map<string, Array<readonly [string, string | undefined]>> {
  const m = new Map<string, Array<readonly [string, string | undefined]>>();
  for (const [schema, name, version] of rows) {
    const list = m.get(name) ?? [];
    list.push([schema, version]);
    m.set(name, list);
  }
  return m;
}

function scannedOf(catalog: SourceCatalog): { f: Map<string, Array<readonly [string, string | undefined]>>; o: Map<string, Array<readonly [string, string | undefined]>> } {
  let m = scanned.get(catalog);
  if (m) return m;
  m = {
    f: byName((catalog.routines ?? []).map((r) => [r.schema, r.name, r.version] as const)),
    o: byName((catalog.operatorCode ?? []).map((r) => [r[0], r[1], r[6]] as const)),
  };
  scanned.set(catalog, m);
  return m;
}

/**
 * The expected versions text of the scanned rows `rows` of a name in `schemas`: sorted by oid,
 * joined by `,`; '' for none; UNKNOWN when one of them lacks a version.
 */
function versionsIn(rows: ReadonlyArray<readonly [string, string | undefined]> | undefined, schemas: ReadonlySet<string>): string {
  const list: Array<readonly [number, string]> = [];
  for (const [schema, v] of rows ?? []) {
    if (!schemas.has(schema)) continue;
    if (typeof v !== 'string' || !/^[0-9]+:[0-9]+$/.test(v)) return UNKNOWN;
    list.push([Number(v.slice(0, v.indexOf(':'))), v]);
  }
  return list
    .sort((a, b) => a[0] - b[0])
    .map((x) => x[1])
    .join(',');
}

/** What a guard is made from: the analysis's `userFunctions` and `resolvedNames` (SqlAnalysisOk). */
export interface GuardedNames {
  userFunctions?: ReadonlyArray<{ schema: string; name: string }>;
  resolvedNames?: {
    functions: ReadonlyArray<string>;
    operators: ReadonlyArray<string>;
    qualifiedFunctions?: ReadonlyArray<{ schema: string; name: string }>;
    qualifiedOperators?: ReadonlyArray<{ schema: string; name: string }>;
  };
}

/** Guards made per analysis (the analysis cache hands the same object for a repeated statement). */
const guards = new WeakMap<object, WeakMap<SourceCatalog, ReadGuard | null>>();

/** Adds `schemas` (but the uncompared ones) to the set of `name` in `m`. */
function addTo(m: Map<string, Set<string>>, name: string, schemas: Iterable<string>): void {
  let set = m.get(name);
  for (const s of schemas) {
    if (UNCOMPARED.has(s)) continue;
    if (!set) m.set(name, (set = new Set()));
    set.add(s);
  }
}

/**
 * The function guard for a statement analysed against `catalog` (`names`: its analysis), or null
 * when it looks up no function or operator name in a schema the guard compares and runs no user
 * function (no guard, nothing sent). Function names: `resolvedNames.functions` in every schema of
 * `catalog.searchPath`, `resolvedNames.qualifiedFunctions` and `userFunctions` each in its schema;
 * operator names likewise (`operators`, `qualifiedOperators`). A catalogue without routine or
 * operator versions (scanned before this check existed, or without `routines`/`operatorCode`)
 * expects a value the server never answers for the names concerned: the guard trips and the source
 * is rescanned, so such a snapshot is never trusted. Memoised per analysis and catalogue; frozen.
 */
export function functionGuard(catalog: SourceCatalog, names: GuardedNames | undefined): ReadGuard | null {
  if (!names) return null;
  const rn = names.resolvedNames;
  if (!names.userFunctions?.length && !rn) return null;
  let byCat = guards.get(names);
  if (!byCat) guards.set(names, (byCat = new WeakMap()));
  const hit = byCat.get(catalog);
  if (hit !== undefined) return hit;
  const path = catalog.searchPath ?? [];
  const fns = new Map<string, Set<string>>();
  const ops = new Map<string, Set<string>>();
  for (const n of rn?.functions ?? []) addTo(fns, n, path);
  for (const q of rn?.qualifiedFunctions ?? []) addTo(fns, q.name, [q.schema]);
  for (const f of names.userFunctions ?? []) addTo(fns, f.name, [f.schema]);
  for (const n of rn?.operators ?? []) addTo(ops, n, path);
  for (const q of rn?.qualifiedOperators ?? []) addTo(ops, q.name, [q.schema]);
  let g: ReadGuard | null = null;
  if (fns.size > 0 || ops.size > 0) {
    const rows = scannedOf(catalog);
    const groups: string[][] = [[], [], [], []];
    for (const [kind, m, have, known] of [
      [0, fns, rows.f, catalog.routines !== undefined],
      [2, ops, rows.o, catalog.operatorCode !== undefined],
    ] as const) {
      for (const n of [...m.keys()].sort()) {
        const schemas = m.get(n)!;
        const v = known ? versionsIn(have.get(n), schemas) : UNKNOWN;
        const lit = schemaLiteral([...schemas].sort());
        if (v === '') groups[kind].push(n, lit);
        else groups[kind + 1].push(n, lit, v);
      }
    }
    const shape: GuardShape = { fAbsent: groups[0].length / 2, fPresent: groups[1].length / 3, oAbsent: groups[2].length / 2, oPresent: groups[3].length / 3 };
    g = Object.freeze({ text: functionGuardSql(shape), values: Object.freeze(groups.flat()) as string[] });
  }
  byCat.set(catalog, g);
  return g;
}
