/**
 * A source definition missing a required setting whose values the schema closes (task hnu42b item
 * 5): the error names the allowed values, read from spec/source-v1.schema.json.
 */
import { parseSourceDefinition } from '../../../src/control/sources';
import { ValidationError } from '../../../src/control/errors';

const base = { id: 'x', type: 'postgres', name: 'x', settings: { host: 'h', port: 5432, database: 'd', reader: { user: 'u', password: '' } } };

function details(def: unknown): string[] {
  try {
    parseSourceDefinition(def);
  } catch (err) {
    expect(err).toBeInstanceOf(ValidationError);
    return (err as ValidationError).details;
  }
  throw new Error('expected a ValidationError');
}

test('a missing tls names its modes', () => {
  expect(details(base)).toEqual([`/settings: must have required property 'tls' ({"mode": "off" | "require" | "verify-ca" | "verify-full"})`]);
});

test('a tls without mode names the modes', () => {
  expect(details({ ...base, settings: { ...base.settings, tls: {} } })).toEqual([`/settings/tls: must have required property 'mode' (one of "off" | "require" | "verify-ca" | "verify-full")`]);
});

test('a missing property without a closed set of values is named as before', () => {
  const { database: _d, ...rest } = base.settings;
  expect(details({ ...base, settings: { ...rest, tls: { mode: 'off' } } })).toEqual([`/settings: must have required property 'database'`]);
});
