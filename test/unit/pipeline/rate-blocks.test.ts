/**
 * BlockRateLimiter (issue 13): per-replica buckets over a shared budget claimed in blocks. Several
 * limiters sharing one MemoryRateBlockStore stand for replicas sharing the control database; a
 * counting wrapper shows how many claims reach the store.
 */
import { BlockRateLimiter, blockSize, memoryRateLimiter, rateLimitStep } from '../../../src/pipeline/05-rate-limit';
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

/** Runs `n` calls of `identity` on `source`, `width` at a time; returns [admitted, refused by scope]. */
async function burst(l: { consume: BlockRateLimiter['consume'] }, identity: string, source: string, n: number, width: number) {
  const out = { ok: 0, identity: 0, source: 0 };
  for (let i = 0; i < n; i += width) {
    const rs = await Promise.all(Array.from({ length: Math.min(width, n - i) }, () => l.consume(identity, source)));
    for (const r of rs) out[r.ok ? 'ok' : r.scope]++;
  }
  return out;
}

test('red-team F2: an identity bursting past its budget spends only its own share of the source; other identities still get answers', async () => {
  // The defaults (120 per identity, 600 per source per minute), one replica: block claims are exact here.
  let t = 1_000;
  const l = new BlockRateLimiter(new MemoryRateBlockStore(() => t), undefined, () => t);
  expect(await burst(l, 'hostile', 'chinook', 800, 50)).toEqual({ ok: 120, identity: 680, source: 0 });
  expect(await burst(l, 'honest', 'chinook', 10, 5)).toEqual({ ok: 10, identity: 0, source: 0 });
  // The source budget still binds across identities: 120 + 10 + 3 × 120 + 110 = 600, then the source refuses.
  for (const id of ['b', 'c', 'd']) expect(await burst(l, id, 'chinook', 120, 20)).toEqual({ ok: 120, identity: 0, source: 0 });
  expect(await burst(l, 'e', 'chinook', 110, 10)).toEqual({ ok: 110, identity: 0, source: 0 });
  expect(await l.consume('f', 'chinook')).toEqual({ ok: false, retryAfterMs: 60_000, scope: 'source' });
  // A refusal for the identity is still answered for the identity, whatever the source's state.
  expect(await l.consume('hostile', 'chinook')).toEqual({ ok: false, retryAfterMs: 60_000, scope: 'identity' });
});

test('red-team F2 across two replicas: the hostile identity spends at most its budget of the source', async () => {
  const shared = new MemoryRateBlockStore();
  const limits = { perIdentity: { points: 5, windowSeconds: 60 }, perSource: { points: 8, windowSeconds: 60 } };
  const a = new BlockRateLimiter(shared, limits);
  const b = new BlockRateLimiter(shared, limits);
  const [x, y] = await Promise.all([burst(a, 'hostile', 'chinook', 40, 10), burst(b, 'hostile', 'chinook', 40, 10)]);
  expect(x.ok + y.ok).toBe(5);
  expect(x.identity + y.identity).toBe(75);
  expect(x.source + y.source).toBe(0);
  // Three source calls are left (8 − 5): the honest identity gets them, then the source refuses.
  const out: Array<boolean | string> = [];
  for (let i = 0; i < 5; i++) {
    const r = await (i % 2 ? b : a).consume('honest', 'chinook');
    out.push(r.ok || r.scope);
  }
  expect(out).toEqual([true, true, true, 'source', 'source']);
});

test('red-team F2, memory limiter: a refusal for the identity spends no source point', async () => {
  const l = memoryRateLimiter({ perIdentity: { points: 5, windowSeconds: 60 }, perSource: { points: 8, windowSeconds: 60 } });
  expect(await burst(l as BlockRateLimiter, 'hostile', 'chinook', 40, 10)).toEqual({ ok: 5, identity: 35, source: 0 });
  expect(await burst(l as BlockRateLimiter, 'honest', 'chinook', 5, 1)).toEqual({ ok: 3, identity: 0, source: 2 });
});

test('rateLimitStep admits from memory (consumeNow) exactly what consume would: no more than either budget, no token spent by a "no"', async () => {
  let t = 1_000;
  const shared = counting(new MemoryRateBlockStore(() => t));
  const l = new BlockRateLimiter(shared.store, { perIdentity: { points: 640, windowSeconds: 60 }, perSource: { points: 320, windowSeconds: 60 } }, () => t);
  expect(l.consumeNow('id-1', 's1')).toBe(false); // nothing claimed yet: consume decides
  let admitted = 0;
  let fromMemory = 0;
  let byIdentity = 0;
  let bySource = 0;
  for (let i = 0; i < 700; i++) {
    const ctx = { rateLimitCharge: { charged: false } };
    const step = rateLimitStep(l, ctx, 'id-1', 's1');
    if (!(step instanceof Promise)) fromMemory++;
    const out = step instanceof Promise ? await step : step;
    expect(ctx.rateLimitCharge.charged).toBe(true);
    if (out === null) admitted++;
    else if (out.kind === 'refusal' && out.code === 'rate_limited' && out.message?.includes('this identity')) byIdentity++;
    else if (out.kind === 'refusal' && out.code === 'rate_limited' && out.message?.includes("source 's1'")) bySource++;
    else throw new Error(`unexpected outcome ${JSON.stringify(out)}`);
  }
  // The source's 320 bind; every call the identity admitted spent one of its 640, and only those:
  // a consumeNow that spent an identity token before saying no would refuse more than 60 by identity.
  expect({ admitted, byIdentity, bySource }).toEqual({ admitted: 320, byIdentity: 60, bySource: 320 });
  expect(fromMemory).toBeGreaterThan(250);
  t += 60_000;
  expect(await rateLimitStep(l, {}, 'id-1', 's1')).toBeNull(); // a new window: claimed again
});
