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
