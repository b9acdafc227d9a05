/**
 * GatewayMetrics records through label children bound once per closed-set combination (issue 13):
 * the series and values must be exactly those of one observation per call.
 */
import { GatewayMetrics } from '../../../src/observability/metrics';
import type { ToolCallAuditEvent } from '../../../src/audit/types';

const sources = { ready: async () => true, circuitStates: () => ({}), pendingApprovals: async () => 0, cacheStats: () => ({ hits: 0, misses: 0, entries: 0 }) };

async function series(m: GatewayMetrics, name: string): Promise<Array<{ labels: Record<string, unknown>; value: number; metricName?: string }>> {
  const metric = m.registry.getSingleMetric(name);
  return (await metric!.get()).values as Array<{ labels: Record<string, unknown>; value: number; metricName?: string }>;
}

test('requests: one count per call per (method, dialect, status); client-chosen methods collapse into other', async () => {
  const m = new GatewayMetrics(sources);
  m.observeRequest('tools/list', 'handshake', 200, 0.002);
  m.observeRequest('tools/list', 'handshake', 200, 0.004);
  m.observeRequest('tools/list', 'modern', 200, 0.001);
  m.observeRequest('no/such/one', 'handshake', 200, 0.001);
  m.observeRequest('another/unknown', 'handshake', 200, 0.001);
  m.observeRequest('-', '-', 429, 0);
  const counts = (await series(m, 'interlock_mcp_requests_total')).map((v) => [v.labels.method, v.labels.dialect, v.labels.status, v.value]);
  expect(counts.sort()).toEqual([['-', '-', '429', 1], ['other', 'handshake', '200', 2], ['tools/list', 'handshake', '200', 2], ['tools/list', 'modern', '200', 1]].sort());
  const hist = await series(m, 'interlock_mcp_request_duration_seconds');
  const countOf = (method: string) => hist.find((v) => v.metricName === 'interlock_mcp_request_duration_seconds_count' && v.labels.method === method)?.value;
  const sumOf = (method: string) => hist.find((v) => v.metricName === 'interlock_mcp_request_duration_seconds_sum' && v.labels.method === method)?.value;
  expect([countOf('tools/list'), countOf('other'), countOf('-')]).toEqual([3, 2, 1]);
  expect(sumOf('tools/list')).toBeCloseTo(0.007, 9);
  const le = (method: string, bound: number) => hist.find((v) => v.metricName === 'interlock_mcp_request_duration_seconds_bucket' && v.labels.method === method && v.labels.le === bound)?.value;
  expect([le('tools/list', 0.001), le('tools/list', 0.0025), le('tools/list', 0.005)]).toEqual([1, 2, 3]);
});

test('tool calls: one count per call per (tool, source, decision, reason) from the closed sets', async () => {
  const m = new GatewayMetrics(sources, { tools: () => new Set(['interlock_query']), sources: () => new Set(['chinook']) });
  const ev = (over: Partial<ToolCallAuditEvent>): ToolCallAuditEvent => ({ requestId: 'req_x', time: new Date(0).toISOString(), identityId: 'i', keyId: 'k', tool: 'interlock_query', canonicalTool: 'interlock_query', dialect: 'handshake', protocolVersion: '2025-11-25', decision: 'allowed', reasonCode: null, durationMs: 3, details: { source_id: 'chinook' }, ...over }) as ToolCallAuditEvent;
  m.observeToolCall(ev({}));
  m.observeToolCall(ev({ durationMs: 7 }));
  m.observeToolCall(ev({ decision: 'refused', reasonCode: 'rate_limited', details: { source_id: 'unknown-src' } }));
  m.observeToolCall(ev({ canonicalTool: 'made_up', decision: 'refused', reasonCode: 'not a code', details: {} }));
  const counts = (await series(m, 'interlock_tool_calls_total')).map((v) => [v.labels.tool, v.labels.source, v.labels.decision, v.labels.reason, v.value]);
  expect(counts.sort()).toEqual([['interlock_query', 'chinook', 'allowed', '', 2], ['interlock_query', 'other', 'refused', 'rate_limited', 1], ['other', '', 'refused', 'other', 1]].sort());
  const hist = await series(m, 'interlock_tool_call_duration_seconds');
  const allowed = hist.find((v) => v.metricName === 'interlock_tool_call_duration_seconds_sum' && v.labels.tool === 'interlock_query' && v.labels.decision === 'allowed');
  expect(allowed?.value).toBeCloseTo(0.01, 9);
});

test('counts kept as plain numbers reach the scrape once: each scrape adds what was counted since the last, a refusal at capacity included', async () => {
  const m = new GatewayMetrics(sources, { tools: () => new Set(['interlock_query']), sources: () => new Set(['chinook']) });
  // What a refusal at capacity records (dispatch.ts overCapacityEvent; the endpoint's 429 after 0 s).
  const refusal = { requestId: 'req_x', time: new Date(0).toISOString(), identityId: 'i', keyId: 'k', tool: 'interlock_query', canonicalTool: 'interlock_query', dialect: 'modern', protocolVersion: '2026-07-28', decision: 'refused', reasonCode: 'rate_limited', durationMs: 0, details: { over_capacity: true } } as ToolCallAuditEvent;
  const refuse = (n: number) => {
    for (let i = 0; i < n; i++) {
      m.observeToolCall(refusal);
      m.observeRequest('tools/call', 'modern', 429, 0);
    }
  };
  const line = (text: string, series: string) => text.split('\n').find((l) => l.startsWith(`${series} `));
  const TOOL = 'interlock_tool_calls_total{tool="interlock_query",source="",decision="refused",reason="rate_limited"}';
  const REQ = 'interlock_mcp_requests_total{method="tools/call",dialect="modern",status="429"}';
  const HIST = 'interlock_tool_call_duration_seconds_count{tool="interlock_query",decision="refused"}';
  refuse(3);
  let text = await m.registry.metrics();
  expect([line(text, TOOL), line(text, REQ), line(text, HIST)]).toEqual([`${TOOL} 3`, `${REQ} 3`, `${HIST} 3`]);
  // A scrape with nothing new changes nothing; the next counts add to what was shown.
  text = await m.registry.metrics();
  expect([line(text, TOOL), line(text, REQ)]).toEqual([`${TOOL} 3`, `${REQ} 3`]);
  refuse(2);
  text = await m.registry.metrics();
  expect([line(text, TOOL), line(text, REQ), line(text, HIST)]).toEqual([`${TOOL} 5`, `${REQ} 5`, `${HIST} 5`]);
});

/** The scrape text without process metrics (CPU, memory, event loop: they move on their own). */
async function scrape(m: GatewayMetrics): Promise<string> {
  return (await m.registry.metrics()).split('\n').filter((l) => !l.includes('interlock_process_')).join('\n');
}

test('a refusal at capacity observed by tool name (observeOverCapacity, h29b) scrapes exactly as its event through observeToolCall: series, counts, buckets, sums', async () => {
  const labels = { tools: () => new Set(['interlock_query']), sources: () => new Set(['chinook']) };
  const byEvent = new GatewayMetrics(sources, labels);
  const byName = new GatewayMetrics(sources, labels);
  // The event dispatch.ts overCapacityEvent builds: no source, refused, rate_limited, duration 0.
  const refusal = (tool: string): ToolCallAuditEvent => ({ requestId: 'req_x', time: new Date(0).toISOString(), identityId: 'i', keyId: 'k', tool, canonicalTool: tool, dialect: 'modern', protocolVersion: '2026-07-28', decision: 'refused', reasonCode: 'rate_limited', durationMs: 0, details: { over_capacity: true } }) as ToolCallAuditEvent;
  const served = { requestId: 'req_y', time: new Date(0).toISOString(), identityId: 'i', keyId: 'k', tool: 'interlock_query', canonicalTool: 'interlock_query', dialect: 'modern', protocolVersion: '2026-07-28', decision: 'allowed', reasonCode: null, durationMs: 4, details: { source_id: 'chinook' } } as ToolCallAuditEvent;
  for (const m of [byEvent, byName]) m.observeToolCall(served);
  for (let i = 0; i < 7; i++) {
    byEvent.observeToolCall(refusal('interlock_query'));
    byName.observeOverCapacity('interlock_query');
  }
  // A tool outside the served set is `other` either way.
  byEvent.observeToolCall(refusal('made_up'));
  byName.observeOverCapacity('made_up');
  const a = await scrape(byEvent);
  expect(a).toContain('interlock_tool_calls_total{tool="interlock_query",source="",decision="refused",reason="rate_limited"} 7');
  expect(a).toContain('interlock_tool_call_duration_seconds_bucket{le="0.001",tool="interlock_query",decision="refused"} 7');
  expect(a).toContain('interlock_tool_calls_total{tool="other",source="",decision="refused",reason="rate_limited"} 1');
  expect(await scrape(byName)).toBe(a);
  // And again after the first scrape (pending counts flushed once, the children kept).
  byEvent.observeToolCall(refusal('interlock_query'));
  byName.observeOverCapacity('interlock_query');
  const b = await scrape(byEvent);
  expect(b).toContain('interlock_tool_calls_total{tool="interlock_query",source="",decision="refused",reason="rate_limited"} 8');
  expect(await scrape(byName)).toBe(b);
});

test('observeOverCapacity follows a new served-tools set: a tool that becomes served gets its own series', async () => {
  let served = new Set<string>();
  const m = new GatewayMetrics(sources, { tools: () => served, sources: () => new Set() });
  m.observeOverCapacity('interlock_query');
  served = new Set(['interlock_query']);
  m.observeOverCapacity('interlock_query');
  const text = await scrape(m);
  expect(text).toContain('interlock_tool_calls_total{tool="other",source="",decision="refused",reason="rate_limited"} 1');
  expect(text).toContain('interlock_tool_calls_total{tool="interlock_query",source="",decision="refused",reason="rate_limited"} 1');
});
