/**
 * Admission by capacity's working calls (issue 29, h29f; admission.raise_on_slot_waiters): one
 * identity sending more calls than its own source slots take (max_concurrent_per_identity 2 of
 * pool_size 4; 48 closed loops of 5 ms statements, the test's STABLE function around pg_sleep) has
 * most of its admitted calls waiting for those slots. By default they do not count as in flight when
 * the limit decides whether to rise (raise_on_slot_waiters false: the share of the calls in flight
 * that wait, from recent calls' own-slot wait ÷ latency, is left out): the limit stays near its
 * start and the identity's queue for its slots within it; counted (raise_on_slot_waiters: true, the behaviour before
 * h29f) the limit climbs while the limit is full, and the queue with it. Read every 50 ms: the
 * limiter's limit and the connector's count of calls waiting for their own slots (counts, not times).
 */
import { count, INITIAL_LIMIT, loops, query, slow, start, warm, type Admission, type Answer } from '../../helpers/capacity-load';

jest.setTimeout(120_000);

/** 3 s of 48 loops of 5 ms statements by one identity: the answers, the highest limit and the most calls waiting for their own slots seen. */
async function flood(admission: Admission): Promise<{ answers: Answer[]; maxLimit: number; maxWaiting: number }> {
  const { env, keys } = await start({ pause_refused_connections: false, max_limit: 512, ...admission }, 1);
  try {
    const [key] = keys;
    await warm(env, key);
    let maxLimit = 0;
    let maxWaiting = 0;
    const watch = setInterval(() => {
      maxLimit = Math.max(maxLimit, env.gateway.capacity!.limit);
      maxWaiting = Math.max(maxWaiting, env.gateway.connectors.poolStats().chinook?.identityWaiting ?? 0);
    }, 50);
    const answers = await loops(48, Date.now() + 3000, () => query(env, key, slow(0.005)));
    clearInterval(watch);
    return { answers, maxLimit, maxWaiting };
  } finally {
    await env.close();
  }
}

test('working calls (raise_on_slot_waiters false): calls waiting for their own slots do not raise the limit; the excess is refused early with Retry-After', async () => {
  const on = await flood({ raise_on_slot_waiters: false });
  const old = await flood({ raise_on_slot_waiters: true });
  // eslint-disable-next-line no-console
  console.log(`working calls: ${count(on.answers, 'served')} served, ${count(on.answers, 'capacity')} refused, highest limit ${on.maxLimit}, most waiting ${on.maxWaiting}; counted as before: ${count(old.answers, 'served')} served, ${count(old.answers, 'capacity')} refused, highest limit ${old.maxLimit}, most waiting ${old.maxWaiting}`);
  for (const run of [on, old]) {
    // Served, or refused by capacity with Retry-After: nothing refused late by the source.
    expect(run.answers.filter((a) => a !== 'served' && a !== 'capacity')).toEqual([]);
    expect(count(run.answers, 'served')).toBeGreaterThan(0);
  }
  // Working calls: a few raises while the first calls' waits are short, then held (22 and 24 seen at load 6.4).
  expect(on.maxLimit).toBeLessThanOrEqual(2 * INITIAL_LIMIT);
  expect(count(on.answers, 'capacity')).toBeGreaterThan(0);
  // Counted as before, the limit rose while full (96, 42, 35 seen at load 6.4–7.5) — but not always: on a quiet CI
  // machine the latency gradient held both settings alike (19 against 18, most waiting 12 against 13), so the two are
  // not compared here; the bound above is what working calls guarantee (a working() that counts every call in flight
  // fails it: 96), and test/unit/transport/capacity*.test.ts pins the exact trajectories.
});
