/**
 * Row-rule predicates (issue 27): what parses, what is refused and how it is rendered for a row view.
 */
import { initSqlParser } from '../../../../src/sql/parser';
import {
  attributeFitsType,
  attributeListText,
  attributeText,
  bindType,
  parseRowPredicate,
  renderRowPredicate,
  RowPredicateError,
  RowPredicateTableError,
} from '../../../../src/sql/row-rules/predicate';

beforeAll(async () => {
  await initSqlParser();
});

const types: Record<string, string> = { support_rep_id: 'integer', region: 'character varying(20)', code: 'character(2)', deleted: 'boolean', name: 'text', flags: 'bit(3)' };
const lookup = (c: string) => types[c];

describe('parseRowPredicate', () => {
  it('reads columns, scalar and list attributes', () => {
    const p = parseRowPredicate('support_rep_id = identity.employee_id OR region = ANY(identity.regions)');
    expect(p.columns).toEqual(['region', 'support_rep_id']);
    expect(p.attributes).toEqual(['employee_id']);
    expect(p.listAttributes).toEqual(['regions']);
  });

  it.each([
    ['x IN (1, 2, 3) AND NOT deleted IS NULL'],
    ["lower(name) = lower(identity.login) AND coalesce(region, 'eu') <> 'us'"],
    ['support_rep_id >= 3 AND support_rep_id != identity.x'],
    ["btrim(name) = 'a''b'"],
    ['region NOT IN (identity.a, identity.b)'],
  ])('accepts %s', (text) => {
    expect(() => parseRowPredicate(text)).not.toThrow();
  });

  it.each([
    ['a = (SELECT 1)', /sub-select/],
    ['a::int = 1', /cast/],
    ['pg_sleep(1) IS NULL', /function pg_sleep is not allowed/],
    ['public.t.a = 1', /unqualified/],
    ['x.a = 1', /unqualified/],
    ['a = $1', /parameter/],
    ['a = 1; DROP TABLE t', /one boolean expression/],
    ['a = 1 GROUP BY a', /one boolean expression/],
    ['a LIKE identity.p', /operator ~~ is not allowed/],
    ['a = ANY(ARRAY[1,2])', /ARRAY constructor/],
    ['a = ANY(b)', /identity attribute holding a list/],
    ['identity.flag', /not a bare value/],
    ['', /empty/],
    ['a = identity."Bad-Name"', /lower-case/],
    ['a = ', /does not parse/],
    ['upper(a) OVER () = 1', /function upper is not allowed/],
    ['CASE WHEN a THEN true END', /CASE/],
  ])('refuses %s', (text, why) => {
    expect(() => parseRowPredicate(text)).toThrow(RowPredicateError);
    expect(() => parseRowPredicate(text)).toThrow(why);
  });
});

describe('renderRowPredicate', () => {
  it('casts an attribute to the compared column type without its modifier, and lists to arrays', () => {
    const sql = renderRowPredicate(parseRowPredicate('support_rep_id = identity.employee_id OR region = ANY(identity.regions) OR code = identity.c'), lookup);
    expect(sql).toBe(
      "((\"support_rep_id\" OPERATOR(pg_catalog.=) (pg_catalog.current_setting(E'interlock.attr.employee_id', true)::integer)) OR (\"region\" OPERATOR(pg_catalog.=) ANY ((pg_catalog.current_setting(E'interlock.attrs.regions', true)::character varying[]))) OR (\"code\" OPERATOR(pg_catalog.=) (pg_catalog.current_setting(E'interlock.attr.c', true)::pg_catalog.bpchar)))",
    );
  });

  it('re-quotes strings as escape literals and qualifies functions', () => {
    const sql = renderRowPredicate(parseRowPredicate("lower(name) = 'o''b\\\\x'"), lookup);
    expect(sql).toBe("(pg_catalog.lower(\"name\") OPERATOR(pg_catalog.=) E'o''b\\\\\\\\x')");
  });

  it("names a column type's own operator by its schema where both operands are of that type (rt48d R8), pg_catalog's elsewhere", () => {
    const types = (c: string) => ({ owner: 'citext', other: 'citext', n: 'integer', t: 'text' })[c];
    const own = (c: string, op: string) => (['owner', 'other'].includes(c) && ['=', '<>'].includes(op) ? 'ext space' : null);
    const sql = renderRowPredicate(parseRowPredicate("owner = identity.name AND 'x' <> owner AND owner = other AND owner = ANY(identity.names) AND owner NOT IN ('a') AND owner = 5 AND owner = t AND lower(owner) = 'x' AND n = identity.n"), types, undefined, own);
    expect(sql).toBe(
      "((\"owner\" OPERATOR(\"ext space\".=) (pg_catalog.current_setting(E'interlock.attr.name', true)::citext)) AND (E'x' OPERATOR(\"ext space\".<>) \"owner\") AND (\"owner\" OPERATOR(\"ext space\".=) \"other\") AND (\"owner\" OPERATOR(\"ext space\".=) ANY ((pg_catalog.current_setting(E'interlock.attrs.names', true)::citext[]))) AND (\"owner\" OPERATOR(\"ext space\".<>) ALL (ARRAY[E'a']::citext[])) AND (\"owner\" OPERATOR(pg_catalog.=) 5) AND (\"owner\" OPERATOR(pg_catalog.=) \"t\") AND (pg_catalog.lower(\"owner\") OPERATOR(pg_catalog.=) E'x') AND (\"n\" OPERATOR(pg_catalog.=) (pg_catalog.current_setting(E'interlock.attr.n', true)::integer)))",
    );
  });

  it('refuses a column the table lacks and a type that cannot take a bound value', () => {
    expect(() => renderRowPredicate(parseRowPredicate('nope = 1'), lookup)).toThrow(RowPredicateTableError);
    expect(() => renderRowPredicate(parseRowPredicate('flags = identity.f'), lookup)).toThrow(/type \(bit\(3\)\)/);
  });
});

describe('attribute values', () => {
  it('binds scalars as text and lists as quoted array literals', () => {
    expect(attributeText('a"b')).toBe('a"b');
    expect(attributeText(3)).toBe('3');
    expect(attributeText(true)).toBe('true');
    expect(attributeText(null)).toBeNull();
    expect(attributeText(['x'])).toBeNull();
    expect(attributeText({})).toBeNull();
    expect(attributeText(Number.NaN)).toBeNull();
    expect(attributeListText(['eu', 'a"b', 'c\\d', 'x,y}'])).toBe('{"eu","a\\"b","c\\\\d","x,y}"}');
    expect(attributeListText('eu')).toBe('{"eu"}');
    expect(attributeListText([])).toBe('{}');
    expect(attributeListText([null])).toBeNull();
  });

  it('strips type modifiers', () => {
    expect(bindType('character varying(40)')).toBe('character varying');
    expect(bindType('numeric(10,2)')).toBe('numeric');
    expect(bindType('timestamp(3) with time zone')).toBe('timestamp with time zone');
    expect(bindType('character(2)')).toBe('bpchar');
    expect(bindType('integer[]')).toBeNull();
    expect(bindType('bit varying(3)')).toBeNull();
  });
});

describe('attributeFitsType (issue 27: an operator value of the wrong type refuses the caller, not the statement)', () => {
  it.each([
    [3, 'integer', true], ['3', 'integer', true], [' -7 ', 'integer', true], ['abc', 'integer', false], ['1.5', 'integer', false],
    ['2147483647', 'integer', true], ['2147483648', 'integer', false], ['-32768', 'smallint', true], ['32768', 'smallint', false],
    ['9223372036854775807', 'bigint', true], ['9223372036854775808', 'bigint', false], [[1, 2, '3'], 'integer', true], [[1, 'x'], 'integer', false],
    ['1.5e3', 'numeric', true], ['.5', 'numeric', true], ['NaN', 'numeric', true], ['1,5', 'numeric', false],
    [true, 'boolean', true], ['yes', 'boolean', true], ['of', 'boolean', true], ['o', 'boolean', false], ['maybe', 'boolean', false],
    ['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'uuid', true], ['{a0eebc999c0b4ef8bb6d6bb9bd380a11}', 'uuid', true], ['not-a-uuid', 'uuid', false],
    ['anything', 'text', true], ['2026-12-03', 'date', true], [null, 'integer', false], [{ a: 1 }, 'text', false],
  ])('%j as %s → %s', (value, type, fits) => {
    expect(attributeFitsType(value, type)).toBe(fits);
  });
});
