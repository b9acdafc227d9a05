/** Trial nu40 item 9: an interlock file with several mistakes reports each of them once, a policy's rule judged against its own type only. */
import { validateInterlockFileDocument } from '../../../src/declarative/schema';
import { ValidationError } from '../../../src/control/errors';

test('two roles and two policies with mistakes: one line per mistake, none per rule type a policy is not', () => {
  const doc = {
    version: 1,
    roles: [{ name: 'r', statements: [{ effect: 'maybe', action: 'read', resource: 'a.b' }, { effect: 'allow', action: 'bogus', resource: 'a.b' }] }],
    policies: [
      { name: 'p1', rule: { type: 'max_rows', max_rows: 0 } },
      { name: 'p2', rule: { type: 'bogus' } },
      { name: 'p3', rule: { type: 'require_where' } },
      { rule: { type: 'mask_columns', columns: ['a.b.c'], method: 'nope' } },
    ],
  };
  const err = (() => {
    try {
      return validateInterlockFileDocument(doc);
    } catch (e) {
      return e;
    }
  })();
  expect(err).toBeInstanceOf(ValidationError);
  expect({ message: (err as ValidationError).message, details: (err as ValidationError).details }).toEqual({
    message: 'invalid interlock file',
    details: [
      '/roles/0/statements/0/effect: must be equal to one of the allowed values (allow, deny)',
      '/roles/0/statements/1/action: must be equal to one of the allowed values (read, write, describe, discover, request, *)',
      '/policies/0/rule/max_rows: must be >= 1',
      '/policies/1/rule/type: must be one of deny_relations, require_where, max_rows, time_window, mask_columns, hide_documents, restrict_rows',
      "/policies/3: must have required property 'name'",
      '/policies/3/rule/method: must be equal to one of the allowed values (full, partial, hash, null)',
    ],
  });
});

test('an empty file (YAML null), or a document that is not an object, is a ValidationError, not a TypeError', () => {
  for (const doc of [null, undefined, 5, 'text']) {
    let err: unknown;
    try {
      validateInterlockFileDocument(doc);
    } catch (e) {
      err = e;
    }
    expect({ doc, type: (err as Error)?.constructor?.name, message: (err as Error)?.message }).toEqual({ doc, type: 'ValidationError', message: 'invalid interlock file' });
  }
});
