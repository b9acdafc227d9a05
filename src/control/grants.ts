/**
 * Grants: identity × role × source (decisions.md "Governance model"). A grant is what makes a
 * source visible to an identity; the role's statements say what it may do there.
 */
import type pg from 'pg';
import { isForeignKeyViolation, withTransaction, type ControlDb } from './db';
import { recordChange, type ChangeActor } from './change-audit';
import { NotFoundError } from './errors';
import { loadSqlGrantTargets, refuseOnePartSqlResources } from './catalog-names';
import { iso } from './ids';
import { roleRowToRecord, type RoleRow, type SourceRoleRecord } from './roles';

/** One grant. */
export interface GrantRecord {
  identityId: string;
  identityName: string;
  roleName: string;
  sourceId: string;
  createdAt: string;
}

/**
 * Inserts an operator's grant on `c` (a pool or a transaction's client); a claims grant of the same
 * (identity, role, source) becomes the operator's (granted_by 'operator'), so a later change of the
 * token's claims no longer removes it. True when a row was added or taken over. Two statements, not
 * ON CONFLICT DO UPDATE, so that a role with INSERT but no UPDATE on grants (the gateway's runtime
 * role) can still add grants that do not conflict.
 */
export async function insertOperatorGrant(c: Pick<pg.ClientBase, 'query'>, identityId: string, roleName: string, sourceId: string): Promise<boolean> {
  // Twice at most: a claims grant removed by a claim sync between the two statements is inserted again.
  for (let attempt = 0; attempt < 2; attempt++) {
    const r = await c.query('INSERT INTO grants (identity_id, role_name, source_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', [identityId, roleName, sourceId]);
    if (r.rowCount === 1) return true;
    const u = await c.query("UPDATE grants SET granted_by = 'operator' WHERE identity_id = $1 AND role_name = $2 AND source_id = $3 AND granted_by <> 'operator' RETURNING 1", [identityId, roleName, sourceId]);
    if (u.rowCount === 1) return true;
    const still = await c.query("SELECT 1 FROM grants WHERE identity_id = $1 AND role_name = $2 AND source_id = $3 AND granted_by = 'operator'", [identityId, roleName, sourceId]);
    if (still.rowCount === 1) return false;
  }
  return false;
}

/**
 * Grants `roleName` on `sourceId` to the identity. Returns false when the operator's grant already
 * existed (true when a claims grant of the same triple was taken over). A grant that adds something
 * records grant_added ({identityId, identity, role}, source_id) in the same transaction.
 * Throws NotFoundError naming whichever of identity, role or source does not exist, and
 * ValidationError when the source is PostgreSQL and a relation or column statement of the role has
 * a one-part resource (refuseOnePartSqlResources: it would match nothing there; red team rtn4 item 4b).
 */
export async function grantRole(db: ControlDb, g: { identityId: string; roleName: string; sourceId: string }, actor: ChangeActor = {}): Promise<boolean> {
  try {
    return await withTransaction(db, async (c) => {
      await refuseOnePartGrant(c, g.roleName, g.sourceId);
      const added = await insertOperatorGrant(c, g.identityId, g.roleName, g.sourceId);
      if (added) await recordGrantChange(c, actor, 'grant_added', g);
      return added;
    });
  } catch (err) {
    if (!isForeignKeyViolation(err)) throw err;
    const [i, ro, s] = await Promise.all([
      db.pool.query('SELECT 1 FROM identities WHERE id = $1', [g.identityId]),
      db.pool.query('SELECT 1 FROM roles WHERE name = $1', [g.roleName]),
      db.pool.query('SELECT 1 FROM sources WHERE id = $1', [g.sourceId]),
    ]);
    if (i.rowCount === 0) throw new NotFoundError(`identity ${g.identityId} not found`);
    if (ro.rowCount === 0) throw new NotFoundError(`role "${g.roleName}" not found`);
    if (s.rowCount === 0) throw new NotFoundError(`source "${g.sourceId}" not found`);
    throw err;
  }
}

/** Throws refuseOnePartSqlResources's ValidationError when granting `roleName` on `sourceId` would put a one-part resource on a PostgreSQL source; nothing when either does not exist (the insert reports it). */
async function refuseOnePartGrant(c: pg.ClientBase, roleName: string, sourceId: string): Promise<void> {
  const r = await c.query<{ name: string; statements: SourceRoleRecord['statements'] }>('SELECT name, statements FROM roles WHERE name = $1', [roleName]);
  if (r.rows[0]) refuseOnePartSqlResources(r.rows[0], await loadSqlGrantTargets(c, { sourceIds: [sourceId] }));
}

async function recordGrantChange(c: pg.ClientBase, actor: ChangeActor, decision: string, g: { identityId: string; roleName: string; sourceId: string }): Promise<void> {
  const name = await c.query<{ name: string }>('SELECT name FROM identities WHERE id = $1', [g.identityId]);
  await recordChange(c, actor, decision, { identityId: g.identityId, identity: name.rows[0]?.name ?? null, role: g.roleName }, g.sourceId);
}

/** Removes a grant. Returns false when there was no such grant; a removal records grant_revoked (as grant_added) in its transaction. */
export async function revokeGrant(db: ControlDb, g: { identityId: string; roleName: string; sourceId: string }, actor: ChangeActor = {}): Promise<boolean> {
  return withTransaction(db, async (c) => {
    const r = await c.query('DELETE FROM grants WHERE identity_id = $1 AND role_name = $2 AND source_id = $3', [g.identityId, g.roleName, g.sourceId]);
    if (r.rowCount !== 1) return false;
    await recordGrantChange(c, actor, 'grant_revoked', g);
    return true;
  });
}

/** Grants, optionally filtered, ordered by identity name, source, role. */
export async function listGrants(db: ControlDb, filter: { identityId?: string; sourceId?: string; roleName?: string } = {}): Promise<GrantRecord[]> {
  const r = await db.pool.query<{ identity_id: string; identity_name: string; role_name: string; source_id: string; created_at: Date }>(
    `SELECT g.identity_id, i.name AS identity_name, g.role_name, g.source_id, g.created_at
     FROM grants g JOIN identities i ON i.id = g.identity_id
     WHERE ($1::text IS NULL OR g.identity_id = $1) AND ($2::text IS NULL OR g.source_id = $2) AND ($3::text IS NULL OR g.role_name = $3)
     ORDER BY i.name, g.source_id, g.role_name`,
    [filter.identityId ?? null, filter.sourceId ?? null, filter.roleName ?? null],
  );
  return r.rows.map((x) => ({ identityId: x.identity_id, identityName: x.identity_name, roleName: x.role_name, sourceId: x.source_id, createdAt: iso(x.created_at)! }));
}

/**
 * Every (source, role) granted to the identity, with the role's statements, in one query, ordered
 * by source then role. Includes disabled sources (the pipeline answers those as unavailable).
 * Reads interlock_effective_grants (migration 20261210270000000, task hcl): a claim grant counts
 * only while a claim rule of an issuer of the identity names its (role, source), so a grant a late
 * claim sync committed after its rule was removed grants nothing.
 */
export async function grantsForIdentity(db: ControlDb, identityId: string): Promise<Array<{ sourceId: string; role: SourceRoleRecord }>> {
  const r = await db.pool.query<RoleRow & { source_id: string }>(
    `SELECT g.source_id, r.name, r.description, r.audiences, r.statements, r.created_at, r.updated_at
     FROM interlock_effective_grants g JOIN roles r ON r.name = g.role_name
     WHERE g.identity_id = $1 ORDER BY g.source_id, r.name`,
    [identityId],
  );
  return r.rows.map((row) => ({ sourceId: row.source_id, role: roleRowToRecord(row) }));
}
