/**
 * Operations endpoints (issue 5, item 7): /healthz (process alive), /readyz (control database
 * reachable and migrations applied), /metrics (Prometheus text: requests by method, dialect and
 * status; tool calls by tool and decision; latency histograms; circuit state per source; pending
 * approvals; cache hits and misses). One prom-client Registry per gateway (no global state).
 */
import type { Express } from 'express';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { ToolCallAuditEvent } from '../pipeline/audit-types';

/** What the operations endpoints read at scrape time. */
export interface OperationsSources {
  /** Resolves when the control database answers and migrations are applied; rejects (or resolves false) otherwise. */
  ready(): Promise<boolean>;
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

/** Gateway metrics and their recording functions. */
export class GatewayMetrics {
  readonly registry = new Registry();
  private readonly requests = new Counter({ name: 'interlock_mcp_requests_total', help: 'HTTP requests at the MCP endpoint by JSON-RPC method, dialect and HTTP status.', labelNames: ['method', 'dialect', 'status'], registers: [this.registry] });
  private readonly requestSeconds = new Histogram({ name: 'interlock_mcp_request_duration_seconds', help: 'Time to answer an MCP endpoint request, by JSON-RPC method.', labelNames: ['method'], buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30], registers: [this.registry] });
  private readonly toolCalls = new Counter({ name: 'interlock_tool_calls_total', help: 'Tool calls by canonical tool, source, decision (allowed, refused, queued, invalid, failed, cancelled) and reason code.', labelNames: ['tool', 'source', 'decision', 'reason'], registers: [this.registry] });
  private readonly toolSeconds = new Histogram({ name: 'interlock_tool_call_duration_seconds', help: 'Tool call latency through the governance pipeline, by canonical tool and decision.', labelNames: ['tool', 'decision'], buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30], registers: [this.registry] });

  constructor(src: OperationsSources) {
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

  /** Records one answered MCP endpoint request (durations in seconds). */
  observeRequest(method: string, dialect: string, status: number, seconds: number): void {
    this.requests.inc({ method, dialect, status: String(status) });
    this.requestSeconds.observe({ method }, seconds);
  }

  /** Records one finished tool call from its audit event. */
  observeToolCall(e: ToolCallAuditEvent): void {
    const source = typeof e.details.source_id === 'string' ? e.details.source_id : '';
    this.toolCalls.inc({ tool: e.canonicalTool, source, decision: e.decision, reason: e.reasonCode ?? '' });
    this.toolSeconds.observe({ tool: e.canonicalTool, decision: e.decision }, e.durationMs / 1000);
  }
}

/** Mounts /healthz, /readyz and /metrics. */
export function mountOperations(app: Express, metrics: GatewayMetrics, src: OperationsSources): void {
  app.get('/readyz', async (_req, res) => {
    const ok = await src.ready().catch(() => false);
    res.status(ok ? 200 : 503).json({ status: ok ? 'ready' : 'not_ready' });
  });
  app.get('/metrics', async (_req, res) => {
    res.set('Content-Type', metrics.registry.contentType).send(await metrics.registry.metrics());
  });
}
