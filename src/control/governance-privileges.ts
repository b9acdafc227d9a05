/**
 * The one list of the database privileges governance writes need (task hcg item 3). The admin API
 * and console check a role against it before writing (src/admin/governance-db.ts
 * checkGovernancePrivileges), and `interlock db grant-operator-role` grants what it names
 * (src/control/db.ts grantOperatorRole, through OPERATOR_ROLE_WRITES and OPERATOR_ROLE_FUNCTIONS,
 * derived here), so what the gateway checks and what the command grants cannot drift apart.
 */

/** A family of governance writes: those of the admin API and console (`subject`: token subjects linked to identities), `apply`, and the configuration's claim rules (`claim_rules`). */
export type GovernanceFamily = 'identity' | 'subject' | 'key' | 'source' | 'role' | 'grant' | 'policy' | 'apply' | 'claim_rules';

/**
 * One privilege a write needs: INSERT or DELETE on a table, UPDATE on a table (of the listed columns
 * only, when given), or EXECUTE of the function whose signature is in first place.
 */
export type GovernancePrivilege =
  | readonly [table: string, privilege: 'INSERT' | 'DELETE']
  | readonly [table: string, privilege: 'UPDATE', columns?: readonly string[]]
  | readonly [fn: string, privilege: 'EXECUTE'];

/** The function every governance write records its config event with (each family needs EXECUTE of it). */
export const CONFIG_EVENT_FUNCTION = 'interlock_audit_append_v2(text)';

/** The privileges each family's writes need (besides EXECUTE of CONFIG_EVENT_FUNCTION); `apply`'s are APPLY_PRIVILEGES. */
export const GOVERNANCE_WRITE_PRIVILEGES: Readonly<Record<Exclude<GovernanceFamily, 'apply'>, readonly GovernancePrivilege[]>> = Object.freeze({
  identity: [['identities', 'INSERT'], ['identities', 'UPDATE', ['disabled', 'disabled_at', 'attributes']]],
  // Linking a token subject to an identity and unlinking it (identity link|unlink, task hnu3 item 2).
  subject: [['identity_subjects', 'INSERT'], ['identity_subjects', 'DELETE']],
  key: [['api_keys', 'INSERT'], ['api_keys', 'UPDATE', ['revoked_at']]],
  // Removal deletes the source's grants and catalog and rejects its pending approvals (through the
  // function, which records each rejection: no UPDATE of approvals, red team rtop finding 4); with
  // --force it also unties the policies naming the source (trial nu40) and takes the claim mapping
  // rules naming it out of their mappings (task hlow), only through the function that takes out the
  // rules naming the removed source: no UPDATE of claim_mappings, which would let the family rewrite
  // any claim rule (red team rt41a, task hpriv, migration 20261213190000000).
  source: [['sources', 'INSERT'], ['sources', 'UPDATE'], ['sources', 'DELETE'], ['grants', 'DELETE'], ['catalog_snapshots', 'DELETE'], ['interlock_reject_removed_source_approvals(text,text)', 'EXECUTE'], ['policies', 'UPDATE'], ['policies', 'DELETE'], ['interlock_untie_removed_source_claim_rules(text)', 'EXECUTE']],
  // Removal (role remove --force) revokes the role's grants and unties the policies naming it (trial nu40).
  role: [['roles', 'INSERT'], ['roles', 'UPDATE'], ['roles', 'DELETE'], ['grants', 'DELETE'], ['policies', 'UPDATE'], ['policies', 'DELETE']],
  grant: [['grants', 'INSERT'], ['grants', 'UPDATE', ['granted_by']], ['grants', 'DELETE']],
  policy: [['policies', 'INSERT'], ['policies', 'UPDATE'], ['policies', 'DELETE']],
  // The configuration's role_grants rules recorded for interlock_sync_claim_grants (src/control/claim-rules.ts);
  // a removed rule's claim grants are taken back with it (red team rtcg; rows locked FOR UPDATE SKIP LOCKED).
  claim_rules: [['configured_claim_grants', 'INSERT'], ['configured_claim_grants', 'DELETE'], ['grants', 'UPDATE', ['granted_by']], ['grants', 'DELETE']],
});

/** `apply` changes every kind of object of the admin families, deletes roles and claim mappings, and scans changed sources. */
export const APPLY_PRIVILEGES: readonly GovernancePrivilege[] = Object.freeze([
  ...(['identity', 'key', 'source', 'role', 'grant', 'policy'] as const).flatMap((f) => GOVERNANCE_WRITE_PRIVILEGES[f]),
  ['roles', 'DELETE'],
  ['claim_mappings', 'INSERT'],
  ['claim_mappings', 'UPDATE'],
  ['claim_mappings', 'DELETE'],
  ['catalog_snapshots', 'INSERT'],
  ['catalog_snapshots', 'UPDATE'],
] as GovernancePrivilege[]);

/** The privileges of `family`. */
export function privilegesOf(family: GovernanceFamily): readonly GovernancePrivilege[] {
  return family === 'apply' ? APPLY_PRIVILEGES : GOVERNANCE_WRITE_PRIVILEGES[family];
}

/** Every privilege of every family, `apply` included. */
const ALL_PRIVILEGES: readonly GovernancePrivilege[] = [...Object.values(GOVERNANCE_WRITE_PRIVILEGES).flat(), ...APPLY_PRIVILEGES];

/**
 * Tables the operator role reads without writing them: apply and source removal read approvals; the
 * CLI run with the operator role's URL (e.g. `db sync-claim-rules`) opens the control database by
 * reading the applied migrations, read-only, as the runtime role does (task hnu3 item 1).
 */
const OPERATOR_ROLE_READS = ['approvals', 'interlock_migrations'] as const;

/**
 * The table writes of every privilege above as GRANT clauses, per table (e.g. grants:
 * 'INSERT, UPDATE (granted_by), DELETE'; '' for a table only read). UPDATE names columns only when
 * every privilege naming UPDATE on that table does. Pure; the order of the clauses is INSERT, UPDATE, DELETE.
 */
export function operatorRoleWrites(privileges: readonly GovernancePrivilege[] = ALL_PRIVILEGES, reads: readonly string[] = OPERATOR_ROLE_READS): Record<string, string> {
  const byTable = new Map<string, { insert: boolean; update: boolean; columns: Set<string> | null; delete: boolean }>();
  for (const p of privileges) {
    if (p[1] === 'EXECUTE') continue;
    const t = byTable.get(p[0]) ?? { insert: false, update: false, columns: new Set<string>(), delete: false };
    byTable.set(p[0], t);
    if (p[1] === 'INSERT') t.insert = true;
    else if (p[1] === 'DELETE') t.delete = true;
    else {
      const cols = p[2];
      if (!cols) t.columns = null;
      else if (t.columns) for (const c of cols) t.columns.add(c);
      t.update = true;
    }
  }
  const out: Record<string, string> = {};
  for (const [table, t] of byTable) {
    out[table] = [t.insert ? 'INSERT' : '', t.update ? (t.columns ? `UPDATE (${[...t.columns].join(', ')})` : 'UPDATE') : '', t.delete ? 'DELETE' : ''].filter(Boolean).join(', ');
  }
  for (const table of reads) out[table] ??= '';
  return out;
}

/** Tables the operator role may read, and the writes it may make to each (GRANT clauses): derived from the families' privileges. */
export const OPERATOR_ROLE_WRITES: Readonly<Record<string, string>> = Object.freeze(operatorRoleWrites());

/** Functions the operator role may execute (signatures): every family's EXECUTE privileges and CONFIG_EVENT_FUNCTION. */
export const OPERATOR_ROLE_FUNCTIONS: readonly string[] = Object.freeze([...new Set([CONFIG_EVENT_FUNCTION, ...ALL_PRIVILEGES.filter((p) => p[1] === 'EXECUTE').map((p) => p[0])])]);
