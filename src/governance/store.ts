/**
 * What the data plane reads from the control plane, as one narrow interface so the pipeline can be
 * unit-tested in memory and served from the control database in production (src/governance/
 * db-store.ts). Contract: Governance And Errors.
 */
import type { Policy } from '../../generated/policy-v1';
import type { SourceCatalog } from '../sql/catalog-types';
import type { RoleGrant } from './evaluator';
import type { ToolCallAuditEvent } from '../audit/types';

/** A registered source as the pipeline needs it. `settings` is connector-specific (postgres: PostgresSourceSettings). */
export interface SourceRecord {
  id: string;
  type: 'postgres' | 'documents';
  name: string;
  description?: string | null;
  enabled: boolean;
  settings: Record<string, unknown>;
}

/** A write to hold for approval (pipeline step 6). */
export interface NewApproval {
  sourceId: string;
  identityId: string;
  keyId: string;
  requestId: string;
  sql: string;
  params: unknown[];
  classification: Record<string, unknown>;
  /** Issue 27: the requester's claim-derived values of the attributes its row rules read (null: none); kept for the approval. */
  claimAttributes?: Record<string, unknown> | null;
}

/**
 * A value, or a promise of it. A store answers from its cache synchronously (the value itself), so a
 * governed call's pipeline creates and awaits no promise for what it already holds (issue 28 item 3:
 * promise churn); callers either `await` it or test `instanceof Promise` first.
 */
export type MaybePromise<T> = T | Promise<T>;

/**
 * Read side of governance plus the approval queue's insert: what the pipeline reads of the governance tables. getSource, grantsForIdentity, activePolicies and
 * loadCatalog may answer synchronously (MaybePromise) when the value is cached; a failed load rejects.
 */
export interface GovernanceStore {
  getSource(id: string): MaybePromise<SourceRecord | null>;
  listSources(): Promise<SourceRecord[]>;
  grantsForIdentity(identityId: string): MaybePromise<RoleGrant[]>;
  activePolicies(): MaybePromise<Policy[]>;
  loadCatalog(sourceId: string): MaybePromise<SourceCatalog | null>;
  /**
   * Stores a write for approval. With `toolCallEvent`, a store that can also commits that event
   * (built for the new approval id) in the same transaction, and answers `audited: true`.
   */
  createApproval(a: NewApproval, toolCallEvent?: (approvalId: string) => ToolCallAuditEvent): Promise<{ id: string; state: string; audited?: boolean }>;
}

/** An in-memory GovernanceStore (unit tests and property tests of the pipeline). */
export class MemoryGovernanceStore implements GovernanceStore {
  sources = new Map<string, SourceRecord>();
  grants: Array<RoleGrant & { identityId: string }> = [];
  policies: Policy[] = [];
  catalogs = new Map<string, SourceCatalog>();
  approvals: Array<NewApproval & { id: string; state: string }> = [];
  async getSource(id: string) {
    return this.sources.get(id) ?? null;
  }
  async listSources() {
    return [...this.sources.values()];
  }
  async grantsForIdentity(identityId: string) {
    return this.grants.filter((g) => g.identityId === identityId).map(({ sourceId, role }) => ({ sourceId, role }));
  }
  async activePolicies() {
    return this.policies.filter((p) => p.enabled !== false);
  }
  async loadCatalog(sourceId: string) {
    return this.catalogs.get(sourceId) ?? null;
  }
  async createApproval(a: NewApproval) {
    const rec = { ...a, id: `apr_mem_${this.approvals.length + 1}`, state: 'pending' };
    this.approvals.push(rec);
    return { id: rec.id, state: rec.state };
  }
}
