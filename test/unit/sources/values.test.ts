/**
 * The value mapping's decoders without a server (issue 23; spec/value-mapping-v1.json): each form,
 * PostgreSQL's array text, raw JSON spliced verbatim, and the truncation notice of interlock_query.
 * The server-side matrix is test/integration/sources/value-matrix.test.ts.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { parse as postgresArray } from 'postgres-array';
import { BUILTIN_TYPE_MAPPINGS } from '../../../generated/value-mapping-v1';
import { jsonBytes, jsonText, RawJson } from '../../../src/sources/postgres/raw-json';
import { builtinDecoder, parseArrayText, SourceTypes } from '../../../src/sources/postgres/values';
import { queryResult } from '../../../src/pipeline/query';
import { serializeMessage } from '../../../src/protocol/tool-results';

const oid = (name: string) => BUILTIN_TYPE_MAPPINGS.find((t) => t.name === name)!;
const dec = (name: string, text: string) => builtinDecoder(oid(name).oid)(text);
const arr = (name: string, text: string) => builtinDecoder(oid(name).arrayOid!)(text);

describe('forms', () => {
  test('int8: a number within ±(2^53−1), else the digits as a string', () => {
    expect(dec('int8', '9007199254740991')).toBe(9007199254740991);
    expect(dec('int8', '-9007199254740991')).toBe(-9007199254740991);
    expect(dec('int8', '9007199254740992')).toBe('9007199254740992');
    expect(dec('int8', '9007199254740993')).toBe('9007199254740993');
    expect(dec('int8', '-9223372036854775808')).toBe('-9223372036854775808');
    expect(dec('int8', '0')).toBe(0);
  });

  test('floats: numbers, -0 as JSON -0, special values as strings', () => {
    expect(dec('float8', '0.1')).toBe(0.1);
    expect(dec('float4', '1.1')).toBe(1.1);
    expect(dec('float8', '1e+308')).toBe(1e308);
    expect(dec('float8', 'NaN')).toBe('NaN');
    expect(dec('float8', 'Infinity')).toBe('Infinity');
    expect(dec('float4', '-Infinity')).toBe('-Infinity');
    expect(jsonText([dec('float8', '-0')])).toBe('[-0]');
  });

  test('text form: numeric, money, timestamps, bytea, intervals stay PostgreSQL text', () => {
    for (const [t, v] of [
      ['numeric', '12345678901234567890.000100'],
      ['numeric', 'NaN'],
      ['money', '$1,000.00'],
      ['timestamp', '2024-01-15 12:00:00'],
      ['timestamptz', '2024-01-15 12:00:00+00'],
      ['date', '2024-01-15'],
      ['interval', '1 year 2 mons -3 days 04:05:06'],
      ['bytea', '\\x00ff'],
      ['uuid', '00000000-0000-0000-0000-000000000000'],
    ]) expect(dec(t, v)).toBe(v);
  });

  test('bool, int2/int4/oid', () => {
    expect(dec('bool', 't')).toBe(true);
    expect(dec('bool', 'f')).toBe(false);
    expect(dec('int4', '-2147483648')).toBe(-2147483648);
    expect(dec('int2', '32767')).toBe(32767);
    expect(dec('oid', '4294967295')).toBe(4294967295);
  });

  test('json/jsonb: the server text verbatim, big integers keep every digit', () => {
    const v = dec('jsonb', '{"id": 9007199254740993, "x": [1.10, "é"]}');
    expect(v).toBeInstanceOf(RawJson);
    expect(jsonText({ v })).toBe('{"v":{"id": 9007199254740993, "x": [1.10, "é"]}}');
    expect(jsonBytes(v)).toBe(Buffer.byteLength('{"id": 9007199254740993, "x": [1.10, "é"]}'));
  });
});

describe('arrays', () => {
  test('elements mapped by their type, NULL as null, nesting, quoting', () => {
    expect(arr('int8', '{1,NULL,9007199254740993}')).toEqual([1, null, '9007199254740993']);
    expect(arr('text', '{"a b","NULL",NULL,"q\\"x","back\\\\slash",é}')).toEqual(['a b', 'NULL', null, 'q"x', 'back\\slash', 'é']);
    expect(arr('int4', '{{1,2},{3,4}}')).toEqual([
      [1, 2],
      [3, 4],
    ]);
    expect(arr('int4', '{}')).toEqual([]);
    expect(arr('float8', '{NaN,-Infinity,1.5}')).toEqual(['NaN', '-Infinity', 1.5]);
    expect(jsonText(arr('jsonb', '{"{\\"a\\": 9007199254740993}",NULL}'))).toBe('[{"a": 9007199254740993},null]');
  });

  test('box arrays use ";"; non-default lower bounds stay text', () => {
    expect(arr('box', '{(1,1),(0,0);(2,2),(1,1)}')).toEqual(['(1,1),(0,0)', '(2,2),(1,1)']);
    expect(arr('int4', '[0:1]={1,2}')).toBe('[0:1]={1,2}');
    expect(arr('int4', '[0:1][1:1]={{1},{2}}')).toBe('[0:1][1:1]={{1},{2}}');
  });

  test('property: text[] from array_out-style text parses as postgres-array does', () => {
    const quote = (s: string | null) => (s === null ? 'NULL' : `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`);
    fc.assert(
      fc.property(fc.array(fc.option(fc.string(), { nil: null })), (xs) => {
        const text = `{${xs.map(quote).join(',')}}`;
        expect(parseArrayText(text, (s) => s)).toEqual(postgresArray(text));
        expect(parseArrayText(text, (s) => s)).toEqual(xs);
      }),
    );
  });
});

describe('types outside the table', () => {
  test('an array of a user type is mapped by its element (domain → base), others are text', async () => {
    const types = new SourceTypes();
    expect(types.needsLoad(90001)).toBe(true);
    expect(types.needsLoad(20)).toBe(false);
    const rows = [
      { oid: '90001', typtype: 'b', typcategory: 'A', typelem: '90002', typbasetype: '0', typdelim: ',' },
      { oid: '90002', typtype: 'd', typcategory: 'N', typelem: '0', typbasetype: '20', typdelim: ',' },
      { oid: '90003', typtype: 'e', typcategory: 'E', typelem: '0', typbasetype: '0', typdelim: ',' },
    ];
    await types.load({ query: async <R>() => ({ rows: rows as unknown as R[] }) }, [90001, 90003, 90004]);
    expect(types.needsLoad(90001)).toBe(false);
    expect(types.decoder(90001)!('{1,9223372036854775807}')).toEqual([1, '9223372036854775807']);
    expect(types.decoder(90003)!('happy')).toBe('happy');
    expect(types.decoder(90004)!('{x}')).toBe('{x}');
  });
});

describe('truncation a text-only client can see', () => {
  test('a cut result carries a second text item with the reason and the row count; a whole one does not', () => {
    const rows = [{ a: 1 }, { a: 2 }];
    const cut = queryResult(rows, true, false, [], 'max_rows');
    expect(cut).toEqual({
      kind: 'result',
      content: [
        { type: 'text', text: '[{"a":1},{"a":2}]' },
        { type: 'text', text: 'TRUNCATED: this result is incomplete: more rows matched than the row limit (max_rows, or a source or policy row cap). 2 rows returned. Narrow the query (WHERE, fewer columns) or page with ORDER BY and LIMIT/OFFSET to see the rest.' },
      ],
      structuredContent: { rows, row_count: 2, truncated: true, truncated_by: 'max_rows', cached: false },
    });
    const bytes = queryResult([{ a: 1 }], true, true, [], 'max_bytes');
    expect(bytes.kind === 'result' && (bytes.content[1] as { text: string }).text).toBe("TRUNCATED: this result is incomplete: the rows would have exceeded the result's size limit. 1 row returned. Narrow the query (WHERE, fewer columns) or page with ORDER BY and LIMIT/OFFSET to see the rest.");
    const whole = queryResult(rows, false, false, []);
    expect(whole.kind === 'result' && whole.content).toEqual([{ type: 'text', text: '[{"a":1},{"a":2}]' }]);
    expect(whole.kind === 'result' && whole.structuredContent).toEqual({ rows, row_count: 2, truncated: false, cached: false });
  });

  test('raw JSON inside rows reaches the wire verbatim in both the text and structuredContent', () => {
    const rows = [{ doc: new RawJson('{"n": 12345678901234567890}') }];
    const r = queryResult(rows, false, false, []);
    const wire = serializeMessage({ jsonrpc: '2.0', id: 1, result: r.kind === 'result' ? { content: r.content, structuredContent: r.structuredContent } : null });
    expect(wire).toBe('{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"[{\\"doc\\":{\\"n\\": 12345678901234567890}}]"}],"structuredContent":{"rows":[{"doc":{"n": 12345678901234567890}}],"row_count":1,"truncated":false,"cached":false}}}');
  });
});

test('docs/values.md names every type of the spec table', () => {
  const doc = readFileSync(join(__dirname, '..', '..', '..', 'docs', 'values.md'), 'utf8');
  expect(BUILTIN_TYPE_MAPPINGS.filter((t) => !doc.includes(`\`${t.name}\``)).map((t) => t.name)).toEqual([]);
});

describe('json text with line breaks (EXPLAIN (FORMAT JSON) writes several lines)', () => {
  it('is spliced on one line, values unchanged, so an SSE data: line is never ended early', () => {
    const { RawJson, jsonText } = require('../../../src/sources/postgres/raw-json') as typeof import('../../../src/sources/postgres/raw-json');
    const raw = '[\n  {\r\n    "Plan": {"Rows": 9007199254740993, "Note": "a\\nb"}\n  }\n]';
    const text = jsonText([{ plan: new RawJson(raw) }]);
    expect(text).not.toMatch(/[\r\n]/);
    expect(text).toBe('[{"plan":[   {      "Plan": {"Rows": 9007199254740993, "Note": "a\\nb"}   } ]}]');
    expect(JSON.parse(text)[0].plan[0].Plan.Note).toBe('a\nb');
  });
});

describe('jsonBytes of strings (h28z: counted without serialising when plain)', () => {
  test('equals the UTF-8 bytes of JSON.stringify for plain, escaped, control, non-ASCII and lone-surrogate strings', () => {
    const cases = ['', 'For Those About To Rock (We Salute You)', '0.99', 'q"x', 'back\\slash', 'tab\tnew\nline', '\u0000\u001f\u007f', 'é', '日本', '😀', '\ud800', 'a\udc00b', '\u2028\u2029', '~ !#[]'];
    expect(cases.map((s) => jsonBytes(s))).toEqual(cases.map((s) => Buffer.byteLength(JSON.stringify(s), 'utf8')));
    expect([jsonBytes('abc'), jsonBytes('a"c'), jsonBytes('é'), jsonBytes('\u007f')]).toEqual([5, 6, 4, 3]);
  });

  test('property: any string, the bytes JSON.stringify writes', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.string({ unit: 'binary' }), fc.string({ unit: 'grapheme' }), fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)) })), (s) => jsonBytes(s) === Buffer.byteLength(JSON.stringify(s), 'utf8')),
      { numRuns: 2000 },
    );
  });
});
