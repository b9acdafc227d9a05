/**
 * View expansion (issue 12, item 1): a view column's lineage is the lineage of its definition, so
 * masks and denies on base columns follow it; unprovable lineage fails closed.
 */
import { analyzeSql, initSqlParser, SqlAnalysisOk } from '../../../src/sql/analyze';
import type { CatalogRelation, SourceCatalog } from '../../../src/sql/catalog-types';
import { planRedaction } from '../../../src/sql/redaction';
import { CATALOG, lineage, refs } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

function view(name: string, cols: string[], definition: string | undefined, kind: CatalogRelation['kind'] = 'view', schema = 'public'): CatalogRelation {
  return { schema, name, kind, columns: cols.map((c) => ({ name: c, dataType: 'text' })), ...(definition === undefined ? {} : { definition }) };
}

function withViews(...views: CatalogRelation[]): SourceCatalog {
  return {
    ...CATALOG,
    relations: [...CATALOG.relations.filter((r) => !views.some((v) => v.schema === r.schema && v.name === r.name)), ...views],
    functions: [...CATALOG.functions, { schema: 'public', name: 'lookup', volatility: 'stable', returnsSet: false }],
  };
}

function ok(sql: string, cat: SourceCatalog): SqlAnalysisOk {
  const r = analyzeSql(sql, cat);
  if (!r.ok) throw new Error(`expected ok for ${sql}: ${r.code} ${r.message}`);
  return r;
}

function withViewsIn(base: SourceCatalog, ...views: CatalogRelation[]): SourceCatalog {
  return { ...base, relations: [...base.relations, ...views] };
}

const CAT = withViews(
  view('v_contact', ['customer_id', 'e', 'shout', 'n'], ' SELECT customer.customer_id,\n    customer.email AS e,\n    upper((customer.email)::text) AS shout,\n    length((customer.phone)::text) AS n\n   FROM customer;'),
  view('v_nested', ['id', 'mail'], ' SELECT v_contact.customer_id AS id,\n    v_contact.e AS mail\n   FROM v_contact;'),
  view('v_union', ['x'], " SELECT customer.email AS x FROM customer UNION ALL SELECT employee.email FROM employee;"),
  view('v_agg', ['country', 'emails'], ' SELECT customer.country, string_agg((customer.email)::text, \',\') AS emails FROM customer GROUP BY customer.country;'),
  view('v_join', ['name', 'total'], ' SELECT c.first_name AS name, i.total FROM customer c JOIN invoice i ON i.customer_id = c.customer_id;'),
  view('v_row', ['r'], ' SELECT row_to_json(c.*) AS r FROM customer c;'),
  view('v_nodef', ['a'], undefined),
  view('v_bad', ['a'], 'this is not sql'),
  view('v_userfn', ['a', 'b'], ' SELECT lookup(customer.customer_id) AS a, customer.email AS b FROM customer;'),
  view('v_volatile', ['a', 'b'], ' SELECT sidefx() AS a, customer.email AS b FROM customer;'),
  view('mv_contact', ['e'], ' SELECT customer.email AS e FROM customer;', 'materialized_view'),
  view('v_cycle_a', ['x'], ' SELECT v_cycle_b.x FROM v_cycle_b;'),
  view('v_cycle_b', ['x'], ' SELECT v_cycle_a.x FROM v_cycle_a;'),
);

describe('lineage through views', () => {
  test('renamed and derived view columns carry the base columns', () => {
    const r = ok('SELECT * FROM v_contact', CAT);
    expect(lineage(r)).toEqual([
      'customer_id: [customer.customer_id,v_contact.customer_id] pass',
      'e: [customer.email,v_contact.e] pass',
      'shout: [customer.email,v_contact.shout] derived',
      'n: [customer.phone,v_contact.n] derived',
    ]);
    expect(r.reads).toEqual([{ schema: 'public', table: 'v_contact', columns: ['customer_id', 'e', 'shout', 'n'] }]);
    expect(refs(r.viewSources)).toEqual(['customer.customer_id', 'customer.email', 'customer.phone', 'v_contact.customer_id', 'v_contact.e', 'v_contact.n', 'v_contact.shout']);
    expect(r.viewUnprovable).toBe(false);
  });

  test('only the used view columns bring their sources', () => {
    const r = ok('SELECT customer_id FROM v_contact', CAT);
    expect(refs(r.viewSources)).toEqual(['customer.customer_id', 'v_contact.customer_id']);
    expect(ok('SELECT count(*) FROM v_contact', CAT).viewSources).toEqual([]);
  });

  test('nested views, unions, aggregates, joins, whole rows and materialized views', () => {
    expect(lineage(ok('SELECT mail FROM v_nested', CAT))).toEqual(['mail: [customer.email,v_contact.e,v_nested.mail] pass']);
    expect(lineage(ok('SELECT x FROM v_union', CAT))).toEqual(['x: [customer.email,employee.email,v_union.x] derived']);
    expect(lineage(ok('SELECT emails FROM v_agg', CAT))).toEqual(['emails: [customer.email,v_agg.emails] derived']);
    expect(lineage(ok('SELECT total FROM v_join', CAT))).toEqual(['total: [invoice.total,v_join.total] pass']);
    const row = ok('SELECT r FROM v_row', CAT);
    expect(row.outputs[0].opaqueRelations).toEqual([{ schema: 'public', table: 'customer' }]);
    expect(row.viewSources.filter((c) => c.table === 'customer').length).toBe(13);
    expect(lineage(ok('SELECT e FROM mv_contact', CAT))).toEqual(['e: [customer.email,mv_contact.e] pass']);
  });

  test('a view column used in a predicate or expression is a non-output use of its base columns', () => {
    const r = ok("SELECT customer_id FROM v_contact WHERE shout LIKE 'A%'", CAT);
    expect(refs(r.nonOutputUses)).toEqual(['customer.email', 'v_contact.shout']);
    expect(refs(ok('SELECT lower(mail) FROM v_nested', CAT).nonOutputUses)).toEqual(['customer.email', 'v_contact.e', 'v_nested.mail']);
  });

  test.each(['v_nodef', 'v_bad', 'v_cycle_a'])('unprovable lineage fails closed: %s', (name) => {
    const r = ok(`SELECT * FROM ${name}`, CAT);
    expect(r.viewUnprovable).toBe(true);
    expect(r.outputs.every((o) => o.unprovable === true && o.opaque && !o.passthrough)).toBe(true);
    expect(r.unprovableUses).toBe(false);
    expect(ok(`SELECT 1 FROM ${name} WHERE ${name === 'v_cycle_a' ? 'x' : 'a'} IS NULL`, CAT).unprovableUses).toBe(true);
  });

  test('a column computed by a function outside pg_catalog is unprovable; the others keep their lineage', () => {
    const r = ok('SELECT a, b FROM v_userfn', CAT);
    expect(r.outputs).toEqual([
      {
        name: 'a',
        sources: [{ schema: 'public', table: 'v_userfn', column: 'a' }, { schema: 'public', table: 'customer', column: 'customer_id' }],
        passthrough: false,
        opaque: true,
        opaqueRelations: [],
        unprovable: true,
      },
      {
        name: 'b',
        sources: [{ schema: 'public', table: 'v_userfn', column: 'b' }, { schema: 'public', table: 'customer', column: 'email' }],
        passthrough: true,
        opaque: false,
        opaqueRelations: [],
      },
    ]);
    expect(r.viewUnprovable).toBe(true);
    expect(ok('SELECT b FROM v_userfn', CAT).viewUnprovable).toBe(false);
    // A definition the walker refuses (a volatile function): no lineage is known at all.
    expect(ok('SELECT b FROM v_volatile', CAT).outputs).toEqual([{
      name: 'b',
      sources: [{ schema: 'public', table: 'v_volatile', column: 'b' }],
      passthrough: false,
      opaque: true,
      opaqueRelations: [],
      unprovable: true,
    }]);
  });

  test('a pg_catalog function that a function outside pg_catalog may shadow counts as unanalysed', () => {
    const shadow: SourceCatalog = { ...CAT, functions: [...CAT.functions, { schema: 'public', name: 'upper', volatility: 'stable', returnsSet: false }] };
    const r = ok('SELECT shout, e FROM v_contact', shadow);
    expect(r.outputs.map((o) => o.unprovable === true)).toEqual([true, false]);
    expect(ok('SELECT shout FROM v_contact', CAT).outputs[0].unprovable).toBeUndefined();
    // The agent's own call of the same function is not affected (function policy decides there).
    expect(ok('SELECT upper(email) FROM customer', shadow).outputs[0].unprovable).toBeUndefined();
  });

  test('an operator outside pg_catalog in a definition makes the columns it computes unprovable', () => {
    const ops: SourceCatalog = { ...CAT, operators: [...(CAT.operators ?? []), { schema: 'public', name: '||', volatility: 'stable' }] };
    const cat = withViewsIn(ops, view('v_op', ['x', 'y'], " SELECT (customer.email)::text || '!' AS x, customer.email AS y FROM customer;"));
    expect(ok('SELECT x, y FROM v_op', cat).outputs.map((o) => o.unprovable === true)).toEqual([true, false]);
    expect(ok('SELECT x FROM v_op', withViewsIn(CAT, view('v_op', ['x', 'y'], " SELECT (customer.email)::text || '!' AS x, customer.email AS y FROM customer;"))).outputs[0].unprovable).toBeUndefined();
  });

  test('a write through an updatable view: its WHERE and RETURNING follow the base columns', () => {
    const r = ok("UPDATE v_contact SET customer_id = customer_id WHERE e LIKE 'a%' RETURNING e", CAT);
    expect(r.kind).toBe('write');
    expect(refs(r.nonOutputUses)).toContain('customer.email');
    expect(lineage(r)).toEqual(['e: [customer.email,v_contact.e] pass']);
    expect(refs(r.viewSources)).toContain('customer.email');
  });

  test('a plain table or view without masks is unaffected; the view still needs its own read', () => {
    const r = ok('SELECT e FROM v_contact', CAT);
    expect(r.reads).toEqual([{ schema: 'public', table: 'v_contact', columns: ['e'] }]);
    expect(ok('SELECT email FROM customer', CAT).viewSources).toEqual([]);
  });

  test('the expansion does not count against the statement\'s work budget', () => {
    // A fresh catalogue, so the view's definition is really walked here (expansions are cached per catalogue),
    // and a budget the definition alone would exceed.
    const fresh = structuredClone(CAT);
    const definition = fresh.relations.find((r) => r.name === 'v_contact')!.definition!;
    expect(analyzeSql(definition, structuredClone(CAT), { workBudget: 20 })).toMatchObject({ ok: false });
    const small = analyzeSql('SELECT e FROM v_contact', fresh, { workBudget: 20 });
    expect(small.ok).toBe(true);
  });

  test('redaction: base masks reach view columns with the method when passthrough, full otherwise', () => {
    const r = ok('SELECT customer_id, e, shout, n FROM v_contact', CAT);
    const plan = planRedaction(r.outputs, [
      { column: { schema: 'public', table: 'customer', column: 'email' }, method: 'partial' },
      { column: { schema: 'public', table: 'customer', column: 'phone' }, method: 'hash' },
    ]);
    expect(plan).toEqual({ ok: true, columns: [
      { index: 0, name: 'customer_id', method: null },
      { index: 1, name: 'e', method: 'partial' },
      { index: 2, name: 'shout', method: 'full' },
      { index: 3, name: 'n', method: 'full' },
    ] });
    // A mask declared on the view column itself still applies.
    const own = planRedaction(r.outputs, [{ column: { schema: 'public', table: 'v_contact', column: 'e' }, method: 'hash' }]);
    expect(own.ok && own.columns[1].method).toBe('hash');
  });

  test('redaction of unprovable outputs', () => {
    const r = ok('SELECT a FROM v_nodef', CAT);
    expect(planRedaction(r.outputs, [])).toEqual({ ok: true, columns: [{ index: 0, name: 'a', method: null }] });
    expect(planRedaction(r.outputs, [], { onOpaque: 'mask', unprovable: 'full' })).toEqual({ ok: true, columns: [{ index: 0, name: 'a', method: 'full' }] });
    expect(planRedaction(r.outputs, [{ column: { schema: 'public', table: 'customer', column: 'email' }, method: 'null' }])).toEqual({ ok: true, columns: [{ index: 0, name: 'a', method: 'null' }] });
    expect(planRedaction(r.outputs, [], { onOpaque: 'refuse', unprovable: 'full' }).ok).toBe(false);
  });
});
