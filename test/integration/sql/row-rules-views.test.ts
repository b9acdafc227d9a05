/**
 * Row rules through views and materialized views (issue 27 item 1, docs/row-rules.md "Views"): a
 * view whose lineage (the server's pg_depend records, through nested views) reaches no ruled
 * relation is read as is; a plain view over a ruled relation is read through its copy in
 * interlock_rows, whose stored query reads the row views; a materialized view over one, a view
 * calling user code, or a view without recorded lineage is refused row_rule_unenforceable.
 */
import { codeOf, REP1_CUSTOMERS, REP_ROLE, rowsOf, startRowFixture, type RowFixture } from '../../helpers/row-rules';
import type { SourceRole } from '../../../src/control/roles';
import { viewLineage } from '../../../src/sql/view-lineage';

let fx: RowFixture;
const VIEWS = ['employee_names', 'customer_countries', 'customer_ids', 'customer_total', 'rich_customers', 'customer_snapshot', 'employee_snapshot', 'snap_over', 'counted', 'positive_ids', 'invoice_customers', 'ticket_bodies'];
const REP: SourceRole = { name: 'rep', statements: [...REP_ROLE.statements, ...VIEWS.map((v) => ({ effect: 'allow' as const, action: 'read' as const, resource: `public.${v}` }))] };
const REP1 = REP1_CUSTOMERS;
const A = { employee_id: 1, regions: ['us'] };
const EXTRA = `
CREATE VIEW employee_names AS SELECT employee_id, last_name FROM employee;
CREATE VIEW customer_ids AS SELECT c.customer_id AS id FROM customer_countries c;
CREATE VIEW customer_total AS SELECT count(*) AS n FROM customer;
CREATE VIEW rich_customers WITH (security_barrier) AS SELECT customer_id, country, credit FROM customer WHERE credit > 0;
CREATE MATERIALIZED VIEW customer_snapshot AS SELECT customer_id, country FROM customer;
CREATE MATERIALIZED VIEW employee_snapshot AS SELECT employee_id FROM employee;
CREATE VIEW snap_over AS SELECT customer_id FROM customer_snapshot;
CREATE VIEW counted AS SELECT customer_count() AS n;
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE VIEW positive_ids AS SELECT employee_id::posint AS id FROM employee;
CREATE VIEW invoice_customers AS SELECT i.invoice_id, c.customer_id FROM invoice i JOIN customer c ON c.customer_id = i.customer_id;
CREATE VIEW ticket_bodies AS SELECT ticket_id, body FROM ticket;
`;

beforeAll(async () => {
  fx = await startRowFixture(EXTRA);
  // The copies must not depend on the writer's own search path (they are created under the catalogue's).
  await fx.admin(`ALTER ROLE "${fx.writer}" SET search_path = pg_catalog`);
  fx.grant('rep', [REP]);
}, 60_000);
afterAll(async () => fx?.close());

const ids = (rows: Array<Record<string, unknown>>, k = 'customer_id') => rows.map((r) => Number(r[k])).sort((a, b) => a - b);

describe('the scan records each view\'s lineage from the server', () => {
  it('nested views reach their base tables; materialized views and user code are named', () => {
    const ci = viewLineage(fx.catalog, 'public', 'customer_ids');
    expect(ci.bases).toEqual([{ schema: 'public', name: 'customer' }]);
    expect(ci.views.map((v) => v.name)).toEqual(['customer_ids', 'customer_countries']);
    expect(viewLineage(fx.catalog, 'public', 'customer_total').bases).toEqual([{ schema: 'public', name: 'customer' }]);
    expect(viewLineage(fx.catalog, 'public', 'snap_over').materialized).toEqual([{ schema: 'public', name: 'customer_snapshot' }]);
    expect(viewLineage(fx.catalog, 'public', 'counted').userCode).toEqual(['public.customer_count']);
    expect(fx.catalog.relations.find((r) => r.name === 'rich_customers')?.view).toMatchObject({ securityBarrier: true, securityInvoker: false });
  });
});

describe('a view whose lineage reaches no ruled relation is read as is', () => {
  it.each([
    ['a view over an unruled table', 'SELECT count(*)::int AS n FROM employee_names', 6],
    ['a materialized view over an unruled table', 'SELECT count(*)::int AS n FROM employee_snapshot', 6],
  ])('%s', async (_w, sql, n) => {
    expect(rowsOf(await fx.call('rep', A, sql))).toEqual([{ n }]);
    expect(fx.lastAudit().row_rules).toBeUndefined();
  });

  it('a caller with no allow on the base table (only the view granted) reads the view\'s rows: the base carries no rule for it', async () => {
    fx.grant('viewer', [{ name: 'v', statements: [{ effect: 'allow', action: 'read', resource: 'public.customer_countries' }, { effect: 'allow', action: 'read', resource: 'public.ticket', rows: 'region = ANY(identity.regions)' }] }]);
    expect(rowsOf(await fx.call('viewer', A, 'SELECT count(*)::int AS n FROM customer_countries'))).toEqual([{ n: 60 }]);
  });
});

describe('a plain view over a ruled relation reads only the permitted rows (through its copy)', () => {
  it.each([
    ['the view', 'SELECT customer_id FROM customer_countries'],
    ['a view over that view', 'SELECT id AS customer_id FROM customer_ids'],
    ['the view joined with its base table', 'SELECT v.customer_id FROM customer_countries v JOIN customer c USING (customer_id)'],
    ['the view in a sub-select and a CTE', 'WITH x AS (SELECT customer_id FROM customer_countries) SELECT customer_id FROM x WHERE customer_id IN (SELECT customer_id FROM customer_countries)'],
  ])('%s', async (_w, sql) => {
    expect(ids(rowsOf(await fx.call('rep', A, sql)))).toEqual(REP1);
    expect(fx.lastAudit().row_rules).toEqual([{ relation: 'public.customer', rule: expect.any(String) }]);
  });

  it('a count through a view that uses none of its columns counts permitted rows only', async () => {
    expect(rowsOf(await fx.call('rep', A, 'SELECT n::int AS n FROM customer_total'))).toEqual([{ n: 8 }]);
    expect(rowsOf(await fx.call('rep', A, 'SELECT count(*)::int AS n FROM customer_countries'))).toEqual([{ n: 8 }]);
  });

  it('a view joining a ruled and an unruled table keeps the unruled rows that join permitted ones', async () => {
    expect(rowsOf(await fx.call('rep', A, 'SELECT count(*)::int AS n FROM invoice_customers'))).toEqual([{ n: 32 }]);
  });

  it('a view over a ruled partitioned table follows the partitions\' rule', async () => {
    expect(rowsOf(await fx.call('rep', A, 'SELECT count(*)::int AS n FROM ticket_bodies'))).toEqual([{ n: 10 }]);
    expect(rowsOf(await fx.call('rep', { employee_id: 1, regions: ['us', 'eu'] }, 'SELECT count(*)::int AS n FROM ticket_bodies'))).toEqual([{ n: 20 }]);
  });

  it('no expression of the agent\'s is evaluated on a hidden row of the view (error probe)', async () => {
    // Customer 7 is hidden from employee 1: an unruled caller's read of the same text fails on it.
    const probe = 'SELECT customer_id FROM customer_countries WHERE 1 / (customer_id - 7) IS NOT NULL';
    fx.grant('boss', [{ name: 'b', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }] }]);
    expect(codeOf(await fx.call('boss', undefined, probe))).toBe('statement_failed');
    expect(ids(rowsOf(await fx.call('rep', A, probe)))).toEqual(REP1);
  });

  it('a security_barrier view keeps its barrier in the copy, and every copy reads as the invoker', async () => {
    const expected = (await fx.admin<{ id: number }>('SELECT customer_id AS id FROM customer WHERE support_rep_id = 1 AND credit > 0 ORDER BY 1')).map((r) => r.id);
    expect(ids(rowsOf(await fx.call('rep', A, 'SELECT customer_id FROM rich_customers')))).toEqual(expected);
    const opts = await fx.admin<{ relname: string; reloptions: string[] }>("SELECT c.relname, c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'interlock_rows' AND (c.relname LIKE 'rich\\_customers\\_%' OR c.relname LIKE 'customer\\_countries\\_%')");
    expect(opts.find((o) => o.relname.startsWith('rich_'))?.reloptions).toEqual(['security_barrier=true', 'security_invoker=true']);
    expect(opts.find((o) => o.relname.startsWith('customer_countries_'))?.reloptions).toEqual(['security_barrier=false', 'security_invoker=true']);
  });

  it('two identities with different attributes never share a cached answer through a view', async () => {
    const sql = 'SELECT customer_id FROM customer_countries ORDER BY 1';
    expect(ids(rowsOf(await fx.call('rep', { employee_id: 1 }, sql)))).toEqual(REP1);
    const two = ids(rowsOf(await fx.call('rep', { employee_id: 2 }, sql)));
    expect(two.length).toBeGreaterThan(0);
    expect(two.some((x) => REP1.includes(x))).toBe(false);
  });

  it('a caller without the attribute the view\'s base rule needs cannot read the view', async () => {
    expect(codeOf(await fx.call('rep', { regions: ['us'] }, 'SELECT customer_id FROM customer_countries'))).toBe('row_rule_attribute_missing');
  });
});

describe('refused with a reason (row_rule_unenforceable)', () => {
  it.each([
    ['a materialized view over a ruled table', 'SELECT customer_id FROM customer_snapshot', /materialized view public\.customer_snapshot/],
    ['a view over such a materialized view', 'SELECT customer_id FROM snap_over', /materialized view public\.customer_snapshot/],
    ['a view calling a user-defined function', 'SELECT n FROM counted', /user-defined code \(public\.customer_count\)/],
    ['a view casting to a domain with a CHECK (user code on input), even over an unruled table', 'SELECT id FROM positive_ids', /user-defined code \(public\.posint\)/],
  ])('%s', async (_w, sql, reason) => {
    expect(codeOf(await fx.call('rep', A, sql))).toBe('row_rule_unenforceable');
    expect(fx.lastAudit().row_rule_refusal).toMatch(reason);
  });

  it('a write through a view over a ruled table is refused; one reading such a view is queued (its copy is read when approved)', async () => {
    fx.grant('rw', [REP, { name: 'w', statements: [{ effect: 'allow', action: 'write', resource: 'public.*' }] }]);
    expect(codeOf(await fx.call('rw', A, "UPDATE customer_countries SET country = 'XX' WHERE customer_id = 7"))).toBe('row_rule_unenforceable');
    expect(fx.lastAudit().row_rule_refusal).toMatch(/a write through view public\.customer_countries/);
    expect(codeOf(await fx.call('rw', A, 'INSERT INTO invoice (invoice_id, customer_id, total) SELECT 1000 + customer_id, customer_id, 1 FROM customer_countries'))).toBe('queued');
  });

  it('an approved write reading a view over a ruled table reads only the permitted rows (through its copy, as the approval runs it)', async () => {
    fx.grant('rw', [REP, { name: 'w', statements: [{ effect: 'allow', action: 'write', resource: 'public.invoice' }] }]);
    try {
      // Qualified: the writer's own search path is pg_catalog here (beforeAll); the copy is made under the catalogue's.
      expect(await fx.write('rw', A, 'INSERT INTO public.invoice (invoice_id, customer_id, total) SELECT 2000 + customer_id, customer_id, 1 FROM public.customer_countries')).toEqual({ rowCount: 8 });
      expect((await fx.admin<{ id: number }>('SELECT customer_id AS id FROM invoice WHERE invoice_id > 2000 ORDER BY 1')).map((r) => r.id)).toEqual(REP1);
    } finally {
      await fx.admin('DELETE FROM invoice WHERE invoice_id > 2000');
    }
  });

  it('a view whose lineage the catalogue does not record (scanned before it was recorded)', async () => {
    const rel = fx.catalog.relations.find((r) => r.name === 'employee_names')!;
    const saved = rel.view;
    const { prepareCatalog } = await import('../../../src/sql/prepared-catalog');
    delete rel.view;
    try {
      // A fresh catalogue object (the lineage index is cached per object).
      const stale = { ...fx.catalog, relations: fx.catalog.relations.map((r) => ({ ...r })) };
      prepareCatalog(stale);
      const { planRowRules } = await import('../../../src/pipeline/row-rules');
      const { analyzeSql } = await import('../../../src/sql/analyze');
      const { AccessEvaluator } = await import('../../../src/governance/evaluator');
      const sql = 'SELECT employee_id FROM employee_names';
      const analysis = analyzeSql(sql, stale);
      if (!analysis.ok) throw new Error('analysis refused');
      const d = planRowRules({ evaluator: new AccessEvaluator([{ sourceId: 'rows', role: REP }]), sourceId: 'rows', analysis, catalog: stale, attributes: A, sql });
      expect(d.kind === 'refused' && [d.outcome.kind === 'refusal' && d.outcome.code, d.reason]).toEqual(['row_rule_unenforceable', expect.stringMatching(/not recorded .*rescan/)]);
    } finally {
      rel.view = saved;
    }
  });
});

describe('describe_access names the row rules a view inherits (rows_from)', () => {
  it('a view over ruled tables lists each base rule; a view over unruled tables has none', async () => {
    const { AccessEvaluator } = await import('../../../src/governance/evaluator');
    const { sqlResources } = await import('../../../src/tools/handlers/describe');
    const ev = new AccessEvaluator(fx.store.grants.filter((g) => g.identityId === 'rep'));
    const res = sqlResources(ev, 'rows', fx.catalog, [], { identityId: 'rep', identityName: 'rep', roles: ['rep'], sourceId: 'rows' }, new Date());
    const entry = (name: string) => (res.tables as Array<Record<string, unknown>>).find((x) => x.table === name);
    const customerRule = { table: 'public.customer', rule: 'support_rep_id = identity.employee_id', attributes: ['employee_id'] };
    // Nested: customer_ids → customer_countries → customer.
    expect(entry('public.customer_ids')?.rows_from).toEqual([customerRule]);
    expect(entry('public.customer_total')?.rows_from).toEqual([customerRule]);
    expect(entry('public.customer_snapshot')?.rows_from).toEqual([customerRule]);
    expect(entry('public.invoice_customers')?.rows_from).toEqual([customerRule]);
    expect(entry('public.ticket_bodies')?.rows_from).toEqual([{ table: 'public.ticket', rule: 'region = ANY(identity.regions)', attributes: ['regions'] }]);
    expect(entry('public.employee_names')).toMatchObject({ kind: 'view' });
    expect(entry('public.employee_names')?.rows_from).toBeUndefined();
    // A view has no rule of its own: its rows are its bases'.
    expect(entry('public.customer_ids')?.rows).toBeUndefined();
  });
});
