/**
 * `interlock identity attributes NAME=VALUE` (issue 27, docs/row-rules.md "Attributes"): how a
 * value on the command line becomes an attribute. A broken list is refused (found by a new user:
 * `regions=["eu",` was stored as the text `["eu",`, which no `= ANY(identity.regions)` rule can use).
 */
import { attributeValue } from '../../../src/cli/identity';
import { ValidationError } from '../../../src/control/errors';

test('numbers, booleans and JSON lists are JSON; other text is text; empty removes', () => {
  expect(attributeValue('3')).toBe(3);
  expect(attributeValue('-2.5')).toBe(-2.5);
  expect(attributeValue('true')).toBe(true);
  expect(attributeValue('["eu","us"]')).toEqual(['eu', 'us']);
  expect(attributeValue('[]')).toEqual([]);
  expect(attributeValue('eu')).toBe('eu');
  expect(attributeValue('3a')).toBe('3a');
  expect(attributeValue('')).toBeNull();
});

test.each(['["eu",', '[eu, us]', "['eu']", '['])('a value that starts like a list but is not valid JSON is refused: %s', (text) => {
  expect(() => attributeValue(text)).toThrow(ValidationError);
  expect(() => attributeValue(text)).toThrow(/starts like a list but is not a JSON list/);
});
