/**
 * Shapes of a source's catalogue snapshot, as produced by `scanCatalog` (src/sources/postgres/catalog.ts)
 * and consumed by the SQL analyser (src/sql/analyze.ts).
 *
 * The analyser only lets a statement touch what this snapshot names (sql-safety.md, layers 1–3):
 * relations outside `relations` are refused as `unknown_relation`, functions outside `functions`
 * as `function_not_allowed`. A stale or truncated snapshot therefore fails closed.
 *
 * Names are stored exactly as PostgreSQL stores them (unquoted identifiers folded to lower case
 * by the server when the object was created; quoted identifiers verbatim).
 */

/** Kinds of relation the gateway can expose; maps from `pg_class.relkind` r/v/m/f/p. */
export type RelationKind = 'table' | 'view' | 'materialized_view' | 'foreign_table' | 'partitioned_table';

/** One relation of a non-system schema with its user-visible columns in `attnum` order. */
export interface CatalogRelation {
  schema: string;
  name: string;
  kind: RelationKind;
  /** Columns in physical order (dropped and system columns excluded); `dataType` is `format_type()`. */
  columns: CatalogColumn[];
  /**
   * Views and materialized views only: the defining SELECT as `pg_get_viewdef(oid)` prints it,
   * with names qualified where the scanning role's search path would not find them. The analyser
   * parses it with the same parser and expands a reference to the view into the lineage of its
   * definition (src/sql/views.ts). Absent (catalogue scanned before this field existed, or not a
   * view): the view's columns have unprovable lineage and fail closed.
   */
  definition?: string;
  /**
   * Views and materialized views (issue 27, docs/row-rules.md): what the server records the stored
   * query depends on. Absent in snapshots scanned before it existed (row rules then refuse the view).
   */
  view?: ViewFacts;
  /** Primary and unique key constraints (absent in snapshots taken before keys were scanned). */
  keys?: CatalogKey[];
  /**
   * True when the relation is a partition (`pg_class.relispartition`): it is then a `table`, a
   * `partitioned_table` (a sub-partitioned level) or a `foreign_table` whose only parent is the
   * partitioned table it is attached to. Absent in snapshots taken before the hierarchy was scanned.
   */
  partition?: boolean;
  /**
   * Direct parents from `pg_inherits` (partition parent or inheritance parents, in `inhseqno`
   * order). Absent or empty: no parent. Issue 22 item 1.
   */
  parents?: RelationName[];
  /**
   * Every ancestor (parents, their parents, …: the whole partition or inheritance chain up to the
   * root, nearest first, each once), recorded by the scan so that a parent cut off by truncation
   * still governs its descendants. Rules written on any ancestor apply to this relation
   * (src/sql/hierarchy.ts). Absent: computed from `parents` of catalogued relations.
   */
  ancestors?: RelationName[];
  /**
   * Foreign keys that reference this relation with a referential action that writes the
   * referencing rows (`ON DELETE`/`ON UPDATE` `CASCADE`, `SET NULL` or `SET DEFAULT`): from
   * `pg_constraint` (`contype = 'f'`, `confrelid` = this relation), one entry per constraint row, so a
   * partition's cloned constraint is listed with the partition as its referencing relation. Keys
   * whose actions are both NO ACTION/RESTRICT are not listed (they write nothing). Issue 27 (rt27w
   * finding B): PostgreSQL runs these actions without the caller's row rules. Absent in snapshots
   * scanned before it existed: unknown (a row-ruled caller's write is then refused).
   */
  referencedBy?: ReferencingKey[];
  /**
   * True when the relation has a user trigger (`pg_trigger`, NOT `tgisinternal`: any event, row or
   * statement level, constraint triggers included) or a user rewrite rule (`pg_rewrite` other than a
   * view's `_RETURN`): code that runs on a write without the caller's row rules. Issue 27. Absent
   * in snapshots scanned before it existed: unknown.
   */
  writeHooks?: { triggers: boolean; rules: boolean };
  /**
   * Task hhook: the fingerprint of the code a write of this relation runs when scanned (its
   * triggers and their functions, rewrite rules, row-level security and policies, defaults and
   * generated expressions, constraints, indexes, children, columns' types and the domains they
   * reach; src/sources/postgres/hook-guard.ts writeHooksSql). An approved write compares it with the
   * server's right before its statement, for every relation it touches. Opaque. Absent in snapshots
   * scanned before it existed: such a write fails `catalog_stale` and the source is rescanned.
   */
  hookVersion?: string;
}

/** A referential action of a foreign key, from `pg_constraint.confdeltype`/`confupdtype`. */
export type ReferentialAction = 'no_action' | 'restrict' | 'cascade' | 'set_null' | 'set_default';

/**
 * A foreign key referencing a relation (see `CatalogRelation.referencedBy`): the referencing
 * relation, its key `columns` (conkey, in key order; SET NULL/SET DEFAULT write these, and a
 * cascaded update too), the referenced relation's `referencedColumns` (confkey; ON UPDATE acts only
 * when one of them changes), and the actions on delete and update of a referenced row.
 */
export interface ReferencingKey extends RelationName {
  columns: string[];
  referencedColumns: string[];
  onDelete: ReferentialAction;
  onUpdate: ReferentialAction;
  /**
   * True when the key is a partition's clone of a key on the referenced partitioned table
   * (`pg_constraint.conparentid` set); false or absent (older snapshots): declared on this relation.
   * A row moved out of a partition by an UPDATE of an ancestor fires the declared keys' ON DELETE
   * actions, not the clones' (red team rtfk finding 7, src/sql/referential-reach.ts).
   */
  cloned?: boolean;
}

/**
 * A view's or materialized view's dependencies as the server records them (`pg_depend` rows of its
 * `_RETURN` rule in `pg_rewrite`): `reads`, the relations its query names (one level: a view
 * named there has its own `view`); `userCode`, "schema.name" of each function or operator outside
 * `pg_catalog`/`information_schema` it calls and each type whose input runs user code (their bodies
 * may read any relation; a built-in that runs SQL text has no dependency record: view-lineage.ts
 * finds it in `definition`, red team rt27z Z2); and its options `security_barrier` and `security_invoker` (false when unset).
 */
export interface ViewFacts {
  reads: Array<RelationName & { kind: RelationKind }>;
  userCode: string[];
  securityBarrier: boolean;
  securityInvoker: boolean;
}

/** A relation named by schema and name (as PostgreSQL stores them). */
export interface RelationName {
  schema: string;
  name: string;
}

/**
 * A column. The optional fields come from the scan (snapshots taken before they existed lack them):
 * `nullable` is NOT attnotnull; `default` is the default expression as `pg_get_expr` prints it
 * (e.g. "nextval('playlist_playlist_id_seq'::regclass)"), null when none; `identity` is the
 * identity kind (GENERATED ALWAYS / BY DEFAULT AS IDENTITY), null when not an identity column;
 * `generated` is true for a stored generated column; `generatedFrom` names the columns of the same
 * relation its generation expression reads (from pg_depend; absent in snapshots scanned before red
 * team rt42, when the analyser takes every other column of the relation as its input, failing closed).
 */
export interface CatalogColumn {
  name: string;
  dataType: string;
  /** The declared type's `pg_type` oid (`atttypid`); its description is in `SourceCatalog.columnTypes` (issue 23). */
  typeOid?: number;
  nullable?: boolean;
  default?: string | null;
  identity?: 'always' | 'by_default' | null;
  generated?: boolean;
  generatedFrom?: string[];
}

/** A primary or unique key constraint: its columns in key order. */
export interface CatalogKey {
  kind: 'primary' | 'unique';
  columns: string[];
}

/** `pg_proc.provolatile` as a word. */
export type Volatility = 'immutable' | 'stable' | 'volatile';

/**
 * A function name in one schema. Overloads are folded into one entry (the analyser does not
 * resolve argument types), so `volatility` is the MOST volatile of the overloads and `returnsSet`
 * is true when any overload returns a set.
 */
export interface CatalogFunction {
  schema: string;
  name: string;
  volatility: Volatility;
  returnsSet: boolean;
  /**
   * Column names of the function's row result when it is used in FROM (OUT/TABLE parameters or a
   * composite return type), when every overload agrees. Absent for scalar results; the analyser
   * then exposes one column named after the alias or the function (as PostgreSQL does).
   */
  outColumns?: string[];
  /**
   * Task hs: the relations and stand-alone composite types (`pg_class` rows, relkind `c`) whose row
   * some overload returns (`RETURNS [SETOF] t`, a domain over such a type, or one OUT parameter of
   * it), outside `pg_catalog`/`information_schema`, sorted. PostgreSQL builds such a result from the
   * type's live columns, so a statement calling the function depends on that row shape
   * (`SqlAnalysisOk.rowShapes`) and, for a relation, reads its every column. Absent: none (or a
   * snapshot scanned before it existed, which lacks `SourceCatalog.compositeTypes` and is stale).
   */
  resultRowTypes?: RelationName[];
}

/**
 * One overload of a function outside `pg_catalog`/`information_schema` as the scan records it
 * (task hfn; src/sql/function-reads.ts decides what a call may read from it): `language`
 * (`pg_language.lanname`), `securityDefiner` (`prosecdef`), `config` (`proconfig`, e.g.
 * `["search_path=public, pg_temp"]`, null when none), `owner` (the owner's role name, what `$user`
 * means inside SECURITY DEFINER), and the body: `source` (`prosrc`) for LANGUAGE sql with a string
 * body; `depends` for every LANGUAGE sql function, from `pg_depend`: the relations (tables, views,
 * …) and functions (called directly, and the functions behind the operators it uses; every schema)
 * its SQL-standard body (BEGIN ATOMIC / RETURN: `prosqlbody`) and its parameter defaults reference,
 * and whether it uses a type whose input runs user code (body, parameter or result type; red team
 * rt41b: a string body's `depends` holds its defaults and types only). Neither for other languages.
 */
export interface CatalogRoutine {
  schema: string;
  name: string;
  language: string;
  securityDefiner: boolean;
  config: string[] | null;
  owner: string;
  /**
   * The pg_proc row's version when scanned, `oid:xmin` (task hf5; src/sources/postgres/catalog.ts
   * ROUTINE_VERSION_SQL): a replaced, altered or recreated function has another. Absent in older
   * snapshots and hand-built catalogues: a statement running the function is then refused
   * `catalog_stale` until a rescan.
   */
  version?: string;
  source?: string;
  depends?: {
    relations: RelationName[];
    functions: RelationName[];
    unsafeTypes: boolean;
    /** The `pg_type` oids it depends on (parameter, result and body types; task hcast: their attached code counts). Absent in older snapshots. */
    types?: number[];
  };
}

/** A stand-alone composite type with its attributes (see `SourceCatalog.compositeTypes`). */
export interface CatalogCompositeType {
  schema: string;
  name: string;
  columns: CatalogColumn[];
}

/** An operator name in one schema; `volatility` is the most volatile of the implementing functions. */
export interface CatalogOperator {
  schema: string;
  name: string;
  volatility: Volatility;
}

/**
 * A snapshot of what one PostgreSQL source exposes to the gateway's role.
 * `searchPath` is the role's effective search path (existing schemas only, `pg_catalog`
 * included only where it was written explicitly; the analyser searches it first otherwise,
 * as PostgreSQL does). `truncated` is true when `maxRelations` cut the relation list.
 */
export interface SourceCatalog {
  relations: CatalogRelation[];
  functions: CatalogFunction[];
  searchPath: string[];
  scannedAt: string;
  truncated: boolean;
  /**
   * The server's `server_version_num` when it was scanned (e.g. 150004 for 15.4, 180004 for 18.4).
   * Row rules (issue 27) let a MERGE into a row-ruled table run only on PostgreSQL 17 or later
   * (MERGE on a check-option view). Absent in snapshots scanned before it existed and in hand-built
   * catalogues: treated as older than 17 (such a MERGE is refused).
   */
  serverVersionNum?: number;
  /**
   * Every function outside `pg_catalog`/`information_schema`, one entry per overload, with what
   * InterLock needs to decide what it reads (task hfn; `CatalogRoutine`). Absent in snapshots scanned
   * before it existed and in hand-built catalogues: every user function is then opaque.
   */
  routines?: CatalogRoutine[];
  /**
   * Operators outside `pg_catalog` with their implementing function: `[schema, name, oprleft,
   * oprright, function schema, function name, version]` (the function null for a shell operator;
   * `version` the pg_operator row's `oid:xmin` when scanned, task hg1: the read checks that the
   * operators of every name it looks up are still these; absent in older snapshots, whose reads
   * with an operator are then refused `catalog_stale` until a rescan). Absent in older snapshots: a
   * user operator's reads are then unknown (opaque).
   */
  operatorCode?: Array<[string, string, number, number, string | null, string | null, string?]>;
  /**
   * User code attached to types (task hcast; src/sql/type-code.ts): `[type oid, type schema, type
   * name, function schema, function name, always]`, one row per type and user function run by a
   * cast WITH FUNCTION from or to the type, or as a support function (pg_amproc) of an operator
   * class or family of any access method for it (btree, hash, gist, gin, brin, spgist, …; task
   * hf5), repeated for every type built on it (domain, array, range, multirange, composite field).
   * `always` marks a user cast between two `pg_catalog` types (it may run in any statement). Absent
   * in older snapshots and hand-built catalogues: no attached code is known.
   */
  typeCode?: Array<[number, string, string, string, string, boolean]>;
  /**
   * Task hcast (red team rt43b F1, F3): the row versions of the code PostgreSQL finds by a type's
   * oid, not by a name: `[type oid, versions]` for every type outside `pg_catalog` (oid ≥ 16384) that
   * is the source or target of a pg_cast row or the domain of a pg_constraint row (`contypid`), sorted
   * by oid. `versions` lists `c<oid>:<xmin>` of each such cast and `d<oid>:<xmin>` of each such
   * constraint, sorted (byte order), joined by `,`. The type guard
   * (src/sources/postgres/type-guard.ts) compares the live rows of the types a statement involves
   * (`SqlAnalysisOk.typeUses`) with these before it runs. A type absent here had none. Always present
   * in a scan since task hcast (possibly empty); a scanned snapshot without it is stale
   * (`lacksTypeFacts`).
   */
  castVersions?: Array<[number, string]>;
  /**
   * Task hs: every stand-alone composite type (`CREATE TYPE … AS (…)`, `pg_class.relkind` c) outside
   * `pg_catalog`/`information_schema`, with its attributes in `attnum` order (name and `format_type`
   * only): what the shape guard (src/sources/postgres/shape-guard.ts) expects of a function result
   * of that type. Always present in a scan since task hs (possibly empty); a scanned snapshot without
   * it predates `CatalogFunction.resultRowTypes` and is treated as stale (`lacksTypeFacts`).
   */
  compositeTypes?: CatalogCompositeType[];
  /** The scanning (reader) role's name: what `$user` means in a pinned search_path outside SECURITY DEFINER. */
  readerRole?: string;
  /**
   * Operators with the volatility of their implementing function. When present the analyser
   * refuses volatile or unknown operators; when absent (hand-built catalogues) operators are not
   * checked.
   */
  operators?: CatalogOperator[];
  /**
   * Names of relations in `pg_catalog`. An unqualified name is looked up in `pg_catalog` before
   * the search path, so `SELECT * FROM pg_class` must never be mistaken for a same-named table in
   * `public`; the analyser refuses such names as `unknown_relation`.
   */
  systemRelations?: string[];
  /**
   * Types whose input runs user code: domains with CHECK constraints (directly or via a base
   * domain), base types with a volatile input function, and composite types with a field of such a
   * domain. A cast to one of them (`'1'::my_domain`) is refused as `function_not_allowed`.
   */
  unsafeTypes?: Array<{ schema: string; name: string }>;
  /**
   * Every type of every schema (`pg_catalog` included) that is not a relation's row type: base,
   * enum, domain, range, multirange, pseudo- and stand-alone composite types (issue 12, Build 4).
   * When present, a type name that is neither here nor a catalogue relation is refused as
   * `unknown_relation`, so a cast to a missing type answers exactly like a cast to an ungranted
   * relation's row type. When absent (older snapshots, hand-built catalogues) type names are not
   * checked.
   */
  types?: Array<{ schema: string; name: string }>;
  /**
   * What PostgreSQL's operator lookup needs (issue 22, item 5; src/sql/operators.ts). When present,
   * each operator use is resolved by its operand types and judged by the operator chosen; when
   * absent (older snapshots, hand-built catalogues) operators are judged by name (`operators`).
   */
  operatorResolution?: OperatorResolution;
  /**
   * The types of the catalogued columns, with every type they are built on (a domain's base types,
   * an array's element type, recursively), for describe_source (issue 23; src/sql/column-types.ts).
   * Absent in snapshots scanned before issue 23.
   */
  columnTypes?: CatalogType[];
}

/**
 * One `pg_type` row as the scan records it for describe_source: `oid`; `typtype` ('b' base, 'd'
 * domain, 'e' enum, 'c' composite, 'r' range, 'm' multirange, 'p' pseudo); `category`
 * (`typcategory`, 'A' for arrays); `base` (`typbasetype`, 0 unless a domain); `element`
 * (`typelem`, 0 when none); `name` (`format_type(oid, NULL)`); `labels` (an enum's labels in sort
 * order); `subtype` (a range's or multirange's subtype, as format_type).
 */
export interface CatalogType {
  oid: number;
  typtype: string;
  category: string;
  base: number;
  element: number;
  name: string;
  labels?: string[];
  subtype?: string;
}

/**
 * Catalogue rows for operator resolution (PostgreSQL docs §10.2), as compact tuples; type ids are
 * `pg_type` oids (0 = none: the left operand of a prefix operator).
 * - `operators`: `[schema, name, oprleft, oprright, oprresult, volatility of oprcode ('i'|'s'|'v';
 *   'v' for a shell operator)]`, every schema.
 * - `types`: `[oid, schema, typname, typtype, typcategory, typispreferred, typbasetype, typelem,
 *   format_type(oid, NULL), format_type(oid, -1)]` for every type except relation row types and
 *   their arrays (both spellings of the name match `CatalogColumn.dataType` once type modifiers are
 *   removed).
 * - `implicitCasts`: `[castsource, casttarget]` of `pg_cast` rows with `castcontext = 'i'`.
 */
export interface OperatorResolution {
  operators: Array<[string, string, number, number, number, string]>;
  types: Array<[number, string, string, string, string, boolean, number, number, string, string]>;
  implicitCasts: Array<[number, number]>;
}
