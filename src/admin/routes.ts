/**
 * The operators' admin API under /admin/v1 (issue 6, Build 4): identities, API keys, sources
 * (with catalog and circuit state), roles, grants, policies, approvals (with the review an operator
 * reads before approving: plan as the writer and row estimate) and the audit trail — the
 * operations of the CLI, through src/admin/backend.ts (directBackend), so both behave alike.
 *
 * Authentication: `Authorization: Bearer <operator token>` ("ilo_…", src/admin/tokens.ts). Agent
 * API keys are not operator tokens: an agent key here is 401 invalid_operator_token, and an
 * operator token on /mcp or /v1 is 401 invalid_api_key. Approvals are decided in the name of the
 * token's operator (recorded as decided_by and in the audit).
 *
 * Bodies are JSON; single resources are answered bare, lists inside a named member
 * (`{identities: [...]}`); records use the control plane's camelCase names, like `interlock …
 * --json`. Errors are `{error, code, message, details?}`: ValidationError → 400
 * validation_failed (also a body field its spec/openapi-v1.yaml schema does not allow, named by its
 * JSON pointer, before anything runs: src/http/closed-body.ts), NotFoundError → 404 not_found, ConflictError → 409 conflict, a self-approval
 * → 403 self_approval_forbidden, a stored password that would follow a changed endpoint → 400
 * password_required (issue 24, item 1), an unreachable source → 503 unavailable, a governance
 * change the gateway's database role may not make (no operator connection, or one whose role lacks
 * `interlock db grant-operator-role`) → 403 forbidden naming the fix (src/admin/governance-db.ts).
 * spec/openapi-v1.yaml describes every route.
 */
import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import type { ControlDb } from '../control/db';
import { ControlError, PasswordRequiredError } from '../control/errors';
import { APPROVAL_STATES, type ApprovalState } from '../control/approvals';
import type { AuditKind } from '../audit/writer';
import type { DispatchDeps } from '../protocol/dispatch';
import { bearerToken } from '../pipeline/01-identity';
import type { SourceConnectorRegistry } from '../sources/registry';
import { defaultOriginPolicy, type OriginPolicy } from '../transport/http-headers';
import { hostOriginGuard, isObject, jsonBody, routerErrorHandler, sendError, type HttpErrorCode } from '../http/common';
import { operatorTokenBudget } from './token-budget';
import { closedBody } from '../http/closed-body';
import { directBackend, type OperatorBackend } from './backend';
import { GovernanceAccess } from './governance-db';
import { resolveOperatorToken, type Operator } from './tokens';
import { adminApiSecrets } from '../declarative/schema';

/** Options of mountAdmin. */
export interface AdminOptions {
  db: ControlDb;
  /** Circuit breaker state per source id on this replica (the gateway's SourceConnectorRegistry.states). */
  circuitStates?: () => Record<string, string>;
  /** The gateway's connector registry, reused for approved writes (optional). */
  connectors?: SourceConnectorRegistry;
  logger?: Logger;
  /** Host/Origin guard (default: loopback names only). */
  originPolicy?: OriginPolicy;
  /**
   * Where governance changes are written (src/admin/governance-db.ts: the operator connection, or
   * `db` with its role's privileges checked). Default: `db`, checked on first use.
   */
  governance?: GovernanceAccess;
  /** Rescans a source after an approved write's guard refused it catalog_stale (task hw; ApproveOptions.onCatalogStale); absent: the approval scans it itself. */
  onCatalogStale?: (facts: { sourceId: string; approvalId: string }) => Promise<void>;
}

/** The message of the admin API's 404 for a route it does not have (remote clients recognise an older gateway by it). */
export const UNKNOWN_ADMIN_ROUTE = 'No such admin route (or method)';

/** Path prefix of the admin API. */
export const ADMIN_PREFIX = '/admin/v1';

/** A route handler: returns the JSON body; may set res.locals.status to override the route's success status. */
type Handler = (req: Request, res: Response, backend: OperatorBackend, operator: Operator) => Promise<unknown>;

/** Maps a ControlError to the HTTP error shape. */
export function sendControlError(res: Response, err: ControlError): void {
  const map: Record<ControlError['kind'], HttpErrorCode> = { validation: 'validation_failed', conflict: 'conflict', not_found: 'not_found', forbidden: 'forbidden', unavailable: 'unavailable' };
  if (err.kind === 'forbidden' && err.message.startsWith('self_approval_forbidden')) {
    res.status(403).json({ error: 'forbidden', code: 'self_approval_forbidden', message: err.message });
    return;
  }
  if (err instanceof PasswordRequiredError) return sendError(res, err.code, err.message, { details: err.details });
  sendError(res, map[err.kind], err.message, { details: err.details });
}

function queryString(req: Request, name: string): string | undefined {
  const v = req.query[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw new ControlError('validation', `query parameter ${name} must be given once`);
  return v;
}

function queryInt(req: Request, name: string, max: number): number | undefined {
  const v = queryString(req, name);
  if (v === undefined) return undefined;
  if (!/^[0-9]{1,9}$/.test(v) || Number(v) < 1 || Number(v) > max) throw new ControlError('validation', `${name} must be a whole number from 1 to ${max}`);
  return Number(v);
}

function queryBool(req: Request, name: string): boolean | undefined {
  const v = queryString(req, name);
  if (v === undefined) return undefined;
  if (v !== 'true' && v !== 'false') throw new ControlError('validation', `${name} must be true or false`);
  return v === 'true';
}

function bodyString(body: unknown, name: string, required: true): string;
function bodyString(body: unknown, name: string, required: false): string | undefined;
function bodyString(body: unknown, name: string, required: boolean): string | undefined {
  const v = isObject(body) ? body[name] : undefined;
  if (v === undefined && !required) return undefined;
  if (typeof v !== 'string' || v.length === 0) throw new ControlError('validation', `the body needs ${name} (a non-empty string)`);
  return v;
}

/** Mounts /admin/v1 on `app`. Of `deps` (the admin API runs no tool calls) only the client limits and keyless audit are used: a missing or unknown operator token spends the address's keyless budget (red team rt49b D3, src/admin/token-budget.ts). */
export function mountAdmin(app: Express, deps: DispatchDeps | undefined, opts: AdminOptions): void {
  const logger = opts.logger;
  const router = express.Router();
  const budget = operatorTokenBudget(deps, 'admin');
  router.use(ADMIN_PREFIX, hostOriginGuard(opts.originPolicy ?? defaultOriginPolicy()));
  router.use(ADMIN_PREFIX, async (req: Request, res: Response, next: NextFunction) => {
    const token = bearerToken(req.headers.authorization);
    const challenge = { 'WWW-Authenticate': 'Bearer realm="interlock-admin"' };
    // The keyless budget of the client address (red team rt49b D3): refused 429 before any look-up
    // once it is spent, but for a token that resolved lately.
    if (budget.refused(req, res, token)) return;
    if (!token) {
      budget.spend(req);
      return sendError(res, 'missing_operator_token', 'The admin API needs an operator token: send Authorization: Bearer <ilo_… token> (interlock operator-token create NAME)', { headers: challenge });
    }
    try {
      const operator = await resolveOperatorToken(opts.db, token);
      if (!operator) {
        budget.spend(req);
        return sendError(res, 'invalid_operator_token', 'The operator token is not valid: it is unknown, revoked or expired (agent API keys are not operator tokens)', { headers: challenge });
      }
      budget.resolved(token);
      res.locals.operator = operator;
      next();
    } catch (err) {
      next(err);
    }
  });

  // One backend per request: its governance changes are audited in the token's operator's name.
  const governance = opts.governance ?? new GovernanceAccess(opts.db, 'runtime', logger);
  const backendFor = (operator: Operator) => directBackend(opts.db, { circuitStates: opts.circuitStates, connectors: opts.connectors, logger, operator: operator.name, governance, onCatalogStale: opts.onCatalogStale });
  const route = (method: 'get' | 'post' | 'put' | 'patch' | 'delete', path: string, handler: Handler, status = 200) => {
    const run = async (req: Request, res: Response) => {
      const operator = res.locals.operator as Operator;
      try {
        const body = await handler(req, res, backendFor(operator), operator);
        if (!res.headersSent) res.status(typeof res.locals.status === 'number' ? res.locals.status : status).json(body);
        if (method !== 'get') logger?.info({ component: 'admin', operator: operator.name, method: req.method, path: req.path, status: res.statusCode }, 'admin change');
      } catch (err) {
        if (err instanceof ControlError) return sendControlError(res, err);
        logger?.error({ err, path: req.path }, 'admin route failed');
        sendError(res, 'internal_error', 'internal error');
      }
    };
    if (method === 'get' || method === 'delete') router[method](ADMIN_PREFIX + path, run);
    else router[method](ADMIN_PREFIX + path, ...jsonBody(), closedBody(`${method.toUpperCase()} ${ADMIN_PREFIX}${path.replace(/:[A-Za-z_]+/g, '{}')}`), run);
  };

  route('get', '/whoami', async (_q, _r, _b, op) => ({ operator: op.name, tokenId: op.tokenId }));

  // identities
  route('get', '/identities', async (_q, _r, b) => ({ identities: await b.listIdentities() }));
  route('post', '/identities', async (q, _r, b) => b.createIdentity(bodyString(q.body, 'name', true)), 201);
  route('get', '/identities/:name', async (q, _r, b) => b.showIdentity(String(q.params.name)));
  route('post', '/identities/:name/disable', async (q, _r, b) => b.setIdentityEnabled(String(q.params.name), false));
  route('patch', '/identities/:name/attributes', async (q, _r, b) => b.setIdentityAttributes(String(q.params.name), ((q.body ?? {}) as { attributes?: Record<string, unknown> }).attributes as Record<string, unknown>));
  route('post', '/identities/:name/enable', async (q, _r, b) => b.setIdentityEnabled(String(q.params.name), true));
  // Token subjects (task hnu3 item 2): 201 when linked now, 200 when it already was.
  route('post', '/identities/:name/subjects', async (q, r, b) => {
    const link = await b.linkSubject(String(q.params.name), { issuer: bodyString(q.body, 'issuer', true), subject: bodyString(q.body, 'subject', true) });
    r.locals.status = link.changed ? 201 : 200;
    return link;
  });
  route('delete', '/identities/:name/subjects', async (q, _r, b) => {
    const issuer = queryString(q, 'issuer');
    const subject = queryString(q, 'subject');
    if (!issuer || !subject) throw new ControlError('validation', 'unlinking a token subject needs the query parameters issuer and subject (non-empty)');
    return b.unlinkSubject(String(q.params.name), { issuer, subject });
  });

  // keys
  route('get', '/keys', async (q, _r, b) => ({ keys: await b.listKeys(queryString(q, 'identity')) }));
  route('post', '/keys', async (q, _r, b) => b.createKey(bodyString(q.body, 'identity', true), { expiresAt: bodyString(q.body, 'expiresAt', false) }), 201);
  route('post', '/keys/:id/revoke', async (q, _r, b) => b.revokeKey(String(q.params.id)));

  // sources
  route('get', '/sources', async (_q, _r, b) => ({ sources: await b.listSources() }));
  route('post', '/sources', async (q, _r, b) => b.addSource(q.body, { scan: queryBool(q, 'scan') }), 201);
  route('get', '/sources/:id', async (q, _r, b) => b.getSource(String(q.params.id)));
  route('post', '/sources/:id/enable', async (q, _r, b) => b.setSourceEnabled(String(q.params.id), true));
  route('post', '/sources/:id/disable', async (q, _r, b) => b.setSourceEnabled(String(q.params.id), false));
  route('post', '/sources/:id/scan', async (q, _r, b) => b.scanSource(String(q.params.id)));
  route('get', '/sources/:id/circuit', async (q, _r, b) => b.circuitState(String(q.params.id)));
  route('patch', '/sources/:id', async (q, _r, b, op) => b.updateSource(String(q.params.id), q.body, { operator: op.name, scan: queryBool(q, 'scan') }));
  route('delete', '/sources/:id', async (q, _r, b, op) => b.removeSource(String(q.params.id), { operator: op.name, force: queryBool(q, 'force') }));

  // declarative configuration (issue 16): POST /apply with {text} (YAML or JSON text) or {document}
  route('post', '/apply', async (q, _r, b, op) => {
    const body = q.body as Record<string, unknown>;
    const input = typeof body.text === 'string' && body.document === undefined ? { text: body.text } : body.document !== undefined && body.text === undefined ? { document: body.document } : null;
    if (!input) throw new ControlError('validation', 'the body needs exactly one of text (the interlock file as YAML or JSON text) and document (the file as a JSON object)');
    return b.applyFile(input, { operator: op.name, plan: queryBool(q, 'plan'), prune: queryBool(q, 'prune'), force: queryBool(q, 'force'), allowUnknownNames: queryBool(q, 'allow_unknown_names'), secrets: adminApiSecrets });
  });
  route('get', '/export', async (_q, _r, b) => b.exportFile());

  // roles
  route('get', '/roles', async (_q, _r, b) => ({ roles: await b.listRoles() }));
  route('get', '/roles/:name', async (q, _r, b) => b.getRole(String(q.params.name)));
  route('put', '/roles/:name', async (q, res, b) => {
    const name = String(q.params.name);
    if (!isObject(q.body)) throw new ControlError('validation', 'the body must be a role object');
    if (q.body.name !== undefined && q.body.name !== name) throw new ControlError('validation', `the body names role "${String(q.body.name)}" but the path names "${name}"`);
    const r = await b.putRole({ ...q.body, name }, { allowUnknownNames: queryBool(q, 'allow_unknown_names') });
    res.locals.status = r.created ? 201 : 200;
    return r;
  });

  route('delete', '/roles/:name', async (q, _r, b, op) => b.removeRole(String(q.params.name), { operator: op.name, force: queryBool(q, 'force') }));

  // grants
  route('get', '/grants', async (q, _r, b) => ({ grants: await b.listGrants({ identity: queryString(q, 'identity'), source: queryString(q, 'source'), role: queryString(q, 'role') }) }));
  route('post', '/grants', async (q, res, b) => {
    const r = await b.grant({ identity: bodyString(q.body, 'identity', true), role: bodyString(q.body, 'role', true), source: bodyString(q.body, 'source', true) });
    res.locals.status = r.created ? 201 : 200;
    return r;
  });
  route('delete', '/grants/:identity/:role/:source', async (q, _r, b) => b.revoke({ identity: String(q.params.identity), role: String(q.params.role), source: String(q.params.source) }));

  // policies
  route('get', '/policies', async (_q, _r, b) => ({ policies: await b.listPolicies() }));
  route('post', '/policies', async (q, _r, b) => ({ policies: await b.addPolicies(q.body, { replace: queryBool(q, 'replace'), allowUnknownNames: queryBool(q, 'allow_unknown_names') }) }), 201);
  route('get', '/policies/:name', async (q, _r, b) => b.getPolicy(String(q.params.name)));
  route('delete', '/policies/:name', async (q, _r, b) => b.removePolicy(String(q.params.name)));

  // approvals
  route('get', '/approvals', async (q, _r, b) => {
    const state = queryString(q, 'state');
    if (state !== undefined && !(APPROVAL_STATES as readonly string[]).includes(state)) throw new ControlError('validation', `unknown approval state "${state}" (${APPROVAL_STATES.join(', ')})`);
    return { approvals: await b.listApprovals({ state: state as ApprovalState | undefined, source: queryString(q, 'source'), identity: queryString(q, 'identity'), limit: queryInt(q, 'limit', 1000) }) };
  });
  route('get', '/approvals/:id', async (q, _r, b) => b.getApproval(String(q.params.id)));
  route('get', '/approvals/:id/review', async (q, _r, b) => b.reviewApproval(String(q.params.id)));
  route('post', '/approvals/:id/approve', async (q, _r, b, op) => b.approve(String(q.params.id), { operator: op.name, reason: bodyString(q.body, 'reason', false) }));
  route('post', '/approvals/:id/reject', async (q, _r, b, op) => b.reject(String(q.params.id), { operator: op.name, reason: bodyString(q.body, 'reason', false) }));
  route('post', '/approvals/:id/requeue', async (q, _r, b, op) => b.requeue(String(q.params.id), { operator: op.name }), 201);

  // audit
  route('get', '/audit', async (q, _r, b) => {
    const kind = queryString(q, 'kind');
    if (kind !== undefined && kind !== 'tool_call' && kind !== 'approval' && kind !== 'config') throw new ControlError('validation', 'kind must be tool_call, approval or config');
    return b.searchAudit({
      identity: queryString(q, 'identity'),
      source: queryString(q, 'source'),
      decision: queryString(q, 'decision'),
      kind: kind as AuditKind | undefined,
      approval: queryString(q, 'approval'),
      request: queryString(q, 'request'),
      since: queryString(q, 'since'),
      until: queryString(q, 'until'),
      limit: queryInt(q, 'limit', 1000),
      cursor: queryString(q, 'cursor') ?? null,
    });
  });
  route('get', '/audit/tail', async (q, _r, b) => ({ events: await b.tailAudit(queryInt(q, 'lines', 1000) ?? 20) }));

  router.use(ADMIN_PREFIX, (_req, res) => sendError(res, 'unknown_route', UNKNOWN_ADMIN_ROUTE));
  router.use(routerErrorHandler(logger));
  app.use(router);
}
