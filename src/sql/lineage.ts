/**
 * Value lineage used by the analyser (sql-safety.md class 6): which catalogue columns an expression's
 * value is computed from, whether it is provably one column's value unchanged ("passthrough"), and
 * which relations it may embed wholesale (whole-row references: "opaque").
 *
 * `Lin` values are immutable and shared; every operation returns a new value or one of its inputs.
 */

/** A catalogue column. */
export interface ColumnRef {
  schema: string;
  table: string;
  column: string;
}

/** A catalogue relation. */
export interface RelRef {
  schema: string;
  table: string;
}

/**
 * Lineage of one value.
 * - `src`: source columns keyed by `colKey` (null = none).
 * - `pass`: true only when the value is the value of every entry of `src` unchanged: one catalogue
 *   column, or a view column together with the columns it passes through (views.ts), which all
 *   hold the same value.
 * - `opq`: relations whose whole rows may be embedded (null = none).
 */
export interface Lin {
  readonly src: ReadonlyMap<string, ColumnRef> | null;
  readonly pass: boolean;
  readonly opq: ReadonlyMap<string, RelRef> | null;
}

/**
 * Work done by the lineage operations (map entries visited or copied), read by the analyser's work
 * budget. Analyses are synchronous and never interleave, so a module-level counter is exact: the
 * analyser reads it before and after.
 */
export const lineageWork = { n: 0 };

/** Lineage of a value that depends on no column (constants, parameters, clock). */
export const LIN_NONE: Lin = Object.freeze({ src: null, pass: false, opq: null });

/** Key of a column in lineage maps. */
export function colKey(schema: string, table: string, column: string): string {
  return schema + '\u0000' + table + '\u0000' + column;
}

/** Key of a relation in opaque maps. */
export function tableKey(schema: string, table: string): string {
  return schema + '\u0000' + table;
}

/** Lineage of a bare reference to one catalogue column (passthrough). */
export function linColumn(ref: ColumnRef): Lin {
  return { src: new Map([[colKey(ref.schema, ref.table, ref.column), ref]]), pass: true, opq: null };
}

/** The same sources, no longer passthrough (the value was computed from them). */
export function derive(l: Lin): Lin {
  if (!l.pass) return l;
  return { src: l.src, pass: false, opq: l.opq };
}

function unionMaps<T>(a: ReadonlyMap<string, T> | null, b: ReadonlyMap<string, T> | null): ReadonlyMap<string, T> | null {
  if (!b || b.size === 0) return a;
  if (!a || a.size === 0) return b;
  if (a === b) return a;
  let out: Map<string, T> | null = null;
  lineageWork.n += b.size;
  for (const [k, v] of b) {
    if (!a.has(k)) {
      if (!out) {
        out = new Map(a);
        lineageWork.n += a.size;
      }
      out.set(k, v);
    }
  }
  return out ?? a;
}

/** Union of two lineages; never passthrough. */
export function merge(a: Lin, b: Lin): Lin {
  if (b === LIN_NONE || (!b.src && !b.opq)) return derive(a);
  if (a === LIN_NONE || (!a.src && !a.opq)) return derive(b);
  return { src: unionMaps(a.src, b.src), pass: false, opq: unionMaps(a.opq, b.opq) };
}

/** Union of many lineages; never passthrough. */
export function mergeAll(list: readonly Lin[]): Lin {
  let out = LIN_NONE;
  for (const l of list) out = merge(out, l);
  return out;
}

/**
 * Union for values that are one of several alternatives unchanged (UNION branches, VALUES rows,
 * recursive CTE terms): passthrough survives only when every alternative passes the same column
 * (two passthrough lineages that share an entry hold the same value; the result keeps every name
 * of it, so a mask on a view column still applies).
 */
export function alternative(a: Lin, b: Lin): Lin {
  if (a.pass && b.pass && a.src && b.src) {
    let shared = false;
    lineageWork.n += a.src.size;
    for (const k of a.src.keys()) if (b.src.has(k)) { shared = true; break; }
    if (shared) {
      const src = unionMaps(a.src, b.src);
      const opq = unionMaps(a.opq, b.opq);
      return src === a.src && opq === a.opq ? a : { src, pass: true, opq };
    }
  }
  return merge(a, b);
}

// ---------------------------------------------------------------------------------------------
// Views (views.ts): a view column's lineage is the view column itself plus the lineage of its
// definition. Where that lineage cannot be proven, the value carries `ANY_COLUMN`.
// ---------------------------------------------------------------------------------------------

/** Schema marker of the "any column" source (a catalogue schema name can never contain NUL). */
export const ANY_SCHEMA = '\u0000any';

/**
 * The source of a value whose lineage cannot be proven (a view column computed by a function whose
 * body is not analysed, a view whose definition is missing, does not parse or is refused, a cycle
 * of views): it may carry any column of the source. `analyzeSql` turns it into the `unprovable`
 * flags; it never appears in a result's column lists.
 */
export const ANY_COLUMN: ColumnRef = Object.freeze({ schema: ANY_SCHEMA, table: '*', column: '*' });

/** Lineage of an unprovable value (derived, sourced from `ANY_COLUMN`). */
export const LIN_ANY: Lin = Object.freeze({ src: new Map([[colKey(ANY_SCHEMA, '*', '*'), ANY_COLUMN]]), pass: false, opq: null });

/** True when `c` is the `ANY_COLUMN` marker. */
export function isAnyColumn(c: ColumnRef): boolean {
  return c.schema === ANY_SCHEMA;
}

/**
 * Lineage of view column `self` whose definition computes `body`: passthrough when the definition
 * passes one column through unchanged (then both are names of the same value), derived otherwise.
 */
export function viewColumnLin(self: ColumnRef, body: Lin): Lin {
  const own = linColumn(self);
  if (body.pass && body.src) return { src: unionMaps(own.src, body.src), pass: true, opq: body.opq };
  return merge(own, body);
}

/** Whole-row lineage over `cols`: all their sources, opaque over every relation behind them. */
export function wholeRow(cols: readonly Lin[]): Lin {
  let src: ReadonlyMap<string, ColumnRef> | null = null;
  let opq: ReadonlyMap<string, RelRef> | null = null;
  for (const l of cols) {
    src = unionMaps(src, l.src);
    opq = unionMaps(opq, l.opq);
  }
  const rels = new Map<string, RelRef>(opq ?? []);
  lineageWork.n += (src ? src.size : 0) + rels.size;
  if (src) for (const c of src.values()) {
    const k = tableKey(c.schema, c.table);
    if (!rels.has(k)) rels.set(k, { schema: c.schema, table: c.table });
  }
  return { src, pass: false, opq: rels.size ? rels : null };
}

/** Structural equality (same source keys, same opaque keys, same passthrough flag). */
export function sameLin(a: Lin, b: Lin): boolean {
  if (a === b) return true;
  if (a.pass !== b.pass) return false;
  return sameKeys(a.src, b.src) && sameKeys(a.opq, b.opq);
}

function sameKeys(a: ReadonlyMap<string, unknown> | null, b: ReadonlyMap<string, unknown> | null): boolean {
  const sa = a ? a.size : 0;
  const sb = b ? b.size : 0;
  if (sa !== sb) return false;
  if (sa === 0) return true;
  lineageWork.n += sa;
  for (const k of a!.keys()) if (!b!.has(k)) return false;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Placeholders: the columns of a WITH RECURSIVE item while its recursive term is analysed.
//
// The recursive term is walked ONCE with each self-referenced column standing for itself (a
// placeholder source); the fixpoint is then solved on lineage values alone (`substitute`), and
// everything recorded during the walk that mentions a placeholder is rewritten with the final
// lineage. Walking the term again per fixpoint round would multiply across nested recursive
// items (exponential work).
// ---------------------------------------------------------------------------------------------

/** Schema marker of placeholder sources (a catalogue schema name can never contain NUL). */
export const PLACEHOLDER_SCHEMA = '\u0000rec';

/** Passthrough lineage of column `k` of the recursive item numbered `id`. */
export function placeholder(id: number, k: number): Lin {
  return linColumn({ schema: PLACEHOLDER_SCHEMA, table: String(id), column: String(k) });
}

/** True when `c` is a placeholder (of item `id` when given). */
export function isPlaceholder(c: ColumnRef | RelRef, id?: number): boolean {
  return c.schema === PLACEHOLDER_SCHEMA && (id === undefined || c.table === String(id));
}

/** Relations behind the sources of `l` (placeholders of other items included, to be resolved later). */
function relationsOf(l: Lin, into: Map<string, RelRef>): void {
  if (l.opq) for (const [k, r] of l.opq) into.set(k, r);
  if (l.src) for (const c of l.src.values()) into.set(tableKey(c.schema, c.table), { schema: c.schema, table: c.table });
}

/**
 * Replaces the placeholders of item `id` in `l` by `finals[k]`. A passthrough placeholder becomes
 * the final lineage itself (passthrough survives only if the final lineage is passthrough); inside
 * a computed value, the final sources and opaque relations are merged in. A value that embeds
 * whole rows (opaque) over the item embeds whole rows of everything behind its final columns.
 */
export function substitute(l: Lin, id: number, finals: readonly Lin[]): Lin {
  if (!l.src) return l;
  const tid = String(id);
  let hit = false;
  for (const c of l.src.values()) if (c.schema === PLACEHOLDER_SCHEMA && c.table === tid) { hit = true; break; }
  lineageWork.n += l.src.size;
  if (!hit) return l;
  if (l.pass && l.src.size === 1) {
    const c = l.src.values().next().value as ColumnRef;
    return finals[Number(c.column)] ?? LIN_NONE;
  }
  const src = new Map<string, ColumnRef>();
  const opq = new Map<string, RelRef>();
  if (l.opq) for (const [k, r] of l.opq) if (!(r.schema === PLACEHOLDER_SCHEMA && r.table === tid)) opq.set(k, r);
  for (const [k, c] of l.src) {
    if (c.schema !== PLACEHOLDER_SCHEMA || c.table !== tid) {
      src.set(k, c);
      continue;
    }
    const f = finals[Number(c.column)] ?? LIN_NONE;
    if (f.src) for (const [fk, fc] of f.src) src.set(fk, fc);
    if (l.opq) relationsOf(f, opq);
    else if (f.opq) for (const [fk, fr] of f.opq) opq.set(fk, fr);
    lineageWork.n += (f.src ? f.src.size : 0) + (f.opq ? f.opq.size : 0);
  }
  return { src: src.size ? src : null, pass: false, opq: opq.size ? opq : null };
}
