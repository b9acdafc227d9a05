/**
 * from.ts — the FROM clause (PostgreSQL: parse_clause.c, transformFromClause →
 * transformFromClauseItem): one dispatcher over the FROM items — a relation or WITH name
 * (`rangeVar`, the one place a relation reference in FROM is resolved), a sub-select (LATERAL
 * ones per outer row), a function (ROWS FROM, WITH ORDINALITY, column definitions), a JOIN (ON,
 * USING, NATURAL, aliases), TABLESAMPLE; XMLTABLE and JSON_TABLE are refused. Each item becomes
 * namespace entries (`NsItem`) of the current query level.
 */
import { figureColname } from '../colname';
import { alternative, derive, type Lin, LIN_NONE, merge } from '../lineage';
import type { PreparedRoutine } from '../prepared-catalog';
import { ex } from './expr';
import { funcCall, type ResultRows } from './func';
import { checkFields, hasOwn, type N, nodeType, q, Refusal, strings, unwrap } from './nodes';
import { operatorUse } from './oper';
import { lookupCte, relationItem, renameCols, resolveRelation, visibleCols } from './relation';
import { charge, type Col, type CteEnv, type Ctx, EMPTY_SCOPE_ITEMS, enter, leave, type NsItem, type QueryOut, type Scope, type WalkState } from './state';
import { typeName } from './type';
import { addFilter, calc, consume, perRowQuery, touchRelation, use } from './uses';

/** Where a FROM list is analysed: the enclosing query level (outer references) and the visible WITH names. */
export interface FromCtx {
  readonly parent: Scope | null;
  readonly ctes: CteEnv | null;
}

/**
 * Analyses one FROM-list entry. `left` holds the items already in this FROM list (visible to
 * LATERAL items and function calls, as in PostgreSQL).
 */
export function fromItem(st: WalkState, node: N, fc: FromCtx, left: readonly NsItem[]): NsItem[] {
  const type = nodeType(node);
  enter(st);
  try {
    switch (type) {
      case 'RangeVar':
        return [rangeVar(st, node.RangeVar, fc)];
      case 'RangeSubselect':
        return [rangeSubselect(st, node.RangeSubselect, fc, left)];
      case 'RangeFunction':
        return [rangeFunction(st, node.RangeFunction, { parent: fc.parent, items: left }, fc.ctes)];
      case 'JoinExpr':
        return join(st, node.JoinExpr, fc, left);
      case 'RangeTableSample':
        return tableSample(st, node.RangeTableSample, fc, left);
      case 'RangeTableFunc':
        throw new Refusal('statement_not_allowed', 'XMLTABLE is not supported');
      case 'JsonTable':
        throw new Refusal('statement_not_allowed', 'JSON_TABLE is not supported');
      default:
        throw new Refusal('statement_not_allowed', `unsupported FROM item: ${type ?? 'empty'}`);
    }
  } finally {
    leave(st);
  }
}

/**
 * A name in FROM (`RangeVar`): an unqualified name is a visible WITH item first, else a catalogue
 * relation (`resolveRelation`: search path, system relations refused) that is read and becomes a
 * FROM item (a view's columns carry its definition's lineage, relation.ts `relationItem`).
 */
function rangeVar(st: WalkState, rv: N, fc: FromCtx): NsItem {
  if (rv.catalogname !== undefined) throw new Refusal('unknown_relation', 'cross-database references are not supported');
  checkFields('RangeVar', rv);
  const name = String(rv.relname);
  if (rv.schemaname === undefined) {
    const cte = lookupCte(fc.ctes, name);
    if (cte) {
      if (!cte.cols) throw new Refusal('invalid_sql', `recursive reference to ${q(name)} is not allowed here`);
      charge(st, cte.cols.length);
      const cols = renameCols(cte.cols, rv.alias, `WITH query ${q(name)}`);
      return { refname: rv.alias ? String(rv.alias.aliasname) : name, schema: null, cols, relVisible: true, colsVisible: true, base: null };
    }
  }
  const rel = resolveRelation(st, rv.schemaname, name);
  touchRelation(st, rel);
  charge(st, rel.columnNames.length);
  return relationItem(st, rel, rv.alias);
}

/** A sub-select in FROM (`RangeSubselect`): a query at a new level (LATERAL: seeing the items to its left). */
function rangeSubselect(st: WalkState, rs: N, fc: FromCtx, left: readonly NsItem[]): NsItem {
  checkFields('RangeSubselect', rs);
  const out = rs.lateral ? lateralSubselect(st, rs.subquery, { parent: fc.parent, items: left }, fc.ctes) : st.doors.query(st, rs.subquery, fc.parent, fc.ctes);
  charge(st, out.cols.length);
  const cols = renameCols(
    out.cols.map((o) => ({ name: o.name, lin: o.lin, reads: null })),
    rs.alias,
    'subquery',
  );
  return { refname: rs.alias ? String(rs.alias.aliasname) : null, schema: null, cols, relVisible: !!rs.alias, colsVisible: true, base: null };
}

/** `t TABLESAMPLE BERNOULLI|SYSTEM (…) [REPEATABLE (…)]` on a table; without REPEATABLE the result is not cacheable. */
function tableSample(st: WalkState, ts: N, fc: FromCtx, left: readonly NsItem[]): NsItem[] {
  checkFields('RangeTableSample', ts);
  const method = strings(ts.method, 'TABLESAMPLE method');
  if (method.length !== 1 || !['bernoulli', 'system'].includes(method[0])) {
    throw new Refusal('function_not_allowed', 'only TABLESAMPLE BERNOULLI and SYSTEM are allowed');
  }
  const inner = nodeType(ts.relation ?? {});
  const isCte = inner === 'RangeVar' && ts.relation.RangeVar.schemaname === undefined && !!lookupCte(fc.ctes, String(ts.relation.RangeVar.relname));
  if (inner !== 'RangeVar' || isCte) {
    throw new Refusal('statement_not_allowed', 'TABLESAMPLE must be applied to a table');
  }
  const items = fromItem(st, ts.relation, fc, left);
  const ctx: Ctx = { scope: { parent: fc.parent, items: EMPTY_SCOPE_ITEMS }, ctes: fc.ctes, windows: null };
  for (const a of ts.args ?? []) consume(st, ex(st, a, ctx));
  if (ts.repeatable) consume(st, ex(st, ts.repeatable, ctx));
  else st.cacheable = false;
  return items;
}

/**
 * A LATERAL sub-select. When it references a column of an outer query level (the items to its
 * left, enclosing levels) it is evaluated per outer row like a sublink, and each of its outputs
 * also carries everything it consumed (`perRowQuery`): `LATERAL (SELECT count(*) … WHERE c2.phone
 * < c.phone)` is derived from phone. Without such a reference it is an ordinary derived table,
 * whose WHERE restricts rows (in a view body, the operator's decision; README, views).
 */
function lateralSubselect(st: WalkState, node: N, scope: Scope, ctes: CteEnv | null): QueryOut {
  const outer = new Set<Scope>();
  for (let s: Scope | null = scope; s; s = s.parent) outer.add(s);
  charge(st, outer.size);
  const frame = { outer, correlated: false };
  st.lateralFrames.push(frame);
  let r: { out: QueryOut; control: Lin };
  try {
    r = perRowQuery(st, node, scope, ctes);
  } finally {
    st.lateralFrames.pop();
  }
  // Its filters decide the rows of the enclosing query too (a sublink around it collects them).
  consume(st, r.control);
  if (!frame.correlated || r.control === LIN_NONE) return r.out;
  charge(st, r.out.cols.length);
  return { cols: r.out.cols.map((o) => ({ name: o.name, lin: merge(o.lin, r.control) })) };
}

/** A function in FROM (`RangeFunction`): ROWS FROM, WITH ORDINALITY, column definition lists; its arguments decide the rows (consumed). */
function rangeFunction(st: WalkState, rf: N, lateral: Scope, ctes: CteEnv | null): NsItem {
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
    let rows: ResultRows | null = null;
    let fname: string;
    if (hasOwn.call(call, 'FuncCall')) {
      const r = funcCall(st, call.FuncCall, ctx);
      lin = r.args;
      routine = r.routine;
      rows = r.rows;
      fname = r.routine.name;
    } else {
      lin = ex(st, call, ctx);
      fname = figureColname(call);
    }
    if (idx === 0) firstName = fname;
    // The arguments decide which rows the function produces and how many: a non-output use.
    lin = calc(st, lin);
    all = merge(all, lin);
    let names: string[];
    const deflist: N[] | null = defs ? (unwrap(defs, 'List').items as N[]) : funcs.length === 1 && rf.coldeflist ? rf.coldeflist : null;
    if (deflist) {
      names = deflist.map((cd: N) => {
        const def = unwrap(cd, 'ColumnDef');
        typeName(st, def.typeName);
        if (def.collClause) checkFields('CollateClause', def.collClause);
        return String(def.colname);
      });
    } else if (routine?.outColumns) names = [...routine.outColumns];
    else names = [funcs.length === 1 && rf.alias ? String(rf.alias.aliasname) : fname];
    // A relation's row returned (task hs): each column carries that relation's column of its name
    // (its reads, denies and masks), or, when that cannot be matched, every column of the rows returned.
    const byName = !deflist && rows?.cols && rows.cols.length === names.length && rows.cols.every((c, i) => c.name === names[i]) ? rows.cols : null;
    const every = rows ? merge(lin, { src: rows.whole.src, pass: false, opq: null }) : lin;
    names.forEach((n, i) => cols.push(byName ? { name: n, lin: merge(lin, byName[i].lin), reads: byName[i].reads, ...(byName[i].view ? { view: true as const } : {}) } : { name: n, lin: every, reads: null }));
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

/** A JOIN (`JoinExpr`): both sides, ON (a filter), USING/NATURAL (merged columns, compared with =), aliases hiding the inputs. */
function join(st: WalkState, j: N, fc: FromCtx, before: readonly NsItem[]): NsItem[] {
  checkFields('JoinExpr', j);
  const jt = String(j.jointype ?? 'JOIN_INNER');
  if (!['JOIN_INNER', 'JOIN_LEFT', 'JOIN_RIGHT', 'JOIN_FULL'].includes(jt)) throw new Refusal('statement_not_allowed', 'unsupported join type');
  const l = fromItem(st, j.larg, fc, before);
  const r = fromItem(st, j.rarg, fc, [...before, ...l]);
  const lcols = visibleCols(l);
  const rcols = visibleCols(r);
  charge(st, before.length + 2 * (l.length + r.length) + 2 * (lcols.length + rcols.length));
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
      const a = use(st, lc[0]);
      const b = use(st, rc[0]);
      if (st.ops) operatorUse(st, { kind: 'using', left: a, right: b }); // USING/NATURAL compare with =
      addFilter(st, a);
      addFilter(st, b);
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
  if (j.quals) addFilter(st, ex(st, j.quals, onCtx));

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
