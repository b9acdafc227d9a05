/**
 * Fair sharing of a source (issue 10, Build 5) on real PostgreSQL, through the connector (the
 * function policy refuses pg_sleep to agents; here the connector runs it directly as the test's
 * own slow statement): one identity holds at most its cap of pooled connections; its next call
 * waits identity_wait_ms and is refused `concurrency_limited` with a retry hint while other
 * identities are answered; a pool wait that times out is `source_busy` (not the opaque failure,
 * not a source failure); pool occupancy is reported for the metrics gauges.
 */
import { PostgresSourceConnector } from '../../../src/sources/postgres/connector';
import { createSourceDb, sleep, waitFor, type SourceDb } from './source-db';
import { startFakePg } from './fakes';
import { CANCEL_ATTEMPTS, CANCEL_RETRY_MS } from '../../../src/sources/postgres/cancel';

jest.setTimeout(60_000);

const CALL = { maxRows: 100, maxBytes: 1_000_000 };
let src: SourceDb;
const open: PostgresSourceConnector[] = [];
function connector(overrides: Parameters<SourceDb['settings']>[0]): PostgresSourceConnector {
  const c = new PostgresSourceConnector('fair', src.settings(overrides));
  open.push(c);
  return c;
}
const sleeping = (n: number) => async () => (await src.activity()).filter((a) => a.query.startsWith('SELECT pg_sleep') && a.state === 'active').length === n;

beforeAll(async () => {
  src = await createSourceDb('conn_fair', { chinook: false });
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
});
afterAll(async () => {
  await src?.drop();
});

test('one identity holds at most its cap; its next call waits, then is refused concurrency_limited; others are answered', async () => {
  const c = connector({ pool_size: 4, max_concurrent_per_identity: 2, identity_wait_ms: 300 });
  const slow = [1, 2].map(() => c.read('SELECT pg_sleep(1.5)', [], { ...CALL, identityId: 'greedy' }));
  expect(await waitFor(sleeping(2), 5000)).toBeGreaterThanOrEqual(0);
  expect(c.poolStats()).toMatchObject({ size: 4, inUse: 2, waiting: 0 });
  const third = c.read('SELECT 1 AS one', [], { ...CALL, identityId: 'greedy' }).catch((e: unknown) => e);
  await sleep(50);
  expect(c.poolStats().identityWaiting).toBe(1);
  const others = await Promise.all([1, 2].map((i) => c.read(`SELECT ${i} AS n`, [], { ...CALL, identityId: `polite-${i}` })));
  expect(others.map((r) => r.rows)).toEqual([[{ n: 1 }], [{ n: 2 }]]);
  expect(await third).toMatchObject({ code: 'concurrency_limited', retryAfterMs: 1000, sourceFailure: false });
  await Promise.all(slow);
  expect((await c.read('SELECT 1 AS one', [], { ...CALL, identityId: 'greedy' })).rows).toEqual([{ one: 1 }]);
  expect(c.breakerState()).toBe('closed');
});

test('a call waiting for its own slot runs as soon as one frees, within the wait', async () => {
  const c = connector({ pool_size: 3, max_concurrent_per_identity: 1, identity_wait_ms: 5000 });
  const first = c.read('SELECT pg_sleep(0.5)', [], { ...CALL, identityId: 'a' });
  expect(await waitFor(sleeping(1), 5000)).toBeGreaterThanOrEqual(0);
  const second = await c.read('SELECT 2 AS n', [], { ...CALL, identityId: 'a' });
  expect(second.rows).toEqual([{ n: 2 }]);
  await first;
});

test('a pool wait that times out is source_busy with a retry hint, and does not count against the source', async () => {
  const c = connector({ pool_size: 2, max_concurrent_per_identity: 2, connect_timeout_ms: 400, breaker: { failure_threshold: 1 } });
  const slow = ['a', 'b'].map((id) => c.read('SELECT pg_sleep(1.5)', [], { ...CALL, identityId: id }));
  expect(await waitFor(sleeping(2), 5000)).toBeGreaterThanOrEqual(0);
  const waiting = c.read('SELECT 1', [], { ...CALL, identityId: 'c' }).catch((e: unknown) => e);
  await sleep(100);
  expect(c.poolStats()).toMatchObject({ size: 2, inUse: 2, waiting: 1 });
  expect(await waiting).toMatchObject({ code: 'source_busy', retryAfterMs: 1000, sourceFailure: false });
  await Promise.all(slow);
  expect(c.breakerState()).toBe('closed');
  expect(c.poolStats()).toMatchObject({ inUse: 0, waiting: 0 });
});

test('a cancelled call keeps its identity slot until its connection is back: cancelling cannot take more connections than the cap', async () => {
  // A server that never answers the statement and ignores cancel requests: the connector cancels
  // CANCEL_ATTEMPTS times, CANCEL_RETRY_MS apart, then drops the connection.
  const fake = await startFakePg({ kind: 'query_silent' });
  const c = new PostgresSourceConnector('fair-fake', { host: '127.0.0.1', port: fake.port, database: 'postgres', reader: { user: 'postgres' }, pool_size: 4, max_concurrent_per_identity: 1, identity_wait_ms: 5_000, connect_timeout_ms: 2_000 });
  open.push(c);
  try {
    const first = new AbortController();
    const firstRead = c.read('SELECT 1', [], { ...CALL, identityId: 'idn_a', signal: first.signal }).catch((e: unknown) => e);
    // Aborted once its statement reached the server (a call aborted while its connection is still being
    // made holds no connection, and gives its slot back at once).
    expect(await waitFor(async () => fake.queries === 1, 5_000)).toBeGreaterThanOrEqual(0);
    expect(c.poolStats()).toMatchObject({ inUse: 1 });
    first.abort();
    expect(await firstRead).toMatchObject({ code: 'cancelled' });
    // The first connection is still being cancelled: the same identity's next call waits for the slot.
    const second = new AbortController();
    const secondRead = c.read('SELECT 2', [], { ...CALL, identityId: 'idn_a', signal: second.signal }).catch((e: unknown) => e);
    // Under load the second call may take more than a few milliseconds to reach the slot queue: wait for it (bounded).
    expect(await waitFor(async () => c.poolStats().identityWaiting === 1, 3_000)).toBeGreaterThanOrEqual(0);
    expect(c.poolStats()).toMatchObject({ inUse: 1, identityWaiting: 1 });
    // Once the first connection is dropped (after the last cancel attempt), the slot passes on.
    expect(await waitFor(async () => c.poolStats().identityWaiting === 0, CANCEL_ATTEMPTS * CANCEL_RETRY_MS + 3_000)).toBeGreaterThanOrEqual(0);
    expect(fake.cancels).toBeGreaterThanOrEqual(CANCEL_ATTEMPTS);
    second.abort();
    expect(await secondRead).toMatchObject({ code: 'cancelled' });
  } finally {
    await c.close();
    await fake.close();
  }
});

test('ReadOptions.poolWait counts the wait for the shared pool, not the wait for the identity\'s own slot (issue 29, admission by capacity)', async () => {
  // pool 2, cap 1: identity a's second read waits for a's own slot (the pool has a free connection);
  // then b and c fill the pool and d's read waits for a connection of the shared pool.
  const c = connector({ pool_size: 2, max_concurrent_per_identity: 1, identity_wait_ms: 5000, connect_timeout_ms: 5000 });
  await c.read('SELECT 1', [], { ...CALL, identityId: 'warm' });
  const first = c.read('SELECT pg_sleep(0.4)', [], { ...CALL, identityId: 'a' });
  expect(await waitFor(sleeping(1), 5000)).toBeGreaterThanOrEqual(0);
  const own = { poolMs: 0 };
  const t0 = performance.now();
  expect((await c.read('SELECT 2 AS n', [], { ...CALL, identityId: 'a', poolWait: own })).rows).toEqual([{ n: 2 }]);
  const ownWait = performance.now() - t0;
  await first;
  // It waited for a's slot (the sleep), but not for the pool: its pool wait is a small part of it.
  expect(ownWait).toBeGreaterThan(200);
  expect(own.poolMs).toBeLessThan(ownWait / 4);

  const slow = ['b', 'c'].map((id) => c.read('SELECT pg_sleep(0.4)', [], { ...CALL, identityId: id }));
  expect(await waitFor(sleeping(2), 5000)).toBeGreaterThanOrEqual(0);
  const shared = { poolMs: 0 };
  const t1 = performance.now();
  expect((await c.read('SELECT 3 AS n', [], { ...CALL, identityId: 'd', poolWait: shared })).rows).toEqual([{ n: 3 }]);
  const sharedWait = performance.now() - t1;
  await Promise.all(slow);
  // d had its own slot at once; nearly all of its wait was for the pool, and it is counted.
  expect(sharedWait).toBeGreaterThan(200);
  expect(shared.poolMs).toBeGreaterThan(sharedWait * 0.75);
  expect(shared.poolMs).toBeLessThanOrEqual(sharedWait);
});
