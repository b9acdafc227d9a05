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
