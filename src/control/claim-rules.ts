/**
 * The gateway configuration's claim rules in the control database (task hcg; red team rtop finding
 * 5): the (role, source) pairs of each `auth.issuers[].role_grants` rule, per issuer, in
 * `configured_claim_grants` (migration 20261209210000000). interlock_sync_claim_grants gives a token
 * identity a claim grant only when a rule of its issuer names the pair: a row here or a role_grants
 * rule of the issuer's claim mapping (src/control/claim-mappings.ts). The runtime role may only read
 * the table; the owner and the operator role write it, at `interlock serve` start
 * (src/gateway.ts) or with `interlock db sync-claim-rules --config FILE` (src/cli/main.ts).
 */
import type pg from 'pg';
import type { TokenIssuer } from '../../generated/config-v1';
import { recordChange, type ChangeActor } from './change-audit';
import { withTransaction, type ControlDb } from './db';

type Queryable = ControlDb | pg.ClientBase;
const q = (db: Queryable) => ('pool' in db ? db.pool : db);

/** One configured pair: `role` on `source` may be given to identities of `issuer` by their claims. */
export interface ConfiguredClaimGrant {
  issuer: string;
  role: string;
  source: string;
}

/** What a sync changed: rows added and removed, each sorted by issuer, source, role. */
export interface ClaimRulesSync {
  added: ConfiguredClaimGrant[];
  removed: ConfiguredClaimGrant[];
}

/** The config event of a sync that changed something (kind config, operator the actor; details {added, removed}). */
export const CLAIM_RULES_SYNCED = 'claim_rules_synced';

/** The log line (and CLI hint) naming the fix for configured rules the database does not know. */
export const MISSING_CLAIM_RULE_FIX =
  'the control database does not record this claim rule of the configuration, so its grant is not given: restart the gateway with INTERLOCK_OPERATOR_DATABASE_URL (database.operator_url) set to a role given `interlock db grant-operator-role`, or run `interlock db sync-claim-rules --config FILE` with the owner\'s or operator role\'s URL';

/** The log line of a start-up sync that leaves recorded rules of issuers its gateway does not configure. */
export const OTHER_ISSUER_RULES_NOTE =
  'the control database records claim rules of issuers this gateway does not configure (another gateway\'s, or left by the upgrade seed or a removed issuer), which the claim-grant function still honours: if no gateway configures these issuers, remove them with `interlock db sync-claim-rules --config FILE`';

const keyOf = (g: ConfiguredClaimGrant) => `${g.issuer}\u0000${g.source}\u0000${g.role}`;
const order = (a: ConfiguredClaimGrant, b: ConfiguredClaimGrant) => (keyOf(a) < keyOf(b) ? -1 : keyOf(a) > keyOf(b) ? 1 : 0);

/** The pairs of `issuers`' role_grants rules, unique, sorted by issuer, source, role. Pure. */
export function configuredClaimGrants(issuers: readonly TokenIssuer[]): ConfiguredClaimGrant[] {
  const out = new Map<string, ConfiguredClaimGrant>();
  for (const i of issuers) for (const r of i.role_grants ?? []) {
    const g = { issuer: i.issuer, role: r.role, source: r.source };
    out.set(keyOf(g), g);
  }
  return [...out.values()].sort(order);
}

/** Every recorded pair, sorted by issuer, source, role. Throws on control-database failure. */
export async function listConfiguredClaimGrants(db: Queryable): Promise<ConfiguredClaimGrant[]> {
  const r = await q(db).query<ConfiguredClaimGrant>('SELECT issuer, role_name AS role, source_id AS source FROM configured_claim_grants');
  return r.rows.map((x) => ({ issuer: x.issuer, role: x.role, source: x.source })).sort(order);
}

/** The pairs of `issuers`' rules that `recorded` lacks (sorted). Pure. */
export function missingClaimGrants(issuers: readonly TokenIssuer[], recorded: readonly ConfiguredClaimGrant[]): ConfiguredClaimGrant[] {
  const have = new Set(recorded.map(keyOf));
  return configuredClaimGrants(issuers).filter((g) => !have.has(keyOf(g)));
}

/** Options of replaceConfiguredClaimGrants. */
export interface ReplaceClaimRulesOptions {
  /**
   * 'all' (default): the table becomes exactly the pairs of `issuers` (rows of issuers not among
   * them are removed; `interlock db sync-claim-rules`). 'configured': only the rows of the issuers
   * listed are replaced, others are left alone (the gateway's start, red team rtcg: a replica or a
   * gateway without issuers on the same control database must not delete the rules of issuers it
   * does not configure).
   */
  scope?: 'all' | 'configured';
}

/**
 * Makes configured_claim_grants exactly the pairs of `issuers`' role_grants (opts.scope 'all', the
 * default: every issuer, rows of issuers no longer configured are removed; 'configured': the rows of
 * the issuers listed only), in one transaction that also records one config event
 * CLAIM_RULES_SYNCED ({added, removed}, operator `actor`, SYSTEM_OPERATOR by default) when anything
 * changed, and takes back the claim grants only a removed rule named (revokeUnruledClaimGrants, one
 * grant_revoked event each); nothing is written or recorded otherwise. Syncs of several replicas serialise on a SHARE
 * ROW EXCLUSIVE lock of the table (which the runtime role cannot take). Needs INSERT and DELETE on
 * the table, DELETE on grants, and a role allowed to append config events (the owner or the operator role): a
 * permission error is thrown as is (SQLSTATE 42501). Returns what changed.
 */
export async function replaceConfiguredClaimGrants(db: ControlDb, issuers: readonly TokenIssuer[], actor?: ChangeActor, opts: ReplaceClaimRulesOptions = {}): Promise<ClaimRulesSync> {
  const want = configuredClaimGrants(issuers);
  const scoped = opts.scope === 'configured' ? new Set(issuers.map((i) => i.issuer)) : null;
  return withTransaction(db, async (c) => {
    await c.query('LOCK TABLE configured_claim_grants IN SHARE ROW EXCLUSIVE MODE');
    const have = (await listConfiguredClaimGrants(c)).filter((g) => !scoped || scoped.has(g.issuer));
    const wantKeys = new Set(want.map(keyOf));
    const haveKeys = new Set(have.map(keyOf));
    const added = want.filter((g) => !haveKeys.has(keyOf(g)));
    const removed = have.filter((g) => !wantKeys.has(keyOf(g)));
    if (removed.length > 0) {
      await c.query('DELETE FROM configured_claim_grants g USING unnest($1::text[], $2::text[], $3::text[]) AS d(i, r, s) WHERE g.issuer = d.i AND g.role_name = d.r AND g.source_id = d.s', [
        removed.map((g) => g.issuer),
        removed.map((g) => g.role),
        removed.map((g) => g.source),
      ]);
    }
    if (added.length > 0) {
      await c.query('INSERT INTO configured_claim_grants (issuer, role_name, source_id) SELECT * FROM unnest($1::text[], $2::text[], $3::text[])', [added.map((g) => g.issuer), added.map((g) => g.role), added.map((g) => g.source)]);
    }
    if (added.length > 0 || removed.length > 0) await recordChange(c, actor, CLAIM_RULES_SYNCED, { added, removed });
    if (removed.length > 0) await revokeUnruledClaimGrants(c, removed, actor);
    return { added, removed };
  });
}

/**
 * After `removed` rules were deleted (on `c`, in that transaction): deletes each claim grant
 * (granted_by 'claims') of a removed (role, source) held by an identity with a token subject of
 * that rule's issuer, unless a rule of one of the identity's issuers still names the pair
 * (configured_claim_grants or a claim mapping, as interlock_sync_claim_grants checks), and records
 * one grant_revoked event for each (details grantedBy, identity, identityId, issuer, role, as the
 * function's; by identity name, source, role). Red team rtcg: a removed rule is no longer honoured
 * through the grants it gave, even for an identity that never signs in again. Operator grants stay.
 * A grant whose row another transaction holds is skipped (FOR UPDATE SKIP LOCKED, needing UPDATE of
 * grants.granted_by): that transaction is a claim sync deleting it, or one that may keep it (the
 * race the red team left open, test/integration/attacks/rtcg-redteam.test.ts).
 */
async function revokeUnruledClaimGrants(c: pg.ClientBase, removed: readonly ConfiguredClaimGrant[], actor: ChangeActor | undefined): Promise<void> {
  for (const g of await takeBackUnruledClaimGrants(c, removed)) {
    await recordChange(c, actor, 'grant_revoked', g.details, g.sourceId);
  }
}

/** A claim grant takeBackUnruledClaimGrants deleted: its grant_revoked event's source and details. */
export interface TakenBackClaimGrant {
  sourceId: string;
  /** grantedBy 'claims', identity (name), identityId, issuer (of the removed rule), role. */
  details: { grantedBy: 'claims'; identity: string; identityId: string; issuer: string; role: string };
}

/**
 * Deletes (on `c`, inside the caller's transaction, after the rules in `removed` were deleted or
 * narrowed) the claim grants of those (issuer, role, source) rules no rule names any more, as
 * revokeUnruledClaimGrants describes, and returns them (by identity name, source, role) for the
 * caller to record (grant_revoked). Used by the claim-rule sync and by `apply`'s claim-mapping
 * changes (red team rtcg). Needs DELETE and UPDATE (granted_by) on grants.
 */
export async function takeBackUnruledClaimGrants(c: pg.ClientBase, removed: readonly ConfiguredClaimGrant[]): Promise<TakenBackClaimGrant[]> {
  if (removed.length === 0) return [];
  // Rows another transaction holds (a claim sync still open) are skipped, not waited for: a stolen
  // runtime credential holding one must not stall the removal (the rule is gone either way).
  const gone = await c.query<{ identity_id: string; name: string; issuer: string; role_name: string; source_id: string }>(
    `WITH d AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) AS d(i, r, s)),
     hit AS (
       SELECT g.identity_id, g.role_name, g.source_id FROM grants g
        WHERE g.granted_by = 'claims'
          AND EXISTS (SELECT 1 FROM d JOIN identity_subjects s ON s.issuer = d.i WHERE d.r = g.role_name AND d.s = g.source_id AND s.identity_id = g.identity_id)
          AND NOT EXISTS (SELECT 1 FROM identity_subjects o JOIN configured_claim_grants k ON k.issuer = o.issuer
                           WHERE o.identity_id = g.identity_id AND k.role_name = g.role_name AND k.source_id = g.source_id)
          AND NOT EXISTS (SELECT 1 FROM identity_subjects o JOIN claim_mappings m ON m.issuer = o.issuer CROSS JOIN LATERAL jsonb_array_elements(m.role_grants) AS x(rule)
                           WHERE o.identity_id = g.identity_id AND jsonb_typeof(x.rule) = 'object' AND x.rule->>'role' = g.role_name AND x.rule->>'source' = g.source_id)
        FOR UPDATE OF g SKIP LOCKED
     ),
     del AS (
       DELETE FROM grants g USING hit
        WHERE g.identity_id = hit.identity_id AND g.role_name = hit.role_name AND g.source_id = hit.source_id AND g.granted_by = 'claims'
       RETURNING g.identity_id, g.role_name, g.source_id
     )
     SELECT del.identity_id, i.name, del.role_name, del.source_id,
            (SELECT min(d.i) FROM d JOIN identity_subjects s ON s.issuer = d.i WHERE s.identity_id = del.identity_id AND d.r = del.role_name AND d.s = del.source_id) AS issuer
       FROM del JOIN identities i ON i.id = del.identity_id ORDER BY i.name, del.source_id, del.role_name`,
    [removed.map((g) => g.issuer), removed.map((g) => g.role), removed.map((g) => g.source)],
  );
  return gone.rows.map((g) => ({ sourceId: g.source_id, details: { grantedBy: 'claims', identity: g.name, identityId: g.identity_id, issuer: g.issuer, role: g.role_name } }));
}
