/**
 * func.ts — function calls (PostgreSQL: parse_func.c, ParseFuncOrColumn, func_get_detail): the
 * function named is resolved against the catalogue through the search path, and every same-named
 * candidate PostgreSQL could pick must be acceptable (deny list, built-in classification of
 * builtin-functions/, volatility, regconfig and allocation-size rules, `current_setting`'s names).
 * The call's value is derived from its arguments; aggregate modifiers are agg.ts's.
 *
 * Below expr.ts in the import order, so arguments are walked through the door `st.doors.expr`.
 */
import { allocationSizeReason } from '../builtin-functions/sizing';
import { BUILTIN_SCHEMAS, builtinFunctionRefusal, regconfigCallReason } from '../builtin-functions/classes';
import { deniedFunctionReason, deniedSettingReason, HARMLESS_VOLATILE, isCacheBreaking } from '../function-policy';
import { functionReads } from '../function-reads';
import { JSON_OBJECT_QUALIFIED_SINCE } from '../legacy-syntax';
import { colKey, type ColumnRef, derive, type Lin, LIN_ANY, LIN_NONE, merge, wholeRow } from '../lineage';
import { type PreparedRelation, type PreparedRoutine, relKey } from '../prepared-catalog';
import { aggregateModifiers, isPlainCount } from './agg';
import { checkFields, constString, hasOwn, type N, q, Refusal, strings } from './nodes';
import { relationItem } from './relation';
import { charge, type Col, type Ctx, type WalkState } from './state';
import { consume, countUse, dependsOnShape, functionRead, readAll, use } from './uses';

const VOL_RANK: Record<string, number> = { immutable: 0, stable: 1, volatile: 2 };

/** The routine a function name resolves to (the first candidate on the path) and every candidate PostgreSQL could pick, after each was judged; records the use. */
function resolveFunction(st: WalkState, parts: string[]): { first: PreparedRoutine; candidates: PreparedRoutine[] } {
  if (parts.length === 0 || parts.length > 2) {
    throw new Refusal('function_not_allowed', parts.length > 2 ? 'cross-database function references are not supported' : 'malformed function name');
  }
  const name = parts[parts.length - 1];
  const schema = parts.length === 2 ? parts[0] : undefined;
  // PostgreSQL looks the name up in every schema of the path (or the one named): the read checks
  // that no candidate appeared there since the scan (tasks hg1, hg2). pg_catalog: only a superuser creates there.
  if (schema === undefined) st.functionNames.add(name);
  else if (schema !== 'pg_catalog') st.qualifiedFunctionNames.set(schema + '\u0000' + name, { schema, name });
  const denied = deniedFunctionReason(name);
  if (denied) throw new Refusal('function_not_allowed', `function ${q(name)} is not allowed: it ${denied}`);
  const all = st.cat.functionsByName.get(name);
  const candidates: PreparedRoutine[] = [];
  if (all) {
    if (schema !== undefined) {
      for (const r of all) if (r.schema === schema) candidates.push(r);
    } else {
      for (const s of st.cat.path) for (const r of all) if (r.schema === s) candidates.push(r);
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
    if (isCacheBreaking(c.schema, c.name, c.volatility)) st.cacheable = false;
    // A user function's body may read relations the statement does not name (task hfn).
    if (!BUILTIN_SCHEMAS.has(c.schema)) functionRead(st, c.schema, c.name);
    if (VOL_RANK[c.volatility] > VOL_RANK[worst.volatility]) worst = c;
  }
  const first = candidates[0];
  const key = first.schema + '.' + first.name;
  if (!st.functions.has(key)) st.functions.set(key, { schema: first.schema, name: first.name, volatility: worst.volatility });
  return { first, candidates };
}

/**
 * What a call's row result is built from (task hs; red team rt42c's open item): `whole`, the
 * lineage of the call's value, every column of every catalogued relation whose row a candidate
 * returns, embedding those rows (`wholeRow`); `cols`, the FROM item's columns (`SELECT * FROM f()`)
 * when exactly one relation's row is returned: its columns in order, each derived from the
 * relation's column of that name (so a deny or mask on it holds for the function's column), else null.
 */
export interface ResultRows {
  whole: Lin;
  cols: Col[] | null;
}

/**
 * The row results of `candidates` (task hs): PostgreSQL builds a result of a relation's row type (or
 * a stand-alone composite type, or a domain over either) from the type's LIVE columns, so a column
 * added after the scan would be returned unseen. Each such relation is read whole (`readAll`: every
 * column authorized, as for its row type used as a type) and its row shape guarded; a stand-alone
 * composite type's shape is guarded. A row type the catalogue does not list is refused
 * `function_not_allowed`. Null when no candidate returns a relation's row.
 */
function resultRows(st: WalkState, candidates: readonly PreparedRoutine[]): ResultRows | null {
  const rels = new Map<string, PreparedRelation>();
  for (const c of candidates) {
    for (const t of c.resultRowTypes ?? []) {
      const k = relKey(t.schema, t.name);
      const rel = st.cat.relations.get(k);
      if (rel) rels.set(k, rel);
      else if (st.cat.compositeTypes.has(k)) dependsOnShape(st, t);
      else throw new Refusal('function_not_allowed', `function ${q(c.schema + '.' + c.name)} returns rows of a type the source's catalogue does not list`);
    }
  }
  if (rels.size === 0) return null;
  const lins: Lin[] = [];
  let cols: Col[] | null = null;
  for (const rel of rels.values()) {
    readAll(st, rel);
    const item = relationItem(st, rel, undefined);
    charge(st, item.cols.length);
    for (const c of item.cols) lins.push(use(st, c));
    if (rels.size === 1) cols = item.cols.map((c) => ({ name: c.name, lin: derive(c.lin), reads: c.reads, ...(c.view ? { view: true as const } : {}) }));
  }
  return { whole: wholeRow(lins), cols };
}

/**
 * The name the source's server looks up for a call written `parts`: the analyser's grammar turns the
 * legacy `json_object(…)` into `pg_catalog.json_object(…)`, which a server before PostgreSQL 16 (or
 * one the catalogue does not record the version of) looks up unqualified on the search path, where a
 * same-named user function may match the arguments better (red team rt46a J1). There the call is
 * judged unqualified; so is an explicit `pg_catalog.json_object(…)` (conservative: every candidate).
 */
function lookedUpName(st: WalkState, parts: string[]): string[] {
  if (parts.length !== 2 || parts[0] !== 'pg_catalog' || parts[1] !== 'json_object') return parts;
  const v = st.cat.source.serverVersionNum;
  return v !== undefined && v >= JSON_OBJECT_QUALIFIED_SINCE ? parts : [parts[1]];
}

/**
 * A function call (`FuncCall`): resolved and judged, arguments and modifiers walked. `lin` is its
 * value, derived from them and, for a call returning a relation's row, that row (`rows.whole`, task
 * hs); `args` the arguments' part alone (what decides which rows a function in FROM produces);
 * `rows` the row result (`resultRows`), or null.
 */
export function funcCall(st: WalkState, fc: N, ctx: Ctx): { lin: Lin; args: Lin; routine: PreparedRoutine; rows: ResultRows | null } {
  checkFields('FuncCall', fc);
  const fname = lookedUpName(st, strings(fc.funcname, 'function name'));
  const { first: routine, candidates } = resolveFunction(st, fname);
  const rows = resultRows(st, candidates);
  const bare = fname[fname.length - 1].toLowerCase();
  if (bare === 'current_setting') checkSetting(fc.args ?? []);
  const args: N[] = fc.args ?? [];
  // A plain `count(col)` reveals only how many values are not null: listed in `countUses`
  // (allowed for masked columns, its result is still redacted) instead of `nonOutputUses`.
  const plainCount = isPlainCount(fc, args, bare === 'count' && onlyBuiltIn(st, fname));
  let lin = LIN_NONE;
  for (const a of args) {
    let al: Lin;
    if (hasOwn.call(a, 'NamedArgExpr')) {
      const na = a.NamedArgExpr as N;
      checkFields('NamedArgExpr', na);
      al = st.doors.expr(st, na.arg, ctx);
    } else al = st.doors.expr(st, a, ctx);
    if (plainCount && al.pass && al.src) countUse(st, al);
    else consume(st, al);
    lin = merge(lin, al);
  }
  lin = aggregateModifiers(st, fc, ctx, lin);
  if (routine.schema === 'pg_catalog') {
    const first = args.length > 0 && !hasOwn.call(args[0], 'NamedArgExpr') ? constString(args[0]) : null;
    const why = regconfigCallReason(routine.name, args.length, first);
    if (why) throw new Refusal('function_not_allowed', `function ${q(routine.name)} is not allowed ${why}`);
  }
  if (routine.schema === 'pg_catalog' && fc.args) {
    const why = allocationSizeReason(routine.name, fc.args as N[]);
    if (why) throw new Refusal('function_not_allowed', `resource limit: ${why}`);
  }
  // In a view's definition, a user function's value may carry every column its body may read
  // (task hfn, function-reads.ts); one whose body cannot be analysed may read any relation (views.ts).
  const value = st.viewBody && !onlyBuiltIn(st, fname) ? merge(derive(lin), userFunctionLin(st, fname)) : derive(lin);
  return { lin: rows ? merge(value, rows.whole) : value, args: value, routine, rows };
}

/**
 * The lineage a call of user function `parts` adds in a view's definition: every column of every
 * relation any same-named candidate on the path may read (task hfn), or `LIN_ANY` when one of them
 * cannot be analysed.
 */
function userFunctionLin(st: WalkState, parts: string[]): Lin {
  const name = parts[parts.length - 1];
  const schemas = parts.length === 2 ? [parts[0]] : st.cat.path;
  const src = new Map<string, ColumnRef>();
  for (const r of st.cat.functionsByName.get(name) ?? []) {
    if (BUILTIN_SCHEMAS.has(r.schema) || !schemas.includes(r.schema)) continue;
    const reads = functionReads(st.cat, r.schema, r.name);
    if (reads.opaque !== null) return LIN_ANY;
    for (const rel of reads.relations) {
      const cols = st.cat.relations.get(relKey(rel.schema, rel.name))?.columnNames ?? [];
      for (const column of cols) src.set(colKey(rel.schema, rel.name, column), { schema: rel.schema, table: rel.name, column });
    }
  }
  charge(st, src.size);
  return src.size ? { src, pass: false, opq: null } : LIN_NONE;
}

/** True when every candidate PostgreSQL could pick for this function name is a `pg_catalog` one. */
function onlyBuiltIn(st: WalkState, parts: string[]): boolean {
  if (parts.length === 2) return parts[0] === 'pg_catalog';
  const all = st.cat.functionsByName.get(parts[0]) ?? [];
  return all.every((r) => r.schema === 'pg_catalog' || !st.cat.path.includes(r.schema));
}

/**
 * `current_setting(name [, missing_ok])`: only a constant setting name from a short list of
 * harmless client-facing settings (the rest reveal the server: port, addresses, paths, version).
 */
function checkSetting(args: N[]): void {
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
