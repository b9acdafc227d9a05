/**
 * Admission by capacity sees the source pool's queue, not an identity's own (issue 29 item 1, h29q;
 * admission.sample_pool_wait): the limiter's latency sample keeps a call's wait for a connection of
 * the source's shared pool and leaves out the rest of its source time (its statements, and its wait
 * for its own identity's slot, max_concurrent_per_identity).
 *
 * The source: pool_size 4, max_concurrent_per_identity 2, long identity and pool waits (so nothing
 * is refused by the source: no drops). The slow statement is the test's own fixture, a STABLE SQL
 * function around pg_sleep created by the superuser (agents may not call pg_sleep). Cache off.
 *
 * - A hostile identity floods slow statements (12 at once, 0.3 s each; it runs 2, the rest wait for
 *   its own slots) beside two honest identities doing point reads one at a time: with
 *   sample_pool_wait every honest call is served, none refused by capacity, and the limit is not
 *   lowered; the flood alone does not lower it either, where counting all source time
 *   (sample_source_time) does. (Beside honest point reads even sample_source_time kept it here: the
 *   honest calls' fast samples outnumber the slow ones in the short average.)
 * - Four identities at their cap (2 each, 0.15 s statements) want 8 connections of the 4: the
 *   shared pool is saturated, calls wait for it, and with sample_pool_wait that wait is in the limiter's
 *   sample (which lowers the limit: unit trajectories); without it (the default) the limit does not see it.
 */
import { count, INITIAL_LIMIT, loops, query, slow, start, warm, POINT, type Admission, type Answer } from '../../helpers/capacity-load';
import type { GovernedEnv } from '../../helpers/governed';

jest.setTimeout(120_000);

/** The hostile identity's slow flood, 4 s, beside `honestWorkers` honest identities' point reads (one at a time each, from 0.3 s); the honest answers, the hostile's and the limit at the end. */
async function hostileBesideHonest(admission: Admission, honestWorkers = 2): Promise<{ honest: Answer[]; hostile: Answer[]; limit: number }> {
  const { env, keys } = await start(admission, 3);
  try {
    const [hostileKey, ...honestKeys] = keys;
    await warm(env, honestKeys[0]);
    const until = Date.now() + 4000;
    const hostile = loops(12, until, () => query(env, hostileKey, slow(0.3)));
    await new Promise((r) => setTimeout(r, 300));
    const honest = await loops(honestWorkers, until, (w) => query(env, honestKeys[w], POINT, [1 + Math.floor(Math.random() * 3000)]));
    await hostile;
    const limit = env.gateway.capacity!.snapshot().limit;
    return { honest, hostile: await hostile, limit };
  } finally {
    await env.close();
  }
}

/** Four identities at their cap of slow statements (8 wanting the pool's 4 connections), 4.5 s; the answers and the limit at the end. */
async function saturatedPool(admission: Admission): Promise<{ answers: Answer[]; limit: number; poolWait: number; rtt: number }> {
  const { env, keys } = await start(admission, 4);
  try {
    await warm(env, keys[0]);
    const answers = await loops(8, Date.now() + 4500, (w) => query(env, keys[w % 4], slow(0.15)));
    const s = env.gateway.capacity!.snapshot();
    return { answers, limit: s.limit, poolWait: s.shortPoolWait, rtt: s.shortRtt };
  } finally {
    await env.close();
  }
}

test('sample_pool_wait: a hostile identity flooding slow statements does not lower the limit, and honest point reads beside it are never refused by capacity', async () => {
  const { honest, hostile, limit } = await hostileBesideHonest({ sample_pool_wait: true });
  // eslint-disable-next-line no-console
  console.log(`pool wait counted: honest ${count(honest, 'served')}/${honest.length} served; hostile ${count(hostile, 'served')} served, ${count(hostile, 'capacity')} refused by capacity; limit ${limit}`);
  expect(honest.length).toBeGreaterThanOrEqual(10);
  expect(honest.filter((a) => a !== 'served')).toEqual([]);
  expect(count(hostile, 'served')).toBeGreaterThan(0);
  expect(limit).toBeGreaterThanOrEqual(INITIAL_LIMIT);
});

test('the hostile flood alone: sample_pool_wait leaves its statements and its own slot wait out (the limit holds); counting all source time (sample_source_time) lowers the limit', async () => {
  const alone = await hostileBesideHonest({ sample_pool_wait: true }, 0);
  const counted = await hostileBesideHonest({ sample_source_time: true }, 0);
  // eslint-disable-next-line no-console
  console.log(`hostile alone: pool wait counted: ${count(alone.hostile, 'served')} served, limit ${alone.limit}; all source time counted: ${count(counted.hostile, 'served')} served, ${count(counted.hostile, 'capacity')} refused by capacity, limit ${counted.limit}`);
  expect(count(alone.hostile, 'served')).toBeGreaterThan(0);
  expect(alone.limit).toBeGreaterThanOrEqual(INITIAL_LIMIT);
  expect(counted.limit).toBeLessThan(INITIAL_LIMIT * 0.9);
});

test('sample_pool_wait: a saturated shared pool (four identities at their cap, 8 statements for 4 connections) puts the pool\'s wait into the limiter\'s sample', async () => {
  const { answers, limit, poolWait, rtt } = await saturatedPool({ sample_pool_wait: true });
  // eslint-disable-next-line no-console
  console.log(`pool wait counted: ${count(answers, 'served')}/${answers.length} served, ${count(answers, 'capacity')} refused by capacity; limit ${limit}; pool wait (fast average) ${poolWait} ms; sample (fast average) ${rtt} ms`);
  expect(count(answers, 'served')).toBeGreaterThan(0);
  expect(answers.filter((a) => a !== 'served' && a !== 'capacity')).toEqual([]);
  expect(poolWait).toBeGreaterThan(20);
  // The real pool's wait reaches the sample (most of it is that wait: the statements are left out). That a
  // sustained rise of the sample lowers the limit is pinned with exact trajectories in
  // test/unit/transport/capacity.test.ts; whether it has fallen by the end of 4.5 s here depends on how loaded the
  // machine is (8–14 on a shared one, 16.8 once at load 10), so the limit itself is not asserted.
  expect(rtt).toBeGreaterThan(poolWait * 0.5);
});

test('without sample_pool_wait (the default) the same saturated pool is invisible to the limit', async () => {
  const { answers, limit, poolWait, rtt } = await saturatedPool({});
  // eslint-disable-next-line no-console
  console.log(`pool wait left out: ${count(answers, 'served')}/${answers.length} served; limit ${limit}; pool wait (fast average) ${poolWait} ms; sample (fast average) ${rtt} ms`);
  expect(answers.filter((a) => a !== 'served')).toEqual([]);
  expect(poolWait).toBeGreaterThan(20);
  // The wait is left out of the sample.
  expect(rtt).toBeLessThan(poolWait * 0.5);
  expect(limit).toBeGreaterThanOrEqual(INITIAL_LIMIT);
});
