/**
 * Result types of the SQL analyser (src/sql/analyze.ts). Kept in their own module so the redaction
 * planner and policy code can import them without the parser.
 */
import type { ColumnRef } from './lineage';

export type { ColumnRef } from './lineage';

/**
 * Why a statement was refused (sql-safety.md layers 1–3):
 * - `invalid_sql`: NUL byte, empty input, too long or too deeply nested, or a syntax error.
 * - `statement_not_allowed`: stacked statements, or any statement type / construct outside the
 *   read/write allow-list (DDL, transaction control, SET, COPY, DO, CALL, EXPLAIN ANALYZE,
 *   SELECT INTO, FOR UPDATE/SHARE, cursors, …).
 * - `function_not_allowed`: a deny-listed, volatile, unknown, or unresolvable function or operator.
 * - `unknown_relation`: a relation not in the source catalogue (system catalogues included).
 * - `unknown_column`: a column that no relation in scope has.
 * - `statement_too_complex`: over a complexity limit of the source or the analyser's work budget
 *   (issue 10, Build 3; src/sql/complexity.ts).
 */
export type RefusalCode = 'invalid_sql' | 'statement_not_allowed' | 'statement_too_complex' | 'function_not_allowed' | 'unknown_relation' | 'unknown_column';

/**
 * One output column of the statement (select list, or RETURNING of a write) and where its value
 * comes from.
 * - `sources`: every catalogue column the value is computed from (empty for constants).
 * - `passthrough`: the value is exactly one source column's value, unchanged (through aliases,
 *   sub-selects, CTEs, UNION branches of the same column, COLLATE, views). Through a view,
 *   `sources` lists the view column and every column it passes through: all hold the same value. Casts, functions, operators,
 *   CASE, aggregates and constructors are never passthrough.
 * - `opaque`: the value may embed whole rows of `opaqueRelations` (whole-row references such as
 *   `SELECT t FROM t`, `row_to_json(t)`, `array_agg(t.*)`), so column-by-column attribution is not
 *   provable; redaction must treat it as carrying every column of those relations.
 */
export interface OutputColumn {
  name: string;
  sources: ColumnRef[];
  passthrough: boolean;
  opaque: boolean;
  opaqueRelations: Array<{ schema: string; table: string }>;
  /**
   * Present (true) when the value may come from a view column whose lineage cannot be proven
   * (src/sql/views.ts): it may carry any column of the source. `opaque` is then true as well;
   * redaction masks it whenever the caller has any mask (`planRedaction`).
   */
  unprovable?: true;
}

/** A relation read by the statement and every column of it that the statement touches anywhere. */
export interface ReadAccess {
  schema: string;
  table: string;
  /** Catalogue order. Empty when only the relation's existence/row count is used (`count(*)`). */
  columns: string[];
}

/** A relation modified by the statement. */
export interface WriteAccess {
  schema: string;
  table: string;
  operation: 'insert' | 'update' | 'delete' | 'merge';
  /**
   * Columns whose stored values may change: INSERT's column list (all columns when omitted),
   * UPDATE/ON CONFLICT DO UPDATE SET targets, every column for DELETE, and the union of all
   * actions for MERGE (every column when it can DELETE).
   */
  columns: string[];
  /**
   * True when the affected rows are restricted by a condition: a WHERE clause (UPDATE, DELETE),
   * MERGE's join condition, or ON CONFLICT's conflict target. False for a bare UPDATE/DELETE.
   */
  hasWhere: boolean;
  /**
   * Only for an `update` of a view (UPDATE, ON CONFLICT DO UPDATE): the base-relation columns the
   * written view columns pass through unchanged (the view definition's lineage, src/sql/views.ts),
   * one per written column, in `columns` order. Absent when the target is not a view or any written
   * column is not provably one base column's value; then a write through the view counts as
   * writing every column of its bases (src/sql/referential-reach.ts).
   */
  baseColumns?: Array<{ schema: string; table: string; column: string }>;
}

/** A function the statement calls, resolved against the catalogue (first schema on the path). */
export interface FunctionUse {
  schema: string;
  name: string;
  volatility: string;
}

/**
 * A user function the statement may run (directly, or as the implementation of a user operator) and
 * what its body may read (task hfn; src/sql/function-reads.ts): every column of each relation in
 * `relations`. `opaque`: why its body cannot be analysed (agent-facing; it may then read anything:
 * refused unless the source trusts it). `operator`: "schema.name" of the operator it runs through.
 */
export interface FunctionRead {
  schema: string;
  name: string;
  operator?: string;
  relations: Array<{ schema: string; table: string }>;
  opaque?: string;
  securityDefiner?: true;
}

/** Successful analysis. */
export interface SqlAnalysisOk {
  ok: true;
  kind: 'read' | 'write';
  /** Top parse-tree node type, e.g. `SelectStmt`, `ExplainStmt`, `InsertStmt`. */
  statement: string;
  reads: ReadAccess[];
  writes: WriteAccess[];
  functions: FunctionUse[];
  outputs: OutputColumn[];
  /**
   * Columns used to choose, order, group or limit rows (WHERE, JOIN ON/USING, GROUP BY, HAVING,
   * ORDER BY, DISTINCT ON, LIMIT/OFFSET, EXISTS/IN sub-selects, …) rather than to compute an output
   * value. They are in `reads` but not in output lineage. A masked column used here can leak by
   * inference (`WHERE ssn LIKE '1%'`), so policy should refuse predicates on masked columns.
   * A subset of `nonOutputUses`, which is the list to check.
   */
  filterSources: ColumnRef[];
  /**
   * Every catalogue column whose value is used anywhere OTHER than as the entire expression of a
   * top-level output column that is passthrough (directly, or through sub-select / CTE / UNION ALL
   * passthrough chains). Includes `filterSources` and: arguments of functions and operators
   * (also functions in FROM/LATERAL, set-returning functions, WITH ORDINALITY), CASE, casts,
   * INTERSECT/EXCEPT/UNION branches (UNION ALL only when the column is not passthrough), DISTINCT,
   * window PARTITION BY/ORDER BY, EXISTS/IN/ANY/ALL/ARRAY sub-selects, GROUP BY, ORDER BY,
   * LIMIT/OFFSET, VALUES, aggregates other than a plain `count(col)` (see `countUses`), computed
   * RETURNING items, values written by INSERT/UPDATE/MERGE (also INSERT … SELECT), and whole-row
   * references anywhere but as an entire top-level select-list item (expanded to every column).
   * Conservative: when unsure, a column is included. A masked column here can be inferred from the
   * result (`EXISTS (SELECT c.phone INTERSECT SELECT '+1…')`), so policy refuses such statements.
   */
  nonOutputUses: ColumnRef[];
  /**
   * Columns counted by a plain `count(col)` (no DISTINCT, ORDER BY or VARIADIC; FILTER and OVER
   * clauses are non-output uses of their own columns). The count only reveals how many values are
   * not null; the result is still redacted like any value derived from the column.
   */
  countUses: ColumnRef[];
  /**
   * Columns behind the view and materialized-view columns the statement uses (src/sql/views.ts):
   * base-table columns and nested-view columns whose values feed them by value lineage (all
   * columns of a relation whose whole rows a view column embeds). They are NOT in `reads`: reading a
   * view needs a grant on the view only, but an explicit deny on any of these columns (or their
   * tables) refuses the statement (pipeline step 3). The view's own filters, joins and grouping are
   * the operator's definition and are not listed.
   */
  viewSources: ColumnRef[];
  /**
   * True when a used view column has unprovable lineage (no recorded definition, a definition that
   * does not parse or is refused, an operator or an opaque function (function-reads.ts) outside `pg_catalog`, a cycle): it may carry any
   * column, so a caller with any read deny on the source is refused (fail closed).
   */
  viewUnprovable: boolean;
  /**
   * True when a value with unprovable lineage is used other than as an output (it would appear in
   * `nonOutputUses`/`filterSources`): a caller with any mask is refused, as for a masked column.
   */
  unprovableUses: boolean;
  /** False when any volatile or clock/session-dependent function or SQL value function is used, or the statement writes. */
  cacheable: boolean;
  /**
   * True when an operator implemented outside `pg_catalog` may run: its function's body is not
   * analysed and may read any relation (row rules refuse it, issue 27). Absent means false.
   */
  userOperators?: boolean;
  /**
   * The user functions the statement may run and what each may read (task hfn; `FunctionRead`),
   * in call order, each once. Absent when none (so stored analyses stay as they were). Pipeline
   * steps 3 and 4 check every column they may read; the audit records their relations.
   */
  functionReads?: FunctionRead[];
  /**
   * Every user function (outside `pg_catalog`/`information_schema`) the analysis assumed the
   * statement may run, each once, sorted by `schema.name`: those of `functionReads` with everything
   * they call and the code attached to their types, and those the views it reads call (task hf5).
   * Each name stands for all its overloads. The read checks on the server, right before the
   * statement, that their definitions are still the scanned ones (src/sources/postgres/function-guard.ts);
   * a change refuses the statement `catalog_stale`. Absent when none.
   */
  userFunctions?: Array<{ schema: string; name: string }>;
  /**
   * Relations whose row shape the statement depends on beyond the columns it names (task hrt42,
   * red team rt42 G2): whole-row values (`SELECT d`, `row_to_json(d)`, `d::text`, a row passed to a
   * function), the row type used as a type (`NULL::dept`) and `*` / `t.*` expansions, each once,
   * sorted by `schema.name`. The server builds such values from the relation's live columns, so a
   * column added since the scan would ride in them: the read checks on the server, right before the
   * statement, that each one's columns (names and types, in order) are still the scanned ones
   * (src/sources/postgres/shape-guard.ts); a change refuses the statement `catalog_stale`. Absent when none.
   */
  rowShapes?: Array<{ schema: string; name: string }>;
  /**
   * The types outside `pg_catalog` the statement involves (task hcast; red team rt43b F1, F3):
   * PostgreSQL finds a cast (pg_cast, by source and target oid) and a domain's constraints
   * (pg_constraint) by the type's oid, not by a name, so one created after the scan (by the type's
   * owner) would run unseen. `oids`: the types of the columns read or written (for a view, of every
   * column of it and of the relations behind it), of the columns of the relations the user functions
   * it may run read, those functions' parameter, result and body types (`CatalogRoutine.depends.types`),
   * each with the types it is built on (domain bases, array elements; `SourceCatalog.columnTypes`),
   * built-in ones (oid < 16384) left out, sorted. `names` (sorted by schema, then name): type names
   * the statement or a string body it may run names (casts, `CAST`, column definition lists), each
   * with every schema outside `pg_catalog` it may resolve from (unqualified: the path's schemas before
   * the first system schema holding a type of that name), and the row types of `rowShapes`. The read
   * checks on the server, right before the statement, that the casts from and to each (and, by name,
   * its domain bases and array elements) and its domain constraints are the scanned ones
   * (src/sources/postgres/type-guard.ts, `SourceCatalog.castVersions`); a difference refuses it
   * `catalog_stale`. Absent when none: no check is sent.
   */
  typeUses?: { oids: number[]; names: Array<{ schema: string; name: string }> };
  /**
   * The function and operator names PostgreSQL looks up when it runs the statement (tasks hg1,
   * hg2), each once: every called function name and every operator name, implicit ones included
   * (`=` of IN, simple CASE, NULLIF, IS DISTINCT FROM and JOIN USING; `>=`/`<=` of BETWEEN; `~~` of
   * LIKE), built-ins included, but those qualified with `pg_catalog`. `functions` and `operators`
   * (sorted): the names looked up through the reader's search path (unqualified);
   * `qualifiedFunctions` and `qualifiedOperators` (sorted by schema, then name; present only when
   * not empty): names looked up in one schema, qualified in the statement (`s.f(…)`,
   * `OPERATOR(s.=)`) or looked up by the string body of a user function the statement may run
   * (each schema of that body's lookup path). A function or operator of such a name created,
   * renamed or moved after the scan into a schema PostgreSQL resolves it from may win its
   * resolution (an exact argument-type match beats a built-in reached by coercion; a schema
   * earlier on the path hides a later one), so the read checks on the server, right before the
   * statement, that the functions and operators of every name in those schemas (the path's, or
   * the named one) are still exactly the scanned ones (src/sources/postgres/function-guard.ts); a
   * difference refuses the statement `catalog_stale`. Absent when the statement looks up no name.
   */
  resolvedNames?: {
    functions: string[];
    operators: string[];
    qualifiedFunctions?: Array<{ schema: string; name: string }>;
    qualifiedOperators?: Array<{ schema: string; name: string }>;
  };
  /**
   * libpg-query fingerprint (16 hex digits; constants, comments and layout ignored). Computed on
   * first access (it costs a second parse), then cached; enumerable, so it serialises normally.
   */
  fingerprint: string;
  /** Highest `$n` parameter number used (0 when none). */
  paramCount: number;
}

/** Refusal: `message` names the construct and is safe to show to agents (no echo of the input). */
export interface SqlRefusal {
  ok: false;
  code: RefusalCode;
  message: string;
}

export type SqlAnalysis = SqlAnalysisOk | SqlRefusal;
