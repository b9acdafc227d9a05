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
import { viewFacts, viewLineage } from '../sql/view-lineage';
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

function unenforceable(reason: string): RowRuleDecision {
  return { kind: 'refused', outcome: { kind: 'refusal', code: 'row_rule_unenforceable' }, reason };
}

const sha = (s: string): string => createHash('sha256').update(s).digest('hex');

/** The view name of a relation's rule: a readable prefix and a hash of everything the view holds. */
function viewName(rel: PreparedRelation, only: boolean, predicateSql: string): string {
  return `${rel.name.slice(0, 40)}_${sha(JSON.stringify([rel.schema, rel.name, only, rel.columnNames, predicateSql])).slice(0, 16)}`;
}

/**
 * Decides the row rules of one analysed statement for one caller and rewrites it (see the module
 * comment for every refusal). Synchronous; requires initSqlParser().
 */
export function planRowRules(input: RowRuleInput): RowRuleDecision {
  const { evaluator, sourceId, analysis } = input;
  if (!evaluator.hasRowRules(sourceId)) return { kind: 'none' };
  const cat = prepareCatalog(input.catalog);
  const hierarchy = input.hierarchy ?? catalogHierarchy(input.catalog);
  const rules = new Map<string, RelationRowRule | null>();
  /** The rule of a relation for the columns used of it (src/governance/row-rules.ts: a column allow lifts the rule for its columns only). */
  const ruleOf = (schema: string, table: string, columns: readonly string[]): RelationRowRule | null => {
    const key = relKey(schema, table) + '\u0000' + JSON.stringify(columns);
    if (!rules.has(key)) rules.set(key, relationRowRule(evaluator, sourceId, schema, table, hierarchy, columns));
    return rules.get(key)!;
  };
  // The statement's own references use the columns it reads of each relation; a view's copy reads
  // every column of its base relations (which of them reach the agent is not followed here).
  const used = new Map(analysis.reads.map((r) => [relKey(r.schema, r.table), r.columns]));
  const usedOf = (schema: string, table: string): readonly string[] => used.get(relKey(schema, table)) ?? [];
  const allOf = (schema: string, table: string): readonly string[] => cat.relations.get(relKey(schema, table))?.columnNames ?? [];
  const touched = [...analysis.reads, ...analysis.writes];
  if (touched.some((r) => r.schema === ROW_VIEW_SCHEMA)) return unenforceable('the statement names the row-view schema');
  // A read of a parent returns its descendants' rows: they must carry the same rule.
  for (const r of touched) {
    const own = ruleOf(r.schema, r.table, usedOf(r.schema, r.table));
    for (const d of hierarchy.descendants(r.schema, r.table)) {
      if (!sameRowRule(own, ruleOf(d.schema, d.name, usedOf(r.schema, r.table)))) return unenforceable(`${r.schema}.${r.table} has a descendant with another row rule`);
    }
  }
  const ruledTouched = touched.filter((r) => ruleOf(r.schema, r.table, usedOf(r.schema, r.table)) !== null);
  // Views (item 1): classified by their lineage as the server records it (src/sql/view-lineage.ts).
  const viewStates = new Map<string, 'clean' | 'ruled' | RowRuleDecision>();
  /** 'clean' (no ruled relation behind it: read as is), 'ruled' (read through its copy), or a refusal. */
  const classify = (schema: string, name: string): 'clean' | 'ruled' | RowRuleDecision => {
    const key = relKey(schema, name);
    let st = viewStates.get(key);
    if (st === undefined) {
      viewStates.set(key, unenforceable(`view ${schema}.${name} is part of a cycle`));
      st = classifyView(schema, name);
      viewStates.set(key, st);
    }
    return st;
  };
  const classifyView = (schema: string, name: string): 'clean' | 'ruled' | RowRuleDecision => {
    const v = `${schema}.${name}`;
    const lin = viewLineage(input.catalog, schema, name);
    if (lin.unknown.length) return unenforceable(`the lineage of view ${v} is not recorded in the catalogue (${lin.unknown[0]}): rescan the source`);
    if (lin.userCode.length) return unenforceable(`view ${v} calls user-defined code (${lin.userCode[0]}) and the caller has row rules on the source`);
    let ruled = false;
    for (const b of lin.bases) {
      const own = ruleOf(b.schema, b.name, allOf(b.schema, b.name));
      for (const d of hierarchy.descendants(b.schema, b.name)) {
        if (!sameRowRule(own, ruleOf(d.schema, d.name, allOf(b.schema, b.name)))) return unenforceable(`${b.schema}.${b.name}, read by view ${v}, has a descendant with another row rule`);
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
  for (const r of analysis.reads) {
    const k = cat.relations.get(relKey(r.schema, r.table))?.kind;
    if (k !== 'view' && k !== 'materialized_view') continue;
    const st = classify(r.schema, r.table);
    if (st === 'ruled') ruledViews = true;
    else if (st !== 'clean') return st;
  }
  if (analysis.kind === 'write') {
    const writeRuled = analysis.writes.some((w) => evaluator.rowTerms(sourceId, w.schema, w.table, 'write').some((t) => t.rows !== null));
    // A write reading a view over a ruled table (INSERT … SELECT FROM v) too: its rows would be read unfiltered.
    if (ruledTouched.length > 0 || writeRuled || ruledViews) return unenforceable('writes touching row-ruled tables are not supported yet');
    return { kind: 'none' };
  }
  // Paths to rows the rewrite cannot see into: user functions' bodies.
  const userFunction = analysis.functions.find((f) => f.schema !== 'pg_catalog' && f.schema !== 'information_schema');
  if (userFunction) return unenforceable(`the statement calls a user-defined function (${userFunction.schema}.${userFunction.name}) and the caller has row rules on the source`);
  // A user-defined operator's function is a user function too (rt27: `SELECT 1 =%= 2` read a ruled table unfiltered).
  if (analysis.userOperators) return unenforceable('the statement uses a user-defined operator and the caller has row rules on the source');
  if (ruledTouched.length === 0 && !ruledViews) return { kind: 'none' };
  if (analysis.statement === 'ExplainStmt') return unenforceable('EXPLAIN of a statement reading row-ruled tables');

  const created = new Map<string, RowView>();
  const settings = new Map<string, string>();
  const applied = new Map<string, Set<string>>();
  let refusal: RowRuleDecision | null = null;
  const predicateSqlOf = new Map<string, string>();
  /** The combined predicate SQL of a ruled relation, binding its attributes; null after a refusal. */
  const compile = (rel: PreparedRelation, rule: RelationRowRule): string | null => {
    const ruleText = JSON.stringify(rule.groups.length === 1 ? rule.terms.map((t) => t.rows) : rule.groups.map((g) => g.map((t) => t.rows)));
    const key = relKey(rel.schema, rel.name) + '\u0000' + ruleText;
    const done = predicateSqlOf.get(key);
    if (done !== undefined) return done;
    const types = new Map(input.catalog.relations.find((r) => r.schema === rel.schema && r.name === rel.name)?.columns.map((c) => [c.name, c.dataType]) ?? []);
    const rendered = new Map<string, string>();
    for (const term of rule.terms) {
      const p = cachedPredicate(term.rows);
      if (p instanceof RowPredicateError) {
        refusal = unenforceable(`the row rule of ${term.resource} in role ${term.role} is invalid: ${p.message}`);
        return null;
      }
      const bindTypes: Array<[string, string]> = [];
      try {
        rendered.set(term.rows, renderRowPredicate(p, (c) => types.get(c), (a, t) => bindTypes.push([a, t])));
      } catch (err) {
        if (!(err instanceof RowPredicateTableError)) throw err;
        refusal = unenforceable(`the row rule of ${term.resource} in role ${term.role} cannot apply to ${rel.schema}.${rel.name}: ${err.message}`);
        return null;
      }
      for (const [attrs, prefix, text] of [[p.attributes, ATTRIBUTE_SETTING_PREFIX, attributeText], [p.listAttributes, LIST_SETTING_PREFIX, attributeListText]] as const) {
        for (const a of attrs) {
          const raw = input.attributes && Object.prototype.hasOwnProperty.call(input.attributes, a) ? input.attributes[a] : undefined;
          const value = raw === undefined ? null : text(raw);
          if (value === null) {
            refusal = { kind: 'refused', outcome: { kind: 'refusal', code: 'row_rule_attribute_missing', message: `A row rule on a table this statement reads needs the identity attribute "${a}"${prefix === LIST_SETTING_PREFIX ? ' (a list)' : ''}, which this identity does not have (or not as a usable value), so the table is unreadable for it; an operator can set the attribute.` }, reason: `attribute ${a} missing` };
            return null;
          }
          settings.set(prefix + a, value);
        }
      }
      // A value the column's type would not accept (an operator's typo, e.g. employee_id=abc) refuses
      // the caller here, not as a failure of the agent's statement.
      const unfit = bindTypes.find(([a, t]) => !attributeFitsType(input.attributes?.[a], t));
      if (unfit) {
        refusal = { kind: 'refused', outcome: { kind: 'refusal', code: 'row_rule_attribute_missing', message: `A row rule on a table this statement reads compares the identity attribute "${unfit[0]}" with a column of type ${unfit[1]}, and this identity's value is not of that type, so the table is unreadable for it; an operator can correct the attribute.` }, reason: `attribute ${unfit[0]} not a ${unfit[1]}` };
        return null;
      }
    }
    // An AND (over used columns) of ORs (over the allows covering each): src/governance/row-rules.ts.
    const ors = rule.groups.map((g) => (g.length === 1 ? rendered.get(g[0].rows)! : `(${g.map((t) => rendered.get(t.rows)!).join(' OR ')})`));
    const sql = ors.length === 1 ? ors[0] : `(${ors.join(' AND ')})`;
    predicateSqlOf.set(key, sql);
    const rel2 = `${rel.schema}.${rel.name}`;
    if (!applied.has(rel2)) applied.set(rel2, new Set());
    applied.get(rel2)!.add(sha(ruleText).slice(0, 16));
    return sql;
  };
  /** Resolves references of the statement's text, or (`inView`) of a view definition's, whose relations are read whole. */
  const resolverFor = (inView: boolean) => (ref: RelationReference): string | null => {
    if (refusal) return null;
    const schemas = ref.schema !== null ? [ref.schema] : cat.path;
    let rel: PreparedRelation | undefined;
    for (const s of schemas) if ((rel = cat.relations.get(relKey(s, ref.name)))) break;
    if (!rel) return null;
    if (rel.kind === 'view' || rel.kind === 'materialized_view') return viewCopy(rel);
    const rule = ruleOf(rel.schema, rel.name, inView ? allOf(rel.schema, rel.name) : usedOf(rel.schema, rel.name));
    if (rule === null) return null;
    const predicateSql = compile(rel, rule);
    if (predicateSql === null) return null;
    const name = viewName(rel, !ref.inh, predicateSql);
    created.set(name, { name, schema: rel.schema, table: rel.name, only: !ref.inh, predicateSql });
    return name;
  };
  /** The copy of a view whose lineage is ruled (its definition rewritten by the same resolver), or null. */
  const viewCopy = (rel: PreparedRelation): string | null => {
    const st = classify(rel.schema, rel.name);
    if (st === 'clean') return null;
    if (st !== 'ruled') {
      refusal ??= st;
      return null;
    }
    const key = relKey(rel.schema, rel.name);
    const done = copies.get(key);
    if (done !== undefined) return done;
    const facts = viewFacts(input.catalog, rel.schema, rel.name)?.view;
    if (!rel.definition || !facts) {
      refusal ??= unenforceable(`the definition of view ${rel.schema}.${rel.name} is not recorded in the catalogue: rescan the source`);
      return null;
    }
    let inner;
    try {
      inner = rewriteRowRules(rel.definition, resolverFor(true));
    } catch (err) {
      if (!(err instanceof RowRewriteRefusal)) throw err;
      refusal ??= unenforceable(`view ${rel.schema}.${rel.name}: ${err.message}`);
      return null;
    }
    if (refusal) return null;
    if (inner.replaced === 0) {
      refusal = unenforceable(`view ${rel.schema}.${rel.name} reads a row-ruled relation that its definition does not name`);
      return null;
    }
    const searchPath = [...input.catalog.searchPath];
    const name = `${rel.name.slice(0, 40)}_${sha(JSON.stringify(['view', rel.schema, rel.name, rel.columnNames, inner.sql, facts.securityBarrier, searchPath])).slice(0, 16)}`;
    copies.set(key, name);
    created.set(name, { name, schema: rel.schema, table: rel.name, only: false, predicateSql: '', definition: inner.sql, columns: rel.columnNames, securityBarrier: facts.securityBarrier, searchPath });
    return name;
  };
  const copies = new Map<string, string>();
  let rewritten;
  try {
    rewritten = rewriteRowRules(input.sql, resolverFor(false));
  } catch (err) {
    if (err instanceof RowRewriteRefusal) return unenforceable(err.message);
    throw err;
  }
  if (refusal) return refusal;
  if (rewritten.replaced === 0) return unenforceable('no reference to the row-ruled relations was found in the text');
  const bound = [...settings.entries()].sort(([a], [b]) => (a < b ? -1 : 1));
  return {
    kind: 'ruled',
    plan: {
      sql: rewritten.sql,
      views: [...created.values()],
      settings: bound,
      applied: [...applied.entries()].map(([relation, rule]) => ({ relation, rule: [...rule].sort().join('+') })).sort((a, b) => (a.relation < b.relation ? -1 : 1)),
      // The views name the rules' rendered text by hash, the settings the bound values: two callers
      // share a cached result only when both are equal (found by the differential test: the access
      // fingerprint alone names resources, not rules).
      bindingKey: sha(JSON.stringify([bound, [...created.keys()].sort()])),
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
  let create = `CREATE OR REPLACE VIEW ${v} WITH (security_barrier = true, security_invoker = true) AS SELECT * FROM ${view.only ? 'ONLY ' : ''}${quoteIdent(view.schema)}.${quoteIdent(view.table)} WHERE ${view.predicateSql}`;
  if (view.definition !== undefined) {
    // A view's copy: its text names relations as printed for the catalogue's search path, so it is
    // created under that path (set for the DO block's transaction only), whatever the writer's own.
    const ddl = `CREATE OR REPLACE VIEW ${v} (${(view.columns ?? []).map(quoteIdent).join(', ')}) WITH (security_barrier = ${view.securityBarrier === true}, security_invoker = true) AS ${view.definition.trim().replace(/;\s*$/, '')}`;
    const path = (view.searchPath ?? []).map(quoteIdent).join(', ');
    const tag = (base: string): string => {
      let t = base;
      while (ddl.includes(`$${t}$`) || path.includes(`$${t}$`)) t += 'x';
      return `$${t}$`;
    };
    const [outer, text] = [tag('il'), tag('ddl')];
    create = `DO ${outer}BEGIN PERFORM pg_catalog.set_config('search_path', ${text}${path}${text}, true); EXECUTE ${text}${ddl}${text}; END${outer}`;
  }
  return [
    // CREATE SCHEMA IF NOT EXISTS checks CREATE on the database before it checks existence: a schema an
    // operator made for the writer role (`CREATE SCHEMA interlock_rows AUTHORIZATION <writer>`) is used as is.
    `DO $il$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = '${ROW_VIEW_SCHEMA}') THEN CREATE SCHEMA ${ROW_VIEW_SCHEMA}; END IF; END$il$`,
    create,
    `GRANT USAGE ON SCHEMA ${ROW_VIEW_SCHEMA} TO ${quoteIdent(reader)}`,
    `GRANT SELECT ON ${v} TO ${quoteIdent(reader)}`,
  ];
}

