/**
 * Relation, column and function resolution, write targets and output lineage on the Chinook-shaped
 * catalogue (fixtures/pg15-chinook-catalog.json plus the extra relations in helpers.ts).
 */
import { analyzeSql, filterColumns, initSqlParser, prepareCatalog } from '../../../src/sql/analyze';
import type { SourceCatalog } from '../../../src/sql/catalog-types';
import { CATALOG, lineage, ok, PG_CATALOG, readMap, refs, refused } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

const ALL_CUSTOMER = [
  'customer_id', 'first_name', 'last_name', 'company', 'address', 'city', 'state', 'country', 'postal_code', 'phone', 'fax', 'email', 'support_rep_id',
];
const ALL_CUSTOMER_REFS = ALL_CUSTOMER.map((c) => `customer.${c}`).sort().join(',');

interface Case {
  sql: string;
  reads: Record<string, string[]>;
  out: string[];
  filter?: string[];
}

const CASES: Case[] = [
  // aliases and passthrough
  { sql: 'SELECT email AS mail FROM customer', reads: { customer: ['email'] }, out: ['mail: [customer.email] pass'] },
  { sql: 'SELECT c.email FROM customer AS c', reads: { customer: ['email'] }, out: ['email: [customer.email] pass'] },
  { sql: 'SELECT x.m FROM customer AS x(id, f, m)', reads: { customer: ['last_name'] }, out: ['m: [customer.last_name] pass'] },
  { sql: 'SELECT public.customer.email FROM customer', reads: { customer: ['email'] }, out: ['email: [customer.email] pass'] },
  { sql: 'SELECT email COLLATE "C" FROM customer', reads: { customer: ['email'] }, out: ['email: [customer.email] pass'] },
  { sql: 'SELECT (c).email FROM customer c', reads: { customer: ['email'] }, out: ['email: [customer.email] pass'] },
  // CTEs and their scopes
  { sql: 'WITH x AS (SELECT email AS e FROM customer) SELECT e FROM x', reads: { customer: ['email'] }, out: ['e: [customer.email] pass'] },
  { sql: 'WITH x(m) AS (SELECT email FROM customer) SELECT x.m FROM x', reads: { customer: ['email'] }, out: ['m: [customer.email] pass'] },
  { sql: 'WITH customer AS (SELECT 1 AS email) SELECT email FROM customer', reads: {}, out: ['email: [] derived'] },
  {
    sql: 'SELECT (WITH customer AS (SELECT 1 AS email) SELECT email FROM customer), email FROM customer',
    reads: { customer: ['email'] },
    out: ['email: [] derived', 'email: [customer.email] pass'],
  },
  { sql: 'WITH t AS (SELECT a + 1 AS a FROM t) SELECT a FROM t', reads: { t: ['a'] }, out: ['a: [t.a] derived'] },
  {
    sql: 'WITH a AS (SELECT 1 AS x) SELECT * FROM (WITH a AS (SELECT email FROM customer) SELECT * FROM a) s, a',
    reads: { customer: ['email'] },
    out: ['email: [customer.email] pass', 'x: [] derived'],
  },
  { sql: 'WITH RECURSIVE a AS (SELECT * FROM b), b AS (SELECT email FROM customer) SELECT * FROM a', reads: { customer: ['email'] }, out: ['email: [customer.email] pass'] },
  {
    sql: 'WITH RECURSIVE r(n, m) AS (SELECT a, b FROM t UNION ALL SELECT n + 1, m FROM r WHERE n < 3) SELECT * FROM r',
    reads: { t: ['a', 'b'] },
    out: ['n: [t.a] derived', 'm: [t.b] pass'],
    filter: ['t.a'],
  },
  {
    sql: 'WITH RECURSIVE r AS (SELECT employee_id, email FROM employee UNION ALL SELECT e.employee_id, r.email FROM employee e JOIN r ON e.reports_to = r.employee_id) SELECT * FROM r',
    reads: { employee: ['employee_id', 'reports_to', 'email'] },
    out: ['employee_id: [employee.employee_id] pass', 'email: [employee.email] pass'],
    filter: ['employee.employee_id', 'employee.reports_to'],
  },
  {
    sql: 'WITH RECURSIVE r(x) AS (SELECT first_name FROM customer UNION SELECT r.x || c.email FROM r, customer c) SELECT x FROM r',
    reads: { customer: ['first_name', 'email'] },
    out: ['x: [customer.email,customer.first_name] derived'],
  },
  // correlated sub-selects
  {
    sql: 'SELECT (SELECT c.email FROM customer c WHERE c.customer_id = i.customer_id) AS mail FROM invoice i',
    reads: { invoice: ['customer_id'], customer: ['customer_id', 'email'] },
    // the sub-select's WHERE decides the value too: derived from it (rt-leak-view-sublinks)
    out: ['mail: [customer.customer_id,customer.email,invoice.customer_id] derived'],
    filter: ['customer.customer_id', 'invoice.customer_id'],
  },
  {
    sql: 'SELECT first_name FROM customer c WHERE EXISTS (SELECT 1 FROM invoice i WHERE i.customer_id = c.customer_id AND i.total > 10)',
    reads: { customer: ['customer_id', 'first_name'], invoice: ['customer_id', 'total'] },
    out: ['first_name: [customer.first_name] pass'],
    filter: ['customer.customer_id', 'invoice.customer_id', 'invoice.total'],
  },
  { sql: 'SELECT a FROM t t1 WHERE a IN (SELECT a FROM t WHERE t.b = t1.b)', reads: { t: ['a', 'b'] }, out: ['a: [t.a] pass'], filter: ['t.a', 't.b'] },
  {
    sql: 'SELECT (SELECT max(total) FROM invoice WHERE invoice.customer_id = customer.customer_id) FROM customer',
    reads: { invoice: ['customer_id', 'total'], customer: ['customer_id'] },
    out: ['max: [customer.customer_id,invoice.customer_id,invoice.total] derived'],
  },
  // LATERAL
  { sql: 'SELECT l.x FROM customer c, LATERAL (SELECT c.email AS x) l', reads: { customer: ['email'] }, out: ['x: [customer.email] pass'] },
  {
    sql: 'SELECT c.first_name, x.total FROM customer c LEFT JOIN LATERAL (SELECT total FROM invoice i WHERE i.customer_id = c.customer_id LIMIT 1) x ON true',
    reads: { customer: ['customer_id', 'first_name'], invoice: ['customer_id', 'total'] },
    // a correlated LATERAL sub-select's outputs carry its WHERE too (as a scalar sub-select's do)
    out: ['first_name: [customer.first_name] pass', 'total: [customer.customer_id,invoice.customer_id,invoice.total] derived'],
  },
  // stars
  { sql: 'SELECT * FROM t', reads: { t: ['a', 'b'] }, out: ['a: [t.a] pass', 'b: [t.b] pass'] },
  { sql: 'TABLE t', reads: { t: ['a', 'b'] }, out: ['a: [t.a] pass', 'b: [t.b] pass'] },
  { sql: 'SELECT x.*, t.a FROM t, s.t x', reads: { t: ['a'], 's.t': ['x', 'y'] }, out: ['x: [s.t.x] pass', 'y: [s.t.y] pass', 'a: [t.a] pass'] },
  { sql: 'SELECT c.* FROM customer c', reads: { customer: ALL_CUSTOMER }, out: ALL_CUSTOMER.map((c) => `${c}: [customer.${c}] pass`) },
  // USING / NATURAL
  {
    sql: 'SELECT * FROM artist NATURAL JOIN album',
    reads: { artist: ['artist_id', 'name'], album: ['album_id', 'title', 'artist_id'] },
    out: ['artist_id: [album.artist_id,artist.artist_id] derived', 'name: [artist.name] pass', 'album_id: [album.album_id] pass', 'title: [album.title] pass'],
    filter: ['album.artist_id', 'artist.artist_id'],
  },
  {
    sql: 'SELECT artist_id, name, title FROM artist JOIN album USING (artist_id)',
    reads: { artist: ['artist_id', 'name'], album: ['title', 'artist_id'] },
    out: ['artist_id: [album.artist_id,artist.artist_id] derived', 'name: [artist.name] pass', 'title: [album.title] pass'],
  },
  { sql: 'SELECT j.artist_id FROM (artist JOIN album USING (artist_id)) j', reads: { artist: ['artist_id'], album: ['artist_id'] }, out: ['artist_id: [album.artist_id,artist.artist_id] derived'] },
  { sql: 'SELECT x.artist_id FROM artist JOIN album USING (artist_id) AS x', reads: { artist: ['artist_id'], album: ['artist_id'] }, out: ['artist_id: [album.artist_id,artist.artist_id] derived'] },
  { sql: 'SELECT a.artist_id FROM artist a JOIN artist b USING (artist_id)', reads: { artist: ['artist_id'] }, out: ['artist_id: [artist.artist_id] pass'] },
  // set operations
  { sql: 'SELECT email FROM customer UNION SELECT email FROM employee', reads: { customer: ['email'], employee: ['email'] }, out: ['email: [customer.email,employee.email] derived'] },
  { sql: 'SELECT email FROM customer UNION ALL SELECT email FROM customer', reads: { customer: ['email'] }, out: ['email: [customer.email] pass'] },
  {
    sql: 'SELECT email, 1 FROM customer EXCEPT SELECT first_name, 2 FROM customer ORDER BY 1',
    reads: { customer: ['first_name', 'email'] },
    out: ['email: [customer.email,customer.first_name] derived', '?column?: [] derived'],
    filter: ['customer.email', 'customer.first_name'],
  },
  // expressions, aggregates, windows
  {
    sql: "SELECT upper(email), count(email), max(email), email::text, email || '' FROM customer",
    reads: { customer: ['email'] },
    out: ['upper: [customer.email] derived', 'count: [customer.email] derived', 'max: [customer.email] derived', 'email: [customer.email] derived', '?column?: [customer.email] derived'],
  },
  { sql: 'SELECT row_number() OVER (ORDER BY email), first_name FROM customer', reads: { customer: ['first_name', 'email'] }, out: ['row_number: [customer.email] derived', 'first_name: [customer.first_name] pass'] },
  {
    sql: 'SELECT sum(total) OVER w FROM invoice WINDOW w AS (PARTITION BY billing_country ORDER BY invoice_date)',
    reads: { invoice: ['invoice_date', 'billing_country', 'total'] },
    out: ['sum: [invoice.billing_country,invoice.invoice_date,invoice.total] derived'],
  },
  { sql: "SELECT CASE WHEN country = 'x' THEN email END FROM customer", reads: { customer: ['country', 'email'] }, out: ['case: [customer.country,customer.email] derived'] },
  { sql: 'SELECT count(DISTINCT email) FILTER (WHERE country = \'x\') FROM customer', reads: { customer: ['country', 'email'] }, out: ['count: [customer.country,customer.email] derived'] },
  { sql: 'SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY email) FROM customer', reads: { customer: ['email'] }, out: ['percentile_disc: [customer.email] derived'] },
  { sql: "SELECT coalesce(company, email, 'n/a') FROM customer", reads: { customer: ['company', 'email'] }, out: ['coalesce: [customer.company,customer.email] derived'] },
  { sql: 'SELECT ARRAY(SELECT email FROM customer)', reads: { customer: ['email'] }, out: ['array: [customer.email] derived'] },
  { sql: 'SELECT count(*) FROM t', reads: { t: [] }, out: ['count: [] derived'] },
  // whole rows and constructors
  { sql: 'SELECT c FROM customer c', reads: { customer: ALL_CUSTOMER }, out: [`c: [${ALL_CUSTOMER_REFS}] derived opaque:customer`] },
  { sql: 'SELECT to_json(c.*) FROM customer c', reads: { customer: ALL_CUSTOMER }, out: [`to_json: [${ALL_CUSTOMER_REFS}] derived opaque:customer`] },
  { sql: 'SELECT row_to_json(t) FROM t', reads: { t: ['a', 'b'] }, out: ['row_to_json: [t.a,t.b] derived opaque:t'] },
  { sql: 'SELECT s FROM (SELECT email, first_name FROM customer) s', reads: { customer: ['first_name', 'email'] }, out: ['s: [customer.email,customer.first_name] derived opaque:customer'] },
  { sql: 'SELECT array_agg(s) FROM (SELECT email FROM customer) s', reads: { customer: ['email'] }, out: ['array_agg: [customer.email] derived opaque:customer'] },
  { sql: 'SELECT ROW(email, first_name) FROM customer', reads: { customer: ['first_name', 'email'] }, out: ['row: [customer.email,customer.first_name] derived'] },
  { sql: "SELECT json_build_object('e', email) FROM customer", reads: { customer: ['email'] }, out: ['json_build_object: [customer.email] derived'] },
  // filters: WHERE/ORDER/GROUP/DISTINCT ON/LIMIT are reads but not lineage
  { sql: "SELECT first_name FROM customer WHERE email = 'x' ORDER BY last_name", reads: { customer: ['first_name', 'last_name', 'email'] }, out: ['first_name: [customer.first_name] pass'], filter: ['customer.email', 'customer.last_name'] },
  { sql: 'SELECT a AS x FROM t ORDER BY x', reads: { t: ['a'] }, out: ['x: [t.a] pass'], filter: ['t.a'] },
  { sql: 'SELECT b AS a FROM t GROUP BY a', reads: { t: ['a', 'b'] }, out: ['a: [t.b] pass'], filter: ['t.a'] },
  { sql: 'SELECT b AS x FROM t GROUP BY x', reads: { t: ['b'] }, out: ['x: [t.b] pass'], filter: ['t.b'] },
  { sql: 'SELECT DISTINCT ON (country) email FROM customer', reads: { customer: ['country', 'email'] }, out: ['email: [customer.email] pass'], filter: ['customer.country'] },
  { sql: 'SELECT sum(total) FROM invoice GROUP BY ROLLUP (billing_country)', reads: { invoice: ['billing_country', 'total'] }, out: ['sum: [invoice.total] derived'], filter: ['invoice.billing_country'] },
  { sql: "SELECT email FROM customer LIMIT (SELECT count(*) FROM employee WHERE title = 'x')", reads: { customer: ['email'], employee: ['title'] }, out: ['email: [customer.email] pass'], filter: ['employee.title'] },
  { sql: 'SELECT count(*) FROM invoice HAVING sum(total) > 1', reads: { invoice: ['total'] }, out: ['count: [] derived'], filter: ['invoice.total'] },
  // functions in FROM, VALUES
  { sql: 'SELECT x FROM generate_series(1, 3) x', reads: {}, out: ['x: [] derived'] },
  { sql: 'SELECT * FROM unnest(ARRAY[1,2]) WITH ORDINALITY AS u(v, n)', reads: {}, out: ['v: [] derived', 'n: [] derived'] },
  {
    sql: "SELECT * FROM jsonb_each(jsonb_build_object('e', (SELECT email FROM customer LIMIT 1)))",
    reads: { customer: ['email'] },
    out: ['key: [customer.email] derived', 'value: [customer.email] derived'],
  },
  { sql: "SELECT column2 FROM (VALUES (1, 'a')) v", reads: {}, out: ['column2: [] derived'] },
  { sql: 'SELECT v.x FROM (VALUES (1), (2)) v(x)', reads: {}, out: ['x: [] derived'] },
  // quoting and case
  { sql: 'SELECT "Id", "MixedCase".id FROM "MixedCase"', reads: { MixedCase: ['Id', 'id'] }, out: ['Id: [MixedCase.Id] pass', 'id: [MixedCase.id] pass'] },
  { sql: 'SELECT Id FROM "MixedCase"', reads: { MixedCase: ['id'] }, out: ['id: [MixedCase.id] pass'] },
  { sql: 'SELECT "x" FROM "s"."t"', reads: { 's.t': ['x'] }, out: ['x: [s.t.x] pass'] },
  // views are relations like tables
  { sql: 'SELECT email FROM customer_view', reads: { customer_view: ['email'] }, out: ['email: [customer.email,customer_view.email] pass'] },
  // EXPLAIN
  { sql: 'EXPLAIN SELECT email FROM customer WHERE country = \'x\'', reads: { customer: ['country', 'email'] }, out: ['QUERY PLAN: [] derived'], filter: ['customer.country'] },
];

describe('relation/column resolution and lineage', () => {
  test.each(CASES.map((c) => [c.sql, c] as const))('%s', (_sql, c) => {
    const r = ok(c.sql);
    expect(readMap(r)).toEqual(c.reads);
    expect(lineage(r)).toEqual(c.out);
    if (c.filter) expect(refs(r.filterSources)).toEqual(c.filter.slice().sort());
  });
});

describe('refusals for unknown names', () => {
  test.each([
    ['SELECT * FROM nosuch', 'unknown_relation'],
    ['SELECT * FROM public.nosuch', 'unknown_relation'],
    ['SELECT * FROM only_in_s', 'unknown_relation'], // schema s is not on the search path
    ['SELECT * FROM mixedcase', 'unknown_relation'], // "MixedCase" needs quotes
    ['SELECT * FROM pg_class', 'unknown_relation'],
    ['SELECT * FROM pg_catalog.pg_authid', 'unknown_relation'],
    ['SELECT * FROM information_schema.tables', 'unknown_relation'],
    ['SELECT * FROM pg_toast.pg_toast_1', 'unknown_relation'],
    ['SELECT * FROM otherdb.public.t', 'unknown_relation'],
    ['SELECT nosuch FROM t', 'unknown_column'],
    ['SELECT t.nosuch FROM t', 'unknown_column'],
    ['SELECT ctid FROM t', 'unknown_column'],
    ['SELECT xmin, * FROM t', 'unknown_column'],
    ['SELECT x.a FROM t', 'unknown_column'],
    ['SELECT s.x FROM s.t', 'unknown_column'], // the FROM item is called t, not s
    ['SELECT email FROM customer c WHERE customer.customer_id = 1', 'unknown_column'], // aliased: the table name is hidden
    ['SELECT artist.name FROM (artist JOIN album USING (artist_id)) j', 'unknown_column'], // join alias hides inner names
    ['SELECT * FROM t, (SELECT a) s', 'unknown_column'], // a non-LATERAL sub-select cannot see its siblings
    ['SELECT 1 FROM t, customer c JOIN invoice i ON i.customer_id = t.a', 'unknown_column'], // ON sees only its join
    ['SELECT * FROM (WITH x AS (SELECT 1) SELECT * FROM x) s, x', 'unknown_relation'], // CTE scope ends with its query
    ['WITH x AS (SELECT * FROM x) SELECT 1', 'unknown_relation'], // a non-recursive CTE does not see itself
    ['SELECT c.sidefx FROM customer c', 'unknown_column'], // functional notation is not a column
    ['SELECT email(c) FROM customer c', 'function_not_allowed'],
    ['INSERT INTO nosuch VALUES (1)', 'unknown_relation'],
    ['INSERT INTO t (nosuch) VALUES (1)', 'unknown_column'],
    ['UPDATE t SET nosuch = 1', 'unknown_column'],
    ['WITH x AS (SELECT 1 AS a) INSERT INTO x VALUES (1)', 'unknown_relation'], // CTEs are never write targets
    ['SELECT * FROM t JOIN customer USING (nosuch)', 'unknown_column'],
    ['DELETE FROM pg_catalog.pg_class', 'unknown_relation'],
    ["UPDATE pg_authid SET rolsuper = true", 'unknown_relation'],
    ['INSERT INTO information_schema.sql_features VALUES (1)', 'unknown_relation'],
  ] as const)('%s → %s', (sql, code) => {
    expect(refused(sql).code).toBe(code);
  });

  test('messages name the construct without echoing long input', () => {
    const long = 'x'.repeat(300);
    const r = refused(`SELECT * FROM ${long}`);
    expect(r.message.length).toBeLessThan(120);
    expect(r.message).toContain('unknown relation');
  });
});

describe('system relations shadowing and the search path', () => {
  const base: SourceCatalog = { ...PG_CATALOG, relations: [] };
  const rel = (schema: string, name: string, cols: string[]) => ({ schema, name, kind: 'table' as const, columns: cols.map((c) => ({ name: c, dataType: 'text' })) });

  test('an unqualified name that exists in pg_catalog is refused even if public has it', () => {
    const cat = { ...base, relations: [rel('public', 'pg_class', ['x'])] };
    expect(refused('SELECT x FROM pg_class', cat).code).toBe('unknown_relation');
    expect(readMap(ok('SELECT x FROM public.pg_class', cat))).toEqual({ pg_class: ['x'] });
  });

  test('without a system relation list, unqualified pg_* names are refused (fail closed)', () => {
    const cat: SourceCatalog = { relations: [rel('public', 'pg_thing', ['x'])], functions: [], searchPath: ['public'], scannedAt: '', truncated: false };
    expect(refused('SELECT x FROM pg_thing', cat).code).toBe('unknown_relation');
    expect(ok('SELECT x FROM public.pg_thing', cat).reads).toEqual([{ schema: 'public', table: 'pg_thing', columns: ['x'] }]);
  });

  test('the first schema on the search path wins', () => {
    const cat = { ...base, searchPath: ['app', 'public'], relations: [rel('public', 'u', ['p']), rel('app', 'u', ['q'])] };
    expect(ok('SELECT * FROM u', cat).reads).toEqual([{ schema: 'app', table: 'u', columns: ['q'] }]);
    expect(refused('SELECT p FROM u', cat).code).toBe('unknown_column');
  });
});

describe('functions and operators', () => {
  const withFns = (extra: SourceCatalog['functions'], ops?: SourceCatalog['operators']): SourceCatalog => ({
    ...CATALOG,
    functions: [...CATALOG.functions, ...extra],
    operators: ops ? [...(CATALOG.operators ?? []), ...ops] : CATALOG.operators,
  });

  test('functions are listed with their schema and volatility', () => {
    expect(ok('SELECT lower(b), now(), count(*) FROM t').functions).toEqual([
      { schema: 'pg_catalog', name: 'lower', volatility: 'immutable' },
      { schema: 'pg_catalog', name: 'now', volatility: 'stable' },
      { schema: 'pg_catalog', name: 'count', volatility: 'immutable' },
    ]);
  });

  test('a volatile same-named function anywhere on the path is refused (PostgreSQL may pick it)', () => {
    const cat = withFns([{ schema: 'public', name: 'lower', volatility: 'volatile', returnsSet: false }]);
    expect(refused('SELECT lower(1)', cat)).toMatchObject({ code: 'function_not_allowed' });
    expect(refused('SELECT lower(b) FROM t', cat).message).toContain('volatile');
    // explicitly qualified to pg_catalog it is the built-in only
    expect(ok('SELECT pg_catalog.lower(b) FROM t', cat).functions).toEqual([{ schema: 'pg_catalog', name: 'lower', volatility: 'immutable' }]);
  });

  test('user functions: stable ones are allowed and listed, not cacheable; volatile ones refused', () => {
    const cat = withFns([
      { schema: 'public', name: 'fmt_name', volatility: 'stable', returnsSet: false },
      { schema: 'app', name: 'hidden', volatility: 'immutable', returnsSet: false },
    ]);
    const r = ok('SELECT fmt_name(first_name) FROM customer', cat);
    expect(r.functions).toEqual([{ schema: 'public', name: 'fmt_name', volatility: 'stable' }]);
    expect(r.cacheable).toBe(false);
    expect(refused('SELECT hidden(1)', cat).code).toBe('function_not_allowed'); // schema app not on the path
    expect(ok('SELECT app.hidden(1)', cat).functions).toEqual([{ schema: 'app', name: 'hidden', volatility: 'immutable' }]);
    expect(refused('SELECT sidefx()', cat).code).toBe('function_not_allowed');
    expect(refused('SELECT public.sidefx()', cat).code).toBe('function_not_allowed');
  });

  test('deny-listed names are refused in any schema, even when marked immutable', () => {
    const cat = withFns([{ schema: 'public', name: 'dblink', volatility: 'immutable', returnsSet: true }, { schema: 'public', name: 'pg_sleep', volatility: 'immutable', returnsSet: false }]);
    expect(refused("SELECT * FROM dblink('x', 'y') AS d(a int)", cat).code).toBe('function_not_allowed');
    expect(refused('SELECT public.pg_sleep(1)', cat).code).toBe('function_not_allowed');
  });

  test('operators: volatile or unknown operators are refused when the catalogue lists operators', () => {
    const cat = withFns([], [{ schema: 'public', name: '===', volatility: 'volatile' }, { schema: 'public', name: '~~~', volatility: 'immutable' }]);
    expect(refused('SELECT 1 === 1', cat).code).toBe('function_not_allowed');
    expect(refused('SELECT a FROM t ORDER BY a USING ===', cat).code).toBe('function_not_allowed');
    expect(refused('SELECT 1 WHERE 1 === ANY (ARRAY[1])', cat).code).toBe('function_not_allowed');
    expect(refused('SELECT 1 <<<>>> 1', cat).code).toBe('function_not_allowed');
    expect(ok('SELECT 1 ~~~ 1', cat).kind).toBe('read');
    expect(ok('SELECT 1 OPERATOR(pg_catalog.+) 1', cat).kind).toBe('read');
    // a catalogue without an operator list does not check operators
    const noOps: SourceCatalog = { ...CATALOG, operators: undefined };
    expect(ok('SELECT 1 <<<>>> 1', noOps).kind).toBe('read');
  });

  test('unknown, three-part and malformed function names are refused', () => {
    expect(refused('SELECT nosuch(1)').code).toBe('function_not_allowed');
    expect(refused('SELECT db.pg_catalog.lower(b) FROM t').code).toBe('function_not_allowed');
    expect(refused('SELECT nosuchschema.lower(b) FROM t').code).toBe('function_not_allowed');
  });

  test('TABLESAMPLE: only BERNOULLI/SYSTEM, and not repeatable means not cacheable', () => {
    expect(ok('SELECT a FROM t TABLESAMPLE SYSTEM (10)').cacheable).toBe(false);
    expect(ok('SELECT a FROM t TABLESAMPLE SYSTEM (10) REPEATABLE (1)').cacheable).toBe(true);
    expect(refused('SELECT a FROM t TABLESAMPLE system_rows (10)').code).toBe('function_not_allowed');
  });
});

describe('casts to types that run user code', () => {
  const cat: SourceCatalog = { ...CATALOG, unsafeTypes: [{ schema: 'public', name: 'checked_dom' }, { schema: 'app', name: 'elsewhere' }] };

  test.each([
    'SELECT 1::checked_dom',
    'SELECT CAST(1 AS public.checked_dom)',
    "SELECT '{1}'::checked_dom[]",
    'SELECT a::checked_dom FROM t',
    "SELECT * FROM json_to_record('{}') AS x(a checked_dom)",
    'SELECT * FROM t WHERE a = 1::checked_dom',
    "SELECT app.elsewhere 'x'",
  ])('%s is refused', (sql) => {
    expect(refused(sql, cat).code).toBe('function_not_allowed');
  });

  test('other casts are fine, including a same-named type in a schema off the path', () => {
    for (const sql of ['SELECT 1::int', "SELECT 'x'::text", 'SELECT 1::elsewhere', "SELECT '1'::pg_catalog.int8"]) {
      const r = analyzeSql(sql, cat);
      expect([sql, r.ok ? 'ok' : r.code]).toEqual([sql, 'ok']);
    }
  });
});

describe('parameters', () => {
  test('$n above the protocol limit is refused', () => {
    expect(ok('SELECT $65535::int').paramCount).toBe(65535);
    expect(refused('SELECT $65536::int')).toMatchObject({ code: 'invalid_sql' });
  });
});

describe('writes', () => {
  test.each([
    ["INSERT INTO t VALUES (1, 'x')", [{ schema: 'public', table: 't', operation: 'insert', columns: ['a', 'b'], hasWhere: false }], {}],
    ['INSERT INTO t (b) SELECT email FROM customer', [{ schema: 'public', table: 't', operation: 'insert', columns: ['b'], hasWhere: false }], { customer: ['email'] }],
    [
      "INSERT INTO t AS x VALUES (1, 'x') ON CONFLICT (a) DO UPDATE SET b = excluded.b || x.b WHERE x.a > 0",
      [
        { schema: 'public', table: 't', operation: 'insert', columns: ['a', 'b'], hasWhere: false },
        { schema: 'public', table: 't', operation: 'update', columns: ['b'], hasWhere: true },
      ],
      { t: ['a', 'b'] },
    ],
    ["INSERT INTO t VALUES (1, 'x') ON CONFLICT DO NOTHING", [{ schema: 'public', table: 't', operation: 'insert', columns: ['a', 'b'], hasWhere: false }], {}],
    ['UPDATE t SET b = c.email FROM customer c WHERE c.customer_id = t.a', [{ schema: 'public', table: 't', operation: 'update', columns: ['b'], hasWhere: true }], { t: ['a'], customer: ['customer_id', 'email'] }],
    ['UPDATE t SET (a, b) = (SELECT customer_id, email FROM customer LIMIT 1)', [{ schema: 'public', table: 't', operation: 'update', columns: ['a', 'b'], hasWhere: false }], { customer: ['customer_id', 'email'] }],
    ['DELETE FROM t', [{ schema: 'public', table: 't', operation: 'delete', columns: ['a', 'b'], hasWhere: false }], {}],
    ['DELETE FROM t USING customer c WHERE c.customer_id = t.a', [{ schema: 'public', table: 't', operation: 'delete', columns: ['a', 'b'], hasWhere: true }], { t: ['a'], customer: ['customer_id'] }],
    [
      'MERGE INTO t USING customer c ON t.a = c.customer_id WHEN MATCHED THEN UPDATE SET b = c.email WHEN NOT MATCHED THEN INSERT (a) VALUES (c.customer_id)',
      [{ schema: 'public', table: 't', operation: 'merge', columns: ['a', 'b'], hasWhere: true }],
      { t: ['a'], customer: ['customer_id', 'email'] },
    ],
    ['WITH d AS (DELETE FROM s.t WHERE x = 1 RETURNING y) SELECT * FROM d', [{ schema: 's', table: 't', operation: 'delete', columns: ['x', 'y'], hasWhere: true }], { 's.t': ['x', 'y'] }],
  ] as const)('%s', (sql, writes, reads) => {
    const r = ok(sql);
    expect(r.kind).toBe('write');
    expect(r.writes).toEqual(writes);
    expect(readMap(r)).toEqual(reads);
    expect(r.cacheable).toBe(false);
  });

  test('RETURNING has lineage', () => {
    expect(lineage(ok('UPDATE t SET b = c.email FROM customer c WHERE c.customer_id = t.a RETURNING t.a, c.first_name, b'))).toEqual([
      'a: [t.a] pass',
      'first_name: [customer.first_name] pass',
      'b: [t.b] pass',
    ]);
    expect(lineage(ok('DELETE FROM t RETURNING *'))).toEqual(['a: [t.a] pass', 'b: [t.b] pass']);
    expect(lineage(ok('WITH d AS (DELETE FROM customer RETURNING email) SELECT upper(email) FROM d'))).toEqual(['upper: [customer.email] derived']);
  });
});

describe('result metadata', () => {
  test('paramCount is the highest $n; fingerprint ignores constants and layout', () => {
    const a = ok('SELECT a FROM t WHERE b = $3 AND a = $1');
    expect(a.paramCount).toBe(3);
    expect(ok('SELECT 1').paramCount).toBe(0);
    expect(ok("select a from t where b = 'x'").fingerprint).toBe(ok("SELECT a\nFROM t -- c\nWHERE b = 'y'").fingerprint);
    expect(ok('SELECT a FROM t').fingerprint).not.toBe(ok('SELECT b FROM t').fingerprint);
    expect(a.fingerprint).toMatch(/^[0-9a-f]{16}$/);
  });

  test('statement names the top node; EXPLAIN outputs one QUERY PLAN column', () => {
    expect(ok('SELECT 1').statement).toBe('SelectStmt');
    expect(ok('VALUES (1)').statement).toBe('SelectStmt');
    expect(ok('EXPLAIN SELECT 1').statement).toBe('ExplainStmt');
    expect(ok('DELETE FROM t').statement).toBe('DeleteStmt');
    expect(ok('EXPLAIN SELECT * FROM t').outputs).toEqual([{ name: 'QUERY PLAN', sources: [], passthrough: false, opaque: false, opaqueRelations: [] }]);
  });

  test('filterColumns returns filterSources, and [] for refusals', () => {
    const r = analyzeSql("SELECT first_name FROM customer WHERE email LIKE 'a%'", CATALOG);
    expect(filterColumns(r)).toEqual([{ schema: 'public', table: 'customer', column: 'email' }]);
    expect(filterColumns(analyzeSql('DROP TABLE t', CATALOG))).toEqual([]);
  });

  test('prepareCatalog is cached per catalogue and accepts a prepared catalogue', () => {
    const p = prepareCatalog(CATALOG);
    expect(prepareCatalog(CATALOG)).toBe(p);
    expect(prepareCatalog(p)).toBe(p);
    expect(analyzeSql('SELECT a FROM t', p)).toEqual(analyzeSql('SELECT a FROM t', CATALOG));
  });

  test('output names follow PostgreSQL (checked against the server in the integration test)', () => {
    expect(ok("SELECT 1, 'a'::text, 1::int, a + 1, -a, (SELECT b FROM t LIMIT 1), EXISTS (SELECT 1), ARRAY[1], ROW(1), CASE WHEN true THEN a END, CASE WHEN true THEN 1 ELSE b END, coalesce(a), nullif(a, 1), greatest(1), current_date, (t).a, (SELECT 1 AS z) FROM t").outputs.map((o) => o.name)).toEqual([
      '?column?', 'text', 'int4', '?column?', '?column?', 'b', 'exists', 'array', 'row', 'case', 'b', 'coalesce', 'nullif', 'greatest', 'current_date', 'a', 'z',
    ]);
  });
});

test('the analysis is stable for a prepared and a raw catalogue and does not mutate the catalogue', () => {
  const snapshot = JSON.stringify(CATALOG);
  for (const sql of CASES.map((c) => c.sql)) analyzeSql(sql, CATALOG);
  expect(JSON.stringify(CATALOG)).toBe(snapshot);
});
