/**
 * What admission by capacity adds to a served call's CPU when it refuses nothing (issue 29, h29i:
 * bench 11 at 2× showed admission on ~10–15 % below off with no refusal and the limit never binding).
 * In process, no I/O: the per-call work an admission-on gateway does and an off one does not, with
 * the limit not full (so every check answers "room"): the header check of the early refusal
 * (early-refusal.ts earlyCall), the limiter's three refuseKnown calls (headers, after the body
 * parse, in runToolCall), noteToken with the socket as scope, acquire and the permit's release with
 * its latency sample. BENCH_OPS calls (default 200,000) per round, BENCH_ROUNDS rounds (default 5):
 * ns per call, median and range. Not a timed test.
 *
 * Run: `flock /tmp/bench.lock npx tsx bench/admission-path-cost.ts`.
 */
import { CapacityLimiter, DEFAULT_CAPACITY } from '../src/transport/capacity';
import { earlyCall } from '../src/transport/early-refusal';
import { defaultOriginPolicy } from '../src/transport/http-headers';
import { envInt } from './lib/stats';

const headers: Record<string, string | undefined> = {
  host: '127.0.0.1:8787',
  'content-type': 'application/json',
  accept: 'application/json, text/event-stream',
  authorization: 'Bearer il_live_0123456789abcdefghijklmnopqrstuvwxyz0123456789',
  'mcp-protocol-version': '2026-07-28',
  'mcp-method': 'tools/call',
  'mcp-name': 'interlock_query',
  'content-length': '240',
};

function main(): void {
  const ops = envInt('BENCH_OPS', 200_000);
  const rounds = envInt('BENCH_ROUNDS', 5);
  const policy = defaultOriginPolicy();
  // The limit far above what is held: every check answers "room", as at 2× in bench 11 (limit ≈ 2 × in flight).
  const limiter = new CapacityLimiter({ ...DEFAULT_CAPACITY, initialLimit: 512, minLimit: 512 }, { eventLoopDelayMs: () => 0 });
  const scopes = Array.from({ length: 128 }, () => ({}));
  const caller = { id: 'identity-1', keyId: 'key-1' };
  const held: Array<{ release(excludedMs?: number, dropped?: boolean, poolWaitMs?: number, slotWaitMs?: number): void }> = [];
  const perCall: number[] = [];
  let sink = 0;
  for (let r = 0; r < rounds + 1; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < ops; i++) {
      const scope = scopes[i & 127];
      const call = earlyCall(headers, policy);
      if (call && limiter.refuseKnown(call.apiKey, scope)) sink++;
      if (limiter.refuseKnown(call!.apiKey, scope)) sink++;
      if (limiter.refuseKnown(call!.apiKey)) sink++;
      limiter.noteToken(call!.apiKey, caller, scope);
      const p = limiter.acquire(undefined, caller.id);
      if (p instanceof Promise || 'retryAfterMs' in p) throw new Error('refused');
      held.push(p);
      // 128 in flight, as at 2×: the oldest is released with a source time of 5 ms.
      if (held.length > 128) held.shift()!.release(5, false, 0, 4);
    }
    const ns = Number(process.hrtime.bigint() - t0) / ops;
    if (r > 0) perCall.push(ns); // round 0 warms the JIT
  }
  limiter.close();
  const s = [...perCall].sort((a, b) => a - b);
  console.log(JSON.stringify({ ops, rounds, nsPerCallMedian: Math.round(s[s.length >> 1]), nsPerCallRange: [Math.round(s[0]), Math.round(s[s.length - 1])], sink }));
}

main();
