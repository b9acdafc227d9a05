/**
 * GroupCommitAuditSink's decisions, with a scripted pool (no database): one statement per batch,
 * events arriving during a commit share the next one, a caller is answered only when its batch has
 * committed, and an event whose caller was told "not committed" is never written afterwards.
 */
import type pg from 'pg';
import { AuditUnavailableError, GroupCommitAuditSink } from '../../../src/control/audit';
import { toolCallEvent } from '../../helpers/audit-events';

interface Call {
  text: string;
  requestIds: string[];
  finish(err?: Error): void;
}

/** A pool whose every query waits until the test finishes it. */
function scriptedPool(): { pool: pg.Pool; calls: Call[] } {
  const calls: Call[] = [];
  const pool = {
    query(text: string, params?: unknown[]) {
      const json = params ? String(params[0]) : /interlock_audit_append\('(.*)'::jsonb\)/s.exec(text)?.[1].replace(/''/g, "'") ?? '[]';
      return new Promise((resolve, reject) => {
        calls.push({
          text,
          requestIds: (JSON.parse(json) as Array<{ request_id: string }>).map((r) => r.request_id),
          finish: (err) => (err ? reject(err) : resolve([{ rows: [] }, { rows: [{ b: String(calls.length) }] }])),
        });
      });
    },
  } as unknown as pg.Pool;
  return { pool, calls };
}

const event = (requestId: string) => toolCallEvent(requestId, { action: undefined, row_count: undefined });

const tick = () => new Promise((r) => setImmediate(r));

test('concurrency 1: one statement per event, each under a statement_timeout within the bound', async () => {
  const { pool, calls } = scriptedPool();
  const sink = new GroupCommitAuditSink(pool, undefined, { commitTimeoutMs: 2000 });
  const p = sink.record(event('r1'));
  await tick();
  expect(calls).toHaveLength(1);
  expect(calls[0].text).toMatch(/^SET LOCAL statement_timeout = (\d+); SELECT interlock_audit_append\(/);
  expect(Number(/= (\d+);/.exec(calls[0].text)![1])).toBeLessThanOrEqual(2000);
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
  const sink = new GroupCommitAuditSink(pool, undefined, { commitTimeoutMs: 2000 });
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
  const { pool, calls } = scriptedPool();
  const sink = new GroupCommitAuditSink(pool, undefined, { commitTimeoutMs: 2000 });
  const p = sink.record(event('x'));
  await tick();
  calls[0].finish(Object.assign(new Error('connection terminated'), { code: '57P01' }));
  await expect(p).rejects.toBeInstanceOf(AuditUnavailableError);
  const q = sink.record(event('y'));
  await tick();
  calls[1].finish();
  await q;
});

test('past the bound an event still waiting is withdrawn: answered unavailable and never written', async () => {
  jest.useFakeTimers();
  try {
    const { pool, calls } = scriptedPool();
    const sink = new GroupCommitAuditSink(pool, undefined, { commitTimeoutMs: 500 });
    const stuck = sink.record(event('stuck'));
    const waiting = sink.record(event('waiting'));
    const outcomes = [stuck, waiting].map((p) => p.then(() => 'ok', (e) => (e instanceof AuditUnavailableError ? 'unavailable' : 'other')));
    await Promise.resolve();
    expect(calls.map((c) => c.requestIds)).toEqual([['stuck']]);
    jest.advanceTimersByTime(501);
    // The waiting event is answered unavailable at once; the stuck batch is settled by its own statement (timed out there).
    expect(await outcomes[1]).toBe('unavailable');
    calls[0].finish(Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' }));
    expect(await outcomes[0]).toBe('unavailable');
    await Promise.resolve();
    expect(calls).toHaveLength(1); // "waiting" was never sent
  } finally {
    jest.useRealTimers();
  }
});
