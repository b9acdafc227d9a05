/**
 * Issue 22, item 5: operator resolution (src/sql/operators.ts) on a small hand-built catalogue:
 * exact matches by search-path order, unknown operands taking the other side's type, domains
 * reduced to their base type by PostgreSQL's candidate selection, prefix operators, pseudo-type
 * parameters, and the conservative answer when operand types are not proven.
 * (test/integration/sql/operators.test.ts runs every form against real PostgreSQL.)
 */
import { analyzeSql, initSqlParser } from '../../../src/sql/analyze';
import type { OperatorResolution, SourceCatalog } from '../../../src/sql/catalog-types';

beforeAll(async () => {
  await initSqlParser();
});

type T = OperatorResolution['types'][number];
const type = (oid: number, schema: string, name: string, typtype: string, cat: string, preferred: boolean, base: number, elem: number, shown: string): T =>
  [oid, schema, name, typtype, cat, preferred, base, elem, shown, shown];
const RESOLUTION: OperatorResolution = {
  types: [
    type(16, 'pg_catalog', 'bool', 'b', 'B', true, 0, 0, 'boolean'),
    type(20, 'pg_catalog', 'int8', 'b', 'N', false, 0, 0, 'bigint'),
    type(23, 'pg_catalog', 'int4', 'b', 'N', false, 0, 0, 'integer'),
    type(25, 'pg_catalog', 'text', 'b', 'S', true, 0, 0, 'text'),
    type(1007, 'pg_catalog', '_int4', 'b', 'A', false, 0, 23, 'integer[]'),
    type(2277, 'pg_catalog', 'anyarray', 'p', 'P', false, 0, 0, 'anyarray'),
    type(90001, 'public', 'dom', 'd', 'N', false, 23, 0, 'dom'),
  ],
  operators: [
    ['pg_catalog', '=', 23, 23, 16, 'i'],
    ['pg_catalog', '=', 20, 20, 16, 'i'],
    ['pg_catalog', '=', 23, 20, 16, 'i'],
    ['pg_catalog', '=', 25, 25, 16, 'i'],
    ['pg_catalog', '=', 2277, 2277, 16, 'i'],
    ['pg_catalog', '-', 0, 23, 23, 'i'],
    ['public', '=', 90001, 90001, 16, 'v'],
    ['public', '=', 20, 25, 16, 'v'],
    ['public', '=', 23, 23, 16, 'v'],
    ['public', '-', 0, 25, 25, 'v'],
    ['public', '===', 23, 23, 16, 's'],
  ],
  implicitCasts: [[23, 20]],
};
const catalog = (searchPath: string[]): SourceCatalog => ({
  relations: [
    {
      schema: 'public',
      name: 't',
      kind: 'table',
      columns: [
        { name: 'id', dataType: 'integer' },
        { name: 'n', dataType: 'bigint' },
        { name: 's', dataType: 'text' },
        { name: 'k', dataType: 'dom' },
        { name: 'a', dataType: 'integer[]' },
      ],
    },
  ],
  functions: [],
  operators: [],
  searchPath,
  scannedAt: '2026-01-01T00:00:00Z',
  truncated: false,
  operatorResolution: RESOLUTION,
});
const PUBLIC = catalog(['public']);
const verdict = (sql: string, cat = PUBLIC) => {
  const r = analyzeSql(sql, cat);
  return r.ok ? `${r.kind}${r.cacheable ? '' : ' (not cacheable)'}` : `${r.code}: ${r.message}`;
};

test('an exact built-in match is chosen: pg_catalog comes first, hiding public.=(integer, integer)', () => {
  expect(verdict('SELECT id FROM t WHERE id = 1')).toBe('read');
  expect(verdict('SELECT id FROM t WHERE id = $1')).toBe('read');
  expect(verdict("SELECT id FROM t WHERE s = 'x'")).toBe('read');
  expect(verdict('SELECT id FROM t WHERE n = id::bigint')).toBe('read');
});

test('with public placed before pg_catalog, the public exact match wins and is refused', () => {
  expect(verdict('SELECT id FROM t WHERE id = 1', catalog(['public', 'pg_catalog']))).toBe(
    'function_not_allowed: operator "=" (integer, integer) in schema "public" is implemented by a volatile function',
  );
});

test('the volatile exact match is refused; a domain compared with integer resolves to integer = integer', () => {
  expect(verdict('SELECT id FROM t WHERE n = s')).toBe('function_not_allowed: operator "=" (bigint, text) in schema "public" is implemented by a volatile function');
  expect(verdict('SELECT id FROM t WHERE k = k')).toBe('function_not_allowed: operator "=" (dom, dom) in schema "public" is implemented by a volatile function');
  expect(verdict('SELECT id FROM t WHERE k = 1')).toBe('read');
  expect(verdict('SELECT id FROM t WHERE k = id')).toBe('read');
});

test('prefix operators resolve on their one operand', () => {
  expect(verdict('SELECT -id AS x FROM t')).toBe('read');
  expect(verdict('SELECT -s AS x FROM t')).toBe('function_not_allowed: operator "-" (none, text) in schema "public" is implemented by a volatile function');
});

test('= ANY takes the array element type; a pseudo-type parameter is not reachable from a non-array', () => {
  expect(verdict('SELECT id FROM t WHERE id = ANY (a)')).toBe('read');
  expect(verdict('SELECT id FROM t WHERE a = a')).toBe('read');
});

test('unproven operand types refuse only when a volatile candidate is reachable', () => {
  expect(verdict("SELECT 1 WHERE '1' = '1'")).toBe(
    'function_not_allowed: operator "=" for operand types (unknown, unknown) may resolve to public.=(dom, dom), which is implemented by a volatile function',
  );
  expect(verdict('SELECT 1 FROM t WHERE (CASE WHEN true THEN s END) = s')).toBe(
    'function_not_allowed: operator "=" for operand types (an expression of unproven type, text) may resolve to public.=(bigint, text), which is implemented by a volatile function',
  );
});

test('a stable user-defined operator is allowed and makes the statement not cacheable; an unknown one is refused', () => {
  expect(verdict('SELECT id FROM t WHERE id === 1')).toBe('read (not cacheable)');
  expect(verdict('SELECT id FROM t WHERE id ==== 1')).toBe('function_not_allowed: unknown operator "===="');
});
