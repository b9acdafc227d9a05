/**
 * The parse-tree walker behind `analyzeSql` (sql-safety.md layers 1–3 and class 6).
 *
 * Design: one semantic pass over the raw PostgreSQL parse tree that, at the same time,
 * - classifies (only SELECT/VALUES/TABLE, INSERT, UPDATE, DELETE, MERGE and EXPLAIN without ANALYZE
 *   are accepted; every other statement and construct is refused),
 * - resolves relations (CTE scopes first, then the catalogue through the search path), columns
 *   (FROM items of the current query level, then outer levels), functions and operators,
 * - records every column touched (reads), write targets, functions, filters, parameters, and
 *   every value used other than as a top-level passthrough output (non-output uses, counts),
 * - computes each output column's lineage.
 *
 * Every node is walked once: CTE bodies and sub-selects are analysed once and their columns reused,
 * and a WITH RECURSIVE term is walked once with placeholders for its own columns (the fixpoint is
 * solved on lineage values). A work budget bounds whatever remains (`WORK_BUDGET`).
 *
 * Fail-closed allow-list: every node is dispatched on its type in an explicit switch and every
 * field of every handled node is checked against the set of fields this walker understands; an
 * unknown node type or field is refused as `statement_not_allowed`. Nothing is skipped silently.
 */
import { figureColname } from './colname';
import {
  deniedFunctionReason,
  deniedSettingReason,
  deniedTypeReason,
  deniedValueFunctionReason,
  HARMLESS_VOLATILE,
  isCacheBreaking,
} from './function-policy';
import { allocationSizeReason, typeModifierReason } from './builtin-functions/sizing';
import { BUILTIN_SCHEMAS, builtinFunctionRefusal, regconfigCallReason } from './builtin-functions/classes';
import { typeNameResolves } from './type-names';
import {
  alternative,
  ColumnRef,
  derive,
  isPlaceholder,
  Lin,
  LIN_ANY,
  LIN_NONE,
  linColumn,
  lineageWork,
  merge,
  placeholder,
  RelRef,
  sameLin,
  substitute,
  tableKey,
  wholeRow,
} from './lineage';
import { OperatorResolver, type OperatorForm } from './operators';
import { PreparedCatalog, PreparedRelation, PreparedRoutine, relKey } from './prepared-catalog';
import { collectViewSources, isViewLike, viewColumnLineage, type ViewBodyAnalysis } from './views';
import type { FunctionUse, RefusalCode, WriteAccess } from './types';
import { clipText } from '../errors/cut-text';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type N = Record<string, any>;

/** Thrown inside the walker; converted to a refusal result by `analyzeSql`. */
export class Refusal extends Error {
  constructor(
    readonly code: RefusalCode,
    message: string,
  ) {
    super(message);
    this.name = 'Refusal';
  }
}

const MAX_DEPTH = 1000;
const VOL_RANK: Record<string, number> = { immutable: 0, stable: 1, volatile: 2 };
/** Sanity cap on lineage fixpoint rounds of one WITH RECURSIVE item (the work budget binds first). */
const MAX_RECURSIVE_ITERATIONS = 10_000;

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

/** Cuts a name taken from the input before it goes into a message. */
function q(name: unknown): string {
  const s = String(name);
  return '"' + clipText(s, 64).replace(/[\u0000-\u001f\u007f"]/g, '?') + '"';
}

// ---------------------------------------------------------------------------------------------
// Field allow-list per node type. A field outside its type's list is refused (fail closed).
// ---------------------------------------------------------------------------------------------
const FIELD_LIST: Record<string, string> = {
  SelectStmt:
    'distinctClause intoClause targetList fromClause whereClause groupClause groupDistinct havingClause windowClause valuesLists sortClause limitOffset limitCount limitOption lockingClause withClause op all larg rarg',
  InsertStmt: 'relation cols selectStmt onConflictClause returningClause withClause override',
  UpdateStmt: 'relation targetList whereClause fromClause returningClause withClause',
  DeleteStmt: 'relation usingClause whereClause returningClause withClause',
  MergeStmt: 'relation sourceRelation joinCondition mergeWhenClauses returningClause withClause',
  MergeWhenClause: 'matchKind commandType override condition targetList values',
  OnConflictClause: 'action infer targetList whereClause location',
  InferClause: 'indexElems whereClause conname location',
  IndexElem: 'name expr indexcolname collation opclass ordering nulls_ordering',
  ExplainStmt: 'query options',
  DefElem: 'defnamespace defname arg defaction location',
  ResTarget: 'name indirection val location',
  RangeVar: 'schemaname relname inh relpersistence alias location',
  Alias: 'aliasname colnames',
  JoinExpr: 'jointype isNatural larg rarg usingClause join_using_alias quals alias rtindex',
  RangeSubselect: 'lateral subquery alias',
  RangeFunction: 'lateral ordinality is_rowsfrom functions alias coldeflist',
  RangeTableSample: 'relation method args repeatable location',
  ColumnDef: 'colname typeName is_local is_not_null inhcount collClause location',
  FuncCall: 'funcname args agg_order agg_filter over agg_within_group agg_star agg_distinct func_variadic funcformat location',
  WindowDef: 'name refname partitionClause orderClause frameOptions startOffset endOffset location',
  SortBy: 'node sortby_dir sortby_nulls useOp location',
  A_Expr: 'kind name lexpr rexpr rexpr_list_start rexpr_list_end location',
  BoolExpr: 'boolop args location',
  NullTest: 'arg nulltesttype argisrow location',
  BooleanTest: 'arg booltesttype location',
  TypeCast: 'arg typeName location',
  TypeName: 'names setof pct_type typmods typemod arrayBounds location',
  CollateClause: 'arg collname location',
  A_Const: 'ival fval boolval sval bsval isnull location',
  ParamRef: 'number location',
  ColumnRef: 'fields location',
  A_Indirection: 'arg indirection',
  A_Indices: 'is_slice lidx uidx',
  A_ArrayExpr: 'elements list_start list_end location',
  RowExpr: 'args row_format colnames location',
  CoalesceExpr: 'args location',
  MinMaxExpr: 'op args location',
  SQLValueFunction: 'op typmod location',
  CaseExpr: 'arg args defresult location',
  CaseWhen: 'expr result location',
  SubLink: 'subLinkType subLinkId testexpr operName subselect location',
  GroupingFunc: 'args location',
  GroupingSet: 'kind content location',
  NamedArgExpr: 'arg name argnumber location',
  XmlExpr: 'op name named_args arg_names args xmloption indent location',
  XmlSerialize: 'xmloption expr typeName indent location',
  MultiAssignRef: 'source colno ncolumns',
  SetToDefault: 'location',
  MergeSupportFunc: 'location',
  List: 'items',
  CommonTableExpr: 'ctename aliascolnames ctematerialized ctequery search_clause cycle_clause location',
  WithClause: 'ctes recursive location',
  CTESearchClause: 'search_col_list search_breadth_first search_seq_column location',
  CTECycleClause: 'cycle_col_list cycle_mark_column cycle_mark_value cycle_mark_default cycle_path_column location',
  ReturningClause: 'options exprs',
  JsonValueExpr: 'raw_expr formatted_expr format',
  JsonFormat: 'format_type encoding location',
  JsonOutput: 'typeName returning',
  JsonReturning: 'format typid typmod',
  JsonKeyValue: 'key value',
  JsonObjectConstructor: 'exprs output absent_on_null unique location',
  JsonArrayConstructor: 'exprs output absent_on_null location',
  JsonArrayQueryConstructor: 'query output format absent_on_null location',
  JsonAggConstructor: 'output agg_filter agg_order over location',
  JsonObjectAgg: 'constructor arg absent_on_null unique',
  JsonArrayAgg: 'constructor arg absent_on_null',
  JsonParseExpr: 'expr output unique_keys location',
  JsonScalarExpr: 'expr output location',
  JsonSerializeExpr: 'expr output location',
  JsonIsPredicate: 'expr format item_type unique_keys location',
  JsonFuncExpr: 'op column_name context_item pathspec passing output on_empty on_error wrapper quotes location',
  JsonArgument: 'val name',
  JsonBehavior: 'btype expr coerce location',
  String: 'sval',
  Integer: 'ival',
  Float: 'fval',
  Boolean: 'boolval',
  BitString: 'bsval',
  A_Star: '',
};
const FIELDS: Record<string, ReadonlySet<string>> = Object.fromEntries(
  Object.entries(FIELD_LIST).map(([k, v]) => [k, new Set(v.split(' ').filter(Boolean))]),
);
const hasOwn = Object.prototype.hasOwnProperty;

/** Refuses a node that carries a field this walker does not understand. */
function checkFields(type: string, n: N): void {
  const allowed = FIELDS[type];
  if (!allowed) throw new Refusal('statement_not_allowed', `unsupported SQL construct: ${type}`);
  for (const k in n) {
    if (!allowed.has(k)) throw new Refusal('statement_not_allowed', `unsupported SQL construct: ${type}.${k}`);
  }
}

/** The single key of a wrapped node (`{ SelectStmt: {...} }` → `SelectStmt`), or undefined for `{}`. */
function nodeType(node: N): string | undefined {
  let t: string | undefined;
  for (const k in node) {
    if (t !== undefined) throw new Refusal('statement_not_allowed', 'malformed parse tree');
    t = k;
  }
  return t;
}

/** Unwraps `{ Type: body }`, checking the type and fields. */
function unwrap(node: N | undefined, type: string): N {
  if (!node || !hasOwn.call(node, type)) throw new Refusal('statement_not_allowed', `unsupported SQL construct in place of ${type}`);
  const body = node[type] as N;
  checkFields(type, body);
  return body;
}

function strings(list: N[] | undefined, what: string): string[] {
  const out: string[] = [];
  if (list) for (const x of list) {
    if (!x || !hasOwn.call(x, 'String')) throw new Refusal('statement_not_allowed', `unsupported ${what}`);
    out.push(String(x.String.sval ?? ''));
  }
  return out;
}

/** Friendly names for refused top-level statement types. */
const STATEMENT_NAMES: Record<string, string> = {
  TransactionStmt: 'transaction control',
  VariableSetStmt: 'SET/RESET',
  VariableShowStmt: 'SHOW',
  CopyStmt: 'COPY',
  DoStmt: 'DO',
  CallStmt: 'CALL',
  PrepareStmt: 'PREPARE',
  ExecuteStmt: 'EXECUTE',
  DeallocateStmt: 'DEALLOCATE',
  LockStmt: 'LOCK',
  ListenStmt: 'LISTEN',
  NotifyStmt: 'NOTIFY',
  UnlistenStmt: 'UNLISTEN',
  DeclareCursorStmt: 'DECLARE CURSOR',
  FetchStmt: 'FETCH/MOVE',
  ClosePortalStmt: 'CLOSE',
  VacuumStmt: 'VACUUM/ANALYZE',
  ClusterStmt: 'CLUSTER',
  ReindexStmt: 'REINDEX',
  GrantStmt: 'GRANT/REVOKE',
  GrantRoleStmt: 'GRANT/REVOKE role',
  CreateTableAsStmt: 'CREATE TABLE AS / SELECT INTO',
  CreateExtensionStmt: 'CREATE EXTENSION',
  DiscardStmt: 'DISCARD',
  CheckPointStmt: 'CHECKPOINT',
  LoadStmt: 'LOAD',
  SecLabelStmt: 'SECURITY LABEL',
  CommentStmt: 'COMMENT',
  TruncateStmt: 'TRUNCATE',
  DropStmt: 'DROP',
  CreateStmt: 'CREATE TABLE',
  AlterTableStmt: 'ALTER TABLE',
  AlterSystemStmt: 'ALTER SYSTEM',
  CreateRoleStmt: 'CREATE ROLE',
  AlterRoleStmt: 'ALTER ROLE',
  AlterRoleSetStmt: 'ALTER ROLE SET',
  CreateFunctionStmt: 'CREATE FUNCTION',
  ViewStmt: 'CREATE VIEW',
  RuleStmt: 'CREATE RULE',
  CreateTrigStmt: 'CREATE TRIGGER',
  RefreshMatViewStmt: 'REFRESH MATERIALIZED VIEW',
  ConstraintsSetStmt: 'SET CONSTRAINTS',
  ReassignOwnedStmt: 'REASSIGN OWNED',
  DropOwnedStmt: 'DROP OWNED',
};

/** Short agent-facing name of a refused statement node type. */
export function statementName(type: string): string {
  if (STATEMENT_NAMES[type]) return STATEMENT_NAMES[type];
  if (/^(Create|Alter|Drop|Define|Rename|Import)/.test(type)) return 'DDL (' + type.replace(/Stmt$/, '') + ')';
  return type.replace(/Stmt$/, '');
}

// ---------------------------------------------------------------------------------------------
// Scopes
// ---------------------------------------------------------------------------------------------
interface ReadRef {
  readonly rel: PreparedRelation;
  readonly column: string;
}
/** A column visible through a FROM item: its name there, its lineage, and the base columns it reads. */
interface Col {
  readonly name: string;
  readonly lin: Lin;
  readonly reads: readonly ReadRef[] | null;
  /** A column of a view or materialized view: using it records its lineage in `viewSources` (views.ts). */
  readonly view?: true;
}
/** A FROM item (namespace entry), mirroring PostgreSQL's ParseNamespaceItem visibility flags. */
interface NsItem {
  readonly refname: string | null;
  /** Schema of an unaliased base relation (for `schema.table.column`). */
  readonly schema: string | null;
  readonly cols: readonly Col[];
  readonly relVisible: boolean;
  readonly colsVisible: boolean;
  readonly base: PreparedRelation | null;
}
interface Scope {
  readonly parent: Scope | null;
  readonly items: readonly NsItem[];
}
interface CteDef {
  readonly name: string;
  cols: Col[] | null;
}
interface CteEnv {
  readonly parent: CteEnv | null;
  readonly map: Map<string, CteDef>;
}
interface Ctx {
  readonly scope: Scope;
  readonly ctes: CteEnv | null;
  readonly windows: Map<string, Lin> | null;
}
interface OutCol {
  readonly name: string;
  readonly lin: Lin;
}
interface QueryOut {
  readonly cols: OutCol[];
}

const EMPTY_SCOPE_ITEMS: readonly NsItem[] = [];
const baseColsCache = new WeakMap<PreparedRelation, Col[]>();

function baseCols(rel: PreparedRelation): Col[] {
  let cols = baseColsCache.get(rel);
  if (!cols) {
    cols = rel.columnNames.map((c) => ({
      name: c,
      lin: linColumn({ schema: rel.schema, table: rel.name, column: c }),
      reads: [{ rel, column: c }],
    }));
    baseColsCache.set(rel, cols);
  }
  return cols;
}

function renameCols(cols: readonly Col[], alias: N | undefined, what: string): Col[] {
  if (!alias) return cols as Col[];
  checkFields('Alias', alias);
  const names = strings(alias.colnames, 'column alias');
  if (names.length > cols.length) throw new Refusal('unknown_column', `${what} has ${cols.length} columns but ${names.length} column aliases`);
  if (names.length === 0) return cols as Col[];
  return cols.map((c, i) => (i < names.length ? { ...c, name: names[i] } : c));
}

const SYSTEM_SCHEMAS = new Set(['pg_catalog', 'information_schema', 'pg_toast']);
const TIME_LITERAL = /^\s*(now|today|tomorrow|yesterday)\s*$/i;

// ---------------------------------------------------------------------------------------------
// The walker
// ---------------------------------------------------------------------------------------------
/** Mutable state of one analysis; create one per statement. */
export class Analyzer {
  readonly reads = new Map<string, { rel: PreparedRelation; cols: Set<string> }>();
  readonly writes: WriteAccess[] = [];
  readonly functions = new Map<string, FunctionUse>();
  readonly filter = new Map<string, ColumnRef>();
  /** Columns whose values are used other than as a top-level passthrough output (see `SqlAnalysisOk.nonOutputUses`). */
  readonly nonOutput = new Map<string, ColumnRef>();
  /** Columns counted by a plain `count(col)` (see `SqlAnalysisOk.countUses`). */
  readonly countUses = new Map<string, ColumnRef>();
  /** Columns (of base relations and nested views) whose values feed the view columns the statement uses (see `SqlAnalysisOk.viewSources`). */
  readonly viewSources = new Map<string, ColumnRef>();
  /** True when a used view column has unprovable lineage (see `SqlAnalysisOk.viewUnprovable`). */
  viewUnprovable = false;
  cacheable = true;
  maxParam = 0;
  hasWrite = false;
  private depth = 0;
  private readonly sublinkNames = new WeakMap<object, string>();
  /**
   * While a per-row sub-select (a sublink, a LATERAL sub-select) is walked: the sources of every
   * value it consumes (filters, join conditions, ORDER BY, LIMIT, computations), innermost only;
   * see `perRowQuery`.
   */
  private perRowReads: Map<string, ColumnRef> | null = null;
  /** LATERAL sub-selects being walked: the query levels outside each, and whether it referenced one. */
  private readonly lateralFrames: Array<{ readonly outer: ReadonlySet<Scope>; correlated: boolean }> = [];
  /** Work done so far (see `WORK_BUDGET`); lineage work is read from `lineageWork`. */
  private work = 0;
  private readonly lineageStart = lineageWork.n;
  private readonly budget: number;
  /** Numbers the WITH RECURSIVE items (placeholders of each item's columns). */
  private recSeq = 0;
  /** Body of the top-level statement: its select list / RETURNING is the statement's output. */
  private topBody: N | null = null;

  /**
   * `viewBody`: this analyser walks a view's definition (views.ts), where a call of a function whose
   * body is not analysed (outside pg_catalog, or shadowable by one outside it) yields a value of
   * unprovable lineage (`LIN_ANY`).
   */
  constructor(
    private readonly cat: PreparedCatalog,
    budget: number = WORK_BUDGET,
    private readonly viewBody = false,
  ) {
    this.budget = budget;
    this.ops = OperatorResolver.for(cat);
  }

  /** Operators resolved by operand types (issue 22, item 5); null when the catalogue lacks the rows (then judged by name). */
  private readonly ops: OperatorResolver | null;

  /** Steps used so far (walker steps plus lineage work); read it before another analysis starts. */
  get workUsed(): number {
    return this.work + (lineageWork.n - this.lineageStart);
  }

  // ----- bookkeeping -----
  /** Adds `n` steps of work; refuses the statement above the budget. */
  private charge(n: number): void {
    this.work += n;
    if (this.work + (lineageWork.n - this.lineageStart) > this.budget) {
      throw new Refusal('statement_too_complex', 'statement too complex to analyse (work budget exceeded); simplify it or split it into several statements');
    }
  }
  private enter(): void {
    if (++this.depth > MAX_DEPTH) throw new Refusal('invalid_sql', 'statement nests too deeply');
    this.charge(1);
  }
  private leave(): void {
    this.depth--;
  }
  private touchRelation(rel: PreparedRelation): void {
    const k = relKey(rel.schema, rel.name);
    if (!this.reads.has(k)) this.reads.set(k, { rel, cols: new Set() });
  }
  private readColumn(r: ReadRef): void {
    const k = relKey(r.rel.schema, r.rel.name);
    let e = this.reads.get(k);
    if (!e) this.reads.set(k, (e = { rel: r.rel, cols: new Set() }));
    e.cols.add(r.column);
  }
  private use(col: Col): Lin {
    if (col.reads) for (const r of col.reads) this.readColumn(r);
    if (col.view) this.viewUse(col.lin);
    return col.lin;
  }
  /** A view column is used: every column behind it (whole relations for embedded rows) feeds the value. */
  private viewUse(l: Lin): void {
    const r = collectViewSources(l, this.cat, this.viewSources);
    this.charge(r.work);
    if (r.unprovable) this.viewUnprovable = true;
  }
  /** A FROM item or write target: a view's columns carry the lineage of its definition (views.ts). */
  private relationItem(rel: PreparedRelation, alias: N | undefined): NsItem {
    return isViewLike(rel) ? this.viewItem(rel, alias) : this.baseItem(rel, alias);
  }
  /** A FROM item for a view or materialized view: its columns carry the lineage of its definition (views.ts). */
  private viewItem(rel: PreparedRelation, alias: N | undefined): NsItem {
    const lins = viewColumnLineage(rel, (sel) => this.analyseViewBody(sel));
    const cols: Col[] = rel.columnNames.map((c, i) => ({ name: c, lin: lins[i], reads: [{ rel, column: c }], view: true }));
    return { ...this.baseItem(rel, alias), cols: renameCols(cols, alias, `relation ${q(rel.name)}`) };
  }
  /** Walks a view's definition with a fresh analyser over the same catalogue (throws `Refusal` when refused). */
  private analyseViewBody(sel: N): ViewBodyAnalysis {
    const out = new Analyzer(this.cat, WORK_BUDGET, true).top('SelectStmt', sel);
    return { outputs: out.cols.map((c) => c.lin) };
  }
  /** A value used to choose, order, group or limit rows (also a non-output use). */
  private addFilter(l: Lin): void {
    if (l.src) for (const [k, v] of l.src) this.filter.set(k, v);
    this.consume(l);
  }
  /**
   * The value `l` is used other than by flowing unchanged into an output column: computed on,
   * compared, written, counted in a set operation, … Every source goes to `nonOutput`. A value that
   * embeds whole rows carries all their columns as sources (`wholeRow`), so they are included.
   */
  private consume(l: Lin): void {
    if (l.src) {
      this.charge(l.src.size);
      for (const [k, v] of l.src) this.nonOutput.set(k, v);
      const into = this.perRowReads;
      if (into) for (const [k, v] of l.src) into.set(k, v);
    }
  }
  /**
   * Walks a sub-select whose value is computed per row of the enclosing query (a sublink, a LATERAL
   * sub-select) and returns, besides its outputs, `control`: the derived lineage of every value the
   * sub-select consumed (WHERE, JOIN conditions, GROUP BY/HAVING, ORDER BY/LIMIT, computations,
   * nested sub-selects), `LIN_NONE` when none. Which rows it yields, so its value, depends on them:
   * the caller merges `control` into the value, as a CASE condition is merged into the CASE's value,
   * so a view column computed this way over a masked column is masked (a view body's own filters
   * are not checked as non-output uses). The uses are recorded as before (`nonOutput`, `filter`).
   * Only the innermost walk collects: a nested sub-select's `control` reaches the outer one through
   * its value, which the outer sub-select consumes or outputs.
   */
  private perRowQuery(node: N, scope: Scope | null, ctes: CteEnv | null): { out: QueryOut; control: Lin } {
    const saved = this.perRowReads;
    const reads = new Map<string, ColumnRef>();
    this.perRowReads = reads;
    let out: QueryOut;
    try {
      out = this.query(node, scope, ctes);
    } finally {
      this.perRowReads = saved;
    }
    return { out, control: reads.size ? { src: reads, pass: false, opq: null } : LIN_NONE };
  }
  /** Computed value: its inputs are consumed, the result is derived from them (never passthrough). */
  private calc(l: Lin): Lin {
    this.consume(l);
    return derive(l);
  }
  /** Output columns of a sub-select whose values are consumed (EXISTS, IN, INTERSECT, INSERT … SELECT, …). */
  private consumeAll(cols: readonly OutCol[]): void {
    for (const c of cols) this.consume(c.lin);
  }
  /** Reading every column of `rel` (whole-row values, the relation's row type used as a type). */
  private readAll(rel: PreparedRelation): void {
    this.touchRelation(rel);
    this.charge(rel.columnNames.length);
    for (const column of rel.columnNames) this.readColumn({ rel, column });
  }
  /**
   * After a WITH RECURSIVE item is solved: rewrites everything recorded while its recursive term
   * was walked (filters, non-output uses, counts) from placeholders to the final lineage.
   */
  private resolvePlaceholders(id: number, finals: readonly Lin[]): void {
    for (const map of [this.filter, this.nonOutput, this.countUses]) {
      const hits: Array<[string, ColumnRef]> = [];
      this.charge(map.size);
      for (const [k, c] of map) if (isPlaceholder(c, id)) hits.push([k, c]);
      for (const [k, c] of hits) {
        map.delete(k);
        const f = finals[Number(c.column)];
        // A count over a value that is not one column unchanged is a computation on it.
        const into = map === this.countUses && !f?.pass ? this.nonOutput : map;
        if (f?.src) for (const [fk, fc] of f.src) into.set(fk, fc);
      }
    }
  }

  // ----- relations -----
  private resolveRelation(schema: string | undefined, name: string): PreparedRelation {
    if (schema !== undefined) {
      if (SYSTEM_SCHEMAS.has(schema) || schema.startsWith('pg_toast') || schema.startsWith('pg_temp')) {
        throw new Refusal('unknown_relation', `relation ${q(schema + '.' + name)} is a system relation and is not exposed`);
      }
      const rel = this.cat.relations.get(relKey(schema, name));
      if (!rel) throw new Refusal('unknown_relation', `unknown relation ${q(schema + '.' + name)}`);
      return rel;
    }
    for (const s of this.cat.path) {
      if (s === 'pg_catalog') {
        const sys = this.cat.systemRelations;
        if (sys.has(name) || (sys.size === 0 && name.startsWith('pg_'))) {
          throw new Refusal('unknown_relation', `relation ${q(name)} is a system relation and is not exposed`);
        }
        continue;
      }
      const rel = this.cat.relations.get(relKey(s, name));
      if (rel) return rel;
    }
    throw new Refusal('unknown_relation', `unknown relation ${q(name)}`);
  }

  private lookupCte(env: CteEnv | null, name: string): CteDef | undefined {
    for (let e = env; e; e = e.parent) {
      const d = e.map.get(name);
      if (d) return d;
    }
    return undefined;
  }

  /** DML target: always a catalogue relation (CTE names are never write targets). */
  private writeTarget(rv: N | undefined): PreparedRelation {
    if (!rv) throw new Refusal('statement_not_allowed', 'missing write target');
    if (rv.catalogname !== undefined) throw new Refusal('unknown_relation', 'cross-database references are not supported');
    checkFields('RangeVar', rv);
    return this.resolveRelation(rv.schemaname, String(rv.relname));
  }

  private baseItem(rel: PreparedRelation, alias: N | undefined): NsItem {
    const cols = renameCols(baseCols(rel), alias, `relation ${q(rel.name)}`);
    return {
      refname: alias ? String(alias.aliasname) : rel.name,
      schema: alias ? null : rel.schema,
      cols,
      relVisible: true,
      colsVisible: true,
      base: rel,
    };
  }

  // ----- functions and operators -----
  private resolveFunction(parts: string[]): PreparedRoutine {
    if (parts.length === 0 || parts.length > 2) {
      throw new Refusal('function_not_allowed', parts.length > 2 ? 'cross-database function references are not supported' : 'malformed function name');
    }
    const name = parts[parts.length - 1];
    const schema = parts.length === 2 ? parts[0] : undefined;
    const denied = deniedFunctionReason(name);
    if (denied) throw new Refusal('function_not_allowed', `function ${q(name)} is not allowed: it ${denied}`);
    const all = this.cat.functionsByName.get(name);
    const candidates: PreparedRoutine[] = [];
    if (all) {
      if (schema !== undefined) {
        for (const r of all) if (r.schema === schema) candidates.push(r);
      } else {
        for (const s of this.cat.path) for (const r of all) if (r.schema === s) candidates.push(r);
      }
    }
    if (candidates.length === 0) {
      throw new Refusal('function_not_allowed', `unknown function ${q(schema !== undefined ? schema + '.' + name : name)}`);
    }
    // PostgreSQL may pick any same-named candidate on the path (argument types decide), so every
    // candidate must be acceptable.
    let worst: PreparedRoutine = candidates[0];
    for (const c of candidates) {
      // Built-ins: the classification of every pg_proc row (builtin-functions/, issue 12 Build 3).
      const why = BUILTIN_SCHEMAS.has(c.schema) ? builtinFunctionRefusal(c.schema, c.name) : null;
      if (why) throw new Refusal('function_not_allowed', `function ${q(c.name)} is not allowed: it ${why}`);
      if (c.volatility === 'volatile' && !(c.schema === 'pg_catalog' && HARMLESS_VOLATILE.has(c.name))) {
        throw new Refusal('function_not_allowed', `function ${q(c.schema + '.' + c.name)} is volatile (may have side effects)`);
      }
      if (isCacheBreaking(c.schema, c.name, c.volatility)) this.cacheable = false;
      if (VOL_RANK[c.volatility] > VOL_RANK[worst.volatility]) worst = c;
    }
    const first = candidates[0];
    const key = first.schema + '.' + first.name;
    if (!this.functions.has(key)) this.functions.set(key, { schema: first.schema, name: first.name, volatility: worst.volatility });
    return first;
  }

  private checkOperator(nameList: N[] | undefined): void {
    const parts = strings(nameList, 'operator name');
    if (parts.length === 0 || parts.length > 2) throw new Refusal('function_not_allowed', 'malformed operator name');
    const ops = this.cat.operatorsByName;
    if (!ops) return;
    const name = parts[parts.length - 1];
    const schema = parts.length === 2 ? parts[0] : undefined;
    const all = ops.get(name);
    let found = false;
    if (all) {
      for (const r of all) {
        if (schema !== undefined ? r.schema !== schema : !this.cat.path.includes(r.schema)) continue;
        found = true;
        if (r.volatility === 'volatile') throw new Refusal('function_not_allowed', `operator ${q(name)} is implemented by a volatile function`);
        if (r.volatility === 'stable' && r.schema !== 'pg_catalog') this.cacheable = false;
      }
    }
    if (!found) throw new Refusal('function_not_allowed', `unknown operator ${q(schema !== undefined ? schema + '.' + name : name)}`);
  }

  /** Judges one operator use by the operator PostgreSQL resolves (operators.ts); refuses when it cannot be proven safe. */
  private operatorUse(form: OperatorForm): void {
    const d = this.ops!.use(form);
    if (d.refusal !== null) throw new Refusal('function_not_allowed', d.refusal);
    if (!d.cacheable) this.cacheable = false;
  }

  /** `ORDER BY x USING op` (statements, windows, aggregates); call after `x` was walked. */
  private sortOperator(sb: N): void {
    if (!sb.useOp) return;
    if (this.ops) this.operatorUse({ kind: 'sort', useOp: sb.useOp, node: sb.node });
    else this.checkOperator(sb.useOp);
  }

  // ----- statements -----
  /** Top-level entry: returns the statement's output columns. */
  top(type: string, body: N): QueryOut {
    if (type === 'ExplainStmt') {
      checkFields('ExplainStmt', body);
      for (const o of body.options ?? []) {
        const d = unwrap(o, 'DefElem');
        const opt = String(d.defname ?? '').toLowerCase();
        if (opt === 'analyze' || opt === 'analyse') throw new Refusal('statement_not_allowed', 'EXPLAIN ANALYZE executes the statement and is not allowed');
        if (!EXPLAIN_OPTIONS.has(opt)) throw new Refusal('statement_not_allowed', `EXPLAIN option ${q(opt)} is not allowed`);
      }
      const inner = body.query as N;
      const t = inner ? nodeType(inner) : undefined;
      if (t !== 'SelectStmt') throw new Refusal('statement_not_allowed', 'EXPLAIN is only allowed for read statements');
      // The plan shows no values: the inner statement's outputs are not used (its filters are).
      this.query(inner, null, null);
      if (this.hasWrite) throw new Refusal('statement_not_allowed', 'EXPLAIN is only allowed for read statements');
      return { cols: [{ name: 'QUERY PLAN', lin: LIN_NONE }] };
    }
    this.topBody = body;
    return this.query({ [type]: body }, null, null);
  }

  /** Analyses a wrapped query node at a new query level. */
  private query(node: N, parent: Scope | null, ctes: CteEnv | null): QueryOut {
    const type = nodeType(node);
    this.enter();
    try {
      switch (type) {
        case 'SelectStmt':
          checkFields(type, node.SelectStmt);
          return this.select(node.SelectStmt, parent, ctes);
        case 'InsertStmt':
          checkFields(type, node.InsertStmt);
          return this.insert(node.InsertStmt, parent, ctes);
        case 'UpdateStmt':
          checkFields(type, node.UpdateStmt);
          return this.update(node.UpdateStmt, parent, ctes);
        case 'DeleteStmt':
          checkFields(type, node.DeleteStmt);
          return this.del(node.DeleteStmt, parent, ctes);
        case 'MergeStmt':
          checkFields(type, node.MergeStmt);
          return this.mergeStmt(node.MergeStmt, parent, ctes);
        default:
          throw new Refusal('statement_not_allowed', `${statementName(type ?? 'empty')} is not allowed here`);
      }
    } finally {
      this.leave();
    }
  }

  private select(s: N, parent: Scope | null, outerCtes: CteEnv | null): QueryOut {
    if (s.intoClause) throw new Refusal('statement_not_allowed', 'SELECT INTO creates a table and is not allowed');
    if (s.lockingClause && s.lockingClause.length) throw new Refusal('statement_not_allowed', 'FOR UPDATE/SHARE row locks are not allowed');
    const ctes = s.withClause ? this.withClause(s.withClause, parent, outerCtes) : outerCtes;
    const op = s.op ?? 'SETOP_NONE';
    if (op !== 'SETOP_NONE') return this.setOperation(s, parent, ctes);
    if (s.valuesLists) return this.values(s, parent, ctes);

    // FROM
    const items: NsItem[] = [];
    const fromCtx = { parent, ctes };
    for (const f of s.fromClause ?? []) {
      const r = this.fromItem(f, fromCtx, items);
      for (const it of r) items.push(it);
    }
    const scope: Scope = { parent, items };
    const windows = s.windowClause && s.windowClause.length ? new Map<string, Lin>() : null;
    const ctx: Ctx = { scope, ctes, windows };

    if (s.whereClause) this.addFilter(this.ex(s.whereClause, ctx));
    if (windows) {
      for (const w of s.windowClause) {
        const def = unwrap(w, 'WindowDef');
        const lin = this.windowDef(def, ctx);
        if (def.name !== undefined) windows.set(String(def.name), lin);
      }
    }
    const outs = this.targetList(s.targetList ?? [], ctx, s === this.topBody);

    const distinct: N[] = s.distinctClause ?? [];
    if (distinct.length === 1 && nodeType(distinct[0] ?? {}) === undefined) {
      // Plain DISTINCT compares every output value.
      for (const o of outs) this.addFilter(o.lin);
    } else {
      for (const d of distinct) {
        if (!d || nodeType(d) === undefined) throw new Refusal('statement_not_allowed', 'unsupported DISTINCT form');
        this.addFilter(this.sortTarget(d, ctx, outs));
      }
    }
    for (const g of s.groupClause ?? []) this.groupItem(g, ctx, outs);
    if (s.havingClause) this.addFilter(this.ex(s.havingClause, ctx));
    for (const sb of s.sortClause ?? []) this.sortBy(sb, ctx, outs);
    if (s.limitOffset) this.addFilter(this.ex(s.limitOffset, ctx));
    if (s.limitCount) this.addFilter(this.ex(s.limitCount, ctx));
    return { cols: outs };
  }

  /** `VALUES (...), (...)`: columns column1..N, lineage per position over all rows. */
  private values(s: N, parent: Scope | null, ctes: CteEnv | null): QueryOut {
    if (s.targetList || s.fromClause || s.whereClause || s.groupClause || s.havingClause || s.windowClause || s.distinctClause) {
      throw new Refusal('statement_not_allowed', 'unsupported VALUES form');
    }
    const ctx: Ctx = { scope: { parent, items: EMPTY_SCOPE_ITEMS }, ctes, windows: null };
    let lins: Lin[] | null = null;
    for (const row of s.valuesLists) {
      const l = unwrap(row, 'List');
      // A VALUES row is a constructed row: every value in it counts as used.
      const cur = (l.items ?? []).map((e: N) => {
        const lin = this.ex(e, ctx);
        this.consume(lin);
        return lin;
      });
      if (!lins) lins = cur;
      else {
        if (cur.length !== lins.length) throw new Refusal('invalid_sql', 'VALUES lists must all be the same length');
        lins = lins.map((x, i) => alternative(x, cur[i]));
      }
    }
    const outs: OutCol[] = (lins ?? []).map((lin, i) => ({ name: `column${i + 1}`, lin }));
    this.outputOnlyClauses(s, parent, ctes, outs);
    return { cols: outs };
  }

  /** ORDER BY / LIMIT / OFFSET of a set operation or VALUES: resolved against the output columns. */
  private outputOnlyClauses(s: N, parent: Scope | null, ctes: CteEnv | null, outs: OutCol[]): void {
    if (!s.sortClause && !s.limitCount && !s.limitOffset) return;
    const item: NsItem = {
      refname: null,
      schema: null,
      cols: outs.map((o) => ({ name: o.name, lin: o.lin, reads: null })),
      relVisible: false,
      colsVisible: true,
      base: null,
    };
    const ctx: Ctx = { scope: { parent, items: [item] }, ctes, windows: null };
    for (const sb of s.sortClause ?? []) this.sortBy(sb, ctx, outs);
    if (s.limitOffset) this.addFilter(this.ex(s.limitOffset, ctx));
    if (s.limitCount) this.addFilter(this.ex(s.limitCount, ctx));
  }

  private setOperation(s: N, parent: Scope | null, ctes: CteEnv | null): QueryOut {
    if (!['SETOP_UNION', 'SETOP_INTERSECT', 'SETOP_EXCEPT'].includes(s.op)) throw new Refusal('statement_not_allowed', 'unsupported set operation');
    if (s.targetList || s.fromClause || s.whereClause || s.groupClause || s.havingClause || s.windowClause || s.valuesLists || s.distinctClause) {
      throw new Refusal('statement_not_allowed', 'unsupported set operation form');
    }
    const l = this.query({ SelectStmt: s.larg }, parent, ctes);
    const r = this.query({ SelectStmt: s.rarg }, parent, ctes);
    if (l.cols.length !== r.cols.length) throw new Refusal('invalid_sql', 'each UNION/INTERSECT/EXCEPT query must have the same number of columns');
    const outs = l.cols.map((c, i) => ({ name: c.name, lin: alternative(c.lin, r.cols[i].lin) }));
    // INTERSECT and EXCEPT compare the branches' values, UNION (without ALL) removes duplicates:
    // every value of both branches is used. UNION ALL only concatenates: a column stays an output
    // use when it is still one column's value unchanged, otherwise its sources count as used.
    if (s.op !== 'SETOP_UNION' || !s.all) {
      this.consumeAll(l.cols);
      this.consumeAll(r.cols);
    } else {
      for (const o of outs) if (!o.lin.pass) this.consume(o.lin);
    }
    this.outputOnlyClauses(s, parent, ctes, outs);
    return { cols: outs };
  }

  // ----- WITH -----
  private withClause(w: N, parent: Scope | null, outer: CteEnv | null): CteEnv {
    checkFields('WithClause', w);
    const env: CteEnv = { parent: outer, map: new Map() };
    const defs: N[] = (w.ctes ?? []).map((c: N) => unwrap(c, 'CommonTableExpr'));
    const names = new Set<string>();
    for (const d of defs) {
      const name = String(d.ctename);
      if (names.has(name)) throw new Refusal('invalid_sql', `WITH query name ${q(name)} specified more than once`);
      names.add(name);
    }
    if (!w.recursive) {
      for (const d of defs) {
        const cols = this.cteBody(d, parent, env, false);
        env.map.set(String(d.ctename), { name: String(d.ctename), cols });
      }
      return env;
    }
    // WITH RECURSIVE: every name of the list is visible in every body; analyse in dependency order.
    const deps = new Map<string, Set<string>>();
    for (const d of defs) deps.set(String(d.ctename), referencedNames(d.ctequery, names, (n) => this.charge(n)));
    const done = new Set<string>();
    const order: N[] = [];
    const visiting = new Set<string>();
    const byName = new Map(defs.map((d) => [String(d.ctename), d] as [string, N]));
    const visit = (name: string): void => {
      if (done.has(name)) return;
      if (visiting.has(name)) throw new Refusal('invalid_sql', 'mutual recursion between WITH items is not supported');
      visiting.add(name);
      for (const dep of deps.get(name)!) if (dep !== name) visit(dep);
      visiting.delete(name);
      done.add(name);
      order.push(byName.get(name)!);
    };
    for (const d of defs) visit(String(d.ctename));
    for (const d of order) {
      const name = String(d.ctename);
      const selfRef = deps.get(name)!.has(name);
      const def: CteDef = { name, cols: null };
      env.map.set(name, def);
      def.cols = this.cteBody(d, parent, env, selfRef, def);
    }
    return env;
  }

  /** Analyses one CTE body and returns its columns (aliases, SEARCH/CYCLE columns applied). */
  private cteBody(d: N, parent: Scope | null, env: CteEnv, selfRef: boolean, def?: CteDef): Col[] {
    const aliases = strings(d.aliascolnames, 'CTE column alias');
    const name = String(d.ctename);
    let outs: OutCol[];
    if (!selfRef) {
      outs = this.query(d.ctequery, parent, env).cols;
    } else {
      const body = d.ctequery?.SelectStmt as N | undefined;
      if (!body || body.op !== 'SETOP_UNION' || !body.larg || !body.rarg) {
        throw new Refusal('invalid_sql', `recursive query ${q(name)} must have the form non-recursive-term UNION recursive-term`);
      }
      checkFields('SelectStmt', body);
      if (body.withClause || body.sortClause || body.limitCount || body.limitOffset || body.lockingClause) {
        throw new Refusal('statement_not_allowed', `unsupported clause in recursive query ${q(name)}`);
      }
      const left = this.query({ SelectStmt: body.larg }, parent, env).cols;
      // The recursive term is walked once, with each column of this item standing for itself
      // (placeholders); the fixpoint is then solved on lineage values only.
      const id = ++this.recSeq;
      def!.cols = this.applyCteAliases(
        left.map((c, k) => ({ name: c.name, lin: placeholder(id, k) })),
        aliases,
        name,
      );
      const right = this.query({ SelectStmt: body.rarg }, parent, env).cols;
      if (right.length !== left.length) throw new Refusal('invalid_sql', 'each UNION query must have the same number of columns');
      let cur: Lin[] = left.map((c) => c.lin);
      for (let i = 0; ; i++) {
        if (i >= MAX_RECURSIVE_ITERATIONS) throw new Refusal('statement_too_complex', `recursive query ${q(name)} is too complex to analyse`);
        this.charge(left.length);
        const prev = cur;
        const next = left.map((c, k) => alternative(alternative(c.lin, prev[k]), substitute(right[k].lin, id, prev)));
        if (next.every((l, k) => sameLin(l, prev[k]))) break;
        cur = next;
      }
      this.resolvePlaceholders(id, cur);
      // UNION (without ALL) compares rows; a column that is not one column's value unchanged
      // across the terms is treated like a computed one.
      for (const l of cur) if (!body.all || !l.pass) this.consume(l);
      outs = left.map((c, k) => ({ name: c.name, lin: cur[k] }));
    }
    let cols = this.applyCteAliases(outs, aliases, name);
    if (d.search_clause) {
      const sc = d.search_clause as N;
      checkFields('CTESearchClause', sc);
      const used = this.cteColumns(cols, strings(sc.search_col_list, 'SEARCH column'), name);
      this.consume(used); // ordering by them
      cols = [...cols, { name: String(sc.search_seq_column), lin: derive(used), reads: null }];
    }
    if (d.cycle_clause) {
      const cc = d.cycle_clause as N;
      checkFields('CTECycleClause', cc);
      const used = this.cteColumns(cols, strings(cc.cycle_col_list, 'CYCLE column'), name);
      this.consume(used); // compared to detect cycles
      const emptyCtx: Ctx = { scope: { parent: null, items: EMPTY_SCOPE_ITEMS }, ctes: null, windows: null };
      this.ex(cc.cycle_mark_value, emptyCtx);
      this.ex(cc.cycle_mark_default, emptyCtx);
      cols = [...cols, { name: String(cc.cycle_mark_column), lin: derive(used), reads: null }];
      if (cc.cycle_path_column !== undefined) cols.push({ name: String(cc.cycle_path_column), lin: derive(used), reads: null });
    }
    return cols;
  }

  private applyCteAliases(outs: readonly OutCol[], aliases: string[], name: string): Col[] {
    if (aliases.length > outs.length) throw new Refusal('invalid_sql', `WITH query ${q(name)} has ${outs.length} columns available but ${aliases.length} columns specified`);
    return outs.map((o, i) => ({ name: i < aliases.length ? aliases[i] : o.name, lin: o.lin, reads: null }));
  }

  private cteColumns(cols: readonly Col[], names: string[], cte: string): Lin {
    let lin = LIN_NONE;
    for (const n of names) {
      const c = cols.find((x) => x.name === n);
      if (!c) throw new Refusal('unknown_column', `column ${q(n)} not in WITH query ${q(cte)}`);
      lin = merge(lin, c.lin);
    }
    return lin;
  }

  // ----- FROM -----
  /**
   * Analyses one FROM-list entry. `left` holds the items already in this FROM list (visible to
   * LATERAL items and function calls, as in PostgreSQL).
   */
  private fromItem(node: N, fc: { parent: Scope | null; ctes: CteEnv | null }, left: readonly NsItem[]): NsItem[] {
    const type = nodeType(node);
    this.enter();
    try {
      switch (type) {
        case 'RangeVar': {
          const rv = node.RangeVar as N;
          if (rv.catalogname !== undefined) throw new Refusal('unknown_relation', 'cross-database references are not supported');
          checkFields('RangeVar', rv);
          const name = String(rv.relname);
          if (rv.schemaname === undefined) {
            const cte = this.lookupCte(fc.ctes, name);
            if (cte) {
              if (!cte.cols) throw new Refusal('invalid_sql', `recursive reference to ${q(name)} is not allowed here`);
              this.charge(cte.cols.length);
              const cols = renameCols(cte.cols, rv.alias, `WITH query ${q(name)}`);
              return [{ refname: rv.alias ? String(rv.alias.aliasname) : name, schema: null, cols, relVisible: true, colsVisible: true, base: null }];
            }
          }
          const rel = this.resolveRelation(rv.schemaname, name);
          this.touchRelation(rel);
          this.charge(rel.columnNames.length);
          return [this.relationItem(rel, rv.alias)];
        }
        case 'RangeSubselect': {
          const rs = node.RangeSubselect as N;
          checkFields('RangeSubselect', rs);
          const out = rs.lateral ? this.lateralSubselect(rs.subquery, { parent: fc.parent, items: left }, fc.ctes) : this.query(rs.subquery, fc.parent, fc.ctes);
          this.charge(out.cols.length);
          const cols = renameCols(
            out.cols.map((o) => ({ name: o.name, lin: o.lin, reads: null })),
            rs.alias,
            'subquery',
          );
          return [{ refname: rs.alias ? String(rs.alias.aliasname) : null, schema: null, cols, relVisible: !!rs.alias, colsVisible: true, base: null }];
        }
        case 'RangeFunction':
          return [this.rangeFunction(node.RangeFunction, { parent: fc.parent, items: left }, fc.ctes)];
        case 'JoinExpr':
          return this.join(node.JoinExpr, fc, left);
        case 'RangeTableSample': {
          const ts = node.RangeTableSample as N;
          checkFields('RangeTableSample', ts);
          const method = strings(ts.method, 'TABLESAMPLE method');
          if (method.length !== 1 || !['bernoulli', 'system'].includes(method[0])) {
            throw new Refusal('function_not_allowed', 'only TABLESAMPLE BERNOULLI and SYSTEM are allowed');
          }
          const inner = nodeType(ts.relation ?? {});
          const isCte = inner === 'RangeVar' && ts.relation.RangeVar.schemaname === undefined && !!this.lookupCte(fc.ctes, String(ts.relation.RangeVar.relname));
          if (inner !== 'RangeVar' || isCte) {
            throw new Refusal('statement_not_allowed', 'TABLESAMPLE must be applied to a table');
          }
          const items = this.fromItem(ts.relation, fc, left);
          const ctx: Ctx = { scope: { parent: fc.parent, items: EMPTY_SCOPE_ITEMS }, ctes: fc.ctes, windows: null };
          for (const a of ts.args ?? []) this.consume(this.ex(a, ctx));
          if (ts.repeatable) this.consume(this.ex(ts.repeatable, ctx));
          else this.cacheable = false;
          return items;
        }
        case 'RangeTableFunc':
          throw new Refusal('statement_not_allowed', 'XMLTABLE is not supported');
        case 'JsonTable':
          throw new Refusal('statement_not_allowed', 'JSON_TABLE is not supported');
        default:
          throw new Refusal('statement_not_allowed', `unsupported FROM item: ${type ?? 'empty'}`);
      }
    } finally {
      this.leave();
    }
  }

  /**
   * A LATERAL sub-select. When it references a column of an outer query level (the items to its
   * left, enclosing levels) it is evaluated per outer row like a sublink, and each of its outputs
   * also carries everything it consumed (`perRowQuery`): `LATERAL (SELECT count(*) … WHERE c2.phone
   * < c.phone)` is derived from phone. Without such a reference it is an ordinary derived table,
   * whose WHERE restricts rows (in a view body, the operator's decision; README, views).
   */
  private lateralSubselect(node: N, scope: Scope, ctes: CteEnv | null): QueryOut {
    const outer = new Set<Scope>();
    for (let s: Scope | null = scope; s; s = s.parent) outer.add(s);
    this.charge(outer.size);
    const frame = { outer, correlated: false };
    this.lateralFrames.push(frame);
    let r: { out: QueryOut; control: Lin };
    try {
      r = this.perRowQuery(node, scope, ctes);
    } finally {
      this.lateralFrames.pop();
    }
    // Its filters decide the rows of the enclosing query too (a sublink around it collects them).
    this.consume(r.control);
    if (!frame.correlated || r.control === LIN_NONE) return r.out;
    this.charge(r.out.cols.length);
    return { cols: r.out.cols.map((o) => ({ name: o.name, lin: merge(o.lin, r.control) })) };
  }

  /** A name was resolved at query level `s`: marks the LATERAL sub-selects it is outside of as correlated. */
  private reached(s: Scope): void {
    const frames = this.lateralFrames;
    if (frames.length === 0) return;
    this.charge(frames.length);
    for (const f of frames) if (f.outer.has(s)) f.correlated = true;
  }

  private rangeFunction(rf: N, lateral: Scope, ctes: CteEnv | null): NsItem {
    checkFields('RangeFunction', rf);
    const ctx: Ctx = { scope: lateral, ctes, windows: null };
    const funcs: N[] = rf.functions ?? [];
    if (funcs.length === 0) throw new Refusal('statement_not_allowed', 'empty function list in FROM');
    const cols: Col[] = [];
    let firstName = '';
    let all = LIN_NONE;
    funcs.forEach((entry, idx) => {
      const pair = unwrap(entry, 'List').items as N[] | undefined;
      if (!pair || pair.length < 1 || pair.length > 2) throw new Refusal('statement_not_allowed', 'unsupported function in FROM');
      const call = pair[0];
      const defs = pair[1] && nodeType(pair[1]) !== undefined ? pair[1] : null;
      let lin: Lin;
      let routine: PreparedRoutine | null = null;
      let fname: string;
      if (hasOwn.call(call, 'FuncCall')) {
        const r = this.funcCall(call.FuncCall, ctx);
        lin = r.lin;
        routine = r.routine;
        fname = r.routine.name;
      } else {
        lin = this.ex(call, ctx);
        fname = figureColname(call);
      }
      if (idx === 0) firstName = fname;
      // The arguments decide which rows the function produces and how many: a non-output use.
      lin = this.calc(lin);
      all = merge(all, lin);
      let names: string[];
      const deflist: N[] | null = defs ? (unwrap(defs, 'List').items as N[]) : funcs.length === 1 && rf.coldeflist ? rf.coldeflist : null;
      if (deflist) {
        names = deflist.map((cd: N) => {
          const def = unwrap(cd, 'ColumnDef');
          this.typeName(def.typeName);
          if (def.collClause) checkFields('CollateClause', def.collClause);
          return String(def.colname);
        });
      } else if (routine?.outColumns) names = [...routine.outColumns];
      else names = [funcs.length === 1 && rf.alias ? String(rf.alias.aliasname) : fname];
      for (const n of names) cols.push({ name: n, lin, reads: null });
    });
    // The row number counts the rows produced from the arguments (e.g. the length of a value).
    if (rf.ordinality) cols.push({ name: 'ordinality', lin: derive(all), reads: null });
    const renamed = renameCols(cols, rf.alias, 'function in FROM');
    return {
      refname: rf.alias ? String(rf.alias.aliasname) : firstName,
      schema: null,
      cols: renamed,
      relVisible: true,
      colsVisible: true,
      base: null,
    };
  }

  private join(j: N, fc: { parent: Scope | null; ctes: CteEnv | null }, before: readonly NsItem[]): NsItem[] {
    checkFields('JoinExpr', j);
    const jt = String(j.jointype ?? 'JOIN_INNER');
    if (!['JOIN_INNER', 'JOIN_LEFT', 'JOIN_RIGHT', 'JOIN_FULL'].includes(jt)) throw new Refusal('statement_not_allowed', 'unsupported join type');
    const l = this.fromItem(j.larg, fc, before);
    const r = this.fromItem(j.rarg, fc, [...before, ...l]);
    const lcols = visibleCols(l);
    const rcols = visibleCols(r);
    this.charge(before.length + 2 * (l.length + r.length) + 2 * (lcols.length + rcols.length));
    const onCtx: Ctx = { scope: { parent: fc.parent, items: [...l, ...r] }, ctes: fc.ctes, windows: null };

    let usingNames: string[] | null = null;
    if (j.isNatural) {
      const rn = new Set(rcols.map((c) => c.name));
      usingNames = [];
      for (const c of lcols) if (rn.has(c.name) && !usingNames.includes(c.name)) usingNames.push(c.name);
    } else if (j.usingClause) {
      usingNames = strings(j.usingClause, 'USING column');
    }
    let joinCols: Col[];
    let usingAliasItem: NsItem | null = null;
    if (usingNames) {
      const merged: Col[] = [];
      const lUsed = new Set<Col>();
      const rUsed = new Set<Col>();
      for (const name of usingNames) {
        const lc = lcols.filter((c) => c.name === name);
        const rc = rcols.filter((c) => c.name === name);
        if (lc.length !== 1) throw new Refusal('unknown_column', `column ${q(name)} specified in USING clause does not exist (or is ambiguous) in left table`);
        if (rc.length !== 1) throw new Refusal('unknown_column', `column ${q(name)} specified in USING clause does not exist (or is ambiguous) in right table`);
        lUsed.add(lc[0]);
        rUsed.add(rc[0]);
        const a = this.use(lc[0]);
        const b = this.use(rc[0]);
        if (this.ops) this.operatorUse({ kind: 'using', left: a, right: b }); // USING/NATURAL compare with =
        this.addFilter(a);
        this.addFilter(b);
        // The merged value is one side's value (or COALESCE of both for FULL JOIN) and equals the
        // other side's when both exist: attribute it to both; passthrough only if it is one column.
        merged.push({ name, lin: alternative(a, b), reads: [...(lc[0].reads ?? []), ...(rc[0].reads ?? [])] });
      }
      joinCols = [...merged, ...lcols.filter((c) => !lUsed.has(c)), ...rcols.filter((c) => !rUsed.has(c))];
      if (j.join_using_alias) {
        checkFields('Alias', j.join_using_alias);
        usingAliasItem = { refname: String(j.join_using_alias.aliasname), schema: null, cols: merged, relVisible: true, colsVisible: false, base: null };
      }
    } else {
      joinCols = [...lcols, ...rcols];
    }
    if (j.quals) this.addFilter(this.ex(j.quals, onCtx));

    const out: NsItem[] = [];
    if (j.alias) {
      const cols = renameCols(joinCols, j.alias, 'join');
      out.push({ refname: String(j.alias.aliasname), schema: null, cols, relVisible: true, colsVisible: true, base: null });
    } else {
      out.push({ refname: null, schema: null, cols: joinCols, relVisible: false, colsVisible: true, base: null });
      for (const it of [...l, ...r]) out.push(it.colsVisible ? { ...it, colsVisible: false } : it);
      if (usingAliasItem) out.push(usingAliasItem);
    }
    return out;
  }

  // ----- select list -----
  /**
   * Select list (or RETURNING list). `top`: this is the statement's own output, where a bare
   * whole-row reference (`SELECT c FROM customer c`) is an output (redacted as opaque) rather than
   * a use of every column.
   */
  private targetList(list: N[], ctx: Ctx, top: boolean): OutCol[] {
    const outs: OutCol[] = [];
    this.charge(list.length);
    for (const t of list) {
      const rt = unwrap(t, 'ResTarget');
      if (rt.indirection) throw new Refusal('statement_not_allowed', 'unsupported select-list form');
      const val = rt.val as N | undefined;
      if (!val) throw new Refusal('statement_not_allowed', 'empty select-list item');
      if (hasOwn.call(val, 'ColumnRef')) {
        const cr = val.ColumnRef as N;
        checkFields('ColumnRef', cr);
        const fields: N[] = cr.fields ?? [];
        if (fields.length && hasOwn.call(fields[fields.length - 1], 'A_Star')) {
          if (rt.name !== undefined) throw new Refusal('invalid_sql', 'a star cannot have an alias');
          const star = this.starColumns(fields, ctx);
          this.charge(star.length);
          for (const c of star) outs.push({ name: c.name, lin: this.use(c) });
          continue;
        }
        if (top) {
          const lin = this.columnRef(cr, ctx, true);
          outs.push({ name: rt.name !== undefined ? String(rt.name) : figureColname(val, (s) => this.sublinkNames.get(s)), lin });
          continue;
        }
      }
      if (hasOwn.call(val, 'A_Indirection')) {
        const ind = (val.A_Indirection as N).indirection as N[] | undefined;
        if (ind && ind.length && hasOwn.call(ind[ind.length - 1], 'A_Star')) {
          throw new Refusal('statement_not_allowed', 'composite expansion (x).* is not supported in the select list');
        }
      }
      const lin = this.ex(val, ctx);
      outs.push({ name: rt.name !== undefined ? String(rt.name) : figureColname(val, (s) => this.sublinkNames.get(s)), lin });
    }
    return outs;
  }

  /** Columns a `*`, `t.*` or `s.t.*` select-list item expands to (current query level only). */
  private starColumns(fields: N[], ctx: Ctx): readonly Col[] {
    const names = fields.slice(0, -1).map((f) => {
      if (!hasOwn.call(f, 'String')) throw new Refusal('statement_not_allowed', 'malformed column reference');
      return String(f.String.sval);
    });
    if (names.length === 0) {
      const out: Col[] = [];
      this.charge(ctx.scope.items.length);
      for (const it of ctx.scope.items) if (it.colsVisible) for (const c of it.cols) out.push(c);
      this.charge(out.length);
      if (ctx.scope.items.length === 0) throw new Refusal('invalid_sql', 'SELECT * with no tables specified is not valid');
      return out;
    }
    const item = this.findItem(names, ctx.scope);
    if (!item) throw new Refusal('unknown_relation', `missing FROM-clause entry for ${q(names.join('.'))}`);
    if (item.base) this.touchRelation(item.base);
    return item.cols;
  }

  /** Finds a FROM item by `[refname]` or `[schema, table]`, searching the query levels outward. */
  private findItem(names: string[], scope: Scope | null): NsItem | null {
    if (names.length > 2) throw new Refusal('unknown_column', 'cross-database references are not supported');
    for (let s = scope; s; s = s.parent) {
      this.charge(s.items.length + 1);
      for (const it of s.items) {
        if (!it.relVisible || it.refname !== names[names.length - 1]) continue;
        if (names.length === 2 && it.schema !== names[0]) continue;
        this.reached(s);
        return it;
      }
    }
    return null;
  }

  // ----- ORDER BY / GROUP BY / DISTINCT ON / windows -----
  /** ORDER BY and DISTINCT ON items: a bare name or position refers to an output column first. */
  private sortTarget(node: N, ctx: Ctx, outs: readonly OutCol[]): Lin {
    const pos = integerConst(node);
    if (pos !== null) {
      if (pos < 1 || pos > outs.length) throw new Refusal('invalid_sql', `ORDER BY position ${pos} is not in select list`);
      return outs[pos - 1].lin;
    }
    const bare = bareName(node);
    if (bare !== null) {
      const hits = outs.filter((o) => o.name === bare);
      if (hits.length) return hits.reduce((a, o) => merge(a, o.lin), LIN_NONE);
    }
    return this.ex(node, ctx);
  }

  private sortBy(node: N, ctx: Ctx, outs: readonly OutCol[]): void {
    const sb = unwrap(node, 'SortBy');
    this.addFilter(this.sortTarget(sb.node, ctx, outs));
    this.sortOperator(sb);
  }

  /** GROUP BY item: input columns first, then output names/positions (PostgreSQL's rule). */
  private groupItem(node: N, ctx: Ctx, outs: readonly OutCol[]): void {
    if (hasOwn.call(node, 'GroupingSet')) {
      const gs = node.GroupingSet as N;
      checkFields('GroupingSet', gs);
      this.enter();
      try {
        for (const c of gs.content ?? []) this.groupItem(c, ctx, outs);
      } finally {
        this.leave();
      }
      return;
    }
    const pos = integerConst(node);
    if (pos !== null) {
      if (pos < 1 || pos > outs.length) throw new Refusal('invalid_sql', `GROUP BY position ${pos} is not in select list`);
      this.addFilter(outs[pos - 1].lin);
      return;
    }
    const bare = bareName(node);
    if (bare !== null) {
      const local = this.columnsAtLevel(bare, ctx.scope);
      if (local.length === 0) {
        const hits = outs.filter((o) => o.name === bare);
        if (hits.length) {
          this.addFilter(hits.reduce((a, o) => merge(a, o.lin), LIN_NONE));
          return;
        }
      }
    }
    this.addFilter(this.ex(node, ctx));
  }

  private windowDef(def: N, ctx: Ctx): Lin {
    checkFields('WindowDef', def);
    let lin = LIN_NONE;
    if (def.refname !== undefined) {
      const base = ctx.windows?.get(String(def.refname));
      if (!base) throw new Refusal('invalid_sql', `window ${q(def.refname)} does not exist`);
      lin = merge(lin, base);
    }
    for (const p of def.partitionClause ?? []) lin = merge(lin, this.ex(p, ctx));
    for (const o of def.orderClause ?? []) {
      const sb = unwrap(o, 'SortBy');
      lin = merge(lin, this.ex(sb.node, ctx));
      this.sortOperator(sb);
    }
    if (def.startOffset) lin = merge(lin, this.ex(def.startOffset, ctx));
    if (def.endOffset) lin = merge(lin, this.ex(def.endOffset, ctx));
    // Partitioning and ordering compare values (row_number() OVER (ORDER BY email) ranks them).
    this.consume(lin);
    return lin;
  }

  // ----- column references -----
  /** Visible columns named `name` at the innermost level only (no reads recorded). */
  private columnsAtLevel(name: string, scope: Scope): Col[] {
    const out: Col[] = [];
    this.charge(scope.items.length + 1);
    for (const it of scope.items) {
      if (!it.colsVisible) continue;
      this.charge(it.cols.length);
      for (const c of it.cols) if (c.name === name) out.push(c);
    }
    return out;
  }

  /**
   * A column reference's lineage. `output`: the reference is an entire item of the statement's own
   * select list, where a whole-row value is an output (opaque) rather than a use of its columns.
   */
  private columnRef(cr: N, ctx: Ctx, output = false): Lin {
    checkFields('ColumnRef', cr);
    const fields: N[] = cr.fields ?? [];
    const last = fields[fields.length - 1];
    if (!last) throw new Refusal('statement_not_allowed', 'malformed column reference');
    if (hasOwn.call(last, 'A_Star')) {
      // `t.*` / `*` used as a value (function argument, ROW(...), comparison): a whole-row value.
      const cols = this.starColumns(fields, ctx);
      return this.wholeRowOf(cols, fields.length === 1 ? null : this.findItem(strs(fields.slice(0, -1)), ctx.scope), output);
    }
    const names = strs(fields);
    if (names.length > 3) throw new Refusal('unknown_column', 'cross-database references are not supported');
    if (names.length === 1) {
      const name = names[0];
      for (let s: Scope | null = ctx.scope; s; s = s.parent) {
        const hits = this.columnsAtLevel(name, s);
        if (hits.length) this.reached(s);
        if (hits.length === 1) return this.use(hits[0]);
        if (hits.length > 1) {
          // Ambiguous (PostgreSQL refuses to run it): treat as reading every candidate.
          let lin = LIN_NONE;
          for (const h of hits) lin = merge(lin, this.use(h));
          return this.calc(lin);
        }
      }
      const item = this.findItem([name], ctx.scope);
      if (item) return this.wholeRowOf(item.cols, item, output);
      throw new Refusal('unknown_column', `unknown column ${q(name)}`);
    }
    // [rel, col] / [schema, rel, col], else [col, field] / [rel, col, field] (composite field selection).
    const relNames = names.slice(0, -1);
    const colName = names[names.length - 1];
    const item = this.findItem(relNames, ctx.scope);
    if (item) {
      const hits = item.cols.filter((c) => c.name === colName);
      if (hits.length === 0) throw new Refusal('unknown_column', `unknown column ${q(relNames.join('.') + '.' + colName)}`);
      if (hits.length === 1) return this.use(hits[0]);
      let lin = LIN_NONE;
      for (const h of hits) lin = merge(lin, this.use(h));
      return this.calc(lin); // ambiguous (PostgreSQL refuses it): every candidate counts as used
    }
    // Field of a composite column: `a.f` (column a) or `t.a.f` (column a of t).
    const compositeExists = names.length === 2 ? this.hasColumn(names[0], ctx.scope) : !!this.findItem([names[0]], ctx.scope);
    if (!compositeExists) throw new Refusal('unknown_column', `unknown column ${q(names.join('.'))} (no such FROM item or column)`);
    const inner = this.columnRef({ fields: fields.slice(0, -1) }, ctx);
    return this.calc(inner); // a field taken out of a composite value
  }

  /** True when a column named `name` is visible at some query level (nothing recorded). */
  private hasColumn(name: string, scope: Scope | null): boolean {
    for (let s = scope; s; s = s.parent) if (this.columnsAtLevel(name, s).length) return true;
    return false;
  }

  /**
   * A whole-row value over `cols` (of `item` when known). Its lineage carries every column; unless
   * it is an entire item of the statement's select list (`output`), every column is also a
   * non-output use (`row_to_json(c)`, `c = c2`, `count(c)`, `SELECT c` in a sub-select, …).
   */
  private wholeRowOf(cols: readonly Col[], item: NsItem | null, output = false): Lin {
    const lins: Lin[] = [];
    this.charge(cols.length);
    for (const c of cols) lins.push(this.use(c));
    let w = wholeRow(lins);
    if (item?.base) {
      // Every column of the base relation, also those hidden by nothing here (defensive).
      this.readAll(item.base);
      const k = tableKey(item.base.schema, item.base.name);
      if (!w.opq || !w.opq.has(k)) {
        const opq = new Map<string, RelRef>(w.opq ?? []);
        opq.set(k, { schema: item.base.schema, table: item.base.name });
        w = { src: w.src, pass: false, opq };
      }
    }
    if (!output) this.consume(w);
    return w;
  }

  // ----- expressions -----
  private exList(list: N[] | undefined, ctx: Ctx, lin: Lin = LIN_NONE): Lin {
    if (list) for (const e of list) lin = merge(lin, this.ex(e, ctx));
    return lin;
  }

  private funcCall(fc: N, ctx: Ctx): { lin: Lin; routine: PreparedRoutine } {
    checkFields('FuncCall', fc);
    const fname = strings(fc.funcname, 'function name');
    const routine = this.resolveFunction(fname);
    const bare = fname[fname.length - 1].toLowerCase();
    if (bare === 'current_setting') this.checkSetting(fc.args ?? []);
    const args: N[] = fc.args ?? [];
    // A plain `count(col)` reveals only how many values are not null: listed in `countUses`
    // (allowed for masked columns, its result is still redacted) instead of `nonOutputUses`.
    const plainCount =
      bare === 'count' &&
      this.onlyBuiltIn(fname) &&
      args.length === 1 &&
      !hasOwn.call(args[0], 'NamedArgExpr') &&
      !fc.agg_star &&
      !fc.agg_distinct &&
      !fc.agg_within_group &&
      !fc.func_variadic &&
      !(fc.agg_order && fc.agg_order.length);
    let lin = LIN_NONE;
    for (const a of args) {
      let al: Lin;
      if (hasOwn.call(a, 'NamedArgExpr')) {
        const na = a.NamedArgExpr as N;
        checkFields('NamedArgExpr', na);
        al = this.ex(na.arg, ctx);
      } else al = this.ex(a, ctx);
      if (plainCount && al.pass && al.src) {
        for (const [k, v] of al.src) this.countUses.set(k, v);
      } else this.consume(al);
      lin = merge(lin, al);
    }
    for (const o of fc.agg_order ?? []) {
      const sb = unwrap(o, 'SortBy');
      lin = merge(lin, this.calc(this.ex(sb.node, ctx)));
      this.sortOperator(sb);
    }
    if (fc.agg_filter) lin = merge(lin, this.calc(this.ex(fc.agg_filter, ctx)));
    if (fc.over) lin = merge(lin, this.calc(this.over(fc.over, ctx)));
    if (routine.schema === 'pg_catalog') {
      const first = args.length > 0 && !hasOwn.call(args[0], 'NamedArgExpr') ? constString(args[0]) : null;
      const why = regconfigCallReason(routine.name, args.length, first);
      if (why) throw new Refusal('function_not_allowed', `function ${q(routine.name)} is not allowed ${why}`);
    }
    if (routine.schema === 'pg_catalog' && fc.args) {
      const why = allocationSizeReason(routine.name, fc.args as N[]);
      if (why) throw new Refusal('function_not_allowed', `resource limit: ${why}`);
    }
    // In a view's definition, a function whose body is not analysed may read any relation (views.ts).
    if (this.viewBody && !this.onlyBuiltIn(fname)) return { lin: merge(derive(lin), LIN_ANY), routine };
    return { lin: derive(lin), routine };
  }

  /** True when every candidate for this operator name is a `pg_catalog` one (false without an operator list). */
  private builtInOperator(nameList: N[] | undefined): boolean {
    const parts = strings(nameList, 'operator name');
    if (parts.length === 2) return parts[0] === 'pg_catalog';
    const all = this.cat.operatorsByName?.get(parts[0]);
    return !!all && all.every((r) => r.schema === 'pg_catalog' || !this.cat.path.includes(r.schema));
  }

  /** True when every candidate PostgreSQL could pick for this function name is a `pg_catalog` one. */
  private onlyBuiltIn(parts: string[]): boolean {
    if (parts.length === 2) return parts[0] === 'pg_catalog';
    const all = this.cat.functionsByName.get(parts[0]) ?? [];
    return all.every((r) => r.schema === 'pg_catalog' || !this.cat.path.includes(r.schema));
  }

  /**
   * `current_setting(name [, missing_ok])`: only a constant setting name from a short list of
   * harmless client-facing settings (the rest reveal the server: port, addresses, paths, version).
   */
  private checkSetting(args: N[]): void {
    let nameArg: N | undefined;
    for (let i = 0; i < args.length; i++) {
      const a = args[i];
      if (hasOwn.call(a, 'NamedArgExpr')) {
        const na = a.NamedArgExpr as N;
        if (String(na.name) === 'setting_name') nameArg = na.arg;
      } else if (i === 0) nameArg = a;
    }
    let v: N | undefined = nameArg;
    if (v && hasOwn.call(v, 'TypeCast')) v = (v.TypeCast as N).arg;
    const c = v && hasOwn.call(v, 'A_Const') ? (v.A_Const as N) : null;
    const name = c && c.sval && typeof c.sval.sval === 'string' ? c.sval.sval : null;
    const why = deniedSettingReason(name);
    if (why) throw new Refusal('function_not_allowed', `function "current_setting" is not allowed ${why}`);
  }

  private over(w: N, ctx: Ctx): Lin {
    checkFields('WindowDef', w);
    if (w.name !== undefined && !w.partitionClause && !w.orderClause && w.refname === undefined) {
      // OVER w
      const base = ctx.windows?.get(String(w.name));
      if (!base) throw new Refusal('invalid_sql', `window ${q(w.name)} does not exist`);
      return base;
    }
    return this.windowDef(w, ctx);
  }

  /**
   * Lineage of a sub-select used as an expression; its query level sees the current one. The value
   * carries, as derived lineage, every column the sub-select consumed (`perRowQuery`: its filters
   * decide the value as much as its select list does) as well as its test expression and select
   * list. A scalar sub-select stays passthrough only when it consumed nothing.
   */
  private subLink(sl: N, ctx: Ctx): Lin {
    checkFields('SubLink', sl);
    const kind = String(sl.subLinkType);
    let lin = LIN_NONE;
    if (sl.testexpr) lin = merge(lin, this.ex(sl.testexpr, ctx));
    if (sl.operName && !this.ops) this.checkOperator(sl.operName);
    this.consume(lin);
    const { out: sub, control } = this.perRowQuery(sl.subselect, ctx.scope, ctx.ctes);
    if (this.ops) {
      this.ops.noteOutputs(sl, sub.cols.map((c) => c.lin));
      if (kind === 'ANY_SUBLINK' || kind === 'ALL_SUBLINK' || kind === 'ROWCOMPARE_SUBLINK') this.operatorUse({ kind: 'sublink', sublink: sl });
    }
    if (sub.cols.length) this.sublinkNames.set(sl, sub.cols[0].name);
    switch (kind) {
      case 'EXISTS_SUBLINK':
        // The result depends on the sub-select's rows (its filters: `control`); its select list
        // counts as used too (conservative: `EXISTS (SELECT c.phone INTERSECT …)` is caught by
        // INTERSECT, `EXISTS (SELECT *)` lists every column).
        this.consumeAll(sub.cols);
        return derive(sub.cols.reduce((a, c) => merge(a, c.lin), control));
      case 'EXPR_SUBLINK':
        // A scalar sub-select's single value flows on unchanged (passthrough chains survive) when
        // nothing else decides it; otherwise it is derived from its filters too.
        if (sub.cols.length === 1) return control === LIN_NONE ? sub.cols[0].lin : merge(sub.cols[0].lin, control);
        return this.calc(sub.cols.reduce((a, c) => merge(a, c.lin), control));
      case 'ARRAY_SUBLINK':
      case 'MULTIEXPR_SUBLINK':
      case 'ANY_SUBLINK':
      case 'ALL_SUBLINK':
      case 'ROWCOMPARE_SUBLINK':
        return this.calc(sub.cols.reduce((a, c) => merge(a, c.lin), merge(lin, control)));
      default:
        throw new Refusal('statement_not_allowed', `unsupported sub-select kind ${kind}`);
    }
  }

  private jsonValue(v: N | undefined, ctx: Ctx): Lin {
    if (!v) return LIN_NONE;
    const jv = hasOwn.call(v, 'JsonValueExpr') ? unwrapJson(v.JsonValueExpr, 'JsonValueExpr') : (checkFields('JsonValueExpr', v), v);
    let lin = this.ex(jv.raw_expr, ctx);
    if (jv.formatted_expr) lin = merge(lin, this.ex(jv.formatted_expr, ctx));
    if (jv.format) checkFields('JsonFormat', jv.format);
    return lin;
  }

  private jsonOutput(o: N | undefined): void {
    if (!o) return;
    checkFields('JsonOutput', o);
    this.typeName(o.typeName);
    if (o.returning) checkFields('JsonReturning', o.returning);
  }

  private jsonAggCtor(c: N | undefined, ctx: Ctx): Lin {
    if (!c) return LIN_NONE;
    checkFields('JsonAggConstructor', c);
    this.jsonOutput(c.output);
    let lin = LIN_NONE;
    if (c.agg_filter) lin = merge(lin, this.ex(c.agg_filter, ctx));
    for (const o of c.agg_order ?? []) {
      const sb = unwrap(o, 'SortBy');
      lin = merge(lin, this.ex(sb.node, ctx));
      this.sortOperator(sb);
    }
    if (c.over) lin = merge(lin, this.over(c.over, ctx));
    return lin;
  }

  private jsonBehavior(b: N | undefined, ctx: Ctx): Lin {
    if (!b) return LIN_NONE;
    checkFields('JsonBehavior', b);
    return this.ex(b.expr, ctx);
  }

  /** Lineage of an expression; records reads, functions, parameters on the way. */
  ex(node: N | undefined, ctx: Ctx): Lin {
    const lin = this.exNode(node, ctx);
    if (this.ops && node) this.ops.note(node, lin);
    return lin;
  }

  private exNode(node: N | undefined, ctx: Ctx): Lin {
    if (!node) return LIN_NONE;
    const type = nodeType(node);
    if (type === undefined) return LIN_NONE;
    const n = node[type] as N;
    this.enter();
    try {
      switch (type) {
        case 'ColumnRef':
          return this.columnRef(n, ctx);
        case 'A_Const':
          checkFields(type, n);
          if (n.sval && typeof n.sval.sval === 'string' && TIME_LITERAL.test(n.sval.sval)) this.cacheable = false;
          return LIN_NONE;
        case 'ParamRef':
          checkFields(type, n);
          if (typeof n.number === 'number' && n.number > this.maxParam) this.maxParam = n.number;
          return LIN_NONE;
        case 'A_Expr': {
          checkFields(type, n);
          const kind = String(n.kind);
          if (!A_EXPR_KINDS.has(kind)) throw new Refusal('statement_not_allowed', `unsupported operator form ${kind}`);
          const between = kind.startsWith('AEXPR_BETWEEN') || kind.startsWith('AEXPR_NOT_BETWEEN');
          if (!between && !this.ops) this.checkOperator(n.name);
          const value = this.calc(merge(this.ex(n.lexpr, ctx), this.ex(n.rexpr, ctx)));
          if (this.ops) this.operatorUse({ kind: 'expr', expr: n });
          // In a view's definition, an operator whose function is not analysed may read any relation (views.ts).
          return this.viewBody && !between && !this.builtInOperator(n.name) ? merge(value, LIN_ANY) : value;
        }
        case 'List':
          checkFields(type, n);
          return this.calc(this.exList(n.items, ctx));
        case 'BoolExpr':
          checkFields(type, n);
          return this.calc(this.exList(n.args, ctx));
        case 'NullTest':
        case 'BooleanTest':
          checkFields(type, n);
          return this.calc(this.ex(n.arg, ctx));
        case 'TypeCast': {
          checkFields(type, n);
          this.typeName(n.typeName);
          return this.calc(this.ex(n.arg, ctx));
        }
        case 'CollateClause':
          checkFields(type, n);
          strings(n.collname, 'collation name');
          return this.ex(n.arg, ctx); // same value, different collation: passthrough survives
        case 'FuncCall':
          return this.funcCall(n, ctx).lin;
        case 'A_Indirection': {
          checkFields(type, n);
          let ind: N[] = n.indirection ?? [];
          let lin: Lin | null = null;
          // `(c).col` where `c` is a FROM item (not a column): the same as `c.col`.
          const argName = bareName(n.arg);
          if (argName !== null && ind.length && hasOwn.call(ind[0], 'String') && !this.hasColumn(argName, ctx.scope) && this.findItem([argName], ctx.scope)) {
            lin = this.columnRef({ fields: [{ String: { sval: argName } }, ind[0]] }, ctx);
            ind = ind.slice(1);
            if (ind.length === 0) return lin;
          }
          // Subscripts and field selection compute on the value (and on the subscripts).
          lin = this.calc(lin ?? this.ex(n.arg, ctx));
          for (const i of ind) {
            const t = nodeType(i);
            if (t === 'String' || t === 'A_Star') continue;
            if (t !== 'A_Indices') throw new Refusal('statement_not_allowed', 'unsupported indirection');
            const ai = i.A_Indices as N;
            checkFields('A_Indices', ai);
            lin = merge(lin, this.calc(merge(this.ex(ai.lidx, ctx), this.ex(ai.uidx, ctx))));
          }
          return lin;
        }
        case 'A_ArrayExpr':
          checkFields(type, n);
          return this.calc(this.exList(n.elements, ctx));
        case 'RowExpr':
          checkFields(type, n);
          return this.calc(this.exList(n.args, ctx));
        case 'CoalesceExpr':
        case 'MinMaxExpr':
          checkFields(type, n);
          return this.calc(this.exList(n.args, ctx));
        case 'SQLValueFunction': {
          checkFields(type, n);
          const why = deniedValueFunctionReason(String(n.op));
          if (why) throw new Refusal('function_not_allowed', why);
          this.cacheable = false;
          return LIN_NONE;
        }
        case 'CaseExpr': {
          checkFields(type, n);
          let lin = this.ex(n.arg, ctx);
          for (const w of n.args ?? []) {
            const cw = unwrap(w, 'CaseWhen');
            lin = merge(lin, merge(this.ex(cw.expr, ctx), this.ex(cw.result, ctx)));
            if (this.ops && n.arg) this.operatorUse({ kind: 'case', arg: n.arg, when: cw.expr }); // simple CASE: arg = expr
          }
          return this.calc(merge(lin, this.ex(n.defresult, ctx)));
        }
        case 'SubLink':
          return this.subLink(n, ctx);
        case 'GroupingFunc':
          checkFields(type, n);
          return this.calc(this.exList(n.args, ctx));
        case 'NamedArgExpr':
          checkFields(type, n);
          return this.ex(n.arg, ctx);
        case 'XmlExpr': {
          checkFields(type, n);
          let lin = this.exList(n.args, ctx);
          for (const na of n.named_args ?? []) {
            const rt = unwrap(na, 'ResTarget');
            lin = merge(lin, this.ex(rt.val, ctx));
          }
          return this.calc(lin);
        }
        case 'XmlSerialize':
          checkFields(type, n);
          this.typeName(n.typeName);
          return this.calc(this.ex(n.expr, ctx));
        case 'MultiAssignRef':
          checkFields(type, n);
          return this.calc(this.ex(n.source, ctx));
        case 'SetToDefault':
        case 'MergeSupportFunc':
          checkFields(type, n);
          return LIN_NONE;
        case 'JsonObjectConstructor': {
          checkFields(type, n);
          this.jsonOutput(n.output);
          let lin = LIN_NONE;
          for (const kv of n.exprs ?? []) {
            const p = unwrap(kv, 'JsonKeyValue');
            lin = merge(lin, merge(this.ex(p.key, ctx), this.jsonValue(p.value, ctx)));
          }
          return this.calc(lin);
        }
        case 'JsonArrayConstructor': {
          checkFields(type, n);
          this.jsonOutput(n.output);
          let lin = LIN_NONE;
          for (const v of n.exprs ?? []) lin = merge(lin, this.jsonValue(v, ctx));
          return this.calc(lin);
        }
        case 'JsonArrayQueryConstructor': {
          checkFields(type, n);
          this.jsonOutput(n.output);
          if (n.format) checkFields('JsonFormat', n.format);
          const { out: sub, control } = this.perRowQuery(n.query, ctx.scope, ctx.ctes);
          return this.calc(sub.cols.reduce((a, c) => merge(a, c.lin), control));
        }
        case 'JsonObjectAgg': {
          checkFields(type, n);
          const ctor = hasOwn.call(n, 'constructor') ? (n.constructor as N) : undefined;
          let lin = this.jsonAggCtor(ctor, ctx);
          if (n.arg) {
            checkFields('JsonKeyValue', n.arg);
            lin = merge(lin, merge(this.ex(n.arg.key, ctx), this.jsonValue(n.arg.value, ctx)));
          }
          return this.calc(lin);
        }
        case 'JsonArrayAgg': {
          checkFields(type, n);
          const ctor = hasOwn.call(n, 'constructor') ? (n.constructor as N) : undefined;
          return this.calc(merge(this.jsonAggCtor(ctor, ctx), this.jsonValue(n.arg, ctx)));
        }
        case 'JsonParseExpr':
        case 'JsonSerializeExpr':
          checkFields(type, n);
          this.jsonOutput(n.output);
          return this.calc(this.jsonValue(n.expr, ctx));
        case 'JsonScalarExpr':
          checkFields(type, n);
          this.jsonOutput(n.output);
          return this.calc(this.ex(n.expr, ctx));
        case 'JsonIsPredicate':
          checkFields(type, n);
          if (n.format) checkFields('JsonFormat', n.format);
          return this.calc(this.ex(n.expr, ctx));
        case 'JsonFuncExpr': {
          checkFields(type, n);
          this.jsonOutput(n.output);
          let lin = merge(this.jsonValue(n.context_item, ctx), this.ex(n.pathspec, ctx));
          for (const p of n.passing ?? []) {
            const a = unwrap(p, 'JsonArgument');
            lin = merge(lin, this.jsonValue(a.val, ctx));
          }
          lin = merge(lin, merge(this.jsonBehavior(n.on_empty, ctx), this.jsonBehavior(n.on_error, ctx)));
          return this.calc(lin);
        }
        case 'CurrentOfExpr':
          throw new Refusal('statement_not_allowed', 'WHERE CURRENT OF (cursors) is not allowed');
        default:
          throw new Refusal('statement_not_allowed', `unsupported SQL construct: ${type}`);
      }
    } finally {
      this.leave();
    }
  }

  private typeName(t: N | undefined): void {
    if (!t) return;
    checkFields('TypeName', t);
    if (t.pct_type || t.setof) throw new Refusal('statement_not_allowed', 'unsupported type reference');
    const names = strings(t.names, 'type name');
    if (names.length > 2) throw new Refusal('statement_not_allowed', 'cross-database type references are not supported');
    const typeNameOnly = names[names.length - 1];
    if (names.length === 1 || names[0] === 'pg_catalog') {
      const why = deniedTypeReason(typeNameOnly);
      if (why) throw new Refusal('function_not_allowed', `type ${q(names.join('.'))} is not allowed: it ${why}`);
    }
    this.rowTypeUse(names);
    // A type that exists nowhere answers like a missing relation (issue 12, Build 4).
    if (!typeNameResolves(this.cat, names)) throw new Refusal('unknown_relation', `unknown type ${q(names.join('.'))}`);
    const unsafe = this.cat.unsafeTypes.get(names[names.length - 1]);
    if (unsafe) {
      const hit = names.length === 2 ? unsafe.includes(names[0]) : unsafe.some((sch) => this.cat.path.includes(sch));
      if (hit) throw new Refusal('function_not_allowed', `type ${q(names.join('.'))} runs user code (domain CHECK or input function) and cannot be used in a cast`);
    }
    for (const m of t.typmods ?? []) {
      const mt = nodeType(m);
      if (mt !== 'A_Const' && mt !== 'ColumnRef') throw new Refusal('statement_not_allowed', 'unsupported type modifier');
      if (mt === 'A_Const') checkFields('A_Const', m.A_Const);
      else strs((m.ColumnRef as N).fields ?? []); // e.g. INTERVAL field names are constants
    }
    for (const b of t.arrayBounds ?? []) if (!hasOwn.call(b, 'Integer')) throw new Refusal('statement_not_allowed', 'unsupported array bound');
    const sized = names.length === 1 || names[0] === 'pg_catalog' ? typeModifierReason(typeNameOnly, t.typmods) : null;
    if (sized) throw new Refusal('function_not_allowed', `resource limit: ${sized}`);
  }

  /**
   * A relation's row type used as a type (`NULL::employee`, `CAST(x AS employee)`, `employee[]`,
   * a column definition list) reveals the relation's shape (`jsonb_populate_record(NULL::employee,
   * '{}')` lists every column): it counts as reading every column, so authorization refuses it to
   * callers who may not read the relation. Unqualified names are matched against every relation
   * of that name on the search path (over-approximation when a built-in type has the same name).
   */
  private rowTypeUse(names: string[]): void {
    const name = names[names.length - 1];
    if (names.length === 2) {
      if (SYSTEM_SCHEMAS.has(names[0])) return;
      const rel = this.cat.relations.get(relKey(names[0], name));
      if (rel) this.readAll(rel);
      return;
    }
    for (const sch of this.cat.path) {
      if (sch === 'pg_catalog') continue;
      const rel = this.cat.relations.get(relKey(sch, name));
      if (rel) this.readAll(rel);
    }
  }

  // ----- DML -----
  private dmlCols(rel: PreparedRelation, list: N[] | undefined, ctx: Ctx | null): string[] {
    const out: string[] = [];
    for (const t of list ?? []) {
      const rt = unwrap(t, 'ResTarget');
      const name = String(rt.name);
      if (!rel.columnSet.has(name)) throw new Refusal('unknown_column', `unknown column ${q(name)} of ${q(rel.name)}`);
      if (!out.includes(name)) out.push(name);
      for (const i of rt.indirection ?? []) {
        const it = nodeType(i);
        if (it === 'String') continue;
        if (it !== 'A_Indices' || !ctx) throw new Refusal('statement_not_allowed', 'unsupported assignment target');
        const ai = i.A_Indices as N;
        checkFields('A_Indices', ai);
        this.consume(this.ex(ai.lidx, ctx));
        this.consume(this.ex(ai.uidx, ctx));
      }
    }
    return out;
  }

  private returning(rc: N | undefined, ctx: Ctx, top: boolean): OutCol[] {
    if (!rc) return [];
    checkFields('ReturningClause', rc);
    if (rc.options && rc.options.length) throw new Refusal('statement_not_allowed', 'RETURNING WITH (OLD/NEW aliases) is not supported');
    return this.targetList(rc.exprs ?? [], ctx, top);
  }

  /** Values assigned to written columns (SET, VALUES, INSERT … SELECT): a non-output use. */
  private written(lin: Lin): void {
    this.consume(lin);
  }

  private addWrite(rel: PreparedRelation, operation: WriteAccess['operation'], columns: string[], hasWhere: boolean): void {
    this.hasWrite = true;
    this.cacheable = false;
    const ordered = rel.columnNames.filter((c) => columns.includes(c));
    this.writes.push({ schema: rel.schema, table: rel.name, operation, columns: ordered, hasWhere });
  }

  private insert(s: N, parent: Scope | null, outer: CteEnv | null): QueryOut {
    const ctes = s.withClause ? this.withClause(s.withClause, parent, outer) : outer;
    const rv = s.relation as N;
    const rel = this.writeTarget(rv);
    const target = this.relationItem(rel, rv.alias);
    const cols = s.cols ? this.dmlCols(rel, s.cols, null) : [...rel.columnNames];
    if (s.selectStmt) for (const o of this.query(s.selectStmt, parent, ctes).cols) this.written(o.lin);
    this.addWrite(rel, 'insert', cols, false);
    if (s.onConflictClause) {
      const oc = s.onConflictClause as N;
      checkFields('OnConflictClause', oc);
      const excluded: NsItem = {
        refname: 'excluded',
        schema: null,
        cols: rel.columnNames.map((c) => ({ name: c, lin: LIN_NONE, reads: null })),
        relVisible: true,
        colsVisible: false,
        base: null,
      };
      const ctx: Ctx = { scope: { parent, items: [target, excluded] }, ctes, windows: null };
      if (oc.infer) {
        const inf = oc.infer as N;
        checkFields('InferClause', inf);
        for (const e of inf.indexElems ?? []) {
          const ie = unwrap(e, 'IndexElem');
          if (ie.name !== undefined) this.addFilter(this.columnRef({ fields: [{ String: { sval: ie.name } }] }, { ...ctx, scope: { parent, items: [target] } }));
          if (ie.expr) this.addFilter(this.ex(ie.expr, { ...ctx, scope: { parent, items: [target] } }));
        }
        if (inf.whereClause) this.addFilter(this.ex(inf.whereClause, { ...ctx, scope: { parent, items: [target] } }));
      }
      if (oc.action === 'ONCONFLICT_UPDATE') {
        const setCols = this.dmlCols(rel, oc.targetList, ctx);
        for (const t of oc.targetList ?? []) this.written(this.ex(t.ResTarget.val, ctx));
        if (oc.whereClause) this.addFilter(this.ex(oc.whereClause, ctx));
        this.addWrite(rel, 'update', setCols, true);
      } else if (oc.action !== 'ONCONFLICT_NOTHING') {
        throw new Refusal('statement_not_allowed', 'unsupported ON CONFLICT action');
      }
    }
    const rctx: Ctx = { scope: { parent, items: [target] }, ctes, windows: null };
    return { cols: this.returning(s.returningClause, rctx, s === this.topBody) };
  }

  private update(s: N, parent: Scope | null, outer: CteEnv | null): QueryOut {
    const ctes = s.withClause ? this.withClause(s.withClause, parent, outer) : outer;
    const rv = s.relation as N;
    const rel = this.writeTarget(rv);
    const items: NsItem[] = [this.relationItem(rel, rv.alias)];
    for (const f of s.fromClause ?? []) for (const it of this.fromItem(f, { parent, ctes }, items)) items.push(it);
    const ctx: Ctx = { scope: { parent, items }, ctes, windows: null };
    const setCols = this.dmlCols(rel, s.targetList, ctx);
    for (const t of s.targetList ?? []) {
      const v = t.ResTarget.val as N;
      if (v && hasOwn.call(v, 'MultiAssignRef') && v.MultiAssignRef.colno !== 1) {
        checkFields('MultiAssignRef', v.MultiAssignRef);
        continue; // the shared source is analysed once, with column 1
      }
      this.written(this.ex(v, ctx));
    }
    if (s.whereClause) this.addFilter(this.ex(s.whereClause, ctx));
    this.addWrite(rel, 'update', setCols, !!s.whereClause);
    return { cols: this.returning(s.returningClause, ctx, s === this.topBody) };
  }

  private del(s: N, parent: Scope | null, outer: CteEnv | null): QueryOut {
    const ctes = s.withClause ? this.withClause(s.withClause, parent, outer) : outer;
    const rv = s.relation as N;
    const rel = this.writeTarget(rv);
    const items: NsItem[] = [this.relationItem(rel, rv.alias)];
    for (const f of s.usingClause ?? []) for (const it of this.fromItem(f, { parent, ctes }, items)) items.push(it);
    const ctx: Ctx = { scope: { parent, items }, ctes, windows: null };
    if (s.whereClause) this.addFilter(this.ex(s.whereClause, ctx));
    this.addWrite(rel, 'delete', [...rel.columnNames], !!s.whereClause);
    return { cols: this.returning(s.returningClause, ctx, s === this.topBody) };
  }

  private mergeStmt(s: N, parent: Scope | null, outer: CteEnv | null): QueryOut {
    const ctes = s.withClause ? this.withClause(s.withClause, parent, outer) : outer;
    const rv = s.relation as N;
    const rel = this.writeTarget(rv);
    const items: NsItem[] = [this.relationItem(rel, rv.alias)];
    for (const it of this.fromItem(s.sourceRelation, { parent, ctes }, EMPTY_SCOPE_ITEMS)) items.push(it);
    const ctx: Ctx = { scope: { parent, items }, ctes, windows: null };
    if (s.joinCondition) this.addFilter(this.ex(s.joinCondition, ctx));
    const cols = new Set<string>();
    for (const w of s.mergeWhenClauses ?? []) {
      const mw = unwrap(w, 'MergeWhenClause');
      if (mw.condition) this.addFilter(this.ex(mw.condition, ctx));
      switch (mw.commandType) {
        case 'CMD_UPDATE':
          for (const c of this.dmlCols(rel, mw.targetList, ctx)) cols.add(c);
          for (const t of mw.targetList ?? []) this.written(this.ex(t.ResTarget.val, ctx));
          break;
        case 'CMD_INSERT': {
          const named = mw.targetList ? this.dmlCols(rel, mw.targetList, ctx) : rel.columnNames;
          for (const c of named) cols.add(c);
          for (const v of mw.values ?? []) this.written(this.ex(v, ctx));
          break;
        }
        case 'CMD_DELETE':
          for (const c of rel.columnNames) cols.add(c);
          break;
        case 'CMD_NOTHING':
          break;
        default:
          throw new Refusal('statement_not_allowed', 'unsupported MERGE action');
      }
    }
    this.addWrite(rel, 'merge', [...cols], true);
    return { cols: this.returning(s.returningClause, ctx, s === this.topBody) };
  }
}

const EXPLAIN_OPTIONS = new Set(['verbose', 'costs', 'settings', 'generic_plan', 'buffers', 'wal', 'timing', 'summary', 'format', 'memory', 'serialize']);

const A_EXPR_KINDS = new Set([
  'AEXPR_OP',
  'AEXPR_OP_ANY',
  'AEXPR_OP_ALL',
  'AEXPR_DISTINCT',
  'AEXPR_NOT_DISTINCT',
  'AEXPR_NULLIF',
  'AEXPR_IN',
  'AEXPR_LIKE',
  'AEXPR_ILIKE',
  'AEXPR_SIMILAR',
  'AEXPR_BETWEEN',
  'AEXPR_NOT_BETWEEN',
  'AEXPR_BETWEEN_SYM',
  'AEXPR_NOT_BETWEEN_SYM',
]);

/** Value of a bare string constant (`'english'`), else null (casts, parameters, columns, expressions). */
function constString(node: N): string | null {
  const c = node && hasOwn.call(node, 'A_Const') ? (node.A_Const as N) : null;
  return c && c.sval && typeof c.sval.sval === 'string' ? c.sval.sval : null;
}

function unwrapJson(n: N, type: string): N {
  checkFields(type, n);
  return n;
}

function strs(fields: N[]): string[] {
  return fields.map((f) => {
    if (!f || !hasOwn.call(f, 'String')) throw new Refusal('statement_not_allowed', 'malformed column reference');
    return String(f.String.sval);
  });
}

function visibleCols(items: readonly NsItem[]): Col[] {
  const out: Col[] = [];
  for (const it of items) if (it.colsVisible) for (const c of it.cols) out.push(c);
  return out;
}

/** An integer constant (ORDER BY 1 / GROUP BY 2), else null. */
function integerConst(node: N): number | null {
  const c = node && hasOwn.call(node, 'A_Const') ? (node.A_Const as N) : null;
  if (!c) return null;
  if (c.ival && typeof c.ival === 'object') return typeof c.ival.ival === 'number' ? c.ival.ival : 0;
  return null;
}

/** A bare (single-field) column name, else null. */
function bareName(node: N): string | null {
  const cr = node && hasOwn.call(node, 'ColumnRef') ? (node.ColumnRef as N) : null;
  if (!cr || !cr.fields || cr.fields.length !== 1 || !hasOwn.call(cr.fields[0], 'String')) return null;
  return String(cr.fields[0].String.sval);
}

/**
 * Unqualified relation names referenced anywhere below `node` that are in `names` (used to order
 * WITH RECURSIVE items). A cheap structural scan; over-approximation only affects ordering.
 */
function referencedNames(node: unknown, names: ReadonlySet<string>, charge: (n: number) => void): Set<string> {
  const out = new Set<string>();
  // Breadth first, stopping once every name is found: a self-reference sits near the top of a
  // recursive term, nested sub-selects below it are not scanned again at every level.
  const queue: unknown[] = [node];
  let steps = 0;
  for (let i = 0; i < queue.length && out.size < names.size; i++) {
    if (++steps === 256) {
      charge(steps);
      steps = 0;
    }
    const cur = queue[i];
    queue[i] = undefined;
    if (!cur || typeof cur !== 'object') continue;
    if (Array.isArray(cur)) {
      for (const x of cur) queue.push(x);
      continue;
    }
    const o = cur as N;
    if (typeof o.relname === 'string' && o.schemaname === undefined && names.has(o.relname)) out.add(o.relname);
    for (const k in o) if (typeof o[k] === 'object') queue.push(o[k]);
  }
  charge(steps);
  return out;
}

