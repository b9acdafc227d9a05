/** describeValidationErrors (src/tools/registry.ts): what an agent reads for invalid_arguments. */
import { describeValidationErrors } from '../../../src/tools/registry';
import { interlockToolBindings } from '../../../src/tools/registry';

test('an unknown property is named; other errors keep their path and ajv message; at most five', () => {
  expect(describeValidationErrors([{ instancePath: '', keyword: 'additionalProperties', params: { additionalProperty: 'source_id' }, message: 'must NOT have additional properties' }])).toBe('arguments has an unknown property "source_id"');
  expect(describeValidationErrors([{ instancePath: '/params/0', keyword: 'additionalProperties', params: { additionalProperty: 'x"y' }, message: 'must NOT have additional properties' }])).toBe('params.0 has an unknown property "x\\"y"');
  expect(describeValidationErrors([{ instancePath: '/max_rows', keyword: 'minimum', params: { limit: 1 }, message: 'must be >= 1' }])).toBe('max_rows must be >= 1');
  expect(describeValidationErrors([])).toBe('arguments do not match the input schema');
  expect(describeValidationErrors(Array.from({ length: 7 }, (_, i) => ({ instancePath: `/a${i}`, message: 'is bad' }))).split('; ')).toHaveLength(5);
});

test('the generated validators: interlock_related_documents with a source_id names it (a new user could not tell which property)', () => {
  const related = interlockToolBindings({}).find((b) => b.name === 'interlock_related_documents')!;
  const message = related.validate({ asset_id: 'doc-1', source_id: 'handbook' });
  expect(message).toBe('arguments has an unknown property "source_id"');
});

test('a value outside an enum names the allowed values from the schema (trial nu40): interlock_discover source_types, interlock_query request.operation', () => {
  const tools = interlockToolBindings({});
  const discover = tools.find((b) => b.name === 'interlock_discover')!;
  expect(discover.validate({ source_id: 'handbook', query: 'x', source_types: ['bogus'] })).toBe('source_types.0 must be one of: "postgres", "documents"');
  const query = tools.find((b) => b.name === 'interlock_query')!;
  expect(query.validate({ source_id: 'handbook', request: { operation: 'frobnicate', asset_id: 'a' } })).toBe('request.operation must be one of: "get_document"');
  // A long enum lists its first 20 values and counts the rest; a const names its one value.
  const values = Array.from({ length: 23 }, (_, i) => `v${i}`);
  expect(describeValidationErrors([{ instancePath: '/x', keyword: 'enum', params: { allowedValues: values }, message: 'must be equal to one of the allowed values' }])).toBe(
    `x must be one of: ${values.slice(0, 20).map((v) => `"${v}"`).join(', ')}, … (3 more)`,
  );
  expect(describeValidationErrors([{ instancePath: '/type', keyword: 'const', params: { allowedValue: 'read' }, message: 'must be equal to constant' }])).toBe('type must be "read"');
});

test('red team rt48d R7: a params item JSON read as ±Infinity (1e400) gets the hint to send it as a string, not the schema\'s type error', () => {
  const query = interlockToolBindings({}).find((b) => b.name === 'interlock_query')!;
  const hint = (i: number) => `params[${i}] is a number JSON cannot carry exactly (an integer beyond ±(2^53−1), or more significant digits than a double keeps, about 15): it would reach PostgreSQL rounded. Send it as a string, e.g. "9007199254740993" or "12345678901234567890.123", which PostgreSQL reads exactly.`;
  expect(query.validate({ source_id: 'chinook', sql: 'SELECT $1', params: [Infinity] })).toBe(hint(0));
  expect(query.validate({ source_id: 'chinook', sql: 'SELECT $1, $2', params: ['a', JSON.parse('-1e400')] })).toBe(hint(1));
  // Other type errors of a params item keep the schema's message.
  expect(query.validate({ source_id: 'chinook', sql: 'SELECT $1', params: [[1]] })).toBe('params.0 must be string,number,boolean,null');
});
