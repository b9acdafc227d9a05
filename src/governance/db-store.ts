/**
 * The GovernanceStore over the control database, with short-lived caches so the hot path does not
 * query the control database on every call. Caches are invalidated at once by NOTIFY on
 * CONTROL_CHANNEL (every replica listens), and in any case expire after `ttlMs` (default 2000 ms),
 * which bounds how long a revoked grant or a new policy can take to apply if a notification is lost.
 */
import type { AuditKey } from '../audit/key';
import type { Policy } from '../../generated/policy-v1';
import type { ControlDb } from '../control/db';
import * as sources from '../control/sources';
import { grantsForIdentity } from '../control/grants';
import { activePolicies } from '../control/policies';
import { loadCatalogVersion, type VersionedCatalog } from '../control/catalog';
import { queueApproval, type PendingCaps } from '../control/approvals';
import type { SourceCatalog } from '../sql/catalog-types';
import type { ToolCallAuditEvent } from '../audit/types';
import type { RoleGrant } from './evaluator';
import type { GovernanceStore, MaybePromise, NewApproval, SourceRecord } from './store';

/**
 * Control tables whose change (NOTIFY payload) can change an identity's grants, claim rules included
 * (task hcl), and token subjects: a claim grant counts only while the identity has a subject of an
 * issuer whose rule names it (interlock_effective_grants; task hfix).
 */
const GRANT_TABLES = new Set(['grants', 'roles', 'identities', 'claim_mappings', 'configured_claim_grants', 'identity_subjects']);

interface Timed<T> {
  value: T;
  until: number;
}

/** Options: cache lifetime (ms) and the approval time to live (s). */
export interface DbGovernanceStoreOptions {
  ttlMs?: number;
  approvalTtlSeconds?: number;
  /** Bound of the approval transaction that also commits the call's audit events (config audit.commit_timeout_ms). */
  auditCommitTimeoutMs?: number;
  /** Caps on pending approvals per identity and per source (config approvals.max_pending_*; issue 24 item 2). Unset: no cap. */
  pendingCaps?: PendingCaps;
  /** The gateway's audit signing key (src/audit/key.ts): a queued write's tool-call event is tagged with it (src/audit/call-tag.ts, red team rt46b G1). Unset: untagged. */
  auditKey?: AuditKey | null;
}

/** GovernanceStore backed by src/control repositories. */
export class DbGovernanceStore implements GovernanceStore {
  private readonly ttlMs: number;
  private sourcesCache: Timed<Map<string, SourceRecord>> | null = null;
  private policiesCache: Timed<Policy[]> | null = null;
  private readonly grantsCache = new Map<string, Timed<RoleGrant[]>>();
  private readonly catalogCache = new Map<string, Timed<SourceCatalog | null>>();
  /**
   * The last snapshot loaded per source with its row version, kept past the cache's lifetime and
   * invalidations: a reload of an unchanged snapshot answers this same catalogue object (task hpriv
   * item 2), so the per-catalogue caches (view lineage, prepared catalogue, describe) stay warm.
   */
  private readonly lastCatalog = new Map<string, VersionedCatalog>();
  /**
   * Invalidations so far, per cache (red team rt40): a load stores its answer only when none of its
   * kind happened while it ran, so an answer read before a change cannot outlive that change's
   * notification for the cache's lifetime.
   */
  private readonly generation = { sources: 0, policies: 0, grants: 0, catalog: 0 };

  constructor(private readonly db: ControlDb, private readonly opts: DbGovernanceStoreOptions = {}) {
    this.ttlMs = opts.ttlMs ?? 2000;
  }

  /** Drops cached rows of a control table ('*' = everything); called on NOTIFY. */
  invalidate(table: string): void {
    if (table === '*' || table === 'sources') {
      this.sourcesCache = null;
      this.generation.sources++;
    }
    if (table === '*' || table === 'policies') {
      this.policiesCache = null;
      this.generation.policies++;
    }
    // Claim rules decide which claim grants count (interlock_effective_grants, task hcl): a removed rule drops them at once.
    if (table === '*' || GRANT_TABLES.has(table)) {
      this.grantsCache.clear();
      this.generation.grants++;
    }
    if (table === '*' || table === 'catalog_snapshots') {
      this.catalogCache.clear();
      this.generation.catalog++;
    }
  }

  /**
   * Drops the cached grants of one identity (a token sign-in just synced its claim grants, red team
   * rt48d R6): its next grantsForIdentity reads the control database. A load of any identity's
   * grants running now does not store its answer (the generation), so one read before the sync
   * cannot put the old grants back.
   */
  dropGrants(identityId: string): void {
    this.grantsCache.delete(identityId);
    this.generation.grants++;
  }

  /**
   * Marks the source's catalogue stale (a relation it holds was found dropped on the source, red
   * team rtn4 item 2): the next loadCatalog reads the stored snapshot again, so a rescan whose
   * notification this replica missed is picked up at once instead of after the cache's 30 s.
   */
  markCatalogStale(sourceId: string): void {
    this.catalogCache.delete(sourceId);
    this.generation.catalog++;
  }

  private fresh<T>(t: Timed<T> | null | undefined): t is Timed<T> {
    return !!t && t.until > Date.now();
  }

  // While cached, the hot-path reads below answer synchronously (MaybePromise, issue 28 item 3): no
  // async function, promise or await per governed call for what this store already holds.

  private sourceMap(): MaybePromise<Map<string, SourceRecord>> {
    return this.fresh(this.sourcesCache) ? this.sourcesCache.value : this.loadSources();
  }

  private async loadSources(): Promise<Map<string, SourceRecord>> {
    const gen = this.generation.sources;
    const all = await sources.listSources(this.db);
    const map = new Map<string, SourceRecord>(all.map((s) => [s.id, { id: s.id, type: s.type, name: s.name, description: s.description, enabled: s.enabled, settings: s.settings as unknown as Record<string, unknown> }]));
    if (gen === this.generation.sources) this.sourcesCache = { value: map, until: Date.now() + this.ttlMs };
    return map;
  }

  getSource(id: string): MaybePromise<SourceRecord | null> {
    const m = this.sourceMap();
    return m instanceof Promise ? m.then((x) => x.get(id) ?? null) : (m.get(id) ?? null);
  }

  async listSources(): Promise<SourceRecord[]> {
    return [...(await this.sourceMap()).values()];
  }

  grantsForIdentity(identityId: string): MaybePromise<RoleGrant[]> {
    const hit = this.grantsCache.get(identityId);
    return this.fresh(hit) ? hit.value : this.loadGrants(identityId);
  }

  private async loadGrants(identityId: string): Promise<RoleGrant[]> {
    const gen = this.generation.grants;
    const value = (await grantsForIdentity(this.db, identityId)).map((g) => ({ sourceId: g.sourceId, role: { name: g.role.name, audiences: g.role.audiences, statements: g.role.statements } as RoleGrant['role'] }));
    if (gen === this.generation.grants) this.grantsCache.set(identityId, { value, until: Date.now() + this.ttlMs });
    return value;
  }

  activePolicies(): MaybePromise<Policy[]> {
    return this.fresh(this.policiesCache) ? this.policiesCache.value : this.loadPolicies();
  }

  private async loadPolicies(): Promise<Policy[]> {
    const gen = this.generation.policies;
    const value = await activePolicies(this.db);
    if (gen === this.generation.policies) this.policiesCache = { value, until: Date.now() + this.ttlMs };
    return value;
  }

  loadCatalog(sourceId: string): MaybePromise<SourceCatalog | null> {
    const hit = this.catalogCache.get(sourceId);
    return this.fresh(hit) ? hit.value : this.fetchCatalog(sourceId);
  }

  private async fetchCatalog(sourceId: string): Promise<SourceCatalog | null> {
    const gen = this.generation.catalog;
    const stored = await loadCatalogVersion(this.db, sourceId, this.lastCatalog.get(sourceId));
    const value = stored?.catalog ?? null;
    if (gen === this.generation.catalog) {
      if (stored) this.lastCatalog.set(sourceId, stored);
      else this.lastCatalog.delete(sourceId);
      this.catalogCache.set(sourceId, { value, until: Date.now() + Math.max(this.ttlMs, 30_000) });
    }
    return value;
  }

  async createApproval(a: NewApproval, toolCallEvent?: (approvalId: string) => ToolCallAuditEvent): Promise<{ id: string; state: string; audited: boolean }> {
    // The approval row and its audit events commit together (issue 11).
    // Over a pending cap it throws ApprovalQueueFullError, which pipeline step 6 answers approval_queue_full.
    const rec = await queueApproval(this.db, { ...a, ttlSeconds: this.opts.approvalTtlSeconds }, toolCallEvent, this.opts.auditCommitTimeoutMs, this.opts.pendingCaps, this.opts.auditKey);
    return { id: rec.id, state: rec.state, audited: !!toolCallEvent };
  }
}
