/**
 * The front door's refusal at capacity taken apart (issue 29 (a), h29b): each piece of the work a
 * refusal does in process, timed in a loop of BENCH_N calls (default 200 000) after a warm-up, ns
 * per call, best of BENCH_REPS (default 5). Built from the gateway's own classes (capacity limiter
 * kept full by a held slot, metrics, aggregate audit, client limits), so what it times is what a
 * refusal runs, less the socket's read and write (bench/11-refusal-cost.ts measures the whole).
 * Not a timed test. Run: `npx tsx bench/refusal-pieces.ts`.
 */
import type { Socket } from 'node:net';
import pino from 'pino';
import { CapacityLimiter, DEFAULT_CAPACITY } from '../src/transport/capacity';
import { GatewayMetrics } from '../src/observability/metrics';
import { KeylessAuditAggregator } from '../src/transport/keyless-audit';
import { bodyReservation, clientAddressKey, ClientLimits } from '../src/transport/client-limits';
import { frameHeaders, frontDoorRefuser } from '../src/transport/front-door';
import { bodyId, earlyCall } from '../src/transport/early-refusal';
import { defaultOriginPolicy } from '../src/transport/http-headers';
import { ToolRegistry, interlockToolBindings } from '../src/tools/registry';
import { modernOverCapacityAnswer, newRequestId, refuseKnownFromHeaders, type DispatchDeps } from '../src/protocol/dispatch';
import type { AuditSink } from '../src/audit/types';
import { envInt } from './lib/stats';

const N = envInt('BENCH_N', 200_000);
const REPS = envInt('BENCH_REPS', 5);
const TOKEN = 'il_live_' + 'x'.repeat(40);
const BODY = JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: 'SELECT track_id, name FROM track WHERE track_id = $1', params: [1] }, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } } });
const BLOCK = ['Host: 127.0.0.1:8787', 'Content-Type: application/json', 'Accept: application/json, text/event-stream', `Authorization: Bearer ${TOKEN}`, `Content-Length: ${Buffer.byteLength(BODY)}`, 'MCP-Protocol-Version: 2026-07-28', 'Mcp-Method: tools/call', 'Mcp-Name: interlock_query'].join('\r\n');

function time(name: string, f: () => unknown): void {
  for (let i = 0; i < N / 10; i++) f();
  let best = Infinity;
  for (let r = 0; r < REPS; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < N; i++) f();
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / N);
  }
  console.log(`${name.padEnd(44)} ${best.toFixed(0).padStart(6)} ns`);
}

const sink: AuditSink = { record: async () => undefined } as unknown as AuditSink;
const capacity = new CapacityLimiter({ ...DEFAULT_CAPACITY, minLimit: 1, maxLimit: 1, initialLimit: 1, queueSize: 0 }, { eventLoopDelayMs: () => 0 });
capacity.noteToken(TOKEN, { id: 'ident-1', keyId: 'key-1' });
const held = capacity.acquire(undefined, 'someone-else');
void held;
const metrics = new GatewayMetrics({ ready: async () => true, circuitStates: () => ({}), pendingApprovals: async () => 0, cacheStats: () => ({ hits: 0, misses: 0, entries: 0 }) }, { tools: () => new Set(['interlock_query']), sources: () => new Set(['chinook']) });
const keylessAudit = new KeylessAuditAggregator(sink, { flushEveryMs: 0 });
const deps = {
  tools: new ToolRegistry(interlockToolBindings({})),
  identityResolver: { rejectsByFormat: () => false },
  logger: pino({ level: 'silent' }),
  capacity,
  keylessAudit,
  clientLimits: new ClientLimits(),
  observe: (e: Parameters<GatewayMetrics['observeToolCall']>[0]) => metrics.observeToolCall(e),
  // BENCH_OLD_OBSERVE=1: the refusal observed through its event (observeToolCall), as before h29b.
  observeOverCapacity: process.env.BENCH_OLD_OBSERVE === '1' ? undefined : (tool: string) => metrics.observeOverCapacity(tool),
} as unknown as DispatchDeps;
const policy = defaultOriginPolicy();
const refuser = frontDoorRefuser(deps, policy, (m, d, s, sec) => metrics.observeRequest(m, d, s, sec), 1 << 20)!;
const socket = { remoteAddress: '127.0.0.1' } as unknown as Socket;
const h = Object.freeze(frameHeaders(BLOCK)!);
const call = earlyCall(h, policy)!;
const bodyBuf = Buffer.from(BODY);

time('frameHeaders', () => frameHeaders(BLOCK));
time('earlyCall', () => earlyCall(h, policy));
time('capacity.refuseKnown', () => capacity.refuseKnown(TOKEN, socket));
time('newRequestId', () => newRequestId());
time('metrics.observeToolCall', () => metrics.observeToolCall({ requestId: 'r', time: 't', identityId: 'i', keyId: 'k', tool: 'interlock_query', canonicalTool: 'interlock_query', dialect: 'modern', protocolVersion: '2026-07-28', decision: 'refused', reasonCode: 'rate_limited', durationMs: 0, details: { over_capacity: true } }));
time('metrics.observeOverCapacity', () => metrics.observeOverCapacity('interlock_query'));
time('metrics.observeRequest', () => metrics.observeRequest('tools/call', 'modern', 429, 0));
time('keylessAudit.note', () => keylessAudit.note('127.0.0.1', { reason: 'rate_limited', tool: 'interlock_query', route: 'mcp', dialect: 'modern', protocolVersion: '2026-07-28', requestId: 'req_x' }));
time('bodyId (JSON.parse)', () => bodyId(bodyBuf.toString('utf8')));
time('modernOverCapacityAnswer', () => modernOverCapacityAnswer(call.version, 7, 'req_abcdefabcdefabcdef', 1000));
const limits = new ClientLimits();
time('clientAddressKey', () => clientAddressKey(socket.remoteAddress));
time('bodyReservation', () => bodyReservation(h, 1 << 20));
time('clientLimits.openBodyRead + release', () => { const o = limits.openBodyRead('127.0.0.1', 400); if (o.ok) o.release(); });
time('refuseKnownFromHeaders', () => refuseKnownFromHeaders(deps, { ...call, clientAddress: '127.0.0.1', scope: socket }));
time('refuser.take (all bookkeeping)', () => refuser.take(h, socket)?.release?.());
const r = refuser.take(h, socket)!;
time('refuser.answer (id, text, observe)', () => refuser.answer(r, bodyBuf, 5));
time('whole: frame + take + answer', () => {
  const hh = process.env.BENCH_OLD_OBSERVE === '1' ? frameHeaders(BLOCK)! : h;
  const rr = refuser.take(hh, socket)!;
  rr.release?.();
  return refuser.answer(rr, bodyBuf, 5);
});
capacity.close();
keylessAudit.stop();
