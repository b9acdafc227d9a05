/**
 * Source roles (spec/role-v1.schema.json): named sets of allow/deny statements (deny wins).
 * decisions.md "Governance model". Grants are in grants.ts.
 */
import { validateSourceRole } from '../../generated/validators';
import type { SourceRole } from '../../generated/role-v1';
import { withTransaction, type ControlDb } from './db';
import { recordChange, type ChangeActor } from './change-audit';
import { ConflictError, formatSchemaErrors, NotFoundError, ValidationError } from './errors';
import { untiePolicies } from './policies';
import { iso } from './ids';
import { initSqlParser } from '../sql/parser';
import { parseRowPredicate, RowPredicateError } from '../sql/row-rules/predicate';
import { loadKnownSources, loadSqlGrantTargets, refuseOnePartSqlResources, refuseUnknownRoleNames } from './catalog-names';

export type { SourceRole, RoleStatement } from '../../generated/role-v1';

/** A stored role: the validated SourceRole (description and audiences always present) plus timestamps. */
export type SourceRoleRecord = SourceRole & { description: string; audiences: string[]; createdAt: string; updatedAt: string };

/** A row of table roles. */
export interface RoleRow {
  name: string;
  description: string;
  audiences: string[];
  statements: SourceRole['statements'];
  created_at: Date;
  updated_at: Date;
}

const COLS = 'name, description, audiences, statements, created_at, updated_at';

/** Maps a roles row (internal; used by grants.ts). */
export function roleRowToRecord(r: RoleRow): SourceRoleRecord {
  return { name: r.name, description: r.description, audiences: r.audiences, statements: r.statements, createdAt: iso(r.created_at)!, updatedAt: iso(r.updated_at)! };
}

/** Validates a role (parsed JSON/YAML) against spec/role-v1.schema.json. Throws ValidationError with "path: message" details. */
export function parseSourceRole(input: unknown): SourceRole {
  if (validateSourceRole(input)) return input as SourceRole;
  throw new ValidationError('invalid role', formatSchemaErrors(validateSourceRole.errors));
}

/**
 * Checks the row rules (`rows`, issue 27) of a role's statements with the SQL parser
 * (src/sql/row-rules/predicate.ts): "statements/<i>/rows: <what is wrong>" per bad predicate, or
 * a rows on a resource that is not `schema.table` (or `*`). Empty when all are valid. Loads the parser.
 */
export async function rowRuleErrors(role: SourceRole): Promise<string[]> {
  if (!role.statements.some((s) => s.rows !== undefined)) return [];
  await initSqlParser();
  const out: string[] = [];
  role.statements.forEach((s, i) => {
    if (s.rows === undefined) return;
    if (s.resource !== '*' && s.resource.split('.').length !== 2) out.push(`statements/${i}/rows: a row rule belongs on a schema.table resource (got ${s.resource})`);
    try {
      parseRowPredicate(s.rows);
    } catch (err) {
      if (!(err instanceof RowPredicateError)) throw err;
      out.push(`statements/${i}/rows: ${err.message}`);
    }
  });
  return out;
}

/** Throws ValidationError("invalid role", details) when rowRuleErrors finds any. */
export async function checkRowRules(role: SourceRole): Promise<void> {
  const errors = await rowRuleErrors(role);
  if (errors.length) throw new ValidationError(`invalid role ${JSON.stringify(role.name)}: a row rule is not valid`, errors);
}

/**
 * Creates or replaces the role named role.name (validated first, row rules too). Returns the stored
 * role and whether it was new. Records role_created or role_updated ({role}) in the same
 * transaction; a replacement that changes nothing records nothing. A relation or column resource
 * that no registered source's scanned catalogue holds is a ValidationError ("did you mean" when one
 * is close) unless `opts.allowUnknownNames` (src/control/catalog-names.ts, task hnu4a item 1).
 * A role already granted on a PostgreSQL source whose relation or column statements have a one-part
 * resource (e.g. `email`, which matches nothing there) is always a ValidationError listing the
 * qualified names it may mean (refuseOnePartSqlResources, red team rtn4 item 4b).
 */
export async function upsertRole(db: ControlDb, input: unknown, actor: ChangeActor = {}, opts: { allowUnknownNames?: boolean } = {}): Promise<{ role: SourceRoleRecord; created: boolean }> {
  const role = parseSourceRole(input);
  await checkRowRules(role);
  refuseUnknownRoleNames(await loadKnownSources(db), role, opts.allowUnknownNames);
  return withTransaction(db, async (c) => {
    refuseOnePartSqlResources(role, await loadSqlGrantTargets(c, { roleName: role.name }));
    const r = await c.query<RoleRow & { inserted: boolean }>(
      `INSERT INTO roles (name, description, audiences, statements) VALUES ($1, $2, $3, $4)
       ON CONFLICT (name) DO UPDATE SET description = EXCLUDED.description, audiences = EXCLUDED.audiences,
         statements = EXCLUDED.statements, updated_at = now()
       WHERE (roles.description, roles.audiences, roles.statements) IS DISTINCT FROM (EXCLUDED.description, EXCLUDED.audiences, EXCLUDED.statements)
       RETURNING ${COLS}, (xmax = 0) AS inserted`,
      [role.name, role.description ?? '', role.audiences ?? [], JSON.stringify(role.statements)],
    );
    if (!r.rows[0]) {
      const same = await c.query<RoleRow>(`SELECT ${COLS} FROM roles WHERE name = $1`, [role.name]);
      return { role: roleRowToRecord(same.rows[0]), created: false };
    }
    const created = r.rows[0].inserted;
    await recordChange(c, actor, created ? 'role_created' : 'role_updated', { role: role.name });
    return { role: roleRowToRecord(r.rows[0]), created };
  });
}

/** The role called `name`, or null. */
export async function getRole(db: ControlDb, name: string): Promise<SourceRoleRecord | null> {
  const r = await db.pool.query<RoleRow>(`SELECT ${COLS} FROM roles WHERE name = $1`, [name]);
  return r.rows[0] ? roleRowToRecord(r.rows[0]) : null;
}

/** Every role, by name. */
export async function listRoles(db: ControlDb): Promise<SourceRoleRecord[]> {
  const r = await db.pool.query<RoleRow>(`SELECT ${COLS} FROM roles ORDER BY name`);
  return r.rows.map(roleRowToRecord);
}

/** What removeRole did. */
export interface RoleRemoval {
  name: string;
  removed: true;
  /** Grants of the role revoked because of --force, as "IDENTITY on SOURCE"; [] otherwise. */
  grantsRevoked: string[];
  /** Policies that named only this role in `applies_to.roles`, removed because of --force (names). */
  policiesRemoved: string[];
  /** Policies that named this role among others, which no longer name it (--force; names). */
  policiesDetached: string[];
}

/**
 * Removes a role (`interlock role remove`, DELETE /admin/v1/roles/{name}; trial nu40 item 5), in one
 * transaction. Refused (ConflictError, exit 2 / 409) whatever `force` while a claim rule names it
 * (a claim mapping's role_grants or the gateway configuration's rules: details their issuers; as
 * `apply` refuses a claim mapping naming a role that would not exist). Refused while it is granted
 * (details: "IDENTITY on SOURCE") or policies name it in `applies_to.roles` (details: their names),
 * unless `force`, as `source remove` does: the grants are then revoked (one grant_revoked each), a
 * policy naming only this role is removed, the others no longer name it (untiePolicies). Records
 * role_removed ({role, grantsRevoked}). Throws NotFoundError.
 */
export async function removeRole(db: ControlDb, name: string, opts: { operator: string; force?: boolean }): Promise<RoleRemoval> {
  const actor: ChangeActor = { operator: opts.operator };
  return withTransaction(db, async (c) => {
    const found = await c.query('SELECT name FROM roles WHERE name = $1 FOR UPDATE', [name]);
    if (found.rowCount === 0) throw new NotFoundError(`role "${name}" not found`);
    const rules = await c.query<{ issuer: string }>(
      `SELECT issuer FROM claim_mappings m WHERE EXISTS (SELECT 1 FROM jsonb_array_elements(m.role_grants) g WHERE g->>'role' = $1)
       UNION SELECT issuer FROM configured_claim_grants WHERE role_name = $1 ORDER BY 1`,
      [name],
    );
    if (rules.rows.length > 0) {
      throw new ConflictError(`role "${name}" is named by the claim rules of ${rules.rows.length} issuer(s): change them first (claim mappings: interlock apply; configured rules: the gateway configuration's auth.issuers)`, rules.rows.map((r) => r.issuer));
    }
    const grants = await c.query<{ identity_id: string; identity: string; source_id: string }>(
      `SELECT g.identity_id, i.name AS identity, g.source_id FROM grants g JOIN identities i ON i.id = g.identity_id
       WHERE g.role_name = $1 ORDER BY i.name, g.source_id FOR UPDATE OF g`,
      [name],
    );
    const held = grants.rows.map((g) => `${g.identity} on ${g.source_id}`);
    if (held.length > 0 && !opts.force) {
      throw new ConflictError(`role "${name}" is granted ${held.length} time(s): revoke the grants first, or force the removal (they are then revoked)`, held);
    }
    const policies = await untiePolicies(c, 'roles', name, { operator: opts.operator, force: opts.force, what: `role "${name}"` });
    for (const g of grants.rows) {
      await c.query('DELETE FROM grants WHERE identity_id = $1 AND role_name = $2 AND source_id = $3', [g.identity_id, name, g.source_id]);
      await recordChange(c, actor, 'grant_revoked', { identityId: g.identity_id, identity: g.identity, role: name, reason: 'role_removed' }, g.source_id);
    }
    await c.query('DELETE FROM roles WHERE name = $1', [name]);
    await recordChange(c, actor, 'role_removed', { role: name, grantsRevoked: held.length });
    return { name, removed: true, grantsRevoked: held, policiesRemoved: policies.removed, policiesDetached: policies.detached };
  });
}
