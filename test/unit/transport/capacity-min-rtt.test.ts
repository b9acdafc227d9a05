/**
 * Admission by capacity, controller `min_rtt` (issue 29 item 1; src/transport/capacity.ts): Envoy's
 * gradient controller driven by synthetic latency sequences on an injected clock. Every trajectory
 * below is exact (computed by hand from the module's rules: gradient = clamp(tolerance × minRTT /
 * sampled, 0.5, 2), limit ← limit × gradient + √(limit × gradient), one update per 100 ms).
 */
import { CapacityLimiter, DEFAULT_CAPACITY, isCapacityRefusal, MIN_RTT_AT_FLOOR, MIN_RTT_WINDOW_MAX_MS, nearestRank, UPDATE_INTERVAL_MS, type CapacityPermit, type CapacitySettings } from '../../../src/transport/capacity';
import { capacityLimiter } from '../../../src/gateway';
import { DEFAULT_CONFIG, loadConfig } from '../../../src/control/config';

let clock = 0;
const limiters: CapacityLimiter[] = [];
afterEach(() => {
  for (const l of limiters.splice(0)) l.close();
});

/** A min_rtt limiter on the test clock: no queue (acquire answers synchronously), no jitter, no outside pressure unless `lag` says so. */
function limiter(over: Partial<CapacitySettings> = {}, lag: () => number = () => 0): CapacityLimiter {
  const l = new CapacityLimiter(
    {
      ...DEFAULT_CAPACITY,
      controller: 'min_rtt',
      initialLimit: 16,
      minLimit: 4,
      maxLimit: 512,
      queueSize: 0,
      tolerance: 1.5,
      minRttSamples: 4,
      latencyPercentile: 50,
      minRttIntervalMs: 1000,
      ...over,
    },
    { now: () => clock, eventLoopDelayMs: lag, random: () => 0 },
  );
  limiters.push(l);
  return l;
}

/**
 * One closed-loop round: `callers` try to start a call at once (those beyond the limit are refused),
 * the admitted ones all take `latency(n)` ms (n = admitted) and finish together. Returns n.
 */
function round(l: CapacityLimiter, callers: number, latency: (n: number) => number): number {
  const held: CapacityPermit[] = [];
  for (let i = 0; i < callers; i++) {
    const p = l.acquire();
    if (p instanceof Promise) throw new Error('queue_size 0: no call may wait');
    if (!isCapacityRefusal(p)) held.push(p);
  }
  clock += latency(held.length);
  for (const p of held) p.release();
  return held.length;
}

/** A replica that serves 8 calls at once in 10 ms; beyond 8 in flight each call waits its turn (latency grows with the calls in flight). */
const replica = (n: number) => 10 * Math.max(1, n / 8);

beforeEach(() => {
  clock = 1_000_000;
});

test('nearest-rank percentile', () => {
  expect(nearestRank([30, 10, 20, 40], 50)).toBe(20);
  expect(nearestRank([30, 10, 20, 40], 90)).toBe(40);
  expect(nearestRank([5], 99)).toBe(5);
  expect(nearestRank([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90)).toBe(9);
});

/** Runs `rounds` rounds of `callers` against `latency`; per round: admitted calls, snapshot limit (2 decimals), measuring, minRTT. */
function trajectory(l: CapacityLimiter, rounds: number, callers: number, latency: (n: number) => number): string[] {
  const out: string[] = [];
  for (let i = 0; i < rounds; i++) {
    const n = round(l, callers, latency);
    const s = l.snapshot();
    out.push(`${n} ${s.limit}${s.measuring ? ' measuring' : ''} ${s.minRtt}`);
  }
  return out;
}

test('the first window measures minRTT at min_limit; then the limit settles where the sampled latency is near tolerance × minRTT, where long_average drifts up with the load', () => {
  const l = limiter();
  expect(l.limit).toBe(4);
  expect(l.snapshot()).toMatchObject({
    limit: 16,
    measuring: true,
    minRtt: null,
  });
  // 64 callers against a replica that serves 8 in 10 ms. Round 1: 4 admitted (the window), 10 ms each: minRTT 10,
  // the limit back at 16. The first update (t = 110 ms) samples 20 ms (16 in flight): gradient 1.5 × 10 / 20 = 0.75,
  // 16 × 0.75 + √12 = 15.46; then 15 in flight take 18.75 ms: gradient 0.8, 15.46 × 0.8 + √12.37 = 15.89.
  expect(trajectory(l, 12, 64, replica)).toEqual([
    '4 16 10',
    '16 16 10',
    '16 16 10',
    '16 16 10',
    '16 16 10',
    '16 15.46 10',
    '15 15.46 10',
    '15 15.46 10',
    '15 15.46 10',
    '15 15.46 10',
    '15 15.46 10',
    '15 15.89 10',
  ]);
  // The same callers and replica under long_average (same tolerance): its long-term average follows the
  // queueing up (the drift diagnosed in bench/RESULTS.md, h29r), so it admits every caller at 8 × the latency.
  const a = new CapacityLimiter(
    {
      ...DEFAULT_CAPACITY,
      initialLimit: 16,
      minLimit: 4,
      maxLimit: 512,
      queueSize: 0,
      tolerance: 1.5,
    },
    { now: () => clock, eventLoopDelayMs: () => 0 },
  );
  limiters.push(a);
  for (let i = 0; i < 400; i++) round(a, 64, replica);
  expect(a.limit).toBeGreaterThanOrEqual(64);
  expect(a.snapshot().shortRtt).toBe(80);
  // min_rtt over as long: never above 17 in flight, so no call slower than 2.125 × minRTT.
  const seen = new Set<number>();
  for (let i = 0; i < 400; i++) seen.add(round(l, 64, replica));
  expect(Math.max(...seen)).toBeLessThanOrEqual(17);
});

test('every min_rtt_interval_ms a window measures minRTT again at min_limit: calls admitted before it do not count, and the gradient limit applies again after it', () => {
  const l = limiter();
  const start = clock;
  while (!l.snapshot().measuring || clock === start) round(l, 64, replica);
  // The first window ended at 10 ms; the next opens at the first call finishing 1,000 ms later.
  expect(clock - start).toBe(1010);
  expect(l.limit).toBe(4);
  expect(l.snapshot()).toMatchObject({
    limit: 15.77,
    measuring: true,
    minRtt: 10,
  });
  // The 14 other calls of that round finished in the window but were admitted before it (18.75 ms each): they
  // did not measure minRTT. The window's own 4 calls take 12 ms, the 4th closes it: minRTT 12, the limit 15.77 again.
  expect(trajectory(l, 2, 64, () => 12)).toEqual(['4 15.77 12', '15 15.77 12']);
});

test('a window that gets no call of its own for MIN_RTT_WINDOW_MAX_MS (slow calls admitted before it hold the slots) is given up: the old minRTT and the gradient limit apply again', () => {
  const l = limiter();
  trajectory(l, 12, 64, replica);
  // 15 calls in flight; 14 are slow statements that stay. The 15th finishes after the interval: a window opens.
  const held = Array.from({ length: 15 }, () => l.acquire() as CapacityPermit);
  clock += 1000;
  held[14].release();
  expect(l.snapshot()).toMatchObject({ limit: 15.89, measuring: true, minRtt: 10 });
  // 14 in flight ≥ min_limit: the window admits nothing, so it has no sample of its own.
  expect(isCapacityRefusal(l.acquire() as CapacityPermit)).toBe(true);
  clock += MIN_RTT_WINDOW_MAX_MS - 1;
  expect(isCapacityRefusal(l.acquire() as CapacityPermit)).toBe(true);
  expect(l.snapshot().measuring).toBe(true);
  // 1 s after it opened: given up, the gradient's limit (15) admits again.
  clock += 1;
  expect(isCapacityRefusal(l.acquire() as CapacityPermit)).toBe(false);
  expect(l.snapshot()).toMatchObject({ limit: 15.89, measuring: false, minRtt: 10, inflight: 15 });
  expect(l.limit).toBe(15);
});

test('a replica that becomes 4 × slower takes the limit to min_limit; after 5 updates there minRTT is measured again at once and the limit recovers', () => {
  // No periodic window in this test (interval of an hour): only the floor rule measures again.
  const l = limiter({ minRttIntervalMs: 3_600_000 });
  expect(trajectory(l, 12, 64, replica).at(-1)).toBe('15 15.89 10');
  expect(trajectory(l, 36, 64, (n: number) => 4 * replica(n))).toEqual([
    // 15 in flight now take 75 ms: gradient 1.5 × 10 / 75 clamped to 0.5, 15.89 × 0.5 + √7.95 = 10.76; and so on down.
    '15 15.89 10',
    '15 10.76 10',
    '10 10.76 10',
    '10 7.7 10',
    '7 7.7 10',
    '7 7.7 10',
    '7 5.81 10',
    '5 5.81 10',
    '5 5.81 10',
    '5 4.61 10',
    '4 4.61 10',
    '4 4.61 10',
    // At min_limit 4 (4 × 0.5 + √2 < 4): one update, then 4 more in a row (100 ms each, 40 ms calls) …
    ...Array<string>(12).fill('4 4 10'),
    // … the 5th opens a window at once; its 4 calls measure minRTT 40.
    '4 4 measuring 10',
    '4 4 40',
    '4 4 40',
    '4 4 40',
    // gradient 1.5 × 40 / 40 = 1.5: 4 × 1.5 + √6 = 8.45; then 8.45 × 1.5 + √12.67 = 16.23; then 80 ms at 16: 0.75.
    '4 8.45 40',
    '8 8.45 40',
    '8 8.45 40',
    '8 16.23 40',
    '16 16.23 40',
    '16 15.67 40',
    '15 15.67 40',
    '15 16.07 40',
  ]);
});

test('the limit is not raised while fewer than half of it are in flight, and pressure lowers it by 10 % per update instead of the gradient', () => {
  let lag = 0;
  const l = limiter({}, () => lag);
  // 4 callers at 10 ms after the window: gradient 1.5 would raise it, but 4 + 1 < 16 / 2: held.
  expect(trajectory(l, 13, 4, () => 10).at(-1)).toBe('4 16 10');
  lag = 500;
  // Event-loop delay past max_event_loop_delay_ms: each 100 ms update takes 0.9 × the limit, whatever the latency says.
  expect(trajectory(l, 30, 64, replica)).toEqual([
    '16 16 10',
    '16 16 10',
    '16 16 10',
    '16 14.4 10',
    '14 14.4 10',
    '14 14.4 10',
    '14 14.4 10',
    '14 14.4 10',
    '14 14.4 10',
    '14 12.96 10',
    '12 12.96 10',
    '12 12.96 10',
    '12 12.96 10',
    '12 12.96 10',
    '12 12.96 10',
    '12 12.96 10',
    '12 11.66 10',
    '11 11.66 10',
    '11 11.66 10',
    '11 11.66 10',
    '11 11.66 10',
    '11 11.66 10',
    '11 11.66 10',
    '11 11.66 10',
    '11 10.5 10',
    '10 10.5 10',
    '10 10.5 10',
    '10 10.5 10',
    '10 10.5 10',
    '10 10.5 10',
  ]);
});

test('a drop caps the limit as with long_average, and the gradient may not raise it above that ceiling', () => {
  const l = limiter();
  trajectory(l, 12, 64, replica);
  const held = Array.from({ length: 10 }, () => l.acquire() as CapacityPermit);
  held[0].release(0, true);
  // 0.9 × the 10 that were in flight.
  expect(l.snapshot().limit).toBe(9);
  for (const p of held.slice(1)) p.release();
  expect(trajectory(l, 20, 64, () => 10).every((t) => t.split(' ')[1] === '9')).toBe(true);
});

test('fair share inside a window: an identity holding no slot borrows one while another holds the pinned limit, and a borrowed call does not measure minRTT', () => {
  const l = limiter({ queueSize: 4 });
  const a = Array.from({ length: 4 }, () => l.acquire(undefined, 'a') as CapacityPermit);
  expect(l.inflight).toBe(4);
  const b = l.acquire(undefined, 'b');
  expect(isCapacityRefusal(b as CapacityPermit)).toBe(false);
  expect(l.borrowed).toBe(1);
  clock += 50;
  (b as CapacityPermit).release();
  for (const p of a.slice(0, 3)) p.release();
  expect(l.snapshot()).toMatchObject({ measuring: true, minRtt: null });
  a[3].release();
  expect(l.snapshot()).toMatchObject({ measuring: false, minRtt: 50 });
});

test('sample_source_time: a call\'s source time (release excludedMs) counts in its sample only when set', () => {
  const run = (sampleSourceTime: boolean) => {
    const l = limiter({ sampleSourceTime });
    // The first window's 4 calls take 10 ms, 8 of them in source reads: minRTT 2 ms without source time, 10 ms with it.
    const held = Array.from({ length: 4 }, () => l.acquire() as CapacityPermit);
    clock += 10;
    for (const p of held) p.release(8);
    return l.snapshot().minRtt;
  };
  expect(run(false)).toBe(2);
  expect(run(true)).toBe(10);
});

test('sample_pool_wait: of a call\'s source time only its wait for the shared pool (release poolWaitMs) counts in its sample', () => {
  const run = (over: Partial<CapacitySettings>) => {
    const l = limiter(over);
    // The first window's 4 calls take 10 ms, 8 of them in source reads, 3 of those waiting for a shared pool connection.
    const held = Array.from({ length: 4 }, () => l.acquire() as CapacityPermit);
    clock += 10;
    for (const p of held) p.release(8, false, 3);
    return l.snapshot().minRtt;
  };
  expect(run({ samplePoolWait: false })).toBe(2);
  expect(run({ samplePoolWait: true })).toBe(5);
  expect(run({ samplePoolWait: true, sampleSourceTime: true })).toBe(10);
});

test('config: admission.controller (INTERLOCK_ADMISSION_CONTROLLER or the file) reaches the limiter; an unknown controller is refused', () => {
  const cfg = loadConfig({
    env: { INTERLOCK_ADMISSION_CONTROLLER: 'min_rtt' },
  });
  expect(cfg.admission).toMatchObject({
    controller: 'min_rtt',
    min_rtt_interval_ms: 10_000,
    min_rtt_samples: 25,
    latency_percentile: 90,
  });
  const l = capacityLimiter(cfg.admission!)!;
  limiters.push(l);
  expect(l.settings).toMatchObject({
    controller: 'min_rtt',
    minRttIntervalMs: 10_000,
    minRttSamples: 25,
    latencyPercentile: 90,
  });
  expect(l.limit).toBe(4);
  expect(l.snapshot().measuring).toBe(true);
  const d = capacityLimiter(DEFAULT_CONFIG.admission!)!;
  limiters.push(d);
  expect(d.limit).toBe(16);
  expect(d.snapshot()).toMatchObject({ measuring: false, minRtt: null });
  expect(() => loadConfig({ env: { INTERLOCK_ADMISSION_CONTROLLER: 'vegas' } })).toThrow(/invalid configuration/);
  expect(() =>
    loadConfig({
      env: {},
      overrides: {
        admission: { ...DEFAULT_CONFIG.admission!, latency_percentile: 0 },
      },
    } as never),
  ).toThrow(/invalid configuration/);
  expect(MIN_RTT_AT_FLOOR).toBe(5);
  expect(UPDATE_INTERVAL_MS).toBe(100);
});
