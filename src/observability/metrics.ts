/**
 * Operations endpoints (issue 5, item 7): /healthz (process alive), /readyz (control database
 * reachable and migrations applied), /metrics (Prometheus text: requests by method, dialect and
 * status; tool calls by tool and decision; latency histograms; circuit state per source; pending
 * approvals; cache hits and misses). One prom-client Registry per gateway (no global state).
 */
import express, { type Express } from 'express';
import type { Logger } from 'pino';
import { errorBodyHandler, healthz, hostOriginGuard, unknownRoute } from '../transport/http-guard';
import type { OriginPolicy } from '../transport/http-headers';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { ToolCallAuditEvent } from '../audit/types';
import { closedLabel, dialectLabel, methodLabel, reasonLabel, statusLabel } from './labels';
import { TOKEN_OUTCOMES } from '../auth/federated-resolver';

/**
 * Why /readyz answers 503 (spec/openapi-v1.yaml, readyz): the control database cannot be reached
 * or is not a read-write primary (issue 29: start without it, failover), migrations are pending, or
 * the keyed audit trail refuses this gateway's batches (no audit key, or one the owner did not
 * register: docs/operators.md "The audit key").
 */
export type NotReadyReason = 'control_database_unavailable' | 'migrations_pending' | 'audit_key_refused';

/** Writes the /readyz answer for `r` (OperationsSources.ready's value): 200 {status: ready}, else 503 {status: not_ready, reason?}. */
export function sendReadiness(res: express.Response, r: boolean | NotReadyReason): void {
  if (r === true) res.status(200).json({ status: 'ready' });
  else res.status(503).json(typeof r === 'string' ? { status: 'not_ready', reason: r } : { status: 'not_ready' });
}

/** What the operations endpoints read at scrape time. */
export interface OperationsSources {
  /**
   * True when the control database answers (a read-write primary) and migrations are applied;
   * otherwise false or the reason (NotReadyReason), which /readyz reports. A rejection reads as
   * `control_database_unavailable`.
   */
  ready(): Promise<boolean | NotReadyReason>;
  /** Circuit state per source id: closed | half_open | open. */
  circuitStates(): Record<string, string>;
  /** Approvals in state pending. */
  pendingApprovals(): Promise<number>;
  cacheStats(): { hits: number; misses: number; entries: number };
  /**
   * Reader pool occupancy per registered source id (issue 10, Build 5): most connections, checked
   * out, callers waiting for a connection, calls waiting for one of their identity's slots.
   * Absent: no pool gauges are reported.
   */
  poolStats?(): Record<string, { size: number; inUse: number; waiting: number; identityWaiting: number }>;
}

/**
 * The closed sets of label values that depend on configuration (issue 10, Build 7): the served
 * tools (canonical names) and the registered sources. A value outside them is recorded as `other`.
 * Without this option every tool and source value is `other`.
 */
export interface LabelSets {
  /** Canonical names of the served tools. */
  tools(): ReadonlySet<string>;
  /** Ids of the registered sources (read at observation time; keep it a cheap in-memory snapshot). */
  sources(): ReadonlySet<string>;
}

const DECISIONS: ReadonlySet<string> = new Set(['allowed', 'refused', 'queued', 'invalid', 'failed', 'cancelled']);

/**
 * One closed-set label combination of a counter and its histogram: the counter's labels, the
 * increments not yet added to the prom-client counter (a plain number, issue 29), and the
 * histogram child's observe, bound once.
 */
interface LabelChild {
  readonly labels: Record<string, string>;
  pending: number;
  readonly observe: (v: number) => void;
}

/**
 * Adds each child's pending increments to `counter` (prom-client's documented `collect()` hook,
 * run at every scrape before the counter is read) and zeroes them: the scrape shows exactly one
 * count per recorded call, at the cost of one `inc` per series per scrape instead of one per call.
 */
function addPending(counter: Counter<string>, children: Map<string, LabelChild>): void {
  for (const child of children.values()) {
    if (child.pending === 0) continue;
    counter.inc(child.labels, child.pending);
    child.pending = 0;
  }
}

/**
 * Makes `counter.reset()` (what prom-client's `registry.resetMetrics()` calls on every metric) also
 * drop the increments `children` hold for the next scrape (red team rt40b): without it, calls made
 * before a reset were added by the next scrape's collect() and showed after it.
 */
function dropPendingOnReset(counter: Counter<string>, children: Map<string, LabelChild>): void {
  const reset = counter.reset.bind(counter);
  counter.reset = (): void => {
    for (const child of children.values()) child.pending = 0;
    reset();
  };
}

/** Gateway metrics and their recording functions. */
export class GatewayMetrics {
  readonly registry = new Registry();
  // Label children per closed-set combination, bound once (issue 13: no label object per call).
  // The sets are closed (labels.ts), so these maps are bounded like the series themselves.
  private readonly requestChildren = new Map<string, LabelChild>();
  private readonly toolChildren = new Map<string, LabelChild>();
  /** observeOverCapacity's children per canonical tool (entries of toolChildren), valid for the served-tools set `overCapacityTools`. */
  private readonly overCapacityChildren = new Map<string, LabelChild>();
  private overCapacityTools: ReadonlySet<string> | null = null;
  // The two counters are counted in plain numbers per child and added to prom-client at scrape time
  // through its collect() hook (issue 29: no label hashing per call, a refusal at capacity counts twice).
  private readonly requests: Counter<string> = new Counter({ name: 'interlock_mcp_requests_total', help: 'HTTP requests at the MCP endpoint by JSON-RPC method, dialect and HTTP status.', labelNames: ['method', 'dialect', 'status'], registers: [this.registry], collect: (): void => addPending(this.requests, this.requestChildren) });
  private readonly requestSeconds = new Histogram({ name: 'interlock_mcp_request_duration_seconds', help: 'Time to answer an MCP endpoint request, by JSON-RPC method.', labelNames: ['method'], buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30], registers: [this.registry] });
  private readonly toolCalls: Counter<string> = new Counter({ name: 'interlock_tool_calls_total', help: 'Tool calls by canonical tool, source, decision (allowed, refused, queued, invalid, failed, cancelled) and reason code.', labelNames: ['tool', 'source', 'decision', 'reason'], registers: [this.registry], collect: (): void => addPending(this.toolCalls, this.toolChildren) });
  private readonly toolSeconds = new Histogram({ name: 'interlock_tool_call_duration_seconds', help: 'Tool call latency through the governance pipeline, by canonical tool and decision.', labelNames: ['tool', 'decision'], buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30], registers: [this.registry] });

  private readonly tokenValidations = new Counter({ name: 'interlock_token_validations_total', help: 'Access-token validations (issue 26) by outcome: valid, or why the token was refused (expired, wrong_audience, unknown_kid, keys_unavailable, unknown_subject, …).', labelNames: ['outcome'], registers: [this.registry] });

  private readonly labels: LabelSets;

  /** `labels` gives the closed sets of tools and sources (see LabelSets). */
  constructor(src: OperationsSources, labels?: LabelSets) {
    const none: ReadonlySet<string> = new Set();
    this.labels = labels ?? { tools: () => none, sources: () => none };
    dropPendingOnReset(this.requests, this.requestChildren);
    dropPendingOnReset(this.toolCalls, this.toolChildren);
    collectDefaultMetrics({ register: this.registry, prefix: 'interlock_process_' });
    const circuit = new Gauge({ name: 'interlock_source_circuit_state', help: 'Circuit breaker state per source: 0 closed, 1 half_open, 2 open.', labelNames: ['source'], registers: [this.registry], collect() {
      this.reset();
      for (const [source, state] of Object.entries(src.circuitStates())) this.set({ source }, state === 'open' ? 2 : state === 'half_open' ? 1 : 0);
    } });
    void circuit;
    new Gauge({ name: 'interlock_approvals_pending', help: 'Writes waiting for an operator approval.', registers: [this.registry], async collect() {
      this.set(await src.pendingApprovals().catch(() => -1));
    } });
    const pool = (name: string, help: string, pick: (p: { size: number; inUse: number; waiting: number; identityWaiting: number }) => number) =>
      new Gauge({ name, help, labelNames: ['source'], registers: [this.registry], collect() {
        this.reset();
        for (const [source, stats] of Object.entries(src.poolStats?.() ?? {})) this.set({ source }, pick(stats));
      } });
    pool('interlock_source_pool_size', 'Most reader connections per source (pool_size).', (p) => p.size);
    pool('interlock_source_pool_in_use', 'Reader connections checked out per source.', (p) => p.inUse);
    pool('interlock_source_pool_waiters', 'Calls waiting for a free reader connection per source.', (p) => p.waiting);
    pool('interlock_source_identity_waiters', 'Calls waiting for one of their identity\'s concurrent-statement slots per source.', (p) => p.identityWaiting);
    new Gauge({ name: 'interlock_cache_hits', help: 'Read-cache hits since start.', registers: [this.registry], collect() { this.set(src.cacheStats().hits); } });
    new Gauge({ name: 'interlock_cache_misses', help: 'Read-cache misses since start.', registers: [this.registry], collect() { this.set(src.cacheStats().misses); } });
    new Gauge({ name: 'interlock_cache_entries', help: 'Entries in the read cache.', registers: [this.registry], collect() { this.set(src.cacheStats().entries); } });
  }

  /**
   * Records one answered MCP endpoint request (durations in seconds). The method becomes `other`
   * unless it is in the protocol's method table, so client-chosen names never become series.
   */
  observeRequest(method: string, dialect: string, status: number, seconds: number): void {
    const m = methodLabel(method);
    const d = dialectLabel(dialect);
    const st = statusLabel(status);
    const key = `${m}\u0000${d}\u0000${st}`;
    let child = this.requestChildren.get(key);
    if (!child) {
      child = { labels: { method: m, dialect: d, status: st }, pending: 0, observe: this.requestSeconds.labels(m).observe };
      this.requestChildren.set(key, child);
    }
    child.pending++;
    child.observe(seconds);
  }

  /** Records one access-token validation by outcome (TOKEN_OUTCOMES; anything else is `other`). */
  observeTokenValidation(outcome: string): void {
    this.tokenValidations.labels(closedLabel(outcome, TOKEN_OUTCOMES)).inc();
  }

  /**
   * Records one finished tool call from its audit event. Tool, source and reason are labelled only
   * from their closed sets (served tools, registered sources, spec/errors-v1.json codes), else
   * `other`; a call without a source has source ''.
   */
  observeToolCall(e: ToolCallAuditEvent): void {
    const source = typeof e.details.source_id === 'string' ? closedLabel(e.details.source_id, this.labels.sources()) : '';
    const child = this.toolChild(closedLabel(e.canonicalTool, this.labels.tools()), source, closedLabel(e.decision, DECISIONS), reasonLabel(e.reasonCode));
    child.pending++;
    child.observe(e.durationMs / 1000);
  }

  /**
   * Records one tool call of canonical tool `canonicalTool` refused at capacity (issue 29): exactly
   * what observeToolCall records for its event (dispatch.ts overCapacityEvent: no source, decision
   * refused, reason rate_limited, duration 0), the same series and histogram observation, without the
   * event. The label child is looked up once per tool while the served-tools set is the same object.
   */
  observeOverCapacity(canonicalTool: string): void {
    const tools = this.labels.tools();
    if (tools !== this.overCapacityTools) {
      this.overCapacityTools = tools;
      this.overCapacityChildren.clear();
    }
    let child = this.overCapacityChildren.get(canonicalTool);
    if (!child) {
      child = this.toolChild(closedLabel(canonicalTool, tools), '', 'refused', reasonLabel('rate_limited'));
      this.overCapacityChildren.set(canonicalTool, child);
    }
    child.pending++;
    child.observe(0);
  }

  /** The tool-call label child of (tool, source, decision, reason), labels already closed; made once per combination. */
  private toolChild(tool: string, source: string, decision: string, reason: string): LabelChild {
    const key = `${tool}\u0000${source}\u0000${decision}\u0000${reason}`;
    let child = this.toolChildren.get(key);
    if (!child) {
      child = { labels: { tool, source, decision, reason }, pending: 0, observe: this.toolSeconds.labels(tool, decision).observe };
      this.toolChildren.set(key, child);
    }
    return child;
  }
}

/**
 * Mounts /readyz and /metrics (/healthz is the app's own), each behind the Host/Origin guard of
 * `policy` when given (issue 10, Build 8: a DNS-rebinding page must not read them).
 */
export function mountOperations(app: Express, metrics: GatewayMetrics, src: OperationsSources, policy?: OriginPolicy): void {
  if (policy) app.use(['/readyz', '/metrics'], hostOriginGuard(policy));
  app.get('/readyz', async (_req, res) => {
    sendReadiness(res, await src.ready().catch((): NotReadyReason => 'control_database_unavailable'));
  });
  app.get('/metrics', async (_req, res) => {
    res.set('Content-Type', metrics.registry.contentType).send(await metrics.registry.metrics());
  });
}

/**
 * A separate app for the operations endpoints, for config `ops_listen` (issue 10, Build 8): GET
 * /healthz, /readyz and /metrics behind the same Host/Origin guard as every route (the policy for
 * the ops address), exact paths, 404 unknown_route elsewhere, errors in the ErrorBody shape.
 */
export function createOperationsApp(metrics: GatewayMetrics, src: OperationsSources, policy: OriginPolicy, logger?: Logger): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('case sensitive routing', true);
  app.set('strict routing', true);
  app.use(hostOriginGuard(policy));
  app.get('/healthz', healthz);
  mountOperations(app, metrics, src);
  app.use(unknownRoute);
  app.use(errorBodyHandler(logger));
  return app;
}
