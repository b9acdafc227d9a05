/**
 * BlockRateLimiter (issue 13): per-replica buckets over a shared budget claimed in blocks. Several
 * limiters sharing one MemoryRateBlockStore stand for replicas sharing the control database; a
 * counting wrapper shows how many claims reach the store.
 */
import { BlockRateLimiter, blockSize, rateLimitStep } from '../../../src/pipeline/05-rate-limit';
import { MemoryRateBlockStore, type RateBlockStore } from '../../../src/control/rate-store';

function counting(store: RateBlockStore) {
  const c = { claims: 0, store: null as unknown as RateBlockStore };
  c.store = { claim: (...a) => { c.claims++; return store.claim(...a); } };
  return c;
}

const wide = { points: 1_000_000, windowSeconds: 60 };

test('blockSize: call by call under 32 points, a sixteenth of the budget at most 1000, shrinking as the budget runs out', () => {
  expect(blockSize(5, 5)).toBe(1);
  expect(blockSize(31, 31)).toBe(1);
  expect(blockSize(320, 320)).toBe(20);
  expect(blockSize(320, 40)).toBe(10);
  expect(blockSize(320, 3)).toBe(1);
  expect(blockSize(1_000_000, 1_000_000)).toBe(1000);
});

test('a replica spends a claimed block without going back to the store', async () => {
  let t = 0;
  const shared = counting(new MemoryRateBlockStore(() => t));
  const l = new BlockRateLimiter(shared.store, { perIdentity: { points: 1600, windowSeconds: 60 }, perSource: wide }, () => t);
  for (let i = 0; i < 100; i++) expect(await l.consume('id-1', null)).toEqual({ ok: true });
  // blockSize(1600, 1600) = 100: one claim for 100 calls.
  expect(shared.claims).toBe(1);
  expect(await l.consume('id-1', null)).toEqual({ ok: true });
  expect(shared.claims).toBe(2);
});

test('concurrent calls on an empty bucket share one claim', async () => {
  const shared = counting(new MemoryRateBlockStore());
  const l = new BlockRateLimiter(shared.store, { perIdentity: { points: 1600, windowSeconds: 60 }, perSource: wide });
  const r = await Promise.all(Array.from({ length: 50 }, () => l.consume('id-1', null)));
  expect(r.every((x) => x.ok)).toBe(true);
  expect(shared.claims).toBe(1);
});

test('three replicas never admit more than points per window, then refuse without a claim, and admit again in the next window', async () => {
  let t = 1_000;
  const shared = counting(new MemoryRateBlockStore(() => t));
  const limits = { perIdentity: { points: 640, windowSeconds: 60 }, perSource: wide };
  const replicas = [0, 1, 2].map(() => new BlockRateLimiter(shared.store, limits, () => t));
  let admitted = 0;
  let refused = 0;
  for (let i = 0; i < 900; i++) {
    const r = await replicas[i % 3].consume('id-1', null);
    if (r.ok) admitted++;
    else {
      refused++;
      expect(r).toEqual({ ok: false, retryAfterMs: 60_000, scope: 'identity' });
    }
  }
  expect(admitted).toBeLessThanOrEqual(640);
  // Stranded calls: at most one block per replica other than the one asking (blocks shrink to ≤ a quarter of what remained).
  expect(admitted).toBeGreaterThanOrEqual(640 - 2 * blockSize(640, 640));
  expect(refused).toBe(900 - admitted);
  const claims = shared.claims;
  for (const r of replicas) expect((await r.consume('id-1', null)).ok).toBe(false);
  // A replica whose bucket still holds tokens spends them; the others refuse from memory.
  expect(shared.claims).toBeLessThanOrEqual(claims + 3);
  t += 60_000;
  for (const r of replicas) expect(await r.consume('id-1', null)).toEqual({ ok: true });
});

test('small budgets are exact across replicas: 5 points, alternating replicas, 5 ok then refusals', async () => {
  const shared = new MemoryRateBlockStore();
  const limits = { perIdentity: { points: 5, windowSeconds: 60 }, perSource: wide };
  const a = new BlockRateLimiter(shared, limits);
  const b = new BlockRateLimiter(shared, limits);
  const out: boolean[] = [];
  for (let i = 0; i < 8; i++) out.push((await (i % 2 ? b : a).consume('id-1', 'src')).ok);
  expect(out).toEqual([true, true, true, true, true, false, false, false]);
});

test('the source budget is shared by identities; the refusal names the source', async () => {
  const l = new BlockRateLimiter(new MemoryRateBlockStore(), { perIdentity: wide, perSource: { points: 2, windowSeconds: 10 } });
  const charges = [{ charged: false }, { charged: false }, { charged: false }];
  expect(await rateLimitStep(l, { rateLimitCharge: charges[0] }, 'id-1', 'chinook')).toBeNull();
  expect(await rateLimitStep(l, { rateLimitCharge: charges[1] }, 'id-2', 'chinook')).toBeNull();
  const r = await rateLimitStep(l, { rateLimitCharge: charges[2] }, 'id-3', 'chinook');
  // Every call that reached the step consumed its point, the refused one included.
  expect(charges.map((c) => c.charged)).toEqual([true, true, true]);
  expect(r).toMatchObject({ kind: 'refusal', code: 'rate_limited', message: expect.stringContaining("source 'chinook'") });
  expect((r as { extra: { retry_after_ms: number } }).extra.retry_after_ms).toBeGreaterThan(9_000);
  expect((r as { extra: { retry_after_ms: number } }).extra.retry_after_ms).toBeLessThanOrEqual(10_000);
});

test('a store failure rejects the call (the pipeline maps it), and a later call claims again', async () => {
  let fail = true;
  const inner = new MemoryRateBlockStore();
  const l = new BlockRateLimiter({ claim: (...a) => (fail ? Promise.reject(new Error('down')) : inner.claim(...a)) }, { perIdentity: wide, perSource: wide });
  await expect(l.consume('id-1', null)).rejects.toThrow('down');
  fail = false;
  expect(await l.consume('id-1', null)).toEqual({ ok: true });
});
