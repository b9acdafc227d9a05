/**
 * Row rules are checked when a role is written (issue 27): schema (rows only on allows for read,
 * write or *) and predicate (src/sql/row-rules/predicate.ts), with "statements/<i>/rows" details.
 */
import { parseSourceRole, rowRuleErrors, checkRowRules } from '../../../src/control/roles';
import { ValidationError } from '../../../src/control/errors';

describe('role row rules', () => {
  it('accepts valid rules and reports each bad one with its statement index', async () => {
    const role = parseSourceRole({
      name: 'r',
      statements: [
        { effect: 'allow', action: 'read', resource: 'public.customer', rows: 'support_rep_id = identity.employee_id' },
        { effect: 'allow', action: '*', resource: 'public.invoice', rows: 'customer_id IN (SELECT 1)' },
        { effect: 'allow', action: 'read', resource: 'public.customer.email', rows: 'true = true' },
      ],
    });
    expect(await rowRuleErrors(role)).toEqual([
      'statements/1/rows: a sub-select is not allowed in a row predicate',
      'statements/2/rows: a row rule belongs on a schema.table resource (got public.customer.email)',
    ]);
    await expect(checkRowRules(role)).rejects.toThrow(ValidationError);
    expect(await rowRuleErrors(parseSourceRole({ name: 'ok', statements: [{ effect: 'allow', action: 'read', resource: 'public.t', rows: "region = ANY(identity.regions) AND kind <> 'x'" }] }))).toEqual([]);
  });

  it('refuses rows on a deny or on describe/discover/request actions by schema', () => {
    expect(() => parseSourceRole({ name: 'd', statements: [{ effect: 'deny', action: 'read', resource: 'public.t', rows: 'a = 1' }] })).toThrow(ValidationError);
    expect(() => parseSourceRole({ name: 'd', statements: [{ effect: 'allow', action: 'describe', resource: 'public.t', rows: 'a = 1' }] })).toThrow(ValidationError);
    expect(() => parseSourceRole({ name: 'd', statements: [{ effect: 'allow', action: 'read', resource: 'public.t', rows: '' }] })).toThrow(ValidationError);
  });
});
