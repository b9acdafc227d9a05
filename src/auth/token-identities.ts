/**
 * Claims to identities (issue 26 item 2): a verified token's (issuer, subject) names an identity
 * through identity_subjects. An unknown subject is refused, or, when its issuer says
 * `unknown_subjects: provision`, given a new identity named by the issuer's `identity_claim`
 * (lower-cased; it must be a valid identity name and not already taken: an existing identity is
 * never taken over by a token; an `email` the token marks unverified, or a value with a non-ASCII
 * character, names none). A disabled identity is refused whatever its token says. The
 * issuer's `role_grants` are kept in step with the claims (grants.granted_by = 'claims'; operator
 * grants are never removed), and the `attribute_claims` become the identity's attributes.
 * Only pairs some claim rule of the issuer names in the control database are passed on (the
 * function refuses any other, task hcg): a configured rule the database does not record yet is
 * logged once and its pair left out, so sign-in keeps working with the rules the database knows.
 */
import type { JWTPayload } from 'jose';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { TokenIssuer } from '../../generated/config-v1';
import { isUniqueViolation, withTransaction, type ControlDb } from '../control/db';
import { ClaimMappingCache, mergeClaimMapping, pairKey } from '../control/claim-mappings';
import { MISSING_CLAIM_RULE_FIX } from '../control/claim-rules';
import { newIdentityId } from '../control/ids';
import { IDENTITY_NAME_PATTERN, mergeAttributes } from '../control/identities';
import type { Identity } from '../control/identities';
import { attributeListText, attributeText } from '../sql/row-rules/predicate';

/** Claims copied into attributes when an issuer names none. */
export const DEFAULT_ATTRIBUTE_CLAIMS: readonly string[] = Object.freeze(['email', 'groups', 'roles']);
/** Least interval between identity_subjects.last_used_at updates of one subject, and between grant re-syncs of unchanged claims (ms). */
const TOUCH_INTERVAL_MS = 60_000;

/** Why a verified token has no usable identity (log-only; the client sees invalid_token). */
export const SUBJECT_FAILURES = ['unknown_subject', 'identity_disabled', 'unusable_identity_claim', 'identity_name_taken'] as const;
/** One of SUBJECT_FAILURES. */
export type SubjectFailure = (typeof SUBJECT_FAILURES)[number];

/**
 * The (source, role) pairs the issuer's role_grants give for `claims`, sorted and unique; a rule on
 * `email` gives nothing for an address the token marks unverified (emailUnverified, rt48b B2).
 */
export function claimGrants(cfg: TokenIssuer, claims: JWTPayload): Array<{ role: string; source: string }> {
  const out = new Map<string, { role: string; source: string }>();
  for (const rule of cfg.role_grants ?? []) {
    if (rule.claim === 'email' && emailUnverified(claims)) continue;
    const v = claims[rule.claim];
    const has = Array.isArray(v) ? v.includes(rule.value) : v === rule.value;
    if (has) out.set(`${rule.source}\u0000${rule.role}`, { role: rule.role, source: rule.source });
  }
  return [...out.entries()].sort(([a], [b]) => (a < b ? -1 : 1)).map(([, g]) => g);
}

/**
 * Whether the token itself says its `email` is not verified (OpenID Connect Core 5.1: `email_verified`
 * false, or the string "false" some IdPs write). Such an address is one the user typed and may not
 * own, so it is neither an attribute nor an identity's name (red team rt48b finding B2). A token
 * without `email_verified` (the access tokens of several IdPs never carry it) is not judged here.
 */
export function emailUnverified(claims: JWTPayload): boolean {
  return claims.email_verified === false || claims.email_verified === 'false';
}

/**
 * Identity attributes from claims: each listed claim present in the token, as is; `email` not when
 * the token marks it unverified (emailUnverified: a rule `email = identity.email` showed the rows
 * of whoever owned the address a user typed, rt48b B2).
 */
export function claimAttributes(cfg: TokenIssuer, claims: JWTPayload): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of cfg.attribute_claims ?? DEFAULT_ATTRIBUTE_CLAIMS) {
    if (claims[name] === undefined || (name === 'email' && emailUnverified(claims))) continue;
    out[name] = claims[name];
  }
  return out;
}

/**
 * The attribute claims a row rule could use (a string, finite number or boolean, or a list of them:
 * attributeText / attributeListText), as recorded for the subject (identity_subjects.claim_attributes);
 * the others are left out (PostgreSQL could not store some, and no rule can read them).
 */
export function usableClaims(fromClaims: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(fromClaims).filter(([, v]) => attributeText(v) !== null || (Array.isArray(v) && attributeListText(v) !== null)));
}

/**
 * The subject's use, and its attribute claims ($3, JSON) with their token's issue time ($4,
 * timestamptz or NULL) unless the recorded claims came from a token issued later (red team rt48b
 * B5: an older, still unexpired token presented after a newer one must not bring back claims its
 * issuer has changed since, which an approval checks a queued write's kept values against).
 * Returns `recorded`: false when a later token's claims were kept (its claim grants are then not
 * synced either: they follow the issuer's latest word too). A token's issue time is its iat, but
 * never later than the control database's now(): an iat ahead of it counts as now (red team rt48d
 * R3: jose checks iat only for its type, and one token an IdP signed with iat years ahead, a clock
 * fault, froze the subject's recorded claims and claim grants until then, a group removed at the
 * IdP never taken back), and so does a token without `iat` (rt48d R5): its age is unknown (RFC
 * 7519 4.1.6 makes iat optional; RFC 9068 2.2 requires it in JWT access tokens), now is the latest
 * it can have been issued, so it replaces the recorded claims and the tokens issued before it
 * (before its use) no longer do. It cleared claims_issued_at before, after which an older unexpired
 * token's claims counted again. Run in one transaction with the claim grants' sync
 * (TokenIdentityStore.touch): the row lock it takes orders the grants like the claims (rt48d R4).
 */
const RECORD_ORDERED_CLAIMS_SQL = `UPDATE identity_subjects SET last_used_at = now(),
    claim_attributes = CASE WHEN claims_issued_at IS NULL OR t.iat >= claims_issued_at THEN $3::jsonb ELSE claim_attributes END,
    claims_seen_at = CASE WHEN claims_issued_at IS NULL OR t.iat >= claims_issued_at THEN now() ELSE claims_seen_at END,
    claims_issued_at = CASE WHEN claims_issued_at IS NULL OR t.iat >= claims_issued_at THEN t.iat ELSE claims_issued_at END
  FROM (SELECT LEAST(COALESCE($4::timestamptz, now()), now()) AS iat) AS t
  WHERE issuer = $1 AND subject = $2
  RETURNING claims_seen_at = now() AS recorded`;

/** A verified token's `iat` as an ISO timestamp, or null when it has none usable (a finite number of seconds). */
function issuedAt(claims: JWTPayload): string | null {
  const iat = claims.iat;
  if (typeof iat !== 'number' || !Number.isFinite(iat)) return null;
  const d = new Date(iat * 1000);
  return Number.isNaN(d.getTime()) ? null : d.toISOString();
}

/** RECORD_ORDERED_CLAIMS_SQL refused to the runtime role (42501): claims_issued_at is not granted to it. */
class NotOrdered extends Error {}
/** interlock_sync_claim_grants refused a pair no claim rule of the issuer names (42501); nothing was written. */
class SyncRefused extends Error {}

/** Looks up and provisions token identities in the control database. */
export class TokenIdentityStore {
  private readonly touched = new Map<string, { at: number; grants: string }>();
  /** Configured pairs already logged as unknown to the database (issuer, source, role). */
  private readonly warnedMissing = new Set<string>();
  private readonly mappings: ClaimMappingCache;

  /**
   * `mappings`: the interlock files' claim mappings (merged into each issuer's configuration) and
   * the pairs the database allows; default a ClaimMappingCache of `db` of its own.
   * `onClaimGrantsSynced(identityId)`: told, before identityFor returns, that the identity's claim
   * grants were brought in step with its token (changed or not): the gateway drops the identity's
   * cached grants there, so the call that took a grant back is authorised without it (red team
   * rt48d R6; the control-table notification comes later and only when something changed).
   */
  constructor(
    private readonly db: ControlDb,
    private readonly logger?: Logger,
    mappings?: ClaimMappingCache,
    private readonly onClaimGrantsSynced?: (identityId: string) => void,
  ) {
    this.mappings = mappings ?? new ClaimMappingCache(db);
  }

  /** Drops the cached claim mappings and allowed pairs (call on a claim_mappings or configured_claim_grants change notification). */
  invalidate(): void {
    this.mappings.invalidate();
  }

  /**
   * The identity of a verified token, or why there is none. `configured` is the issuer's
   * auth.issuers entry; the stored claim mapping of that issuer, if any, is merged into it
   * (mergeClaimMapping). Throws only on control-database failure.
   */
  async identityFor(configured: TokenIssuer, claims: JWTPayload): Promise<{ identity: Identity } | { failure: SubjectFailure }> {
    const cfg = mergeClaimMapping(configured, await this.mappings.get(configured.issuer));
    const subject = String(claims.sub);
    let row = await this.lookup(cfg.issuer, subject);
    if (!row) {
      if (cfg.unknown_subjects !== 'provision') return { failure: 'unknown_subject' };
      const provisioned = await this.provision(cfg, claims, subject);
      if ('failure' in provisioned) return provisioned;
      row = provisioned;
    }
    if (row.disabled) return { failure: 'identity_disabled' };
    const jti = typeof claims.jti === 'string' ? claims.jti.slice(0, 256) : null;
    // The identity record's attributes (set by operators, issue 27) win over the token's claims.
    const fromClaims = claimAttributes(cfg, claims);
    const identity: Identity = {
      id: row.identity_id,
      name: row.name,
      keyId: jti ? `token:${jti}` : 'token',
      token: { issuer: cfg.issuer, subject, jti },
      attributes: mergeAttributes(row.attributes, fromClaims),
      ...(Object.keys(fromClaims).length > 0 ? { claimAttributes: fromClaims } : {}),
    };
    await this.touch(cfg, claims, identity.id, subject, fromClaims);
    return { identity };
  }

  private async lookup(issuer: string, subject: string): Promise<{ identity_id: string; name: string; disabled: boolean; attributes?: Record<string, unknown> } | null> {
    const r = await this.db.pool.query<{ identity_id: string; name: string; disabled: boolean; attributes: Record<string, unknown> }>(
      'SELECT s.identity_id, i.name, i.disabled, i.attributes FROM identity_subjects s JOIN identities i ON i.id = s.identity_id WHERE s.issuer = $1 AND s.subject = $2',
      [issuer, subject],
    );
    return r.rows[0] ?? null;
  }

  private async provision(cfg: TokenIssuer, claims: JWTPayload, subject: string): Promise<{ identity_id: string; name: string; disabled: boolean } | { failure: SubjectFailure }> {
    const claim = cfg.identity_claim ?? 'sub';
    const raw = claims[claim];
    // An address the token marks unverified names no identity: it would take (squat) the name an
    // operator grants its owner later (rt48b B2). Nor does a value with a non-ASCII character:
    // toLowerCase() turns U+212A KELVIN SIGN into "k", so "\u212Aate", another user to the IdP,
    // became identity "kate" (rt48b B4); names are ASCII (IDENTITY_NAME_PATTERN).
    const name = typeof raw === 'string' && /^[\x20-\x7e]*$/.test(raw) && !(claim === 'email' && emailUnverified(claims)) ? raw.toLowerCase() : '';
    if (!IDENTITY_NAME_PATTERN.test(name)) return { failure: 'unusable_identity_claim' };
    try {
      // Through the checked SECURITY DEFINER function (the runtime role may not insert identities itself).
      const id = newIdentityId();
      await this.db.pool.query('SELECT interlock_provision_token_identity($1, $2, $3, $4)', [id, name, cfg.issuer, subject]);
      this.logger?.info({ component: 'oauth', issuer: cfg.issuer, subject, identity: name }, 'identity provisioned from an access token');
      return { identity_id: id, name, disabled: false };
    } catch (err) {
      if (!isUniqueViolation(err)) throw err;
      // Another replica linked the subject first, or the name belongs to an identity that is not this subject's.
      const again = await this.lookup(cfg.issuer, subject);
      return again ?? { failure: 'identity_name_taken' };
    }
  }

  /**
   * Records the subject's use and its usable attribute claims (`fromClaims`, red team rt27m finding
   * 3: an approval checks the claim values kept with a queued write against them) and brings its
   * claim grants in step, at most once per TOUCH_INTERVAL_MS unless the grants or the claims changed.
   * The claims (ordered by the token's issue time, RECORD_ORDERED_CLAIMS_SQL) and the grants are
   * written in one transaction: the UPDATE's lock on the subject's row is held until the grants are
   * synced, so of two sign-ins at once the second waits, and is re-checked on the first's row, before
   * it decides; the grants are always those of the token whose claims are recorded (red team rt48d
   * R4: the sync ran after the UPDATE had committed, and the older token's grants could be synced
   * last). After a sync the identity's cached grants are dropped (`onClaimGrantsSynced`), before the
   * call is authorised (rt48d R6). A token issued before the recorded one leaves the once-a-minute
   * entry as it was, so a newer token with its claims is still recorded.
   */
  private async touch(cfg: TokenIssuer, claims: JWTPayload, identityId: string, subject: string, fromClaims: Record<string, unknown>): Promise<void> {
    const grants = await this.allowedGrants(cfg.issuer, claimGrants(cfg, claims));
    const recorded = usableClaims(fromClaims);
    // The identity is part of the key: a subject re-linked to another identity (identity link|unlink)
    // has that identity's claim grants made at its first use, not up to TOUCH_INTERVAL_MS later (red team rtlk).
    const key = `${cfg.issuer}\u0000${subject}\u0000${identityId}`;
    const signature = JSON.stringify([grants, recorded]);
    const last = this.touched.get(key);
    const now = Date.now();
    if (last && last.grants === signature && now - last.at < TOUCH_INTERVAL_MS) return;
    this.touched.set(key, { at: now, grants: signature });
    if (this.touched.size > 10_000) this.touched.clear();
    const claimsJson = JSON.stringify(recorded);
    const iat = issuedAt(claims);
    try {
      let synced: boolean | 'unordered';
      try {
        synced = await this.recordAndSync(cfg.issuer, subject, claimsJson, iat, grants);
      } catch (err) {
        if (!(err instanceof SyncRefused)) throw err;
        // A rule removed since the allowed pairs were loaded (the function refused a pair; nothing was
        // written): load them again and pass only what the database allows now.
        this.mappings.invalidate();
        const again = await this.allowedGrants(cfg.issuer, grants);
        this.touched.set(key, { at: now, grants: JSON.stringify([again, recorded]) });
        synced = await this.recordAndSync(cfg.issuer, subject, claimsJson, iat, again);
      }
      if (synced === 'unordered') {
        await this.recordUnordered(cfg.issuer, subject, claimsJson);
        // Also with no rules: an issuer whose role_grants were all removed from the configuration takes
        // back the claim grants it gave (returning here kept them for good).
        try {
          await syncClaimGrants(this.db, cfg.issuer, subject, grants);
        } catch (err) {
          if ((err as { code?: string }).code !== '42501') throw err;
          this.mappings.invalidate();
          const again = await this.allowedGrants(cfg.issuer, grants);
          this.touched.set(key, { at: now, grants: JSON.stringify([again, recorded]) });
          await syncClaimGrants(this.db, cfg.issuer, subject, again);
        }
        synced = true;
      }
      if (synced) this.onClaimGrantsSynced?.(identityId);
      // A token issued before the recorded one changed nothing: the entry stays the recorded token's,
      // else a newer token with the older one's claims was skipped for TOUCH_INTERVAL_MS, its claims
      // not recorded and its grants not synced (found with rt48d R5's test).
      else if (last) this.touched.set(key, last);
      else this.touched.delete(key);
    } catch (err) {
      this.touched.delete(key);
      throw err;
    }
  }

  /**
   * One transaction: RECORD_ORDERED_CLAIMS_SQL, then, when the token's claims were recorded, the
   * claim grants' sync (`grants`; also with none: an issuer whose role_grants were all removed from
   * the configuration takes back the claim grants it gave). True when synced, false when a later
   * token's claims were kept (a token issued before them: its call still runs with its own claims
   * and the grants held, rt48b B5), 'unordered' when the runtime role may not write
   * claims_issued_at (nothing written). Throws SyncRefused when the function refused a pair (42501:
   * nothing written), and any other control-database error.
   */
  private async recordAndSync(issuer: string, subject: string, claimsJson: string, iat: string | null, grants: Array<{ role: string; source: string }>): Promise<boolean | 'unordered'> {
    try {
      return await withTransaction(this.db, async (c) => {
        let r;
        try {
          r = await c.query<{ recorded: boolean }>(RECORD_ORDERED_CLAIMS_SQL, [issuer, subject, claimsJson, iat]);
        } catch (err) {
          if ((err as { code?: string }).code === '42501') throw new NotOrdered();
          throw err;
        }
        if (r.rows[0]?.recorded === false) return false;
        try {
          await syncClaimGrants(c, issuer, subject, grants);
        } catch (err) {
          if ((err as { code?: string }).code === '42501') throw new SyncRefused();
          throw err;
        }
        return true;
      });
    } catch (err) {
      if (err instanceof NotOrdered) return 'unordered';
      throw err;
    }
  }

  /**
   * A runtime role granted before claims_issued_at existed (migration 20261216120000000): records
   * the claims unordered, as before it, until `interlock db grant-runtime-role` runs again (warned);
   * one granted before the claim columns existed: the use only (kept claim values are then not
   * checked against newer tokens).
   */
  private async recordUnordered(issuer: string, subject: string, claimsJson: string): Promise<void> {
    try {
      await this.db.pool.query('UPDATE identity_subjects SET last_used_at = now(), claim_attributes = $3, claims_seen_at = now() WHERE issuer = $1 AND subject = $2', [issuer, subject, claimsJson]);
      this.logger?.warn({ component: 'oauth' }, 'cannot order token subjects\' attribute claims by issue time (re-run interlock db grant-runtime-role)');
    } catch (err2) {
      if ((err2 as { code?: string }).code !== '42501') throw err2;
      this.logger?.warn({ component: 'oauth' }, 'cannot record token subjects\' attribute claims (re-run interlock db grant-runtime-role)');
      await this.db.pool.query('UPDATE identity_subjects SET last_used_at = now() WHERE issuer = $1 AND subject = $2', [issuer, subject]);
    }
  }

  /**
   * `grants` less the pairs no claim rule of `issuer` names in the control database
   * (ClaimMappingCache.allowedPairs); each pair left out is logged once (warn, naming the fix).
   */
  private async allowedGrants(issuer: string, grants: Array<{ role: string; source: string }>): Promise<Array<{ role: string; source: string }>> {
    if (grants.length === 0) return grants;
    const allowed = await this.mappings.allowedPairs(issuer);
    const kept = grants.filter((g) => allowed.has(pairKey(g.role, g.source)));
    if (kept.length < grants.length) {
      for (const g of grants) {
        const k = `${issuer}\u0000${g.source}\u0000${g.role}`;
        if (allowed.has(pairKey(g.role, g.source)) || this.warnedMissing.has(k)) continue;
        this.warnedMissing.add(k);
        this.logger?.warn({ component: 'oauth', issuer, role: g.role, source: g.source }, MISSING_CLAIM_RULE_FIX);
      }
    }
    return kept;
  }

  /** Marks a configured pair the database does not record as logged already (the gateway's start logged it), so sign-in does not log it again. */
  noteMissing(issuer: string, role: string, source: string): void {
    this.warnedMissing.add(`${issuer}\u0000${source}\u0000${role}`);
  }
}

/**
 * Makes the claim-derived grants of the identity linked to (issuer, subject) exactly `grants`
 * (those naming an existing role and source; the others are skipped): adds the missing ones with
 * granted_by 'claims' and removes the claim-derived ones no longer given. Operator grants are left
 * alone; a disabled identity only loses grants. One call of the SECURITY DEFINER function
 * interlock_sync_claim_grants (latest body: migrations/20261209210000000_configured-claim-grants_hcg.sql, no rule locks),
 * the only way the runtime role changes grants; it writes, and so notifies the replicas, only when
 * something changes. Throws when no identity is linked to the subject (22023), and when a pair to
 * add is named by no claim rule of `issuer` in the database (42501: configured_claim_grants or the
 * issuer's claim mapping), changing nothing; removals need no rule. A claim grant it writes counts
 * only while such a rule names it (interlock_effective_grants, read by grantsForIdentity; task hcl).
 * `db`: the control database, or a client in a transaction (TokenIdentityStore runs it in the
 * transaction that recorded the token's claims, rt48d R4).
 */
export async function syncClaimGrants(db: ControlDb | pg.ClientBase, issuer: string, subject: string, grants: Array<{ role: string; source: string }>): Promise<void> {
  await ('pool' in db ? db.pool : db).query('SELECT interlock_sync_claim_grants($1, $2, $3::text[], $4::text[])', [issuer, subject, grants.map((g) => g.role), grants.map((g) => g.source)]);
}
