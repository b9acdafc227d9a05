/**
 * Per-identity concurrency slots (issue 10, Build 5) without a database: the pure decision, the
 * bounded wait, the refusal with a retry hint, hand-over to the next waiter, identities apart.
 */
import { CONCURRENCY_RETRY_MS, IdentitySlots, WAITERS_PER_SLOT, decideSlot } from '../../../src/sources/postgres/fair-share';
import { SourceError } from '../../../src/sources/postgres/errors';
import { defaultConcurrentPerIdentity, resolveSettings } from '../../../src/sources/postgres/settings';

describe('decideSlot', () => {
  test('run below the cap, wait while the queue has room, refuse beyond', () => {
    expect(decideSlot(0, 0, 2)).toBe('run');
    expect(decideSlot(1, 0, 2)).toBe('run');
    expect(decideSlot(2, 0, 2)).toBe('wait');
    expect(decideSlot(2, 2 * WAITERS_PER_SLOT - 1, 2)).toBe('wait');
    expect(decideSlot(2, 2 * WAITERS_PER_SLOT, 2)).toBe('refuse');
  });
});

describe('settings', () => {
  test('the default cap is below the pool size (when the pool has more than one connection)', () => {
    expect([1, 2, 3, 5, 10].map(defaultConcurrentPerIdentity)).toEqual([1, 1, 2, 3, 5]);
    const r = resolveSettings({ host: 'h', port: 5432, database: 'd', reader: { user: 'r' } });
    expect(r).toMatchObject({ poolSize: 5, maxConcurrentPerIdentity: 3, identityWaitMs: 2000 });
    expect(resolveSettings({ host: 'h', port: 5432, database: 'd', reader: { user: 'r' }, max_concurrent_per_identity: 1, identity_wait_ms: 0 })).toMatchObject({ maxConcurrentPerIdentity: 1, identityWaitMs: 0 });
    expect(() => resolveSettings({ host: 'h', port: 5432, database: 'd', reader: { user: 'r' }, max_concurrent_per_identity: 0 })).toThrow('max_concurrent_per_identity');
  });
});

describe('IdentitySlots', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  test('beyond the cap a call waits, then is refused concurrency_limited with a retry hint', async () => {
    const slots = new IdentitySlots(2, 500);
    await slots.acquire('a');
    await slots.acquire('a');
    const third = slots.acquire('a');
    expect(slots.waiting()).toBe(1);
    jest.advanceTimersByTime(500);
    await expect(third).rejects.toMatchObject({ code: 'concurrency_limited', retryAfterMs: CONCURRENCY_RETRY_MS, sourceFailure: false });
    expect(slots.waiting()).toBe(0);
  });

  test('a released slot goes to the next waiter; other identities are not held up', async () => {
    const slots = new IdentitySlots(1, 1000);
    const releaseA = await slots.acquire('a');
    const waitingA = slots.acquire('a');
    await expect(slots.acquire('b')).resolves.toEqual(expect.any(Function));
    releaseA();
    releaseA(); // a second call is a no-op
    const releaseA2 = await waitingA;
    expect(slots.waiting()).toBe(0);
    const third = slots.acquire('a');
    jest.advanceTimersByTime(1000);
    await expect(third).rejects.toBeInstanceOf(SourceError);
    releaseA2();
    await expect(slots.acquire('a')).resolves.toEqual(expect.any(Function));
  });

  test('an abort while waiting rejects cancelled; a full queue refuses at once; wait 0 refuses at once', async () => {
    const slots = new IdentitySlots(1, 10_000);
    await slots.acquire('a');
    const ac = new AbortController();
    const w = slots.acquire('a', ac.signal);
    ac.abort();
    await expect(w).rejects.toMatchObject({ code: 'cancelled' });
    const queued = Array.from({ length: WAITERS_PER_SLOT }, () => slots.acquire('a'));
    await expect(slots.acquire('a')).rejects.toMatchObject({ code: 'concurrency_limited' });
    jest.advanceTimersByTime(10_000);
    await Promise.allSettled(queued);
    const noWait = new IdentitySlots(1, 0);
    await noWait.acquire('x');
    await expect(noWait.acquire('x')).rejects.toMatchObject({ code: 'concurrency_limited' });
  });
});
