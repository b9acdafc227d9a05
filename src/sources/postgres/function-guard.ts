/**
 * The function guard (task hf5; red team rt41b F5): a read guard (portal-read.ts `ReadGuard`,
 * `ReadOptions.functionGuard`) that lets a statement run only while every user function its
 * analysis assumed it may run (`SqlAnalysisOk.userFunctions`) is still the one the catalogue scan
 * analysed. A function replaced (`CREATE OR REPLACE`), altered (`ALTER FUNCTION … SECURITY DEFINER`,
 * `SET search_path`, `OWNER TO`, …) or dropped and created again under the same name has another
 * pg_proc row version (`oid:xmin`, catalog.ts ROUTINE_VERSION_SQL), and so has a name that gained
 * or lost an overload.
 *
 * It runs in the statement's own round trip and implicit transaction, right before it: no extra
 * round trip, and a statement without user functions carries no guard at all. It returns no rows
 * when every name's versions match, and raises 22012 (read.ts GUARD_SQLSTATE) at the first that does
 * not, so the statement is never executed then; the read resolves with `functionsChanged`. The
 * division runs only for a mismatch (the CASE) and on a value the planner cannot fold.
 *
 * What it cannot see: a definition committed between the guard's snapshot and the moment the
 * statement first calls the function (the same round trip; READ COMMITTED takes a snapshot per
 * statement, and PostgreSQL resolves a function's body from the latest committed catalogue).
 */
import type { SourceCatalog } from '../../sql/catalog-types';
import type { ReadGuard } from './portal-read';

/** The guard texts for 0–31 names, made on first use (one text object per count). */
const texts: Array<string | undefined> = new Array(32).fill(undefined);

/**
 * The guard's SQL for `count` names: parameters `$3i+1` schema, `$3i+2` name, `$3i+3` the expected
 * versions (`oid:xmin` of every overload that is not a procedure, ordered by oid, joined by `,`;
 * empty when none existed).
 */
export function functionGuardSql(count: number): string {
  const hit = texts[count];
  if (hit !== undefined) return hit;
  const rows = Array.from({ length: count }, (_, i) => `($${3 * i + 1}::text, $${3 * i + 2}::text, $${3 * i + 3}::text)`).join(', ');
  const text = `
SELECT 1
FROM (VALUES ${rows}) AS u(s, n, v)
CROSS JOIN LATERAL (
  SELECT coalesce(pg_catalog.string_agg(p.oid::text || ':' || p.xmin::text, ',' ORDER BY p.oid), '') AS have, pg_catalog.count(*) AS k
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_namespace ns ON ns.oid = p.pronamespace
  WHERE ns.nspname = u.s AND p.proname = u.n AND p.prokind <> 'p') x
WHERE CASE WHEN x.have <> u.v THEN 1 / (x.k * 0) = 1 ELSE false END
`;
  if (count < texts.length) texts[count] = text;
  return text;
}

/** Expected versions per catalogue: `schema\0name` → versions text (see functionGuardSql). */
const expected = new WeakMap<SourceCatalog, Map<string, string>>();

/** A value no server answer equals: the snapshot has no version for an overload (scanned before hf5). */
const UNKNOWN = '?';

function versionsOf(catalog: SourceCatalog): Map<string, string> {
  let m = expected.get(catalog);
  if (m) return m;
  const lists = new Map<string, Array<string | undefined>>();
  for (const r of catalog.routines ?? []) {
    const k = r.schema + '\u0000' + r.name;
    const list = lists.get(k) ?? [];
    list.push(r.version);
    lists.set(k, list);
  }
  m = new Map();
  for (const [k, list] of lists) {
    if (list.some((v) => typeof v !== 'string' || !/^[0-9]+:[0-9]+$/.test(v))) {
      m.set(k, UNKNOWN);
      continue;
    }
    const sorted = (list as string[]).map((v) => [Number(v.slice(0, v.indexOf(':'))), v] as const).sort((a, b) => a[0] - b[0]);
    m.set(k, sorted.map((x) => x[1]).join(','));
  }
  expected.set(catalog, m);
  return m;
}

/** Guards made per functions array (the analysis cache hands the same array for a repeated statement). */
const guards = new WeakMap<object, WeakMap<SourceCatalog, ReadGuard>>();

/**
 * The function guard for the user functions `fns` (schema and name, every overload counting) of a
 * statement analysed against `catalog`, or null when `fns` is empty (no guard, nothing sent). A
 * catalogue without routine versions (scanned before this check existed, or without `routines`)
 * expects a value the server never answers: the guard trips and the source is rescanned, so such a
 * snapshot is never trusted for a statement running user functions. Memoised per array and catalogue; frozen.
 */
export function functionGuard(catalog: SourceCatalog, fns: ReadonlyArray<{ schema: string; name: string }> | undefined): ReadGuard | null {
  if (!fns || fns.length === 0) return null;
  let byCat = guards.get(fns);
  if (!byCat) guards.set(fns, (byCat = new WeakMap()));
  const hit = byCat.get(catalog);
  if (hit) return hit;
  const versions = versionsOf(catalog);
  const known = catalog.routines !== undefined;
  const values: string[] = [];
  for (const f of fns) values.push(f.schema, f.name, known ? (versions.get(f.schema + '\u0000' + f.name) ?? '') : UNKNOWN);
  const g: ReadGuard = Object.freeze({ text: functionGuardSql(fns.length), values: Object.freeze(values) as string[] });
  byCat.set(catalog, g);
  return g;
}
