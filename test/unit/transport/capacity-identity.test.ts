/**
 * Admission by capacity's per-identity limit (issue 29 item 1, h29i; src/transport/capacity.ts
 * "Per-identity limit"): an AIMD limit per identity whose signal is the identity's wait for its own
 * source slots (release's slotWaitMs), which the replica's limit leaves out. Injected clock, exact
 * trajectories.
 */
import { CapacityLimiter, DECREASE_STEP_MS, DEFAULT_CAPACITY, IDENTITY_LIMITS_MAX, isCapacityRefusal, type CapacityPermit, type CapacitySettings } from '../../../src/transport/capacity';
import { limiters, permit } from '../../helpers/capacity-unit';

let clock = 0;
function limiter(over: Partial<CapacitySettings> = {}): CapacityLimiter {
  const l = new CapacityLimiter({ ...DEFAULT_CAPACITY, identityLimit: true, identitySlotWaitMs: 5, ...over }, { now: () => clock, eventLoopDelayMs: () => 0 });
  limiters.push(l);
  return l;
}

function refused(x: unknown): number {
  if (x instanceof Promise || !isCapacityRefusal(x as CapacityPermit)) throw new Error('expected a refusal at once');
  return (x as { retryAfterMs: number }).retryAfterMs;
}
const hold = (l: CapacityLimiter, key: string, n: number) => Array.from({ length: n }, () => permit(l.acquire(undefined, key)));

test('off by default: DEFAULT_CAPACITY.identityLimit is false, and an identity waiting long for its own slots is never limited', () => {
  expect(DEFAULT_CAPACITY.identityLimit).toBe(false);
  expect(DEFAULT_CAPACITY.identitySlotWaitMs).toBe(5);
  const l = limiter({ identityLimit: false, initialLimit: 20, minLimit: 20, maxLimit: 20 });
  const held = hold(l, 'a', 10);
  for (const p of held.splice(0, 5)) p.release(500, false, 0, 500);
  hold(l, 'a', 15);
  expect(l.snapshot()).toMatchObject({ identityLimited: 0, identityLowest: null, identityRefused: 0, refused: 0, inflight: 20 });
});

test('an identity that waits for its own slots gets a limit of its own: keep × its calls in flight (keep = 1 − average own-slot wait ÷ average latency, 0.5–0.9), at most once per DECREASE_STEP_MS and only by calls admitted after the last decrease; beyond it refused at once, other identities untouched', () => {
  clock = 0;
  const l = limiter({ initialLimit: 20, minLimit: 20, maxLimit: 20 });
  const a = hold(l, 'a', 10);
  clock = 100;
  // A wait at the threshold (5 ms, not above it) teaches nothing.
  a.pop()!.release(5, false, 0, 5);
  expect(l.snapshot().identityLimited).toBe(0);
  a.push(permit(l.acquire(undefined, 'a'))); // admitted at 100
  // 50 of its 100 ms waiting for its own slot: entry made at its calls in flight (10), × 0.5 = 5.
  a.shift()!.release(50, false, 0, 50);
  expect(l.snapshot()).toMatchObject({ identityLimited: 1, identityLowest: 5 });
  // It holds 9 ≥ 5: refused at once (1 s hint), counted both as refused and as identity-refused.
  expect(refused(l.acquire(undefined, 'a'))).toBe(1000);
  expect(l.snapshot()).toMatchObject({ refused: 1, identityRefused: 1 });
  // Another identity is admitted (the replica has room): 11 more in flight.
  const b = hold(l, 'b', 11);
  expect(l.inflight).toBe(20);
  // Calls admitted before the decrease (at 0), waiting long, do not lower it again, even a step later.
  clock = 250;
  for (let i = 0; i < 5; i++) a.shift()!.release(200, false, 0, 200);
  expect(l.snapshot().identityLowest).toBe(5);
  // The one admitted at 100 (not before the decrease made at 100) counts. Fast averages (×0.1 per
  // call) of own-slot wait and latency are now 102.29 and 160.29 ms: 64 % of its calls queue, keep
  // clamped to 0.5; min(5, 3 in flight + 1) × 0.5 = 2.
  a.pop()!.release(20, false, 0, 20);
  expect(l.snapshot().identityLowest).toBe(2);
  // It holds 3 ≥ 2: refused.
  expect(refused(l.acquire(undefined, 'a'))).toBe(1000);
  // Calls that did not wait raise it by 1 / limit (holding at least half of it), whatever the average: 2.5, 2.9.
  a.pop()!.release(0, false, 0, 0);
  a.pop()!.release(0, false, 0, 0);
  expect(l.snapshot().identityLowest).toBe(2.9);
  // A call admitted now that waits within the same step (50 ms after the decrease): not lowered.
  const c = permit(l.acquire(undefined, 'a')); // admitted at 250
  clock = 300;
  c.release(40, false, 0, 40);
  expect(l.snapshot().identityLowest).toBe(2.9);
  // A step later, 6 of 100 ms waiting (above the threshold, the average too): averages 71.31 and
  // 158.14 ms, keep 0.549; min(2.9, 1 + 1) × 0.549 = 1.1.
  const d = permit(l.acquire(undefined, 'a')); // admitted at 300
  clock = 400;
  d.release(6, false, 0, 6);
  expect(l.snapshot().identityLowest).toBe(1.1);
  // b is never refused and gets no limit; the replica's limit is unchanged.
  for (const p of b) p.release();
  expect(permit(l.acquire(undefined, 'b'))).toBeDefined();
  expect(l.snapshot()).toMatchObject({ identityLimited: 1, identityRefused: 2, refused: 2, limit: 20 });
});

test('recovery: a call that did not wait raises the identity\'s limit by 1 / limit while it holds at least half its limit, and loses its entry at the replica\'s limit', () => {
  clock = 0;
  const l = limiter({ initialLimit: 6, minLimit: 6, maxLimit: 6 });
  const a = hold(l, 'a', 4);
  clock = 60;
  // Entry at 4, lowered to 3.6 (6 of 60 ms waiting: keep 0.9; waitAvg 6 ms).
  a.pop()!.release(6, false, 0, 6);
  expect(l.snapshot().identityLowest).toBe(3.6);
  // A call that did not wait raises it by 1 / limit while the identity holds at least half its
  // limit (2 + 1 ≥ 1.8: 3.88; 1 + 1 ≥ 1.94: 4.14), though the average wait (5.4, 4.86) lags.
  a.pop()!.release(0, false, 0, 0);
  expect(l.snapshot().identityLowest).toBe(3.88);
  a.pop()!.release(0, false, 0, 0);
  expect(l.snapshot().identityLowest).toBe(4.14);
  // Holding 0 (0 + 1 < 4.14 / 2): a call's release does not raise it.
  a.pop()!.release(0, false, 0, 0);
  permit(l.acquire(undefined, 'a')).release(0, false, 0, 0);
  expect(l.snapshot().identityLowest).toBe(4.14);
  // Holding its whole limit, one call finishing at a time: 4.14 + 1 / 4.14 = 4.38, 4.61, … ≥ 6 (the replica's limit): the entry goes.
  const trajectory: Array<number | null> = [];
  for (let i = 0; i < 10; i++) {
    const lim = l.snapshot().identityLowest!;
    while (a.length < Math.floor(lim)) a.push(permit(l.acquire(undefined, 'a')));
    expect(refused(l.acquire(undefined, 'a'))).toBe(1000);
    a.pop()!.release(0, false, 0, 0);
    trajectory.push(l.snapshot().identityLowest);
  }
  expect(trajectory).toEqual([4.38, 4.61, 4.82, 5.03, 5.23, 5.42, 5.6, 5.78, 5.96, null]);
  expect(l.snapshot().identityLimited).toBe(0);
  // No limit of its own now: it may take the replica's 6.
  hold(l, 'a', 6 - a.length);
  expect(l.inflight).toBe(6);
});

test('a dropped call (refused behind admission for lack of a source slot) gives its identity a limit even without a wait', () => {
  const l = limiter({ initialLimit: 20, minLimit: 20, maxLimit: 20 });
  const a = hold(l, 'a', 5);
  a.pop()!.release(0, true, 0, 0);
  expect(l.snapshot()).toMatchObject({ identityLimited: 1, identityLowest: 4.5 });
  expect(refused(l.acquire(undefined, 'a'))).toBe(1000);
});

test('the replica\'s limit and its sample never see the own-slot wait: the same trajectory with and without identity limits', () => {
  const run = (identityLimit: boolean) => {
    clock = 0;
    const l = limiter({ identityLimit, initialLimit: 40, minLimit: 4, maxLimit: 512, tolerance: 1 });
    const limits: number[] = [];
    for (let r = 0; r < 30; r++) {
      // One identity per slot (each holds one call at a time), so identity limits never refuse here.
      const held = Array.from({ length: Math.min(30, l.limit) }, (_, i) => permit(l.acquire(undefined, `k${i}`)));
      clock += 10 + r;
      for (const p of held) p.release(r * 5, false, 0, r * 5);
      limits.push(l.snapshot().limit);
    }
    expect(l.snapshot().identityLimited).toBe(identityLimit ? 30 : 0);
    return limits;
  };
  const without = run(false);
  expect(new Set(without).size).toBeGreaterThan(5);
  expect(run(true)).toEqual(without);
});

test('refuseKnown refuses a known token of an identity at its own limit before identity work, even while the replica has room; another identity\'s token is not refused', () => {
  const l = limiter({ initialLimit: 20, minLimit: 20, maxLimit: 20 });
  l.noteToken('tok-a', { id: 'a', keyId: 'ka' });
  l.noteToken('tok-b', { id: 'b', keyId: 'kb' });
  expect(l.refuseKnown('tok-a')).toBeNull();
  const a = hold(l, 'a', 3);
  a.pop()!.release(20, false, 0, 20);
  // Limit 1.5 (keep 0.5): holding 2, refused.
  expect(l.refuseKnown('tok-a')).toEqual({ refusal: { retryAfterMs: 1000 }, caller: { id: 'a', keyId: 'ka' } });
  expect(l.refuseKnown('tok-b')).toBeNull();
  expect(l.refuseKnown('unknown')).toBeNull();
  expect(l.snapshot()).toMatchObject({ refused: 1, identityRefused: 1, inflight: 2 });
});

test('memory is bounded: at most IDENTITY_LIMITS_MAX identities keep a limit; past it the oldest entry goes', () => {
  const l = limiter({ initialLimit: 20, minLimit: 20, maxLimit: 20 });
  for (let i = 0; i <= IDENTITY_LIMITS_MAX; i++) {
    const key = `id-${i}`;
    const h = hold(l, key, 2);
    h[1].release();
    h[0].release(50, false, 0, 50); // entry at 1 → 1 (0 ms latency: keep 0.5, the floor 1): it may hold 1
  }
  expect(l.snapshot().identityLimited).toBe(IDENTITY_LIMITS_MAX);
  // id-0's entry went: it may hold 2 again; id-1 keeps its limit (one at a time).
  hold(l, 'id-0', 2);
  permit(l.acquire(undefined, 'id-1'));
  expect(refused(l.acquire(undefined, 'id-1'))).toBe(1000);
});
