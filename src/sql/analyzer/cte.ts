/**
 * cte.ts — WITH lists (PostgreSQL: parse_cte.c, transformWithClause, analyzeCTE,
 * checkWellFormedRecursion): each item's body is analysed once at its place; WITH RECURSIVE items
 * are ordered by dependency, a recursive term is walked once with placeholders for the item's own
 * columns and its lineage fixpoint solved on values (then everything recorded with placeholders is
 * rewritten, uses.ts `resolvePlaceholders`); SEARCH and CYCLE columns are derived.
 */
import { alternative, derive, type Lin, LIN_NONE, merge, placeholder, sameLin, substitute } from '../lineage';
import { ex } from './expr';
import { checkFields, type N, q, Refusal, strings, unwrap } from './nodes';
import { charge, type Col, type CteDef, type CteEnv, type Ctx, EMPTY_SCOPE_ITEMS, type OutCol, type Scope, type WalkState } from './state';
import { consume, resolvePlaceholders } from './uses';

/** Sanity cap on lineage fixpoint rounds of one WITH RECURSIVE item (the work budget binds first). */
const MAX_RECURSIVE_ITERATIONS = 10_000;

/** A WITH clause: the CTE environment it opens under `outer` (recursive items see each other, others only earlier ones). */
export function withClause(st: WalkState, w: N, parent: Scope | null, outer: CteEnv | null): CteEnv {
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
      const cols = cteBody(st, d, parent, env, false);
      env.map.set(String(d.ctename), { name: String(d.ctename), cols });
    }
    return env;
  }
  // WITH RECURSIVE: every name of the list is visible in every body; analyse in dependency order.
  const deps = new Map<string, Set<string>>();
  for (const d of defs) deps.set(String(d.ctename), referencedNames(d.ctequery, names, (n) => charge(st, n)));
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
    def.cols = cteBody(st, d, parent, env, selfRef, def);
  }
  return env;
}

/** Analyses one CTE body and returns its columns (aliases, SEARCH/CYCLE columns applied). */
function cteBody(st: WalkState, d: N, parent: Scope | null, env: CteEnv, selfRef: boolean, def?: CteDef): Col[] {
  const aliases = strings(d.aliascolnames, 'CTE column alias');
  const name = String(d.ctename);
  let outs: OutCol[];
  if (!selfRef) {
    outs = st.doors.query(st, d.ctequery, parent, env).cols;
  } else {
    const body = d.ctequery?.SelectStmt as N | undefined;
    if (!body || body.op !== 'SETOP_UNION' || !body.larg || !body.rarg) {
      throw new Refusal('invalid_sql', `recursive query ${q(name)} must have the form non-recursive-term UNION recursive-term`);
    }
    checkFields('SelectStmt', body);
    if (body.withClause || body.sortClause || body.limitCount || body.limitOffset || body.lockingClause) {
      throw new Refusal('statement_not_allowed', `unsupported clause in recursive query ${q(name)}`);
    }
    const left = st.doors.query(st, { SelectStmt: body.larg }, parent, env).cols;
    // The recursive term is walked once, with each column of this item standing for itself
    // (placeholders); the fixpoint is then solved on lineage values only.
    const id = ++st.recSeq;
    def!.cols = applyCteAliases(
      left.map((c, k) => ({ name: c.name, lin: placeholder(id, k) })),
      aliases,
      name,
    );
    const right = st.doors.query(st, { SelectStmt: body.rarg }, parent, env).cols;
    if (right.length !== left.length) throw new Refusal('invalid_sql', 'each UNION query must have the same number of columns');
    let cur: Lin[] = left.map((c) => c.lin);
    for (let i = 0; ; i++) {
      if (i >= MAX_RECURSIVE_ITERATIONS) throw new Refusal('statement_too_complex', `recursive query ${q(name)} is too complex to analyse`);
      charge(st, left.length);
      const prev = cur;
      const next = left.map((c, k) => alternative(alternative(c.lin, prev[k]), substitute(right[k].lin, id, prev)));
      if (next.every((l, k) => sameLin(l, prev[k]))) break;
      cur = next;
    }
    resolvePlaceholders(st, id, cur);
    // UNION (without ALL) compares rows; a column that is not one column's value unchanged
    // across the terms is treated like a computed one.
    for (const l of cur) if (!body.all || !l.pass) consume(st, l);
    outs = left.map((c, k) => ({ name: c.name, lin: cur[k] }));
  }
  let cols = applyCteAliases(outs, aliases, name);
  if (d.search_clause) {
    const sc = d.search_clause as N;
    checkFields('CTESearchClause', sc);
    const used = cteColumns(cols, strings(sc.search_col_list, 'SEARCH column'), name);
    consume(st, used); // ordering by them
    cols = [...cols, { name: String(sc.search_seq_column), lin: derive(used), reads: null }];
  }
  if (d.cycle_clause) {
    const cc = d.cycle_clause as N;
    checkFields('CTECycleClause', cc);
    const used = cteColumns(cols, strings(cc.cycle_col_list, 'CYCLE column'), name);
    consume(st, used); // compared to detect cycles
    const emptyCtx: Ctx = { scope: { parent: null, items: EMPTY_SCOPE_ITEMS }, ctes: null, windows: null };
    ex(st, cc.cycle_mark_value, emptyCtx);
    ex(st, cc.cycle_mark_default, emptyCtx);
    cols = [...cols, { name: String(cc.cycle_mark_column), lin: derive(used), reads: null }];
    if (cc.cycle_path_column !== undefined) cols.push({ name: String(cc.cycle_path_column), lin: derive(used), reads: null });
  }
  return cols;
}

/** Output columns renamed by the item's column aliases (`WITH w(a, b) AS …`). */
function applyCteAliases(outs: readonly OutCol[], aliases: string[], name: string): Col[] {
  if (aliases.length > outs.length) throw new Refusal('invalid_sql', `WITH query ${q(name)} has ${outs.length} columns available but ${aliases.length} columns specified`);
  return outs.map((o, i) => ({ name: i < aliases.length ? aliases[i] : o.name, lin: o.lin, reads: null }));
}

/** The merged lineage of the named columns of a WITH item (SEARCH and CYCLE column lists). */
function cteColumns(cols: readonly Col[], names: string[], cte: string): Lin {
  let lin = LIN_NONE;
  for (const n of names) {
    const c = cols.find((x) => x.name === n);
    if (!c) throw new Refusal('unknown_column', `column ${q(n)} not in WITH query ${q(cte)}`);
    lin = merge(lin, c.lin);
  }
  return lin;
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
