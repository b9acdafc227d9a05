/**
 * Row rules in interlock_query (issue 27, docs/row-rules.md): after steps 3 and 4 decide that the
 * statement may run, this step decides which of its relations are row-ruled for the caller and
 * rewrites every reference to them to InterLock's row views (src/sql/row-rules/rewrite.ts):
 * `security_barrier` views in schema `interlock_rows` of the source whose WHERE is the caller's
 * combined rule, with each `identity.<attr>` read from a custom setting the reader binds as a
 * parameter right before the statement (src/sources/postgres/read.ts). PostgreSQL then evaluates
 * none of the agent's non-leakproof expressions on a hidden row.
 *
 * Fails closed (`row_rule_unenforceable`) where the rewrite cannot be proven to cover every path
 * to a ruled relation's rows: a view or materialized view read by a caller with any row rule on
 * the source, a user-defined function, EXPLAIN, a write touching a ruled relation (not yet
 * supported), a name that is both a CTE and a ruled relation, a relation whose descendants carry
 * a different rule, a rule the table cannot evaluate. A caller without an attribute a rule needs
 * cannot read the table (`row_rule_attribute_missing`).
 */
import { createHash } from 'node:crypto';
import type { AccessEvaluator } from '../governance/evaluator';
import { relationRowRule, sameRowRule, type RelationRowRule } from '../governance/row-rules';
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
  attributeFitsType,
  RowPredicateError,
  RowPredicateTableError,
  type RowPredicate,
} from '../sql/row-rules/predicate';
import { rewriteRowRules, ROW_VIEW_SCHEMA, RowRewriteRefusal, type RelationReference } from '../sql/row-rules/rewrite';
import type { ToolOutcome } from './types';

/** One row view: `interlock_rows.<name>` = SELECT * FROM [ONLY] schema.table WHERE predicateSql. */
export interface RowView {
  name: string;
  schema: string;
  table: string;
  /** True for the view read in place of `ONLY schema.table`. */
  only: boolean;
  predicateSql: string;
}

/** The rewrite of one statement for one caller. */
export interface RowRulePlan {
  /** The statement with every ruled reference replaced by its view. */
  sql: string;
  views: RowView[];
  /** Settings to bind before the statement: `interlock.attr.<a>` / `interlock.attrs.<a>` and their texts. */
  settings: Array<[string, string]>;
  /** For the audit: each ruled relation and the hash of its rule's text (never attribute values). */
  applied: Array<{ relation: string; rule: string }>;
  /** Hash of the views (so of the rules' text) and the bound values, for the result cache key. */
  bindingKey: string;
}

/** Outcome: nothing ruled, refused (with a log-only reason), or the plan to run. */
export type RowRuleDecision = { kind: 'none' } | { kind: 'refused'; outcome: ToolOutcome; reason: string } | { kind: 'ruled'; plan: RowRulePlan };

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

/** The view name of a relation's rule: a readable prefix and a hash of everything the view holds. */
function viewName(rel: PreparedRelation, only: boolean, predicateSql: string): string {
  return `${rel.name.slice(0, 40)}_${sha(JSON.stringify([rel.schema, rel.name, only, rel.columnNames, predicateSql])).slice(0, 16)}`;
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
  | { kind: 'ruled'; sql: string; views: RowView[]; applied: Array<{ relation: string; rule: string }>; steps: Array<AttributeNeed | ShapeRefusal> };

/**
 * Decides the row rules of one analysed statement for one caller and rewrites it (see the module
 * comment for every refusal). Synchronous; requires initSqlParser(). Uncached: the same as
 * bindRowRules(shapeRowRules(input), input.attributes).
 */
export function planRowRules(input: RowRuleInput): RowRuleDecision {
  return bindRowRules(shapeRowRules(input), input.attributes);
}

/**
 * The attribute-independent part of planRowRules (RowRuleShape): the refusals, the rewrite (two
 * parses) and the views; `input.attributes` is not read. Synchronous; requires initSqlParser().
 */
export function shapeRowRules(input: Omit<RowRuleInput, 'attributes'>): RowRuleShape {
  const { evaluator, sourceId, analysis } = input;
  if (!evaluator.hasRowRules(sourceId)) return { kind: 'none' };
  const cat = prepareCatalog(input.catalog);
  const hierarchy = input.hierarchy ?? catalogHierarchy(input.catalog);
  const rules = new Map<string, RelationRowRule | null>();
  const ruleOf = (schema: string, table: string): RelationRowRule | null => {
    const key = relKey(schema, table);
    if (!rules.has(key)) rules.set(key, relationRowRule(evaluator, sourceId, schema, table, hierarchy));
    return rules.get(key)!;
  };
  const touched = [...analysis.reads, ...analysis.writes];
  if (touched.some((r) => r.schema === ROW_VIEW_SCHEMA)) return unenforceable('the statement names the row-view schema');
  // A read of a parent returns its descendants' rows: they must carry the same rule.
  for (const r of touched) {
    const own = ruleOf(r.schema, r.table);
    for (const d of hierarchy.descendants(r.schema, r.table)) {
      if (!sameRowRule(own, ruleOf(d.schema, d.name))) return unenforceable(`${r.schema}.${r.table} has a descendant with another row rule`);
    }
  }
  const ruledTouched = touched.filter((r) => ruleOf(r.schema, r.table) !== null);
  if (analysis.kind === 'write') {
    const writeRuled = analysis.writes.some((w) => evaluator.rowTerms(sourceId, w.schema, w.table, 'write').some((t) => t.rows !== null));
    if (ruledTouched.length > 0 || writeRuled) return unenforceable('writes touching row-ruled tables are not supported yet');
    return { kind: 'none' };
  }
  // Paths to rows the rewrite cannot see into: views' definitions and user functions' bodies.
  const views = analysis.reads.filter((r) => {
    const k = cat.relations.get(relKey(r.schema, r.table))?.kind;
    return k === 'view' || k === 'materialized_view';
  });
  if (views.length > 0) return unenforceable(`the statement reads a view (${views[0].schema}.${views[0].table}) and the caller has row rules on the source`);
  const userFunction = analysis.functions.find((f) => f.schema !== 'pg_catalog' && f.schema !== 'information_schema');
  if (userFunction) return unenforceable(`the statement calls a user-defined function (${userFunction.schema}.${userFunction.name}) and the caller has row rules on the source`);
  // A user-defined operator's function is a user function too (rt27: `SELECT 1 =%= 2` read a ruled table unfiltered).
  if (analysis.userOperators) return unenforceable('the statement uses a user-defined operator and the caller has row rules on the source');
  if (ruledTouched.length === 0) return { kind: 'none' };
  if (analysis.statement === 'ExplainStmt') return unenforceable('EXPLAIN of a statement reading row-ruled tables');

  const created = new Map<string, RowView>();
  const applied = new Map<string, string>();
  const steps: Array<AttributeNeed | ShapeRefusal> = [];
  let refused = false;
  const refuse = (d: RowRuleRefusal): null => {
    steps.push({ kind: 'refuse', decision: d });
    refused = true;
    return null;
  };
  const predicateSqlOf = new Map<string, string>();
  /** The combined predicate SQL of a ruled relation, noting the attributes it binds; null after a refusal. */
  const compile = (rel: PreparedRelation, rule: RelationRowRule): string | null => {
    const key = relKey(rel.schema, rel.name);
    const done = predicateSqlOf.get(key);
    if (done !== undefined) return done;
    const types = new Map(input.catalog.relations.find((r) => r.schema === rel.schema && r.name === rel.name)?.columns.map((c) => [c.name, c.dataType]) ?? []);
    const parts: string[] = [];
    for (const term of rule.terms) {
      const p = cachedPredicate(term.rows);
      if (p instanceof RowPredicateError) return refuse(unenforceable(`the row rule of ${term.resource} in role ${term.role} is invalid: ${p.message}`));
      const bindTypes: Array<[string, string]> = [];
      try {
        parts.push(renderRowPredicate(p, (c) => types.get(c), (a, t) => bindTypes.push([a, t])));
      } catch (err) {
        if (!(err instanceof RowPredicateTableError)) throw err;
        return refuse(unenforceable(`the row rule of ${term.resource} in role ${term.role} cannot apply to ${rel.schema}.${rel.name}: ${err.message}`));
      }
      steps.push({ kind: 'need', single: [...p.attributes], list: [...p.listAttributes], bindTypes });
    }
    const sql = parts.length === 1 ? parts[0] : `(${parts.join(' OR ')})`;
    predicateSqlOf.set(key, sql);
    applied.set(`${rel.schema}.${rel.name}`, sha(JSON.stringify(rule.terms.map((t) => t.rows))).slice(0, 16));
    return sql;
  };
  const resolve = (ref: RelationReference): string | null => {
    if (refused) return null;
    const schemas = ref.schema !== null ? [ref.schema] : cat.path;
    let rel: PreparedRelation | undefined;
    for (const s of schemas) if ((rel = cat.relations.get(relKey(s, ref.name)))) break;
    if (!rel) return null;
    const rule = ruleOf(rel.schema, rel.name);
    if (rule === null) return null;
    const predicateSql = compile(rel, rule);
    if (predicateSql === null) return null;
    const name = viewName(rel, !ref.inh, predicateSql);
    created.set(name, { name, schema: rel.schema, table: rel.name, only: !ref.inh, predicateSql });
    return name;
  };
  let rewritten = { sql: input.sql, replaced: 0 };
  try {
    rewritten = rewriteRowRules(input.sql, resolve);
  } catch (err) {
    if (!(err instanceof RowRewriteRefusal)) throw err;
    // Met after every step so far: a caller failing one of them is refused for that instead.
    refuse(unenforceable(err.message));
  }
  if (!refused && rewritten.replaced === 0) refuse(unenforceable('no reference to the row-ruled relations was found in the text'));
  return { kind: 'ruled', sql: rewritten.sql, views: [...created.values()], applied: [...applied.entries()].map(([relation, rule]) => ({ relation, rule })).sort((a, b) => (a.relation < b.relation ? -1 : 1)), steps };
}

/**
 * One caller's plan from a statement's shape (shapeRowRules): replays its steps with `attributes`
 * (Identity.attributes) — the first missing or unfit attribute refuses `row_rule_attribute_missing`,
 * a refusal step met first refuses as it says — and collects the settings to bind and the binding
 * key. Cheap (no parsing): this is what a cached plan costs per call.
 */
export function bindRowRules(shape: RowRuleShape, attributes: Record<string, unknown> | undefined): RowRuleDecision {
  if (shape.kind !== 'ruled') return shape;
  const settings = new Map<string, string>();
  for (const step of shape.steps) {
    if (step.kind === 'refuse') return step.decision;
    for (const [attrs, prefix, text] of [[step.single, ATTRIBUTE_SETTING_PREFIX, attributeText], [step.list, LIST_SETTING_PREFIX, attributeListText]] as const) {
      for (const a of attrs) {
        const raw = attributes && Object.prototype.hasOwnProperty.call(attributes, a) ? attributes[a] : undefined;
        const value = raw === undefined ? null : text(raw);
        if (value === null) {
          return { kind: 'refused', outcome: { kind: 'refusal', code: 'row_rule_attribute_missing', message: `A row rule on a table this statement reads needs the identity attribute "${a}"${prefix === LIST_SETTING_PREFIX ? ' (a list)' : ''}, which this identity does not have (or not as a usable value), so the table is unreadable for it; an operator can set the attribute.` }, reason: `attribute ${a} missing` };
        }
        settings.set(prefix + a, value);
      }
    }
    // A value the column's type would not accept (an operator's typo, e.g. employee_id=abc) refuses
    // the caller here, not as a failure of the agent's statement.
    const unfit = step.bindTypes.find(([a, t]) => !attributeFitsType(attributes?.[a], t));
    if (unfit) {
      return { kind: 'refused', outcome: { kind: 'refusal', code: 'row_rule_attribute_missing', message: `A row rule on a table this statement reads compares the identity attribute "${unfit[0]}" with a column of type ${unfit[1]}, and this identity's value is not of that type, so the table is unreadable for it; an operator can correct the attribute.` }, reason: `attribute ${unfit[0]} not a ${unfit[1]}` };
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
    },
  };
}

/**
 * The statements that create (or replace) a row view and let the source's reader role read it:
 * the schema, the view (`security_barrier` so only leakproof quals of the agent's are pushed below
 * the rule; `security_invoker` so the reader's own privileges and any RLS of the table still apply),
 * and the grants. `reader` is the reader role's name. Run by a role that owns the schema, or may
 * create it (CREATE on the database) when it does not exist yet.
 */
export function rowViewStatements(view: RowView, reader: string): string[] {
  const v = `${ROW_VIEW_SCHEMA}.${quoteIdent(view.name)}`;
  return [
    // CREATE SCHEMA IF NOT EXISTS checks CREATE on the database before it checks existence: a schema an
    // operator made for the writer role (`CREATE SCHEMA interlock_rows AUTHORIZATION <writer>`) is used as is.
    `DO $il$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = '${ROW_VIEW_SCHEMA}') THEN CREATE SCHEMA ${ROW_VIEW_SCHEMA}; END IF; END$il$`,
    `CREATE OR REPLACE VIEW ${v} WITH (security_barrier = true, security_invoker = true) AS SELECT * FROM ${view.only ? 'ONLY ' : ''}${quoteIdent(view.schema)}.${quoteIdent(view.table)} WHERE ${view.predicateSql}`,
    `GRANT USAGE ON SCHEMA ${ROW_VIEW_SCHEMA} TO ${quoteIdent(reader)}`,
    `GRANT SELECT ON ${v} TO ${quoteIdent(reader)}`,
  ];
}
