/**
 * The operator operations behind the admin API (/admin/v1) and the CLI: one interface, two
 * implementations — `directBackend` works on the control database (the admin routes and the CLI's
 * default mode use it), `remoteBackend` (src/admin/client.ts) calls the admin API (the CLI's
 * `--server URL --token T` mode). Both report failures as ControlError kinds, so the CLI's exit
 * codes and the API's HTTP statuses mean the same thing in both modes.
 *
 * Records keep the control plane's camelCase shapes (what `interlock … --json` prints).
 */
import type { Logger } from 'pino';
import type { ControlDb } from '../control/db';
import { ControlError, NotFoundError, ValidationError } from '../control/errors';
import { createIdentity, disableIdentity, enableIdentity, linkIdentitySubject, listIdentities, requireIdentity, setIdentityAttributes, showIdentity, unlinkIdentitySubject, type IdentityDetail, type IdentityRecord, type IdentitySubjectLink } from '../control/identities';
import { createApiKey, listApiKeys, revokeApiKey, type ApiKeyRecord } from '../control/keys';
import { addSource, listSources, redactSourceSettings, removeSource, requireSource, setSourceEnabled, updateSource, type SourceRecord, type SourceRemoval } from '../control/sources';
import { applyInterlockFile, type ApplyInput, type ApplyResult } from '../declarative/apply';
import { exportInterlockFile } from '../declarative/export';
import type { InterlockFile, SecretResolver } from '../declarative/schema';
import { scanSource, type ScanResult } from '../control/scan';
import { catalogSummaries } from '../control/catalog';
import { getRole, listRoles, removeRole, upsertRole, type RoleRemoval, type SourceRoleRecord } from '../control/roles';
import { grantRole, listGrants, revokeGrant, type GrantRecord } from '../control/grants';
import { addPolicies, getPolicy, listPolicies, removePolicy, type PolicyRecord } from '../control/policies';
import { listApprovals, requireApproval, sweepExpiredApprovals, type ApprovalFailureCause, type ApprovalRecord, type ApprovalState } from '../control/approvals';
import { searchAudit, tailAudit, type AuditKind, type AuditPage, type AuditRecord } from '../audit/writer';
import type { SourceConnectorRegistry } from '../sources/registry';
import type { GovernanceAccess, GovernanceFamily } from './governance-db';
import { reviewApprovalPlan, type ApprovalPlanReview } from '../console/plan';
import { requesterProblems, type RequesterProblem } from '../approvals/requester';

/** Catalog summary of a source (null when never scanned). */
export interface CatalogSummary {
  scannedAt: string;
  truncated: boolean;
  relations: number;
}

/** A source as operators see it: settings with passwords and CA bundles redacted, catalog, circuit. */
export type SourceView = Omit<SourceRecord, 'settings'> & {
  settings: Record<string, unknown>;
  catalog: CatalogSummary | null;
  /** Circuit breaker state on the answering replica: closed, open, half_open; "closed" when no connection was opened yet. */
  circuit: string;
};

/** A new API key: the secret is shown once. */
export interface CreatedKeyView {
  keyId: string;
  identity: string;
  secret: string;
  prefix: string;
  expiresAt: string | null;
  warning: string;
}

/** What approving a write did. */
export interface ApprovalDecision {
  id: string;
  approvalId: string;
  state: 'executed' | 'failed';
  rowCount?: number;
  errorCode?: string;
  /** Operators only: why the execution failed. */
  failure?: ApprovalFailureCause;
}

/**
 * An approval with what an operator reviews before approving it (`GET /admin/v1/approvals/{id}/review`,
 * `interlock approval show|approve`): destructive or not, its plan as the writer role and the
 * planner's row estimate, made by the console's one estimator (src/console/plan.ts). `plan` null:
 * not pending, or its source is gone; `estimate` null: no plan.
 */
export type ApprovalReview = { approval: ApprovalRecord } & ApprovalPlanReview;

/**
 * An approval as `GET /admin/v1/approvals` and `interlock approval list` list it: the record and, for
 * a pending one, why approving will not run it (its key revoked or expired, its identity disabled:
 * src/approvals/requester.ts), as the console flags it; null for no problem or another state (task
 * hnu41 item 6).
 */
export type ListedApproval = ApprovalRecord & { requesterProblem: RequesterProblem | null };

/** Audit search filters; `identity` is a name or an idn_ id. */
export interface AuditQuery {
  identity?: string;
  source?: string;
  decision?: string;
  kind?: AuditKind;
  approval?: string;
  request?: string;
  since?: string;
  until?: string;
  limit?: number;
  cursor?: string | null;
}

/** The operator operations. Every method throws ControlError (validation, conflict, not_found, forbidden, unavailable). */
export interface OperatorBackend {
  listIdentities(): Promise<IdentityRecord[]>;
  /** One identity with its token subjects (issuer, subject, last use), grants and key counts (issue 26). */
  showIdentity(nameOrId: string): Promise<IdentityDetail>;
  createIdentity(name: string): Promise<IdentityRecord>;
  setIdentityEnabled(nameOrId: string, enabled: boolean): Promise<IdentityRecord>;
  /** Sets (or, with null, removes) attributes row rules read as identity.<name> (issue 27). */
  setIdentityAttributes(nameOrId: string, changes: Record<string, unknown>): Promise<IdentityRecord>;
  /** Links a token subject (issuer, sub) to the identity (task hnu3 item 2); ConflictError when another identity has it. */
  linkSubject(nameOrId: string, s: { issuer: string; subject: string }): Promise<IdentitySubjectLink>;
  /** Unlinks a token subject from the identity; NotFoundError when it is not linked to it. */
  unlinkSubject(nameOrId: string, s: { issuer: string; subject: string }): Promise<IdentitySubjectLink>;

  createKey(identity: string, opts?: { expiresAt?: string }): Promise<CreatedKeyView>;
  listKeys(identity?: string): Promise<ApiKeyRecord[]>;
  revokeKey(keyId: string): Promise<ApiKeyRecord>;

  listSources(): Promise<SourceView[]>;
  getSource(id: string): Promise<SourceView>;
  addSource(definition: unknown, opts?: { scan?: boolean }): Promise<{ source: SourceView; scan: ScanResult | null; scanError: string | null }>;
  setSourceEnabled(id: string, enabled: boolean): Promise<SourceView>;
  scanSource(id: string): Promise<ScanResult>;
  circuitState(id: string): Promise<{ sourceId: string; state: string }>;
  /**
   * Changes a source by a JSON merge patch of its definition and, when a connection setting
   * changed, scans its catalog again (unless scan is false). `operator` is ignored remotely. Issue 16.
   */
  updateSource(id: string, patch: unknown, opts: { operator: string; scan?: boolean }): Promise<{ source: SourceView; changed: string[]; scan: ScanResult | null; scanError: string | null }>;
  /** Removes a source (audit and approvals kept); ConflictError while approvals are pending unless force. Issue 16. */
  removeSource(id: string, opts: { operator: string; force?: boolean }): Promise<SourceRemoval>;

  /** Plans or applies an interlock file (src/declarative/apply.ts). `operator` is ignored remotely. Issue 16. */
  applyFile(input: ApplyInput, opts: { operator: string; plan?: boolean; prune?: boolean; force?: boolean; allowUnknownNames?: boolean; secrets?: SecretResolver }): Promise<ApplyResult>;
  /** The current state as an interlock file, passwords as references. Issue 16. */
  exportFile(): Promise<InterlockFile>;

  listRoles(): Promise<SourceRoleRecord[]>;
  getRole(name: string): Promise<SourceRoleRecord>;
  /** Creates or replaces a role; `allowUnknownNames` lets resources name relations or columns no scanned catalogue has (task hnu4a item 1). */
  putRole(role: unknown, opts?: { allowUnknownNames?: boolean }): Promise<{ role: SourceRoleRecord; created: boolean }>;
  /** Removes a role; 409 while claim rules name it, or while granted or named by policies unless force (src/control/roles.ts removeRole). */
  removeRole(name: string, opts: { operator: string; force?: boolean }): Promise<RoleRemoval>;

  listGrants(filter?: { identity?: string; source?: string; role?: string }): Promise<GrantRecord[]>;
  grant(g: { identity: string; role: string; source: string }): Promise<{ identity: string; role: string; source: string; created: boolean }>;
  revoke(g: { identity: string; role: string; source: string }): Promise<{ identity: string; role: string; source: string; revoked: true }>;

  listPolicies(): Promise<PolicyRecord[]>;
  getPolicy(name: string): Promise<PolicyRecord>;
  /** Adds policies; `allowUnknownNames` lets rules name relations or columns no scanned catalogue has (an unregistered source is refused always). */
  addPolicies(input: unknown, opts?: { replace?: boolean; allowUnknownNames?: boolean }): Promise<Array<{ policy: PolicyRecord; created: boolean }>>;
  removePolicy(name: string): Promise<{ name: string; removed: true }>;

  /** Newest first, each with its requester problem (ListedApproval). */
  listApprovals(filter?: { state?: ApprovalState; source?: string; identity?: string; limit?: number }): Promise<ListedApproval[]>;
  getApproval(id: string): Promise<ApprovalRecord>;
  /** The approval with its plan as the writer and row estimate (a pending one is planned now, EXPLAIN only). */
  reviewApproval(id: string): Promise<ApprovalReview>;
  /** Approves and executes once. `operator` is ignored remotely (the token names the operator). */
  approve(id: string, opts: { operator: string; reason?: string }): Promise<ApprovalDecision>;
  reject(id: string, opts: { operator: string; reason?: string }): Promise<ApprovalRecord>;
  /** A new pending approval from a failed one (src/approvals/requeue.ts). */
  requeue(id: string, opts: { operator: string }): Promise<ApprovalRecord>;

  searchAudit(q?: AuditQuery): Promise<AuditPage>;
  tailAudit(lines: number): Promise<AuditRecord[]>;
}

/** Options of directBackend. */
export interface DirectBackendOptions {
  /** Circuit states of this replica's connectors (the gateway's registry); absent: every source "closed". */
  circuitStates?: () => Record<string, string>;
  /** Connector registry for approved writes (reused pools); absent: a registry per approval. */
  connectors?: SourceConnectorRegistry;
  logger?: Logger;
  /** Rescans a source after an approved write's guard refused it catalog_stale (task hw; ApproveOptions.onCatalogStale); absent: the approval scans it itself. */
  onCatalogStale?: (facts: { sourceId: string; approvalId: string }) => Promise<void>;
  /**
   * Who makes the governance changes done through this backend (role, grant, identity, key, policy
   * and source changes; recorded in their kind-config audit events): the OS user name in the direct
   * CLI, the token's or console session's operator on the server. Absent: "system".
   */
  operator?: string;
  /**
   * Where governance changes (identities, keys, sources, roles, grants, policies, apply) are written
   * and whether the role may (src/admin/governance-db.ts): the operator connection, or the
   * gateway's pool with its privileges checked. Absent: on `db`, unchecked (the CLI as the owner).
   * Reads, scans and approvals always use `db`.
   */
  governance?: GovernanceAccess;
}

/** What approve/reject in src/approvals/execute.ts do (loaded on first use: the data plane owns it). */
interface ApprovalsModule {
  approveAndExecute(db: ControlDb, approvalId: string, opts: { operator: string; reason?: string; connectors?: SourceConnectorRegistry; logger?: Logger; onCatalogStale?: (facts: { sourceId: string; approvalId: string }) => Promise<void>; }): Promise<{ state: 'executed' | 'failed'; rowCount?: number; errorCode?: string; failure?: ApprovalFailureCause }>;
  rejectApproval(db: ControlDb, approvalId: string, opts: { operator: string; reason?: string }): Promise<ApprovalRecord>;
}

function approvalsModule(): ApprovalsModule {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require('../approvals/execute') as ApprovalsModule;
}

function toDate(text: string | undefined, what: string): Date | undefined {
  if (text === undefined) return undefined;
  const d = new Date(text);
  if (Number.isNaN(d.getTime())) throw new ValidationError(`${what}: expected an ISO-8601 time (2026-11-29T12:00:00Z), got ${JSON.stringify(text)}`);
  return d;
}

/** The operator operations on the control database; governance changes are audited in `opts.operator`'s name. */
export function directBackend(db: ControlDb, opts: DirectBackendOptions = {}): OperatorBackend {
  const circuits = () => opts.circuitStates?.() ?? {};
  const view = (r: SourceRecord, catalog: CatalogSummary | null, states: Record<string, string>): SourceView => ({
    ...r,
    settings: redactSourceSettings(r.settings),
    catalog,
    circuit: states[r.id] ?? 'closed',
  });
  const oneView = async (r: SourceRecord): Promise<SourceView> => view(r, (await catalogSummaries(db)).get(r.id) ?? null, circuits());
  const actor = { operator: opts.operator };
  const identityId = async (nameOrId: string | undefined) => (nameOrId ? (await requireIdentity(db, nameOrId)).id : undefined);
  // A governance write: on the governance access's pool when there is one (refused clearly when its role may not), else on db.
  const write = <T>(family: GovernanceFamily, fn: (g: ControlDb) => Promise<T>): Promise<T> => (opts.governance ? opts.governance.run(family, fn) : fn(db));

  return {
    listIdentities: () => listIdentities(db),
    showIdentity: (name) => showIdentity(db, name),
    createIdentity: (name) => write('identity', (g) => createIdentity(g, name, actor)),
    setIdentityEnabled: (name, enabled) => write('identity', (g) => (enabled ? enableIdentity(g, name, actor) : disableIdentity(g, name, actor))),
    setIdentityAttributes: (name, changes) => write('identity', (g) => setIdentityAttributes(g, name, changes, actor)),
    linkSubject: (name, x) => write('subject', (g) => linkIdentitySubject(g, name, x.issuer, x.subject, actor)),
    unlinkSubject: (name, x) => write('subject', (g) => unlinkIdentitySubject(g, name, x.issuer, x.subject, actor)),

    async createKey(identity, o = {}) {
      const idn = await requireIdentity(db, identity);
      const expiresAt = toDate(o.expiresAt, 'expiresAt');
      const k = await write('key', (g) => createApiKey(g, idn.id, { expiresAt }, actor));
      return { keyId: k.keyId, identity: idn.name, secret: k.secret, prefix: k.prefix, expiresAt: k.expiresAt, warning: 'Store this key now: it is shown only once and cannot be recovered.' };
    },
    async listKeys(identity) {
      return listApiKeys(db, { identityId: await identityId(identity) });
    },
    revokeKey: (keyId) => write('key', (g) => revokeApiKey(g, keyId, actor)),

    async listSources() {
      const [rows, cats] = await Promise.all([listSources(db), catalogSummaries(db)]);
      const states = circuits();
      return rows.map((r) => view(r, cats.get(r.id) ?? null, states));
    },
    async getSource(id) {
      return oneView(await requireSource(db, id));
    },
    async addSource(definition, o = {}) {
      const rec = await write('source', (g) => addSource(g, definition, actor));
      let scan: ScanResult | null = null;
      let scanError: string | null = null;
      if (rec.type === 'postgres' && rec.enabled && o.scan !== false) {
        try {
          scan = await scanSource(db, rec.id);
        } catch (err) {
          scanError = (err as Error).message;
        }
      }
      return { source: await oneView(rec), scan, scanError };
    },
    async setSourceEnabled(id, enabled) {
      return oneView(await write('source', (g) => setSourceEnabled(g, id, enabled, actor)));
    },
    scanSource: (id) => scanSource(db, id),
    async circuitState(id) {
      await requireSource(db, id);
      return { sourceId: id, state: circuits()[id] ?? 'closed' };
    },
    async updateSource(id, patch, o) {
      const u = await write('source', (g) => updateSource(g, id, patch, { operator: o.operator }));
      let scan: ScanResult | null = null;
      let scanError: string | null = null;
      if (u.connectionChanged && u.source.type === 'postgres' && u.source.enabled && o.scan !== false) {
        try {
          scan = await scanSource(db, id);
        } catch (err) {
          scanError = (err as Error).message;
        }
      }
      return { source: await oneView(u.source), changed: u.changed, scan, scanError };
    },
    removeSource: (id, o) => write('source', (g) => removeSource(g, id, o)),

    // A plan only reads: it runs on db whatever the role.
    applyFile: (input, o) => (o.plan ? applyInterlockFile(db, input, o) : write('apply', (g) => applyInterlockFile(g, input, o))),
    exportFile: () => exportInterlockFile(db),

    listRoles: () => listRoles(db),
    async getRole(name) {
      const r = await getRole(db, name);
      if (!r) throw new NotFoundError(`role "${name}" not found`);
      return r;
    },
    putRole: (role, o = {}) => write('role', (g) => upsertRole(g, role, actor, { allowUnknownNames: o.allowUnknownNames })),
    removeRole: (name, o) => write('role', (g) => removeRole(g, name, o)),

    async listGrants(f = {}) {
      return listGrants(db, { identityId: await identityId(f.identity), sourceId: f.source, roleName: f.role });
    },
    async grant(g) {
      const i = await requireIdentity(db, g.identity);
      const created = await write('grant', (w) => grantRole(w, { identityId: i.id, roleName: g.role, sourceId: g.source }, actor));
      return { identity: i.name, role: g.role, source: g.source, created };
    },
    async revoke(g) {
      const i = await requireIdentity(db, g.identity);
      if (!(await write('grant', (w) => revokeGrant(w, { identityId: i.id, roleName: g.role, sourceId: g.source }, actor)))) throw new NotFoundError(`${i.name} holds no role ${g.role} on ${g.source}`);
      return { identity: i.name, role: g.role, source: g.source, revoked: true };
    },

    listPolicies: () => listPolicies(db),
    async getPolicy(name) {
      const p = await getPolicy(db, name);
      if (!p) throw new NotFoundError(`policy "${name}" not found`);
      return p;
    },
    addPolicies: (input, o = {}) => write('policy', (g) => addPolicies(g, input, { replace: o.replace, allowUnknownNames: o.allowUnknownNames }, actor)),
    async removePolicy(name) {
      if (!(await write('policy', (g) => removePolicy(g, name, actor)))) throw new NotFoundError(`policy "${name}" not found`);
      return { name, removed: true };
    },

    async listApprovals(f = {}) {
      await sweepExpiredApprovals(db);
      const rows = await listApprovals(db, { state: f.state, sourceId: f.source, identityId: await identityId(f.identity), limit: f.limit });
      const problems = await requesterProblems(db, rows.filter((a) => a.state === 'pending'));
      return rows.map((a) => ({ ...a, requesterProblem: problems.get(a.id) ?? null }));
    },
    async getApproval(id) {
      await sweepExpiredApprovals(db);
      return requireApproval(db, id);
    },
    async reviewApproval(id) {
      await sweepExpiredApprovals(db);
      const approval = await requireApproval(db, id);
      return { approval, ...(await reviewApprovalPlan(db, approval)) };
    },
    async approve(id, o) {
      await sweepExpiredApprovals(db);
      const a = await requireApproval(db, id);
      if (a.identityName === o.operator) throw new ControlError('forbidden', `self_approval_forbidden: ${o.operator} requested this write and cannot approve it`);
      if (a.state !== 'pending') throw new ControlError('conflict', `approval ${id} is ${a.state}, not pending`);
      const r = await approvalsModule().approveAndExecute(db, id, { operator: o.operator, reason: o.reason, connectors: opts.connectors, logger: opts.logger, ...(opts.onCatalogStale ? { onCatalogStale: opts.onCatalogStale } : {}) });
      return { id, approvalId: id, state: r.state, ...(r.rowCount !== undefined ? { rowCount: r.rowCount } : {}), ...(r.errorCode !== undefined ? { errorCode: r.errorCode } : {}), ...(r.failure ? { failure: r.failure } : {}) };
    },
    async reject(id, o) {
      await sweepExpiredApprovals(db);
      const a = await requireApproval(db, id);
      if (a.state !== 'pending') throw new ControlError('conflict', `approval ${id} is ${a.state}, not pending`);
      return approvalsModule().rejectApproval(db, id, { operator: o.operator, reason: o.reason });
    },
    async requeue(id, o) {
      await sweepExpiredApprovals(db);
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      return (require('../approvals/requeue') as typeof import('../approvals/requeue')).requeueApproval(db, id, { operator: o.operator });
    },

    async searchAudit(q = {}) {
      return searchAudit(db, {
        identityId: await identityId(q.identity),
        sourceId: q.source,
        decision: q.decision,
        kind: q.kind,
        approvalId: q.approval,
        requestId: q.request,
        since: q.since,
        until: q.until,
        limit: q.limit,
        cursor: q.cursor ?? null,
      });
    },
    tailAudit: (lines) => tailAudit(db, lines),
  };
}
