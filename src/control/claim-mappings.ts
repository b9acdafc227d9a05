/**
 * Claim mappings of token issuers kept in the control database (issue 26 item 2): what an
 * interlock file's `claim_mappings` section says (spec/interlock-file-v1.schema.json, ClaimMapping),
 * one row per issuer in `claim_mappings`. `interlock apply` writes them (src/declarative/apply.ts);
 * the gateway reads them through ClaimMappingCache and merges each with its configuration's
 * auth.issuers entry (mergeClaimMapping), so the trust settings (keys, audience, algorithms) stay
 * in the configuration and the governance settings can live in versioned interlock files.
 */
import type pg from 'pg';
import type { ClaimRoleGrant, TokenIssuer } from '../../generated/config-v1';
import type { ClaimMapping } from '../../generated/interlock-file-v1';
import type { ControlDb } from './db';
import { listConfiguredClaimGrants, type ConfiguredClaimGrant } from './claim-rules';
import { recordChange, type ChangeActor } from './change-audit';
import { ConflictError } from './errors';

export type { ClaimMapping } from '../../generated/interlock-file-v1';

type Queryable = ControlDb | pg.ClientBase;
const q = (db: Queryable) => ('pool' in db ? db.pool : db);

/** A mapping in its canonical form: absent fields omitted, role_grants in file order, always an array. */
export type StoredClaimMapping = ClaimMapping & { role_grants: ClaimRoleGrant[] };

/** Every stored mapping, ordered by issuer. Throws on control-database failure. */
export async function listClaimMappings(db: Queryable): Promise<StoredClaimMapping[]> {
  const r = await q(db).query<{ issuer: string; identity_claim: string | null; unknown_subjects: 'refuse' | 'provision' | null; role_grants: ClaimRoleGrant[] }>(
    'SELECT issuer, identity_claim, unknown_subjects, role_grants FROM claim_mappings ORDER BY issuer',
  );
  return r.rows.map((row) => {
    const m: StoredClaimMapping = { issuer: row.issuer, role_grants: row.role_grants };
    if (row.identity_claim !== null) m.identity_claim = row.identity_claim;
    if (row.unknown_subjects !== null) m.unknown_subjects = row.unknown_subjects;
    return m;
  });
}

/** Inserts or replaces the mapping of `m.issuer` (inside the caller's transaction when given a client). */
export async function upsertClaimMapping(db: Queryable, m: ClaimMapping): Promise<void> {
  await q(db).query(
    `INSERT INTO claim_mappings (issuer, identity_claim, unknown_subjects, role_grants) VALUES ($1, $2, $3, $4)
     ON CONFLICT (issuer) DO UPDATE SET identity_claim = EXCLUDED.identity_claim, unknown_subjects = EXCLUDED.unknown_subjects, role_grants = EXCLUDED.role_grants, updated_at = now()`,
    [m.issuer, m.identity_claim ?? null, m.unknown_subjects ?? null, JSON.stringify(m.role_grants ?? [])],
  );
}

/**
 * Deletes the mapping of `issuer`; claim grants it gave are taken back at the subjects' next sign-in
 * (`apply` takes them back at once, src/control/claim-rules.ts takeBackUnruledClaimGrants).
 */
export async function deleteClaimMapping(db: Queryable, issuer: string): Promise<void> {
  await q(db).query('DELETE FROM claim_mappings WHERE issuer = $1', [issuer]);
}

/** What untieClaimRules did: per issuer whose claim mapping named the source, the rules taken out of its role_grants. */
export interface ClaimRuleUntying {
  issuer: string;
  removed: ClaimRoleGrant[];
}

/**
 * The claim rules naming source `sourceId` (being removed: `source remove`, DELETE
 * /admin/v1/sources/{id}, `apply --prune`), inside the caller's transaction (task hlow: such rules
 * outlived the source and gave its roles to a source added later under the same id). A claim
 * mapping's `role_grants` rule naming it refuses the removal without `force`
 * (ConflictError, details: the issuers); checkClaimRulesNaming makes that check before the source
 * is deleted. Call this with `force` after the caller deleted the source row in the same
 * transaction: each such rule is taken out of its mapping's role_grants (the mapping stays, its
 * identity_claim and unknown_subjects too) by interlock_untie_removed_source_claim_rules (migration
 * 20261213190000000, SECURITY DEFINER: the source family holds EXECUTE of it, not UPDATE of
 * claim_mappings, which would let it rewrite any rule; red team rt41a, task hpriv), and each mapping
 * so changed is recorded as `claim_mapping_updated` ({issuer, reason: "source_removed", removed: the
 * rules}) on the source. Returns what was taken out, by issuer. The gateway configuration's own
 * rules (configured_claim_grants) are left alone: each gateway start records them again from its
 * configuration, and a source added again under a named id is checked against them
 * (refuseOnePartRolesOnSource, red team rt39 finding 4). Throws the database's error (SQLSTATE
 * 55000) when the source still exists.
 */
export async function untieClaimRules(c: pg.ClientBase, sourceId: string, opts: { operator: string }): Promise<ClaimRuleUntying[]> {
  const r = await c.query<{ issuer: string; removed: ClaimRoleGrant[] }>('SELECT issuer, removed FROM interlock_untie_removed_source_claim_rules($1)', [sourceId]);
  const actor: ChangeActor = { operator: opts.operator };
  for (const m of r.rows) {
    await recordChange(c, actor, 'claim_mapping_updated', { issuer: m.issuer, reason: 'source_removed', removed: m.removed }, sourceId);
  }
  return r.rows.map((m) => ({ issuer: m.issuer, removed: m.removed }));
}

/**
 * Refuses the removal of source `sourceId` without `force` while claim mapping rules (role_grants)
 * name it: ConflictError (details: the issuers, by issuer; `what` names the source in the message).
 * With `force`, or when no rule names it, returns nothing (untieClaimRules takes the rules out once
 * the source is deleted). Reads only (the source family may not write claim_mappings).
 */
export async function checkClaimRulesNaming(c: pg.ClientBase, sourceId: string, opts: { force?: boolean; what: string }): Promise<void> {
  if (opts.force) return;
  const r = await c.query<{ issuer: string }>(
    `SELECT issuer FROM claim_mappings
      WHERE jsonb_typeof(role_grants) = 'array' AND EXISTS (SELECT 1 FROM jsonb_array_elements(role_grants) g WHERE g->'source' = to_jsonb($1::text))
      ORDER BY issuer`,
    [sourceId],
  );
  if (r.rows.length === 0) return;
  throw new ConflictError(
    `${opts.what} is named by the claim mapping rules (role_grants) of ${r.rows.length} issuer(s): ${r.rows.map((m) => m.issuer).join(', ')}; change them first, or force the removal (the rules naming it are then taken out of those mappings)`,
    r.rows.map((m) => m.issuer),
  );
}

/**
 * The issuer settings a token is mapped with: the configuration's entry with the stored mapping's
 * identity_claim and unknown_subjects in place of its own when the mapping sets them, and the
 * role_grants of both (configuration first, duplicates kept once). Pure.
 */
export function mergeClaimMapping(cfg: TokenIssuer, m: ClaimMapping | undefined): TokenIssuer {
  if (!m) return cfg;
  const grants = [...(cfg.role_grants ?? [])];
  const seen = new Set(grants.map((g) => `${g.claim}\u0000${g.value}\u0000${g.role}\u0000${g.source}`));
  for (const g of m.role_grants ?? []) {
    const k = `${g.claim}\u0000${g.value}\u0000${g.role}\u0000${g.source}`;
    if (!seen.has(k)) (seen.add(k), grants.push(g));
  }
  return {
    ...cfg,
    ...(m.identity_claim !== undefined ? { identity_claim: m.identity_claim } : {}),
    ...(m.unknown_subjects !== undefined ? { unknown_subjects: m.unknown_subjects } : {}),
    role_grants: grants,
  };
}

/** The key of a (role, source) pair in ClaimMappingCache.allowedPairs. */
export function pairKey(role: string, source: string): string {
  return `${role}\u0000${source}`;
}

/**
 * The stored mappings in memory for step 1, with the (role, source) pairs the database lets
 * interlock_sync_claim_grants give per issuer (configured_claim_grants and the mappings' own
 * role_grants, task hcg): loaded together on first use, again after invalidate() (call it on a
 * `claim_mappings`, `configured_claim_grants` or '*' change notification) and at least every
 * `maxAgeMs` (default 60 s, so a replica that missed a notification catches up). A call made after
 * invalidate() never takes the answer of a load that began before it. A failed reload
 * keeps the last good set (the caller's control-database failure surfaces elsewhere); with none, it throws.
 */
export class ClaimMappingCache {
  private byIssuer: Map<string, StoredClaimMapping> | null = null;
  private allowedByIssuer = new Map<string, Set<string>>();
  private loadedAt = 0;
  private stale = true;
  private inflight: Promise<void> | null = null;

  constructor(
    private readonly db: ControlDb,
    private readonly maxAgeMs = 60_000,
  ) {}

  /** The stored mapping of `issuer`, or undefined. Throws only when no set was ever loaded and the load fails. */
  async get(issuer: string): Promise<StoredClaimMapping | undefined> {
    await this.fresh();
    return this.byIssuer!.get(issuer);
  }

  /**
   * The pairs (pairKey) a rule of `issuer` names in the database: its configured_claim_grants rows
   * and its stored mapping's role_grants (of the same load as get()). Throws as get() does.
   */
  async allowedPairs(issuer: string): Promise<ReadonlySet<string>> {
    await this.fresh();
    return this.allowedByIssuer.get(issuer) ?? new Set();
  }

  /** Marks the set stale: the next get() or allowedPairs() reloads it. */
  invalidate(): void {
    this.stale = true;
  }

  private async fresh(): Promise<void> {
    if (this.stale || Date.now() - this.loadedAt >= this.maxAgeMs) {
      try {
        // A load in flight while the set is stale began before an invalidate() (load() clears
        // `stale` when it starts) and may have read the rows from before the change: wait for it,
        // then read again, rather than take its answer (task hrr, the race of red team rt40).
        if (this.inflight && this.stale) await this.inflight.catch(() => undefined);
        await (this.inflight ??= this.load().finally(() => (this.inflight = null)));
      } catch (err) {
        if (!this.byIssuer) throw err;
      }
    }
  }

  private async load(): Promise<void> {
    // Cleared before the read, so an invalidate() arriving during it makes the next get() read again.
    this.stale = false;
    let rows: StoredClaimMapping[];
    let configured: ConfiguredClaimGrant[];
    try {
      [rows, configured] = await Promise.all([listClaimMappings(this.db), listConfiguredClaimGrants(this.db)]);
    } catch (err) {
      this.stale = true;
      throw err;
    }
    const allowed = new Map<string, Set<string>>();
    const add = (issuer: string, role: string, source: string) => {
      let set = allowed.get(issuer);
      if (!set) allowed.set(issuer, (set = new Set()));
      set.add(pairKey(role, source));
    };
    for (const g of configured) add(g.issuer, g.role, g.source);
    for (const m of rows) for (const g of m.role_grants) if (g && typeof g.role === 'string' && typeof g.source === 'string') add(m.issuer, g.role, g.source);
    this.byIssuer = new Map(rows.map((m) => [m.issuer, m]));
    this.allowedByIssuer = allowed;
    this.loadedAt = Date.now();
  }
}
