/**
 * Task hcg item 3: what `interlock db grant-operator-role` grants (OPERATOR_ROLE_WRITES,
 * OPERATOR_ROLE_FUNCTIONS) is derived from the privileges the gateway checks per family
 * (GOVERNANCE_WRITE_PRIVILEGES, APPLY_PRIVILEGES), so the two cannot drift.
 */
import { APPLY_PRIVILEGES, GOVERNANCE_WRITE_PRIVILEGES, OPERATOR_ROLE_FUNCTIONS, OPERATOR_ROLE_WRITES, operatorRoleWrites, type GovernancePrivilege } from '../../../src/control/governance-privileges';
import { OPERATOR_ROLE_WRITES as FROM_DB } from '../../../src/control/db';

test('the operator role is granted exactly what the families need (the list before hcg, and the configuration\'s claim rules)', () => {
  expect(FROM_DB).toBe(OPERATOR_ROLE_WRITES);
  expect(OPERATOR_ROLE_WRITES).toEqual({
    identities: 'INSERT, UPDATE (disabled, disabled_at, attributes)',
    api_keys: 'INSERT, UPDATE (revoked_at)',
    sources: 'INSERT, UPDATE, DELETE',
    roles: 'INSERT, UPDATE, DELETE',
    grants: 'INSERT, UPDATE (granted_by), DELETE',
    policies: 'INSERT, UPDATE, DELETE',
    claim_mappings: 'INSERT, UPDATE, DELETE',
    catalog_snapshots: 'INSERT, UPDATE, DELETE',
    configured_claim_grants: 'INSERT, DELETE',
    identity_subjects: 'INSERT, DELETE',
    approvals: '',
    interlock_migrations: '',
  });
  expect(OPERATOR_ROLE_FUNCTIONS).toEqual(['interlock_audit_append_v2(text)', 'interlock_reject_removed_source_approvals(text,text)', 'interlock_untie_removed_source_claim_rules(text)']);
});

test('every privilege a family is checked for is granted, column by column', () => {
  const granted = (p: GovernancePrivilege): boolean => {
    if (p[1] === 'EXECUTE') return OPERATOR_ROLE_FUNCTIONS.includes(p[0]);
    const clause = OPERATOR_ROLE_WRITES[p[0]] ?? '';
    if (p[1] !== 'UPDATE') return clause.split(', ').includes(p[1]);
    const m = /UPDATE(?: \(([^)]*)\))?/.exec(clause);
    return !!m && (m[1] === undefined || (p[2] !== undefined && p[2].every((c) => m[1].split(', ').includes(c))));
  };
  const all = [...Object.values(GOVERNANCE_WRITE_PRIVILEGES).flat(), ...APPLY_PRIVILEGES];
  expect(all.filter((p) => !granted(p))).toEqual([]);
  // apply does not write the configuration's claim rules.
  expect(APPLY_PRIVILEGES.filter((p) => p[0] === 'configured_claim_grants')).toEqual([]);
});

test('operatorRoleWrites: column lists are merged, an UPDATE of the whole table wins, reads come last and empty', () => {
  expect(operatorRoleWrites([['t', 'UPDATE', ['a']], ['t', 'DELETE'], ['t', 'UPDATE', ['b', 'a']], ['u', 'UPDATE', ['x']], ['u', 'UPDATE'], ['f(text)', 'EXECUTE']], ['r', 't'])).toEqual({
    t: 'UPDATE (a, b), DELETE',
    u: 'UPDATE',
    r: '',
  });
});
