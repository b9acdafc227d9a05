import fc from 'fast-check';
import { AccessEvaluator, type RoleGrant } from '../../../src/governance/evaluator';
import { evaluatePolicies, insideTimeWindow, maskFor } from '../../../src/governance/policies';
import type { Policy, TimeWindowRule } from '../../../generated/policy-v1';

const role = (name: string, statements: Array<[string, string, string]>): RoleGrant['role'] =>
  ({ name, statements: statements.map(([effect, action, resource]) => ({ effect, action, resource })) }) as unknown as RoleGrant['role'];

describe('AccessEvaluator', () => {
  const ev = new AccessEvaluator([
    { sourceId: 'db', role: role('analyst', [['allow', 'read', 'public.*'], ['deny', 'read', 'public.customer.email'], ['allow', 'write', 'public.playlist']]) },
    { sourceId: 'db', role: role('hr', [['deny', 'read', 'hr.salary'], ['allow', 'read', 'hr.people.name']]) },
  ]);
  test('table pattern covers every column; column deny wins', () => {
    expect(ev.decide('db', 'read', { schema: 'public', table: 'customer', column: 'first_name' })).toBe('allow');
    expect(ev.decide('db', 'read', { schema: 'public', table: 'customer', column: 'email' })).toBe('deny');
    expect(ev.decide('db', 'read', { schema: 'private', table: 'x', column: 'a' })).toBe('none');
  });
  test('no grant on another source; actions do not leak across each other', () => {
    expect(ev.decide('other', 'read', { schema: 'public', table: 'customer', column: 'first_name' })).toBe('none');
    expect(ev.decide('db', 'write', { schema: 'public', table: 'customer' })).toBe('none');
    expect(ev.decide('db', 'write', { schema: 'public', table: 'playlist' })).toBe('allow');
  });
  test('read and write imply describe where they are allowed; a read deny withholds the describe it implied (task hfix)', () => {
    expect(ev.decide('db', 'describe', { schema: 'public', table: 'playlist', column: 'name' })).toBe('allow');
    expect(ev.decide('db', 'describe', { schema: 'hr', table: 'people', column: 'name' })).toBe('allow');
    expect(ev.decide('db', 'describe', { schema: 'hr', table: 'people', column: 'salary' })).toBe('none');
    expect(ev.decide('db', 'describe', { schema: 'public', table: 'customer', column: 'email' })).toBe('deny');
    expect(ev.decide('db', 'describe', { schema: 'public', table: 'customer', column: 'first_name' })).toBe('allow');
    expect(ev.decide('db', 'describe', { schema: 'hr', table: 'salary', column: 'amount' })).toBe('deny');
  });
  test('an explicit describe allow describes a column denied to read; a describe deny wins; a write allow implies describe past a read deny', () => {
    const e = new AccessEvaluator([
      { sourceId: 'db', role: role('r', [['allow', 'read', 'public.*'], ['deny', 'read', 'public.t.secret'], ['deny', 'read', 'public.t.pin'], ['allow', 'describe', 'public.t.secret'], ['deny', 'describe', 'public.u.note']]) },
      { sourceId: 'db', role: role('w', [['allow', 'write', 'public.t.pin']]) },
    ]);
    expect(e.decide('db', 'describe', { schema: 'public', table: 't', column: 'secret' })).toBe('allow');
    expect(e.decide('db', 'describe', { schema: 'public', table: 't', column: 'pin' })).toBe('allow');
    expect(e.decide('db', 'describe', { schema: 'public', table: 'u', column: 'note' })).toBe('deny');
    expect(e.decide('db', 'read', { schema: 'public', table: 't', column: 'secret' })).toBe('deny');
  });
  test('a wildcard describe allow does not describe a column a read deny refuses; one naming the column does (task hnu41 item 1)', () => {
    const e = new AccessEvaluator([
      { sourceId: 'db', role: role('analyst', [['allow', 'read', 'public.*'], ['allow', 'describe', 'public.*'], ['deny', 'read', 'public.employee.ssn'], ['deny', 'read', 'public.emp_directory.tax_id'], ['deny', 'read', 'public.emp_directory.pin'], ['allow', 'describe', 'public.emp_directory.*'], ['allow', 'describe', 'public.*.pin'], ['allow', 'describe', 'public.audit_log']]) },
    ]);
    const d = (table: string, column?: string) => e.decide('db', 'describe', { schema: 'public', table, ...(column ? { column } : {}) });
    expect([d('employee', 'ssn'), d('employee', 'name'), d('emp_directory', 'tax_id'), d('emp_directory', 'pin'), d('audit_log', 'id'), d('audit_log')]).toEqual(['deny', 'allow', 'deny', 'allow', 'allow', 'allow']);
  });
  test('zero-column reads need a table pattern or one readable column; a table deny wins', () => {
    expect(ev.decideTable('db', 'read', 'hr', 'people', ['name', 'ssn'])).toBe('allow');
    expect(ev.decideTable('db', 'read', 'hr', 'salary', ['amount'])).toBe('deny');
    expect(ev.decideTable('db', 'write', 'hr', 'people', [])).toBe('none');
  });
  test('statements and roles are reported exactly', () => {
    expect(ev.roleNames('db')).toEqual(['analyst', 'hr']);
    expect(ev.statements('db').deny).toEqual([{ action: 'read', resource: 'hr.salary' }, { action: 'read', resource: 'public.customer.email' }]);
    expect(ev.hasGrant('other')).toBe(false);
  });
  test('per-source answers are computed once, shared and frozen (issue 28 item 3)', () => {
    const e = new AccessEvaluator([{ sourceId: 'db', role: role('r', [['allow', 'read', 'public.*'], ['deny', 'write', 'public.t']]) }]);
    expect(e.statements('db')).toBe(e.statements('db'));
    expect(e.roleNames('db')).toBe(e.roleNames('db'));
    expect(e.statements('db')).toEqual({ allow: [{ action: 'read', resource: 'public.*' }], deny: [{ action: 'write', resource: 'public.t' }] });
    expect(e.hasReadDeny('db')).toBe(false);
    expect(e.hasRowRules('db')).toBe(false);
    expect(e.statements('other')).toEqual({ allow: [], deny: [] });
    // A caller that tried to alter a shared answer throws instead of changing the next caller's.
    expect(() => e.roleNames('db').push('intruder')).toThrow(TypeError);
    expect(() => e.statements('db').deny.pop()).toThrow(TypeError);
    expect(() => ((e.statements('db').allow[0] as { resource: string }).resource = '*')).toThrow(TypeError);
    expect(e.roleNames('db')).toEqual(['r']);
    expect(e.statements('db').deny).toEqual([{ action: 'write', resource: 'public.t' }]);
  });

  // Property: a decision is 'allow' exactly when some allow statement covers the resource and no deny does.
  const name = fc.constantFrom('a', 'b', 'c');
  const pattern = fc.oneof(
    fc.tuple(fc.constantFrom('s', 't', '*'), fc.constantFrom('a', 'b', '*')).map(([s, t]) => `${s}.${t}`),
    fc.tuple(fc.constantFrom('s', 't', '*'), fc.constantFrom('a', 'b', '*'), fc.constantFrom('x', 'y', '*')).map(([s, t, c]) => `${s}.${t}.${c}`),
  );
  const stmt = fc.tuple(fc.constantFrom('allow', 'deny'), fc.constantFrom('read', 'write', '*'), pattern);
  test('property: deny wins, and allow needs a covering allow statement', () => {
    fc.assert(
      fc.property(fc.array(stmt, { maxLength: 8 }), fc.constantFrom('s', 't'), name, fc.constantFrom('x', 'y'), fc.constantFrom('read', 'write'), (stmts, schema, table, column, action) => {
        const e = new AccessEvaluator([{ sourceId: 'src', role: role('r', stmts as Array<[string, string, string]>) }]);
        const covers = (p: string) => {
          const parts = p.split('.');
          const m = (a: string, b: string) => a === '*' || a === b;
          return parts.length === 2 ? m(parts[0], schema) && m(parts[1], table) : m(parts[0], schema) && m(parts[1], table) && m(parts[2], column);
        };
        const applies = ([, a, p]: [string, string, string]) => (a === '*' || a === action) && covers(p);
        const expected = stmts.some((s) => s[0] === 'deny' && applies(s)) ? 'deny' : stmts.some((s) => s[0] === 'allow' && applies(s)) ? 'allow' : 'none';
        expect(e.decide('src', action as 'read', { schema, table, column })).toBe(expected);
      }),
      { numRuns: 500 },
    );
  });
});

describe('policies', () => {
  const subject = { identityId: 'idn_1', identityName: 'agent', roles: ['analyst'], sourceId: 'db' };
  const now = new Date('2026-11-30T10:00:00Z'); // a Monday
  const p = (name: string, rule: unknown, applies_to?: Policy['applies_to']): Policy => ({ name, rule: rule as Policy['rule'], ...(applies_to ? { applies_to } : {}) });
  test('deny_relations refuses matching reads, names the policy', () => {
    const v = evaluatePolicies([p('no-hr', { type: 'deny_relations', relations: ['hr.*'] })], subject, { action: 'read', relations: [{ schema: 'hr', table: 'people', action: 'read' }], writes: [], now });
    expect(v).toEqual({ ok: false, policy: 'no-hr', reason: 'Policy no-hr refuses read on hr.people.' });
  });
  test('applies_to scopes a policy to identities, roles and sources', () => {
    const rule = { type: 'deny_relations' as const, relations: ['public.*'] };
    const req = { action: 'read' as const, relations: [{ schema: 'public', table: 't', action: 'read' as const }], writes: [], now };
    expect(evaluatePolicies([p('x', rule, { sources: ['other'] })], subject, req).ok).toBe(true);
    expect(evaluatePolicies([p('x', rule, { roles: ['analyst'] })], subject, req).ok).toBe(false);
    expect(evaluatePolicies([p('x', rule, { identities: ['agent'] })], subject, req).ok).toBe(false);
    expect(evaluatePolicies([{ ...p('x', rule), enabled: false }], subject, req).ok).toBe(true);
  });
  test('require_where refuses UPDATE/DELETE without WHERE only', () => {
    const pol = [p('where', { type: 'require_where' })];
    const w = (hasWhere: boolean) => evaluatePolicies(pol, subject, { action: 'write', relations: [], writes: [{ schema: 'public', table: 't', operation: 'delete', hasWhere }], now });
    expect(w(false).ok).toBe(false);
    expect(w(true).ok).toBe(true);
  });
  test('max_rows takes the smallest cap; masks are collected; time windows use the rule time zone', () => {
    const v = evaluatePolicies([p('a', { type: 'max_rows', max_rows: 50 }), p('b', { type: 'max_rows', max_rows: 20 }), p('m', { type: 'mask_columns', columns: ['public.customer.email'], method: 'partial' })], subject, { action: 'read', relations: [], writes: [], now });
    expect(v.ok && v.maxRows).toBe(20);
    expect(v.ok && maskFor(v.maskPatterns, 'public', 'customer', 'email')).toBe('partial');
    expect(v.ok && maskFor(v.maskPatterns, 'public', 'customer', 'phone')).toBeNull();
    const rule = { type: 'time_window', days: ['mon'], start: '09:00', end: '17:00' } as unknown as TimeWindowRule;
    expect(insideTimeWindow(rule, now)).toBe(true);
    expect(insideTimeWindow({ ...rule, timezone: 'America/Los_Angeles' }, now)).toBe(false);
    expect(insideTimeWindow(rule, new Date('2026-12-01T10:00:00Z'))).toBe(false);
  });
  test('the strongest mask wins', () => {
    expect(maskFor([{ parts: ['public', 'customer', '*'], method: 'partial' }, { parts: ['public', '*', 'email'], method: 'null' }], 'public', 'customer', 'email')).toBe('null');
  });
});

describe('one-part resources on a SQL source (red team rtn4 item 4b): a deny fails closed, an allow allows nothing', () => {
  const ev = new AccessEvaluator([{ sourceId: 'db', role: role('d', [['allow', 'read', 'public.*'], ['allow', 'read', 'sales.*'], ['deny', 'read', 'email'], ['deny', '*', 'invoice'], ['allow', 'read', 'secret']]) }]);
  test('a one-part deny denies every column of that name, in any schema and relation', () => {
    expect(ev.decide('db', 'read', { schema: 'public', table: 'customer', column: 'email' })).toBe('deny');
    expect(ev.decide('db', 'read', { schema: 'sales', table: 'lead', column: 'email' })).toBe('deny');
    expect(ev.decide('db', 'read', { schema: 'public', table: 'customer', column: 'first_name' })).toBe('allow');
    // The describe the read allow implied is withheld where the read deny wins (task hfix).
    expect(ev.decide('db', 'describe', { schema: 'public', table: 'customer', column: 'email' })).toBe('deny');
  });
  test('and every relation of that name (table level and each of its columns)', () => {
    expect(ev.decide('db', 'read', { schema: 'public', table: 'invoice' })).toBe('deny');
    expect(ev.decide('db', 'describe', { schema: 'sales', table: 'invoice', column: 'total' })).toBe('deny');
    expect(ev.decideTable('db', 'read', 'public', 'invoice', ['total'])).toBe('deny');
    expect(ev.decideTable('db', 'read', 'public', 'customer', ['first_name', 'email'])).toBe('allow');
  });
  test('a one-part allow allows nothing (no relation, column or row term)', () => {
    const only = new AccessEvaluator([{ sourceId: 'db', role: role('a', [['allow', 'read', 'secret'], ['allow', 'read', 'customer']]) }]);
    expect(only.decide('db', 'read', { schema: 'public', table: 'customer', column: 'secret' })).toBe('none');
    expect(only.decide('db', 'read', { schema: 'public', table: 'customer' })).toBe('none');
    expect(only.decideTable('db', 'read', 'public', 'customer', ['secret'])).toBe('none');
    expect(only.rowTerms('db', 'public', 'customer')).toEqual([]);
    expect(only.mentionsTable('db', 'read', 'public', 'customer')).toBe(false);
  });
  test('document sources keep matching one-part paths as whole strings (decideOpaque)', () => {
    const docs = new AccessEvaluator([{ sourceId: 'docs', role: role('h', [['allow', 'discover', '*'], ['deny', 'discover', 'hr']]) }]);
    expect(docs.decideOpaque('docs', 'discover', 'hr')).toBe('deny');
    expect(docs.decideOpaque('docs', 'discover', 'runbooks')).toBe('allow');
  });
});
