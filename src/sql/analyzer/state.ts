/**
 * state.ts — the walk's state (PostgreSQL: ParseState in parse_node.h, make_parsestate): the
 * per-level scope types, the one mutable statement-wide `WalkState` passed first to every function
 * of the walker, the work budget and nesting depth, and the doors back up the family graph.
 *
 * Two kinds of state, as in PostgreSQL but without its save-flip-restore: per query level, the
 * immutable `Ctx` (the FROM items visible at this level and outward, `Scope.parent`; the CTE names,
 * `CteEnv`; the named windows) is built by the caller and passed alongside; statement-wide, the
 * `WalkState` collects the findings (reads, writes, functions, filters, non-output uses, counts,
 * view sources, parameters, cacheability) that `analyzeSql` (../analyze.ts) turns into the result.
 */
import { guardsTypes } from '../type-uses';
import { type ColumnRef, type Lin, lineageWork } from '../lineage';
import { OperatorResolver } from '../operators';
import type { PreparedCatalog, PreparedRelation } from '../prepared-catalog';
import type { FunctionRead, FunctionUse, WriteAccess } from '../types';
import { type N, Refusal } from './nodes';

/** Nesting depth of the recursive dispatchers (`query`, `fromItem`, `ex`, grouping sets) before a statement is refused. */
const MAX_DEPTH = 1000;

/**
 * Total work allowed for one analysis, in steps: parse-tree nodes visited, column lists built or
 * scanned, lineage map entries visited or copied (`lineageWork`). The walker visits every node
 * once (CTE bodies, sub-selects and recursive terms are analysed once and reused), so legitimate
 * statements use a few thousand steps (a 40-way NATURAL JOIN: ~7 000); the budget is a backstop
 * that bounds the synchronous work whatever the input's shape (5–25 ms warm on the development
 * machine). Above it the statement is refused (`statement_too_complex`, "statement too complex to
 * analyse").
 */
export const WORK_BUDGET = 100_000;

// ---------------------------------------------------------------------------------------------
// Scopes (per query level, immutable)
// ---------------------------------------------------------------------------------------------
/** One column of a catalogue relation read through a FROM item. */
export interface ReadRef {
  readonly rel: PreparedRelation;
  readonly column: string;
}
/** A column visible through a FROM item: its name there, its lineage, and the base columns it reads. */
export interface Col {
  readonly name: string;
  readonly lin: Lin;
  readonly reads: readonly ReadRef[] | null;
  /** A column of a view or materialized view: using it records its lineage in `viewSources` (views.ts). */
  readonly view?: true;
}
/** A FROM item (namespace entry), mirroring PostgreSQL's ParseNamespaceItem visibility flags. */
export interface NsItem {
  readonly refname: string | null;
  /** Schema of an unaliased base relation (for `schema.table.column`). */
  readonly schema: string | null;
  readonly cols: readonly Col[];
  readonly relVisible: boolean;
  readonly colsVisible: boolean;
  readonly base: PreparedRelation | null;
}
/** The FROM items of one query level; `parent` is the enclosing level (outer references). */
export interface Scope {
  readonly parent: Scope | null;
  readonly items: readonly NsItem[];
}
/** One WITH item; `cols` is null while a recursive item's own body is being walked before its first term. */
export interface CteDef {
  readonly name: string;
  cols: Col[] | null;
}
/** The WITH items visible at a level (`parent`: those of enclosing levels). */
export interface CteEnv {
  readonly parent: CteEnv | null;
  readonly map: Map<string, CteDef>;
}
/** Per-level context of an expression: FROM items, CTE names, named windows (`WINDOW w AS …`). */
export interface Ctx {
  readonly scope: Scope;
  readonly ctes: CteEnv | null;
  readonly windows: Map<string, Lin> | null;
}
/** One output column of a query level: its name and lineage. */
export interface OutCol {
  readonly name: string;
  readonly lin: Lin;
}
/** The output columns of a query level. */
export interface QueryOut {
  readonly cols: OutCol[];
}

/** The empty FROM list (VALUES, constant contexts). */
export const EMPTY_SCOPE_ITEMS: readonly NsItem[] = [];

// ---------------------------------------------------------------------------------------------
// The statement-wide state
// ---------------------------------------------------------------------------------------------
/**
 * The walk's entry points that recurse back up the family graph. PostgreSQL declares its
 * `transform*` functions in headers so files call each other freely; here the files form a strict
 * import order (no import circle, test/unit/architecture/layers.test.ts) and the few calls that go
 * back up pass through these doors, which `stmt.ts` fills (`createWalkState`).
 */
export interface Doors {
  /** `transformExpr` (expr.ts `ex`): lineage of an expression, for the families below expr.ts (clause, agg, func, json). */
  readonly expr: (st: WalkState, node: N | undefined, ctx: Ctx) => Lin;
  /** `parse_sub_analyze` (stmt.ts `query`): a wrapped query node at a new query level under `parent`. */
  readonly query: (st: WalkState, node: N, parent: Scope | null, ctes: CteEnv | null) => QueryOut;
  /** `transformTopLevelStmt` (stmt.ts `top`): a whole statement, used to walk a view's definition with a fresh state. */
  readonly top: (st: WalkState, type: string, body: N) => QueryOut;
}

/**
 * Mutable state of one analysis (one per statement; a view's definition gets its own). Findings
 * are read by `analyzeSql`; the rest is bookkeeping of the walk. Which family writes what:
 * uses.ts records reads, filters, non-output and count uses, view sources; dml.ts writes; func.ts
 * functions; expr.ts parameters; several files clear `cacheable`.
 */
export interface WalkState {
  readonly cat: PreparedCatalog;
  /**
   * This state walks a view's definition (views.ts), where a call of a user function (outside
   * pg_catalog, or shadowable by one outside it) yields a value carrying every column its body may
   * read (function-reads.ts), or of unprovable lineage (`LIN_ANY`) when that body cannot be analysed.
   */
  readonly viewBody: boolean;
  readonly doors: Doors;
  /** Operators resolved by operand types (issue 22, item 5); null when the catalogue lacks the rows (then judged by name). */
  readonly ops: OperatorResolver | null;
  readonly reads: Map<string, { rel: PreparedRelation; cols: Set<string> }>;
  readonly writes: WriteAccess[];
  readonly functions: Map<string, FunctionUse>;
  /** User functions that may run and what they read (see `SqlAnalysisOk.functionReads`), keyed by function and operator. */
  readonly functionReads: Map<string, FunctionRead>;
  /** Every user function the statement may run, keyed by `schema\u0000name` (see `SqlAnalysisOk.userFunctions`). */
  readonly userFunctions: Map<string, { schema: string; name: string }>;
  /** Relations whose whole row shape the statement depends on, keyed by `schema\u0000name` (see `SqlAnalysisOk.rowShapes`). */
  readonly rowShapes: Map<string, { schema: string; name: string }>;
  /** Types outside `pg_catalog` the statement involves, by oid (see `SqlAnalysisOk.typeUses`). */
  readonly typeOids: Set<number>;
  /** Types the statement names, each `schema\u0000name` with every schema it may resolve from (see `SqlAnalysisOk.typeUses`). */
  readonly typeNames: Map<string, { schema: string; name: string }>;
  /** The catalogue is a scan whose statements the type guard checks (type-uses.ts `guardsTypes`): only then are types recorded. */
  readonly guardsTypes: boolean;
  /** Function and operator names PostgreSQL looks up for the statement through the search path (see `SqlAnalysisOk.resolvedNames`). */
  readonly functionNames: Set<string>;
  readonly operatorNames: Set<string>;
  /** Names looked up in one schema (qualified in the statement, or in a user function's string body), keyed by `schema\u0000name` (`resolvedNames.qualifiedFunctions`/`qualifiedOperators`). */
  readonly qualifiedFunctionNames: Map<string, { schema: string; name: string }>;
  readonly qualifiedOperatorNames: Map<string, { schema: string; name: string }>;
  readonly filter: Map<string, ColumnRef>;
  /** Columns whose values are used other than as a top-level passthrough output (see `SqlAnalysisOk.nonOutputUses`). */
  readonly nonOutput: Map<string, ColumnRef>;
  /** Columns counted by a plain `count(col)` (see `SqlAnalysisOk.countUses`). */
  readonly countUses: Map<string, ColumnRef>;
  /** Columns (of base relations and nested views) whose values feed the view columns the statement uses (see `SqlAnalysisOk.viewSources`). */
  readonly viewSources: Map<string, ColumnRef>;
  /** True when a used view column has unprovable lineage (see `SqlAnalysisOk.viewUnprovable`). */
  viewUnprovable: boolean;
  cacheable: boolean;
  /** True when an operator outside pg_catalog may run (its function's body is not analysed; row rules refuse it, issue 27). */
  userOperator: boolean;
  maxParam: number;
  hasWrite: boolean;
  depth: number;
  /** Output name of each sub-select used as a value (`SELECT (SELECT email …)` is named `email`). */
  readonly sublinkNames: WeakMap<object, string>;
  /**
   * While a per-row sub-select (a sublink, a LATERAL sub-select) is walked: the sources of every
   * value it consumes (filters, join conditions, ORDER BY, LIMIT, computations), innermost only;
   * see `perRowQuery` (uses.ts).
   */
  perRowReads: Map<string, ColumnRef> | null;
  /** LATERAL sub-selects being walked: the query levels outside each, and whether it referenced one. */
  readonly lateralFrames: Array<{ readonly outer: ReadonlySet<Scope>; correlated: boolean }>;
  /** Work done so far (see `WORK_BUDGET`); lineage work is read from `lineageWork`. */
  work: number;
  readonly lineageStart: number;
  readonly budget: number;
  /** Numbers the WITH RECURSIVE items (placeholders of each item's columns). */
  recSeq: number;
  /** Body of the top-level statement: its select list / RETURNING is the statement's output. */
  topBody: N | null;
}

/** A fresh state over `cat` (use `createWalkState` of stmt.ts, which supplies the doors). */
export function newWalkState(cat: PreparedCatalog, budget: number, viewBody: boolean, doors: Doors): WalkState {
  const lineageStart = lineageWork.n;
  return {
    cat,
    viewBody,
    doors,
    ops: OperatorResolver.for(cat),
    reads: new Map(),
    writes: [],
    functions: new Map(),
    functionReads: new Map(),
    userFunctions: new Map(),
    rowShapes: new Map(),
    typeOids: new Set(),
    typeNames: new Map(),
    guardsTypes: guardsTypes(cat.source),
    functionNames: new Set(),
    operatorNames: new Set(),
    qualifiedFunctionNames: new Map(),
    qualifiedOperatorNames: new Map(),
    filter: new Map(),
    nonOutput: new Map(),
    countUses: new Map(),
    viewSources: new Map(),
    viewUnprovable: false,
    cacheable: true,
    userOperator: false,
    maxParam: 0,
    hasWrite: false,
    depth: 0,
    sublinkNames: new WeakMap(),
    perRowReads: null,
    lateralFrames: [],
    work: 0,
    lineageStart,
    budget,
    recSeq: 0,
    topBody: null,
  };
}

/** Steps used so far (walker steps plus lineage work); read it before another analysis starts. */
export function workUsed(st: WalkState): number {
  return st.work + (lineageWork.n - st.lineageStart);
}

/** Adds `n` steps of work; refuses the statement above the budget. */
export function charge(st: WalkState, n: number): void {
  st.work += n;
  if (st.work + (lineageWork.n - st.lineageStart) > st.budget) {
    throw new Refusal('statement_too_complex', 'statement too complex to analyse (work budget exceeded); simplify it or split it into several statements');
  }
}

/** Enters one level of a recursive dispatcher: depth check (PostgreSQL's check_stack_depth) and one step of work. */
export function enter(st: WalkState): void {
  if (++st.depth > MAX_DEPTH) throw new Refusal('invalid_sql', 'statement nests too deeply');
  charge(st, 1);
}

/** Leaves the level `enter` entered. */
export function leave(st: WalkState): void {
  st.depth--;
}
