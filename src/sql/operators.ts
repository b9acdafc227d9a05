/**
 * Operators as PostgreSQL resolves them (issue 22, item 5; PostgreSQL docs §10.2 "Operators").
 *
 * Each operator use is resolved against the catalogue (`SourceCatalog.operatorResolution`) by its
 * operand types, as PostgreSQL's operator lookup does, and judged by the function that implements
 * the operator chosen:
 * 1. Candidates: operators of that name and arity in the named schema, or in the effective search
 *    path (`pg_catalog` first unless placed explicitly); a candidate hides same-signature ones in
 *    later schemas.
 * 2. Exact match: an `unknown` operand (a string literal, an untyped parameter) takes the other
 *    operand's type; the first schema of the path with an operator declared on exactly those types
 *    wins (after an unknown operand, also the other's domain base type). The chosen operator's
 *    function must not be volatile.
 * 3. Otherwise PostgreSQL picks among candidates its operands can reach by implicit coercion
 *    (same type, `unknown`, domain to base type, `pg_cast` implicit casts, arrays element-wise,
 *    pseudo-types). The choice is not reproduced: the use is allowed only when no reachable
 *    candidate is volatile (reachability is over-approximated, so the check is conservative).
 * An operand whose type cannot be proven (`null`) reaches every candidate. Operand types come from
 * `typeOf`: columns (a value whose lineage is one unchanged catalogue column), constants
 * (integer → `int4`/`int8`/`numeric`, string → `unknown`), casts, parameters (`unknown`), the
 * results of operators resolved before, boolean expressions, row constructors (`record`), built-in
 * functions whose every overload returns one type, and SQL value functions.
 *
 * Every syntactic form that runs an operator goes through `use` (the one entry point):
 * operators and row comparisons, `= ANY/ALL`, `IN` lists, `IS [NOT] DISTINCT FROM`, `NULLIF`,
 * `[NOT] BETWEEN [SYMMETRIC]` (as `>=`/`<=` and `<`/`>`), `LIKE`/`ILIKE`/`SIMILAR TO`, sub-select
 * comparisons (`IN (SELECT …)`, `op ANY/ALL (SELECT …)`, row comparisons with a sub-select), simple
 * `CASE x WHEN …` (as `=`), `JOIN … USING`/`NATURAL` (as `=`), and `ORDER BY … USING op`. (`JOIN …
 * ON` and MERGE's join condition are ordinary expressions.)
 */
import type { OperatorResolution, SourceCatalog, Volatility } from './catalog-types';
import type { ColumnRef, Lin } from './lineage';
import type { PreparedCatalog } from './prepared-catalog';
import { loadSnapshots } from './builtin-functions/classes';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type N = Record<string, any>;

/** An operand's type: a `pg_type` oid, `'unknown'` (untyped literal or parameter), or null (not provable). */
export type OperandType = number | 'unknown' | null;

/** One syntactic use of operators, as the analyser sees it (see the module comment). */
export type OperatorForm =
  /** An `A_Expr` node's body (every kind; `BETWEEN` forms as their comparisons). */
  | { kind: 'expr'; expr: N }
  /** A `SubLink` body of kind ANY, ALL or ROWCOMPARE (its outputs noted first with `noteOutputs`). */
  | { kind: 'sublink'; sublink: N }
  /** Simple `CASE arg WHEN when`: `arg = when`. */
  | { kind: 'case'; arg: N; when: N }
  /** `JOIN … USING (c)` / `NATURAL JOIN`: left `=` right, by the two columns' lineage. */
  | { kind: 'using'; left: Lin; right: Lin }
  /** `ORDER BY node USING op` (also in windows and aggregates). */
  | { kind: 'sort'; useOp: N[]; node: N };

/**
 * What `use` decided: a refusal (agent-facing text), or allowed (`cacheable` false when a non-built-in
 * operator may run; `names`: every operator name the form makes PostgreSQL look up, implicit ones
 * included (`=` of IN, CASE and USING; `>=`/`<=` of BETWEEN), but those qualified with `pg_catalog`,
 * each with the schema it is qualified with (`OPERATOR(s.=)`), null when looked up through the path).
 */
export type OperatorDecision = { refusal: string } | { refusal: null; cacheable: boolean; user: ReadonlyArray<UserOperator>; names: ReadonlyArray<LookedUpName> };

/** An operator or function name PostgreSQL looks up: in `schema` when the statement qualifies it, else (null) through the search path (task hg2). */
export interface LookedUpName {
  schema: string | null;
  name: string;
}

/** An operator outside `pg_catalog` a use may run (task hfn: its function's reads count), by schema, name and operand type oids (0 = none). */
export interface UserOperator {
  schema: string;
  name: string;
  left: number;
  right: number;
}

/** What a resolution collects: whether the statement stays cacheable, the user operators that may run, and the names looked up. */
type Acc = { cacheable: boolean; user: UserOperator[]; names: LookedUpName[] };

const BOOL = 16;
const INT4 = 23;
const INT8 = 20;
const NUMERIC = 1700;
const TEXT = 25;
const RECORD = 2249;
const BIT = 1560;

interface TypeRow {
  oid: number;
  schema: string;
  name: string;
  typtype: string;
  category: string;
  preferred: boolean;
  base: number;
  elem: number;
  display: string;
}
interface OpRow {
  schema: string;
  name: string;
  left: number;
  right: number;
  result: number;
  volatility: Volatility;
}

/** Indexes of one catalogue's resolution rows and column types (built once per catalogue object). */
interface Index {
  types: Map<number, TypeRow>;
  /** `format_type` spellings (without type modifiers) → oid. */
  byFormat: Map<string, number>;
  /** `schema.typname` → oid. */
  byName: Map<string, number>;
  /** element oid → array type oid. */
  arrayOf: Map<number, number>;
  casts: Set<string>;
  ops: Map<string, OpRow[]>;
  /** relKey-like `schema\0table` → column → dataType. */
  columns: Map<string, Map<string, string>>;
  /** Memoised judgements (`OperatorResolver.judge`), at most 10 000 per catalogue. */
  judged: Map<string, Judgement>;
}

/** One resolved operator use: the refusal (or null), the result type, and whether the chosen operator keeps the statement cacheable. */
interface Judgement {
  refusal: string | null;
  result: OperandType;
  cacheable: boolean;
  user: UserOperator[];
}

const VOL: Record<string, Volatility> = { i: 'immutable', s: 'stable', v: 'volatile' };
const indexes = new WeakMap<SourceCatalog, Index>();

function buildIndex(src: SourceCatalog, res: OperatorResolution): Index {
  const hit = indexes.get(src);
  if (hit) return hit;
  const types = new Map<number, TypeRow>();
  const byFormat = new Map<string, number>();
  const byName = new Map<string, number>();
  const arrayOf = new Map<number, number>();
  for (const [oid, schema, name, typtype, category, preferred, base, elem, f1, f2] of res.types) {
    types.set(oid, { oid, schema, name, typtype, category, preferred, base, elem, display: f1 });
    for (const f of [f1, f2]) if (!byFormat.has(f)) byFormat.set(f, oid);
    byName.set(schema + '.' + name, oid);
    if (category === 'A' && elem !== 0 && name.startsWith('_')) arrayOf.set(elem, oid);
  }
  const ops = new Map<string, OpRow[]>();
  for (const [schema, name, left, right, result, v] of res.operators) {
    const list = ops.get(name) ?? ops.set(name, []).get(name)!;
    list.push({ schema, name, left, right, result, volatility: VOL[v] ?? 'volatile' });
  }
  const columns = new Map<string, Map<string, string>>();
  for (const r of src.relations) columns.set(r.schema + '\u0000' + r.name, new Map(r.columns.map((c) => [c.name, c.dataType])));
  const idx: Index = { types, byFormat, byName, arrayOf, casts: new Set(res.implicitCasts.map(([a, b]) => a + ':' + b)), ops, columns, judged: new Map() };
  indexes.set(src, idx);
  return idx;
}

/** Return types of built-in functions whose every overload (PostgreSQL 15–18) returns the same non-polymorphic type. */
let builtinReturns: Map<string, string | null> | null = null;
function builtinReturnType(name: string): string | null {
  if (!builtinReturns) {
    builtinReturns = new Map();
    for (const s of loadSnapshots()) {
      for (const r of s.rows) {
        if (r[0] !== 'pg_catalog') continue;
        const prev = builtinReturns.get(r[1]);
        const t = r[7] ? null : r[3];
        builtinReturns.set(r[1], prev === undefined ? t : prev === t ? prev : null);
      }
    }
  }
  return builtinReturns.get(name) ?? null;
}

const hasOwn = Object.prototype.hasOwnProperty;

/**
 * Resolves and judges operator uses for one analysis (one per walk state: `WalkState.ops` in
 * `analyzer/state.ts`). Create with `OperatorResolver.for(catalog)`, which is null when the
 * catalogue has no resolution rows (then the analyser judges operators by name).
 */
export class OperatorResolver {
  /** Expressions whose value is an unchanged catalogue column (passthrough lineage noted by the analyser). */
  private readonly columnOf = new WeakMap<N, Lin>();
  /** Result types of operator expressions resolved exactly (A_Expr bodies). */
  private readonly results = new WeakMap<N, OperandType>();
  /** Output lineage of sub-selects (SubLink bodies). */
  private readonly outputsOf = new WeakMap<N, readonly Lin[]>();

  private constructor(
    private readonly cat: PreparedCatalog,
    private readonly idx: Index,
  ) {}

  /** The resolver for a prepared catalogue, or null when it has no `operatorResolution`. */
  static for(cat: PreparedCatalog): OperatorResolver | null {
    const res = cat.source.operatorResolution;
    return res ? new OperatorResolver(cat, buildIndex(cat.source, res)) : null;
  }

  /** Records the output lineage of a sub-select (a `SubLink` body), for row comparisons with it. */
  noteOutputs(sublink: N, outputs: readonly Lin[]): void {
    this.outputsOf.set(sublink, outputs);
  }

  /** Records the lineage the analyser computed for an expression node (only passthrough lineage is kept). */
  note(node: N, lin: Lin): void {
    if (lin.pass && lin.src) this.columnOf.set(node, lin);
  }

  /**
   * The one entry point: resolves every operator the form runs and returns the refusal of the first
   * that cannot be proven safe, or `{ refusal: null, cacheable }`.
   */
  use(form: OperatorForm): OperatorDecision {
    const acc: Acc = { cacheable: true, user: [], names: [] };
    const refusal = this.form(form, acc);
    return refusal ? { refusal } : { refusal: null, cacheable: acc.cacheable, user: acc.user, names: acc.names };
  }

  private form(f: OperatorForm, acc: Acc): string | null {
    switch (f.kind) {
      case 'expr':
        return this.expr(f.expr, acc);
      case 'sublink': {
        const sl = f.sublink;
        const parts = sl.operName ? names(sl.operName) : ['='];
        if (!parts) return 'malformed operator name';
        const rights = (this.outputsOf.get(sl) ?? []).map((l) => this.typeOfLin(l));
        const t = sl.testexpr as N | undefined;
        const lefts: Array<N | OperandType> = t && hasOwn.call(t, 'RowExpr') ? ((t.RowExpr as N).args ?? []) : t ? [t] : [];
        if (lefts.length !== rights.length) return this.judgeAll(parts, lefts.map(() => null), lefts.map(() => null), acc);
        return this.judgeAll(parts, lefts, rights, acc);
      }
      case 'case':
        return this.pair(['='], f.arg, f.when, acc);
      case 'using':
        return this.judge(['='], this.typeOfLin(f.left), this.typeOfLin(f.right), acc).refusal;
      case 'sort': {
        const parts = names(f.useOp);
        if (!parts) return 'malformed operator name';
        const t = this.typeOf(f.node);
        return this.judge(parts, t, t, acc).refusal;
      }
    }
  }

  private expr(e: N, acc: Acc): string | null {
    const kind = String(e.kind);
    const parts = names(e.name);
    if (!parts) return 'malformed operator name';
    if (kind.includes('BETWEEN')) {
      const bounds: N[] = hasOwn.call(e.rexpr ?? {}, 'List') ? (e.rexpr.List.items ?? []) : [];
      const [lo, hi] = kind.startsWith('AEXPR_NOT') ? ['<', '>'] : ['>=', '<='];
      const sym = kind.endsWith('_SYM');
      for (const [op, b] of [[lo, bounds[0]], [hi, bounds[1]], ...(sym ? [[lo, bounds[1]], [hi, bounds[0]]] : [])] as Array<[string, N]>) {
        const r = this.pair([op], e.lexpr, b, acc);
        if (r) return r;
      }
      return null;
    }
    if (kind === 'AEXPR_IN') {
      const items: N[] = hasOwn.call(e.rexpr ?? {}, 'List') ? (e.rexpr.List.items ?? []) : [e.rexpr];
      if (hasOwn.call(e.lexpr ?? {}, 'RowExpr')) {
        for (const it of items) {
          const r = this.pair(parts, e.lexpr, it, acc);
          if (r) return r;
        }
        return null;
      }
      // PostgreSQL compares with each item, or with an array of the items' common type (one of
      // the operand types, or text when all are unknown): judge every such pairing.
      const l = this.typeOf(e.lexpr);
      const rights = new Set<OperandType>(items.map((it) => this.typeOf(it)));
      if ([...rights].every((t) => t === 'unknown')) rights.add(TEXT);
      if (l !== 'unknown') rights.add(l);
      for (const r of rights) {
        const d = this.judge(parts, l, r, acc);
        if (d.refusal) return d.refusal;
      }
      return null;
    }
    if (kind === 'AEXPR_OP_ANY' || kind === 'AEXPR_OP_ALL') {
      const l = this.typeOf(e.lexpr);
      const a = this.typeOf(e.rexpr);
      return this.judge(parts, l, a === 'unknown' || a === null ? a : this.elementOf(a), acc).refusal;
    }
    if (!e.lexpr && (kind === 'AEXPR_OP')) {
      const d = this.judge(parts, 'none', this.typeOf(e.rexpr), acc);
      if (!d.refusal) this.results.set(e, d.result);
      return d.refusal;
    }
    if (hasOwn.call(e.lexpr ?? {}, 'RowExpr') && hasOwn.call(e.rexpr ?? {}, 'RowExpr')) return this.pair(parts, e.lexpr, e.rexpr, acc);
    if (hasOwn.call(e.lexpr ?? {}, 'RowExpr') && hasOwn.call(e.rexpr ?? {}, 'SubLink')) {
      // `ROW(a, b) op (SELECT x, y …)` is a row comparison with the sub-select's columns.
      const args: N[] = e.lexpr.RowExpr.args ?? [];
      const outs = this.outputsOf.get(e.rexpr.SubLink);
      const rights = outs && outs.length === args.length ? outs.map((l) => this.typeOfLin(l)) : args.map(() => null);
      return this.judgeAll(parts, args, rights, acc);
    }
    const d = this.judge(parts, this.typeOf(e.lexpr), this.typeOf(e.rexpr), acc);
    if (!d.refusal && kind === 'AEXPR_OP') this.results.set(e, d.result);
    return d.refusal;
  }

  /** `l op r`, pairwise when both are row constructors (PostgreSQL's row comparison). */
  private pair(parts: string[], l: N | undefined, r: N | undefined, acc: Acc): string | null {
    if (l && r && hasOwn.call(l, 'RowExpr') && hasOwn.call(r, 'RowExpr')) {
      const la: N[] = l.RowExpr.args ?? [];
      const ra: N[] = r.RowExpr.args ?? [];
      if (la.length === ra.length) return this.judgeAll(parts, la, ra, acc);
    }
    return this.judge(parts, this.typeOf(l), this.typeOf(r), acc).refusal;
  }

  private judgeAll(parts: string[], lefts: ReadonlyArray<N | OperandType>, rights: ReadonlyArray<N | OperandType>, acc: Acc): string | null {
    for (let i = 0; i < lefts.length; i++) {
      const lt = typeof lefts[i] === 'object' && lefts[i] !== null ? this.typeOf(lefts[i] as N) : (lefts[i] as OperandType);
      const rt = typeof rights[i] === 'object' && rights[i] !== null ? this.typeOf(rights[i] as N) : (rights[i] as OperandType);
      const d = this.judge(parts, lt, rt, acc);
      if (d.refusal) return d.refusal;
    }
    return null;
  }

  /** Resolves `parts` for the operand types and judges the operator PostgreSQL can choose. */
  private judge(parts: string[], left: OperandType | 'none', right: OperandType, acc: Acc): Judgement {
    // The answer depends only on the catalogue and the operand types: memoised per catalogue.
    const key = parts.join('\u0000') + '\u0001' + left + '\u0001' + right;
    let j = this.idx.judged.get(key);
    if (!j) {
      const own: Acc = { cacheable: true, user: [], names: [] };
      j = { ...this.resolve(parts, left, right, own), cacheable: own.cacheable, user: own.user };
      if (this.idx.judged.size < 10_000) this.idx.judged.set(key, j);
    }
    if (!j.cacheable) acc.cacheable = false;
    for (const u of j.user) acc.user.push(u);
    // A name qualified with pg_catalog is looked up there only, where nobody but a superuser creates.
    if (!(parts.length === 2 && parts[0] === 'pg_catalog')) acc.names.push({ schema: parts.length === 2 ? parts[0] : null, name: parts[parts.length - 1] });
    return j;
  }

  private resolve(parts: string[], left: OperandType | 'none', right: OperandType, acc: Acc): { refusal: string | null; result: OperandType } {
    const name = parts[parts.length - 1];
    const schema = parts.length === 2 ? parts[0] : undefined;
    const path = schema !== undefined ? [schema] : this.cat.path;
    const prefix = left === 'none';
    const all = (this.idx.ops.get(name) ?? []).filter((o) => path.includes(o.schema) && (o.left === 0) === prefix);
    const shown = schema !== undefined ? schema + '.' + name : name;
    if (all.length === 0) return { refusal: `unknown operator ${q(shown)}`, result: null };
    // Candidates in path order, a signature hidden by an earlier schema's.
    const seen = new Set<string>();
    const candidates: OpRow[] = [];
    for (const s of path) {
      for (const o of all) {
        if (o.schema !== s) continue;
        const sig = o.left + ':' + o.right;
        if (seen.has(sig)) continue;
        seen.add(sig);
        candidates.push(o);
      }
    }
    // Exact match (an unknown operand takes the other's type; then their domain base type).
    let l: OperandType = prefix ? 0 : left;
    let r: OperandType = right;
    let wasUnknown = false;
    if (!prefix && l === 'unknown' && typeof r === 'number') (l = r), (wasUnknown = true);
    else if (r === 'unknown' && typeof l === 'number' && !prefix) (r = l), (wasUnknown = true);
    if (typeof l === 'number' && typeof r === 'number') {
      let exact = candidates.find((o) => o.left === l && o.right === r);
      if (!exact && wasUnknown) {
        const b = this.base(l);
        if (b !== l) exact = candidates.find((o) => o.left === b && o.right === b);
      }
      if (exact) {
        const why = this.verdict(exact, acc);
        return { refusal: why, result: why ? null : exact.result };
      }
    }
    // Otherwise: the candidates the operands can reach by implicit coercion; when that set is exact,
    // PostgreSQL's first choices among them (func_select_candidate: most exact matches on the
    // operands' base types, then most preferred types) are reproduced; whatever remains must be
    // acceptable.
    const approx = { on: false };
    let reachable = candidates.filter((o) => (prefix || this.reaches(left as OperandType, o.left, approx)) && this.reaches(right, o.right, approx));
    if (!approx.on && reachable.length > 1) reachable = this.select(reachable, prefix ? [right] : [left as OperandType, right], prefix);
    for (const o of reachable) {
      if (o.volatility === 'volatile') {
        return {
          refusal: `operator ${q(shown)} for operand types (${prefix ? 'none' : this.show(left as OperandType)}, ${this.show(right)}) may resolve to ${o.schema}.${o.name}(${this.show(o.left, 'none')}, ${this.show(o.right)}), which is implemented by a volatile function`,
          result: null,
        };
      }
    }
    for (const o of reachable) this.verdict(o, acc);
    const results = new Set(reachable.map((o) => o.result));
    return { refusal: null, result: results.size === 1 ? [...results][0] : null };
  }

  /** Refusal text when the chosen operator's function is volatile; marks stable user-defined operators as not cacheable. */
  private verdict(o: OpRow, acc: Acc): string | null {
    if (o.volatility === 'volatile') {
      return `operator ${q(o.name)} (${this.show(o.left, 'none')}, ${this.show(o.right)}) in schema ${q(o.schema)} is implemented by a volatile function`;
    }
    if (o.schema !== 'pg_catalog') {
      acc.cacheable = false;
      acc.user.push({ schema: o.schema, name: o.name, left: o.left, right: o.right });
    }
    return null;
  }

  /**
   * PostgreSQL's `can_coerce_type(input → target)` for implicit coercion; where it is not reproduced
   * exactly (unproven input, pseudo-types, composite types, types missing from the rows) it answers
   * true and sets `approx.on`.
   */
  private reaches(input: OperandType, target: number, approx: { on: boolean }, depth = 0): boolean {
    if (input === 'unknown' || input === target) return true;
    const t = this.idx.types.get(target);
    const i = input === null ? undefined : this.idx.types.get(input);
    if (input === null || !t || !i || depth > 4 || t.typtype === 'c' || i.typtype === 'c' || i.typtype === 'p') return (approx.on = true);
    const bi = this.base(input);
    if (t.typtype === 'p') return this.reachesPseudo(this.idx.types.get(bi) ?? i, t.name, approx);
    const bt = this.base(target);
    if (bi === bt || this.idx.casts.has(bi + ':' + bt)) return true;
    const ei = this.idx.types.get(bi);
    const et = this.idx.types.get(bt);
    if (ei && et && ei.category === 'A' && et.category === 'A' && ei.elem && et.elem) return this.reaches(ei.elem, et.elem, approx, depth + 1);
    return false;
  }

  /**
   * Whether a (base-type) input can match a pseudo-type parameter: exact for the refusals
   * (`anyarray` wants an array, `anyenum` an enum, `anyrange` a range, `record` a composite …);
   * an acceptance is approximate (PostgreSQL also checks the operands agree with each other).
   */
  private reachesPseudo(i: TypeRow, pseudo: string, approx: { on: boolean }): boolean {
    const isArray = i.category === 'A' && i.elem !== 0;
    let ok: boolean;
    if (pseudo === 'any') return true;
    if (pseudo === 'anyarray' || pseudo === 'anycompatiblearray') ok = isArray;
    else if (pseudo === 'anynonarray' || pseudo === 'anycompatiblenonarray') ok = !isArray;
    else if (pseudo === 'anyenum') ok = i.typtype === 'e';
    else if (pseudo === 'anyrange' || pseudo === 'anycompatiblerange') ok = i.typtype === 'r';
    else if (pseudo === 'anymultirange' || pseudo === 'anycompatiblemultirange') ok = i.typtype === 'm';
    else if (pseudo === 'record') ok = i.typtype === 'c';
    else ok = true;
    if (ok) approx.on = true;
    return ok;
  }

  /**
   * The first two steps of PostgreSQL's `func_select_candidate` over an exact candidate set: keep
   * the candidates with the most exact matches on the operands' base types (unknown operands do
   * not count), then those with the most positions that match exactly or take the preferred type of
   * the operand's category. Returns the survivors (one when PostgreSQL's choice is made there).
   */
  private select(cands: OpRow[], inputs: OperandType[], prefix: boolean): OpRow[] {
    const base = inputs.map((t) => (typeof t === 'number' ? this.base(t) : null));
    const args = (o: OpRow) => (prefix ? [o.right] : [o.left, o.right]);
    const keepMax = (list: OpRow[], score: (o: OpRow) => number) => {
      const scores = list.map(score);
      const max = Math.max(...scores);
      return list.filter((_, i) => scores[i] === max);
    };
    let out = keepMax(cands, (o) => args(o).filter((a, i) => base[i] !== null && a === base[i]).length);
    if (out.length === 1) return out;
    const category = base.map((b) => (b === null ? null : (this.idx.types.get(b)?.category ?? null)));
    out = keepMax(out, (o) =>
      args(o).filter((a, i) => {
        if (base[i] === null) return false;
        const at = this.idx.types.get(a);
        return a === base[i] || (!!at && at.preferred && at.category === category[i]);
      }).length,
    );
    return out;
  }

  private base(oid: number): number {
    let t = this.idx.types.get(oid);
    for (let i = 0; t && t.typtype === 'd' && t.base && i < 32; i++) {
      const next = this.idx.types.get(t.base);
      if (!next) return t.base;
      t = next;
    }
    return t ? t.oid : oid;
  }

  private elementOf(oid: number): OperandType {
    const t = this.idx.types.get(this.base(oid));
    return t && t.category === 'A' && t.elem ? t.elem : null;
  }

  private show(t: OperandType, none = 'unknown'): string {
    if (t === null) return 'an expression of unproven type';
    if (t === 'unknown') return 'unknown';
    if (t === 0) return none;
    return this.idx.types.get(t)?.display ?? `type ${t}`;
  }

  /**
   * Type of a value with this lineage: an unchanged column's catalogue type (a view column's, or one
   * of several alternatives', e.g. both sides of `USING`, when all of them have the same type).
   */
  private typeOfLin(lin: Lin): OperandType {
    if (!lin.pass || !lin.src || lin.src.size === 0) return null;
    let t: OperandType | undefined;
    for (const c of lin.src.values()) {
      const ct = this.columnType(c);
      if (ct === null || (t !== undefined && ct !== t)) return null;
      t = ct;
    }
    return t ?? null;
  }

  private columnType(c: ColumnRef): OperandType {
    const dt = this.idx.columns.get(c.schema + '\u0000' + c.table)?.get(c.column);
    if (dt === undefined) return null;
    return this.typeByFormat(dt);
  }

  private typeByFormat(dataType: string): OperandType {
    const plain = dataType.replace(/\(\d+(?:,\d+)?\)/g, '').replace(/^interval [a-z ]+?(\[\])?$/, 'interval$1');
    return this.idx.byFormat.get(plain) ?? null;
  }

  /** Type of a type name in the parse tree (schema-qualified, or looked up along the path), else null. */
  private typeName(tn: N | undefined): OperandType {
    if (!tn) return null;
    const parts = names(tn.names);
    if (!parts || parts.length > 2) return null;
    let oid: number | undefined;
    if (parts.length === 2) oid = this.idx.byName.get(parts[0] + '.' + parts[1]);
    else for (const s of this.cat.path) if ((oid = this.idx.byName.get(s + '.' + parts[0])) !== undefined) break;
    if (oid === undefined) return null;
    if ((tn.arrayBounds ?? []).length > 0) return this.idx.arrayOf.get(oid) ?? null;
    return oid;
  }

  /** The type PostgreSQL gives the expression `node`, when provable (see the module comment); else null. */
  typeOf(node: N | undefined): OperandType {
    if (!node) return null;
    const col = this.columnOf.get(node);
    if (col) return this.typeOfLin(col);
    const type = Object.keys(node)[0];
    const n = node[type] as N;
    switch (type) {
      case 'A_Const':
        if (n.isnull || n.sval) return 'unknown';
        if (n.ival) return INT4;
        if (n.boolval) return BOOL;
        if (n.bsval) return BIT;
        if (n.fval) {
          const s = String(n.fval.fval);
          if (/^[0-9]+$/.test(s)) return BigInt(s) <= 9223372036854775807n ? INT8 : NUMERIC;
          return NUMERIC;
        }
        return null;
      case 'ParamRef':
        return 'unknown';
      case 'TypeCast':
        return this.typeName(n.typeName);
      case 'CollateClause':
        return this.typeOf(n.arg);
      case 'A_Expr': {
        const k = String(n.kind);
        if (k === 'AEXPR_OP') return this.results.get(n) ?? null;
        if (k === 'AEXPR_NULLIF') return this.typeOf(n.lexpr);
        return BOOL;
      }
      case 'BoolExpr':
      case 'NullTest':
      case 'BooleanTest':
        return BOOL;
      case 'SubLink': {
        const k = String(n.subLinkType);
        return k === 'EXISTS_SUBLINK' || k === 'ANY_SUBLINK' || k === 'ALL_SUBLINK' || k === 'ROWCOMPARE_SUBLINK' ? BOOL : null;
      }
      case 'RowExpr':
        return RECORD;
      case 'A_ArrayExpr': {
        const els = (n.elements ?? []).map((e: N) => this.typeOf(e));
        if (els.length === 0 || els.some((t: OperandType) => t === null)) return null;
        const known = [...new Set(els.filter((t: OperandType) => t !== 'unknown'))];
        if (known.length === 0) return this.idx.arrayOf.get(TEXT) ?? null;
        return known.length === 1 ? (this.idx.arrayOf.get(known[0] as number) ?? null) : null;
      }
      case 'SQLValueFunction':
        return SVF_TYPES[String(n.op)] ?? null;
      case 'FuncCall': {
        const parts = names(n.funcname);
        if (!parts) return null;
        const fname = parts[parts.length - 1];
        if (parts.length === 2 ? parts[0] !== 'pg_catalog' : !(this.cat.functionsByName.get(fname) ?? []).every((r) => r.schema === 'pg_catalog' || !this.cat.path.includes(r.schema))) return null;
        const rt = builtinReturnType(fname);
        if (rt === null || (n.agg_star && fname !== 'count')) return null;
        const oid = this.idx.byName.get('pg_catalog.' + rt);
        const t = oid === undefined ? undefined : this.idx.types.get(oid);
        return t && t.typtype !== 'p' ? oid! : null;
      }
      default:
        return null;
    }
  }
}

const SVF_TYPES: Record<string, number> = {
  SVFOP_CURRENT_DATE: 1082,
  SVFOP_CURRENT_TIME: 1266,
  SVFOP_CURRENT_TIME_N: 1266,
  SVFOP_CURRENT_TIMESTAMP: 1184,
  SVFOP_CURRENT_TIMESTAMP_N: 1184,
  SVFOP_LOCALTIME: 1083,
  SVFOP_LOCALTIME_N: 1083,
  SVFOP_LOCALTIMESTAMP: 1114,
  SVFOP_LOCALTIMESTAMP_N: 1114,
};

function names(list: N[] | undefined): string[] | null {
  if (!Array.isArray(list) || list.length === 0 || list.length > 2) return null;
  const out: string[] = [];
  for (const x of list) {
    const s = x && hasOwn.call(x, 'String') ? x.String.sval : undefined;
    if (typeof s !== 'string') return null;
    out.push(s);
  }
  return out;
}

function q(s: string): string {
  return '"' + s + '"';
}
