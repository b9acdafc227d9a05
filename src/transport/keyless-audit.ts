/**
 * Aggregated audit of keyless refusals (issue 10, Build 6): a tools/call refused because it had no
 * valid agent key (missing_api_key, invalid_api_key) and a request refused by the keyless budget
 * of its client address (rate_limited) do not write one audit row each. They are counted per client
 * address per minute and written through the ordinary AuditSink as one aggregated event per
 * address per minute:
 *
 *   { requestId: "agg_<window start, unix seconds>_<n>", time: <window start>, identityId: null,
 *     keyId: null, tool: "*", canonicalTool: "*", decision: "refused",
 *     reasonCode: <the most frequent reason>, durationMs: 0,
 *     details: { aggregated: true, client_address, window_start, window_seconds, count,
 *                reasons: {code: n}, tools: {canonical tool: n}, routes: {route: n},
 *                first_request_id, last_request_id } }
 *
 * A window is written once it has ended (checked every few seconds) and by flush() (graceful
 * shutdown, or an explicit flush, which can close the current minute early). At most
 * `maxAddresses` addresses are counted per window; the rest are counted under address "other", so
 * memory and audit growth are bounded whatever the traffic.
 */
import type { Logger } from 'pino';
import type { AuditSink, ToolCallAuditEvent } from '../audit/types';

/** One keyless refusal to count. */
export interface KeylessRefusal {
  /** Refusal code: missing_api_key, invalid_api_key or rate_limited. */
  reason: string;
  /** Canonical tool name, or "-" when the request was refused before its body was read. */
  tool: string;
  /** Surface: "mcp", "mcp-tools-call", "mcp-sse", "v1". */
  route: string;
  dialect?: 'modern' | 'handshake';
  protocolVersion?: string;
  requestId?: string;
}

interface Window {
  start: number;
  address: string;
  count: number;
  reasons: Record<string, number>;
  tools: Record<string, number>;
  routes: Record<string, number>;
  dialects: Record<string, number>;
  versions: Record<string, number>;
  first?: string;
  last?: string;
}

/** Options of KeylessAuditAggregator. */
export interface KeylessAuditOptions {
  /** Window length in ms (default 60 000). */
  windowMs?: number;
  /** Most addresses counted separately per window (default 10 000). */
  maxAddresses?: number;
  /** How often ended windows are written, in ms (default 5 000; 0 = never by timer). */
  flushEveryMs?: number;
  logger?: Logger;
  /** Settling audit writes are added here (graceful shutdown awaits them). */
  pending?: Set<Promise<void>>;
  now?: () => number;
}

function inc(m: Record<string, number>, k: string): void {
  m[k] = (m[k] ?? 0) + 1;
}

function top(m: Record<string, number>): string | undefined {
  let best: string | undefined;
  for (const [k, n] of Object.entries(m)) if (best === undefined || n > m[best]) best = k;
  return best;
}

/** Counts keyless refusals and writes one aggregated audit event per address per window. */
export class KeylessAuditAggregator {
  private readonly windows = new Map<string, Window>();
  private readonly windowMs: number;
  private readonly maxAddresses: number;
  private readonly now: () => number;
  private readonly timer: NodeJS.Timeout | null;
  private seq = 0;

  constructor(private readonly sink: AuditSink, private readonly opts: KeylessAuditOptions = {}) {
    this.windowMs = opts.windowMs ?? 60_000;
    this.maxAddresses = opts.maxAddresses ?? 10_000;
    this.now = opts.now ?? Date.now;
    const every = opts.flushEveryMs ?? 5_000;
    this.timer = every > 0 ? setInterval(() => void this.flushEnded(), every) : null;
    this.timer?.unref();
  }

  /** Counts one keyless refusal from `address` (a clientAddressKey). Never throws, never waits. */
  note(address: string, r: KeylessRefusal): void {
    const start = Math.floor(this.now() / this.windowMs) * this.windowMs;
    let key = `${start}|${address}`;
    let w = this.windows.get(key);
    if (!w && this.windows.size >= this.maxAddresses) {
      key = `${start}|other`;
      w = this.windows.get(key);
    }
    if (!w) {
      w = { start, address: key.slice(key.indexOf('|') + 1), count: 0, reasons: {}, tools: {}, routes: {}, dialects: {}, versions: {} };
      this.windows.set(key, w);
    }
    w.count++;
    inc(w.reasons, r.reason);
    inc(w.tools, r.tool);
    inc(w.routes, r.route);
    if (r.dialect) inc(w.dialects, r.dialect);
    if (r.protocolVersion) inc(w.versions, r.protocolVersion);
    if (r.requestId) {
      w.first ??= r.requestId;
      w.last = r.requestId;
    }
  }

  /** Windows not written yet (for tests). */
  get open(): number {
    return this.windows.size;
  }

  /** Writes every window that has ended. */
  flushEnded(): Promise<void> {
    const current = Math.floor(this.now() / this.windowMs) * this.windowMs;
    return this.write([...this.windows.entries()].filter(([, w]) => w.start < current));
  }

  /** Writes every window, the current one included (graceful shutdown, tests). */
  flush(): Promise<void> {
    return this.write([...this.windows.entries()]);
  }

  /** Stops the timer (after a final flush()). */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  private write(entries: Array<[string, Window]>): Promise<void> {
    const writes: Promise<void>[] = [];
    for (const [key, w] of entries) {
      this.windows.delete(key);
      const p = this.sink.record(this.event(w)).catch((err: unknown) => this.opts.logger?.error({ component: 'keyless-audit', err }, 'aggregated audit write failed'));
      this.opts.pending?.add(p);
      void p.finally(() => this.opts.pending?.delete(p));
      writes.push(p);
    }
    return Promise.all(writes).then(() => undefined);
  }

  /** The aggregated audit event of one window. */
  private event(w: Window): ToolCallAuditEvent {
    const details: Record<string, unknown> = {
      aggregated: true,
      client_address: w.address,
      window_start: new Date(w.start).toISOString(),
      window_seconds: this.windowMs / 1000,
      count: w.count,
      reasons: w.reasons,
      tools: w.tools,
      routes: w.routes,
    };
    if (w.first) details.first_request_id = w.first;
    if (w.last) details.last_request_id = w.last;
    return {
      requestId: `agg_${Math.floor(w.start / 1000)}_${++this.seq}`,
      time: new Date(w.start).toISOString(),
      identityId: null,
      keyId: null,
      tool: '*',
      canonicalTool: '*',
      dialect: top(w.dialects) === 'modern' ? 'modern' : 'handshake',
      protocolVersion: top(w.versions) ?? '-',
      decision: 'refused',
      reasonCode: top(w.reasons) ?? null,
      durationMs: 0,
      details,
    };
  }
}

/** Refusal codes that make a tools/call a keyless refusal (no identity was resolved). */
export const KEYLESS_REFUSALS: ReadonlySet<string> = new Set(['missing_api_key', 'invalid_api_key', 'invalid_token']);
