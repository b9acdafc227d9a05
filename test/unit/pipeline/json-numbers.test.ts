/**
 * Numbers in a client's JSON body that JSON.parse cannot carry exactly (task low48 item 1,
 * src/pipeline/json-numbers.ts): parseClientJson answers what JSON.parse answers and records where
 * such a number sits; jsonNumberIsExact judges a literal by value.
 */
import { inexactJsonNumber, jsonNumberIsExact, parseClientJson } from '../../../src/pipeline/json-numbers';

describe('jsonNumberIsExact', () => {
  test.each([['0'], ['-0'], ['0.1'], ['1.50'], ['-12.25e-2'], ['1e20'], ['1E+21'], ['5e-324'], ['1.000000000000000000'], ['123456789012345'], ['1234567890123456'], ['123456789012345e-3'], ['0.000000000000000000001']])('%s: what PostgreSQL receives is what was written', (lit) => {
    expect(jsonNumberIsExact(lit)).toBe(true);
  });
  test.each([['12345678901234567890.123'], ['9007199254740993'], ['0.12345678901234567891'], ['1.0000000000000000001'], ['0.1000000000000000055511151231257827'], ['1e400'], ['-1e400'], ['1e-400'], ['12345678901234567']])('%s: rounded by the double', (lit) => {
    expect(jsonNumberIsExact(lit)).toBe(false);
  });
});

describe('parseClientJson', () => {
  test('the value JSON.parse gives, with the first number of a params array it rounded recorded', () => {
    const text = '{"s":"x\\"0.12345678901234567891 1e400","params":[12345678901234567890.123, 9007199254740993, 0.5, "9007199254740993", 1.000000000000000000, 0.12345678901234567891, 1e20],"o":{"k":1e-400,"j":2}}';
    const v = parseClientJson(text) as { params: unknown[]; o: Record<string, unknown> };
    expect(v).toEqual(JSON.parse(text));
    // The first only: the call is refused at params[0], so nothing after it is sent (task r2).
    expect(v.params.map((_, i) => inexactJsonNumber(v.params, i))).toEqual([true, false, false, false, false, false, false]);
    const w = parseClientJson('{"params":[0.5, "x", 1.000000000000000000, 0.12345678901234567891, 9007199254740993]}') as { params: unknown[] };
    expect(w.params.map((_, i) => inexactJsonNumber(w.params, i))).toEqual([false, false, false, true, false]);
    expect([inexactJsonNumber(w.params, '3'), inexactJsonNumber(w.params, '03')]).toEqual([true, false]);
    // Recorded in params arrays only (src/pipeline/json-numbers.ts PARAMS_PATHS): nothing else reaches PostgreSQL as a parameter.
    expect([inexactJsonNumber(v.o, 'k'), inexactJsonNumber(v.o, 'j')]).toEqual([false, false]);
  });
  test('a body whose numbers are all exact records nothing; values built in code are never flagged', () => {
    const v = parseClientJson('{"params":[1, 2.5, -3e2, "12345678901234567890.123"]}') as { params: unknown[] };
    expect(v.params.map((_, i) => inexactJsonNumber(v.params, i))).toEqual([false, false, false, false]);
    const built = [0.12345678901234568];
    expect(inexactJsonNumber(built, 0)).toBe(false);
  });
  test('a string that looks like the marker of a rounded number stays a string', () => {
    const v = (parseClientJson('{"params":["\\u0000inexact-x:0", 0.12345678901234567891]}') as { params: unknown[] }).params;
    expect(v[0]).toBe('\u0000inexact-x:0');
    expect([inexactJsonNumber(v, 0), inexactJsonNumber(v, 1)]).toEqual([false, true]);
  });
  test.each([['{"a":1'], ['[0.12345678901234567891,]'], ['01'], ['']])('malformed text %j throws as JSON.parse does', (text) => {
    expect(() => JSON.parse(text)).toThrow(SyntaxError);
    expect(() => parseClientJson(text)).toThrow(SyntaxError);
  });
});
