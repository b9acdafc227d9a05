/**
 * The one row estimator of a queued write's plan (src/console/plan.ts planRowEstimate), shared by
 * the console, the admin API's approval review and the CLI. PostgreSQL 14+ estimates a ModifyTable
 * node without RETURNING at rows=0, so the rows a write changes are its input's estimate.
 */
import { planRowEstimate } from '../../../src/console/plan';

test('DELETE and UPDATE: the input of the Delete/Update node, not its rows=0', () => {
  expect(planRowEstimate([
    'Delete on t  (cost=0.00..17.50 rows=0 width=0)',
    '  ->  Seq Scan on t  (cost=0.00..17.50 rows=99 width=6)',
    '        Filter: (id < 100)',
  ])).toBe(99);
  expect(planRowEstimate([
    'Update on t  (cost=0.00..17.50 rows=0 width=0)',
    '  ->  Seq Scan on t  (cost=0.00..17.50 rows=49 width=10)',
    '        Filter: (id < 50)',
  ])).toBe(49);
});

test('INSERT … VALUES and INSERT … SELECT; ON CONFLICT property lines are skipped', () => {
  expect(planRowEstimate(['Insert on t  (cost=0.00..0.01 rows=0 width=0)', '  ->  Result  (cost=0.00..0.01 rows=1 width=4)'])).toBe(1);
  expect(planRowEstimate([
    'Insert on t  (cost=0.00..0.10 rows=0 width=0)',
    '  Conflict Resolution: NOTHING',
    '  ->  Function Scan on generate_series g  (cost=0.00..0.10 rows=10 width=4)',
  ])).toBe(10);
});

test('RETURNING (own estimate larger) and older servers keep the node\'s own rows', () => {
  expect(planRowEstimate(['Delete on t  (cost=0.00..17.50 rows=99 width=6)', '  ->  Seq Scan on t  (cost=0.00..17.50 rows=99 width=6)'])).toBe(99);
});

test('data-modifying CTEs: each write node counted once, summed; the outer query is not', () => {
  expect(planRowEstimate([
    'Aggregate  (cost=17.59..17.60 rows=1 width=8)',
    '  CTE x',
    '    ->  Delete on t  (cost=0.00..17.50 rows=4 width=6)',
    '          ->  Seq Scan on t  (cost=0.00..17.50 rows=4 width=6)',
    '                Filter: (id < 5)',
    '  CTE y',
    '    ->  Update on u  (cost=0.00..1.00 rows=0 width=0)',
    '          ->  Seq Scan on u  (cost=0.00..1.00 rows=7 width=6)',
    '  ->  CTE Scan on x  (cost=0.00..0.08 rows=4 width=0)',
  ])).toBe(11);
});

test('a write node without a child plan line counts its own rows; no write node: the top node; no plan: null', () => {
  expect(planRowEstimate(['Delete on t  (cost=0.00..1.00 rows=0 width=0)', 'Other  (cost=0.00..1.00 rows=5 width=0)'])).toBe(0);
  expect(planRowEstimate(['Seq Scan on t  (cost=0.00..17.50 rows=1000 width=4)'])).toBe(1000);
  expect(planRowEstimate(['nothing here'])).toBeNull();
  expect(planRowEstimate([])).toBeNull();
  expect(planRowEstimate(undefined)).toBeNull();
});
