/**
 * Red-team regression (rt-leak): a view column computed by a sub-select over a masked column
 * (EXISTS, IN, a scalar sub-select whose WHERE compares the masked value, …) carries information
 * about that value, exactly like `CASE WHEN email LIKE … THEN …` does, which IS masked. The value of
 * a sublink (and of a LATERAL sub-select that references the row it is joined to) now carries, as
 * derived lineage, every column its sub-select consumes (filters, ORDER BY/LIMIT, computations),
 * so such a view column is masked `full`, as the CASE control is.
 */
import { analyzeSql, initSqlParser } from '../../../src/sql/analyze';
import type { CatalogRelation, SourceCatalog } from '../../../src/sql/catalog-types';
import { planRedaction, type MaskMethod } from '../../../src/sql/redaction';
import { CATALOG } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

function view(name: string, cols: string[], definition: string): CatalogRelation {
  return { schema: 'public', name, kind: 'view', columns: cols.map((c) => ({ name: c, dataType: 'text' })), definition };
}

const CAT: SourceCatalog = {
  ...CATALOG,
  relations: [
    ...CATALOG.relations,
    view('v_case', ['customer_id', 'prov'], " SELECT customer.customer_id, CASE WHEN ((customer.email)::text ~~ '%gmail%'::text) THEN 'g'::text ELSE 'o'::text END AS prov FROM customer;"),
    view('v_exists', ['customer_id', 'starts_l'], " SELECT c.customer_id, (EXISTS ( SELECT 1 FROM customer c2 WHERE (((c2.email)::text ~~ 'l%'::text) AND (c2.customer_id = c.customer_id)))) AS starts_l FROM customer c;"),
    view('v_in', ['customer_id', 'gm'], " SELECT c.customer_id, (c.customer_id IN ( SELECT customer.customer_id FROM customer WHERE ((customer.email)::text ~~ '%gmail%'::text))) AS gm FROM customer c;"),
    view('v_sub', ['customer_id', 'rk'], ' SELECT c.customer_id, ( SELECT count(*) AS count FROM customer c2 WHERE ((c2.email)::text < (c.email)::text)) AS rk FROM customer c;'),
    view('v_all', ['customer_id', 'x'], " SELECT c.customer_id, (c.customer_id > ALL ( SELECT c2.customer_id FROM customer c2 WHERE ((c2.email)::text ~~ 'l%'::text))) AS x FROM customer c;"),
    view('v_any', ['customer_id', 'x'], " SELECT c.customer_id, (c.customer_id = ANY ( SELECT c2.customer_id FROM customer c2 WHERE ((c2.email)::text ~~ 'l%'::text))) AS x FROM customer c;"),
    view('v_some', ['customer_id', 'x'], " SELECT c.customer_id, (c.customer_id < SOME ( SELECT c2.customer_id FROM customer c2 WHERE ((c2.email)::text ~~ 'l%'::text))) AS x FROM customer c;"),
    view('v_array', ['customer_id', 'x'], ' SELECT c.customer_id, ARRAY( SELECT c2.customer_id FROM customer c2 WHERE ((c2.email)::text < (c.email)::text)) AS x FROM customer c;'),
    view('v_case_exists', ['customer_id', 'x'], " SELECT c.customer_id, CASE WHEN (EXISTS ( SELECT 1 FROM customer c2 WHERE (((c2.email)::text ~~ 'l%'::text) AND (c2.customer_id = c.customer_id)))) THEN 'y'::text ELSE 'n'::text END AS x FROM customer c;"),
    view('v_func_arg', ['customer_id', 'x'], ' SELECT c.customer_id, COALESCE(( SELECT count(*) AS count FROM customer c2 WHERE ((c2.email)::text < (c.email)::text)), (0)::bigint) AS x FROM customer c;'),
    view('v_func_arg2', ['customer_id', 'x'], ' SELECT c.customer_id, abs(( SELECT count(*) AS count FROM customer c2 WHERE ((c2.email)::text < (c.email)::text))) AS x FROM customer c;'),
    view('v_rowcmp', ['customer_id', 'x'], " SELECT c.customer_id, (ROW(c.customer_id, c.first_name) = ( SELECT c2.customer_id, c2.first_name FROM customer c2 WHERE ((c2.email)::text ~~ 'l%'::text) LIMIT 1)) AS x FROM customer c;"),
    view('v_order', ['customer_id', 'x'], ' SELECT c.customer_id, ( SELECT c2.customer_id FROM customer c2 ORDER BY c2.email LIMIT 1) AS x FROM customer c;'),
    view('v_nested', ['customer_id', 'x'], " SELECT c.customer_id, (EXISTS ( SELECT 1 FROM invoice i WHERE ((i.customer_id = c.customer_id) AND (EXISTS ( SELECT 1 FROM customer c2 WHERE (((c2.email)::text ~~ 'l%'::text) AND (c2.customer_id = i.customer_id))))))) AS x FROM customer c;"),
    view('v_derived_in_sub', ['customer_id', 'x'], " SELECT c.customer_id, (EXISTS ( SELECT 1 FROM ( SELECT customer.customer_id FROM customer WHERE ((customer.email)::text ~~ 'l%'::text)) s WHERE (s.customer_id = c.customer_id))) AS x FROM customer c;"),
    view('v_lateral_in_sub', ['customer_id', 'x'], " SELECT c.customer_id, (EXISTS ( SELECT 1 FROM invoice i, LATERAL ( SELECT 1 AS k FROM customer c2 WHERE ((c2.email)::text ~~ 'l%'::text)) l WHERE (i.customer_id = c.customer_id))) AS x FROM customer c;"),
    view('v_lateral', ['customer_id', 'rk'], ' SELECT c.customer_id, x.rk FROM customer c, LATERAL ( SELECT count(*) AS rk FROM customer c2 WHERE ((c2.phone)::text < (c.phone)::text)) x;'),
    view('v_lateral_uncorrelated', ['customer_id', 'n'], " SELECT c.customer_id, x.n FROM customer c, LATERAL ( SELECT count(*) AS n FROM customer c2 WHERE ((c2.phone)::text ~~ '+1%'::text)) x;"),
    view('v_join_filter', ['customer_id'], " SELECT c.customer_id FROM customer c WHERE ((c.email)::text ~~ 'l%'::text);"),
    view('v_sub_pass', ['customer_id', 'mail'], ' SELECT c.customer_id, ( SELECT c2.email FROM customer c2 LIMIT 1) AS mail FROM customer c;'),
    view('v_sub_keyed', ['customer_id', 'mail'], ' SELECT c.customer_id, ( SELECT c2.email FROM customer c2 WHERE (c2.customer_id = c.customer_id)) AS mail FROM customer c;'),
  ],
};

const EMAIL = { schema: 'public', table: 'customer', column: 'email' };
const PHONE = { schema: 'public', table: 'customer', column: 'phone' };
const MASK = [{ column: EMAIL, method: 'partial' as const }];

function analysis(sql: string) {
  const a = analyzeSql(sql, CAT);
  if (!a.ok) throw new Error(`${a.code} ${a.message}`);
  return a;
}

function methodOf(sql: string, column: string, masks: Array<{ column: typeof EMAIL; method: MaskMethod }> = MASK): MaskMethod | null {
  const a = analysis(sql);
  const plan = planRedaction(a.outputs, masks, { onOpaque: 'mask' });
  if (!plan.ok) throw new Error(plan.message);
  return plan.columns.find((c) => c.name === column)!.method;
}

test('control: a CASE condition on a masked column masks the view column', () => {
  expect(methodOf('SELECT * FROM v_case', 'prov')).toBe('full');
});

test('EXISTS over a masked column in a view column is masked', () => {
  expect(methodOf('SELECT * FROM v_exists', 'starts_l')).toBe('full');
});

test('IN (sub-select filtered on a masked column) in a view column is masked', () => {
  expect(methodOf('SELECT * FROM v_in', 'gm')).toBe('full');
});

test('a scalar sub-select comparing a masked column in a view column is masked', () => {
  expect(methodOf('SELECT * FROM v_sub', 'rk')).toBe('full');
});

test.each([
  ['ALL', 'v_all'],
  ['ANY', 'v_any'],
  ['SOME', 'v_some'],
  ['ARRAY(sub-select)', 'v_array'],
  ['EXISTS nested in CASE', 'v_case_exists'],
  ['scalar sub-select as a COALESCE argument', 'v_func_arg'],
  ['scalar sub-select as a function argument', 'v_func_arg2'],
  ['row-comparison sublink', 'v_rowcmp'],
  ['scalar sub-select ordered by a masked column', 'v_order'],
  ['EXISTS nested in the WHERE of another EXISTS', 'v_nested'],
  ['EXISTS over a derived table filtered on a masked column', 'v_derived_in_sub'],
  ['EXISTS over a LATERAL sub-select filtered on a masked column', 'v_lateral_in_sub'],
])('%s over a masked column in a view column is masked full', (_name, v) => {
  expect(methodOf(`SELECT * FROM ${v}`, 'x')).toBe('full');
});

test('the unmasked key column of the same views stays in clear', () => {
  for (const v of ['v_exists', 'v_in', 'v_sub', 'v_all', 'v_array', 'v_rowcmp', 'v_lateral']) {
    expect(methodOf(`SELECT * FROM ${v}`, 'customer_id', [...MASK, { column: PHONE, method: 'partial' }])).toBeNull();
  }
});

test('a null rule gives null, as for CASE', () => {
  const nul = [{ column: EMAIL, method: 'null' as const }];
  expect(methodOf('SELECT * FROM v_case', 'prov', nul)).toBe('null');
  expect(methodOf('SELECT * FROM v_exists', 'starts_l', nul)).toBe('null');
  expect(methodOf('SELECT * FROM v_sub', 'rk', nul)).toBe('null');
});

test('an output of a LATERAL sub-select comparing a masked column of the joined row is masked', () => {
  expect(methodOf('SELECT * FROM v_lateral', 'rk', [{ column: PHONE, method: 'partial' }])).toBe('full');
});

test('a LATERAL sub-select that does not reference the joined row is a derived table: its WHERE restricts rows (operator decision)', () => {
  expect(methodOf('SELECT * FROM v_lateral_uncorrelated', 'n', [{ column: PHONE, method: 'partial' }])).toBeNull();
});

test("a view's own WHERE restricting rows is still the operator's decision", () => {
  expect(methodOf('SELECT * FROM v_join_filter', 'customer_id')).toBeNull();
});

test('a scalar sub-select that consumes nothing stays passthrough (the rule method); one decided by a filter is derived', () => {
  expect(methodOf('SELECT * FROM v_sub_pass', 'mail')).toBe('partial');
  expect(methodOf('SELECT * FROM v_sub_keyed', 'mail')).toBe('full');
});

test('the sublink view column is fed from the masked column (a deny on it applies: viewSources)', () => {
  const a = analysis('SELECT starts_l FROM v_exists');
  expect(a.viewSources.map((c) => `${c.table}.${c.column}`)).toContain('customer.email');
});

test("top-level agent SQL: a sub-select's filter on a masked column is still a non-output use (refused by policy)", () => {
  const a = analysis("SELECT c.customer_id, EXISTS (SELECT 1 FROM customer c2 WHERE c2.email LIKE 'l%' AND c2.customer_id = c.customer_id) AS s FROM customer c");
  expect(a.nonOutputUses.map((c) => c.column)).toContain('email');
  expect(a.outputs[1].sources.map((c) => c.column)).toContain('email');
});

test('top-level agent SQL: a sub-select over unmasked columns uses no masked column', () => {
  const a = analysis('SELECT c.first_name FROM customer c WHERE EXISTS (SELECT 1 FROM invoice i WHERE i.customer_id = c.customer_id AND i.total > 10)');
  expect(a.nonOutputUses.map((c) => `${c.table}.${c.column}`).sort()).toEqual(['customer.customer_id', 'invoice.customer_id', 'invoice.total']);
  expect(methodOf('SELECT c.first_name FROM customer c WHERE EXISTS (SELECT 1 FROM invoice i WHERE i.customer_id = c.customer_id)', 'first_name')).toBeNull();
});
