/**
 * V1 (red team): analysis must be bounded. Nested WITH RECURSIVE used to be re-walked once per
 * fixpoint round at every level (rounds^depth walks: minutes of synchronous work for ~2 KB). Now
 * every node is walked once (recursive terms are solved on lineage values) and each analysis has a
 * work budget (`WORK_BUDGET` steps), so no statement keeps the event loop busy for long.
 */
import fc from 'fast-check';
import { analyzeSql, initSqlParser, prepareCatalog, WORK_BUDGET, type SqlAnalysis } from '../../../src/sql/analyze';
import { analyzeStatement, createWalkState, Refusal, workUsed } from '../../../src/sql/analyzer';
import { parseSql } from '../../../src/sql/parser';
import { CATALOG } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

const RUNS = Number(process.env.SQL_FC_RUNS ?? 60) * 3;
const cat = () => prepareCatalog(CATALOG);

/** The red team's statement: WITH RECURSIVE nested `depth` levels, each rotating 11 columns. */
function recursiveBomb(depth: number): string {
  const cols = ['customer_id', 'first_name', 'last_name', 'company', 'address', 'city', 'state', 'country', 'postal_code', 'fax', 'support_rep_id'];
  const n = cols.length;
  const level = (k: number): string => {
    const name = `r${k}`;
    const base = cols.map((c) => `${c}::text`).join(', ');
    const rot = cols.map((_, i) => `${name}.a${(i + 1) % n}`).join(', ');
    const inner = k < depth ? `, (${level(k + 1)}) AS s${k}` : '';
    return `WITH RECURSIVE ${name}(${cols.map((_, i) => `a${i}`).join(', ')}) AS (SELECT ${base} FROM customer UNION ALL SELECT ${rot} FROM ${name}${inner} WHERE false) SELECT * FROM ${name}`;
  };
  return level(1);
}

/** Best of a few runs (a GC pause or a busy machine must not fail a bound a statement meets). */
function best(run: () => void, tries = 5): number {
  let ms = Infinity;
  for (let i = 0; i < tries && ms >= 50; i++) {
    const t0 = process.hrtime.bigint();
    run();
    ms = Math.min(ms, Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return ms;
}

/** The whole `analyzeSql` call (parse, walk, refusal or result): time and result. */
function timed(sql: string): { ms: number; r: SqlAnalysis } {
  const c = cat();
  let r: SqlAnalysis = analyzeSql(sql, c); // warm-up
  const ms = best(() => {
    r = analyzeSql(sql, c);
  });
  return { ms, r };
}

/** The walk alone (parsing is linear in the length and bounded by `DEFAULT_MAX_SQL_LENGTH`). */
function walk(sql: string): { ms: number; work: number; outcome: string } {
  const tree = parseSql(sql);
  const stmt = tree.stmts![0].stmt!;
  const type = Object.keys(stmt)[0];
  const c = cat();
  let work = 0;
  let outcome = '';
  const once = (): void => {
    const a = createWalkState(c);
    try {
      analyzeStatement(a, type, stmt[type] as Record<string, unknown>);
      outcome = 'ok';
    } catch (err) {
      if (!(err instanceof Refusal)) throw err;
      outcome = err.message;
    }
    work = workUsed(a);
  };
  once(); // warm-up
  return { ms: best(once), work, outcome };
}

const TOO_COMPLEX = /too complex to analyse/;

describe('nested WITH RECURSIVE (red-team V1)', () => {
  test.each([6, 7, 8])('recursiveBomb(%i) is analysed well inside the work budget', (depth) => {
    const sql = recursiveBomb(depth);
    const { r } = timed(sql);
    expect(r.ok).toBe(true);
    if (r.ok) {
      // Lineage is still exact: the rotation mixes every text column into every output column.
      expect(r.outputs).toHaveLength(11);
      expect(r.outputs.every((o) => !o.passthrough && o.sources.length === 11)).toBe(true);
    }
    expect(walk(sql).work).toBeLessThan(WORK_BUDGET);
  });

  test('work grows linearly with the nesting depth (each level is walked once)', () => {
    const w = [2, 4, 8].map((d) => walk(recursiveBomb(d)).work);
    expect(w[1] / w[0]).toBeLessThan(2.5);
    expect(w[2] / w[1]).toBeLessThan(2.5);
  });

  test('recursiveBomb(60) (~25 KB) ends within the work budget: analysed or refused as too complex', () => {
    const { work, outcome } = walk(recursiveBomb(60));
    expect(outcome).toMatch(/^ok$|too complex to analyse/);
    expect(work).toBeLessThan(WORK_BUDGET * 2);
  });

  test('a statement over the budget is refused as statement_too_complex with a clear message', () => {
    // Rotation over 400 columns of different sources: 400 fixpoint rounds over 400 columns.
    const k = 400;
    const names = ['first_name', 'last_name', 'company', 'address', 'city', 'state', 'country', 'postal_code', 'phone', 'fax', 'email'];
    const cols = Array.from({ length: k }, (_, i) => `a${i}`).join(', ');
    const base = Array.from({ length: k }, (_, i) => `c${i % 13}.${names[i % names.length]}`).join(', ');
    const sql = `WITH RECURSIVE r(${cols}) AS (SELECT ${base} FROM ${Array.from({ length: 13 }, (_, i) => `customer c${i}`).join(', ')} UNION ALL SELECT ${Array.from({ length: k }, (_, i) => `a${(i + 1) % k}`).join(', ')} FROM r) SELECT * FROM r`;
    const { r } = timed(sql);
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.code).toBe('statement_too_complex');
      expect(r.message).toMatch(TOO_COMPLEX);
    }
  });

  test.each([
    ['joins', `SELECT * FROM customer a0 ${Array.from({ length: 400 }, (_, i) => `JOIN customer a${i + 1} ON true`).join(' ')}`],
    ['CTE references', `WITH c AS (SELECT * FROM customer a, customer b, customer c, customer d) SELECT * FROM ${Array.from({ length: 2000 }, (_, i) => `c c${i}`).join(', ')}`],
    ['whole-row values', `SELECT ${Array.from({ length: 3000 }, () => 'row_to_json(x)').join(', ')} FROM (SELECT * FROM customer a, customer b, customer c, customer d, customer e) x`],
    ['doubling CTEs', `WITH ${Array.from({ length: 40 }, (_, i) => (i === 0 ? 'c0 AS (SELECT * FROM customer)' : `c${i} AS (SELECT * FROM c${i - 1}, c${i - 1} z)`)).join(', ')} SELECT 1`],
    ['column scans', `SELECT ${Array.from({ length: 5000 }, () => 'milliseconds').join(', ')} FROM ${Array.from({ length: 60 }, (_, i) => `customer a${i}`).join(', ')}, track`],
  ])('multiplicative shape (%s) is refused by the work budget', (_name, sql) => {
    const { work, outcome } = walk(sql);
    expect(outcome).toMatch(TOO_COMPLEX);
    expect(work).toBeLessThan(WORK_BUDGET * 2); // stops at the budget (a step may count several units)
    const r = analyzeSql(sql, cat());
    expect(r.ok ? 'ok' : `${r.code} ${r.message}`).toMatch(/^statement_too_complex statement too complex/);
  });

  test('the budget is far above what legitimate wide statements use', () => {
    const wide = `SELECT * FROM ${Array.from({ length: 40 }, (_, i) => `customer c${i}`).join(' NATURAL JOIN ')}`;
    expect(analyzeSql(wide, cat(), { workBudget: WORK_BUDGET / 10 }).ok).toBe(true);
  });
});

// ---------------------------------------------------------------------------------------------
// Property: random nesting of CTEs (recursive or not), sub-selects in FROM, scalar, EXISTS and IN
// sub-selects, LATERAL, set operations and whole-row values never exceeds the bound: the walk is
// linear (it fits a budget proportional to the statement's length).
// ---------------------------------------------------------------------------------------------
type Draw = <T>(arb: fc.Arbitrary<T>) => T;
const COLS = ['customer_id', 'first_name', 'last_name', 'email', 'phone', 'city'];

class Nest {
  private seq = 0;
  constructor(private readonly draw: Draw) {}
  private int(min: number, max: number): number {
    return this.draw(fc.noBias(fc.integer({ min, max })));
  }
  /** A query with `width` columns c0..; `outer` names relations (with a column c0) it may reference. */
  query(depth: number, width: number, outer: string[]): string {
    const k = depth <= 0 ? 0 : this.int(0, 7);
    const list = (f: (i: number) => string): string => Array.from({ length: width }, (_, i) => `${f(i)} AS c${i}`).join(', ');
    switch (k) {
      case 0: {
        const a = `t${this.seq++}`;
        const corr = outer.length && this.int(0, 1) ? ` WHERE ${outer[this.int(0, outer.length - 1)]}.c0 IS NOT NULL` : '';
        return `SELECT ${list((i) => `${a}.${COLS[(i + this.int(0, 5)) % COLS.length]}::text`)} FROM customer ${a}${corr}`;
      }
      case 1: {
        const s = `s${this.seq++}`;
        return `SELECT ${list((i) => `${s}.c${i}`)} FROM (${this.query(depth - 1, width, outer)}) ${s}`;
      }
      case 2: {
        const w = `w${this.seq++}`;
        const j = `j${this.seq++}`;
        return `WITH ${w} AS (${this.query(depth - 1, width, outer)}) SELECT ${list((i) => `${i % 2 ? w : j}.c${i}`)} FROM ${w} JOIN (${this.query(depth - 1, width, outer)}) ${j} ON ${w}.c0 = ${j}.c0`;
      }
      case 3: {
        const r = `r${this.seq++}`;
        const names = Array.from({ length: width }, (_, i) => `c${i}`);
        const rot = names.map((_, i) => `${r}.c${(i + 1) % width}`).join(', ');
        const inner = this.int(0, 1) ? `, LATERAL (${this.query(depth - 1, 1, [r])}) x${this.seq++}` : '';
        return `WITH RECURSIVE ${r}(${names.join(', ')}) AS ((${this.query(depth - 1, width, outer)}) UNION ALL SELECT ${rot} FROM ${r}${inner} WHERE false) SELECT * FROM ${r}`;
      }
      case 4:
        return `(${this.query(depth - 1, width, outer)}) ${['UNION', 'UNION ALL', 'INTERSECT', 'EXCEPT'][this.int(0, 3)]} (${this.query(depth - 1, width, outer)})`;
      case 5: {
        const s = `s${this.seq++}`;
        return `SELECT ${list(() => `(${this.query(depth - 1, 1, [s])} LIMIT 1)`)} FROM (${this.query(depth - 1, 1, outer)}) ${s}`;
      }
      case 6: {
        const s = `s${this.seq++}`;
        return `SELECT ${list(() => `${s}.c0`)} FROM (${this.query(depth - 1, 1, outer)}) ${s} WHERE EXISTS (${this.query(depth - 1, 2, [s])}) AND ${s}.c0 IN (${this.query(depth - 1, 1, [s])})`;
      }
      default: {
        const s = `s${this.seq++}`;
        return `SELECT ${list(() => `row_to_json(${s})::text`)} FROM (${this.query(depth - 1, width, outer)}) ${s}`;
      }
    }
  }
}

test('random nesting of CTEs, sub-selects and set operations: linear work', () => {
  let analysed = 0;
  fc.assert(
    fc.property(fc.gen(), fc.integer({ min: 1, max: 6 }), fc.integer({ min: 1, max: 4 }), (g, depth, width) => {
      const draw: Draw = (arb) => g(() => arb);
      const sql = new Nest(draw).query(depth, width, []);
      if (sql.length > 100_000) return;
      const { work, outcome } = walk(sql);
      if (outcome !== 'ok' && !TOO_COMPLEX.test(outcome)) throw new Error(`refused: ${outcome}\n${sql.slice(0, 2000)}`);
      // Linear: never more than 30 steps per character of SQL (no re-walks, no blow-up).
      expect([work <= Math.max(1_000, sql.length * 30), work, sql.length]).toEqual([true, work, sql.length]);
      analysed++;
    }),
    { numRuns: RUNS, endOnFailure: true },
  );
  expect(analysed).toBeGreaterThan(RUNS / 2);
});
