/**
 * Unknown request-body fields of the admin API and console (src/http/closed-body.ts, task hsm2
 * item 1), against the validators generated from spec/openapi-v1.yaml.
 */
import { REQUEST_BODY_VALIDATORS } from '../../../generated/request-bodies-v1';
import { unknownBodyFields, unknownFieldsMessage, closedBody, wrongBodyType } from '../../../src/http/closed-body';

const v = (key: string) => REQUEST_BODY_VALIDATORS[key]!;

test('a top-level unknown field is named by its JSON pointer (escaped per RFC 6901); a conforming body names none', () => {
  expect(unknownBodyFields(v('POST /admin/v1/identities'), { name: 'a', nmae: 'b', 'we/ird~': 1 })).toEqual(['/nmae', '/we~1ird~0']);
  expect(unknownBodyFields(v('POST /admin/v1/identities'), { name: 'a' })).toEqual([]);
  expect(unknownBodyFields(v('POST /admin/v1/grants'), { identity: 'i', role: 'r', source: 's', expires: 'x' })).toEqual(['/expires']);
});

test('nested closed objects: a role statement, a source type\'s settings (chosen by if/then among alternatives)', () => {
  expect(unknownBodyFields(v('PUT /admin/v1/roles/{}'), { name: 'r', statements: [{ effect: 'allow', action: 'read', resource: '*', oops: 1 }] })).toEqual(['/statements/0/oops']);
  expect(unknownBodyFields(v('POST /admin/v1/sources'), { id: 's', type: 'documents', name: 's', settings: { path: '/tmp', pth: 1 }, xtra: 2 })).toEqual(['/settings/pth', '/xtra']);
});

test('oneOf: only the field no alternative allows; a field another alternative allows is not named', () => {
  expect(unknownBodyFields(v('POST /admin/v1/apply'), { text: 'x', extra: 1 })).toEqual(['/extra']);
  expect(unknownBodyFields(v('POST /admin/v1/apply'), { text: 'x', document: {} })).toEqual([]);
});

test('a route without a body schema takes only an empty object; other schema failures are left to the route', () => {
  expect(unknownBodyFields(v('POST /admin/v1/identities/{}/disable'), { force: true })).toEqual(['/force']);
  expect(unknownBodyFields(v('POST /admin/v1/identities/{}/disable'), {})).toEqual([]);
  expect(unknownBodyFields(v('POST /admin/v1/identities'), { name: 7 })).toEqual([]);
});

test('the message cuts long pointers at 64 characters and names at most 5 fields', () => {
  const long = '/' + 'z'.repeat(500);
  const m = unknownFieldsMessage([long, '/a', '/b', '/c', '/d', '/e', '/f']);
  expect(m).toBe(`the body has fields this route does not accept (spec/openapi-v1.yaml): /${'z'.repeat(62)}…, /a, /b, /c, /d and 2 more`);
  expect(unknownFieldsMessage(['/nmae'])).toBe('the body has a field this route does not accept (spec/openapi-v1.yaml): /nmae');
});

test('a route the spec does not describe cannot be mounted', () => {
  expect(() => closedBody('POST /admin/v1/nowhere')).toThrow('spec/openapi-v1.yaml has no POST, PUT or PATCH operation POST /admin/v1/nowhere');
});

test('a body of the wrong top-level JSON type: the types the schema allows (red team rths); none for a body of an allowed type', () => {
  expect(wrongBodyType(v('POST /admin/v1/identities/{}/disable'), [])).toEqual(['object']);
  expect(wrongBodyType(v('POST /admin/v1/identities/{}/disable'), null)).toEqual(['object']);
  expect(wrongBodyType(v('POST /admin/v1/identities/{}/disable'), {})).toEqual([]);
  expect(wrongBodyType(v('POST /admin/v1/identities/{}/disable'), { force: true })).toEqual([]);
  expect(wrongBodyType(v('POST /admin/v1/policies'), 'x')).toEqual(['array', 'object']);
  expect(wrongBodyType(v('POST /admin/v1/policies'), [{ name: 'p' }])).toEqual([]);
  expect(wrongBodyType(v('POST /admin/v1/identities'), { name: 7 })).toEqual([]);
});

test('wrongBodyType: an array of the right type that fails otherwise (empty, bad items) is left to the route', () => {
  expect(wrongBodyType(v('POST /admin/v1/policies'), [])).toEqual([]);
  expect(wrongBodyType(v('POST /admin/v1/apply'), [])).toEqual(['object']);
  expect(wrongBodyType(v('POST /admin/v1/apply'), { text: 1 })).toEqual([]);
  expect(wrongBodyType(v('PATCH /admin/v1/sources/{}'), 'x')).toEqual(['object']);
});
