/**
 * Shape of a pg_proc snapshot of the built-in schemas (issue 12, Build 3), and the query that
 * reads one. The function policy's rules (rules.ts) classify each row.
 */

/**
 * One pg_proc row: `[schema, name, argument types, return type, language, kind, volatility, returns set]`.
 * - argument types: `typname`s of every argument (IN, OUT, INOUT, VARIADIC, TABLE columns), space-separated
 *   (array types keep PostgreSQL's `_` prefix, e.g. `_oid`);
 * - return type: `typname` of `prorettype`;
 * - language: `lanname` (`internal`, `c`, `sql`, …);
 * - kind: `prokind` (`f` function, `a` aggregate, `w` window, `p` procedure);
 * - volatility: `provolatile` (`i`, `s`, `v`).
 */
export type ProcRow = [string, string, string, string, string, string, string, boolean];

/** A snapshot: the PostgreSQL major version and its rows, sorted by schema, name and arguments. */
export interface ProcSnapshot {
  postgres: number;
  rows: ProcRow[];
}

/** Reads a snapshot's rows (column `r`, one JSON array per row) as any role that can read pg_proc. */
export const PROC_SNAPSHOT_SQL = `
SELECT json_build_array(n.nspname, p.proname,
  coalesce((SELECT string_agg(t.typname, ' ' ORDER BY a.i)
            FROM unnest(coalesce(p.proallargtypes, p.proargtypes::oid[])) WITH ORDINALITY AS a(oid, i)
            JOIN pg_catalog.pg_type t ON t.oid = a.oid), ''),
  rt.typname, l.lanname, p.prokind, p.provolatile, p.proretset) AS r
FROM pg_catalog.pg_proc p
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
JOIN pg_catalog.pg_language l ON l.oid = p.prolang
JOIN pg_catalog.pg_type rt ON rt.oid = p.prorettype
WHERE n.nspname IN ('pg_catalog', 'information_schema')
ORDER BY n.nspname, p.proname, 1::text`;

/**
 * The snapshots as stored (src/sql/builtin-functions/pg-proc.json): each distinct row once, with
 * the major versions that have it as a last, space-separated element (`"15 16 17 18"`). Rows sorted
 * by their JSON text, so a new snapshot changes only the lines it must.
 */
export interface ProcSnapshotFile {
  versions: number[];
  rows: Array<[...ProcRow, string]>;
}

/** Expands the stored file into one snapshot per version (rows in file order). */
export function expandSnapshots(file: ProcSnapshotFile): ProcSnapshot[] {
  return file.versions.map((v) => ({
    postgres: v,
    rows: file.rows.filter((r) => r[8].split(' ').includes(String(v))).map((r) => r.slice(0, 8) as ProcRow),
  }));
}

/** Replaces (or adds) one version's snapshot in the stored file; pure. */
export function mergeSnapshot(file: ProcSnapshotFile, snap: ProcSnapshot): ProcSnapshotFile {
  const versions = [...new Set([...file.versions, snap.postgres])].sort((a, b) => a - b);
  const byRow = new Map<string, Set<number>>();
  for (const s of expandSnapshots(file)) {
    if (s.postgres === snap.postgres) continue;
    for (const r of s.rows) {
      const k = JSON.stringify(r);
      (byRow.get(k) ?? byRow.set(k, new Set()).get(k)!).add(s.postgres);
    }
  }
  for (const r of snap.rows) {
    const k = JSON.stringify(r);
    (byRow.get(k) ?? byRow.set(k, new Set()).get(k)!).add(snap.postgres);
  }
  const rows = [...byRow.keys()].sort().map((k) => [...(JSON.parse(k) as ProcRow), versions.filter((v) => byRow.get(k)!.has(v)).join(' ')] as [...ProcRow, string]);
  return { versions, rows };
}

/** The stored file's text: one row per line. */
export function formatSnapshotFile(file: ProcSnapshotFile): string {
  return '{"versions":' + JSON.stringify(file.versions) + ',"rows":[\n' + file.rows.map((r) => JSON.stringify(r)).join(',\n') + '\n]}\n';
}
