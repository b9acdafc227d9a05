/**
 * Red team rt27z on row rules (issue 27): an identity restricted to its own rows trying to read
 * another tenant's rows or write outside its scope, on real PostgreSQL (the tests' server, test/helpers/pg.ts). Not
 * repeated here: what rt27-row-rules, rt27-writes and rt27-redteam cover. Each block names a
 * finding (severity, fixed or not) or a defence confirmed with exact outcomes.
 *
 * Fixture: test/helpers/row-rules.ts (employee 1 supports customers 6, 12, 18, 24, 36, 42, 48, 54
 * of 60; tickets by region) and, for discovery, a source with a mapped document table.
 */
import { codeOf, REP1_CUSTOMERS, REP_ROLE, rowsOf, startRowFixture, type RowFixture } from '../../helpers/row-rules';
import { startRowDiscoverySource, type RowDiscoverySource } from '../../helpers/discovery-rows';
import type { SourceRole } from '../../../src/control/roles';
import type { Policy } from '../../../src/control/policies';
import type { RoleStatement } from '../../../generated/role-v1';
import { AccessEvaluator } from '../../../src/governance/evaluator';
import { discoverHandler } from '../../../src/tools/handlers/discover';
import { documentsConnectorRequest } from '../../../src/tools/handlers/documents-request';
import type { ToolOutcome } from '../../../src/tools/types';

const A = { employee_id: 1, regions: ['us'] };
const ids = (rows: Array<Record<string, unknown>>, col = 'customer_id') => rows.map((r) => Number(r[col])).sort((a, b) => a - b);

/** Views over the ruled customer table that run SQL text (built-ins) or only harmless built-ins. */
const VIEWS = `
CREATE VIEW cust_xml AS SELECT query_to_xml('SELECT customer_id, credit FROM public.customer', true, false, '')::text AS x;
CREATE VIEW cust_words AS SELECT count(*)::int AS n FROM ts_stat('SELECT to_tsvector(email) FROM public.customer');
CREATE VIEW cust_table_xml AS SELECT table_to_xml('public.customer', true, false, '')::text AS x;
CREATE VIEW cust_upper AS SELECT customer_id, upper(country) AS country FROM customer;
CREATE TABLE note (note_id int PRIMARY KEY, owner_id int NOT NULL, tenant text NOT NULL, body text);
CREATE VIEW note_v AS SELECT * FROM note;
CREATE VIEW note_bv WITH (security_barrier) AS SELECT note_id, owner_id, body FROM note WHERE note_id > 0;
CREATE VIEW emp_v AS SELECT employee_id, region FROM employee;
CREATE VIEW note_body AS SELECT note_id, body FROM note;
CREATE TABLE proj (id int PRIMARY KEY);
CREATE TABLE task2 (id int PRIMARY KEY, proj_id int NOT NULL REFERENCES proj ON DELETE CASCADE, owner_id int NOT NULL, note text);
`;
/** 40 notes, employee 1 owns 10 (owner_id = 1 + note_id % 4). */
const NOTES_RESET = `TRUNCATE note; INSERT INTO note SELECT g, 1 + g % 4, (ARRAY['a','b'])[1 + g % 2], 'n' || g FROM generate_series(1, 40) g;`;
const VIEW_ROLE: SourceRole = {
  name: 'rep-views',
  statements: [...REP_ROLE.statements, ...['cust_xml', 'cust_words', 'cust_table_xml', 'cust_upper'].map((v) => ({ effect: 'allow' as const, action: 'read' as const, resource: `public.${v}` }))],
};
const EMAIL: SourceRole = { name: 'email', statements: [{ effect: 'allow', action: 'read', resource: 'public.customer.email' }] };

let fx: RowFixture;
beforeAll(async () => {
  fx = await startRowFixture(VIEWS);
  fx.grant('rep', [VIEW_ROLE]);
  fx.grant('mix', [REP_ROLE, EMAIL]);
  fx.grant('plain', [{ name: 'plain', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }] }]);
}, 60_000);
afterAll(async () => fx?.close());
afterEach(() => {
  fx.store.policies = [];
});

describe('finding Z2 (medium, fixed): a view calling a built-in that runs SQL text read the ruled table unfiltered', () => {
  // PostgreSQL records no dependency on a built-in (pg_catalog objects are pinned), and the text a
  // query_to_xml / ts_stat / table_to_xml runs is a string: the view's lineage named no ruled
  // relation, so the view was "read as is" and showed every customer (query_to_xml: all 60 rows;
  // ts_stat over 60 emails). The agent may not call these functions itself (function_not_allowed);
  // through a view granted by the operator it could. Fixed in src/sql/view-lineage.ts: such a call in
  // a view's definition counts as user code, so a caller with row rules is refused.
  it.each([
    ['query_to_xml', 'SELECT length(x) AS n FROM cust_xml'],
    ['ts_stat', 'SELECT n FROM cust_words'],
    ['table_to_xml', 'SELECT length(x) AS n FROM cust_table_xml'],
  ])('a view calling %s → row_rule_unenforceable for a ruled caller', async (fn, sql) => {
    expect(codeOf(await fx.call('rep', A, sql))).toBe('row_rule_unenforceable');
    expect(fx.lastAudit().row_rule_refusal).toBe(`view public.${sql.split(' FROM ')[1]} calls user-defined code (pg_catalog.${fn}) and the caller has row rules on the source`);
  });
  it('a caller without row rules still reads such a view (it is not refused as such)', async () => {
    const o = await fx.call('plain', undefined, 'SELECT n FROM cust_words');
    expect(codeOf(o)).toBe('ok');
    expect(rowsOf(o)[0].n).toBeGreaterThan(8);
  });
  it('a view calling only harmless built-ins (upper) is still read through its copy: the permitted rows', async () => {
    expect(ids(rowsOf(await fx.call('rep', A, 'SELECT customer_id, country FROM cust_upper')))).toEqual(REP1_CUSTOMERS);
  });
});

describe('finding Z3 (high, fixed): a write through a view reached every row of a base table ruled for writes only', () => {
  // The write-through-view refusal looked at the base relations' READ rules. A caller whose rows
  // are limited for writes only — a write allow with `rows` (its read allow has none), or a
  // `restrict_rows` policy for `write` — wrote through an auto-updatable view over the table with no
  // check-option view in between: before the fix `UPDATE note_v SET body = 'x'` changed 40 notes
  // instead of the 10 `UPDATE note` changes, `DELETE FROM note_v WHERE note_id > 30` deleted other
  // owners' notes, and `INSERT INTO note_v` inserted an owner-2 note. Fixed in
  // src/pipeline/row-rules.ts: such a write is refused (row_rule_unenforceable) before it is
  // queued and when it is approved.
  const WRITE_ROWS: SourceRole = {
    name: 'write-rows',
    statements: [
      { effect: 'allow', action: 'read', resource: 'public.note' },
      { effect: 'allow', action: 'write', resource: 'public.note', rows: 'owner_id = identity.employee_id' },
      { effect: 'allow', action: '*', resource: 'public.note_v' },
      { effect: 'allow', action: '*', resource: 'public.note_bv' },
      { effect: 'allow', action: 'read', resource: 'public.ticket' },
      { effect: 'allow', action: 'write', resource: 'public.ticket', rows: 'region = ANY(identity.regions)' },
    ],
  };
  const ALL: SourceRole = { name: 'all', statements: [{ effect: 'allow', action: '*', resource: 'public.*' }] };
  const OWN_WRITES: Policy = { name: 'own-writes', applies_to: { roles: ['all'] }, rule: { type: 'restrict_rows', relations: ['public.note'], actions: ['write'], rows: 'owner_id = identity.employee_id' } } as unknown as Policy;
  const ME = { employee_id: 1, regions: ['eu'] };
  beforeAll(() => {
    fx.grant('wrows', [WRITE_ROWS]);
    fx.grant('wall', [ALL]);
    fx.grant('boss', [ALL]);
  });
  beforeEach(async () => {
    await fx.admin(NOTES_RESET);
  });
  const untouched = async () => expect(await fx.admin(`SELECT count(*)::int AS n FROM note WHERE body <> 'n' || note_id OR owner_id <> 1 + note_id % 4 OR note_id > 40`)).toEqual([{ n: 0 }]);
  it.each([
    ['a write allow with rows', 'wrows'],
    ['a restrict_rows policy for write', 'wall'],
  ])('%s: the table itself reaches 10 rows', async (_w, who) => {
    if (who === 'wall') fx.store.policies = [OWN_WRITES];
    expect(await fx.write(who, ME, "UPDATE note SET body = 'x'")).toEqual({ rowCount: 10 });
  });
  it.each([
    ['wrows', "UPDATE note_v SET body = 'x'"],
    ['wrows', 'DELETE FROM note_v WHERE note_id > 30'],
    ['wrows', "INSERT INTO note_v VALUES (300, 2, 'a', 'x')"],
    ['wrows', "UPDATE note_bv SET body = 'x'"],
    ['wrows', "WITH d AS (DELETE FROM note_v RETURNING note_id) SELECT count(*) FROM d"],
    ['wall', "UPDATE note_v SET body = 'x'"],
    ['wall', 'DELETE FROM note_v WHERE note_id > 30'],
    ['wall', "INSERT INTO note_v VALUES (300, 2, 'a', 'x')"],
  ])('%s: %s → row_rule_unenforceable, nothing changed', async (who, sql) => {
    if (who === 'wall') fx.store.policies = [OWN_WRITES];
    expect(await fx.write(who, ME, sql)).toEqual({ code: 'row_rule_unenforceable' });
    expect(fx.lastAudit().row_rule_refusal).toMatch(/^a write through view public\.note_b?v, whose lineage reaches a row-ruled relation$/);
    await untouched();
  });
  it('a caller without row rules still writes through the view (every row)', async () => {
    expect(await fx.write('boss', undefined, "UPDATE note_v SET body = body || ''")).toEqual({ rowCount: 40 });
  });
  it('a partition written directly carries its parent\'s write rule (regions eu: ticket_us reaches none, ticket 10)', async () => {
    expect(await fx.write('wrows', ME, 'UPDATE ticket_us SET body = body')).toEqual({ rowCount: 0 });
    expect(await fx.write('wrows', ME, 'UPDATE ticket SET body = body')).toEqual({ rowCount: 10 });
    expect(await fx.write('wrows', ME, "INSERT INTO ticket_ap VALUES (900, 'ap', 'x')")).toEqual({ code: 'row_rule_violation' });
  });
});

describe('finding Z4 (high, fixed): a column allow without rows lifted the row rule of a write target for every column and whole-row writes', () => {
  // rt27 finding 3 made a column allow without `rows` free its own column only, for reads. A write
  // target's rules were still decided over no column (every covering allow counts), so a column
  // allow lifted the whole rule. Before the fix, as "colw" (write rows = own notes, plus
  // `allow write public.note.body` on every row): `UPDATE note SET owner_id = 9` changed all 40
  // notes, `DELETE FROM note WHERE note_id = 1` deleted owner 2's note, an INSERT of an owner-3 note
  // was written; as "colr" (read rows = own notes, plus `allow read public.note.body` on every row,
  // an unruled write allow): an INSERT of an owner-3 note was written and `UPDATE note SET body`
  // changed 40 notes. Fixed in src/pipeline/row-rules.ts: a target's read and write rules are those
  // of every column of the table (a written, inserted or deleted row is a whole row).
  const ME = { employee_id: 1 };
  beforeAll(() => {
    fx.grant('colw', [{ name: 'colw', statements: [
      { effect: 'allow', action: 'read', resource: 'public.note' },
      { effect: 'allow', action: 'write', resource: 'public.note', rows: 'owner_id = identity.employee_id' },
      { effect: 'allow', action: 'write', resource: 'public.note.body' },
    ] }]);
    fx.grant('colr', [{ name: 'colr', statements: [
      { effect: 'allow', action: 'read', resource: 'public.note', rows: 'owner_id = identity.employee_id' },
      { effect: 'allow', action: 'read', resource: 'public.note.body' },
      { effect: 'allow', action: 'write', resource: 'public.note' },
    ] }]);
  });
  beforeEach(async () => {
    await fx.admin(NOTES_RESET);
  });
  /** How many notes differ from the reset state (changed, added), and how many there are. */
  const state = async () => (await fx.admin<{ changed: number; n: number }>(`SELECT count(*) FILTER (WHERE body <> 'n' || note_id OR owner_id <> 1 + note_id % 4 OR note_id > 40)::int AS changed, count(*)::int AS n FROM note`))[0];
  it.each([
    ['colw', "UPDATE note SET body = 'x'", { rowCount: 10 }, { changed: 10, n: 40 }],
    ['colw', 'UPDATE note SET owner_id = 9 WHERE note_id = 1', { rowCount: 0 }, { changed: 0, n: 40 }],
    ['colw', 'UPDATE note SET owner_id = 9', { code: 'row_rule_violation' }, { changed: 0, n: 40 }],
    ['colw', 'DELETE FROM note WHERE note_id = 1', { rowCount: 0 }, { changed: 0, n: 40 }],
    ['colw', "INSERT INTO note VALUES (100, 3, 'a', 'x')", { code: 'row_rule_violation' }, { changed: 0, n: 40 }],
    ['colr', "UPDATE note SET body = 'x'", { rowCount: 10 }, { changed: 10, n: 40 }],
    ['colr', "UPDATE note SET body = 'x' WHERE note_id = 1", { rowCount: 0 }, { changed: 0, n: 40 }],
    ['colr', 'DELETE FROM note WHERE note_id = 1', { rowCount: 0 }, { changed: 0, n: 40 }],
    ['colr', "INSERT INTO note VALUES (100, 3, 'a', 'x')", { code: 'row_rule_violation' }, { changed: 0, n: 40 }],
    ['colr', 'INSERT INTO note SELECT note_id + 100, owner_id, tenant, body FROM note', { rowCount: 10 }, { changed: 10, n: 50 }],
  ])('%s: %s', async (who, sql, outcome, after) => {
    expect(await fx.write(who, ME, sql)).toEqual(outcome);
    expect(await state()).toEqual(after);
  });
  it("a foreign key's cascade into a table ruled for writes (with a free column allow) is refused, nothing deleted", async () => {
    fx.grant('colfk', [{ name: 'colfk', statements: [
      { effect: 'allow', action: '*', resource: 'public.proj' },
      { effect: 'allow', action: 'read', resource: 'public.task2' },
      { effect: 'allow', action: 'write', resource: 'public.task2', rows: 'owner_id = identity.employee_id' },
      { effect: 'allow', action: 'write', resource: 'public.task2.note' },
    ] }]);
    await fx.admin('TRUNCATE proj, task2; INSERT INTO proj VALUES (1), (2); INSERT INTO task2 SELECT g, 1 + g % 2, 1 + g % 4, NULL FROM generate_series(1, 20) g');
    expect(await fx.write('colfk', ME, 'DELETE FROM proj WHERE id = 1')).toEqual({ code: 'row_rule_unenforceable' });
    expect(fx.lastAudit().row_rule_refusal).toMatch(/^this write reaches rows of public\.task2, which is row-ruled for the caller, through a foreign key's/);
    expect(await fx.admin('SELECT (SELECT count(*) FROM proj)::int AS p, (SELECT count(*) FROM task2)::int AS t')).toEqual([{ p: 2, t: 20 }]);
  });
  it('reads keep the column semantics: colr reads body on every row, the other columns on its own rows', async () => {
    expect(rowsOf(await fx.call('colr', ME, 'SELECT count(body)::int AS n FROM note'))).toEqual([{ n: 40 }]);
    expect(rowsOf(await fx.call('colr', ME, 'SELECT count(owner_id)::int AS n FROM note'))).toEqual([{ n: 10 }]);
  });
});

describe('finding Z5 (medium, fixed): a row rule written on a view (a role allow\'s rows, a restrict_rows policy naming it) was ignored', () => {
  // A view over a ruled table was read through its copy with the base table's rule only: the rule
  // on the view itself was dropped (a policy's restriction too, though policies never widen), so
  // `SELECT … FROM note_v` showed the caller's 10 notes instead of the 5 its view rule permits. (A
  // view over an unruled table with its own rule was refused.) Fixed in src/pipeline/row-rules.ts: a
  // barrier view over the copy (or over the view read as is) filters the view's rows by its own rule.
  const ME = { employee_id: 1 };
  const OWN_NOTES = { effect: 'allow' as const, action: 'read' as const, resource: 'public.note', rows: 'owner_id = identity.employee_id' };
  const policy = (name: string, relation: string, rows: string): Policy => ({ name, applies_to: { roles: ['vpol'] }, rule: { type: 'restrict_rows', relations: [relation], rows } }) as unknown as Policy;
  beforeAll(async () => {
    await fx.admin(NOTES_RESET);
    fx.grant('vown', [{ name: 'vown', statements: [OWN_NOTES, { effect: 'allow', action: 'read', resource: 'public.note_v', rows: 'note_id > 20' }] }]);
    fx.grant('vpol', [{ name: 'vpol', statements: [OWN_NOTES, ...['note_v', 'employee', 'emp_v'].map((r) => ({ effect: 'allow' as const, action: 'read' as const, resource: `public.${r}` }))] }]);
    fx.grant('vwrite', [{ name: 'vwrite', statements: [{ effect: 'allow', action: '*', resource: 'public.note' }, { effect: 'allow', action: '*', resource: 'public.note_v', rows: 'note_id > 20' }] }]);
  });
  const noteIds = (o: ToolOutcome) => ids(rowsOf(o), 'note_id');
  it("a role allow's rows on a view over a ruled table: the view shows the rows both rules permit; the table keeps its own", async () => {
    expect(noteIds(await fx.call('vown', ME, 'SELECT note_id FROM note_v'))).toEqual([24, 28, 32, 36, 40]);
    expect(rowsOf(await fx.call('vown', ME, 'SELECT count(*)::int AS n FROM note'))).toEqual([{ n: 10 }]);
    expect(fx.lastAudit().row_rules).toEqual([{ relation: 'public.note', rule: expect.any(String) }]);
    expect(rowsOf(await fx.call('vown', ME, 'SELECT count(*)::int AS n FROM note_v'))).toEqual([{ n: 5 }]);
    expect((fx.lastAudit().row_rules as Array<{ relation: string }>).map((r) => r.relation)).toEqual(['public.note', 'public.note_v']);
  });
  it('a restrict_rows policy naming a view narrows it (over a ruled table, and over an unruled one read as is)', async () => {
    fx.store.policies = [policy('late-notes', 'public.note_v', 'note_id > 20'), policy('eu-staff', 'public.emp_v', "region = 'eu'")];
    expect(noteIds(await fx.call('vpol', ME, 'SELECT note_id FROM note_v'))).toEqual([24, 28, 32, 36, 40]);
    expect(ids(rowsOf(await fx.call('vpol', ME, 'SELECT employee_id FROM emp_v')), 'employee_id')).toEqual([3, 6]);
    expect(rowsOf(await fx.call('vpol', ME, 'SELECT count(*)::int AS n FROM employee'))).toEqual([{ n: 6 }]);
  });
  it('a wildcard rule meant for the tables (public.*) still reads a view over them that lacks its columns: the base rule holds', async () => {
    fx.grant('vstar', [{ name: 'vstar', statements: [{ effect: 'allow', action: 'read', resource: 'public.*', rows: 'owner_id = identity.employee_id' }] }]);
    expect(noteIds(await fx.call('vstar', ME, 'SELECT note_id FROM note_body'))).toEqual([4, 8, 12, 16, 20, 24, 28, 32, 36, 40]);
  });
  it('a write through a view with a rule of its own is refused (no check-option view restricts it), nothing changed', async () => {
    expect(await fx.write('vwrite', ME, "UPDATE note_v SET body = 'x'")).toEqual({ code: 'row_rule_unenforceable' });
    expect(fx.lastAudit().row_rule_refusal).toBe('a write through view public.note_v, which is row-ruled for the caller');
    expect(await fx.admin("SELECT count(*)::int AS n FROM note WHERE body = 'x'")).toEqual([{ n: 0 }]);
  });
});

describe('defence: the server evaluates no non-leakproof expression of the agent on a hidden row (EXPLAIN of the row view)', () => {
  // The gateway's read creates the row view; the same view read by the superuser with employee 1's
  // attribute shows where PostgreSQL puts each condition: a leakproof one (int4 =) may go below the
  // barrier (into the scan of customer), a leaky one (division, LIKE, a cast, a join condition) stays
  // above it (on the view's output). With 60 rows the planner scans the table rather than the index.
  let view = '';
  beforeAll(async () => {
    expect(rowsOf(await fx.call('rep', A, 'SELECT count(*)::int AS n FROM customer'))).toEqual([{ n: 8 }]);
    const names = await fx.admin<{ n: string }>("SELECT c.relname AS n FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = 'interlock_rows' AND c.relname LIKE 'customer\\_%'");
    expect(names).toHaveLength(1);
    view = `interlock_rows."${names[0].n}"`;
  });
  const plan = async (where: string, from = `${view} c`): Promise<string> => {
    await fx.admin("SELECT set_config('interlock.attr.employee_id', '1', false)");
    try {
      return (await fx.admin<{ 'QUERY PLAN': string }>(`EXPLAIN (COSTS OFF, VERBOSE) SELECT c.customer_id FROM ${from} WHERE ${where}`)).map((r) => r['QUERY PLAN']).join('\n');
    } finally {
      await fx.admin("SELECT set_config('interlock.attr.employee_id', '', false)");
    }
  };
  /** The text of the plan from the scan of the base table down (what runs on every row). */
  const belowBarrier = (p: string) => p.slice(p.search(/Scan on public\.customer/));
  it.each([
    ['a division', '1 / (c.customer_id - 7) > 0', '(1 / (c.customer_id - 7))', 'customer_id - 7'],
    ['LIKE (textlike is not leakproof)', "c.email LIKE 'c7@%'", "(c.email ~~ 'c7@%'::text)", '~~'],
    ['a cast to integer', 'c.credit::text::int > 0', '((c.credit)::text)::integer', 'credit)::text'],
    ['a CASE with a division', 'CASE WHEN c.customer_id > 0 THEN 1 / (c.customer_id - 7) ELSE 1 END = 1', '(1 / (c.customer_id - 7))', 'customer_id - 7'],
  ])('%s stays above the barrier', async (_w, where, above, notBelow) => {
    const p = await plan(where);
    expect(p).toContain('Subquery Scan on c');
    expect(p.slice(0, p.search(/Scan on public\.customer/))).toContain(above);
    expect(belowBarrier(p)).not.toContain(notBelow);
    // The rule itself is below: it is what the scan of customer filters on.
    expect(belowBarrier(p)).toContain("current_setting('interlock.attr.employee_id'::text, true)");
  });
  it('a join condition with a division is evaluated on the view output only', async () => {
    const p = await plan('true', `${view} c JOIN invoice i ON 1 / (c.customer_id - 7) = i.invoice_id`);
    expect(belowBarrier(p)).not.toContain('(customer_id - 7)');
    expect(p).toContain('(c.customer_id - 7)');
  });
  it('a leakproof equality may be pushed down (it cannot fail): it filters the scan of customer', async () => {
    expect(belowBarrier(await plan('c.customer_id = 6'))).toContain('(customer.customer_id = 6)');
  });
  it('a division by a constant zero fails when the statement is planned, whatever the rows (no row is probed)', async () => {
    await expect(plan('CASE WHEN c.customer_id = 7 THEN 1 / 0 ELSE 1 END = 1')).rejects.toThrow('division by zero');
    expect(codeOf(await fx.call('rep', A, 'SELECT customer_id FROM customer WHERE CASE WHEN customer_id = 6 THEN 1 / 0 ELSE 1 END = 1'))).toBe('statement_failed');
    expect(codeOf(await fx.call('rep', A, 'SELECT customer_id FROM customer WHERE CASE WHEN customer_id = 7 THEN 1 / 0 ELSE 1 END = 1'))).toBe('statement_failed');
  });
});

describe('defence: a column allow without rows frees its own column only, however the ruled columns are reached', () => {
  // Identity "mix": customers ruled by support rep (8 rows), plus public.customer.email on every row.
  // Customer 7 is hidden: none of these may tell that c7@x.test belongs to customer 7 or show its other columns.
  it.each([
    'SELECT email FROM customer NATURAL JOIN (VALUES (7)) v(customer_id)',
    'SELECT email FROM customer JOIN (VALUES (7)) v(customer_id) USING (customer_id)',
    "SELECT row_to_json(c)::text AS j FROM customer c WHERE email = 'c7@x.test'",
    "SELECT email FROM customer c WHERE c::text LIKE '(7,%'",
    'SELECT email FROM (SELECT email, customer_id AS k FROM customer) x WHERE x.k = 7',
    'SELECT email FROM customer WHERE EXISTS (SELECT 1 WHERE customer.customer_id = 7)',
    'SELECT email FROM customer GROUP BY email, customer_id HAVING customer_id = 7',
    "SELECT email FROM customer WHERE (customer_id, email) = (7, 'c7@x.test')",
    'SELECT email FROM customer c WHERE (c).customer_id = 7',
    "SELECT email FROM customer c WHERE to_jsonb(c)->>'customer_id' = '7'",
    'WITH x AS (SELECT * FROM customer) SELECT email FROM x WHERE customer_id = 7',
    'SELECT email FROM customer c, LATERAL (SELECT c.customer_id AS k) l WHERE l.k = 7',
    'SELECT email FROM customer WHERE CASE WHEN customer_id = 7 THEN true END',
    'SELECT email FROM customer c1 JOIN customer c2 USING (email) WHERE c2.customer_id = 7',
    'SELECT email FROM customer INTERSECT SELECT email FROM customer WHERE customer_id = 7',
  ])('%s → no row', async (sql) => {
    expect(rowsOf(await fx.call('mix', A, sql))).toEqual([]);
  });
  it.each([
    ['count(email) FILTER on a ruled column', 'SELECT count(email) FILTER (WHERE customer_id = 7)::int AS n FROM customer', [{ n: 0 }]],
    ['a scalar sub-select on a ruled column', 'SELECT (SELECT email FROM customer WHERE customer_id = 7) AS n', [{ n: null }]],
    ['a whole-row count', 'SELECT count(c)::int AS n FROM customer c', [{ n: 8 }]],
    ['the free column alone', 'SELECT count(email)::int AS n FROM customer', [{ n: 60 }]],
  ])('%s', async (_w, sql, rows) => {
    expect(rowsOf(await fx.call('mix', A, sql))).toEqual(rows);
  });
});

describe('defence: statistics, catalogue, session state and statement forms stay out of reach of a ruled caller', () => {
  it.each([
    ["SELECT reltuples::int AS n FROM pg_class WHERE relname = 'customer'", 'source_role_denied'],
    ["SELECT histogram_bounds::text AS h FROM pg_stats WHERE tablename = 'customer'", 'source_role_denied'],
    ['SELECT count(*) AS n FROM pg_stats_ext', 'source_role_denied'],
    ["SELECT definition FROM pg_views WHERE schemaname = 'interlock_rows'", 'source_role_denied'],
    ['SELECT query FROM pg_stat_activity', 'source_role_denied'],
    ['SELECT tableoid::int AS t FROM customer', 'source_role_denied'],
    ["SELECT count(*) AS n FROM ticket WHERE tableoid::regclass::text = 'ticket_eu'", 'function_not_allowed'],
    ["SET interlock.attr.employee_id = '2'", 'statement_not_allowed'],
    ["SET LOCAL interlock.attr.employee_id = '2'", 'statement_not_allowed'],
    ['RESET ALL', 'statement_not_allowed'],
    ['PREPARE p AS SELECT count(*) FROM customer', 'statement_not_allowed'],
    ['DECLARE c CURSOR FOR SELECT * FROM customer', 'statement_not_allowed'],
    ['SELECT * INTO leak_copy FROM customer', 'statement_not_allowed'],
    ['SELECT 1; SELECT count(*) FROM customer', 'statement_not_allowed'],
    ["SELECT * FROM json_populate_recordset(null::customer, '[{\"customer_id\": 7}]')", 'row_rule_unenforceable'],
    // EXPLAIN (row estimates) of anything reaching a ruled relation: through a view's copy, a sub-select, a partition, LATERAL.
    ['EXPLAIN SELECT * FROM cust_upper', 'row_rule_unenforceable'],
    ['EXPLAIN SELECT * FROM invoice WHERE customer_id IN (SELECT customer_id FROM customer)', 'row_rule_unenforceable'],
    ['EXPLAIN SELECT * FROM ticket_eu', 'row_rule_unenforceable'],
    ['EXPLAIN (FORMAT JSON) SELECT * FROM customer', 'row_rule_unenforceable'],
    ['EXPLAIN SELECT * FROM employee e JOIN LATERAL (SELECT count(*) FROM customer c WHERE c.support_rep_id = e.employee_id) x ON true', 'row_rule_unenforceable'],
    ['EXPLAIN (ANALYZE) SELECT * FROM invoice', 'statement_not_allowed'],
  ])('%s → %s', async (sql, code) => {
    expect(codeOf(await fx.call('rep', A, sql))).toBe(code);
  });
  it.each([
    ['VALUES with a sub-select', 'VALUES ((SELECT count(*)::int FROM customer))', [{ column1: 8 }]],
    ['an array constructor', 'SELECT ARRAY(SELECT customer_id FROM customer ORDER BY 1) AS a', [{ a: REP1_CUSTOMERS }]],
    ['GROUPING SETS', 'SELECT count(*)::int AS n FROM customer GROUP BY GROUPING SETS ((), (support_rep_id)) ORDER BY 1', [{ n: 8 }, { n: 8 }]],
    ['a window frame over every row', 'SELECT count(*) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)::int AS n FROM customer LIMIT 1', [{ n: 8 }]],
    ['OFFSET past the permitted rows', 'SELECT customer_id FROM customer ORDER BY customer_id OFFSET 8', []],
    ['a row comparison', 'SELECT count(*)::int AS n FROM customer WHERE (customer_id, support_rep_id) > (0, 0)', [{ n: 8 }]],
    ['ROWS FROM beside the table', 'SELECT count(*)::int AS n FROM ROWS FROM (generate_series(1, 2)) g, customer', [{ n: 16 }]],
    ['a partition read directly (region us permitted)', 'SELECT count(*)::int AS n FROM ticket_us', [{ n: 10 }]],
    ['a partition read directly (region eu hidden)', 'SELECT count(*)::int AS n FROM public.ticket_eu', [{ n: 0 }]],
    ['json_agg of whole rows', 'SELECT json_array_length(json_agg(c)) AS n FROM customer c', [{ n: 8 }]],
  ])('%s: permitted rows only', async (_w, sql, rows) => {
    expect(rowsOf(await fx.call('rep', A, sql))).toEqual(rows);
  });
});

describe('defence: the result cache follows attribute and policy changes at once', () => {
  const cachedOf = (o: ToolOutcome) => (o.kind === 'result' ? (o.structuredContent as { cached: boolean }).cached : null);
  const sql = 'SELECT customer_id FROM customer ORDER BY 1';
  it("one identity's attribute changed between two identical reads: the second read shows the new attribute's rows", async () => {
    fx.grant('cache', [REP_ROLE]);
    expect(ids(rowsOf(await fx.call('cache', { employee_id: 1 }, sql)))).toEqual(REP1_CUSTOMERS);
    const two = await fx.call('cache', { employee_id: 2 }, sql);
    expect(ids(rowsOf(two))).toEqual([1, 7, 13, 19, 25, 31, 37, 43, 49, 55]);
    expect(cachedOf(two)).toBe(false);
    expect(cachedOf(await fx.call('cache', { employee_id: 1 }, sql))).toBe(true);
  });
  it('a restrict_rows policy enabled after a cached read narrows the next read; disabled, the cached wider answer returns', async () => {
    fx.grant('cache2', [REP_ROLE]);
    expect(ids(rowsOf(await fx.call('cache2', A, sql)))).toEqual(REP1_CUSTOMERS);
    const de: Policy = { name: 'de-only', applies_to: { roles: ['rep'] }, rule: { type: 'restrict_rows', relations: ['public.customer'], rows: "country = 'DE'" } } as unknown as Policy;
    fx.store.policies = [de];
    expect(ids(rowsOf(await fx.call('cache2', A, sql)))).toEqual([12, 24, 36, 48]);
    fx.store.policies = [{ ...de, enabled: false } as Policy];
    expect(ids(rowsOf(await fx.call('cache2', A, sql)))).toEqual(REP1_CUSTOMERS);
  });
});

// ---------------------------------------------------------------------------------------------
// Discovery over a mapped table whose id is not unique (finding Z1).

describe('finding Z1 (high, fixed): discovery showed a hidden row\'s document to a caller permitted another row with the same asset id', () => {
  // The indexer makes one document per asset id (`<source>:<relation>/<id text, trimmed>`) and keeps
  // the first row it meets for an id it sees twice ("duplicate id: the first row was kept"). The row
  // filter then let a caller see the document of any asset id among its permitted rows' ids: with
  // `memo` mapped on a non-unique id (or ids equal once trimmed: 'm2' and 'm2 '), tenant a's row
  // unlocked tenant b's document (title and body) in interlock_discover and get_document. An agent
  // able to insert one row of its own (an approved write) with the id `'<victim id> '` could unlock
  // any hidden document whose id it knows. Fixed in src/tools/handlers/discover.ts (ambiguousIds):
  // ids that more than one row of the relation may share are shown to no ruled caller.
  let src: RowDiscoverySource;
  beforeAll(async () => {
    src = await startRowDiscoverySource(
      'rt27z_disc',
      `CREATE TABLE memo (id text NOT NULL, tenant text NOT NULL, title text, body text);
      INSERT INTO memo VALUES ('m1', 'b', 'b1 title', 'zebra secret one of b'), ('m1', 'a', 'a1 title', 'zebra note one of a');
      INSERT INTO memo VALUES ('m2', 'b', 'b2 title', 'zebra secret two of b'), ('m2 ', 'a', 'a2 title', 'zebra note two of a');
      INSERT INTO memo VALUES ('m3', 'a', 'a3 title', 'zebra note three of a'), ('m4', 'b', 'b4 title', 'zebra secret four of b');`,
      ['memo'],
    );
    // The indexer kept b's rows for m1 and m2 (they sort first), and reported the duplicates.
    expect(src.indexed.problems.map((p) => p.item).sort()).toEqual(['hr:public.memo/m1', 'hr:public.memo/m2']);
  }, 60_000);
  afterAll(async () => src?.close());

  const RULED: RoleStatement[] = [
    { effect: 'allow', action: 'discover', resource: '*' },
    { effect: 'allow', action: 'request', resource: '*' },
    { effect: 'allow', action: 'read', resource: 'public.memo', rows: 'tenant = identity.tenant' },
  ];
  /** interlock_discover's hits (asset id → title) and get_document's outcome (the title or the code) for one identity. */
  async function caller(tenant: string | undefined, statements: RoleStatement[] = RULED) {
    const { record, role, deps, ctx } = await src.caller(tenant ? { tenant } : undefined, statements);
    return {
      discover: async () => {
        const o: ToolOutcome = await discoverHandler(deps)({ source_id: 'hr', query: 'zebra', limit: 50 }, ctx());
        if (o.kind !== 'result') throw new Error(JSON.stringify(o));
        return Object.fromEntries((o.structuredContent!.hits as Array<{ asset_id: string; title: string }>).map((h) => [h.asset_id, h.title]));
      },
      get: async (assetId: string) => {
        const o = await documentsConnectorRequest(deps)(record, { operation: 'get_document', asset_id: assetId }, ctx(), new AccessEvaluator([{ sourceId: 'hr', role }]));
        return o.kind === 'result' ? (o.structuredContent as { title: string }).title : (o as { code: string }).code;
      },
    };
  }

  it("tenant a sees only its unambiguous document; neither b's m1 (same id) nor b's m2 (same id once trimmed)", async () => {
    const a = await caller('a');
    expect(await a.discover()).toEqual({ 'hr:public.memo/m3': 'a3 title' });
    expect(await a.get('hr:public.memo/m1')).toBe('unknown_asset');
    expect(await a.get('hr:public.memo/m2')).toBe('unknown_asset');
    expect(await a.get('hr:public.memo/m3')).toBe('a3 title');
  });
  it('tenant b, whose rows the ambiguous documents hold, is not shown them either (which row a document holds is not known): only m4', async () => {
    expect(await (await caller('b')).discover()).toEqual({ 'hr:public.memo/m4': 'b4 title' });
  });
  it("a row added after indexing whose trimmed id equals a hidden document's id does not unlock it (the source decides now)", async () => {
    await src.su.query("INSERT INTO memo VALUES ('m4 ', 'a', 'a4 title', 'zebra planted by a')");
    try {
      const a = await caller('a');
      expect(await a.discover()).toEqual({ 'hr:public.memo/m3': 'a3 title' });
      expect(await a.get('hr:public.memo/m4')).toBe('unknown_asset');
    } finally {
      await src.su.query("DELETE FROM memo WHERE id = 'm4 '");
    }
  });
  it('a caller without row rules on memo is not affected (it sees every indexed document)', async () => {
    const plain = RULED.map((s) => (s.action === 'read' ? { effect: 'allow' as const, action: 'read' as const, resource: 'public.memo' } : s));
    expect(Object.keys(await (await caller(undefined, plain)).discover()).sort()).toEqual(['hr:public.memo/m1', 'hr:public.memo/m2', 'hr:public.memo/m3', 'hr:public.memo/m4']);
  });
});
