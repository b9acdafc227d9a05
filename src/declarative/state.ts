/**
 * The control plane's current governed objects as a ConfigState (issue 16), read with one
 * client so that apply can read and write inside the same transaction.
 */
import type pg from 'pg';
import type { ControlDb } from '../control/db';
import { listClaimMappings } from '../control/claim-mappings';
import type { PolicyState, RoleState, SourceState } from './types';
import { grantKey, type ConfigState } from './types';

type Queryable = ControlDb | pg.ClientBase;
const q = (db: Queryable) => ('pool' in db ? db.pool : db);

/**
 * Reads sources, roles, identities, grants, policies and claim mappings, each ordered by id, name or issuer. Grants kept in
 * step with access-token claims (grants.granted_by = 'claims', issue 26) are not part of the
 * declarative state: they follow the identity provider, so export omits them and apply leaves them.
 */
export async function readConfigState(db: Queryable): Promise<ConfigState> {
  const c = q(db);
  // One after the other: inside apply's transaction they share one client.
  const sources = await c.query<{ id: string; type: 'postgres' | 'documents'; name: string; description: string; enabled: boolean; settings: SourceState['settings'] }>('SELECT id, type, name, description, enabled, settings FROM sources ORDER BY id');
  const roles = await c.query<RoleState>('SELECT name, description, audiences, statements FROM roles ORDER BY name');
  const identities = await c.query<{ name: string; disabled: boolean; attributes: Record<string, unknown> }>('SELECT name, disabled, attributes FROM identities ORDER BY name');
  const grants = await c.query<{ identity: string; role: string; source: string }>(`SELECT i.name AS identity, g.role_name AS role, g.source_id AS source FROM grants g JOIN identities i ON i.id = g.identity_id WHERE g.granted_by = 'operator' ORDER BY i.name, g.source_id, g.role_name`);
  const policies = await c.query<PolicyState & { applies_to: NonNullable<PolicyState['applies_to']> }>('SELECT name, description, enabled, applies_to, rule FROM policies ORDER BY name');
  const mappings = await listClaimMappings(db);
  const state: ConfigState = { sources: new Map(), roles: new Map(), identities: new Map(), grants: new Map(), policies: new Map(), claimMappings: new Map(mappings.map((m) => [m.issuer, m])) };
  for (const s of sources.rows) {
    // An empty password is no password (`source add` without --reader-password-env stores ""): an exported file names no reference for it.
    for (const who of ['reader', 'writer'] as const) {
      const c = (s.settings as unknown as Record<string, { password?: string } | undefined>)[who];
      if (c && c.password === '') delete c.password;
    }
    state.sources.set(s.id, { ...s } as SourceState);
  }
  for (const r of roles.rows) state.roles.set(r.name, { name: r.name, description: r.description, audiences: r.audiences, statements: r.statements });
  for (const i of identities.rows) state.identities.set(i.name, { name: i.name, disabled: i.disabled, ...(Object.keys(i.attributes ?? {}).length ? { attributes: i.attributes } : {}) });
  for (const g of grants.rows) state.grants.set(grantKey(g), { identity: g.identity, role: g.role, source: g.source });
  for (const p of policies.rows) {
    const ps: PolicyState = { name: p.name, description: p.description, enabled: p.enabled, rule: p.rule };
    if (Object.keys(p.applies_to).length > 0) ps.applies_to = p.applies_to;
    state.policies.set(p.name, ps);
  }
  return state;
}
