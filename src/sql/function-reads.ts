/**
 * What a user function may read (task hfn; sql-safety.md layer 3, class 6).
 *
 * A function outside `pg_catalog`/`information_schema` runs a body InterLock does not see in the
 * agent's statement: `SELECT emp_ssn(1)` reads `employee.ssn` though the statement names no
 * relation. The catalogue scan records, per overload (`SourceCatalog.routines`,
 * src/sources/postgres/catalog.ts), its language, SECURITY DEFINER, pinned settings and body facts;
 * this module turns them into the relations a call may read, for the analyser (`func.ts`,
 * `oper.ts`), which reports them in `SqlAnalysisOk.functionReads` for authorization and policy.
 *
 * Per overload (every overload of a name counts: the analyser does not resolve argument types):
 * - LANGUAGE sql with a SQL-standard body (BEGIN ATOMIC / RETURN): the relations and functions the
 *   server's dependency records name (pg_depend; a whole-row reference records no column, so every
 *   column of each relation counts as read).
 * - Every LANGUAGE sql function: the dependency records also name what its parameter defaults call
 *   (run in the caller's statement when an argument is omitted) and its parameter and result types
 *   (a domain whose CHECK runs user code makes it opaque) (red team rt41b). A snapshot without
 *   them (scanned before) makes a string body opaque until a rescan.
 * - LANGUAGE sql with a string body: the body is parsed with the same parser; every relation it
 *   names is resolved as PostgreSQL will resolve it at call time (the function's own pinned
 *   `search_path` when `proconfig` sets one, else the reader's path), every function it calls and
 *   every user operator of a name it uses is followed. A body that names no relation is pure.
 * - Any other language (plpgsql, C, internal, plpython, …) may run dynamic SQL: opaque.
 * A view read by a body adds the relations behind it (view-lineage.ts). Fail closed: an unparsable
 * body, a statement other than SELECT/VALUES, a relation or function the catalogue does not hold, a
 * system catalogue, a built-in the agent function policy refuses (it may read files or run SQL
 * text), a cast to a type whose input runs user code, a view whose lineage is unrecorded or calls
 * code that is not a function, more than `MAX_FUNCTIONS` functions reached, or a catalogue scanned
 * before these facts existed → opaque, with the reason an agent is told.
 *
 * Every column of every relation returned counts as read: an over-approximation that may refuse a
 * call that would be harmless, never one that leaks.
 */
import type { CatalogRoutine, RelationName } from './catalog-types';
import { BUILTIN_SCHEMAS, builtinFunctionRefusal } from './builtin-functions/classes';
import { deniedFunctionReason } from './function-policy';
import { JSON_OBJECT_QUALIFIED_SINCE, legacyCallName, readsAsAnalysed, sinceOf } from './legacy-syntax';
import { parseSql } from './parser';
import { type PreparedCatalog, relKey } from './prepared-catalog';
import { codeOfColumns, codeOfType, codeOfTypeName } from './type-code';
import { typeNameSchemas } from './type-uses';
import { viewLineage } from './view-lineage';

/** What a call of one function name may read. */
export interface FunctionReads {
  /** Relations whose every column the call may read (catalogued relations, views and the bases behind them), sorted. */
  relations: RelationName[];
  /** Why the body cannot be analysed (agent-facing, completes "function X …"), or null. */
  opaque: string | null;
  /** True when an overload is SECURITY DEFINER (runs with its owner's privileges). */
  securityDefiner: boolean;
  /**
   * Every user function the analysis followed (this one, what it calls, the code attached to its
   * types, …), each once, sorted: their definitions must still be the scanned ones when a statement
   * runs the call (task hf5, `SqlAnalysisOk.userFunctions`).
   */
  functions: RelationName[];
  /**
   * The function and operator names the string bodies of those functions look up when they run,
   * each with every schema (but `pg_catalog` and `information_schema`) PostgreSQL could resolve it
   * from: the one it is qualified with, else every schema of the body's lookup paths (its pinned
   * `search_path`, else the reader's; task hg2); `[NOT] BETWEEN` as the `>=`/`<=` (`<`/`>`) it
   * resolves (red team rt43b F2). Their definitions there must still be the scanned
   * ones (`SqlAnalysisOk.resolvedNames.qualifiedFunctions`/`qualifiedOperators`), sorted by schema then name.
   */
  lookups: { functions: RelationName[]; operators: RelationName[]; types?: RelationName[] };
}

/** Most distinct functions followed from one call; beyond it the call is opaque. */
export const MAX_FUNCTIONS = 200;

/** The direct facts of one function name (all overloads): relations named, functions called, or why opaque. */
interface Direct {
  relations: Map<string, RelationName>;
  calls: Set<string>;
  opaque: string | null;
  securityDefiner: boolean;
  /** Function (`f`) and operator (`o`) names its string body looks up, as `fnKey(schema, name)` (see `FunctionReads.lookups`). */
  lookups: { f: Set<string>; o: Set<string>; t: Set<string> };
}

const directCache = new WeakMap<PreparedCatalog, Map<string, Direct>>();
const readsCache = new WeakMap<PreparedCatalog, Map<string, FunctionReads>>();

/** Key of a function name: `schema.name`. */
function fnKey(schema: string, name: string): string {
  return schema + '\u0000' + name;
}

/**
 * What calling user function `schema.name` (any overload) may read, with everything it calls
 * (cycle guard, at most `MAX_FUNCTIONS` functions). Memoised per prepared catalogue. Never throws.
 * Built-in schemas are not user functions: callers judge them with the function policy.
 */
export function functionReads(cat: PreparedCatalog, schema: string, name: string): FunctionReads {
  let memo = readsCache.get(cat);
  if (!memo) readsCache.set(cat, (memo = new Map()));
  const key = fnKey(schema, name);
  const hit = memo.get(key);
  if (hit) return hit;
  const relations = new Map<string, RelationName>();
  let opaque: string | null = null;
  let securityDefiner = false;
  const lookF = new Set<string>();
  const lookO = new Set<string>();
  const lookT = new Set<string>();
  const seen = new Set<string>([key]);
  const queue = [key];
  while (queue.length && opaque === null) {
    const k = queue.shift()!;
    const d = direct(cat, k);
    if (d.securityDefiner) securityDefiner = true;
    if (d.opaque !== null) {
      const [s, n] = k.split('\u0000');
      opaque = k === key ? d.opaque : `calls ${s}.${n}, which ${d.opaque}`;
      break;
    }
    for (const [rk, r] of d.relations) relations.set(rk, r);
    for (const l of d.lookups.f) lookF.add(l);
    for (const l of d.lookups.o) lookO.add(l);
    for (const l of d.lookups.t) lookT.add(l);
    for (const c of d.calls) {
      if (seen.has(c)) continue;
      seen.add(c);
      if (seen.size > MAX_FUNCTIONS) {
        opaque = `calls more than ${MAX_FUNCTIONS} functions (too many to analyse)`;
        break;
      }
      queue.push(c);
    }
  }
  const out: FunctionReads = {
    relations: opaque === null ? [...relations.values()].sort((a, b) => (a.schema + '.' + a.name).localeCompare(b.schema + '.' + b.name)) : [],
    opaque,
    securityDefiner,
    functions: [...seen].sort().map(splitKey),
    lookups: { functions: [...lookF].sort().map(splitKey), operators: [...lookO].sort().map(splitKey), ...(lookT.size ? { types: [...lookT].sort().map(splitKey) } : {}) },
  };
  memo.set(key, out);
  return out;
}

/** `fnKey`'s inverse. */
function splitKey(k: string): RelationName {
  const [schema, name] = k.split('\u0000');
  return { schema, name };
}

/** The direct facts of function `k` (memoised). */
function direct(cat: PreparedCatalog, k: string): Direct {
  let memo = directCache.get(cat);
  if (!memo) directCache.set(cat, (memo = new Map()));
  const hit = memo.get(k);
  if (hit) return hit;
  const d: Direct = { relations: new Map(), calls: new Set(), opaque: null, securityDefiner: false, lookups: { f: new Set(), o: new Set(), t: new Set() } };
  try {
    computeDirect(cat, k, d);
  } catch {
    d.opaque = 'has a body InterLock cannot analyse';
  }
  if (d.opaque !== null) {
    d.relations.clear();
    d.calls.clear();
    d.lookups.f.clear();
    d.lookups.o.clear();
    d.lookups.t.clear();
  }
  memo.set(k, d);
  return d;
}

function computeDirect(cat: PreparedCatalog, k: string, d: Direct): void {
  const [schema, name] = k.split('\u0000');
  const routines = cat.source.routines;
  if (!routines) {
    d.opaque = 'has no recorded body facts (the source was scanned before InterLock analysed function bodies; rescan it)';
    return;
  }
  const overloads = routinesOf(cat, schema, name);
  if (overloads.length === 0) {
    d.opaque = 'is not in the source catalogue';
    return;
  }
  for (const r of overloads) {
    if (r.securityDefiner) d.securityDefiner = true;
    if (r.language !== 'sql') {
      d.opaque = `runs code InterLock cannot analyse (LANGUAGE ${r.language})`;
      return;
    }
    // The server's dependency records: a SQL-standard body's, and a string body's parameter
    // defaults (run in the caller's statement) and parameter/result types (red team rt41b).
    if (!r.depends) {
      d.opaque = typeof r.source === 'string' ? 'has no recorded parameter facts (the source was scanned before InterLock analysed parameter defaults; rescan it)' : 'has a body InterLock cannot analyse';
      return;
    }
    if (r.depends.unsafeTypes) return void (d.opaque = 'uses a type whose input runs user code');
    // User code attached to its parameter, result and body types: casts and operator classes (task hcast).
    if (cat.source.typeCode && !r.depends.types) return void (d.opaque = 'has no recorded type facts (the source was scanned before InterLock analysed code attached to types; rescan it)');
    for (const oid of r.depends.types ?? []) if (!addCalls(cat, d, codeOfType(cat, oid))) return;
    for (const rel of r.depends.relations) if (!addRelation(cat, d, rel.schema, rel.name)) return;
    for (const f of r.depends.functions) if (!addCall(cat, d, f.schema, f.name)) return;
    if (typeof r.source === 'string' && !stringBody(cat, r, d)) return;
  }
}

const routineIndex = new WeakMap<PreparedCatalog, Map<string, CatalogRoutine[]>>();

function routinesOf(cat: PreparedCatalog, schema: string, name: string): CatalogRoutine[] {
  let idx = routineIndex.get(cat);
  if (!idx) {
    idx = new Map();
    for (const r of cat.source.routines ?? []) {
      const key = fnKey(r.schema, r.name);
      const list = idx.get(key);
      if (list) list.push(r);
      else idx.set(key, [r]);
    }
    routineIndex.set(cat, idx);
  }
  return idx.get(fnKey(schema, name)) ?? [];
}

/**
 * Adds a relation (a view with the relations behind it); false (and `d.opaque` set) when it cannot be.
 * The reasons name no user relation (red team rt41b F9: they reach callers who may not describe it).
 */
function addRelation(cat: PreparedCatalog, d: Direct, schema: string, name: string): boolean {
  if (BUILTIN_SCHEMAS.has(schema)) return !(d.opaque = `reads the system catalogue ${schema}.${name}`);
  const rel = cat.relations.get(relKey(schema, name));
  if (!rel) return !(d.opaque = 'reads a relation that is not in the source catalogue');
  d.relations.set(relKey(schema, name), { schema, name });
  if (!addCalls(cat, d, codeOfColumns(cat, schema, name))) return false;
  if (rel.kind !== 'view' && rel.kind !== 'materialized_view') return true;
  const lin = viewLineage(cat.source, schema, name);
  if (lin.unknown.length) return !(d.opaque = 'reads a view whose lineage is not recorded');
  for (const v of lin.views) d.relations.set(relKey(v.schema, v.name), { schema: v.schema, name: v.name });
  for (const b of lin.bases) {
    if (BUILTIN_SCHEMAS.has(b.schema)) return !(d.opaque = `reads the system catalogue ${b.schema}.${b.name} through a view`);
    d.relations.set(relKey(b.schema, b.name), { schema: b.schema, name: b.name });
    if (!addCalls(cat, d, codeOfColumns(cat, b.schema, b.name))) return false;
  }
  for (const code of lin.userCode) {
    const dot = code.indexOf('.');
    const s = code.slice(0, dot);
    const n = code.slice(dot + 1);
    // userCode names functions, operators and unsafe types alike: only a function can be followed.
    if (!(cat.functionsByName.get(n) ?? []).some((f) => f.schema === s)) return !(d.opaque = 'reads a view that runs user code other than functions');
    if (!addCall(cat, d, s, n)) return false;
  }
  return true;
}

/** Adds the user functions attached to a type the body uses (task hcast, type-code.ts) as calls. */
function addCalls(cat: PreparedCatalog, d: Direct, fns: readonly RelationName[]): boolean {
  for (const f of fns) if (!addCall(cat, d, f.schema, f.name)) return false;
  return true;
}

/** Adds a called function: a built-in is judged by the agent function policy, a user one followed. */
function addCall(cat: PreparedCatalog, d: Direct, schema: string, name: string): boolean {
  if (BUILTIN_SCHEMAS.has(schema)) {
    const why = deniedFunctionReason(name) ?? builtinFunctionRefusal(schema, name);
    if (why) return !(d.opaque = `calls ${schema}.${name}, which ${why}`);
    return true;
  }
  const denied = deniedFunctionReason(name);
  if (denied) return !(d.opaque = `calls ${schema}.${name}, which ${denied}`);
  d.calls.add(fnKey(schema, name));
  return true;
}

/**
 * The lookup paths of a string body: the pinned `search_path` of `proconfig`, else the reader's
 * (pg_catalog first unless named). Unpinned SECURITY DEFINER: also that path with the owner's
 * schema after pg_catalog, since a session path's `$user` (PostgreSQL's default `"$user", public`)
 * names the owner inside it while the scanned path (`current_schemas` for the reader) has dropped
 * it (red team rt41b): every name is resolved on each path and every resolution counts.
 */
function bodyPaths(cat: PreparedCatalog, r: CatalogRoutine): string[][] | null {
  const pinned = (r.config ?? []).find((c) => c.toLowerCase().startsWith('search_path='));
  if (pinned === undefined) {
    if (!r.securityDefiner || cat.path.includes(r.owner)) return [[...cat.path]];
    const at = cat.path[0] === 'pg_catalog' ? 1 : 0;
    return [[...cat.path], [...cat.path.slice(0, at), r.owner, ...cat.path.slice(at)]];
  }
  const one = pinnedPath(cat, r, pinned);
  return one ? [one] : null;
}

/** A pinned `search_path=…` setting as a lookup path, or null when `$user` cannot be resolved. */
function pinnedPath(cat: PreparedCatalog, r: CatalogRoutine, pinned: string): string[] | null {
  const out: string[] = [];
  for (const raw of splitPath(pinned.slice('search_path='.length))) {
    if (raw === '$user') {
      // $user is the current user at call time: the owner inside SECURITY DEFINER, else the reader.
      const who = r.securityDefiner ? r.owner : cat.source.readerRole;
      if (who === undefined) return null;
      out.push(who);
    } else if (raw !== 'pg_temp' && raw !== '') out.push(raw);
  }
  return out.includes('pg_catalog') ? out : ['pg_catalog', ...out];
}

/** Splits a search_path value as PostgreSQL prints it in proconfig (`a, "B c", $user`). */
function splitPath(v: string): string[] {
  const out: string[] = [];
  let cur = '';
  let quoted = false;
  let wasQuoted = false;
  for (let i = 0; i < v.length; i++) {
    const ch = v[i];
    if (quoted) {
      if (ch === '"' && v[i + 1] === '"') (cur += '"'), i++;
      else if (ch === '"') quoted = false;
      else cur += ch;
    } else if (ch === '"') (quoted = true), (wasQuoted = true);
    else if (ch === ',') {
      out.push(wasQuoted ? cur : cur.trim().toLowerCase());
      cur = '';
      wasQuoted = false;
    } else if (!/\s/.test(ch) || cur !== '') cur += ch;
  }
  out.push(wasQuoted ? cur : cur.trim().toLowerCase());
  return out;
}

type Node = Record<string, unknown>;

/** A string body: parsed and every relation, function, operator and type cast it names collected. */
function stringBody(cat: PreparedCatalog, r: CatalogRoutine, d: Direct): boolean {
  const paths = bodyPaths(cat, r);
  if (!paths) return !(d.opaque = 'pins a search_path with $user that InterLock cannot resolve');
  const anyPath = [...new Set(paths.flat())];
  const stmts = parseSql(r.source!).stmts ?? [];
  for (const s of stmts) {
    const stmt = s.stmt as Node | undefined;
    if (!stmt || Object.keys(stmt).length !== 1 || !('SelectStmt' in stmt)) return !(d.opaque = 'runs a statement other than SELECT');
  }
  const ctes = new Set<string>();
  const rangeVars: Node[] = [];
  const funcs: string[][] = [];
  const opers: string[][] = [];
  const casts: string[][] = [];
  // On a server older than the parser's grammar, SQL/JSON syntax and the legacy json_object(…) are
  // calls of functions of those names on the path (red team rt46a J1, legacy-syntax.ts).
  const version = cat.source.serverVersionNum;
  let noCall: string | null = null;
  const walk = (n: unknown): void => {
    if (Array.isArray(n)) return void n.forEach(walk);
    if (n === null || typeof n !== 'object') return;
    for (const [key, v] of Object.entries(n as Node)) {
      if (key === 'RangeVar') rangeVars.push(v as Node);
      else if (key === 'CommonTableExpr') ctes.add(String((v as Node).ctename));
      else if (!readsAsAnalysed(version, key)) {
        const call = legacyCallName(key, v as Node);
        if (call === null) noCall ??= sinceOf(key)!.call;
        else funcs.push([call]);
      } else if (key === 'FuncCall') {
        const parts = names((v as Node).funcname);
        const legacy = parts.length === 2 && parts[0] === 'pg_catalog' && parts[1] === 'json_object' && !(version !== undefined && version >= JSON_OBJECT_QUALIFIED_SINCE);
        funcs.push(legacy ? ['json_object'] : parts);
      }
      else if (key === 'A_Expr' && String((v as Node).kind).includes('BETWEEN')) {
        // `[NOT] BETWEEN [SYMMETRIC]` is named `BETWEEN` in the tree but resolves `>=` and `<=`
        // (NOT: `<` and `>`) when it runs (red team rt43b F2).
        if (String((v as Node).kind).startsWith('AEXPR_NOT')) opers.push(['<'], ['>']);
        else opers.push(['>='], ['<=']);
      } else if (key === 'A_Expr' || key === 'SortBy' || key === 'SubLink') {
        const list = key === 'A_Expr' ? (v as Node).name : key === 'SortBy' ? (v as Node).useOp : (v as Node).operName;
        if (list) opers.push(names(list));
        // `x IN (SELECT …)` and `x = ANY (SELECT …)` without a name compare with `=`.
        else if (key === 'SubLink' && (v as Node).testexpr) opers.push(['=']);
      } else if (key === 'TypeName') casts.push(names((v as Node).names));
      // Simple CASE, JOIN USING and NATURAL JOIN compare with `=` without naming it.
      else if ((key === 'CaseExpr' && (v as Node).arg) || (key === 'JoinExpr' && ((v as Node).usingClause || (v as Node).isNatural))) opers.push(['=']);
      walk(v);
    }
  };
  walk(stmts);
  if (noCall !== null) return !(d.opaque = `uses ${noCall}, SQL/JSON syntax its server does not read as the analysis does`);
  for (const rv of rangeVars) {
    if (rv.catalogname) return !(d.opaque = 'names a relation of another database');
    const rel = String(rv.relname);
    if (typeof rv.schemaname === 'string') {
      if (!addRelation(cat, d, rv.schemaname, rel)) return false;
      continue;
    }
    if (ctes.has(rel)) continue;
    for (const path of paths) {
      const schema = path.find((s) => (s === 'pg_catalog' ? cat.systemRelations.has(rel) : cat.relations.has(relKey(s, rel))));
      if (schema === undefined) return !(d.opaque = 'reads a relation that is not in the source catalogue');
      if (!addRelation(cat, d, schema, rel)) return false;
    }
  }
  for (const parts of funcs) {
    const fname = parts[parts.length - 1];
    const schemas = parts.length === 2 ? [parts[0]] : anyPath;
    // Where the body's call may resolve when it runs: a function created there later must trip the guard (task hg2).
    for (const s of schemas) if (!BUILTIN_SCHEMAS.has(s)) d.lookups.f.add(fnKey(s, fname));
    const found = (cat.functionsByName.get(fname) ?? []).filter((f) => schemas.includes(f.schema));
    if (found.length === 0) return !(d.opaque = `calls ${parts.join('.')}, which is not in the source catalogue`);
    // Any candidate may be chosen by argument types: every one counts.
    for (const f of found) if (!addCall(cat, d, f.schema, f.name)) return false;
  }
  for (const parts of opers) {
    const oname = parts[parts.length - 1];
    const schemas = parts.length === 2 ? [parts[0]] : anyPath;
    for (const s of schemas) if (!BUILTIN_SCHEMAS.has(s)) d.lookups.o.add(fnKey(s, oname));
    for (const o of cat.source.operatorCode ?? []) {
      if (o[1] !== oname || !schemas.includes(o[0])) continue;
      if (o[4] === null || o[5] === null) return !(d.opaque = `uses operator ${oname}, which has no implementation`);
      if (!addCall(cat, d, o[4], o[5])) return false;
    }
    if (!cat.source.operatorCode && (cat.operatorsByName?.get(oname) ?? []).some((o) => !BUILTIN_SCHEMAS.has(o.schema))) {
      return !(d.opaque = `uses operator ${oname}, which may be user-defined`);
    }
  }
  for (const parts of casts) {
    const tname = parts[parts.length - 1];
    // Its casts and domain constraints are found by oid when the body runs: compared by the type guard (task hcast).
    for (const p of paths) {
      const eff = p.includes('pg_catalog') ? p : ['pg_catalog', ...p];
      for (const s of typeNameSchemas(cat, parts, eff, BUILTIN_SCHEMAS)) d.lookups.t.add(fnKey(s, tname));
    }
    const unsafe = cat.unsafeTypes.get(tname);
    if (unsafe && (parts.length === 1 || unsafe.includes(parts[0]))) return !(d.opaque = `casts to type ${tname}, whose input runs user code`);
    if (!addCalls(cat, d, codeOfTypeName(cat, parts, anyPath))) return false;
  }
  return true;
}

/** The strings of a name list (`[{String: {sval}}]`). */
function names(list: unknown): string[] {
  if (!Array.isArray(list)) return [];
  return list.map((x) => String(((x as Node).String as Node | undefined)?.sval ?? ''));
}
