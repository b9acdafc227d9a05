/**
 * Property (issue 12, item 1): for random views over masked columns — renames, expressions, joins,
 * unions, aggregates and nested views — the lineage of every view column equals an independent
 * oracle (the base columns its definition chain names, and whether every step passes the value
 * through unchanged), so redaction masks exactly the view columns fed by a masked base column, with
 * the rule's method only when the value is unchanged. Values against a real server:
 * test/integration/sql/views.test.ts.
 */
import fc from 'fast-check';
import { analyzeSql, initSqlParser } from '../../../src/sql/analyze';
import type { CatalogRelation, SourceCatalog } from '../../../src/sql/catalog-types';
import { planRedaction, type MaskMethod } from '../../../src/sql/redaction';
import { CATALOG } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

const BASE = ['c.email', 'c.phone', 'c.first_name', 'c.country', 'c.customer_id', 'i.total', 'e.email'];
/** [template, passes the value through unchanged] */
const WRAPS: Array<[(x: string) => string, boolean]> = [
  [(x) => x, true],
  [(x) => `upper(${x}::text)`, false],
  [(x) => `${x}::text || ''`, false],
  [(x) => `coalesce(${x}::text, '-')`, false],
  [(x) => `CASE WHEN true THEN ${x}::text END`, false],
  [(x) => `(${x})`, true],
  [(x) => `${x} COLLATE "C"`, true],
];
const FROM = 'customer c JOIN invoice i ON i.customer_id = c.customer_id JOIN employee e ON e.employee_id = c.support_rep_id';

interface Oracle {
  src: Set<string>;
  pass: boolean;
}

const level = fc.record({
  cols: fc.array(fc.tuple(fc.nat(), fc.nat({ max: WRAPS.length - 1 })), { minLength: 1, maxLength: 4 }),
  shape: fc.constantFrom('plain', 'union_same', 'union_other', 'aggregate', 'subquery', 'cte'),
  other: fc.nat(),
});

function build(levels: Array<{ cols: Array<[number, number]>; shape: string; other: number }>) {
  const relations: CatalogRelation[] = [];
  let prev: { name: string; cols: string[]; oracle: Oracle[] } | null = null;
  levels.forEach((lv, n) => {
    const name = `pv${n}`;
    const inputs: Array<{ ref: string; oracle: Oracle }> = prev
      ? prev.cols.map((c, i) => ({ ref: `p.${c}`, oracle: prev!.oracle[i] }))
      : BASE.map((b) => ({ ref: b, oracle: { src: new Set([b === 'e.email' ? 'employee.email' : b === 'i.total' ? 'invoice.total' : 'customer.' + b.slice(2)]), pass: true } }));
    const from = prev ? `${prev.name} p` : FROM;
    const cols = lv.cols.map(([pick, w], k) => {
      const input = inputs[pick % inputs.length];
      const [wrap, keeps] = WRAPS[w];
      return { name: `k${k}`, expr: wrap(input.ref), oracle: { src: new Set(input.oracle.src), pass: input.oracle.pass && keeps } as Oracle, input };
    });
    const list = cols.map((c) => `${c.expr} AS ${c.name}`).join(', ');
    let def: string;
    switch (lv.shape) {
      case 'union_same':
        def = `SELECT ${list} FROM ${from} UNION ALL SELECT ${list} FROM ${from}`;
        break;
      case 'union_other': {
        // The second branch takes another input for column 0.
        const alt = inputs[lv.other % inputs.length];
        def = `SELECT ${list} FROM ${from} UNION ALL SELECT ${[`${alt.ref} AS k0`, ...cols.slice(1).map((c) => `${c.expr} AS ${c.name}`)].join(', ')} FROM ${from}`;
        const same = alt.ref === cols[0].input.ref && cols[0].oracle.pass;
        for (const s of alt.oracle.src) cols[0].oracle.src.add(s);
        cols[0].oracle.pass = same || (cols[0].oracle.pass && alt.oracle.pass && [...alt.oracle.src].every((s) => cols[0].input.oracle.src.has(s)) && cols[0].input.oracle.src.size === alt.oracle.src.size);
        break;
      }
      case 'aggregate':
        def = `SELECT ${cols.map((c) => `max(${c.expr}::text) AS ${c.name}`).join(', ')} FROM ${from}`;
        for (const c of cols) c.oracle.pass = false;
        break;
      case 'subquery':
        def = `SELECT * FROM (SELECT ${list} FROM ${from}) q`;
        break;
      default:
        def = `WITH w AS (SELECT ${list} FROM ${from}) SELECT * FROM w`;
    }
    relations.push({ schema: 'public', name, kind: n % 3 === 2 ? 'materialized_view' : 'view', columns: cols.map((c) => ({ name: c.name, dataType: 'text' })), definition: def });
    prev = { name, cols: cols.map((c) => c.name), oracle: cols.map((c) => c.oracle) };
  });
  return { relations, top: prev! };
}

test('view column lineage equals the oracle; redaction masks exactly what a masked base column feeds', () => {
  fc.assert(
    fc.property(
      fc.array(level, { minLength: 1, maxLength: 4 }),
      fc.constantFrom(...BASE),
      fc.constantFrom<MaskMethod>('partial', 'hash', 'full', 'null'),
      (levels, maskedBase, method) => {
        const { relations, top } = build(levels);
        const cat: SourceCatalog = { ...CATALOG, relations: [...CATALOG.relations, ...relations] };
        const a = analyzeSql(`SELECT * FROM ${relations[relations.length - 1].name}`, cat);
        if (!a.ok) throw new Error(`${a.code} ${a.message}\n${relations.map((r) => r.definition).join('\n')}`);
        expect(a.viewUnprovable).toBe(false);
        a.outputs.forEach((o, i) => {
          const base = o.sources.filter((s) => !s.table.startsWith('pv')).map((s) => `${s.table}.${s.column}`).sort();
          expect(base).toEqual([...top.oracle[i].src].sort());
          // Every view column on the chain is named too (a mask on a view column applies).
          expect(o.sources.some((s) => s.table === relations[relations.length - 1].name && s.column === o.name)).toBe(true);
          expect(o.passthrough).toBe(top.oracle[i].pass);
        });
        const col = maskedBase === 'e.email' ? { table: 'employee', column: 'email' } : maskedBase === 'i.total' ? { table: 'invoice', column: 'total' } : { table: 'customer', column: maskedBase.slice(2) };
        const plan = planRedaction(a.outputs, [{ column: { schema: 'public', ...col }, method }]);
        if (!plan.ok) throw new Error('plan refused');
        plan.columns.forEach((p, i) => {
          const fed = top.oracle[i].src.has(`${col.table}.${col.column}`);
          const want = !fed ? null : top.oracle[i].pass ? method : method === 'null' ? 'null' : 'full';
          expect(p.method).toBe(want);
        });
      },
    ),
    { numRuns: 300, seed: 12 },
  );
});
