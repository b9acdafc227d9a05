/**
 * Issue 22, item 4: every built-in whose arguments size an allocation or a result gets the
 * constant-size check. The sizing role is derived from the pg_proc snapshots (integer, numeric,
 * interval or integer-array argument; string, bit, bytea, array, JSON or set result): every such
 * function the policy does not refuse is reviewed as allocation-sized or bounded by its input.
 * (test/integration/sql/allocation-sizing.test.ts walks the live server's pg_proc and runs the
 * allowed forms on PostgreSQL.)
 */
import { analyzeSql, initSqlParser, prepareCatalog } from '../../../src/sql/analyze';
import { loadSnapshots } from '../../../src/sql/builtin-functions/classes';
import { classifyRow } from '../../../src/sql/builtin-functions/rules';
import { ALLOCATION_SIZED, BOUNDED_BY_INPUT, hasSizingShape, RESOURCE_LIMIT } from '../../../src/sql/builtin-functions/sizing';
import { CATALOG } from './helpers';

beforeAll(async () => {
  await initSqlParser();
});

const cat = prepareCatalog(CATALOG);
const answer = (sql: string) => {
  const r = analyzeSql(sql, cat);
  return r.ok ? 'ok' : `${r.code}: ${r.message}`;
};

describe('classification of sizing arguments', () => {
  test('every non-refused pg_catalog function with a sizing-shaped argument (PostgreSQL 15–18) is reviewed as sized or bounded', () => {
    const unreviewed = new Set<string>();
    let shaped = 0;
    for (const s of loadSnapshots()) {
      for (const r of s.rows) {
        if (r[0] !== 'pg_catalog' || !hasSizingShape(r[2], r[3], r[7])) continue;
        if (classifyRow(r)?.class === 'refused') continue;
        shaped++;
        if (!ALLOCATION_SIZED.has(r[1]) && !BOUNDED_BY_INPUT.has(r[1])) unreviewed.add(`${r[1]}(${r[2]}) -> ${r[3]}`);
      }
    }
    expect([...unreviewed]).toEqual([]);
    expect(shaped).toBeGreaterThan(100);
  });

  test('the two reviewed lists are disjoint and every allocation-sized name is classified resource_checked', () => {
    for (const n of ALLOCATION_SIZED.keys()) expect(BOUNDED_BY_INPUT.has(n)).toBe(false);
    const rows = loadSnapshots().flatMap((s) => s.rows.filter((r) => r[0] === 'pg_catalog' && ALLOCATION_SIZED.has(r[1])));
    expect(new Set(rows.map((r) => r[1]))).toEqual(new Set(ALLOCATION_SIZED.keys()));
    for (const r of rows) expect([r[1], classifyRow(r)?.id]).toEqual([r[1], 'resource-checked']);
  });

  test('the shape: integer argument and string/array/set result', () => {
    expect(hasSizingShape('text int4', 'text', false)).toBe(true);
    expect(hasSizingShape('anyelement _int4', 'anyarray', false)).toBe(true);
    expect(hasSizingShape('timestamp timestamp interval', 'timestamp', true)).toBe(true);
    expect(hasSizingShape('int4 int4', 'int4', false)).toBe(false);
    expect(hasSizingShape('text text', 'text', false)).toBe(false);
  });
});

describe('the constant-size check', () => {
  const LIMIT = `resource limit`;
  test.each([
    ['SELECT array_fill(0, ARRAY[100000, 1000])', 'array_fill would produce more than 10000000 array elements'],
    ["SELECT array_fill('x'::text, '{20000000}')", 'array_fill would produce more than 10000000 array elements'],
    ["SELECT array_fill(1, ARRAY[5000, 5000], ARRAY[1, 1])", 'array_fill would produce more than 10000000 array elements'],
    ['SELECT array_fill(0, ARRAY[1e8]::int[])', 'array_fill would produce more than 10000000 array elements'],
    ['SELECT "bit"(1, 100000000)', 'bit would produce more than 10000000 bits'],
    ["SELECT bpchar('x', 100000004, true)", 'bpchar would produce more than 10000000 characters'],
    ['SELECT 1::bit(80000000)', 'a bit(80000000) value would hold more than 10000000 bits'],
    ["SELECT 'x'::char(20000000)", 'a bpchar(20000000) value would hold more than 10000000 characters'],
    ['SELECT generate_series(1, 1e9)', 'generate_series would produce more than 10000000 rows'],
    ['SELECT * FROM generate_series(1::bigint, 20000000::bigint, 1::bigint)', 'generate_series would produce more than 10000000 rows'],
    ['SELECT generate_series(0.5, 1e8::numeric)', 'generate_series would produce more than 10000000 rows'],
    ["SELECT * FROM generate_series('2000-01-01'::timestamp, '2100-01-01', '1 second')", 'generate_series would produce more than 10000000 rows'],
    ["SELECT * FROM generate_series('2000-01-01 00:00:00+00'::timestamptz, '2001-01-01 00:00:00+00', interval '1 sec')", 'generate_series would produce more than 10000000 rows'],
    ["SELECT * FROM generate_series(now(), 'infinity', '1 day')", 'generate_series would produce more than 10000000 rows'],
    ["SELECT repeat('x', 1e9)", 'repeat would produce more than 10000000 characters'],
    ["SELECT lpad('x', 100000000)", 'lpad would produce more than 10000000 characters'],
    ["SELECT rpad('x', 100000000, 'y')", 'rpad would produce more than 10000000 characters'],
  ])('%s is refused', (sql, why) => {
    expect(answer(sql)).toBe(`function_not_allowed: ${LIMIT}: ${why}`);
  });

  test.each([
    'SELECT array_fill(0, ARRAY[100, 100])',
    "SELECT array_fill('x'::text, '{3,3}', '{0,0}')",
    'SELECT array_fill(0, ARRAY[$1::int])', // not constant: bounded at execution, as generate_series(1, n)
    'SELECT pg_catalog.bit(5, 16)',
    "SELECT bpchar('x', 14, true)",
    'SELECT 1::bit(8)',
    "SELECT 'x'::char(10)",
    'SELECT generate_series(1, 10)',
    "SELECT * FROM generate_series('2000-01-01'::timestamp, '2000-01-02', '1 hour')",
    "SELECT * FROM generate_series('2000-01-01'::date, '2001-01-01'::date, '1 day'::interval)",
    "SELECT * FROM generate_series(now(), now() + interval '1 day', '1 hour')",
    "SELECT repeat('x', 10)",
    'SELECT generate_subscripts(ARRAY[1, 2], 1)',
  ])('%s is allowed', (sql) => {
    expect(answer(sql)).toBe('ok');
  });

  test('the limit is 10 million units', () => {
    expect(RESOURCE_LIMIT).toBe(10_000_000);
    expect(answer('SELECT array_fill(0, ARRAY[10000000])')).toBe('ok');
    expect(answer('SELECT array_fill(0, ARRAY[10000001])')).toBe('function_not_allowed: resource limit: array_fill would produce more than 10000000 array elements');
  });
});
