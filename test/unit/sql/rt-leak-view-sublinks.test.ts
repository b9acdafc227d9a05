/**
 * Red-team regression (rt-leak): a view column computed by a sub-select over a masked column
 * (EXISTS, IN, a scalar sub-select whose WHERE compares the masked value) carries information about
 * that value, exactly like `CASE WHEN email LIKE … THEN …` does, which IS masked. Today the sublink
 * kinds returned no lineage from the sub-select's filters, so the view column was returned in clear;
 * a sublink's value now carries every column its sub-select consumes, as derived lineage.
 */
import { analyzeSql, initSqlParser } from '../../../src/sql/analyze';
import type { CatalogRelation, SourceCatalog } from '../../../src/sql/catalog-types';
import { planRedaction } from '../../../src/sql/redaction';
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
  ],
};

const MASK = [{ column: { schema: 'public', table: 'customer', column: 'email' }, method: 'partial' as const }];

function methodOf(sql: string, column: string): string | null {
  const a = analyzeSql(sql, CAT);
  if (!a.ok) throw new Error(`${a.code} ${a.message}`);
  const plan = planRedaction(a.outputs, MASK, { onOpaque: 'mask' });
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
