/**
 * GroupCommitAuditSink's decisions, with a scripted pool (no database): one statement per batch,
 * events arriving during a commit share the next one, a caller is answered only when its batch has
 * committed, and an event whose caller was told "not committed" is never written afterwards.
 */
import type pg from 'pg';
import { auditSessionTimeoutMs, AuditUnavailableError, GroupCommitAuditSink, OVERLAP_FACTOR, OVERLAP_FIRST_MS } from '../../../src/audit/writer';
import { AuditAppend, setSessionStatementTimeout } from '../../../src/audit/append';
import { toolCallEvent } from '../../helpers/audit-events';

interface Call {
  /** The statement_timeout the batch runs under (ms). */
  timeoutMs: number | null;
  requestIds: string[];
  finish(err?: Error): void;
}

/**
 * A pool whose every batch (an AuditAppend submitted on a pooled client) waits until the test
 * finishes it: with the append's row and ReadyForQuery, or with an error, as pg delivers them.
 */
function scriptedPool(): { pool: pg.Pool; calls: Call[]; released: Array<Error | undefined> } {
  const calls: Call[] = [];
  const released: Array<Error | undefined> = [];
  const client = {
    query(sub: AuditAppend) {
      expect(sub).toBeInstanceOf(AuditAppend);
      calls.push({
        timeoutMs: sub.timeoutMs,
        requestIds: requestIdsOf(sub),
        finish: (err) => {
          if (err) return sub.handleError(err);
          sub.handleRowDescription();
          sub.handleDataRow({ fields: [String(calls.length)] });
          sub.handleReadyForQuery();
        },
      });
    },
    release: (err?: Error) => void released.push(err),
    on: () => undefined,
    removeListener: () => undefined,
  };
  // A new chain's genesis reads the trail's newest heads first (chain.ts): none here.
  const pool = { totalCount: 1, connect: async () => client, query: async () => ({ rows: [] }) } as unknown as pg.Pool;
  return { pool, calls, released };
}

/** The request ids of a submitted batch: in the VALUES form (≤ VALUES_MAX_EVENTS events) the third of each event's twenty parameters from $9 on; in the unnest form the request_id column ($11, an array literal of quoted ids). */
function requestIdsOf(sub: AuditAppend): string[] {
  if (typeof sub.json === 'string') return (JSON.parse(sub.json) as Array<{ request_id: string }>).map((r) => r.request_id);
  const values = sub.json.values;
  if (sub.json.statement.name !== 'interlock_audit_append_v3') return values.slice(8).filter((_, i) => i % 20 === 2) as string[];
  const lit = values[10] as string;
  return lit === '{}' ? [] : lit.slice(2, -2).split('","');
}

const event = (requestId: string) => toolCallEvent(requestId, { action: undefined, row_count: undefined });

/** Lets the writer run: a new chain's genesis reads its anchors before it submits (several turns). */
const tick = async () => {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
};
/** The same with fake timers (microtasks only). */
const microtasks = async () => {
  for (let i = 0; i < 20; i++) await Promise.resolve();
};

test('on a pool whose connections start with a statement_timeout, a batch with at least that much time left sends no set_config; one with less sends its own', async () => {
  const { pool, calls } = scriptedPool();
  setSessionStatementTimeout(pool, auditSessionTimeoutMs(2000));
  expect(auditSessionTimeoutMs(2000)).toBe(1950);
  expect(auditSessionTimeoutMs(800)).toBe(750);
  expect(auditSessionTimeoutMs(1)).toBe(1);
  const sink = new GroupCommitAuditSink(pool, undefined, { commitTimeoutMs: 2000, lanes: 1 });
  const first = sink.record(event('r1'));
  await tick();
  expect(calls).toHaveLength(1);
  expect(calls[0].timeoutMs).toBeNull(); // the session's 1,950 ms end the append before the 2,000 ms bound
  // r2 waits in the queue 300 ms behind r1's batch: its batch has < 1,950 ms left and sets its own timeout.
  const second = sink.record(event('r2'));
  await new Promise((r) => setTimeout(r, 300));
  calls[0].finish();
  await first;
  await tick();
  expect(calls).toHaveLength(2);
  expect(calls[1].timeoutMs).toBeGreaterThan(0);
  expect(calls[1].timeoutMs).toBeLessThan(1950);
  calls[1].finish();
  await second;
  expect(calls.map((c) => c.requestIds)).toEqual([['r1'], ['r2']]);
});

test('concurrency 1: one statement per event, each under a statement_timeout within the bound', async () => {
  const { pool, calls } = scriptedPool();
  const sink = new GroupCommitAuditSink(pool, undefined, { commitTimeoutMs: 2000, lanes: 1 });
  const p = sink.record(event('r1'));
  await tick();
  expect(calls).toHaveLength(1);
  expect(calls[0].timeoutMs).toBeGreaterThan(1900);
  expect(calls[0].timeoutMs).toBeLessThanOrEqual(2000);
  let settled = false;
  void p.then(() => (settled = true));
  await tick();
  expect(settled).toBe(false); // not answered before the commit
  calls[0].finish();
  await p;
  expect(calls[0].requestIds).toEqual(['r1']);
});

test('events that arrive during a commit share the next one', async () => {
  const { pool, calls } = scriptedPool();
  const sink = new GroupCommitAuditSink(pool, undefined, { commitTimeoutMs: 2000, lanes: 1 });
  const first = sink.record(event('a'));
  await tick();
  const rest = ['b', 'c', 'd', 'e'].map((id) => sink.record(event(id)));
  await tick();
  expect(calls).toHaveLength(1);
  calls[0].finish();
  await first;
  await tick();
  expect(calls).toHaveLength(2);
  expect(calls[1].requestIds).toEqual(['b', 'c', 'd', 'e']);
  calls[1].finish();
  await Promise.all(rest);
});

test('a failed batch rejects each of its callers with AuditUnavailableError; the next batch is tried again', async () => {
  const { pool, calls, released } = scriptedPool();
  const sink = new GroupCommitAuditSink(pool, undefined, { commitTimeoutMs: 2000, lanes: 1 });
  const failures = [
    Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014', severity: 'ERROR' }),
    Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01', severity: 'FATAL' }),
    new Error('Connection terminated unexpectedly'),
  ];
  for (const [i, err] of failures.entries()) {
    const p = sink.record(event(`x${i}`));
    await tick();
    calls[i].finish(err);
    await expect(p).rejects.toBeInstanceOf(AuditUnavailableError);
  }
  const r = sink.record(event('z'));
  await tick();
  calls[3].finish();
  await r;
  expect(calls.map((c) => c.requestIds)).toEqual([['x0'], ['x1'], ['x2'], ['z']]);
  // A statement error leaves the connection usable; a FATAL error or a lost connection discards it.
  expect(released.map((e) => e?.message)).toEqual([undefined, 'terminating connection due to administrator command', 'Connection terminated unexpectedly', undefined]);
});

test('past the bound an event still waiting is withdrawn: answered unavailable and never written', async () => {
  jest.useFakeTimers();
  try {
    const { pool, calls } = scriptedPool();
    const sink = new GroupCommitAuditSink(pool, undefined, { commitTimeoutMs: 500, lanes: 1 });
    const stuck = sink.record(event('stuck'));
    const waiting = sink.record(event('waiting'));
    const outcomes = [stuck, waiting].map((p) => p.then(() => 'ok', (e) => (e instanceof AuditUnavailableError ? 'unavailable' : 'other')));
    await microtasks();
    expect(calls.map((c) => c.requestIds)).toEqual([['stuck']]);
    jest.advanceTimersByTime(501);
    // The waiting event is answered unavailable at once; the stuck batch is settled by its own statement (timed out there).
    expect(await outcomes[1]).toBe('unavailable');
    calls[0].finish(Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' }));
    expect(await outcomes[0]).toBe('unavailable');
    await microtasks();
    expect(calls).toHaveLength(1); // "waiting" was never sent
  } finally {
    jest.useRealTimers();
  }
});

test('two lanes, overlapAfterMs 0: two batches in flight at once, each caller answered when its own batch commits, in either order', async () => {
  const { pool, calls } = scriptedPool();
  const sink = new GroupCommitAuditSink(pool, undefined, { commitTimeoutMs: 2000, lanes: 2, overlapAfterMs: 0 });
  const a = sink.record(event('a'));
  await tick();
  const b = sink.record(event('b'));
  await tick();
  const rest = ['c', 'd'].map((id) => sink.record(event(id)));
  await tick();
  // Both lanes busy: a and b in flight, c and d wait for the first lane to come back.
  expect(calls.map((c) => c.requestIds)).toEqual([['a'], ['b']]);
  expect(sink.pendingEvents()).toBe(4);
  const done: string[] = [];
  void a.then(() => done.push('a'));
  void b.then(() => done.push('b'));
  calls[1].finish();
  await tick();
  expect(done).toEqual(['b']); // a's batch has not committed: a is not answered
  expect(calls.map((c) => c.requestIds)).toEqual([['a'], ['b'], ['c', 'd']]);
  calls[0].finish();
  calls[2].finish();
  await Promise.all([a, b, ...rest]);
  expect(done).toEqual(['b', 'a']);
  expect(sink.pendingEvents()).toBe(0);
});

test('laneStartEvents 2: while one lane commits, the second starts only when two events wait; with no batch in flight one event starts at once', async () => {
  const { pool, calls } = scriptedPool();
  const sink = new GroupCommitAuditSink(pool, undefined, { commitTimeoutMs: 2000, lanes: 2, laneStartEvents: 2, overlapAfterMs: 0 });
  const a = sink.record(event('a'));
  await tick();
  expect(calls.map((c) => c.requestIds)).toEqual([['a']]); // nothing in flight: at once
  const b = sink.record(event('b'));
  await tick();
  expect(calls).toHaveLength(1); // one waits while a commits: the second lane stays idle
  const c = sink.record(event('c'));
  await tick();
  expect(calls.map((x) => x.requestIds)).toEqual([['a'], ['b', 'c']]); // two wait: the second lane takes both
  const d = sink.record(event('d'));
  await tick();
  expect(calls).toHaveLength(2); // both lanes busy
  calls[0].finish();
  await a;
  await tick();
  expect(calls).toHaveLength(2); // a lane came back, but b and c are still in flight and only d waits
  calls[1].finish();
  await Promise.all([b, c]);
  await tick();
  expect(calls.map((x) => x.requestIds)).toEqual([['a'], ['b', 'c'], ['d']]); // nothing in flight: d goes at once
  calls[2].finish();
  await Promise.all([b, c, d]);
  expect(sink.pendingEvents()).toBe(0);
});

test("overlap 'auto' (the default): while a batch commits in its typical time the second lane stays idle and the waiting events share the first lane's next batch; a batch in flight past twice the typical batch lets the second lane start beside it", async () => {
  jest.useFakeTimers();
  try {
    const { pool, calls } = scriptedPool();
    const sink = new GroupCommitAuditSink(pool, undefined, { commitTimeoutMs: 2000, lanes: 2 });
    const a = sink.record(event('a'));
    await microtasks();
    expect(calls.map((c) => c.requestIds)).toEqual([['a']]); // nothing in flight: at once
    // No batch has settled yet: a batch counts as stalled after OVERLAP_FIRST_MS.
    const b = sink.record(event('b'));
    await microtasks();
    expect(calls).toHaveLength(1);
    jest.advanceTimersByTime(OVERLAP_FIRST_MS + 1);
    await microtasks();
    expect(calls.map((c) => c.requestIds)).toEqual([['a'], ['b']]); // a stalled: b's batch beside it
    // Both batches take 4 ms: the typical batch is now 4 ms (the first sample, then a mean of 4 and 4).
    jest.advanceTimersByTime(4 - OVERLAP_FIRST_MS - 1);
    calls[0].finish();
    calls[1].finish();
    await Promise.all([a, b]);
    expect(sink.typicalBatchMs).toBeGreaterThan(3.5);
    expect(sink.typicalBatchMs).toBeLessThan(4.5);
    const c = sink.record(event('c'));
    await microtasks();
    const rest = ['d', 'e'].map((id) => sink.record(event(id)));
    await microtasks();
    expect(calls).toHaveLength(3); // c commits, d and e wait: c is not stalled before 2 × 4 ms
    jest.advanceTimersByTime(OVERLAP_FACTOR * 4 - 2);
    await microtasks();
    expect(calls).toHaveLength(3);
    // c returns in time: its lane takes d and e together, and the second lane was never used.
    calls[2].finish();
    await c;
    await microtasks();
    expect(calls.map((x) => x.requestIds)).toEqual([['a'], ['b'], ['c'], ['d', 'e']]);
    // While d and e commit, f waits; past twice the typical batch the second lane takes it.
    const f = sink.record(event('f'));
    await microtasks();
    expect(calls).toHaveLength(4);
    jest.advanceTimersByTime(OVERLAP_FACTOR * sink.typicalBatchMs + 1);
    await microtasks();
    expect(calls.map((x) => x.requestIds)).toEqual([['a'], ['b'], ['c'], ['d', 'e'], ['f']]);
    calls[3].finish();
    calls[4].finish();
    await Promise.all([...rest, f]);
    expect(sink.pendingEvents()).toBe(0);
  } finally {
    jest.useRealTimers();
  }
});

test('close waits for the batches in flight, then seals each lane that has a chain (a batch of mark seal, no events)', async () => {
  const { pool, calls } = scriptedPool();
  const sink = new GroupCommitAuditSink(pool, undefined, { commitTimeoutMs: 2000, lanes: 2 });
  const a = sink.record(event('a'));
  await tick();
  let closed = false;
  const closing = sink.close().then(() => (closed = true));
  await tick();
  expect(closed).toBe(false);
  calls[0].finish();
  await a;
  await tick();
  // One lane had a chain: one seal, whose mark is the statement's seventh parameter.
  expect(calls).toHaveLength(2);
  const seal = (calls[1] as Call & { sub?: AuditAppend }).requestIds;
  expect(seal).toEqual([]);
  calls[1].finish();
  await closing;
  expect(closed).toBe(true);
});
