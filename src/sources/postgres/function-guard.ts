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
 * probe of pg_proc_proname_args_nsp_index or pg_operator_oprname_l_r_n_index; a name the scan saw
 * no row of is only probed for one (for an operator without reading a heap row while every row of
 * the name is in pg_catalog: the index's last column is the namespace), and only a name with rows
 * outside has their versions read and compared. Schemas are told by oid (no join).
 *
 * What it cannot see: a definition committed between the guard's snapshot and the moment the
 * statement first resolves the name (the same round trip; READ COMMITTED takes a snapshot per
 * statement, and PostgreSQL resolves from the latest committed catalogue); names looked up inside a
 * LANGUAGE sql function's string body when it runs (its own functions are checked by name, the
 * names its body resolves are not).
 */
import type { SourceCatalog } from '../../sql/catalog-types';
import type { ReadGuard } from './portal-read';

/** The guard texts per shape (GuardShape as `a:b:c:d`), made on first use (at most 512 kept). */
const texts = new Map<string, string>();

/** The rows of a name the scan records and the guard compares (`x` the alias): outside `pg_catalog`, `information_schema`, toast (functions) and temporary schemas; no procedures. By namespace oid, so no join. */
function outside(kind: 'f' | 'o', x: string): string {
  const ns = `${x}.${kind === 'f' ? 'pronamespace' : 'oprnamespace'}`;
  return (
    `${ns} <> 'pg_catalog'::regnamespace AND ${ns} IS DISTINCT FROM pg_catalog.to_regnamespace('information_schema')` +
    ` AND NOT pg_catalog.pg_is_other_temp_schema(${ns}) AND ${ns} <> pg_catalog.pg_my_temp_schema()` +
    (kind === 'f' ? ` AND ${ns} <> 'pg_toast'::regnamespace AND ${x}.prokind <> 'p'` : '')
  );
}

/**
 * One part of the guard, for `count` names of one kind from parameter `$first` on. `absent` (the
 * scan saw no row of those names; parameter: the name): one probe of the name's index, which for
 * an operator reads no heap row while every row of the name is in `pg_catalog` (index-only on
 * `(oprname, …, oprnamespace)`), raising when a row exists. Otherwise (parameters: the name and the
 * expected versions): the versions of the name's rows, raising when they differ.
 */
function part(kind: 'f' | 'o', absent: boolean, count: number, first: number): string {
  const [table, nameCol, nsCol] = kind === 'f' ? ['pg_proc', 'proname', 'pronamespace'] : ['pg_operator', 'oprname', 'oprnamespace'];
  if (absent) {
    const rows = Array.from({ length: count }, (_, i) => `($${first + i}::name)`).join(', ');
    return `
SELECT 1
FROM (VALUES ${rows}) AS u(n)
CROSS JOIN LATERAL (SELECT z.${nsCol} AS ns FROM pg_catalog.${table} z WHERE z.${nameCol} = u.n AND ${outside(kind, 'z')} LIMIT 1) x
WHERE 1 / (x.ns::int8 * 0) = 1`;
  }
  const rows = Array.from({ length: count }, (_, i) => `($${first + 2 * i}::name, $${first + 2 * i + 1}::text)`).join(', ');
  return `
SELECT 1
FROM (VALUES ${rows}) AS u(n, v)
CROSS JOIN LATERAL (
  SELECT coalesce(pg_catalog.string_agg(z.oid::text || ':' || z.xmin::text, ',' ORDER BY z.oid), '') AS have, pg_catalog.count(*) AS k
  FROM pg_catalog.${table} z WHERE z.${nameCol} = u.n AND ${outside(kind, 'z')}) x
WHERE CASE WHEN x.have <> u.v THEN 1 / (x.k * 0) = 1 ELSE false END`;
}

/** How many names of each group a guard checks: functions and operators, each absent at the scan or present. */
export interface GuardShape {
  fAbsent: number;
  fPresent: number;
  oAbsent: number;
  oPresent: number;
}

/**
 * The guard's SQL for a `shape`. Parameters, group by group in the order fAbsent, fPresent,
 * oAbsent, oPresent: for a name the scan saw no row of, the name; otherwise the name and the
 * expected versions (`oid:xmin` of every function that is not a procedure, or every operator, of
 * that name outside `pg_catalog`, `information_schema`, the temporary and (functions) toast
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
    next += absent ? count : 2 * count;
  }
  const text = parts.join('\nUNION ALL') + '\n';
  if (texts.size < 512) texts.set(key, text);
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
  const groups: string[][] = [[], [], [], []];
  for (const n of [...fnNames].sort()) {
    const v = catalog.routines ? (versions.f.get(n) ?? '') : UNKNOWN;
    if (v === '') groups[0].push(n);
    else groups[1].push(n, v);
  }
  for (const n of opNames) {
    const v = catalog.operatorCode ? (versions.o.get(n) ?? '') : UNKNOWN;
    if (v === '') groups[2].push(n);
    else groups[3].push(n, v);
  }
  const shape: GuardShape = { fAbsent: groups[0].length, fPresent: groups[1].length / 2, oAbsent: groups[2].length, oPresent: groups[3].length / 2 };
  const g: ReadGuard = Object.freeze({ text: functionGuardSql(shape), values: Object.freeze(groups.flat()) as string[] });
  byCat.set(catalog, g);
  return g;
}
