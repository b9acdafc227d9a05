/**
 * The web approval console at /console (issue 14, item 1), served by the gateway.
 *
 *   GET  /                              302 to /console
 *   GET  /console                       the page (static HTML, JS and CSS under /console/assets/)
 *   POST /console/api/session           sign in with an operator token {token} → session cookie + csrf
 *   GET  /console/api/session           who is signed in (+ csrf), 401 without a session
 *   DELETE /console/api/session         sign out
 *   GET  /console/api/approvals[?state&source&identity&min_age_s&page&page_size]
 *                                       one page of approvals (display statement, comments and
 *                                       invisible characters flagged, destructive flag), the
 *                                       filter's total and the count per state (issue 24 item 2)
 *   GET  /console/api/approvals/:id     one approval: statement (invisible characters shown),
 *                                       params, classification, relations, destructive flag, plan
 *                                       (EXPLAIN as the writer) and its row estimate, audit history,
 *                                       failure cause, requester problem of a pending one (revoked or
 *                                       expired key, disabled identity: issue 24, item 4)
 *   POST /console/api/approvals/:id/{approve,reject,requeue}  {reason?, confirm?}: approving a
 *                                       destructive statement needs confirm: true (issue 24 item 6)
 *   GET  /console/api/events            SSE: `event: queue` with the pending queue whenever it changes
 *   GET  /console/api/identities        every identity, token-backed ones with their issuer, subject and
 *                                       last use (issue 26 item 4)
 *   POST /console/api/identities/:name/disable  disable an identity (as `interlock identity disable`):
 *                                       its keys and access tokens stop working
 *
 * Security: the Host/Origin guard of every non-MCP route; only operator tokens sign in (an agent
 * key is 401 invalid_operator_token, like /admin/v1); a sign-in with an unknown token spends the
 * address's keyless budget and, once it is spent, is refused 429 rate_limited before any look-up
 * (as /admin/v1: src/admin/token-budget.ts); the session is server-side in the control
 * database, its id in an HttpOnly, SameSite=Strict cookie (over TLS `__Host-interlock_console`, Secure,
 * Path=/; a request with two session cookies is signed out) (src/console/session.ts):
 * sign-out, the token's revocation and the idle and absolute timeouts end it on every replica, and
 * an open event stream with it; state-changing requests need the X-CSRF-Token header; pages carry a strict Content-Security-Policy and frame-ancestors 'none'.
 * Decisions go through the same operator backend as the CLI and /admin/v1.
 */
import { join } from 'node:path';
import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import { getKeyPepper, type ControlDb } from '../control/db';
import { ControlError } from '../control/errors';
import { APPROVAL_STATES, countApprovals, listApprovals, requireApproval, type ApprovalRecord, type ApprovalState } from '../control/approvals';
import { getIdentityByName } from '../control/identities';
import { searchAudit } from '../audit/writer';
import { directBackend } from '../admin/backend';
import { resolveOperatorToken } from '../admin/tokens';
import { operatorTokenBudget } from '../admin/token-budget';
import type { DispatchDeps } from '../protocol/dispatch';
import { sendControlError } from '../admin/routes';
import { GovernanceAccess } from '../admin/governance-db';
import { initStatementDisplay, paramsForDisplay, showInvisible, statementForDisplay } from '../approvals/statement';
import type { SourceConnectorRegistry } from '../sources/registry';
import { defaultOriginPolicy, type OriginPolicy } from '../transport/http-headers';
import { hostOriginGuard, isObject, jsonBody, routerErrorHandler, sendError } from '../http/common';
import { closedBody } from '../http/closed-body';
import { isDestructive, reviewApprovalPlan } from './plan';
import { requesterProblems, type RequesterProblem } from '../approvals/requester';
import { consoleKey, createConsoleSession, csrfToken, csrfValid, DEFAULT_SESSION_TIMEOUTS, endConsoleSession, readCookies, resolveConsoleSession, sessionCookie, sessionCookieName, type ConsoleSession, type SessionTimeouts } from './session';
import { installPath } from '../install-root';

/** Options of mountConsole. */
export interface ConsoleOptions {
  db: ControlDb;
  connectors?: SourceConnectorRegistry;
  originPolicy?: OriginPolicy;
  logger?: Logger;
  /** How often the event stream looks for queue changes, in ms (default 1000). */
  pollMs?: number;
  /** Session timeouts (config console.*; default DEFAULT_SESSION_TIMEOUTS). */
  sessions?: SessionTimeouts;
  /** Where the identity Disable is written (src/admin/governance-db.ts). Default: `db`, its role's privileges checked on first use. */
  governance?: GovernanceAccess;
  /** Rescans a source after an approved write's guard refused it catalog_stale (task hw; ApproveOptions.onCatalogStale); absent: the approval scans it itself. */
  onCatalogStale?: (facts: { sourceId: string; approvalId: string }) => Promise<void>;
}

/** Folder of the console's static files. */
export const CONSOLE_STATIC_DIR = installPath('src', 'console', 'static');

const PAGE_HEADERS = {
  'Content-Security-Policy': "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
  'X-Frame-Options': 'DENY',
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'Cache-Control': 'no-store',
};

/** Query parameter `name` as a whole number in [min, max], `dflt` when absent; ControlError validation otherwise. */
function queryWhole(req: Request, name: string, min: number, max: number, dflt: number | undefined): number | undefined {
  const v = req.query[name];
  if (v === undefined || v === '') return dflt;
  if (typeof v !== 'string' || !/^[0-9]{1,9}$/.test(v) || Number(v) < min || Number(v) > max) throw new ControlError('validation', `${name} must be a whole number from ${min} to ${max}`);
  return Number(v);
}

/** Width, in characters, of the parameter preview in the console's list (task nu47fix item 5). */
export const CONSOLE_PARAMS_WIDTH = 60;

/**
 * An approval as the console lists it; `requester` is the requester problem of a pending one (issue
 * 24, item 4), else null. `params` is the compact preview of its parameter values (paramsForDisplay:
 * JSON, invisible characters as ⟨U+XXXX⟩, cut with … past CONSOLE_PARAMS_WIDTH; '' when none), so
 * two writes of one statement tell apart in the list (spec/openapi-v1.yaml ConsoleApprovalSummary).
 */
function summary(a: ApprovalRecord, requester: RequesterProblem | null = null) {
  const s = statementForDisplay(a.sql, 160);
  const p = paramsForDisplay(a.params, CONSOLE_PARAMS_WIDTH);
  return {
    destructive: isDestructive(a.classification),
    invisible: s.invisible,
    id: a.id,
    state: a.state,
    identity: a.identityName,
    source: a.sourceId,
    createdAt: a.createdAt,
    expiresAt: a.expiresAt,
    statement: s.text,
    truncated: s.truncated,
    params: p.text,
    paramsTruncated: p.truncated,
    comments: s.comments.length,
    errorCode: a.outcome?.error_code ?? null,
    requeuedFrom: a.requeuedFrom,
    requesterProblem: requester,
  };
}

/** Console summaries of `list`, each pending one with its requester problem (one query, none when the list carries them: the backend's ListedApproval). */
async function summaries(db: ControlDb, list: Array<ApprovalRecord & { requesterProblem?: RequesterProblem | null }>) {
  const problems = await requesterProblems(db, list.filter((a) => a.state === 'pending' && a.requesterProblem === undefined));
  return list.map((a) => summary(a, a.requesterProblem ?? problems.get(a.id) ?? null));
}

/** The relations a classification names, as "schema.table (insert: col, …)" for writes and "schema.table (read)" for reads. */
export function affectedRelations(classification: Record<string, unknown>): string[] {
  const writes = (classification.writes as Array<{ schema: string; table: string; operation?: string; columns?: string[] }> | undefined) ?? [];
  const reads = (classification.reads as Array<{ schema: string; table: string }> | undefined) ?? [];
  return [
    ...new Set([
      ...writes.map((w) => `${w.schema}.${w.table} (${w.operation ?? 'write'}${w.columns?.length ? `: ${w.columns.join(', ')}` : ''})`),
      ...reads.map((r) => `${r.schema}.${r.table} (read)`),
    ]),
  ];
}

/**
 * The 401 message of a console API request carrying more than one session cookie (red team rt48a
 * L2): it is treated as signed out, and signing in again would not help while the other cookie stays.
 */
export const SEVERAL_SESSION_COOKIES =
  "More than one console session cookie was sent (another site of this domain may have set one): signed out; clear this site's cookies, then sign in again";

/** One line of an identity provider's text for the page: invisible and control characters, line feeds and tabs as ⟨U+XXXX⟩ (showInvisible). */
const shownLine = (text: string): string => showInvisible(text, { oneLine: true }).text;

/**
 * A JSON value (claim values from an identity provider) with every string in it, object keys
 * included, shown by shownLine; numbers, booleans and null unchanged. Display only (red team rt48a L3).
 */
export function shownJson(value: unknown): unknown {
  if (typeof value === 'string') return shownLine(value);
  if (Array.isArray(value)) return value.map(shownJson);
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [shownLine(k), shownJson(v)]));
  return value;
}

/**
 * Mounts /console on `app`. Of `deps` (the gateway's dispatch deps; absent: no limit) the client
 * limits and keyless audit are used: a sign-in with a missing or unknown operator token spends the
 * address's keyless budget, and once it is spent sign-ins are refused 429 rate_limited (ErrorBody
 * with retry_after_ms, Retry-After) before any look-up (src/admin/token-budget.ts, shared with /admin/v1).
 */
export function mountConsole(app: Express, opts: ConsoleOptions, deps?: Pick<DispatchDeps, 'clientLimits' | 'keylessAudit'>): void {
  const { db, logger } = opts;
  const router = express.Router();
  const budget = operatorTokenBudget(deps, 'console');
  const backend = directBackend(db, { connectors: opts.connectors, logger, onCatalogStale: opts.onCatalogStale });
  const governance = opts.governance ?? new GovernanceAccess(db, 'runtime', logger);
  let keyP: Promise<Buffer> | null = null;
  const key = () => (keyP ??= getKeyPepper(db).then(consoleKey));
  const timeouts = opts.sessions ?? DEFAULT_SESSION_TIMEOUTS;
  // True over the native TLS listener, or behind a proxy config trust_proxy trusts (X-Forwarded-Proto).
  const secure = (req: Request) => req.secure;

  const guard = hostOriginGuard(opts.originPolicy ?? defaultOriginPolicy());
  // A person who opens the gateway's address finds the console (GET / was a bare 404).
  router.get('/', guard, (_req, res) => res.redirect(302, '/console'));
  router.use('/console', guard);
  router.use('/console', (_req, res, next) => {
    res.set(PAGE_HEADERS);
    next();
  });
  router.get('/console', (_req, res) => res.sendFile(join(CONSOLE_STATIC_DIR, 'index.html')));
  router.use('/console/assets', express.static(CONSOLE_STATIC_DIR, { index: false, dotfiles: 'deny' }));

  /**
   * The live session of the request (server-side: signed out, timed out or token revoked is null); a
   * request restarts its idle clock, but a read the page makes by itself (header
   * X-InterLock-Background: 1, the list re-read on a queue event) does not: a write an agent queues
   * must not keep an unattended console signed in (red team rt48a K8).
   */
  const sessionOf = async (req: Request): Promise<{ session: ConsoleSession; cookie: string } | 'several' | null> => {
    // Over TLS only the __Host- name counts (no other host can set it); a request with two cookies of
    // the name is signed out, never given the first one: it may be a sibling domain's (rt48a L2).
    const cookies = readCookies(req.headers.cookie, sessionCookieName(secure(req)));
    if (cookies.length > 1) return 'several';
    const cookie = cookies[0];
    const session = await resolveConsoleSession(db, cookie, timeouts, req.get('x-interlock-background') !== '1');
    return session && cookie ? { session, cookie } : null;
  };
  const authed = (write: boolean) => async (req: Request, res: Response, next: NextFunction) => {
    try {
      const s = await sessionOf(req);
      if (s === 'several') return sendError(res, 'missing_operator_token', SEVERAL_SESSION_COOKIES);
      if (!s) return sendError(res, 'missing_operator_token', 'Sign in to the console with an operator token');
      if (write && !csrfValid(await key(), s.cookie, req.get('x-csrf-token'))) return sendError(res, 'forbidden', 'Missing or wrong X-CSRF-Token');
      res.locals.session = s.session;
      res.locals.cookie = s.cookie;
      next();
    } catch (err) {
      next(err);
    }
  };
  const run = (fn: (req: Request, res: Response) => Promise<unknown>, status = 200) => async (req: Request, res: Response) => {
    try {
      const body = await fn(req, res);
      if (!res.headersSent) res.status(status).json(body);
    } catch (err) {
      if (err instanceof ControlError) return sendControlError(res, err);
      logger?.error({ err, path: req.path }, 'console route failed');
      sendError(res, 'internal_error', 'internal error');
    }
  };
  const reasonOf = (req: Request): string | undefined => {
    const v = isObject(req.body) ? req.body.reason : undefined;
    if (v === undefined || v === '') return undefined;
    if (typeof v !== 'string' || v.length > 1000) throw new ControlError('validation', 'reason must be a string of at most 1000 characters');
    return v;
  };

  router.post('/console/api/session', ...jsonBody(16 * 1024), closedBody('POST /console/api/session'), run(async (req, res) => {
    const token = isObject(req.body) && typeof req.body.token === 'string' ? req.body.token.trim() : '';
    // The address's keyless budget, as on /admin/v1 (task lows49b; red team rt49b D3): once spent,
    // 429 rate_limited before any look-up, but for a token that signed in or resolved lately.
    if (budget.refused(req, res, token || null)) return undefined;
    const operator = await resolveOperatorToken(db, token);
    if (!operator) {
      budget.spend(req);
      sendError(res, 'invalid_operator_token', 'That is not an active operator token (agent API keys cannot sign in)');
      return undefined;
    }
    budget.resolved(token);
    const { cookie: value } = await createConsoleSession(db, { tokenId: operator.tokenId, operator: operator.name }, timeouts);
    res.setHeader('Set-Cookie', sessionCookie(value, timeouts.absoluteSeconds, secure(req)));
    logger?.info({ component: 'console', operator: operator.name }, 'console sign-in');
    return { operator: operator.name, csrfToken: csrfToken(await key(), value) };
  }));
  router.get('/console/api/session', authed(false), run(async (_req, res) => ({ operator: (res.locals.session as ConsoleSession).operator, csrfToken: csrfToken(await key(), res.locals.cookie as string) })));
  router.delete('/console/api/session', authed(true), run(async (req, res) => {
    // Ends the session in the control database: the cookie is dead on every replica and in every copy.
    await endConsoleSession(db, res.locals.cookie as string);
    logger?.info({ component: 'console', operator: (res.locals.session as ConsoleSession).operator }, 'console sign-out');
    res.setHeader('Set-Cookie', sessionCookie('', 0, secure(req)));
    return { signedOut: true };
  }));

  router.get('/console/api/approvals', authed(false), run(async (req) => {
    const state = typeof req.query.state === 'string' && req.query.state !== '' ? req.query.state : undefined;
    if (state !== undefined && !(APPROVAL_STATES as readonly string[]).includes(state)) throw new ControlError('validation', `unknown approval state "${state}"`);
    const text = (name: string) => {
      const v = req.query[name];
      if (v !== undefined && typeof v !== 'string') throw new ControlError('validation', `${name} must be given once`);
      return v === '' ? undefined : v;
    };
    const page = queryWhole(req, 'page', 1, 1_000_000, 1)!;
    const pageSize = queryWhole(req, 'page_size', 1, 200, 50)!;
    const identityName = text('identity');
    const identity = identityName === undefined ? undefined : await getIdentityByName(db, identityName);
    // An unknown identity matches nothing (no approval has identity id ''), not every approval.
    const filter = { sourceId: text('source'), identityId: identity === null ? '' : identity?.id, minAgeSeconds: queryWhole(req, 'min_age_s', 0, 1_000_000_000, undefined) };
    await initStatementDisplay();
    const [rows, counts] = await Promise.all([listApprovals(db, { ...filter, state: state as ApprovalState | undefined, limit: pageSize, offset: (page - 1) * pageSize }), countApprovals(db, filter)]);
    const total = state === undefined ? Object.values(counts).reduce((a, b) => a + b, 0) : counts[state as ApprovalState];
    return { approvals: await summaries(db, rows), total, counts, page, pageSize };
  }));
  router.get('/console/api/approvals/:id', authed(false), run(async (req) => {
    const a = await backend.getApproval(String(req.params.id));
    await initStatementDisplay();
    const display = statementForDisplay(a.sql);
    const [review, audit] = await Promise.all([reviewApprovalPlan(db, a), searchAudit(db, { approvalId: a.id, kind: 'approval', limit: 100 })]);
    const relations = affectedRelations(a.classification);
    const visible = showInvisible(a.sql);
    return {
      // The failure's text (PostgreSQL's message, detail and hint, which quote the agent's values) with
      // invisible characters shown as ⟨U+XXXX⟩, as the statement and `approval show` (red team rt48a K4).
      // The requester's claim values come from its identity provider: shown the same way (rt48a L3).
      approval: { ...a, failure: a.failure && (Object.fromEntries(Object.entries(a.failure).map(([k, v]) => [k, typeof v === 'string' ? showInvisible(v).text : v])) as typeof a.failure), claimAttributes: a.claimAttributes && (shownJson(a.claimAttributes) as typeof a.claimAttributes) },
      statement: { text: display.text, comments: display.comments, visible: visible.text, invisible: visible.count },
      params: showInvisible(JSON.stringify(a.params, null, 2)).text,
      destructive: review.destructive,
      estimate: review.estimate,
      relations,
      plan: review.plan,
      // Shown before anyone clicks: approving now would end the write failed with this code (issue 24, item 4).
      requester: review.requester,
      audit: audit.events.map((e) => ({ time: e.time, decision: e.decision, operator: e.operator, reasonCode: e.reasonCode, rowCount: e.rowCount, details: e.details })).reverse(),
    };
  }));
  // A decision's body: {reason?, confirm?} and nothing else (spec/openapi-v1.yaml consoleDecide).
  const decisionBody = [...jsonBody(16 * 1024), closedBody('POST /console/api/approvals/{}/{}')];
  router.post('/console/api/approvals/:id/approve', authed(true), ...decisionBody, run(async (req, res) => {
    // A destructive statement is approved only after the confirmation step (issue 24 item 6).
    const a = await requireApproval(db, String(req.params.id));
    if (isDestructive(a.classification) && !(isObject(req.body) && req.body.confirm === true)) throw new ControlError('validation', 'confirm: true is required to approve a destructive statement (DELETE, UPDATE, MERGE): review the statement, its parameters and the row estimate first');
    return backend.approve(a.id, { operator: (res.locals.session as ConsoleSession).operator, reason: reasonOf(req) });
  }));
  router.post('/console/api/approvals/:id/reject', authed(true), ...decisionBody, run(async (req, res) => backend.reject(String(req.params.id), { operator: (res.locals.session as ConsoleSession).operator, reason: reasonOf(req) })));
  router.post('/console/api/approvals/:id/requeue', authed(true), ...decisionBody, run(async (req, res) => backend.requeue(String(req.params.id), { operator: (res.locals.session as ConsoleSession).operator }), 201));

  // A token subject (and its issuer) is an identity provider's text: shown as ⟨U+XXXX⟩ where invisible or a control (rt48a L3).
  router.get('/console/api/identities', authed(false), run(async () => ({ identities: (await backend.listIdentities()).map((i) => (i.subjects ? { ...i, subjects: i.subjects.map((x) => ({ ...x, issuer: shownLine(x.issuer), subject: shownLine(x.subject) })) } : i)) })));
  router.post('/console/api/identities/:name/disable', authed(true), ...jsonBody(16 * 1024), closedBody('POST /console/api/identities/{}/disable'), run(async (req, res) =>
    // Audited in the signed-in operator's name.
    directBackend(db, { connectors: opts.connectors, logger, operator: (res.locals.session as ConsoleSession).operator, governance }).setIdentityEnabled(String(req.params.name), false),
  ));
  router.get('/console/api/events', authed(false), async (req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store', 'X-Accel-Buffering': 'no', Connection: 'keep-alive' });
    res.write('retry: 2000\n\n');
    let last: string | null = null;
    let stopped = false;
    const cookie = res.locals.cookie as string;
    const tick = async () => {
      if (stopped) return;
      try {
        // A stream outlives no session: signed out, timed out or token revoked ends it (without touching the idle clock).
        if (!(await resolveConsoleSession(db, cookie, timeouts, false))) {
          stopped = true;
          clearInterval(timer);
          res.end('event: session_ended\ndata: {}\n\n');
          return;
        }
        await initStatementDisplay();
        const pending = await summaries(db, await backend.listApprovals({ state: 'pending', limit: 200 }));
        const sig = pending.map((p) => `${p.id}:${p.requesterProblem ?? ''}`).join(',');
        if (sig !== last) {
          last = sig;
          res.write(`event: queue\ndata: ${JSON.stringify({ pending })}\n\n`);
        } else res.write(': keep-alive\n\n');
      } catch (err) {
        logger?.warn({ component: 'console', err: String(err) }, 'console event poll failed');
      }
    };
    const timer = setInterval(() => void tick(), opts.pollMs ?? 1000);
    timer.unref();
    req.on('close', () => {
      stopped = true;
      clearInterval(timer);
    });
    await tick();
  });

  router.use('/console', (_req, res) => sendError(res, 'unknown_route', 'No such console route (or method)'));
  router.use(routerErrorHandler(logger));
  app.use(router);
}
