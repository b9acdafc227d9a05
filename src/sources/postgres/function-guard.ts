/**
 * The function guard (task hf5; red team rt41b F5; task hg1 after red team rt42b G1): a read guard
 * (portal-read.ts `ReadGuard`, `ReadOptions.functionGuard`) that lets a statement run only while
 * every function and operator PostgreSQL may resolve for it is still one the catalogue scan saw.
 *
 * For every name the statement looks up (`SqlAnalysisOk.resolvedNames`: called functions and
 * operators, implicit ones and built-ins included) and every user function its analysis assumed it
 * may run (`SqlAnalysisOk.userFunctions`, by name), the set of functions (pg_proc by `proname`, not
 * procedures) or operators (pg_operator by `oprname`) of that name in every schema but
 * `pg_catalog`, `information_schema` and the temporary and toast schemas (where the scan does not
 * look, and nobody but a superuser creates or PostgreSQL never searches for functions and
 * operators) must be exactly the scanned set, row versions included (`oid:xmin`, catalog.ts
 * ROUTINE_VERSION_SQL; `operatorCode`'s version). So a function or operator created, renamed (ALTER
 * … RENAME TO), moved (SET SCHEMA), replaced (`CREATE OR REPLACE`), altered (`SECURITY DEFINER`,
 * `SET search_path`, `OWNER TO`, …) or dropped and created again trips it, wherever it sits on the
 * reader's path: a candidate that wins resolution by an exact argument-type match over a built-in
 * reached by coercion (`public.lower(varchar)`, `public.=(varchar, varchar)`), or one in a schema
 * earlier on the path that hides the scanned one, is never run unchecked.
 *
 * It runs in the statement's own round trip and implicit transaction, right before it: no extra
 * round trip, and a statement that looks up no function or operator name carries no guard at all.
 * It returns no rows when every name's versions match, and raises 22012 (read.ts GUARD_SQLSTATE) at
 * the first that does not, so the statement is never executed then; the read resolves with
 * `functionsChanged` (the pipeline answers `catalog_stale` and the gateway rescans). The division
 * runs only for a mismatch (the CASE) and on a value the planner cannot fold. Each name is one
 * probe of pg_proc_proname_args_nsp_index or pg_operator_oprname_l_r_n_index, whose last column is
 * the namespace: while every row of the name is in pg_catalog it reads no heap row (an index-only
 * scan on an all-visible catalogue), and only a name with rows elsewhere has their versions read.
 *
 * What it cannot see: a definition committed between the guard's snapshot and the moment the
 * statement first resolves the name (the same round trip; READ COMMITTED takes a snapshot per
 * statement, and PostgreSQL resolves from the latest committed catalogue); names looked up inside a
 * LANGUAGE sql function's string body when it runs (its own functions are checked by name, the
 * names its body resolves are not).
 */
import type { SourceCatalog } from '../../sql/catalog-types';
import type { ReadGuard } from './portal-read';

/** The guard texts per count of function and of operator names, made on first use (`f:o` → text; small counts only). */
const texts = new Map<string, string>();

/**
 * One kind's half of the guard: for each name, a probe of the name's index that reads no heap row
 * when every row of that name is in `pg_catalog` (the common case: an index-only scan of
 * `(name, …, namespace)`), and only otherwise the versions of the rows outside the excluded schemas.
 */
function half(count: number, first: number, kind: 'f' | 'o'): string {
  const [table, alias, nameCol, nsCol, own, schemas] =
    kind === 'f'
      ? ['pg_proc', 'p', 'proname', 'pronamespace', ` AND p.prokind <> 'p'`, ` AND ns.nspname NOT LIKE 'pg\\_toast%'`]
      : ['pg_operator', 'o', 'oprname', 'oprnamespace', '', ''];
  const rows = Array.from({ length: count }, (_, i) => `($${first + 2 * i}::name, $${first + 2 * i + 1}::text)`).join(', ');
  return `
SELECT 1
FROM (VALUES ${rows}) AS u(n, v)
CROSS JOIN LATERAL (
  SELECT CASE WHEN NOT EXISTS (
      SELECT 1 FROM pg_catalog.${table} z WHERE z.${nameCol} = u.n AND z.${nsCol} <> 'pg_catalog'::regnamespace) THEN ''
    ELSE (
      SELECT coalesce(pg_catalog.string_agg(${alias}.oid::text || ':' || ${alias}.xmin::text, ',' ORDER BY ${alias}.oid), '')
      FROM pg_catalog.${table} ${alias}
      JOIN pg_catalog.pg_namespace ns ON ns.oid = ${alias}.${nsCol}
      WHERE ${alias}.${nameCol} = u.n AND ${alias}.${nsCol} <> 'pg_catalog'::regnamespace${own}
        AND ns.nspname <> 'information_schema' AND ns.nspname NOT LIKE 'pg\\_temp\\_%'${schemas}) END AS have OFFSET 0) x
WHERE CASE WHEN x.have <> u.v THEN 1 / (pg_catalog.length(x.have) * 0) = 1 ELSE false END`;
}

/**
 * The guard's SQL for `functions` function names and `operators` operator names: parameters, for
 * the functions first and then the operators, `$2i+1` the name and `$2i+2` the expected versions
 * (`oid:xmin` of every function that is not a procedure, or every operator, of that name outside
 * `pg_catalog`, `information_schema` and the temporary (and, for functions, toast) schemas, ordered
 * by oid, joined by `,`; empty when none existed). No rows when all match; 22012 at the first that
 * does not.
 */
export function functionGuardSql(functions: number, operators: number): string {
  const key = functions + ':' + operators;
  const hit = texts.get(key);
  if (hit !== undefined) return hit;
  const parts: string[] = [];
  if (functions > 0) parts.push(half(functions, 1, 'f'));
  if (operators > 0) parts.push(half(operators, 2 * functions + 1, 'o'));
  const text = parts.join('\nUNION ALL') + '\n';
  if (functions < 32 && operators < 32) texts.set(key, text);
  return text;
}

/** Expected versions per catalogue and kind: name → versions text (see functionGuardSql). */
const expected = new WeakMap<SourceCatalog, { f: Map<string, string>; o: Map<string, string> }>();

/** A value no server answer equals: the snapshot has no version for one of the name's rows (scanned before hf5/hg1). */
const UNKNOWN = '?';

/** `name` → the sorted versions text of `rows` ([name, version]); UNKNOWN for a name with a row lacking a version. */
function byName(rows: Iterable<readonly [string, string | undefined]>): Map<string, string> {
  const lists = new Map<string, Array<string | undefined>>();
  for (const [name, version] of rows) {
    const list = lists.get(name) ?? [];
    list.push(version);
    lists.set(name, list);
  }
  const m = new Map<string, string>();
  for (const [k, list] of lists) {
    if (list.some((v) => typeof v !== 'string' || !/^[0-9]+:[0-9]+$/.test(v))) {
      m.set(k, UNKNOWN);
      continue;
    }
    const sorted = (list as string[]).map((v) => [Number(v.slice(0, v.indexOf(':'))), v] as const).sort((a, b) => a[0] - b[0]);
    m.set(k, sorted.map((x) => x[1]).join(','));
  }
  return m;
}

function versionsOf(catalog: SourceCatalog): { f: Map<string, string>; o: Map<string, string> } {
  let m = expected.get(catalog);
  if (m) return m;
  m = {
    f: byName((catalog.routines ?? []).map((r) => [r.name, r.version] as const)),
    o: byName((catalog.operatorCode ?? []).map((r) => [r[1], r[6]] as const)),
  };
  expected.set(catalog, m);
  return m;
}

/** What a guard is made from: the analysis's `userFunctions` and `resolvedNames` (SqlAnalysisOk). */
export interface GuardedNames {
  userFunctions?: ReadonlyArray<{ schema: string; name: string }>;
  resolvedNames?: { functions: ReadonlyArray<string>; operators: ReadonlyArray<string> };
}

/** Guards made per analysis (the analysis cache hands the same object for a repeated statement). */
const guards = new WeakMap<object, WeakMap<SourceCatalog, ReadGuard>>();

/**
 * The function guard for a statement analysed against `catalog` (`names`: its analysis), or null
 * when it looks up no function or operator name and runs no user function (no guard, nothing
 * sent). Function names are those of `resolvedNames.functions` and of `userFunctions`; operator
 * names those of `resolvedNames.operators`. A catalogue without routine or operator versions
 * (scanned before this check existed, or without `routines`/`operatorCode`) expects a value the
 * server never answers for the names concerned: the guard trips and the source is rescanned, so
 * such a snapshot is never trusted. Memoised per analysis and catalogue; frozen.
 */
export function functionGuard(catalog: SourceCatalog, names: GuardedNames | undefined): ReadGuard | null {
  if (!names) return null;
  const fnNames = new Set<string>(names.resolvedNames?.functions ?? []);
  for (const f of names.userFunctions ?? []) fnNames.add(f.name);
  const opNames = names.resolvedNames?.operators ?? [];
  if (fnNames.size === 0 && opNames.length === 0) return null;
  let byCat = guards.get(names);
  if (!byCat) guards.set(names, (byCat = new WeakMap()));
  const hit = byCat.get(catalog);
  if (hit) return hit;
  const versions = versionsOf(catalog);
  const values: string[] = [];
  for (const n of [...fnNames].sort()) values.push(n, catalog.routines ? (versions.f.get(n) ?? '') : UNKNOWN);
  for (const n of opNames) values.push(n, catalog.operatorCode ? (versions.o.get(n) ?? '') : UNKNOWN);
  const g: ReadGuard = Object.freeze({ text: functionGuardSql(fnNames.size, opNames.length), values: Object.freeze(values) as string[] });
  byCat.set(catalog, g);
  return g;
}
