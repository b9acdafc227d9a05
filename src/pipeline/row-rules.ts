/**
 * Row rules in interlock_query (issue 27, docs/row-rules.md): after steps 3 and 4 decide that the
 * statement may run, this step decides which of its relations are row-ruled for the caller and
 * rewrites every reference to them to InterLock's row views (src/sql/row-rules/rewrite.ts):
 * `security_barrier` views in schema `interlock_rows` of the source whose WHERE is the caller's
 * combined rule, with each `identity.<attr>` read from a custom setting the reader binds as a
 * parameter right before the statement (src/sources/postgres/read.ts). PostgreSQL then evaluates
 * none of the agent's non-leakproof expressions on a hidden row.
 *
 * A view whose lineage (the server's dependency records, src/sql/view-lineage.ts) reaches a ruled
 * relation is read through its copy in `interlock_rows`, its definition rewritten the same way.
 *
 * Fails closed (`row_rule_unenforceable`) where the rewrite cannot be proven to cover every path
 * to a ruled relation's rows: a materialized view over a ruled relation, a view calling user code
 * or whose lineage is not recorded, a write through a view over a ruled relation, a write whose foreign keys'
 * referential actions write a ruled relation or that runs user triggers or rules (rt27w finding B), a user-defined function, EXPLAIN, MERGE into a ruled relation on a server older than PostgreSQL 17, a name that is both a
 * CTE and a ruled relation, a relation whose descendants carry a different rule, a rule the table
 * cannot evaluate, a write through a view over a relation ruled for reads or writes (rt27z Z3). Writes are rewritten too (planRowRules): their target to a check-option view. A caller without an attribute a rule needs
 * cannot read the table (`row_rule_attribute_missing`).
 */
import { createHash } from 'node:crypto';
import type { AccessEvaluator } from '../governance/evaluator';
import { relationRowRule, ruleGroups, rowRuleText as ruleText, sameRowRule, type RelationRowRule } from '../governance/row-rules';
import { NO_POLICY_ROW_RESTRICTIONS, type PolicyRowRestrictions } from '../governance/policies';
import type { SqlAnalysisOk } from '../sql/types';
import type { SourceCatalog } from '../sql/catalog-types';
import { catalogHierarchy, type RelationHierarchy } from '../sql/hierarchy';
import { prepareCatalog, relKey, type PreparedRelation } from '../sql/prepared-catalog';
import {
  attributeListText,
  attributeText,
  ATTRIBUTE_SETTING_PREFIX,
  LIST_SETTING_PREFIX,
  parseRowPredicate,
  quoteIdent,
  renderRowPredicate,
  stringLiteral,
  attributeFitsType,
  RowPredicateError,
  RowPredicateTableError,
  type RowPredicate,
} from '../sql/row-rules/predicate';
import { cutToBytes } from '../sql/mask-sql';
import { rewriteRowRules, ROW_VIEW_SCHEMA, RowRewriteRefusal, type RelationReference } from '../sql/row-rules/rewrite';
import { viewFacts, viewLineage } from '../sql/view-lineage';
import { referentialReach } from '../sql/referential-reach';
import type { ToolOutcome } from './types';

/**
 * One view InterLock creates in `interlock_rows`: a row view `SELECT * FROM [ONLY] schema.table
 * WHERE predicateSql`, or (when `definition` is set) the copy of view `schema.table` whose stored
 * query, `definition`, reads row views and copies in place of the ruled relations and views it
 * names (issue 27 item 1), with the view's column names, its `security_barrier` and
 * `security_invoker = true`, created with the catalogue's search path (the one its text was printed for).
 */
export interface RowView {
  name: string;
  schema: string;
  table: string;
  /** True for the view read in place of `ONLY schema.table`. */
  only: boolean;
  predicateSql: string;
  /**
   * True for a write target's view (issue 27): created `WITH CASCADED CHECK OPTION`, so PostgreSQL
   * refuses (SQLSTATE 44000) an inserted or updated row its WHERE does not accept.
   */
  check?: boolean;
  /** A view's copy only: its rewritten defining SELECT. */
  definition?: string;
  /** A view's copy only: its column names (the original view's). */
  columns?: readonly string[];
  /** A view's copy only: the original view's `security_barrier`. */
  securityBarrier?: boolean;
  /** A view's copy only: the search path `definition` is resolved with (the catalogue's). */
  searchPath?: readonly string[];
}

/** The rewrite of one statement for one caller. */
export interface RowRulePlan {
  /** The statement with every ruled reference replaced by its view. */
  sql: string;
  views: RowView[];
  /** Settings to bind before the statement: `interlock.attr.<a>` / `interlock.attrs.<a>` and their texts. */
  settings: Array<[string, string]>;
  /**
   * For the audit: each ruled relation and the hash of its rule's text (never attribute values);
   * `write: true` for a write's target (the hash of its read and write rules).
   */
  applied: Array<{ relation: string; rule: string; write?: true }>;
  /** Hash of the views (so of the rules' text) and the bound values, for the result cache key. */
  bindingKey: string;
  /** The names of the caller's attributes the rules read (sorted, each once): a queued write keeps their claim values (issue 27). */
  attributes: string[];
}

/** Outcome: nothing ruled, refused (with a log-only reason), or the plan to run. */
export type RowRuleDecision = { kind: 'none' } | { kind: 'refused'; outcome: ToolOutcome; reason: string } | { kind: 'ruled'; plan: RowRulePlan };

/** The first server_version_num that runs MERGE on an auto-updatable view with its check option (PostgreSQL 17). */
export const MERGE_ON_VIEW_VERSION = 170000;

/** The source server's version for planning: `input.serverVersionNum` (approval: read live), else the catalogue's; 0 when neither is known. */
function serverVersionNum(input: Pick<RowRuleInput, 'serverVersionNum' | 'catalog'>): number {
  return input.serverVersionNum ?? input.catalog.serverVersionNum ?? 0;
}

/** `server_version_num` as people write it: 150004 → "PostgreSQL 15", 0 → "an unrecorded version". */
function versionText(v: number): string {
  return v > 0 ? `PostgreSQL ${Math.floor(v / 10000)}` : 'an unrecorded version (scanned before versions were recorded)';
}

/** What the step needs. `attributes` are the caller's (Identity.attributes). */
export interface RowRuleInput {
  evaluator: AccessEvaluator;
  sourceId: string;
  analysis: SqlAnalysisOk;
  catalog: SourceCatalog;
  hierarchy?: RelationHierarchy;
  attributes: Record<string, unknown> | undefined;
  /** The text that will run (the agent's, or its masking wrapper). */
  sql: string;
  /** The caller's applicable `restrict_rows` policy predicates (default none), ANDed with the roles' rules. */
  policyRows?: PolicyRowRestrictions;
  /**
   * The source server's `server_version_num`, when read live (an approved write reads it on the
   * source: src/approvals/execute.ts); absent: the catalogue's (`SourceCatalog.serverVersionNum`).
   * Decides whether a MERGE into a ruled table may run (PostgreSQL 17 or later).
   */
  serverVersionNum?: number;
  /**
   * The source's `trusted_functions` (settings, "schema.name" texts): a rule comparing a column with
   * its type's own operator runs only when it lists the operator's function (rt48d R8; bindRowRules).
   */
  trustedFunctions?: unknown;
}

const predicates = new Map<string, RowPredicate | RowPredicateError>();
const MAX_CACHED_PREDICATES = 1000;

/** The checked predicate of a rule text (cached), or the error that makes it unusable. */
export function cachedPredicate(text: string): RowPredicate | RowPredicateError {
  let p = predicates.get(text);
  if (!p) {
    try {
      p = parseRowPredicate(text);
    } catch (err) {
      if (!(err instanceof RowPredicateError)) throw err;
      p = err;
    }
    if (predicates.size >= MAX_CACHED_PREDICATES) predicates.delete(predicates.keys().next().value as string);
    predicates.set(text, p);
  }
  return p;
}

/** A refusal that does not depend on the caller's attributes. */
type RowRuleRefusal = Extract<RowRuleDecision, { kind: 'refused' }>;

function unenforceable(reason: string): RowRuleRefusal {
  return { kind: 'refused', outcome: { kind: 'refusal', code: 'row_rule_unenforceable' }, reason };
}

const sha = (s: string): string => createHash('sha256').update(s).digest('hex');

/**
 * The byte length of a view name's readable prefix. PostgreSQL keeps the first 63 bytes of an
 * identifier: a prefix cut by characters (40 two-byte letters are 80 bytes) once made it cut the
 * hash off, so every rule's view of the table had one name (red team rt27w, finding A).
 */
const VIEW_PREFIX_BYTES = 40;

/**
 * The view name of a relation's rule: a readable prefix of at most 40 bytes and a hash of
 * everything the view holds (at most 57 bytes, so PostgreSQL never cuts the hash).
 */
function viewName(rel: PreparedRelation, only: boolean, predicateSql: string, check: boolean): string {
  return `${cutToBytes(rel.name, VIEW_PREFIX_BYTES)}_${sha(JSON.stringify([rel.schema, rel.name, only, rel.columnNames, predicateSql, ...(check ? ['check'] : [])])).slice(0, 16)}`;
}

/**
 * The part of `rule` (a view's own rule, rt27z finding Z5) written for its relation by name: role
 * allows whose resource is `schema.name` (or one of its columns) and policies whose `relations` list
 * `schema.name`; terms from wildcards are left out (dropping an ORed term only narrows). Null when
 * nothing is left.
 */
function namedFor(rule: RelationRowRule, policyRows: PolicyRowRestrictions): RelationRowRule | null {
  const exact = `${rule.schema}.${rule.table}`;
  const named = (t: { resource: string }) => t.resource === exact || t.resource.startsWith(`${exact}.`);
  const groups = ruleGroups(rule).map((g) => g.filter(named)).filter((g) => g.length > 0);
  const byName = policyRows.naming(rule.schema, rule.table);
  const restrictions = rule.restrictions.filter((r) => byName.has(r.policy));
  if (groups.length === 0 && restrictions.length === 0) return null;
  const terms = [...new Map(groups.flat().map((t) => [t.rows, t])).values()].sort((a, b) => (a.rows < b.rows ? -1 : a.rows > b.rows ? 1 : 0));
  return { schema: rule.schema, table: rule.table, terms, restrictions, ...(groups.length > 1 ? { groups } : {}) };
}

/** Whether any row rule (a role allow's `rows` or a policy's `restrict_rows`) may apply to the caller on the source. */
export function hasAnyRowRules(evaluator: AccessEvaluator, sourceId: string, policyRows: PolicyRowRestrictions | undefined): boolean {
  return evaluator.hasRowRules(sourceId) || (policyRows?.any ?? false);
}

/**
 * What one caller's attributes must supply for one rule term: each attribute read as a single value
 * (`interlock.attr.<a>`) or a list (`interlock.attrs.<a>`), and the column type each single value is
 * compared with (the value must fit it).
 */
interface AttributeNeed {
  kind: 'need';
  single: string[];
  list: string[];
  bindTypes: Array<[string, string]>;
  /**
   * The functions ("schema.name") of the column types' own operators the term's SQL runs (red team
   * rt48d R8; ownOperatorsOf): run only when the source's trusted_functions lists each, else the
   * caller is refused row_rule_unenforceable (bindRowRules). Absent: none.
   */
  functions?: string[];
}

/** A refusal that does not depend on the caller's attributes, met at its place in the planning order. */
interface ShapeRefusal {
  kind: 'refuse';
  decision: RowRuleRefusal;
}

/**
 * The attribute-independent part of planRowRules for one statement text, caller's rules and
 * catalogue: deterministic, so it is cached (AnalysisCache.analyse → rowRules, keyed by the
 * analysis key and the run text). `none`/`refused` answer every caller alike. `ruled` holds the
 * rewritten text, the views and the audit list, and `steps`: in the order planning met them, what
 * each rule term needs of the attributes, and the refusal (if any) that planning met after them.
 * bindRowRules replays the steps with one caller's attributes, so the first failure in that order
 * decides, as an uncached plan would.
 */
export type RowRuleShape =
  | { kind: 'none' }
  | RowRuleRefusal
  | { kind: 'ruled'; sql: string; views: RowView[]; applied: RowRulePlan['applied']; steps: Array<AttributeNeed | ShapeRefusal>; attributes: string[] };

/**
 * Decides the row rules of one analysed statement for one caller and rewrites it (see the module
 * comment for every refusal). For a write (issue 27, docs/row-rules.md "Writes"), the target of
 * INSERT, UPDATE and DELETE (a CTE's too) becomes a check-option view of the table whose WHERE is
 * the read rule AND the write rule: UPDATE and DELETE see only those rows, and PostgreSQL refuses
 * (SQLSTATE 44000, whole statement) an inserted or updated row that does not match them; every
 * other reference (FROM, USING, sub-selects, INSERT … SELECT) reads the read view. MERGE into a
 * ruled table gets the same check-option view as its target on PostgreSQL 17 or later (the
 * server's version: `input.serverVersionNum`, else the catalogue's) and is refused on older servers,
 * which run MERGE on no view. Synchronous; requires
 * initSqlParser(). Uncached: the same as bindRowRules(shapeRowRules(input), input.attributes).
 */
export function planRowRules(input: RowRuleInput): RowRuleDecision {
  return bindRowRules(shapeRowRules(input), input.attributes, input.trustedFunctions);
}

/** ownOperatorsOf's answer per catalogue object (a snapshot is immutable). */
const ownOperatorCache = new WeakMap<SourceCatalog, ReadonlyMap<string, { schema: string; fn: string }>>();

/**
 * The types' own comparison operators of a catalogue, keyed `"<type oid>\u0000<op>"`: each operator
 * (`operatorCode`) named = <> < <= > >= whose two operands are one type outside pg_catalog and which
 * lives in that type's own schema (citext's `=` beside citext), with its schema and its function
 * ("schema.name"). This is the operator PostgreSQL picks for `col = value` of that type (an exact
 * match) when the type's schema is on the path; the row view names it by the schema recorded here,
 * never through a search path (rt47b J3b). An operator someone else made for the type in another
 * schema is not one, nor any outside pg_catalog for a built-in type (`public.=(text, text)` stays
 * unused: pg_catalog's is named). Empty for snapshots without operatorCode or type schemas.
 */
export function ownOperatorsOf(catalog: SourceCatalog): ReadonlyMap<string, { schema: string; fn: string }> {
  let out = ownOperatorCache.get(catalog);
  if (out) return out;
  const typeSchema = new Map((catalog.operatorResolution?.types ?? []).map((t) => [t[0], t[1]]));
  const map = new Map<string, { schema: string; fn: string }>();
  for (const [schema, name, left, right, fnSchema, fnName] of catalog.operatorCode ?? []) {
    if (!['=', '<>', '<', '<=', '>', '>='].includes(name) || left !== right || left === 0 || fnSchema === null || fnName === null) continue;
    const ts = typeSchema.get(left);
    if (ts === undefined || ts === 'pg_catalog' || ts !== schema) continue;
    map.set(`${left}\u0000${name}`, { schema, fn: `${fnSchema}.${fnName}` });
  }
  out = map;
  ownOperatorCache.set(catalog, out);
  return out;
}

/**
 * The attribute-independent part of planRowRules (RowRuleShape): the refusals, the rewrite (two
 * parses) and the views; `input.attributes` is not read. Synchronous; requires initSqlParser().
 */
export function shapeRowRules(input: Omit<RowRuleInput, 'attributes'>): RowRuleShape {
  const { evaluator, sourceId, analysis } = input;
  const policyRows = input.policyRows ?? NO_POLICY_ROW_RESTRICTIONS;
  if (!hasAnyRowRules(evaluator, sourceId, policyRows)) return { kind: 'none' };
  const cat = prepareCatalog(input.catalog);
  const hierarchy = input.hierarchy ?? catalogHierarchy(input.catalog);
  const rules = new Map<string, RelationRowRule | null>();
  /**
   * The rule of a relation for `action`; a read's for the columns used of it (`columns`: a column
   * allow lifts the rule for its own columns only, src/governance/row-rules.ts).
   */
  const ruleOf = (schema: string, table: string, action: 'read' | 'write' = 'read', columns?: readonly string[]): RelationRowRule | null => {
    const key = `${action}\u0000${relKey(schema, table)}\u0000${JSON.stringify(columns ?? null)}`;
    if (!rules.has(key)) rules.set(key, relationRowRule(evaluator, sourceId, schema, table, hierarchy, policyRows, action, columns));
    return rules.get(key)!;
  };
  // The statement's own references use the columns it reads of each relation; a view's copy reads
  // every column of its base relations (which of them reach the agent is not followed here).
  const used = new Map(analysis.reads.map((r) => [relKey(r.schema, r.table), r.columns]));
  const usedOf = (schema: string, table: string): readonly string[] => used.get(relKey(schema, table)) ?? [];
  const allOf = (schema: string, table: string): readonly string[] => cat.relations.get(relKey(schema, table))?.columnNames ?? [];
  const readRule = (schema: string, table: string, columns: readonly string[] = usedOf(schema, table)) => ruleOf(schema, table, 'read', columns);
  const touched = [...analysis.reads, ...analysis.writes];
  if (touched.some((r) => r.schema === ROW_VIEW_SCHEMA)) return unenforceable('the statement names the row-view schema');
  // A read of a parent returns its descendants' rows (a write to it reaches them): they must carry the same rule.
  const checks: Array<[{ schema: string; table: string }, 'read' | 'write']> = [...touched.map((r) => [r, 'read'] as [typeof r, 'read']), ...analysis.writes.map((w) => [w, 'write'] as [typeof w, 'write'])];
  // A write's target is written, inserted or deleted as a whole row: its read and write rules are
  // those of every column of it, so a column allow without `rows` (its own column on every row) does
  // not lift the rule of the row it belongs to (red team rt27z finding Z4: `allow write
  // public.note.body` let `UPDATE note SET owner_id = 9`, `DELETE` and `INSERT` reach every row;
  // rt27m finding 1, the read side: `allow read public.note.note_id` let `DELETE FROM note WHERE
  // note_id = 2` or an INSERT of another owner's row run).
  for (const [r, action] of checks) {
    const cols = action === 'read' ? usedOf(r.schema, r.table) : allOf(r.schema, r.table);
    for (const act of action === 'read' ? (['read'] as const) : (['read', 'write'] as const)) {
      const own = ruleOf(r.schema, r.table, act, cols);
      for (const d of hierarchy.descendants(r.schema, r.table)) {
        if (!sameRowRule(own, ruleOf(d.schema, d.name, act, cols))) return unenforceable(`${r.schema}.${r.table} has a descendant with another row rule`);
      }
    }
  }
  const targetRuled = (w: { schema: string; table: string }) => readRule(w.schema, w.table, allOf(w.schema, w.table)) !== null || ruleOf(w.schema, w.table, 'write', allOf(w.schema, w.table)) !== null;
  const ruledTouched = [...analysis.reads.filter((r) => readRule(r.schema, r.table) !== null), ...analysis.writes.filter(targetRuled)];
  // MERGE into a ruled table (a CTE's too) runs on the target's check-option view: PostgreSQL 17
  // and later run MERGE on an auto-updatable view and enforce its check option; older servers run
  // MERGE on no view, and no other route gives its WHEN clauses the rule, so it is refused there.
  if (analysis.writes.some((w) => w.operation === 'merge' && targetRuled(w)) && !(serverVersionNum(input) >= MERGE_ON_VIEW_VERSION)) {
    return unenforceable(`MERGE into a row-ruled table needs PostgreSQL 17 or later (MERGE on the check-option view that restricts it); this source runs ${versionText(serverVersionNum(input))} (use INSERT, UPDATE or DELETE, or rescan the source after an upgrade)`);
  }
  // Referential actions, triggers and rules run without the row views (rt27w finding B): a write
  // whose foreign keys' actions write a relation ruled for the caller, or that runs user triggers
  // or rules, is refused (src/sql/referential-reach.ts). Checked whether or not the target is ruled.
  if (analysis.writes.length) {
    const reach = referentialReach(input.catalog, hierarchy, analysis.writes);
    if (reach.unknown) return unenforceable(`the catalogue does not record the foreign keys and triggers of ${reach.unknown}, so what this write reaches beyond its target is unknown: rescan the source`);
    if (reach.hooks) return unenforceable(`this write runs the user ${reach.hooks.kind} of ${reach.hooks.relation}, which PostgreSQL runs without the caller's row rules`);
    /**
     * A relation (or a descendant) with a read or write rule for the caller, over any of its columns
     * (over every column too: a write allow without `rows` on one column must not hide the rule of the
     * rows an action writes whole, rt27z finding Z4).
     */
    const ruledAnyhow = (r: { schema: string; name: string }) =>
      [r, ...hierarchy.descendants(r.schema, r.name)].some(
        (x) => readRule(x.schema, x.name, allOf(x.schema, x.name)) !== null || readRule(x.schema, x.name, []) !== null || ruleOf(x.schema, x.name, 'write', allOf(x.schema, x.name)) !== null || ruleOf(x.schema, x.name, 'write') !== null,
      );
    const hit = reach.reached.find(ruledAnyhow);
    if (hit) return unenforceable(`this write reaches rows of ${hit.schema}.${hit.name}, which is row-ruled for the caller, through a foreign key's ${hit.action} action on ${hit.from.schema}.${hit.from.name}; PostgreSQL runs it without the caller's row rules`);
    // A write through a view reaches its base relations' rows with no check-option view in between:
    // refused when a base relation (or a descendant) has a read OR a write rule for the caller. The
    // view loop below knows read rules only, so a base ruled for writes alone (a write allow's `rows`,
    // a write `restrict_rows` policy) let `UPDATE v` reach every row (red team rt27z finding Z3).
    for (const w of analysis.writes) {
      const kind = cat.relations.get(relKey(w.schema, w.table))?.kind;
      if (kind !== 'view' && kind !== 'materialized_view') continue;
      const lin = viewLineage(input.catalog, w.schema, w.table);
      if (lin.unknown.length) return unenforceable(`the lineage of view ${w.schema}.${w.table} is not recorded in the catalogue (${lin.unknown[0]}): rescan the source`);
      if (lin.bases.some(ruledAnyhow)) return unenforceable(`a write through view ${w.schema}.${w.table}, whose lineage reaches a row-ruled relation`);
      // A rule written on the view itself has no check-option view either (rt27z finding Z5).
      if (ruledAnyhow({ schema: w.schema, name: w.table })) return unenforceable(`a write through view ${w.schema}.${w.table}, which is row-ruled for the caller`);
    }
  }
  // Views (item 1): classified by their lineage as the server records it (src/sql/view-lineage.ts).
  const viewStates = new Map<string, 'clean' | 'ruled' | RowRuleRefusal>();
  /** 'clean' (no ruled relation behind it: read as is), 'ruled' (read through its copy), or a refusal. */
  const classify = (schema: string, name: string): 'clean' | 'ruled' | RowRuleRefusal => {
    const key = relKey(schema, name);
    let st = viewStates.get(key);
    if (st === undefined) {
      viewStates.set(key, unenforceable(`view ${schema}.${name} is part of a cycle`));
      st = classifyView(schema, name);
      viewStates.set(key, st);
    }
    return st;
  };
  const classifyView = (schema: string, name: string): 'clean' | 'ruled' | RowRuleRefusal => {
    const v = `${schema}.${name}`;
    const lin = viewLineage(input.catalog, schema, name);
    if (lin.unknown.length) return unenforceable(`the lineage of view ${v} is not recorded in the catalogue (${lin.unknown[0]}): rescan the source`);
    if (lin.userCode.length) return unenforceable(`view ${v} calls user-defined code (${lin.userCode[0]}) and the caller has row rules on the source`);
    let ruled = false;
    for (const b of lin.bases) {
      const own = readRule(b.schema, b.name, allOf(b.schema, b.name));
      for (const d of hierarchy.descendants(b.schema, b.name)) {
        if (!sameRowRule(own, readRule(d.schema, d.name, allOf(b.schema, b.name)))) return unenforceable(`${b.schema}.${b.name}, read by view ${v}, has a descendant with another row rule`);
      }
      if (own !== null) ruled = true;
    }
    if (!ruled) return 'clean';
    // A materialized view's rows were computed when it was refreshed, without the caller's rule.
    if (cat.relations.get(relKey(schema, name))?.kind === 'materialized_view') return unenforceable(`materialized view ${v} holds rows of a row-ruled relation computed without the rule`);
    for (const m of lin.materialized) {
      const inner = classify(m.schema, m.name);
      if (inner !== 'clean') return inner === 'ruled' ? unenforceable(`materialized view ${m.schema}.${m.name} holds rows of a row-ruled relation computed without the rule`) : inner;
    }
    return 'ruled';
  };
  let ruledViews = false;
  for (const r of touched) {
    const k = cat.relations.get(relKey(r.schema, r.table))?.kind;
    if (k !== 'view' && k !== 'materialized_view') continue;
    const st = classify(r.schema, r.table);
    if (st === 'ruled') ruledViews = true;
    else if (st !== 'clean') return st;
    // A write through a view over a ruled relation would reach rows no check-option view restricts.
    if (st === 'ruled' && analysis.writes.some((w) => w.schema === r.schema && w.table === r.table)) return unenforceable(`a write through view ${r.schema}.${r.table}, whose lineage reaches a row-ruled relation`);
  }
  // Paths to rows the rewrite cannot see into: user functions' bodies.
  const userFunction = analysis.functions.find((f) => f.schema !== 'pg_catalog' && f.schema !== 'information_schema');
  if (userFunction) return unenforceable(`the statement calls a user-defined function (${userFunction.schema}.${userFunction.name}) and the caller has row rules on the source`);
  // A user-defined operator's function is a user function too (rt27: `SELECT 1 =%= 2` read a ruled table unfiltered).
  if (analysis.userOperators) return unenforceable('the statement uses a user-defined operator and the caller has row rules on the source');
  if (ruledTouched.length === 0 && !ruledViews) return { kind: 'none' };
  if (analysis.statement === 'ExplainStmt') return unenforceable('EXPLAIN of a statement reading row-ruled tables');

  const created = new Map<string, RowView>();
  const applied = new Map<string, { relation: string; rule: string; write?: true }>();
  const steps: Array<AttributeNeed | ShapeRefusal> = [];
  let refused = false;
  const refuse = (d: RowRuleRefusal): null => {
    steps.push({ kind: 'refuse', decision: d });
    refused = true;
    return null;
  };
  const predicateSqlOf = new Map<string, string>();
  const columnsOf = (rel: PreparedRelation) => input.catalog.relations.find((r) => r.schema === rel.schema && r.name === rel.name)?.columns ?? [];
  const types = (rel: PreparedRelation) => new Map(columnsOf(rel).map((c) => [c.name, c.dataType]));
  const ownOperators = ownOperatorsOf(input.catalog);
  /** The SQL of one predicate text over `rel`, noting the attributes it binds; null after a refusal. */
  const one = (rel: PreparedRelation, rows: string, origin: string): string | null => {
    const p = cachedPredicate(rows);
    if (p instanceof RowPredicateError) return refuse(unenforceable(`the row rule of ${origin} is invalid: ${p.message}`));
    const bindTypes: Array<[string, string]> = [];
    const functions = new Set<string>();
    let sql: string;
    try {
      const cols = types(rel);
      const oids = new Map(columnsOf(rel).map((c) => [c.name, c.typeOid]));
      // A column type's own operator (citext's `=`), named by the schema the catalogue records it in.
      const own = (column: string, op: string): string | null => {
        const oid = oids.get(column);
        const hit = oid === undefined ? undefined : ownOperators.get(`${oid}\u0000${op}`);
        if (!hit) return null;
        functions.add(hit.fn);
        return hit.schema;
      };
      sql = renderRowPredicate(p, (c) => cols.get(c), (a, t) => bindTypes.push([a, t]), own);
    } catch (err) {
      if (!(err instanceof RowPredicateTableError)) throw err;
      return refuse(unenforceable(`the row rule of ${origin} cannot apply to ${rel.schema}.${rel.name}: ${err.message}`));
    }
    steps.push({ kind: 'need', single: [...p.attributes], list: [...p.listAttributes], bindTypes, ...(functions.size > 0 ? { functions: [...functions].sort() } : {}) });
    return sql;
  };
  /** The combined predicate SQL of a rule (terms ORed, restrictions ANDed); null after a refusal. */
  const compile = (rel: PreparedRelation, rule: RelationRowRule, action: 'read' | 'write'): string | null => {
    const key = `${action}\u0000${relKey(rel.schema, rel.name)}\u0000${ruleText(rule)}`;
    const done = predicateSqlOf.get(key);
    if (done !== undefined) return done;
    const rendered = new Map<string, string>();
    for (const term of rule.terms) {
      const sql = one(rel, term.rows, `${term.resource} in role ${term.role}`);
      if (sql === null) return null;
      rendered.set(term.rows, sql);
    }
    // The roles' part: an AND (over used columns covered differently) of ORs (src/governance/row-rules.ts).
    const and: string[] = ruleGroups(rule).map((g) => (g.length === 1 ? rendered.get(g[0].rows)! : `(${g.map((t) => rendered.get(t.rows)!).join(' OR ')})`));
    for (const r of rule.restrictions) {
      const sql = one(rel, r.rows, `policy ${r.policy}`);
      if (sql === null) return null;
      and.push(sql);
    }
    const sql = and.length === 1 ? and[0] : `(${and.join(' AND ')})`;
    predicateSqlOf.set(key, sql);
    return sql;
  };
  const ruleHash = (...rs: Array<RelationRowRule | null>) => sha(JSON.stringify(rs.map((r) => (r ? ruleText(r) : null)))).slice(0, 16);
  /** Resolves references of the statement's text, or (`inView`) of a view definition's, whose relations are read whole. */
  const resolverFor = (inView: boolean) => (ref: RelationReference, target: boolean): string | null => {
    if (refused) return null;
    const schemas = ref.schema !== null ? [ref.schema] : cat.path;
    let rel: PreparedRelation | undefined;
    for (const s of schemas) if ((rel = cat.relations.get(relKey(s, ref.name)))) break;
    if (!rel) return null;
    if (rel.kind === 'view' || rel.kind === 'materialized_view') {
      const st = classify(rel.schema, rel.name);
      if (st !== 'clean' && st !== 'ruled') return refuse(st);
      if (target) return st === 'clean' ? null : refuse(unenforceable(`a write through view ${rel.schema}.${rel.name}, whose lineage reaches a row-ruled relation`));
      const inner = st === 'ruled' ? viewCopy(rel) : null;
      if (st === 'ruled' && inner === null) return null;
      // A rule written on the view itself (a role allow's `rows` on it, a `restrict_rows` policy
      // naming it) filters the view's rows: a barrier view over its copy, or over the view when it is
      // read as is. It was ignored before (red team rt27z finding Z5).
      const whole = readRule(rel.schema, rel.name, inView ? allOf(rel.schema, rel.name) : usedOf(rel.schema, rel.name));
      // Over a ruled lineage the base relations' rules already hold: only what is written for the view
      // by name adds to them (a wildcard such as `public.*` meant for its tables need not fit its columns).
      const own = whole && inner !== null ? namedFor(whole, policyRows) : whole;
      if (own === null) return inner;
      const predicateSql = compile(rel, own, 'read');
      if (predicateSql === null) return null;
      const from = { schema: inner === null ? rel.schema : ROW_VIEW_SCHEMA, table: inner ?? rel.name };
      const name = viewName(rel, false, JSON.stringify([from.schema, from.table, predicateSql]), false);
      created.set(name, { name, schema: from.schema, table: from.table, only: false, predicateSql });
      applied.set(`r\u0000${rel.schema}.${rel.name}\u0000${ruleHash(own)}`, { relation: `${rel.schema}.${rel.name}`, rule: ruleHash(own) });
      return name;
    }
    // A view's relations are read whole; a write's target is a whole row (see the checks above).
    const read = readRule(rel.schema, rel.name, inView || target ? allOf(rel.schema, rel.name) : usedOf(rel.schema, rel.name));
    const write = target ? ruleOf(rel.schema, rel.name, 'write', allOf(rel.schema, rel.name)) : null;
    if (read === null && write === null) return null;
    const parts: string[] = [];
    for (const [rule, action] of [[read, 'read'], [write, 'write']] as const) {
      if (rule === null) continue;
      const sql = compile(rel, rule, action);
      if (sql === null) return null;
      parts.push(sql);
    }
    const predicateSql = parts.length === 1 ? parts[0] : `(${parts.join(' AND ')})`;
    const name = viewName(rel, !ref.inh, predicateSql, target);
    created.set(name, { name, schema: rel.schema, table: rel.name, only: !ref.inh, predicateSql, ...(target ? { check: true } : {}) });
    const label = `${rel.schema}.${rel.name}`;
    if (target) applied.set(`w\u0000${label}`, { relation: label, rule: ruleHash(read, write), write: true });
    else applied.set(`r\u0000${label}\u0000${ruleHash(read)}`, { relation: label, rule: ruleHash(read) });
    return name;
  };
  const copies = new Map<string, string>();
  /** The copy of a view whose lineage is ruled (its definition rewritten, its relations read whole), or null after a refusal. */
  const viewCopy = (rel: PreparedRelation): string | null => {
    const key = relKey(rel.schema, rel.name);
    const done = copies.get(key);
    if (done !== undefined) return done;
    const facts = viewFacts(input.catalog, rel.schema, rel.name)?.view;
    if (!rel.definition || !facts) return refuse(unenforceable(`the definition of view ${rel.schema}.${rel.name} is not recorded in the catalogue: rescan the source`));
    let inner;
    try {
      inner = rewriteRowRules(rel.definition, resolverFor(true));
    } catch (err) {
      if (!(err instanceof RowRewriteRefusal)) throw err;
      return refuse(unenforceable(`view ${rel.schema}.${rel.name}: ${err.message}`));
    }
    if (refused) return null;
    if (inner.replaced === 0) return refuse(unenforceable(`view ${rel.schema}.${rel.name} reads a row-ruled relation that its definition does not name`));
    const searchPath = [...input.catalog.searchPath];
    const name = `${cutToBytes(rel.name, VIEW_PREFIX_BYTES)}_${sha(JSON.stringify(['view', rel.schema, rel.name, rel.columnNames, inner.sql, facts.securityBarrier, searchPath])).slice(0, 16)}`;
    copies.set(key, name);
    created.set(name, { name, schema: rel.schema, table: rel.name, only: false, predicateSql: '', definition: inner.sql, columns: rel.columnNames, securityBarrier: facts.securityBarrier, searchPath });
    return name;
  };
  let rewritten = { sql: input.sql, replaced: 0 };
  try {
    rewritten = rewriteRowRules(input.sql, resolverFor(false));
  } catch (err) {
    if (!(err instanceof RowRewriteRefusal)) throw err;
    // Met after every step so far: a caller failing one of them is refused for that instead.
    // TABLESAMPLE (task hnu43 item 3): the agent is told why, not only the code's common text.
    if (err.reason === 'tablesample') refuse({ ...unenforceable(err.message), outcome: { kind: 'refusal', code: 'row_rule_unenforceable', message: `${err.message}. Remove TABLESAMPLE (filter or LIMIT the rows instead); tables without a row rule for you can still be sampled.` } });
    else refuse(unenforceable(err.message));
  }
  if (!refused && rewritten.replaced === 0) refuse(unenforceable('no reference to the row-ruled relations was found in the text'));
  const attributes = [...new Set(steps.flatMap((st) => (st.kind === 'need' ? [...st.single, ...st.list] : [])))].sort();
  return { kind: 'ruled', sql: rewritten.sql, views: [...created.values()], applied: [...applied.values()].sort((a, b) => (a.relation < b.relation ? -1 : a.relation > b.relation ? 1 : a.write ? 1 : -1)), steps, attributes };
}

/**
 * One caller's plan from a statement's shape (shapeRowRules): replays its steps with `attributes`
 * (Identity.attributes) — the first missing or unfit attribute refuses `row_rule_attribute_missing`,
 * a refusal step met first refuses as it says, and so does a column type's own operator whose
 * function `trustedFunctions` (the source's settings) does not list (row_rule_unenforceable, rt48d
 * R8: read per call, as the source's settings change without a rescan) — and collects the settings
 * to bind and the binding key. Cheap (no parsing): this is what a cached plan costs per call.
 */
export function bindRowRules(shape: RowRuleShape, attributes: Record<string, unknown> | undefined, trustedFunctions?: unknown): RowRuleDecision {
  if (shape.kind !== 'ruled') return shape;
  const settings = new Map<string, string>();
  for (const step of shape.steps) {
    if (step.kind === 'refuse') return step.decision;
    // A column type's own operator runs its function on every row of the view (rt48d R8): only one
    // the source trusts, as an agent's own `col = value` over that type needs (untrustedFunction).
    const untrusted = step.functions?.find((f) => !(Array.isArray(trustedFunctions) && trustedFunctions.includes(f)));
    if (untrusted !== undefined) return unenforceable(`a row rule compares a column with its type's own operator, whose function ${untrusted} the source's trusted_functions does not list`);
    for (const [attrs, prefix, text] of [[step.single, ATTRIBUTE_SETTING_PREFIX, attributeText], [step.list, LIST_SETTING_PREFIX, attributeListText]] as const) {
      for (const a of attrs) {
        const raw = attributes && Object.prototype.hasOwnProperty.call(attributes, a) ? attributes[a] : undefined;
        const value = raw === undefined ? null : text(raw);
        if (value === null) {
          return { kind: 'refused', outcome: { kind: 'refusal', code: 'row_rule_attribute_missing', message: `A row rule on a table this statement touches needs the identity attribute "${a}"${prefix === LIST_SETTING_PREFIX ? ' (a list)' : ''}, which this identity does not have (or not as a usable value), so the table is unreadable for it; an operator can set the attribute.` }, reason: `attribute ${a} missing` };
        }
        settings.set(prefix + a, value);
      }
    }
    // A value the column's type would not accept (an operator's typo, e.g. employee_id=abc) refuses
    // the caller here, not as a failure of the agent's statement.
    const unfit = step.bindTypes.find(([a, t]) => !attributeFitsType(attributes?.[a], t));
    if (unfit) {
      return { kind: 'refused', outcome: { kind: 'refusal', code: 'row_rule_attribute_missing', message: `A row rule on a table this statement touches compares the identity attribute "${unfit[0]}" with a column of type ${unfit[1]}, and this identity's value is not of that type, so the table is unreadable for it; an operator can correct the attribute.` }, reason: `attribute ${unfit[0]} not a ${unfit[1]}` };
    }
  }
  const bound = [...settings.entries()].sort(([a], [b]) => (a < b ? -1 : 1));
  return {
    kind: 'ruled',
    plan: {
      sql: shape.sql,
      views: shape.views,
      settings: bound,
      applied: shape.applied,
      // The views name the rules' rendered text by hash, the settings the bound values: two callers
      // share a cached result only when both are equal (found by the differential test: the access
      // fingerprint alone names resources, not rules).
      bindingKey: sha(JSON.stringify([bound, shape.views.map((v) => v.name).sort()])),
      // Named once by the shape: every attribute it binds, all present when the plan is made.
      attributes: shape.attributes,
    },
  };
}

/**
 * The statements that create a row view when it is missing and let the source's reader role read
 * it: the schema, the view (`security_barrier` so only leakproof quals of the agent's are pushed
 * below the rule; `security_invoker` so the reader's own privileges and any RLS of the table still
 * apply), and the grants. `reader` is the reader role's name. Run by a role that owns the schema,
 * or may create it (CREATE on the database) when it does not exist yet.
 *
 * The view is created only when no view of that name with these options exists: its name is a
 * hash of everything it holds, so an existing one is the same view. CREATE OR REPLACE VIEW takes
 * an ACCESS EXCLUSIVE lock even when nothing changes, so re-running it (a gateway's first read
 * after a start, every approved write: red team rt27w, finding C) waited behind any running read
 * of the view and stalled every later reader of it. GRANT takes no lock on the view; it runs only
 * when the reader lacks the privilege.
 */
export function rowViewStatements(view: RowView, reader: string): string[] {
  const v = `${ROW_VIEW_SCHEMA}.${quoteIdent(view.name)}`;
  const copy = view.definition !== undefined;
  const options = copy ? [`security_barrier=${view.securityBarrier === true}`, 'security_invoker=true'] : ['security_barrier=true', 'security_invoker=true', ...(view.check ? ['check_option=cascaded'] : [])];
  const exists = `SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace WHERE n.nspname OPERATOR(pg_catalog.=) '${ROW_VIEW_SCHEMA}' AND c.relname OPERATOR(pg_catalog.=) ${stringLiteral(view.name)} AND c.relkind OPERATOR(pg_catalog.=) 'v' AND c.reloptions OPERATOR(pg_catalog.@>) ARRAY[${options.map(stringLiteral).join(', ')}]::pg_catalog.text[]`;
  const base = `${quoteIdent(view.schema)}.${quoteIdent(view.table)}`;
  // A user type in the predicate is named as format_type printed it for the scan's path; made now, the
  // name may resolve to a type created since in a schema earlier on that path (red team rt48c K5).
  let create = `CREATE OR REPLACE VIEW ${v} WITH (${options.map((o) => o.replace('=', ' = ')).join(', ')}) AS SELECT * FROM ${view.only ? 'ONLY ' : ''}${base} WHERE ${view.predicateSql}; IF (${rowViewForeignCodeSql(v, base)}) THEN RAISE EXCEPTION 'a row view resolves a function, operator, type or collation that is not its table''s (rescan the source)' USING ERRCODE = '${ROW_VIEW_STALE_SQLSTATE}'; END IF;`;
  if (copy) {
    // A view's copy: its text names relations as printed for the catalogue's search path, so it is
    // created under that path (set for the DO block's transaction only), whatever the writer's own.
    const ddl = `CREATE OR REPLACE VIEW ${v} (${(view.columns ?? []).map(quoteIdent).join(', ')}) WITH (security_barrier = ${view.securityBarrier === true}, security_invoker = true) AS ${view.definition!.trim().replace(/;\s*$/, '')}`;
    const path = (view.searchPath ?? []).map(quoteIdent).join(', ');
    let t = 'ddl';
    while (ddl.includes(`$${t}$`) || path.includes(`$${t}$`)) t += 'x';
    const text = `$${t}$`;
    // The text was printed for the catalogue's path when the source was scanned; parsed again now, a
    // name in it may resolve to a function, operator or type created since in a schema of that path
    // (an exact match beats pg_catalog's polymorphic or coerced candidate: red team rt48c K3), or a
    // relation name to a relation created since in a schema earlier on the path. The copy may depend
    // on no such object its original does not: else nothing is created and the read is refused
    // (row_rules_unavailable) until a scan prints the names qualified.
    const foreign = copyForeignCodeSql(v, `${quoteIdent(view.schema)}.${quoteIdent(view.table)}`);
    create = `PERFORM pg_catalog.set_config('search_path', ${text}${path}${text}, true); EXECUTE ${text}${ddl}${text}; IF (${foreign}) THEN RAISE EXCEPTION 'the copy of a view resolves a function, operator, type, collation or relation its original does not (rescan the source)' USING ERRCODE = '${ROW_VIEW_STALE_SQLSTATE}'; END IF;`;
  }
  const role = quoteIdent(reader);
  return [
    // CREATE SCHEMA IF NOT EXISTS checks CREATE on the database before it checks existence: a schema an
    // operator made for the writer role (`CREATE SCHEMA interlock_rows AUTHORIZATION <writer>`) is used as is.
    doBlock(`IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) '${ROW_VIEW_SCHEMA}') THEN CREATE SCHEMA ${ROW_VIEW_SCHEMA}; END IF;`),
    doBlock(`IF NOT EXISTS (${exists}) THEN ${create} END IF;`),
    // Only grants the reader lacks: two GRANTs on one catalogue row at once fail the second ("tuple
    // concurrently updated"), which failed approved writes racing another gateway (rt27w finding D).
    doBlock(`IF NOT pg_catalog.has_schema_privilege(${stringLiteral(reader)}, '${ROW_VIEW_SCHEMA}', 'USAGE') THEN GRANT USAGE ON SCHEMA ${ROW_VIEW_SCHEMA} TO ${role}; END IF;`),
    doBlock(`IF NOT pg_catalog.has_table_privilege(${stringLiteral(reader)}, ${stringLiteral(v)}, 'SELECT') THEN GRANT SELECT ON ${v} TO ${role}; END IF;`),
  ];
}

/**
 * The SQLSTATE a row view's or copy's creation raises when the view would resolve an object its
 * table or original does not (red team rt48c K3, K5): names printed for the catalogue's search path
 * now resolve elsewhere. A rescan prints them qualified, so the gateway rescans the source on it
 * (src/gateway.ts, at most once a minute per source). Class "IL" is InterLock's own, not PostgreSQL's.
 */
export const ROW_VIEW_STALE_SQLSTATE = 'ILRV1';

/**
 * A SELECT of one boolean: whether view `copy` (a row view's copy, `interlock_rows."…"`) depends on a
 * function, operator, type, collation or relation (not one of interlock_rows: the row views and
 * copies it reads instead of ruled ones) that view `original` (`"schema"."name"`) does not depend on
 * (pg_depend of their rewrite rules; built-in objects are pinned and recorded for neither). Red team
 * rt48c K3: the copy is the original's definition text parsed again, and a name in it can now resolve
 * to an insider's object (`public.array_length(integer[], integer)` over pg_catalog's anyarray one),
 * which would run as the reader on every read through the copy. Every name pinned to pg_catalog by
 * hand (test/unit/sources/qualified-statements.test.ts checks it).
 */
export function copyForeignCodeSql(copy: string, original: string): string {
  const cls = (name: string) => `'pg_catalog.${name}'::pg_catalog.regclass`;
  const rule = (alias: string, rw: string, view: string) =>
    `${alias}.classid OPERATOR(pg_catalog.=) ${cls('pg_rewrite')} AND ${rw}.oid OPERATOR(pg_catalog.=) ${alias}.objid AND ${rw}.ev_class OPERATOR(pg_catalog.=) ${stringLiteral(view)}::pg_catalog.regclass`;
  return (
    `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d, pg_catalog.pg_rewrite r WHERE ${rule('d', 'r', copy)}` +
    ` AND d.refclassid OPERATOR(pg_catalog.=) ANY (ARRAY[${['pg_proc', 'pg_operator', 'pg_type', 'pg_collation', 'pg_class'].map(cls).join(', ')}]::pg_catalog.oid[])` +
    // The row views and copies it reads in place of ruled relations and views are InterLock's own.
    ` AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class k, pg_catalog.pg_namespace kn WHERE d.refclassid OPERATOR(pg_catalog.=) ${cls('pg_class')} AND k.oid OPERATOR(pg_catalog.=) d.refobjid AND kn.oid OPERATOR(pg_catalog.=) k.relnamespace AND kn.nspname OPERATOR(pg_catalog.=) '${ROW_VIEW_SCHEMA}')` +
    ` AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend o, pg_catalog.pg_rewrite ro WHERE ${rule('o', 'ro', original)} AND o.refclassid OPERATOR(pg_catalog.=) d.refclassid AND o.refobjid OPERATOR(pg_catalog.=) d.refobjid))`
  );
}

/**
 * A SELECT of one boolean: whether row view `view` (`interlock_rows."…"`) depends on a function,
 * operator, type or collation other than its table's (`base`, `"schema"."name"`) columns' types,
 * their array types and collations, the functions of the casts to those types, or those types' own
 * comparison operators (= <> < <= > >= over two operands of one column type, in that type's schema:
 * ownOperatorsOf, rt48d R8). Its predicate names only pg_catalog's functions and operators (pinned,
 * not recorded), those own operators by their schema, and casts to its columns' types, a user type
 * by the name format_type printed for the scan's path: made later, that name may resolve to an
 * insider's domain created since in a schema earlier on the path, whose CHECK would run as the
 * reader (red team rt48c K5). Every name pinned to pg_catalog by hand (the parse-tree test checks it).
 */
export function rowViewForeignCodeSql(view: string, base: string): string {
  const cls = (name: string) => `'pg_catalog.${name}'::pg_catalog.regclass`;
  const columns = `pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) ${stringLiteral(base)}::pg_catalog.regclass AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped`;
  const types = `ARRAY(SELECT u FROM pg_catalog.pg_type y, ${columns.replace(' WHERE ', ', pg_catalog.unnest(ARRAY[a.atttypid, y.typarray]) AS u WHERE ')} AND y.oid OPERATOR(pg_catalog.=) a.atttypid)`;
  return (
    `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d, pg_catalog.pg_rewrite r WHERE d.classid OPERATOR(pg_catalog.=) ${cls('pg_rewrite')} AND r.oid OPERATOR(pg_catalog.=) d.objid AND r.ev_class OPERATOR(pg_catalog.=) ${stringLiteral(view)}::pg_catalog.regclass` +
    ` AND d.refclassid OPERATOR(pg_catalog.=) ANY (ARRAY[${['pg_proc', 'pg_operator', 'pg_type', 'pg_collation'].map(cls).join(', ')}]::pg_catalog.oid[])` +
    ` AND NOT (d.refclassid OPERATOR(pg_catalog.=) ${cls('pg_type')} AND d.refobjid OPERATOR(pg_catalog.=) ANY (${types}))` +
    ` AND NOT (d.refclassid OPERATOR(pg_catalog.=) ${cls('pg_collation')} AND d.refobjid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT a.attcollation FROM ${columns})))` +
    ` AND NOT (d.refclassid OPERATOR(pg_catalog.=) ${cls('pg_proc')} AND d.refobjid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT c.castfunc FROM pg_catalog.pg_cast c WHERE c.casttarget OPERATOR(pg_catalog.=) ANY (${types}))))` +
    ` AND NOT (d.refclassid OPERATOR(pg_catalog.=) ${cls('pg_operator')} AND d.refobjid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT o.oid FROM pg_catalog.pg_operator o, pg_catalog.pg_type t WHERE o.oprleft OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT a.atttypid FROM ${columns})) AND o.oprright OPERATOR(pg_catalog.=) o.oprleft AND t.oid OPERATOR(pg_catalog.=) o.oprleft AND o.oprnamespace OPERATOR(pg_catalog.=) t.typnamespace AND o.oprname OPERATOR(pg_catalog.=) ANY (ARRAY['=', '<>', '<', '<=', '>', '>=']::pg_catalog.name[])))))`
  );
}

/** `DO $tag$BEGIN <body> END$tag$` with a dollar-quote tag the body (a rule's constants, a role name) does not contain. */
function doBlock(body: string): string {
  let tag = 'il';
  while (body.includes(`$${tag}$`)) tag += '_';
  return `DO $${tag}$BEGIN ${body} END$${tag}$`;
}
