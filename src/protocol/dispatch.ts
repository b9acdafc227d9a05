/**
 * Dispatches an admitted JSON-RPC message to its MCP method (contract: JSON-RPC Methods table):
 * server/discover, initialize, ping, tools/list, tools/call, and the notifications. tools/call runs
 * the governed path: tool lookup → identity (pipeline step 1) → argument validation → the tool's
 * handler (pipeline steps 2–9) → rendering for the dialect → audit.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { Admitted } from '../transport/admission';
import { DEFAULT_ANSWER_WRITE_TIMEOUT_MS, type ResponseChannel } from '../transport/channel';
import { errorResponse, resultResponse, type JsonRpcId } from '../transport/jsonrpc';
import type { IdentityResolver, ToolBinding, ToolCallContext, ToolOutcome } from '../tools/types';
import type { ToolRegistry } from '../tools/registry';
import { identityStep } from '../pipeline/01-identity';
import { withChallenge, type AuthSurface } from '../auth/protected-resource';
import type { AuditDecision, AuditHooks, AuditSink, ToolCallAuditEvent } from '../audit/types';
import { discoverResult, initializeResult, toolsListResult } from './envelopes';
import { renderOutcome, serializeMessageForWire } from './tool-results';
import { retryAfterSeconds } from '../transport/http-errors';
import { refusalInfo, toolErrorInfo } from '../errors/vocabulary';
import type { RateLimiter } from '../pipeline/05-rate-limit';
import { chargedUpFront, type ClientLimits } from '../transport/client-limits';
import { KEYLESS_REFUSALS, type KeylessAuditAggregator } from '../transport/keyless-audit';
import { admitCall, chargeUnspent } from './call-limits';
import { auditUnavailableOutcome, commitAuditEvent } from './audit-commit';
import { cutText } from '../errors/cut-text';
import { isCapacityRefusal, type CapacityLimiter, type CapacityRefusal, type KnownCaller } from '../transport/capacity';

/** Everything the dispatcher needs; built once per gateway. */
export interface DispatchDeps {
  tools: ToolRegistry;
  identityResolver: IdentityResolver;
  audit: AuditSink;
  logger: Logger;
  instructions?: string;
  inflight: InflightRegistry;
  /** Settles when every audit write started so far has finished (graceful shutdown awaits it). */
  pendingAudits: Set<Promise<void>>;
  /** Optional observer of every finished tool call (metrics). */
  observe?: (event: ToolCallAuditEvent) => void;
  /**
   * Optional observer of a tool call refused at capacity, by canonical tool name (issue 29): when set,
   * it is called instead of `observe` with that refusal's event (overCapacityEvent), and must record
   * exactly what `observe` would (GatewayMetrics.observeOverCapacity), without the event object.
   */
  observeOverCapacity?: (canonicalTool: string) => void;
  /** Keyless budget and stream caps per client address and identity (issue 10, Build 6); none when absent. */
  clientLimits?: ClientLimits;
  /** Aggregates keyless refusals instead of one audit event each (issue 10, Build 6). */
  keylessAudit?: KeylessAuditAggregator;
  /** The pipeline's (tracked) rate limiter: a call that did not reach step 5 is charged here (call-limits.ts). */
  rateLimiter?: RateLimiter;
  /**
   * Milliseconds a tools/call answer may wait unread before its socket is destroyed (red-team F1;
   * client_limits.answer_write_timeout_ms, default DEFAULT_ANSWER_WRITE_TIMEOUT_MS; 0 = none).
   */
  answerWriteTimeoutMs?: number;
  /** The OAuth resource-server surface (issue 26, src/auth/protected-resource.ts): challenges on 401s. */
  authSurface?: AuthSurface;
  /** Admission by capacity (issue 29, src/transport/capacity.ts): governed calls take a slot first; none when absent. */
  capacity?: CapacityLimiter;
  /**
   * Set while a front door (src/transport/front-door.ts) takes new connections of a shedding
   * replica: a modern-dialect refusal at capacity written by node:http's path (early-refusal.ts,
   * answerKnownOverCapacity) then carries `Connection: close`, so the client's next connection
   * starts in the front door instead of staying in node:http under sustained overload (issue 29, h29a).
   */
  closeRefusedConnections?: boolean;
}

/** Per-HTTP-request facts the dispatcher needs besides the message. */
export interface HttpContext {
  requestId: string;
  apiKey: string | null;
  /** The client address key (clientAddressKey of the TCP peer). */
  clientAddress?: string;
  /** Aborted when the client closes the connection before the answer is complete. */
  signal: AbortSignal;
  abort(reason: string): void;
  /** What the call's token hash may be cached with (the request's socket; CapacityLimiter.noteToken). */
  scope?: object;
}

/**
 * In-flight tools/call requests of this replica, keyed by caller credential and JSON-RPC id, so
 * notifications/cancelled from the same caller can abort them (other callers cannot). One map per
 * credential (none: ''), keyed by the id itself (a Map tells 1 from '1', as the former
 * `typeof:String` key did), dropped when empty: registering a call builds no key string and no
 * closure (issue 28 item 3, h28e).
 */
export class InflightRegistry {
  private readonly map = new Map<string, Map<JsonRpcId, (reason: string) => void>>();
  private count = 0;
  /** Registers `abort` for the caller's request `id` (replacing any earlier one of the same id); undo with remove(). */
  add(apiKey: string | null, id: JsonRpcId, abort: (reason: string) => void): void {
    const k = apiKey ?? '';
    let ids = this.map.get(k);
    if (!ids) {
      ids = new Map();
      this.map.set(k, ids);
    }
    const size = ids.size;
    ids.set(id, abort);
    this.count += ids.size - size;
  }
  /** Removes the caller's request `id` when it is still registered with this very `abort` (a later call reusing the id keeps its own). */
  remove(apiKey: string | null, id: JsonRpcId, abort: (reason: string) => void): void {
    const k = apiKey ?? '';
    const ids = this.map.get(k);
    if (!ids || ids.get(id) !== abort) return;
    ids.delete(id);
    this.count--;
    if (ids.size === 0) this.map.delete(k);
  }
  /** Aborts the caller's in-flight request `id`; returns whether one was found. */
  cancel(apiKey: string | null, id: JsonRpcId, reason: string): boolean {
    const fn = this.map.get(apiKey ?? '')?.get(id);
    if (fn) fn(reason);
    return !!fn;
  }
  /** In-flight requests registered. */
  get size(): number {
    return this.count;
  }
}

/** The base64url characters in byte order: a run of them sorts (in the C collation) as the number it encodes. */
const ID_DIGITS = '-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz';
/** Ticks of a request id's time prefix per second (one tick = 62.5 ms; six characters last until 2106). */
const ID_TICKS_PER_SECOND = 16;
const ID_COUNTER_SPAN = 2 ** 36;
let idTick = -1;
let idCounter = 0;
/** "req_", the current tick's six characters and ID_PROCESS, made once per tick. */
let idPrefix = '';
/** Every 12-bit value as two ID_DIGITS characters (a counter's six characters are three of these). */
const ID_PAIRS = Array.from({ length: 4096 }, (_, n) => ID_DIGITS[n >> 6] + ID_DIGITS[n & 63]);

/** `n` (0 ≤ n < 64^6, an integer) as six ID_DIGITS characters, most significant first. */
function idDigits6(n: number): string {
  let s = '';
  for (let i = 0; i < 6; i++) {
    s = ID_DIGITS[n % 64] + s;
    n = Math.floor(n / 64);
  }
  return s;
}

/**
 * This process's part of every request id it makes: 36 bits drawn once at start (CSPRNG), as six
 * ID_DIGITS characters (red team rt40b: two processes' ids of one tick met when their counters'
 * ranges did). Two processes share it with probability 2^-36.
 */
const ID_PROCESS = idDigits6(randomBytes(6).readUIntBE(0, 6) % 2 ** 36);

/**
 * A new gateway request id: "req_" + 18 base64url characters (`^req_[A-Za-z0-9_-]{18}$`,
 * spec/openapi-v1.yaml `RequestId`; 12 before task hlow), time-ordered so the audit trail's
 * request_id B-tree takes each new id on its rightmost leaf instead of dirtying a random page (issue
 * 28, h28d: 0.89× the control database's CPU per batch after a checkpoint, bench/audit-request-ids.ts).
 * The first six characters are the time in sixteenths of a second since 1970; the next six this
 * process's random part (ID_PROCESS, drawn once at start); the last six a 36-bit counter that starts
 * at a random value (CSPRNG) at each new tick and counts up per id. So ids never repeat within a
 * process, and two processes' ids coincide only if their 36-bit process parts do (2^-36 per pair of
 * processes; before hlow, whenever their counters' ranges of one tick met). Within a process ids
 * strictly increase, also when the clock steps back (the last tick is kept); across processes they
 * are ordered by tick.
 */
export function newRequestId(): string {
  const tick = Math.floor((Date.now() * ID_TICKS_PER_SECOND) / 1000);
  if (tick > idTick) {
    idTick = tick;
    idPrefix = `req_${idDigits6(idTick)}${ID_PROCESS}`;
    const b = randomBytes(5);
    idCounter = b.readUIntBE(0, 5) % (ID_COUNTER_SPAN / 2); // room to count up within the tick
  } else if (++idCounter >= ID_COUNTER_SPAN) {
    idTick++;
    idPrefix = `req_${idDigits6(idTick)}${ID_PROCESS}`;
    idCounter = 0;
  }
  // idDigits6(idCounter) from three 12-bit pairs (issue 29: the id is made per refusal at capacity).
  const low = idCounter % 16_777_216;
  return idPrefix + ID_PAIRS[Math.floor(idCounter / 16_777_216)] + ID_PAIRS[low >>> 12] + ID_PAIRS[low & 4095];
}

/**
 * JSON-RPC -32602 (HTTP 200) with `message`; with `code` (a tool error of spec/errors-v1.json) the
 * error carries data {code, message} like the other -32602 errors of a tools/call.
 */
function invalidParams(ch: ResponseChannel, id: JsonRpcId, message: string, code?: string): void {
  ch.final(200, errorResponse(id, { code: -32602, message: `Invalid params: ${message}`, ...(code ? { data: { code: toolErrorInfo(code).code, message } } : {}) }));
}

/**
 * The answer to a tools/call naming no tool this server serves (spec/errors-v1.json toolErrors
 * `unknown_tool`): JSON-RPC -32602, HTTP 200, in every version and dialect, `error.message` naming
 * the tool (at most 128 characters of it), `error.data` {code: "unknown_tool", message} like the
 * other -32602 errors' data.
 */
export function unknownToolError(name: string): { code: number; message: string; data: { code: string; message: string } } {
  const info = toolErrorInfo('unknown_tool');
  return { code: -32602, message: `Invalid params: Unknown tool: ${cutText(name, 128)}`, data: { code: info.code, message: info.message } };
}

const DONE: Promise<void> = Promise.resolve();

/**
 * Handles one admitted message, writing exactly one answer to `ch`. Resolves once it is written (a
 * tools/call's promise is callTool's own, issue 28 item 3: no async wrapper around it); may throw
 * synchronously or reject (the caller answers the opaque failure).
 */
export function dispatch(adm: Admitted, http: HttpContext, ch: ResponseChannel, deps: DispatchDeps): Promise<void> {
  const msg = adm.message;
  if (msg.type === 'notification') {
    if (msg.method === 'notifications/cancelled') {
      const rid = msg.params?.requestId;
      if (typeof rid === 'string' || (typeof rid === 'number' && Number.isSafeInteger(rid))) {
        deps.inflight.cancel(http.apiKey, rid, 'notifications/cancelled');
      }
    }
    ch.empty(202);
    return DONE;
  }
  const { id, method } = msg;
  const params = msg.params ?? {};
  switch (method) {
    case 'server/discover':
      ch.final(200, resultResponse(id, discoverResult(deps.instructions)));
      return DONE;
    case 'initialize': {
      const ok = typeof params.protocolVersion === 'string' && isObject(params.capabilities) && isObject(params.clientInfo);
      if (!ok) invalidParams(ch, id, 'initialize needs protocolVersion (string), capabilities (object) and clientInfo (object)');
      else ch.final(200, resultResponse(id, initializeResult(params.protocolVersion, deps.instructions)));
      return DONE;
    }
    case 'ping':
      ch.final(200, resultResponse(id, {}));
      return DONE;
    case 'tools/list':
      ch.final(200, resultResponse(id, toolsListResult(deps.tools)));
      return DONE;
    case 'tools/call':
      return callTool(adm, id, params, http, ch, deps);
    default:
      // admission only admits methods of the table; reaching here is a programming error.
      ch.final(200, errorResponse(id, { code: -32601, message: 'Method not found' }));
      return DONE;
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return !!v && typeof v === 'object' && !Array.isArray(v);
}

function decisionOf(o: ToolOutcome, aborted: boolean): { decision: AuditDecision; reason: string | null } {
  switch (o.kind) {
    case 'result':
      return { decision: o.isError ? 'failed' : 'allowed', reason: null };
    case 'refusal':
      return { decision: 'refused', reason: o.code };
    case 'queued':
      return { decision: 'queued', reason: 'approval_required' };
    case 'tool_error':
      if (o.code === 'cancelled' || aborted) return { decision: 'cancelled', reason: 'cancelled' };
      return { decision: o.code === 'tool_execution_failed' ? 'failed' : 'invalid', reason: o.code };
  }
}

/** What one tool call needs besides the tool and its arguments. */
export interface ToolCallRequest {
  name: string;
  args: Record<string, unknown>;
  apiKey: string | null;
  requestId: string;
  signal: AbortSignal;
  dialect: 'modern' | 'handshake';
  protocolVersion: string;
  progressToken?: string | number;
  notify?: (method: string, params: Record<string, unknown>) => void;
  /** Key for notifications/cancelled (the JSON-RPC id), when there is one. */
  cancelKey?: JsonRpcId;
  abort?: (reason: string) => void;
  /**
   * Which HTTP surface carried the call when it is not POST /mcp ("mcp-tools-call", "mcp-sse",
   * "v1"); recorded as details.route in the audit event.
   */
  route?: string;
  /** The client address key (clientAddressKey of the TCP peer), for the client limits. */
  clientAddress?: string;
  /** What the token's hash may be cached with while it lives (the request's socket; CapacityLimiter.noteToken). */
  scope?: object;
  /**
   * Takes over the release of the call's stream slot (red-team F1): when given, runToolCall calls
   * it exactly once, with the release (a no-op when no slot was taken), when the pipeline ends on
   * any path, instead of releasing the slot itself; the caller then releases it once the answer
   * has left (whenResponseDone), so the slot also bounds answers waiting unread in memory.
   */
  holdSlot?: (release: () => void) => void;
}

/** What runToolCall did: the outcome, the tool's name and canonical name; `refusedAtCapacityMs` (the retry hint) when admission by capacity refused it. */
export interface ToolCallRun {
  outcome: ToolOutcome;
  tool: string;
  canonical: string;
  refusedAtCapacityMs?: number;
}

/**
 * Runs one governed tool call through the pipeline and records its audit event: identity (step 1)
 * → argument validation → the tool's handler (steps 2–8) → audit (step 9). Shared by POST /mcp and
 * the other HTTP routes (deprecated /mcp/tools/call, /v1), so every route gets the same answers.
 * Returns null for an unknown tool. Never throws: a handler failure becomes the opaque failure.
 */
export function runToolCall(deps: DispatchDeps, req: ToolCallRequest): Promise<ToolCallRun | null> {
  const binding = deps.tools.get(req.name);
  if (!binding) return Promise.resolve(null);
  if (!binding.governed || !deps.capacity) return runAdmitted(deps, req, binding, null);
  // Admission by capacity (issue 29): a slot right after step 1 (the identity, resolved in memory),
  // before the stream slots, arguments, SQL or audit work; held until the call's event has committed
  // (so a slow audit slows admission); no slot → refused at once. While the replica is full, a token
  // seen before is refused even before step 1 (no identity lookup, no control-database work).
  if (req.apiKey) {
    const early = deps.capacity.refuseKnown(req.apiKey);
    if (early) {
      req.holdSlot?.(() => undefined);
      return refuseOverCapacity(deps, req, binding, early.refusal, early.caller);
    }
  }
  const held = { release: (_excludedMs?: number, _dropped?: boolean, _poolWaitMs?: number, _slotWaitMs?: number) => undefined as void, sourceWait: { ms: 0, poolMs: 0, slotMs: 0 } };
  // The slot goes back once the call has settled either way (one `then`, no async wrapper: issue 28 item 3).
  // Refused behind admission for lack of a source slot: a drop, the limit admitted too many (capacity.ts).
  return runAdmitted(deps, req, binding, held).then(
    (ran) => {
      const o = ran.outcome;
      held.release(held.sourceWait.ms, o.kind === 'refusal' && (o.code === 'concurrency_limited' || o.code === 'source_busy'), held.sourceWait.poolMs, held.sourceWait.slotMs);
      return ran;
    },
    (err: unknown) => {
      held.release(held.sourceWait.ms, false, held.sourceWait.poolMs, held.sourceWait.slotMs);
      throw err;
    },
  );
}

/** The message of a call refused by admission by capacity (code rate_limited). */
const OVER_CAPACITY_MESSAGE = 'The gateway is at capacity; wait retry_after_ms milliseconds before trying again.';

/**
 * A call refused by admission by capacity: rate_limited with retry_after_ms, audited in aggregate per
 * client address and minute (src/transport/keyless-audit.ts; the identity is not in the aggregate)
 * when client limits are on, else as its own event (audit before answer, as every call). Not charged
 * a rate-limit point: it did no work, and charging would cost a control-database claim.
 */
async function refuseOverCapacity(deps: DispatchDeps, req: ToolCallRequest, binding: ToolBinding, r: CapacityRefusal, identity: KnownCaller): Promise<ToolCallRun> {
  const refused = overCapacity(deps, req, binding, r, identity);
  if (refused) return refused;
  let outcome: ToolOutcome = overCapacityOutcome(r);
  const event = overCapacityEvent(req, binding, identity);
  deps.observe?.(event);
  if (!(await commitAuditEvent(deps.audit, event, req.signal, deps.logger, deps.pendingAudits))) outcome = auditUnavailableOutcome(deps.audit);
  return { outcome, tool: binding.name, canonical: binding.canonical, refusedAtCapacityMs: r.retryAfterMs };
}

/** The outcome of a call refused at capacity: rate_limited with retry_after_ms (ms, whole seconds). */
function overCapacityOutcome(r: CapacityRefusal): ToolOutcome {
  return { kind: 'refusal', code: 'rate_limited', message: OVER_CAPACITY_MESSAGE, extra: { retry_after_ms: r.retryAfterMs } };
}

let isoMs = 0;
let isoText = new Date(0).toISOString();
/** `new Date(ms).toISOString()` for `ms` (epoch milliseconds), made once per distinct millisecond in a row (calls started in the same millisecond share it). */
function isoAt(ms: number): string {
  if (ms !== isoMs) {
    isoMs = ms;
    isoText = new Date(ms).toISOString();
  }
  return isoText;
}
/** `new Date().toISOString()`, made at most once per millisecond (a flood of refusals builds one event each). */
function isoNow(): string {
  return isoAt(Date.now());
}

/** The tool-call event of a call refused at capacity (details.over_capacity; duration 0). */
function overCapacityEvent(req: Pick<ToolCallRequest, 'requestId' | 'dialect' | 'protocolVersion' | 'route'>, binding: ToolBinding, identity: KnownCaller): ToolCallAuditEvent {
  return {
    requestId: req.requestId,
    time: isoNow(),
    identityId: identity.id,
    keyId: identity.keyId,
    tool: binding.name,
    canonicalTool: binding.canonical,
    dialect: req.dialect,
    protocolVersion: req.protocolVersion,
    decision: 'refused',
    reasonCode: 'rate_limited',
    durationMs: 0,
    details: req.route ? { route: req.route, over_capacity: true } : { over_capacity: true },
  };
}

/**
 * The synchronous part of refuseOverCapacity: with the aggregate audit (client limits on), the
 * refusal is observed, counted in the aggregate and returned; null when it needs its own audit
 * event (no aggregator), which refuseOverCapacity then commits before the answer.
 */
function overCapacity(deps: DispatchDeps, req: Pick<ToolCallRequest, 'requestId' | 'dialect' | 'protocolVersion' | 'route' | 'clientAddress'>, binding: ToolBinding, r: CapacityRefusal, identity: KnownCaller): ToolCallRun | null {
  if (!countOverCapacity(deps, req, binding, identity)) return null;
  return { outcome: overCapacityOutcome(r), tool: binding.name, canonical: binding.canonical, refusedAtCapacityMs: r.retryAfterMs };
}

/** overCapacity's counting (metrics, aggregate audit) without its run; false (nothing counted) without the aggregate audit. */
function countOverCapacity(deps: DispatchDeps, req: Pick<ToolCallRequest, 'requestId' | 'dialect' | 'protocolVersion' | 'route' | 'clientAddress'>, binding: ToolBinding, identity: KnownCaller): boolean {
  if (!deps.keylessAudit) return false;
  if (deps.observeOverCapacity) deps.observeOverCapacity(binding.canonical);
  else if (deps.observe) deps.observe(overCapacityEvent(req, binding, identity));
  deps.keylessAudit.note(req.clientAddress ?? 'unknown', { reason: 'rate_limited', tool: binding.canonical, route: req.route ?? 'mcp', dialect: req.dialect, protocolVersion: req.protocolVersion, requestId: req.requestId });
  return true;
}

/** The notify of a call whose route streams no progress (one function, not one per call). */
const NO_NOTIFY = (): void => undefined;

/** runToolCall once the call may run (see there). */
async function runAdmitted(deps: DispatchDeps, req: ToolCallRequest, binding: ToolBinding, capacitySlot: { release(excludedMs?: number, dropped?: boolean, poolWaitMs?: number, slotWaitMs?: number): void; sourceWait: { ms: number; poolMs: number; slotMs: number } } | null): Promise<ToolCallRun> {
  const started = Date.now();
  const charge = { charged: false };
  const ctx: ToolCallContext & { auditDetails: Record<string, unknown>; auditHooks: AuditHooks } = {
    requestId: req.requestId,
    apiKey: req.apiKey,
    identity: null,
    dialect: req.dialect,
    protocolVersion: req.protocolVersion,
    toolName: binding.name,
    canonicalTool: binding.canonical,
    signal: req.signal,
    progressToken: req.progressToken,
    notify: req.notify ?? NO_NOTIFY,
    auditDetails: req.route ? { route: req.route } : {},
    // One literal of a fixed shape (issue 28 item 3: no conditional spread, no key added later).
    sourceWait: capacitySlot ? capacitySlot.sourceWait : undefined,
    rateLimitCharge: charge,
    auditHooks: {
      committed: false,
      toolCallEvent: (decision, reason) => ({
        requestId: req.requestId,
        time: isoAt(started),
        identityId: ctx.identity?.id ?? null,
        keyId: ctx.identity?.keyId ?? null,
        tool: binding.name,
        canonicalTool: binding.canonical,
        dialect: req.dialect,
        protocolVersion: req.protocolVersion,
        decision,
        reasonCode: reason,
        durationMs: Date.now() - started,
        // An access token's issuer, subject and jti as details.oauth (never the token; issue 26 item 4).
        details: ctx.identity?.token ? { ...ctx.auditDetails, oauth: ctx.identity.token } : ctx.auditDetails,
      }),
    },
  };
  const cancelKey = req.cancelKey;
  const abortCall = cancelKey !== undefined ? req.abort : undefined;
  if (abortCall) deps.inflight.add(req.apiKey, cancelKey!, abortCall);
  const address = req.clientAddress ?? 'unknown';
  let release = () => undefined as void;
  let outcome: ToolOutcome;
  try {
    // Synchronous for an identity the resolver holds in memory (no promise or await: issue 28 item 3).
    const step1 = binding.governed ? identityStep(ctx, deps.identityResolver, req.scope) : null;
    const refusedIdentity = step1 instanceof Promise ? await step1 : step1;
    if (capacitySlot && deps.capacity && !refusedIdentity) {
      if (req.apiKey) deps.capacity.noteToken(req.apiKey, ctx.identity!, req.scope);
      const got = deps.capacity.acquire(req.signal, ctx.identity!.id);
      const slot = got instanceof Promise ? await got : got;
      if (isCapacityRefusal(slot)) return await refuseOverCapacity(deps, req, binding, slot, ctx.identity!);
      capacitySlot.release = slot.release;
    }
    // Whether the keyless budget was charged up front matters only for a refused identity (admitCall).
    const admitted = binding.governed ? admitCall(deps.clientLimits, address, refusedIdentity, ctx.identity?.id ?? null, refusedIdentity !== null && chargedUpFront(deps.identityResolver, req.apiKey)) : { outcome: null, release };
    release = admitted.release;
    outcome = admitted.outcome ?? { kind: 'result', content: [] };
    if (outcome.kind === 'result') {
      const invalid = binding.validate(req.args);
      outcome = invalid ? { kind: 'tool_error', code: 'invalid_arguments', message: invalid } : await binding.handler(req.args, ctx);
    }
  } catch (err) {
    deps.logger.error({ requestId: req.requestId, tool: binding.canonical, err }, 'tool call failed');
    outcome = { kind: 'tool_error', code: req.signal.aborted ? 'cancelled' : 'tool_execution_failed' };
  } finally {
    if (abortCall) deps.inflight.remove(req.apiKey, cancelKey!, abortCall);
    if (req.holdSlot) req.holdSlot(release);
    else release();
  }
  if (binding.governed) {
    const charged = chargeUnspent(deps.rateLimiter, charge, ctx.identity?.id ?? null, outcome, deps.logger);
    outcome = charged instanceof Promise ? await charged : charged;
  }
  const { decision, reason } = decisionOf(outcome, req.signal.aborted);
  // The agent only sees a request id: let the operator find which source failed and why from it.
  if (decision === 'failed' || (decision === 'refused' && reason && refusalInfo(reason).status === 'unavailable')) {
    const line = { requestId: req.requestId, tool: binding.canonical, source_id: ctx.auditDetails.source_id, decision, reason };
    if (decision === 'failed') deps.logger.warn(line, 'tool execution failed');
    else deps.logger.info(line, reason === 'audit_unavailable' ? 'tool call refused: audit unavailable' : reason === 'identity_provider_unavailable' ? 'tool call refused: identity provider unavailable' : 'tool call refused: source unavailable');
  }
  const event = ctx.auditHooks.toolCallEvent(decision, reason);
  // Keyless refusals are counted per client address per minute, never one row each (issue 10, Build 6).
  if (deps.keylessAudit && !ctx.identity && outcome.kind === 'refusal' && (KEYLESS_REFUSALS.has(outcome.code) || outcome.code === 'rate_limited')) {
    deps.observe?.(event);
    deps.keylessAudit.note(address, { reason: outcome.code, tool: binding.canonical, route: req.route ?? 'mcp', dialect: req.dialect, protocolVersion: req.protocolVersion, requestId: req.requestId });
    return { outcome, tool: binding.name, canonical: binding.canonical };
  }
  // Audit before answer (issue 11): released only once the event committed; else audit_unavailable.
  // (A queued write's event was committed with its approval row, in one transaction.)
  const ok = (outcome.kind === 'queued' && ctx.auditHooks.committed) || (await commitAuditEvent(deps.audit, event, req.signal, deps.logger, deps.pendingAudits));
  if (!ok) {
    outcome = auditUnavailableOutcome(deps.audit);
    deps.observe?.({ ...event, decision: 'refused', reasonCode: 'audit_unavailable' });
  } else deps.observe?.(event);
  return { outcome, tool: binding.name, canonical: binding.canonical };
}

/** What a tools/call names, once its params passed callTool's checks (callTarget). */
interface CallTarget {
  name: string;
  binding: ToolBinding;
  args: Record<string, unknown>;
  params: Record<string, unknown>;
}

/**
 * The checks of a tools/call's params before it runs: params.name a string naming a tool,
 * params.arguments an object (or absent), and in the modern dialect the client capabilities the
 * tool requires declared. Returns the target, or the answer to write instead (invalid params,
 * missing capability).
 */
function callTarget(adm: Admitted, params: Record<string, unknown>, deps: DispatchDeps): CallTarget | ((ch: ResponseChannel, id: JsonRpcId) => void) {
  const name = params.name;
  if (typeof name !== 'string') return (ch, id) => invalidParams(ch, id, 'params.name must be a string', 'unknown_tool');
  const binding = deps.tools.get(name);
  if (!binding) return (ch, id) => ch.final(200, errorResponse(id, unknownToolError(name)));
  const args = params.arguments === undefined ? {} : params.arguments;
  if (!isObject(args)) return (ch, id) => invalidParams(ch, id, 'params.arguments must be an object', 'invalid_arguments');
  if (adm.dialect === 'modern' && binding.requiredClientCapabilities) {
    const meta = isObject(params._meta) ? params._meta : {};
    const declared = isObject(meta['io.modelcontextprotocol/clientCapabilities']) ? (meta['io.modelcontextprotocol/clientCapabilities'] as Record<string, unknown>) : {};
    const missing = Object.keys(binding.requiredClientCapabilities).filter((k) => !(k in declared));
    if (missing.length) {
      const requiredCapabilities = Object.fromEntries(missing.map((k) => [k, binding.requiredClientCapabilities![k]]));
      return (ch, id) => ch.final(400, errorResponse(id, { code: -32021, message: `Missing required client capability: ${missing.join(', ')}`, data: { requiredCapabilities } }));
    }
  }
  return { name, binding, args, params };
}

/** The `_meta` of a tools/call that sent none (read only; one object, not one per call). */
const NO_META: Readonly<Record<string, unknown>> = Object.freeze({});

/** A tools/call: its checks (callTarget), runToolCall, then its answer (answerCall); one `then` of its own (issue 28 item 3). */
function callTool(adm: Admitted, id: JsonRpcId, params: Record<string, unknown>, http: HttpContext, ch: ResponseChannel, deps: DispatchDeps): Promise<void> {
  const target = callTarget(adm, params, deps);
  if (typeof target === 'function') {
    target(ch, id);
    return DONE;
  }
  const { name, args } = target;
  const meta: Readonly<Record<string, unknown>> = isObject(params._meta) ? params._meta : NO_META;
  const progressToken = typeof meta.progressToken === 'string' || typeof meta.progressToken === 'number' ? meta.progressToken : undefined;
  return runToolCall(deps, {
    name,
    args,
    apiKey: http.apiKey,
    clientAddress: http.clientAddress,
    scope: http.scope,
    requestId: http.requestId,
    signal: http.signal,
    dialect: adm.dialect,
    protocolVersion: adm.version,
    progressToken,
    notify: (m, p) => ch.event({ jsonrpc: '2.0', method: m, params: p }),
    cancelKey: id,
    abort: (reason) => http.abort(reason),
    // The stream slot is held until the answer has left or the socket closed (red-team F1).
    holdSlot: (release) => ch.whenDone(release),
  }).then((ran) => answerCall(adm, id, http.requestId, ran!, ch, deps));
}

/** Writes a tools/call's answer (rendered for the dialect), arms its write deadline and, after a refusal at capacity, pauses the connection. */
function answerCall(adm: Admitted, id: JsonRpcId, requestId: string, ran: ToolCallRun, ch: ResponseChannel, deps: DispatchDeps): void {
  const rendered = withChallenge(deps.authSurface, ran.outcome, adm.dialect, adm.version, requestId, renderOutcome(ran.outcome, adm.dialect, adm.version, requestId));
  if (rendered.kind === 'result') ch.final(200, resultResponse(id, rendered.result), {}, true);
  else ch.final(rendered.status, errorResponse(id, rendered.error), rendered.headers ?? {});
  ch.writeDeadline(deps.answerWriteTimeoutMs ?? DEFAULT_ANSWER_WRITE_TIMEOUT_MS, () => answerExpired(deps, requestId, ran.canonical));
  // Refused at capacity: the connection is not read again before the Retry-After (issue 29), so a
  // client retrying at once cannot spend the replica's CPU on refusals (admission.pause_refused).
  if (ran.refusedAtCapacityMs && deps.capacity?.settings.pauseRefusedConnections) ch.pauseReadingAfter(ran.refusedAtCapacityMs);
}

/**
 * Admission by capacity decided right after the body parse (issue 29 item 3): when `adm` is a
 * tools/call of a governed tool whose params pass callTool's checks, its bearer token `apiKey` was
 * seen before (CapacityLimiter.noteToken) and the replica would refuse its identity at once
 * (refuseKnown), writes the same 429 answer runToolCall's path would (rate_limited,
 * retry_after_ms, Retry-After), counts it in the aggregate audit and returns true; nothing a
 * served call needs (abort controller, in-flight registration, identity) is built. Returns false
 * (nothing written) in every other case, and always without the aggregate audit (client limits
 * off: the refusal then needs its own event, committed on the normal path). `scope` (the socket)
 * caches the token's hash across the connection's requests. `frontDoorCall`, asked only for a
 * modern refusal while deps.closeRefusedConnections is set: true when the request's headers are a
 * call the front door could refuse itself (then the answer carries `Connection: close`).
 */
export function answerKnownOverCapacity(adm: Admitted, http: { requestId: string; apiKey: string; clientAddress?: string; scope?: object; frontDoorCall?: () => boolean }, ch: ResponseChannel, deps: DispatchDeps): boolean {
  const msg = adm.message;
  if (!deps.capacity || !deps.keylessAudit || msg.type !== 'request' || msg.method !== 'tools/call') return false;
  const target = callTarget(adm, msg.params ?? {}, deps);
  if (typeof target === 'function' || !target.binding.governed) return false;
  const early = deps.capacity.refuseKnown(http.apiKey, http.scope);
  if (!early) return false;
  const req = { requestId: http.requestId, dialect: adm.dialect, protocolVersion: adm.version, clientAddress: http.clientAddress };
  const ran = overCapacity(deps, req, target.binding, early.refusal, early.caller)!;
  const answer = adm.dialect === 'modern' ? modernOverCapacityAnswer(adm.version, msg.id, http.requestId, early.refusal.retryAfterMs) : null;
  if (!answer) {
    answerCall(adm, msg.id, http.requestId, ran, ch, deps);
    return true;
  }
  // The same bytes answerCall writes (renderOutcome → errorResponse → serializeMessage), from a
  // template made once by that very path: no outcome, rendering or serializer per refusal; with a
  // front door, `Connection: close` when its next request could be refused there (http.frontDoorCall).
  if (deps.closeRefusedConnections && http.frontDoorCall?.()) answer.headers.Connection = 'close';
  ch.finalText(answer.status, answer.text, answer.headers);
  ch.writeDeadline(deps.answerWriteTimeoutMs ?? DEFAULT_ANSWER_WRITE_TIMEOUT_MS, () => answerExpired(deps, http.requestId, ran.canonical));
  if (deps.capacity.settings.pauseRefusedConnections) ch.pauseReadingAfter(early.refusal.retryAfterMs);
  return true;
}

/**
 * Admission by capacity decided from a request's headers alone, before its body is read (issue 29,
 * h29y; src/transport/early-refusal.ts): for a modern tools/call of `call.tool` (the Mcp-Name
 * header), a governed tool that needs no declared client capability, with bearer token `apiKey`
 * seen before (CapacityLimiter.noteToken), when the replica would refuse that identity at once
 * (refuseKnown), counts the refusal in the aggregate audit and the metrics exactly as
 * answerKnownOverCapacity does and returns the refusal (retry_after_ms) with the request id made
 * for it and the tool's canonical name. Null, with nothing counted, in every other case (client limits off: the refusal then
 * needs its own event, committed on the normal path; no template for `call.version`).
 */
export function refuseKnownFromHeaders(deps: DispatchDeps, call: { apiKey: string; tool: string; version: string; clientAddress: string; scope?: object }): { refusal: CapacityRefusal; requestId: string; canonical: string } | null {
  if (!deps.capacity || !deps.keylessAudit) return null;
  const binding = deps.tools.get(call.tool);
  if (!binding || !binding.governed || binding.requiredClientCapabilities || !modernRefusalTemplate(call.version)) return null;
  const early = deps.capacity.refuseKnown(call.apiKey, call.scope);
  if (!early) return null;
  const requestId = newRequestId();
  countOverCapacity(deps, { requestId, dialect: 'modern', protocolVersion: call.version, clientAddress: call.clientAddress }, binding, early.caller);
  return { refusal: early.refusal, requestId, canonical: binding.canonical };
}

/** The modern dialect's refusal at capacity as a template: `parts` alternate fixed text (even indexes) and slot markers (odd: the JSON-RPC id, the request id, retry_after_ms); `status` is the HTTP status. */
interface RefusalTemplate {
  parts: string[];
  status: number;
}

/** Slot values rendered into the template, then cut at (none can occur in the refusal's fixed text). */
const ID_SLOT = 'il_id_slot_5d1c';
const ID_SLOT_JSON = `"${ID_SLOT}"`;
const REQUEST_ID_SLOT = 'il_request_slot_5d1c';
const RETRY_SLOT = 987654321012;
const SLOTS = new RegExp(`(${ID_SLOT_JSON}|${REQUEST_ID_SLOT}|${RETRY_SLOT})`);
/** Per protocol version: the template, or null when the rendered refusal does not have the expected shape (then answerCall writes it). */
const refusalTemplates = new Map<string, RefusalTemplate | null>();

/**
 * The refusal at capacity of the modern dialect for JSON-RPC id `id` (null when it could not be read), request `requestId` and a
 * wait of `retryAfterMs` (ms): the HTTP status (429), the body text and the headers (Retry-After,
 * whole seconds), exactly as answerCall renders and serialises it, from a template rendered once per
 * protocol version through renderOutcome and serializeMessageForWire with slot values (issue 29: a
 * refusal must cost little more than node:http's own answer). Null when the rendered refusal is not
 * one JSON text with each slot once and Retry-After as its only header (the caller then uses answerCall).
 */
export function modernOverCapacityAnswer(version: string, id: JsonRpcId | null, requestId: string, retryAfterMs: number): { status: number; text: string; headers: Record<string, string> } | null {
  const t = modernRefusalTemplate(version);
  if (!t) return null;
  const idText = JSON.stringify(id);
  let text = '';
  for (let i = 0; i < t.parts.length; i++) {
    const p = t.parts[i];
    text += i % 2 === 0 ? p : p === REQUEST_ID_SLOT ? requestId : p === ID_SLOT_JSON ? idText : String(retryAfterMs);
  }
  return { status: t.status, text, headers: { 'Retry-After': retryAfterSeconds(retryAfterMs) } };
}

/** The refusal template of protocol version `version` (made once, then cached), or null when the rendered refusal has not the expected shape. */
function modernRefusalTemplate(version: string): RefusalTemplate | null {
  let t = refusalTemplates.get(version);
  if (t === undefined) {
    t = refusalTemplate(version);
    refusalTemplates.set(version, t);
  }
  return t;
}

/** Renders the refusal once with slot values and cuts it at them (modernOverCapacityAnswer); null when the shape is not the expected one. */
function refusalTemplate(version: string): RefusalTemplate | null {
  const rendered = renderOutcome(overCapacityOutcome({ retryAfterMs: RETRY_SLOT }), 'modern', version, REQUEST_ID_SLOT);
  if (rendered.kind !== 'error') return null;
  const headers = rendered.headers ?? {};
  if (Object.keys(headers).join() !== 'Retry-After' || headers['Retry-After'] !== retryAfterSeconds(RETRY_SLOT)) return null;
  const wire = serializeMessageForWire(errorResponse(ID_SLOT, rendered.error));
  if (typeof wire !== 'string') return null;
  const parts = wire.split(SLOTS);
  const slots = parts.filter((_, i) => i % 2 === 1);
  if (slots.length !== 3 || new Set(slots).size !== 3) return null;
  return { parts, status: rendered.status };
}

/** Logs an answer whose write deadline passed (its socket is then destroyed; the call stays audited). */
export function answerExpired(deps: DispatchDeps, requestId: string, tool: string): void {
  deps.logger.warn({ requestId, tool, timeoutMs: deps.answerWriteTimeoutMs ?? DEFAULT_ANSWER_WRITE_TIMEOUT_MS }, 'answer not read within the write deadline; closing the connection');
}
