/**
 * Row rules over agents' own SQL (issue 27), end to end through interlock_query on PostgreSQL 15:
 * the rewrite to security_barrier row views, attribute binding, refusals, and the attack classes
 * of the issue (error probing with 1/0, casts and CASE, aggregates, window functions, EXISTS and
 * correlated sub-selects, joins on hidden keys, CTEs, set operations, views, partitions).
 */
import { codeOf, rowsOf, startRowFixture, type RowFixture } from '../../helpers/row-rules';
import type { SourceRole } from '../../../src/control/roles';
import { sqlResources } from '../../../src/tools/handlers/describe';
import { AccessEvaluator } from '../../../src/governance/evaluator';

let fx: RowFixture;
const role = (name: string, statements: SourceRole['statements']): SourceRole => ({ name, statements });
const ALL = role('all', [{ effect: 'allow', action: 'read', resource: 'public.*' }]);
const REP = role('rep', [
  { effect: 'allow', action: 'read', resource: 'public.customer', rows: 'support_rep_id = identity.employee_id' },
  { effect: 'allow', action: 'read', resource: 'public.invoice' },
  { effect: 'allow', action: 'read', resource: 'public.employee' },
  { effect: 'allow', action: 'read', resource: 'public.customer_countries' },
  { effect: 'allow', action: 'read', resource: 'public.ticket', rows: 'region = ANY(identity.regions)' },
]);
/** Customers of employee 1: customer_id % 6 = 0 and not a multiple of 10. */
const REP1 = [6, 12, 18, 24, 36, 42, 48, 54];

beforeAll(async () => {
  fx = await startRowFixture();
  fx.grant('rep', [REP]);
  fx.grant('boss', [ALL]);
}, 60_000);
afterAll(async () => fx?.close());

const ids = (rows: Array<Record<string, unknown>>, key = 'customer_id') => rows.map((r) => Number(r[key])).sort((a, b) => a - b);

describe('reads see only permitted rows', () => {
  it('a plain read, with and without the table name as qualifier', async () => {
    expect(ids(rowsOf(await fx.call('rep', { employee_id: 1 }, 'SELECT customer_id FROM customer')))).toEqual(REP1);
    expect(ids(rowsOf(await fx.call('rep', { employee_id: 1 }, 'SELECT customer.customer_id FROM public.customer WHERE customer.country <> $1', ['XX'])))).toEqual(REP1);
    expect(ids(rowsOf(await fx.call('rep', { employee_id: '1' }, 'SELECT c.customer_id FROM customer AS c ORDER BY 1')))).toEqual(REP1);
    expect(fx.lastAudit().row_rules).toEqual([{ relation: 'public.customer', rule: expect.stringMatching(/^[0-9a-f]{16}$/) }]);
  });

  it('a caller without a rule reads every row; the same text for another attribute value gives its own rows (cache key)', async () => {
    expect(rowsOf(await fx.call('boss', undefined, 'SELECT customer_id FROM customer'))).toHaveLength(60);
    const sql = 'SELECT customer_id FROM customer ORDER BY customer_id';
    expect(ids(rowsOf(await fx.call('rep', { employee_id: 1 }, sql)))).toEqual(REP1);
    const two = ids(rowsOf(await fx.call('rep', { employee_id: 2 }, sql)));
    expect(two).toEqual([1, 7, 13, 19, 25, 31, 37, 43, 49, 55]);
    const again = await fx.call('rep', { employee_id: 1 }, sql);
    expect(ids(rowsOf(again))).toEqual(REP1);
  });

  it('two callers with different rules and no attributes never share a cached result', async () => {
    fx.grant('jp', [role('jp', [{ effect: 'allow', action: 'read', resource: 'public.customer', rows: "country = 'JP'" }])]);
    fx.grant('de', [role('de', [{ effect: 'allow', action: 'read', resource: 'public.customer', rows: "country = 'DE'" }])]);
    const sql = 'SELECT DISTINCT country FROM customer';
    expect(rowsOf(await fx.call('jp', undefined, sql))).toEqual([{ country: 'JP' }]);
    expect(rowsOf(await fx.call('de', undefined, sql))).toEqual([{ country: 'DE' }]);
  });

  it('aggregates, window functions, sub-selects, EXISTS, CTEs, recursive CTEs, LATERAL and set operations count permitted rows only', async () => {
    const a = { employee_id: 1 };
    expect(rowsOf(await fx.call('rep', a, 'SELECT count(*)::int AS n, sum(credit)::text AS s FROM customer'))[0].n).toBe(8);
    expect(rowsOf(await fx.call('rep', a, 'SELECT count(*) OVER ()::int AS n FROM customer LIMIT 1'))[0].n).toBe(8);
    expect(rowsOf(await fx.call('rep', a, 'SELECT (SELECT count(*) FROM customer)::int AS n'))[0].n).toBe(8);
    expect(rowsOf(await fx.call('rep', a, 'SELECT count(*)::int AS n FROM invoice i WHERE EXISTS (SELECT 1 FROM customer c WHERE c.customer_id = i.customer_id)'))[0].n).toBe(32);
    expect(rowsOf(await fx.call('rep', a, 'WITH c AS MATERIALIZED (SELECT * FROM customer) SELECT count(*)::int AS n FROM c'))[0].n).toBe(8);
    expect(rowsOf(await fx.call('rep', a, 'WITH RECURSIVE r(id) AS (SELECT min(customer_id) FROM customer UNION ALL SELECT (SELECT min(customer_id) FROM customer WHERE customer_id > r.id) FROM r WHERE r.id IS NOT NULL) SELECT count(id)::int AS n FROM r'))[0].n).toBe(8);
    expect(rowsOf(await fx.call('rep', a, 'SELECT count(*)::int AS n FROM employee e, LATERAL (SELECT * FROM customer c WHERE c.support_rep_id = e.employee_id) x'))[0].n).toBe(8);
    expect(rowsOf(await fx.call('rep', a, 'SELECT count(*)::int AS n FROM (SELECT customer_id FROM customer UNION SELECT customer_id FROM invoice) u'))[0].n).toBe(60);
    expect(rowsOf(await fx.call('rep', a, 'SELECT count(*)::int AS n FROM (SELECT customer_id FROM invoice INTERSECT SELECT customer_id FROM customer) u'))[0].n).toBe(8);
    expect(rowsOf(await fx.call('rep', a, 'TABLE customer'))).toHaveLength(8);
  });

  it('a join on a hidden key finds nothing of the hidden row', async () => {
    const r = rowsOf(await fx.call('rep', { employee_id: 1 }, 'SELECT i.invoice_id, c.email FROM invoice i JOIN customer c ON c.customer_id = i.customer_id WHERE i.customer_id = 7'));
    expect(r).toEqual([]);
  });

  it('list attributes and partitions: a ruled parent rules its partitions, read directly or through it', async () => {
    const eu = { employee_id: 1, regions: ['eu'] };
    expect(ids(rowsOf(await fx.call('rep', eu, 'SELECT ticket_id FROM ticket')), 'ticket_id')).toEqual([3, 6, 9, 12, 15, 18, 21, 24, 27, 30]);
    expect(rowsOf(await fx.call('rep', eu, 'SELECT ticket_id FROM ticket_us'))).toEqual([]);
    expect(rowsOf(await fx.call('rep', eu, 'SELECT ticket_id FROM ONLY ticket'))).toEqual([]);
    expect(rowsOf(await fx.call('rep', { employee_id: 1, regions: 'us' }, 'SELECT count(*)::int AS n FROM ticket_us'))[0].n).toBe(10);
    expect(rowsOf(await fx.call('rep', { employee_id: 1, regions: ['us', 'ap'] }, 'SELECT count(*)::int AS n FROM ticket'))[0].n).toBe(20);
    expect(rowsOf(await fx.call('rep', { employee_id: 1, regions: [] }, 'SELECT count(*)::int AS n FROM ticket'))[0].n).toBe(0);
  });

  it('several allows on one table combine with OR; an allow without rows grants every row', async () => {
    fx.grant('two', [role('a', [{ effect: 'allow', action: 'read', resource: 'public.customer', rows: 'support_rep_id = identity.employee_id' }]), role('b', [{ effect: 'allow', action: 'read', resource: 'public.customer', rows: "country = 'JP'" }])]);
    const r = ids(rowsOf(await fx.call('two', { employee_id: 1 }, 'SELECT customer_id FROM customer')));
    const expected = (await fx.admin<{ customer_id: number }>("SELECT customer_id FROM customer WHERE support_rep_id = 1 OR country = 'JP' ORDER BY 1")).map((x) => x.customer_id);
    expect(r).toEqual(expected);
    fx.grant('three', [REP, role('c', [{ effect: 'allow', action: 'read', resource: 'public.customer.email' }])]);
    expect(rowsOf(await fx.call('three', { employee_id: 1 }, 'SELECT email FROM customer'))).toHaveLength(60);
  });
});

describe('hidden rows never reach the agent\'s expressions', () => {
  const a = { employee_id: 1 };
  it.each([
    ['division by zero on a hidden key', 'SELECT customer_id FROM customer WHERE 1 / (customer_id - 7) <> 0'],
    ['a cast that fails on hidden values', "SELECT customer_id FROM customer WHERE CASE WHEN customer_id = 7 THEN (email)::int ELSE 1 END = 1"],
    ['CASE raising through a failing cast in the select list', "SELECT CASE WHEN customer_id = 7 THEN ('x' || customer_id)::int ELSE customer_id END AS v FROM customer"],
    ['an error in a join condition on a hidden key', 'SELECT c.customer_id FROM customer c JOIN invoice i ON i.customer_id = c.customer_id AND 1 / (c.customer_id - 7) <> 0'],
    ['an error in an aggregate argument', 'SELECT sum(1 / (customer_id - 7))::text AS s FROM customer'],
    ['an error in a window function argument', 'SELECT sum(1 / (customer_id - 7)) OVER ()::text AS s FROM customer'],
    ['an error in a correlated sub-select', 'SELECT (SELECT 1 / (c.customer_id - 7)) AS v FROM customer c'],
    ['an error in EXISTS', 'SELECT 1 AS v WHERE EXISTS (SELECT 1 FROM customer WHERE 1 / (customer_id - 7) = 5)'],
    ['an error in a CTE', 'WITH x AS (SELECT 1 / (customer_id - 7) AS v FROM customer) SELECT count(v)::int AS n FROM x'],
    ['an error in a set operation arm', 'SELECT 1 / (customer_id - 7) AS v FROM customer UNION ALL SELECT 1'],
    ['a logarithm of zero on a hidden key', 'SELECT customer_id FROM customer WHERE ln(abs(customer_id - 7)) > -1'],
  ])('%s', async (_what, sql) => {
    const o = await fx.call('rep', a, sql);
    expect(codeOf(o)).toBe('ok');
  });

  it('the same probe fails for a caller who may see the row (the probe is real)', async () => {
    expect(codeOf(await fx.call('boss', undefined, 'SELECT customer_id FROM customer WHERE 1 / (customer_id - 7) <> 0'))).toBe('statement_failed');
    expect(codeOf(await fx.call('rep', { employee_id: 2 }, 'SELECT customer_id FROM customer WHERE 1 / (customer_id - 7) <> 0'))).toBe('statement_failed');
  });

  it('a point read on the ruled table still uses its index (the planner pushes the leakproof equality below the barrier)', async () => {
    await fx.call('rep', { employee_id: 1 }, 'SELECT customer_id FROM customer WHERE customer_id = $1', [6]);
    const [view] = await fx.admin<{ relname: string }>("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'interlock_rows' AND c.relname LIKE 'customer\\_%' LIMIT 1");
    await fx.admin("SELECT set_config('interlock.attr.employee_id', '1', false), set_config('enable_seqscan', 'off', false)");
    const plan = await fx.admin<{ 'QUERY PLAN': string }>(`EXPLAIN SELECT * FROM interlock_rows."${view.relname}" WHERE customer_id = 6`);
    await fx.admin("RESET enable_seqscan");
    const text = plan.map((r) => r['QUERY PLAN']).join('\n');
    expect(text).toMatch(/Index Scan using customer_pkey/);
    expect(text).toMatch(/Index Cond: \(customer_id = 6\)/);
    const opts = await fx.admin<{ reloptions: string[] }>(`SELECT c.reloptions FROM pg_class c WHERE c.oid = 'interlock_rows."${view.relname}"'::regclass`);
    expect(opts[0].reloptions).toEqual(expect.arrayContaining(['security_barrier=true', 'security_invoker=true']));
  });
});

describe('refusals (fail closed)', () => {
  it('a caller without an attribute the rule needs cannot read the table', async () => {
    const o = await fx.call('rep', {}, 'SELECT customer_id FROM customer');
    expect(codeOf(o)).toBe('row_rule_attribute_missing');
    expect(o.kind === 'refusal' && o.message).toContain('"employee_id"');
    expect(codeOf(await fx.call('rep', undefined, 'SELECT count(*) FROM customer'))).toBe('row_rule_attribute_missing');
    expect(codeOf(await fx.call('rep', { employee_id: null }, 'SELECT count(*) FROM customer'))).toBe('row_rule_attribute_missing');
    expect(codeOf(await fx.call('rep', { employee_id: [1, 2] }, 'SELECT count(*) FROM customer'))).toBe('row_rule_attribute_missing');
    // A value the compared column's type would not take is not a usable attribute (not a statement failure).
    const typo = await fx.call('rep', { employee_id: 'abc' }, 'SELECT count(*) FROM customer');
    expect(codeOf(typo)).toBe('row_rule_attribute_missing');
    expect(typo.kind === 'refusal' && typo.message).toContain('"employee_id" with a column of type integer');
    expect(codeOf(await fx.call('rep', { employee_id: '99999999999' }, 'SELECT count(*) FROM customer'))).toBe('row_rule_attribute_missing');
    expect(codeOf(await fx.call('rep', { employee_id: ' 1 ' }, 'SELECT count(*) FROM customer'))).toBe('ok');
    // Unruled tables stay readable without it.
    expect(codeOf(await fx.call('rep', {}, 'SELECT count(*) FROM invoice'))).toBe('ok');
  });

  it.each([
    ['a user-defined function (its body may read a ruled table)', 'SELECT customer_count() AS n FROM employee'],
    ['EXPLAIN of a ruled read', 'EXPLAIN SELECT * FROM customer'],
    ['a CTE named like a ruled table it also reads', 'WITH customer AS (SELECT 1 AS customer_id) SELECT c.customer_id FROM customer c, public.customer p WHERE p.customer_id = c.customer_id'],
    ['MERGE into a ruled table (this source is PostgreSQL 15: MERGE needs 17 for the check-option view)', "MERGE INTO customer c USING employee e ON c.support_rep_id = e.employee_id WHEN MATCHED THEN UPDATE SET email = 'm'"],
  ])('%s → row_rule_unenforceable', async (_what, sql) => {
    fx.grant('rw', [REP, role('w', [{ effect: 'allow', action: 'write', resource: 'public.*' }])]);
    expect(codeOf(await fx.call('rw', { employee_id: 1, regions: ['eu'] }, sql))).toBe('row_rule_unenforceable');
  });

  it('writes touching a ruled table are queued (restricted when approved: test/integration/sql/row-rules-writes.test.ts)', async () => {
    fx.grant('rw', [REP, role('w', [{ effect: 'allow', action: 'write', resource: 'public.*' }])]);
    for (const sql of ["UPDATE customer SET email = 'x' WHERE customer_id = 6", 'INSERT INTO invoice SELECT 1000 + customer_id, customer_id, 1, NULL FROM customer']) {
      expect(codeOf(await fx.call('rw', { employee_id: 1, regions: ['eu'] }, sql))).toBe('queued');
    }
  });

  it('a CTE that only shadows the name reads the CTE (no ruled table is touched)', async () => {
    expect(rowsOf(await fx.call('rep', {}, 'WITH customer AS (SELECT 1 AS customer_id) SELECT customer_id FROM customer'))).toEqual([{ customer_id: 1 }]);
  });

  it('a row view dropped on the source is made again within the call that finds it gone', async () => {
    const sql = 'SELECT count(*)::int AS n FROM customer WHERE country = $1';
    const before = rowsOf(await fx.call('rep', { employee_id: 1 }, sql, ['FR']));
    expect(before).toHaveLength(1);
    await fx.admin('DROP SCHEMA interlock_rows CASCADE');
    // The same count as through the view before the drop: the remade view applies the same rule.
    expect(rowsOf(await fx.call('rep', { employee_id: 1 }, sql, ['FR']))).toEqual(before);
    expect(codeOf(await fx.call('rep', { employee_id: 1 }, sql, ['JP']))).toBe('ok');
  });

  it('a tree that changed since the scan (a partition detached) refuses ruled reads of it until a rescan; unruled callers are not refused for it', async () => {
    const eu = { employee_id: 1, regions: ['eu'] };
    expect(rowsOf(await fx.call('rep', eu, 'SELECT count(*)::int AS n FROM ticket WHERE body <> $1', ['-']))[0].n).toBe(10);
    await fx.admin('ALTER TABLE ticket DETACH PARTITION ticket_ap');
    try {
      const o = await fx.call('rep', eu, 'SELECT count(*)::int AS n FROM ticket WHERE body <> $1', ['+']);
      expect(codeOf(o)).toBe('row_rule_unenforceable');
      expect(o.kind === 'refusal' && o.message).toContain('rescan');
      expect(codeOf(await fx.call('boss', undefined, 'SELECT count(*)::int AS n FROM ticket WHERE body <> $1', ['*']))).toBe('ok');
    } finally {
      await fx.admin("ALTER TABLE ticket ATTACH PARTITION ticket_ap FOR VALUES IN ('ap')");
    }
    expect(rowsOf(await fx.call('rep', eu, 'SELECT count(*)::int AS n FROM ticket WHERE body <> $1', ['/']))[0].n).toBe(10);
  });

  it('the row views cannot be named by agents', async () => {
    expect(codeOf(await fx.call('boss', undefined, 'SELECT * FROM interlock_rows.anything'))).toBe('source_role_denied');
  });
});

describe('describe_access shows each table\'s rule with attribute names, never values', () => {
  it('lists rows {rule, attributes} on ruled tables only', () => {
    const grants = fx.store.grants.filter((g) => g.identityId === 'two' || g.identityId === 'rep');
    const two = sqlResources(new AccessEvaluator(grants.filter((g) => g.identityId === 'two')), 'rows', fx.catalog, [], { identityId: 'two', identityName: 'two', roles: ['a', 'b'], sourceId: 'rows' }, new Date());
    const customer = (two.tables as Array<Record<string, unknown>>).find((t) => t.table === 'public.customer');
    expect(customer?.rows).toEqual({ rule: "(country = 'JP') OR (support_rep_id = identity.employee_id)", attributes: ['employee_id'] });
    const rep = sqlResources(new AccessEvaluator(grants.filter((g) => g.identityId === 'rep')), 'rows', fx.catalog, [], { identityId: 'rep', identityName: 'rep', roles: ['rep'], sourceId: 'rows' }, new Date());
    const tables = rep.tables as Array<Record<string, unknown>>;
    expect(tables.find((t) => t.table === 'public.invoice')?.rows).toBeUndefined();
    const ticket = tables.find((t) => t.table === 'public.ticket') as { rows: unknown; partitions: Array<{ table: string; rows: unknown }> };
    expect(ticket.rows).toEqual({ rule: 'region = ANY(identity.regions)', attributes: ['regions'] });
    expect(ticket.partitions.map((p) => p.rows)).toEqual([ticket.rows, ticket.rows, ticket.rows]);
  });

  it('a column allow without rows does not hide the rule of the other columns; allows covering columns differently show as AND of ORs', () => {
    const show = (statements: SourceRole['statements']) => {
      const r = sqlResources(new AccessEvaluator([{ sourceId: 'rows', role: REP }, { sourceId: 'rows', role: role('c', statements) }]), 'rows', fx.catalog, [], { identityId: 'x', identityName: 'x', roles: ['c', 'rep'], sourceId: 'rows' }, new Date());
      return (r.tables as Array<Record<string, unknown>>).find((t) => t.table === 'public.customer')?.rows;
    };
    expect(show([{ effect: 'allow', action: 'read', resource: 'public.customer.email' }])).toEqual({ rule: 'support_rep_id = identity.employee_id', attributes: ['employee_id'] });
    expect(show([{ effect: 'allow', action: 'read', resource: 'public.customer.email', rows: "country = 'JP'" }])).toEqual({
      rule: "((country = 'JP') OR (support_rep_id = identity.employee_id)) AND (support_rep_id = identity.employee_id)",
      attributes: ['employee_id'],
    });
    expect(show([{ effect: 'allow', action: 'read', resource: 'public.customer' }])).toBeUndefined();
  });
});
