/**
 * Property: for random SELECT statements over a small random catalogue, every column the text
 * references (directly, via `alias.*`, inside sub-selects, CTEs, UNION branches, WHERE, ORDER BY,
 * GROUP BY, HAVING, window and aggregate clauses, function arguments) appears in `reads`, and
 * nothing else does. Authorization is decided on `reads`, so a missing column is a security bug.
 */
import fc from 'fast-check';
import { analyzeSql, initSqlParser } from '../../../src/sql/analyze';
import type { SourceCatalog } from '../../../src/sql/catalog-types';
import { PG_CATALOG } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

const RUNS = Number(process.env.SQL_FC_RUNS ?? 60) * 5;

interface Table {
  name: string;
  columns: string[];
}

const TABLE_NAMES = ['orders', 'users', 'Accounts', 'line items', 'ref'];
const COLUMN_NAMES = ['id', 'name', 'email', 'total', 'user_id', 'note', 'Secret', 'created'];

const catalogArb: fc.Arbitrary<Table[]> = fc
  .uniqueArray(fc.constantFrom(...TABLE_NAMES), { minLength: 1, maxLength: 4 })
  .chain((names) =>
    fc.tuple(...names.map(() => fc.uniqueArray(fc.constantFrom(...COLUMN_NAMES), { minLength: 1, maxLength: 5 }))).map((cols) =>
      names.map((name, i) => ({ name, columns: cols[i] })),
    ),
  );

function toCatalog(tables: Table[]): SourceCatalog {
  return {
    ...PG_CATALOG,
    relations: tables.map((t) => ({ schema: 'public', name: t.name, kind: 'table', columns: t.columns.map((c) => ({ name: c, dataType: 'text' })) })),
  };
}

/** Renders an identifier the way PostgreSQL needs it (quoted unless plain lower case). */
function ident(name: string): string {
  return /^[a-z_][a-z0-9_]*$/.test(name) && !['user', 'order', 'table'].includes(name) ? name : `"${name.replace(/"/g, '""')}"`;
}

interface Item {
  alias: string;
  table: Table;
}

type Draw = <T>(arb: fc.Arbitrary<T>) => T;

/** Generates statements and the ground truth of referenced `table.column` pairs. */
class Gen {
  readonly refs = new Set<string>();
  private seq = 0;

  constructor(
    private readonly draw: Draw,
    private readonly tables: Table[],
  ) {}

  private pick<T>(xs: readonly T[]): T {
    return xs[this.int(0, xs.length - 1)];
  }
  private int(min: number, max: number): number {
    return this.draw(fc.noBias(fc.integer({ min, max })));
  }
  private chance(p: number): boolean {
    return this.int(0, 999) < p * 1000;
  }

  /** A column reference to one of `items` (innermost level first), qualified unless unambiguous. */
  private column(levels: Item[][]): string {
    const level = levels[this.int(0, levels.length - 1)];
    const it = this.pick(level);
    const col = this.pick(it.table.columns);
    this.refs.add(`${it.table.name}.${col}`);
    // Unqualified only when the name is unique at the innermost level and that is where it lives.
    const innermost = levels[levels.length - 1];
    const owners = innermost.filter((x) => x.table.columns.includes(col));
    if (level === innermost && owners.length === 1 && this.chance(0.5)) return ident(col);
    return `${ident(it.alias)}.${ident(col)}`;
  }

  expr(levels: Item[][], depth: number): string {
    const k = this.int(0, depth > 0 ? 9 : 5);
    switch (k) {
      case 0:
      case 1:
        return this.column(levels);
      case 2:
        return `lower(${this.column(levels)}::text)`;
      case 3:
        return `coalesce(${this.column(levels)}, ${this.column(levels)})`;
      case 4:
        return `CASE WHEN ${this.column(levels)} IS NULL THEN ${this.column(levels)} ELSE 'x' END`;
      case 5:
        return `(${this.column(levels)} || ${this.pick(["'a'", '$1', 'NULL'])})`;
      case 6:
        return this.scalarSubselect(levels, depth);
      case 7: {
        const sub = this.select(levels, depth - 1, 1);
        return `EXISTS (${sub})`;
      }
      case 8: {
        const sub = this.select(levels, depth - 1, 1);
        return `${this.column(levels)} IN (${sub})`;
      }
      default:
        return `count(${this.column(levels)}) OVER (PARTITION BY ${this.column(levels)} ORDER BY ${this.column(levels)})`;
    }
  }

  /** A correlated scalar sub-select `(SELECT max(col) FROM tbl sN WHERE ...)`. */
  private scalarSubselect(levels: Item[][], depth: number): string {
    const t = this.pick(this.tables);
    const alias = `s${this.seq++}`;
    const inner: Item[][] = [...levels, [{ alias, table: t }]];
    const col = this.column([inner[inner.length - 1]]);
    return `(SELECT max(${col}) FROM ${ident(t.name)} ${alias} WHERE ${this.expr(inner, depth - 1)} IS NOT NULL)`;
  }

  /** A SELECT with `width` output columns named o0.. (outer `levels` visible for correlation). */
  select(levels: Item[][], depth: number, width: number): string {
    const n = this.int(1, 3);
    const items: Item[] = [];
    const from: string[] = [];
    for (let i = 0; i < n; i++) {
      const t = this.pick(this.tables);
      const alias = `a${this.seq++}`;
      items.push({ alias, table: t });
      const tableRef = this.chance(0.3) ? `public.${ident(t.name)}` : ident(t.name);
      from.push(`${tableRef} AS ${alias}`);
    }
    const here = [...levels, items];
    // `a, b JOIN c ON ...`: JOIN binds tighter than the comma, so ON sees only its join group.
    let fromSql = from[0];
    let group = 0;
    for (let i = 1; i < from.length; i++) {
      if (this.chance(0.5)) {
        fromSql += `, ${from[i]}`;
        group = i;
      } else fromSql += ` JOIN ${from[i]} ON ${this.expr([...levels, items.slice(group, i + 1)], 0)} IS NOT NULL`;
    }
    const outs: string[] = [];
    for (let i = 0; i < width; i++) {
      if (this.chance(0.15)) {
        // `alias.*` inside an expression = the whole row
        const it = this.pick(items);
        for (const c of it.table.columns) this.refs.add(`${it.table.name}.${c}`);
        outs.push(`row_to_json(${it.alias}.*)::text AS o${i}`);
      } else outs.push(`${this.expr(here, depth)} AS o${i}`);
    }
    let sql = `SELECT ${outs.join(', ')} FROM ${fromSql}`;
    if (this.chance(0.6)) sql += ` WHERE ${this.expr(here, depth)} IS NOT NULL`;
    if (this.chance(0.3)) sql += ` GROUP BY ${this.expr(here, 0)} HAVING count(${this.column([items])}) > 0`;
    if (this.chance(0.4)) sql += ` ORDER BY ${this.expr(here, 0)}`;
    return sql;
  }

  statement(): string {
    const width = this.int(1, 3);
    const shape = this.int(0, 4);
    const body = this.select([], 2, width);
    const cols = Array.from({ length: width }, (_, i) => `o${i}`);
    switch (shape) {
      case 0:
        return body;
      case 1:
        return `WITH w AS (${body}) SELECT ${cols.join(', ')} FROM w`;
      case 2:
        return `(${body}) UNION ALL (${this.select([], 1, width)})`;
      case 3:
        return `SELECT ${cols.map((c) => `q.${c}`).join(', ')} FROM (${body}) q`;
      default: {
        // a table read only through `*`
        const t = this.pick(this.tables);
        for (const c of t.columns) this.refs.add(`${t.name}.${c}`);
        return `SELECT * FROM (${body}) q, ${ident(t.name)} z`;
      }
    }
  }
}

test('every referenced column is in reads, and only those', () => {
  fc.assert(
    fc.property(catalogArb, fc.gen(), (tables, g) => {
      const draw: Draw = (arb) => g(() => arb);
      const gen = new Gen(draw, tables);
      const sql = gen.statement();
      const r = analyzeSql(sql, toCatalog(tables));
      if (!r.ok) throw new Error(`refused: ${r.code} ${r.message}\n${sql}`);
      const got = new Set(r.reads.flatMap((x) => x.columns.map((c) => `${x.table}.${c}`)));
      const missing = [...gen.refs].filter((x) => !got.has(x));
      const extra = [...got].filter((x) => !gen.refs.has(x));
      if (missing.length || extra.length) throw new Error(`missing ${JSON.stringify(missing)} extra ${JSON.stringify(extra)}\n${sql}`);
      expect(r.kind).toBe('read');
      // every function call went through the function policy
      const calls = new Set([...sql.matchAll(/\b([a-z_]+)\(/g)].map((m) => m[1]).filter((f) => !['exists', 'in', 'coalesce'].includes(f.toLowerCase()))); // not function calls
      expect([...calls].filter((f) => !r.functions.some((x) => x.name === f))).toEqual([]);
    }),
    { numRuns: RUNS, endOnFailure: true },
  );
});

test('renaming a FROM alias never changes reads (resolution does not depend on alias spelling)', () => {
  fc.assert(
    fc.property(catalogArb, fc.gen(), (tables, g) => {
      const gen = new Gen((arb) => g(() => arb), tables);
      const sql = gen.statement();
      const renamed = sql.replace(/\b([as])(\d+)\b/g, (_m, p: string, n: string) => `"${p.toUpperCase()}_${n}"`);
      const a = analyzeSql(sql, toCatalog(tables));
      const b = analyzeSql(renamed, toCatalog(tables));
      expect(b.ok && b.reads).toEqual(a.ok && a.reads);
    }),
    { numRuns: Math.floor(RUNS / 3), endOnFailure: true },
  );
});
