/** Admission by capacity (issue 29 item 1): the adaptive limit, its queue and its refusals. */
import { CapacityLimiter, DEFAULT_CAPACITY, isCapacityRefusal, type CapacityPermit, type CapacitySettings } from '../../../src/transport/capacity';

let clock = 0;
const limiters: CapacityLimiter[] = [];
function limiter(over: Partial<CapacitySettings> = {}, signals: { lag?: () => number; audit?: () => number } = {}): CapacityLimiter {
  const l = new CapacityLimiter({ ...DEFAULT_CAPACITY, ...over }, { now: () => clock, eventLoopDelayMs: signals.lag ?? (() => 0), auditQueueDepth: signals.audit });
  limiters.push(l);
  return l;
}
afterEach(() => {
  for (const l of limiters.splice(0)) l.close();
});

function permit(x: unknown): CapacityPermit {
  if (x instanceof Promise || isCapacityRefusal(x as CapacityPermit)) throw new Error(`expected a permit at once, got ${JSON.stringify(x)}`);
  return x as CapacityPermit;
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

test('event-loop delay past its bound lowers the limit by 10 % a sample, whatever the latency', () => {
  let lag = 0;
  const l = limiter({ initialLimit: 100, minLimit: 4, maxLimit: 512 }, { lag: () => lag });
  lag = 250;
  const p = permit(l.acquire());
  clock += 5;
  p.release();
  expect(l.limit).toBe(90);
  drive(l, 10, 5, 1000);
  expect(l.limit).toBeLessThan(40);
});

test('the audit writer falling behind lowers the limit too', () => {
  let depth = 0;
  const l = limiter({ initialLimit: 100, minLimit: 4, maxLimit: 512, maxAuditQueue: 50 }, { audit: () => depth });
  depth = 51;
  drive(l, 5, 5, 1000);
  expect(l.limit).toBeLessThanOrEqual(Math.floor(100 * 0.9 ** 5) + 1);
});

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

test('fair share inside the limit: a flooding identity is refused at once past its share, and a freed slot goes to the identity holding fewest', async () => {
  const l = limiter({ initialLimit: 4, minLimit: 4, maxLimit: 4, queueSize: 4, queueTimeoutMs: 10_000 });
  const flood = [permit(l.acquire(undefined, 'flood')), permit(l.acquire(undefined, 'flood')), permit(l.acquire(undefined, 'flood')), permit(l.acquire(undefined, 'flood'))];
  // Full. Alone, the flooder may use the queue.
  const queuedFlood = l.acquire(undefined, 'flood') as Promise<CapacityPermit>;
  expect(queuedFlood).toBeInstanceOf(Promise);
  // Another identity (share 4 ÷ 2 = 2) waits too; now the flooder, over its share, is refused at once.
  const fair = l.acquire(undefined, 'agent') as Promise<CapacityPermit>;
  expect(fair).toBeInstanceOf(Promise);
  expect(isCapacityRefusal(l.acquire(undefined, 'flood') as CapacityPermit)).toBe(true);
  // The freed slot goes to the identity holding fewest, though the flooder queued first.
  flood[0].release();
  const got = await fair;
  expect(isCapacityRefusal(got)).toBe(false);
  expect(l.queued).toBe(1);
  got.release();
  const second = await queuedFlood;
  expect(isCapacityRefusal(second)).toBe(false);
  second.release();
  for (const p of flood.slice(1)) p.release();
  expect(l.inflight).toBe(0);
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
