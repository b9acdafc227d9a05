/** Admission by capacity (issue 29 item 1): the adaptive limit, its queue and its refusals. */
import { CapacityLimiter, DECREASE_STEP_MS, DEFAULT_CAPACITY, isCapacityRefusal, PRESSURE_STEP_MS, type CapacityPermit, type CapacitySettings } from '../../../src/transport/capacity';
import { limiters, permit } from '../../helpers/capacity-unit';
import { capacityLimiter } from '../../../src/gateway';
import { DEFAULT_CONFIG } from '../../../src/control/config';

let clock = 0;
function limiter(over: Partial<CapacitySettings> = {}, signals: { lag?: () => number; audit?: () => number } = {}): CapacityLimiter {
  const l = new CapacityLimiter({ ...DEFAULT_CAPACITY, ...over }, { now: () => clock, eventLoopDelayMs: signals.lag ?? (() => 0), auditQueueDepth: signals.audit });
  limiters.push(l);
  return l;
}


/** Runs `n` calls one after another, each taking `ms`, with `parallel` in flight. */
function drive(l: CapacityLimiter, rounds: number, ms: number, parallel: number): void {
  for (let r = 0; r < rounds; r++) {
    const held: CapacityPermit[] = [];
    for (let i = 0; i < Math.min(parallel, l.limit); i++) held.push(permit(l.acquire()));
    clock += ms;
    for (const p of held) p.release();
  }
}

test('admits up to the limit at once, queues up to queue_size, and refuses the rest synchronously with a retry hint of whole seconds', () => {
  const l = limiter({ initialLimit: 3, minLimit: 3, maxLimit: 3, queueSize: 2 });
  const held = [permit(l.acquire()), permit(l.acquire()), permit(l.acquire())];
  expect(l.inflight).toBe(3);
  const q1 = l.acquire();
  const q2 = l.acquire();
  expect(q1).toBeInstanceOf(Promise);
  expect(q2).toBeInstanceOf(Promise);
  expect(l.queued).toBe(2);
  const refused = l.acquire();
  expect(refused).not.toBeInstanceOf(Promise);
  expect(isCapacityRefusal(refused as CapacityPermit)).toBe(true);
  expect((refused as { retryAfterMs: number }).retryAfterMs).toBe(1000);
  expect(l.refused).toBe(1);
  held[0].release();
  expect(l.queued).toBe(1);
  expect(l.inflight).toBe(3);
  return (q1 as Promise<CapacityPermit>).then((p) => {
    expect(isCapacityRefusal(p)).toBe(false);
    p.release();
    p.release(); // a second release is ignored
    expect(l.inflight).toBe(3);
  });
});

test('a queued call waits at most queue_timeout_ms, and an aborted one leaves the queue at once; both are refused', async () => {
  const l = limiter({ initialLimit: 1, minLimit: 1, maxLimit: 1, queueSize: 4, queueTimeoutMs: 30 });
  permit(l.acquire());
  const timedOut = l.acquire() as Promise<unknown>;
  const ac = new AbortController();
  const aborted = l.acquire(ac.signal) as Promise<unknown>;
  ac.abort();
  expect(isCapacityRefusal((await aborted) as CapacityPermit)).toBe(true);
  expect(l.queued).toBe(1);
  const started = Date.now();
  expect(isCapacityRefusal((await timedOut) as CapacityPermit)).toBe(true);
  expect(Date.now() - started).toBeLessThan(1000);
  expect(l.queued).toBe(0);
});

test('the limit rises while calls keep their latency and the limit is used, and stays put while the load is below half of it', () => {
  const l = limiter({ initialLimit: 10, minLimit: 2, maxLimit: 100 });
  drive(l, 20, 10, 1);
  expect(l.limit).toBe(10);
  drive(l, 40, 10, 1000);
  expect(l.limit).toBeGreaterThan(20);
  expect(l.limit).toBeLessThanOrEqual(100);
});

test('the limit falls when latency climbs well past the long-term latency, never below min_limit', () => {
  const l = limiter({ initialLimit: 64, minLimit: 4, maxLimit: 512, tolerance: 1.5 });
  drive(l, 150, 10, 1000);
  const before = l.limit;
  drive(l, 30, 200, 1000);
  expect(l.limit).toBeLessThan(before / 2);
  drive(l, 60, 2000, 1000);
  expect(l.limit).toBeGreaterThanOrEqual(4);
});

test('time spent in source reads is left out of the sample: slow statements do not lower the limit, slow gateway work does', () => {
  /** Like drive, but each call spent `sourceMs` of its `ms` in source reads (release(excludedMs)). */
  const driveSource = (l: CapacityLimiter, rounds: number, ms: number, sourceMs: number) => {
    for (let r = 0; r < rounds; r++) {
      const held: CapacityPermit[] = [];
      for (let i = 0; i < l.limit; i++) held.push(permit(l.acquire()));
      clock += ms;
      for (const p of held) p.release(sourceMs);
    }
  };
  const bySource = limiter({ initialLimit: 64, minLimit: 4, maxLimit: 512, tolerance: 1.5 });
  driveSource(bySource, 150, 10, 5);
  const before = bySource.limit;
  // Calls now take 200 ms, all of it in the source (an identity's slow statements): the limit holds.
  driveSource(bySource, 10, 200, 195);
  expect(bySource.limit).toBeGreaterThanOrEqual(before);
  // The same 200 ms spent in the gateway (no source time) lowers it, as before (10 % per DECREASE_STEP_MS).
  const byGateway = limiter({ initialLimit: 64, minLimit: 4, maxLimit: 512, tolerance: 1.5 });
  driveSource(byGateway, 150, 10, 5);
  const start = byGateway.limit;
  driveSource(byGateway, 10, 200, 0);
  expect(byGateway.limit).toBeLessThan(start / 2);
});

test('samplePoolWait: the wait for a shared source-pool connection (release poolWaitMs) stays in the sample, the rest of the source time is left out (issue 29, h29q)', () => {
  /** Limit 100 with a long-term latency of 10 ms (30 calls one at a time), then `rounds` rounds: 60 calls finish together after 101 ms (a new decrease step each), 99 ms of it in source reads, `poolMs` of those waiting for the shared pool. */
  const run = (over: Partial<CapacitySettings>, poolMs: number, rounds: number) => {
    const l = limiter({ initialLimit: 100, minLimit: 4, maxLimit: 512, tolerance: 1, ...over });
    drive(l, 30, 10, 1);
    expect(l.limit).toBe(100);
    const limits: number[] = [];
    for (let r = 0; r < rounds; r++) {
      const held = Array.from({ length: 60 }, () => permit(l.acquire()));
      clock += 101;
      for (const p of held) p.release(99, false, poolMs);
      limits.push(Math.round(l.limit * 1000) / 1000);
    }
    return limits;
  };
  // Counted: samples of 92 ms (101 − (99 − 90)) against 10 ms; each step lowers the limit to its floor, 0.9 × its start (90, 81, 72.9, 65.61; `limit` is whole calls).
  expect(run({ samplePoolWait: true }, 90, 4)).toEqual([90, 81, 72, 65]);
  // The same calls without samplePoolWait: 2 ms samples, the limit is not lowered.
  for (const l of run({ samplePoolWait: false }, 90, 4)) expect(l).toBeGreaterThanOrEqual(100);
  // With samplePoolWait but no pool wait (the 99 ms were the statement, or the identity's own slot): not lowered either.
  expect(run({ samplePoolWait: true }, 0, 4)).toEqual(run({ samplePoolWait: false }, 0, 4));
  // sampleSourceTime counts all 101 ms, whatever samplePoolWait says.
  expect(run({ sampleSourceTime: true, samplePoolWait: true }, 0, 4)).toEqual([90, 81, 72, 65]);
  // A pool wait reported larger than the source time (it is a part of it) leaves nothing out, never adds.
  const l = limiter({ samplePoolWait: true, initialLimit: 10 });
  const p = permit(l.acquire());
  clock += 7;
  p.release(3, false, 5);
  expect(l.snapshot()).toMatchObject({ samples: 1, shortRtt: 7, longRtt: 7, shortSource: 0.3, shortPoolWait: 0.5 });
});

test('a burst of slow calls within one DECREASE_STEP_MS lowers the limit by at most 10 %: one pause cannot take it below what the replica needs in flight', () => {
  /** 30 calls of 10 ms one after another (long- and short-term latency 10 ms; the limit held at 100, the load being below half of it), then `n` calls finishing together after 50 ms. */
  const burst = (n: number) => {
    const l = limiter({ initialLimit: 100, minLimit: 4, maxLimit: 512, tolerance: 1 });
    drive(l, 30, 10, 1);
    expect(l.limit).toBe(100);
    const held = Array.from({ length: n }, () => permit(l.acquire()));
    clock += 50;
    for (const p of held) p.release();
    return l;
  };
  // One slow sample lowers it a little; sixty in the same instant stop at the step's floor, 0.9 × 100.
  const one = burst(1);
  expect(one.limit).toBeLessThan(100);
  expect(one.limit).toBeGreaterThan(90);
  const sixty = burst(60);
  expect(sixty.limit).toBe(90);
  // Within the step more slow samples lower it no further.
  const held = Array.from({ length: 60 }, () => permit(sixty.acquire()));
  clock += DECREASE_STEP_MS - 1;
  for (const p of held) p.release();
  expect(sixty.limit).toBe(90);
  // A new step: down to 0.9 × 90 at most.
  const again = Array.from({ length: 60 }, () => permit(sixty.acquire()));
  clock += 2;
  for (const p of again) p.release();
  expect(sixty.limit).toBe(81);
});

test('a quiet minute does not let the first slow calls after it become the long-term latency: a flood after idle lowers the limit', () => {
  const l = limiter({ initialLimit: 40, minLimit: 4, maxLimit: 512, tolerance: 2 });
  drive(l, 30, 10, 1);
  expect(l.limit).toBe(40);
  clock += 60_000;
  // The limit full at once, every call five times slower than before the gap.
  const held = Array.from({ length: 40 }, () => permit(l.acquire()));
  clock += 50;
  for (const p of held) p.release();
  expect(l.limit).toBeLessThan(40);
  expect(l.limit).toBeGreaterThanOrEqual(36);
});

test('snapshot(): the limiter state the debug trace logs (gateway.ts at level debug, bench/admission-trace.ts)', () => {
  const l = limiter({ initialLimit: 8 }, { lag: () => 150, audit: () => 3 });
  expect(l.snapshot()).toEqual({ limit: 8, inflight: 0, queued: 0, borrowed: 0, shortRtt: 0, longRtt: 0, loopDelayMs: 150, auditQueue: 3, pressured: true, ceiling: null, refused: 0, dropped: 0, samples: 0, minRtt: null, measuring: false, shortSource: 0, shortPoolWait: 0, shortSlotWait: 0, shortStatement: 0, working: 0, identityLimited: 0, identityLowest: null, identityRefused: 0 });
  const p = permit(l.acquire());
  expect(l.snapshot()).toMatchObject({ inflight: 1, samples: 0 });
  // 30 ms of source time: 5 waiting for a pool connection, 15 for the identity's own slots, 10 in statements (fast averages: × 0.1).
  p.release(30, false, 5, 15);
  expect(l.snapshot()).toMatchObject({ inflight: 0, samples: 1, shortSource: 3, shortPoolWait: 0.5, shortSlotWait: 1.5, shortStatement: 1 });
});

test('a call refused behind admission for lack of a source slot is a drop: the limit falls to 0.9 × the calls in flight, at most once per DECREASE_STEP_MS, and stays under that ceiling for 10 s', () => {
  const l = limiter({ initialLimit: 100, minLimit: 4, maxLimit: 512 });
  const held = Array.from({ length: 50 }, () => permit(l.acquire()));
  clock += 5;
  held.pop()!.release(0, true);
  expect(l.dropped).toBe(1);
  // 50 in flight when it was refused (itself included): 0.9 × 50.
  expect(l.limit).toBe(45);
  expect(l.ceiling).toBe(45);
  // Within the step a second drop lowers nothing more (it is counted).
  held.pop()!.release(0, true);
  expect(l.dropped).toBe(2);
  expect(l.limit).toBe(45);
  // Good latency does not raise it above the ceiling while the ceiling holds, however full the limit is.
  for (const p of held) p.release();
  drive(l, 100, 5, 1000);
  expect(l.limit).toBe(45);
  expect(l.ceiling).toBe(45);
  // Ten seconds after the drop the ceiling is gone and the limit rises again.
  clock += 10_000;
  drive(l, 20, 5, 1000);
  expect(l.ceiling).toBeNull();
  expect(l.limit).toBeGreaterThan(45);
  // A drop never takes the limit below min_limit.
  const m = limiter({ initialLimit: 100, minLimit: 4, maxLimit: 512 });
  const two = [permit(m.acquire()), permit(m.acquire())];
  two[0].release(0, true);
  expect(m.limit).toBe(4);
  two[1].release();
});

test('event-loop delay past its bound lowers the limit by 10 % at most once per PRESSURE_STEP_MS, whatever the latency, and not below min_limit', () => {
  let lag = 0;
  const l = limiter({ initialLimit: 100, minLimit: 4, maxLimit: 512 }, { lag: () => lag });
  lag = 250;
  const p = permit(l.acquire());
  clock += 5;
  p.release();
  expect(l.limit).toBe(90);
  // Ten more samples within the same step: held, neither lowered again nor raised.
  drive(l, 10, 5, 1);
  expect(l.limit).toBe(90);
  // One sample per step: 90 × 0.9^10 ≈ 31.
  drive(l, 10, PRESSURE_STEP_MS, 1000);
  expect(l.limit).toBe(Math.floor(90 * 0.9 ** 10));
  drive(l, 40, PRESSURE_STEP_MS, 1000);
  expect(l.limit).toBe(4);
  // The lag gone, good latency raises it again.
  lag = 0;
  drive(l, 60, 5, 1000);
  expect(l.limit).toBeGreaterThan(8);
});

test('the audit writer falling behind lowers the limit too, and only while it is behind', () => {
  let depth = 0;
  const l = limiter({ initialLimit: 100, minLimit: 4, maxLimit: 512, maxAuditQueue: 50 }, { audit: () => depth });
  depth = 50; // at the bound, not past it
  drive(l, 5, PRESSURE_STEP_MS, 1);
  expect(l.limit).toBe(100);
  depth = 51;
  drive(l, 5, PRESSURE_STEP_MS, 1000);
  expect(l.limit).toBe(Math.floor(100 * 0.9 ** 5));
});

test('the defaults act at 8–32 connections on 2 cores: start at 16, may fall to 4, audit bound below max_limit', () => {
  expect(DEFAULT_CAPACITY).toMatchObject({ initialLimit: 16, minLimit: 4, maxLimit: 512, maxAuditQueue: 64 });
  expect(DEFAULT_CAPACITY.maxAuditQueue).toBeLessThan(DEFAULT_CAPACITY.maxLimit);
  const l = limiter();
  expect(l.limit).toBe(16);
  // 32 callers at once: 16 run, 32 - 16 wait in the queue (32), the 49th is refused.
  const held = Array.from({ length: 16 }, () => permit(l.acquire()));
  const waiting = Array.from({ length: 32 }, () => l.acquire());
  expect(waiting.every((w) => w instanceof Promise)).toBe(true);
  expect(isCapacityRefusal(l.acquire() as CapacityPermit)).toBe(true);
  l.close();
  for (const p of held) p.release();
});

test('gateway wiring (capacityLimiter of config admission): the audit writer depth it is given lowers the limit', () => {
  // The gateway's limiter times its calls with performance.now: here a clock of the test's, every
  // call taking 1 ms (task flake47: on the real clock a loaded machine that paused the first call a
  // few ms, and not the next ones, made the gradient lower the limit below 16 before any depth).
  let now = 0;
  const clock = jest.spyOn(performance, 'now').mockImplementation(() => now);
  try {
    let depth = 0;
    const l = capacityLimiter(DEFAULT_CONFIG.admission!, () => depth)!;
    limiters.push(l);
    expect(l.limit).toBe(16);
    const run = (n: number) => {
      for (let i = 0; i < n; i++) {
        const p = permit(l.acquire());
        now += 1;
        p.release();
      }
    };
    run(5);
    expect(l.limit).toBeGreaterThanOrEqual(16);
    depth = 65;
    run(1);
    expect(l.limit).toBeLessThan(16);
    expect(capacityLimiter({ ...DEFAULT_CONFIG.admission!, enabled: false })).toBeUndefined();
  } finally {
    clock.mockRestore();
  }
});

test('the default event-loop sampler (monitorEventLoopDelay, read every second) feeds the limit: a blocked loop lowers it', async () => {
  // No eventLoopDelayMs signal: the limiter reads node:perf_hooks itself.
  const l = new CapacityLimiter({ ...DEFAULT_CAPACITY, initialLimit: 100, maxEventLoopDelayMs: 100 }, { now: () => clock });
  limiters.push(l);
  const p0 = permit(l.acquire());
  clock += 5;
  p0.release();
  const before = l.limit;
  expect(before).toBeGreaterThanOrEqual(100);
  // Starve the event loop: five 150 ms stretches of busy work with only a turn of the loop between
  // them (sustained lag, not one pause: the sampler reads the p99 of the last second).
  await new Promise((r) => setTimeout(r, 20));
  for (let i = 0; i < 5; i++) {
    const until = Date.now() + 150;
    while (Date.now() < until) {
      /* busy */
    }
    await new Promise((r) => setImmediate(r));
  }
  // Within the next seconds the one-second sampler has read the lag and a finished call lowers the limit.
  const deadline = Date.now() + 2500;
  while (l.limit === before && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    const p = permit(l.acquire());
    clock += PRESSURE_STEP_MS;
    p.release();
  }
  expect(l.limit).toBe(Math.floor(before * 0.9));
}, 10_000);

test('the retry hint grows with the queue ahead, in whole seconds', () => {
  const l = limiter({ initialLimit: 1, minLimit: 1, maxLimit: 1, queueSize: 50, queueTimeoutMs: 10_000 });
  const p = permit(l.acquire());
  clock += 100;
  p.release(); // one sample: 100 ms
  permit(l.acquire());
  for (let i = 0; i < 30; i++) void l.acquire();
  // 31 ahead (30 queued + this one) × 100 ms / limit 1 = 3.1 s → 4 s.
  expect(l.retryAfterMs()).toBe(4000);
});

test('fair share inside the limit: a flooding identity is refused at once past its share, a newcomer holding nothing gets a slot at once beyond the limit, and a freed slot goes to the identity holding fewest', async () => {
  const l = limiter({ initialLimit: 4, minLimit: 4, maxLimit: 4, queueSize: 2, queueTimeoutMs: 10_000 });
  const flood = [permit(l.acquire(undefined, 'flood')), permit(l.acquire(undefined, 'flood')), permit(l.acquire(undefined, 'flood')), permit(l.acquire(undefined, 'flood'))];
  // Full. Alone, the flooder may use the queue.
  const queuedFlood = l.acquire(undefined, 'flood') as Promise<CapacityPermit>;
  expect(queuedFlood).toBeInstanceOf(Promise);
  // Another identity, holding nothing while the flooder holds 4 > its share (4 ÷ 2): a slot at once, beyond the limit.
  const agent = permit(l.acquire(undefined, 'agent'));
  expect(l.inflight).toBe(5);
  expect(l.borrowed).toBe(1);
  // Holding one now, its next call waits (under its share of 2), and the flooder, over its share, is refused at once.
  const fair = l.acquire(undefined, 'agent') as Promise<CapacityPermit>;
  expect(fair).toBeInstanceOf(Promise);
  expect(isCapacityRefusal(l.acquire(undefined, 'flood') as CapacityPermit)).toBe(true);
  // Releases bring the calls in flight back under the limit first; then the freed slot goes to the identity holding fewest.
  flood[0].release();
  flood[1].release();
  expect(l.borrowed).toBe(1);
  const got = await fair;
  expect(isCapacityRefusal(got)).toBe(false);
  expect(l.queued).toBe(1);
  agent.release();
  expect(l.borrowed).toBe(0);
  const second = await queuedFlood;
  expect(isCapacityRefusal(second)).toBe(false);
  got.release();
  second.release();
  for (const p of flood.slice(2)) p.release();
  expect(l.inflight).toBe(0);
});

test('slots beyond the limit for identities holding none are at most queue_size at a time, and only while another holds more than its share', () => {
  const l = limiter({ initialLimit: 2, minLimit: 2, maxLimit: 2, queueSize: 2, queueTimeoutMs: 10_000 });
  // Two identities holding one each: nobody over its share, so a third waits.
  const held = [permit(l.acquire(undefined, 'a')), permit(l.acquire(undefined, 'b'))];
  expect(l.acquire(undefined, 'c')).toBeInstanceOf(Promise);
  expect(l.borrowed).toBe(0);
  l.close();
  for (const p of held) p.release();

  const m = limiter({ initialLimit: 2, minLimit: 2, maxLimit: 2, queueSize: 2, queueTimeoutMs: 10_000 });
  const flood = [permit(m.acquire(undefined, 'f')), permit(m.acquire(undefined, 'f'))];
  // f holds 2 > its share beside a newcomer (2 ÷ 2 = 1): newcomers borrow, two at most.
  const x = permit(m.acquire(undefined, 'x'));
  const y = permit(m.acquire(undefined, 'y'));
  expect(m.borrowed).toBe(2);
  expect(m.acquire(undefined, 'z')).toBeInstanceOf(Promise);
  expect(m.inflight).toBe(4);
  m.close();
  for (const p of [...flood, x, y]) p.release();
  expect(m.borrowed).toBe(0);
});

test('a full queue: the newest waiter of the identity furthest over its share gives its place to a caller under its share', async () => {
  const l = limiter({ initialLimit: 4, minLimit: 4, maxLimit: 4, queueSize: 2, queueTimeoutMs: 10_000 });
  const held = [permit(l.acquire(undefined, 'a')), permit(l.acquire(undefined, 'b'))];
  held.push(permit(l.acquire(undefined, 'c')), permit(l.acquire(undefined, 'd')));
  // Full with 4 identities holding one each; e and f (share 4 ÷ 5 → 1) queue.
  const e = l.acquire(undefined, 'e') as Promise<CapacityPermit>;
  const a2 = l.acquire(undefined, 'a');
  expect(isCapacityRefusal(a2 as CapacityPermit)).toBe(true); // a holds its share already
  const f = l.acquire(undefined, 'f') as Promise<CapacityPermit>;
  expect(l.queued).toBe(2);
  // g finds the queue full and nobody over the share: refused at once.
  expect(isCapacityRefusal(l.acquire(undefined, 'g') as CapacityPermit)).toBe(true);
  for (const p of held) p.release();
  expect(isCapacityRefusal(await e)).toBe(false);
  expect(isCapacityRefusal(await f)).toBe(false);
});

test('refuseKnown: a remembered token is refused before identity resolution exactly when acquire would refuse it at once', () => {
  const l = limiter({ initialLimit: 2, minLimit: 2, maxLimit: 2, queueSize: 1, queueTimeoutMs: 10_000 });
  // Room: never refused, remembered or not.
  expect(l.refuseKnown('tok-a')).toBeNull();
  l.noteToken('tok-a', { id: 'a', keyId: 'ka' });
  expect(l.refuseKnown('tok-a')).toBeNull();
  const held = [permit(l.acquire(undefined, 'a')), permit(l.acquire(undefined, 'a'))];
  // Full, queue empty: a alone may still wait in the queue, so it goes the normal way.
  expect(l.refuseKnown('tok-a')).toBeNull();
  const waiting = l.acquire(undefined, 'a');
  expect(waiting).toBeInstanceOf(Promise);
  // Queue full too: refused, counted, with who it was.
  const before = l.refused;
  const r = l.refuseKnown('tok-a');
  expect(r).toEqual({ refusal: { retryAfterMs: 1000 }, caller: { id: 'a', keyId: 'ka' } });
  expect(l.refused).toBe(before + 1);
  // An unknown token is not refused here (its identity decides later), and b, under its share, would displace a's waiter.
  expect(l.refuseKnown('tok-b')).toBeNull();
  l.noteToken('tok-b', { id: 'b', keyId: 'kb' });
  expect(l.refuseKnown('tok-b')).toBeNull();
  l.close();
  for (const p of held) p.release();
});

test('working calls: calls waiting for their identity\'s own source slots (release slotWaitMs) do not count as in flight for raising the limit, unless raiseOnSlotWaiters (issue 29, h29f)', () => {
  /** Limit 10; `rounds` rounds: the limit filled, all finish together 10 ms later, 9 ms of it in source reads, `slotMs` of those waiting for the identity's own slots. The limits after each round (3 decimals of the unrounded snapshot). */
  const run = (over: Partial<CapacitySettings>, slotMs: number, rounds: number) => {
    const l = limiter({ initialLimit: 10, minLimit: 4, maxLimit: 100, raiseOnSlotWaiters: false, ...over });
    const limits: number[] = [];
    for (let r = 0; r < rounds; r++) {
      const held = Array.from({ length: l.limit }, () => permit(l.acquire()));
      clock += 10;
      for (const p of held) p.release(9, false, 0, slotMs);
      limits.push(l.snapshot().limit);
    }
    return { limits, working: l.snapshot().working, l };
  };
  // 8 of 10 ms waiting: by Little's law 80 % of the calls in flight wait, the working ones (≤ 0.2 × 9 + 1) never reach half the limit: held.
  expect(run({}, 8, 4).limits).toEqual([10, 10, 10, 10]);
  // The same calls counted as in flight (the behaviour before): raised every round.
  const before = run({ raiseOnSlotWaiters: true }, 8, 4).limits;
  expect(before).toEqual([12.65, 16.4, 21.56, 28.47]);
  // No own-slot wait: every call works, the same trajectory as before.
  expect(run({}, 0, 4).limits).toEqual(before);
  // 4 of 10 ms waiting: working 0.6 × in flight; in a round only the releases while 0.6 × (calls still held) + 1 ≥ half the limit raise it (round 1: 2 of 10, 10 → 10.63 → 11.28).
  expect(run({}, 4, 4).limits).toEqual([11.28, 12.65, 14.09, 15.61]);
  // The snapshot shows the working calls: the limit (11) held, 40 % of the latency waiting → 6.6.
  const { l } = run({}, 4, 1);
  for (let i = 0; i < 11; i++) permit(l.acquire());
  expect(l.snapshot()).toMatchObject({ inflight: 11, working: 6.6 });
});
