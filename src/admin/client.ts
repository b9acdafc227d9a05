/**
 * A client of the admin API (/admin/v1) implementing OperatorBackend, for the CLI's remote mode
 * (`interlock --server URL --token T …`). HTTP errors come back as ControlError of the matching
 * kind (400 → validation, 403 → forbidden, 404 → not_found, 409 → conflict, 401 → forbidden with
 * the server's message, anything else → unavailable), so the CLI exits with the same codes as in
 * its direct mode. The operator of approvals is the token's, never a client-chosen name.
 */
import { ControlError, type ControlErrorKind } from '../control/errors';
import type { ApiKeyRecord } from '../control/keys';
import type { IdentityRecord } from '../control/identities';
import type { ScanResult } from '../control/scan';
import type { SourceRoleRecord } from '../control/roles';
import type { GrantRecord } from '../control/grants';
import type { PolicyRecord } from '../control/policies';
import type { ApprovalRecord } from '../control/approvals';
import type { AuditPage, AuditRecord } from '../audit/writer';
import type { ApprovalDecision, ApprovalReview, CreatedKeyView, ListedApproval, OperatorBackend, SourceView } from './backend';
import { ADMIN_PREFIX, UNKNOWN_ADMIN_ROUTE } from './routes';
import { isDestructive } from '../console/plan';

type FetchFn = (input: string, init?: RequestInit) => Promise<Response>;

function kindFor(status: number): ControlErrorKind {
  if (status === 400 || status === 413 || status === 415) return 'validation';
  if (status === 401 || status === 403) return 'forbidden';
  if (status === 404) return 'not_found';
  if (status === 409) return 'conflict';
  return 'unavailable';
}

const enc = encodeURIComponent;

function qs(params: Record<string, string | number | boolean | null | undefined>): string {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null) u.set(k, String(v));
  const s = u.toString();
  return s ? `?${s}` : '';
}

/**
 * An OperatorBackend over HTTP. `server` is the gateway's base URL (e.g. https://interlock.example:8787,
 * a trailing /mcp is tolerated); `token` an operator token ("ilo_…").
 */
export function remoteBackend(server: string, token: string, fetchFn: FetchFn = (i, init) => fetch(i, init)): OperatorBackend & { whoami(): Promise<{ operator: string; tokenId: string }> } {
  let base: string;
  try {
    const u = new URL(server);
    base = u.origin + u.pathname.replace(/\/+$/, '').replace(/\/mcp$/, '');
  } catch {
    throw new ControlError('validation', `--server must be a URL such as http://127.0.0.1:8787, got ${JSON.stringify(server)}`);
  }
  const call = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
    let res: Response;
    try {
      res = await fetchFn(`${base}${ADMIN_PREFIX}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, accept: 'application/json', ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (err) {
      throw new ControlError('unavailable', `cannot reach the admin API at ${base}${ADMIN_PREFIX} (${(err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message})`);
    }
    const text = await res.text();
    let json: unknown = undefined;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      // not JSON: reported below
    }
    if (!res.ok) {
      const e = (json ?? {}) as { message?: string; details?: string[]; code?: string };
      const message = e.message ?? `the admin API answered HTTP ${res.status}`;
      throw new ControlError(kindFor(res.status), message, Array.isArray(e.details) ? e.details : []);
    }
    if (json === undefined) throw new ControlError('unavailable', `the admin API answered HTTP ${res.status} without a JSON body`);
    return json as T;
  };

  return {
    whoami: () => call('GET', '/whoami'),
    listIdentities: async () => (await call<{ identities: IdentityRecord[] }>('GET', '/identities')).identities,
    showIdentity: (name) => call('GET', `/identities/${enc(name)}`),
    createIdentity: (name) => call('POST', '/identities', { name }),
    setIdentityEnabled: (name, enabled) => call('POST', `/identities/${enc(name)}/${enabled ? 'enable' : 'disable'}`, {}),
    setIdentityAttributes: (name, changes) => call('PATCH', `/identities/${enc(name)}/attributes`, { attributes: changes }),
    linkSubject: (name, x) => call('POST', `/identities/${enc(name)}/subjects`, { issuer: x.issuer, subject: x.subject }),
    unlinkSubject: (name, x) => call('DELETE', `/identities/${enc(name)}/subjects${qs({ issuer: x.issuer, subject: x.subject })}`),

    createKey: (identity, o = {}) => call<CreatedKeyView>('POST', '/keys', { identity, ...(o.expiresAt ? { expiresAt: o.expiresAt } : {}) }),
    listKeys: async (identity) => (await call<{ keys: ApiKeyRecord[] }>('GET', `/keys${qs({ identity })}`)).keys,
    revokeKey: (keyId) => call('POST', `/keys/${enc(keyId)}/revoke`, {}),

    listSources: async () => (await call<{ sources: SourceView[] }>('GET', '/sources')).sources,
    getSource: (id) => call('GET', `/sources/${enc(id)}`),
    addSource: (definition, o = {}) => call('POST', `/sources${qs({ scan: o.scan === false ? false : undefined })}`, definition),
    setSourceEnabled: (id, enabled) => call('POST', `/sources/${enc(id)}/${enabled ? 'enable' : 'disable'}`, {}),
    scanSource: (id) => call<ScanResult>('POST', `/sources/${enc(id)}/scan`, {}),
    circuitState: (id) => call('GET', `/sources/${enc(id)}/circuit`),
    updateSource: (id, patch, o) => call('PATCH', `/sources/${enc(id)}${qs({ scan: o.scan === false ? false : undefined })}`, patch),
    removeSource: (id, o) => call('DELETE', `/sources/${enc(id)}${qs({ force: o.force ? true : undefined })}`),

    applyFile: (input, o) => call('POST', `/apply${qs({ plan: o.plan ? true : undefined, prune: o.prune ? true : undefined, force: o.force ? true : undefined, allow_unknown_names: o.allowUnknownNames ? true : undefined })}`, input),
    exportFile: () => call('GET', '/export'),

    listRoles: async () => (await call<{ roles: SourceRoleRecord[] }>('GET', '/roles')).roles,
    getRole: (name) => call('GET', `/roles/${enc(name)}`),
    putRole: (role, o = {}) => {
      const name = role && typeof role === 'object' ? (role as { name?: unknown }).name : undefined;
      if (typeof name !== 'string' || !name) throw new ControlError('validation', 'invalid role', ["/: must have required property 'name'"]);
      return call('PUT', `/roles/${enc(name)}${qs({ allow_unknown_names: o.allowUnknownNames ? true : undefined })}`, role);
    },
    removeRole: (name, o) => call('DELETE', `/roles/${enc(name)}${qs({ force: o.force ? true : undefined })}`),

    listGrants: async (f = {}) => (await call<{ grants: GrantRecord[] }>('GET', `/grants${qs(f)}`)).grants,
    grant: (g) => call('POST', '/grants', g),
    revoke: (g) => call('DELETE', `/grants/${enc(g.identity)}/${enc(g.role)}/${enc(g.source)}`),

    listPolicies: async () => (await call<{ policies: PolicyRecord[] }>('GET', '/policies')).policies,
    getPolicy: (name) => call('GET', `/policies/${enc(name)}`),
    addPolicies: async (input, o = {}) => (await call<{ policies: Array<{ policy: PolicyRecord; created: boolean }> }>('POST', `/policies${qs({ replace: o.replace ? true : undefined, allow_unknown_names: o.allowUnknownNames ? true : undefined })}`, input)).policies,
    removePolicy: (name) => call('DELETE', `/policies/${enc(name)}`),

    // A gateway from before the requester problem in the list sends none: null (as for no problem).
    listApprovals: async (f = {}) => (await call<{ approvals: Array<ApprovalRecord & { requesterProblem?: ListedApproval['requesterProblem'] }> }>('GET', `/approvals${qs(f)}`)).approvals.map((a) => ({ ...a, requesterProblem: a.requesterProblem ?? null })),
    getApproval: (id) => call('GET', `/approvals/${enc(id)}`),
    async reviewApproval(id) {
      try {
        // A gateway from before the requester warning sends none: null (as for no problem).
        const r = await call<Omit<ApprovalReview, 'requester'> & { requester?: ApprovalReview['requester'] }>('GET', `/approvals/${enc(id)}/review`);
        return { ...r, requester: r.requester ?? null };
      } catch (err) {
        // A gateway from before the review route answers unknown_route: the record alone, no plan.
        if (!(err instanceof ControlError && err.kind === 'not_found' && err.message === UNKNOWN_ADMIN_ROUTE)) throw err;
        const approval = await call<ApprovalRecord>('GET', `/approvals/${enc(id)}`);
        return { approval, destructive: isDestructive(approval.classification), estimate: null, plan: { ok: false, reason: 'the gateway has no approval review (GET /admin/v1/approvals/{id}/review): upgrade it for the plan and row estimate' }, requester: null };
      }
    },
    approve: (id, o) => call<ApprovalDecision>('POST', `/approvals/${enc(id)}/approve`, o.reason ? { reason: o.reason } : {}),
    reject: (id, o) => call('POST', `/approvals/${enc(id)}/reject`, o.reason ? { reason: o.reason } : {}),
    requeue: (id) => call('POST', `/approvals/${enc(id)}/requeue`, {}),

    searchAudit: (q = {}) => call<AuditPage>('GET', `/audit${qs({ ...q })}`),
    tailAudit: async (lines) => (await call<{ events: AuditRecord[] }>('GET', `/audit/tail${qs({ lines })}`)).events,
  };
}
