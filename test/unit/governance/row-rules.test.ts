/**
 * Issue 27: the rule of a relation for one caller (src/governance/row-rules.ts) with the policies'
 * restrict_rows predicates (src/governance/policies.ts policyRowRestrictions): role terms ORed,
 * policy predicates ANDed (never widening), ancestors' terms and restrictions carried, the write
 * action apart from read.
 */
import { AccessEvaluator } from '../../../src/governance/evaluator';
import { policyRowRestrictions } from '../../../src/governance/policies';
import { relationRowRule, rowRuleText, sameRowRule } from '../../../src/governance/row-rules';
import { NO_HIERARCHY, type RelationHierarchy } from '../../../src/sql/hierarchy';
import type { Policy } from '../../../generated/policy-v1';
import type { SourceRole } from '../../../src/control/roles';

const ev = (...statements: SourceRole['statements'][number][]) => new AccessEvaluator([{ sourceId: 's', role: { name: 'r', statements: statements as SourceRole['statements'] } }]);
const subject = { identityId: 'i1', identityName: 'agent', roles: ['r'], sourceId: 's' };
const restrict = (name: string, relations: [string, ...string[]], rows: string, more: Partial<Policy> = {}, actions?: ['read' | 'write', ...Array<'read' | 'write'>]): Policy => ({ name, rule: { type: 'restrict_rows', relations, rows, ...(actions ? { actions } : {}) }, ...more });
/** public.ticket_eu is a partition of public.ticket. */
const TREE: RelationHierarchy = {
  ancestors: (s, t) => (s === 'public' && t === 'ticket_eu' ? [{ schema: 'public', name: 'ticket' }] : []),
  descendants: (s, t) => (s === 'public' && t === 'ticket' ? [{ schema: 'public', name: 'ticket_eu' }] : []),
};

describe('relationRowRule with policies', () => {
  it('ORs role terms and ANDs policy predicates; an allow without rows leaves only the policies', () => {
    const e = ev({ effect: 'allow', action: 'read', resource: 'public.t', rows: 'a = 1' }, { effect: 'allow', action: 'read', resource: 'public.t', rows: 'b = 2' });
    const p = policyRowRestrictions([restrict('z', ['public.t'], 'c = 3'), restrict('y', ['public.*'], 'd = 4')], subject);
    const rule = relationRowRule(e, 's', 'public', 't', NO_HIERARCHY, p)!;
    expect(rule.terms.map((t) => t.rows)).toEqual(['a = 1', 'b = 2']);
    expect(rule.restrictions).toEqual([{ policy: 'z', rows: 'c = 3' }, { policy: 'y', rows: 'd = 4' }].sort((a, b) => (a.rows < b.rows ? -1 : 1)));
    expect(rowRuleText(rule)).toBe('((a = 1) OR (b = 2)) AND (c = 3) AND (d = 4)');
    const all = relationRowRule(ev({ effect: 'allow', action: 'read', resource: 'public.*' }), 's', 'public', 't', NO_HIERARCHY, p)!;
    expect(all.terms).toEqual([]);
    expect(rowRuleText(all)).toBe('(c = 3) AND (d = 4)');
    expect(relationRowRule(ev({ effect: 'allow', action: 'read', resource: 'public.*' }), 's', 'public', 't', NO_HIERARCHY)).toBeNull();
  });

  it('no covering allow: null (step 3 refuses), whatever the policies say', () => {
    expect(relationRowRule(ev({ effect: 'allow', action: 'read', resource: 'public.u' }), 's', 'public', 't', NO_HIERARCHY, policyRowRestrictions([restrict('p', ['*'], 'a = 1')], subject))).toBeNull();
  });

  it('a policy selects by applies_to, enabled and actions', () => {
    const e = ev({ effect: 'allow', action: '*', resource: 'public.t' });
    const of = (ps: Policy[], action: 'read' | 'write' = 'read') => relationRowRule(e, 's', 'public', 't', NO_HIERARCHY, policyRowRestrictions(ps, subject), action);
    expect(of([restrict('p', ['public.t'], 'a = 1', { applies_to: { identities: ['other'] } })])).toBeNull();
    expect(of([restrict('p', ['public.t'], 'a = 1', { applies_to: { roles: ['r'], sources: ['s'] } })])?.restrictions).toEqual([{ policy: 'p', rows: 'a = 1' }]);
    expect(of([restrict('p', ['public.t'], 'a = 1', { enabled: false })])).toBeNull();
    expect(of([restrict('p', ['public.t'], 'a = 1', {}, ['write'])])).toBeNull();
    expect(of([restrict('p', ['public.t'], 'a = 1', {}, ['write'])], 'write')?.restrictions).toEqual([{ policy: 'p', rows: 'a = 1' }]);
    expect(policyRowRestrictions([restrict('p', ['public.t'], 'a = 1', { enabled: false })], subject).any).toBe(false);
  });

  it("a policy on a parent rules its partitions; one on a partition only makes the parent's rule differ (the read of the parent is then refused)", () => {
    const e = ev({ effect: 'allow', action: 'read', resource: 'public.ticket' });
    const onParent = policyRowRestrictions([restrict('p', ['public.ticket'], "region = 'eu'")], subject);
    const parent = relationRowRule(e, 's', 'public', 'ticket', TREE, onParent);
    expect(sameRowRule(parent, relationRowRule(e, 's', 'public', 'ticket_eu', TREE, onParent))).toBe(true);
    const onChild = policyRowRestrictions([restrict('p', ['public.ticket_eu'], "region = 'eu'")], subject);
    expect(relationRowRule(e, 's', 'public', 'ticket', TREE, onChild)).toBeNull();
    expect(sameRowRule(relationRowRule(e, 's', 'public', 'ticket', TREE, onChild), relationRowRule(e, 's', 'public', 'ticket_eu', TREE, onChild))).toBe(false);
  });

  it('the write rule comes from write allows only', () => {
    const e = ev({ effect: 'allow', action: 'read', resource: 'public.t', rows: 'a = 1' }, { effect: 'allow', action: 'write', resource: 'public.t', rows: 'b = 2' });
    expect(relationRowRule(e, 's', 'public', 't', NO_HIERARCHY, undefined, 'write')?.terms.map((t) => t.rows)).toEqual(['b = 2']);
    expect(relationRowRule(e, 's', 'public', 't', NO_HIERARCHY)?.terms.map((t) => t.rows)).toEqual(['a = 1']);
  });
});
