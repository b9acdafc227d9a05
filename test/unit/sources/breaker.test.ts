/**
 * The source breaker opens only on consecutive source-health failures (issue 10 Build 4), never on
 * opossum's own error-rate rule: a long call that started before the rolling window and failed in it
 * (failures/fires = 1/0) must not open the circuit for everyone (red-team F2).
 */
import { SourceBreaker } from '../../../src/sources/postgres/breaker';
import { SourceError } from '../../../src/sources/postgres/errors';

const healthFailure = () => new SourceError('execution_failed', { sourceFailure: true });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('SourceBreaker', () => {
  it('stays closed when one long call fails after its rolling window moved on, and opens at the threshold', async () => {
    const states: string[] = [];
    const b = new SourceBreaker('t', 3, 60_000, (e) => (e instanceof SourceError ? e : healthFailure()), undefined, (s) => states.push(s), 200);
    try {
      await expect(b.run(() => sleep(450).then(() => Promise.reject(healthFailure())))).rejects.toMatchObject({ code: 'execution_failed' });
      expect({ state: b.state(), states }).toEqual({ state: 'closed', states: [] });
      await expect(b.run(() => Promise.reject(healthFailure()))).rejects.toMatchObject({ code: 'execution_failed' });
      expect(b.state()).toBe('closed');
      await expect(b.run(() => Promise.reject(healthFailure()))).rejects.toMatchObject({ code: 'execution_failed' });
      expect({ state: b.state(), states }).toEqual({ state: 'open', states: ['open'] });
      await expect(b.run(() => Promise.resolve(1))).rejects.toMatchObject({ code: 'circuit_open' });
    } finally {
      b.shutdown();
    }
  });

  it('never counts a statement-caused failure, however many', async () => {
    const b = new SourceBreaker('t', 2, 60_000, (e) => (e instanceof SourceError ? e : healthFailure()), undefined, undefined, 200);
    try {
      for (let i = 0; i < 10; i++) await expect(b.run(() => Promise.reject(new SourceError('execution_failed', { sourceFailure: false, sqlState: '22012' })))).rejects.toMatchObject({ sqlState: '22012' });
      expect(b.state()).toBe('closed');
    } finally {
      b.shutdown();
    }
  });
});

/**
 * The breaker's state machine as opossum runs it, pinned before h28s ran closed-circuit calls
 * without opossum's fire() (issue 28): these pass on main (every call through fire()) and must pass
 * unchanged after.
 */
describe('SourceBreaker state machine (pinned)', () => {
  const mapped = new SourceError('execution_failed', { sourceFailure: true, message: 'mapped' });
  const statementFailure = () => new SourceError('execution_failed', { sourceFailure: false, sqlState: '22012' });
  function deferred<T>(): { promise: Promise<T>; resolve(v: T): void; reject(e: unknown): void } {
    let resolve!: (v: T) => void;
    let reject!: (e: unknown) => void;
    const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
    return { promise, resolve, reject };
  }
  async function until(b: SourceBreaker, state: string): Promise<void> {
    for (let i = 0; i < 400 && b.state() !== state; i++) await sleep(5);
    expect(b.state()).toBe(state);
  }
  const make = (threshold: number, resetMs: number, states: string[]) => new SourceBreaker('t', threshold, resetMs, () => mapped, undefined, (s) => states.push(s));
  /** Runs `body` on a new breaker (threshold, reset ms) and the states it reported, then shuts the breaker down. */
  async function withBreaker(threshold: number, resetMs: number, body: (b: SourceBreaker, states: string[]) => Promise<void>): Promise<void> {
    const states: string[] = [];
    const b = make(threshold, resetMs, states);
    try {
      await body(b, states);
    } finally {
      b.shutdown();
    }
  }
  const outcome = (p: Promise<unknown>) => p.then((v) => ({ ok: v }), (e: SourceError) => ({ code: e.code, message: e.message, sourceFailure: e.sourceFailure }));

  it('opens after exactly N consecutive source failures; a success or a statement failure between resets the count', () =>
    withBreaker(3, 60_000, async (b, states) => {
    const fail = () => b.run(() => Promise.reject(healthFailure()));
    const got: unknown[] = [];
    got.push(await outcome(fail()), await outcome(fail()), await outcome(b.run(() => Promise.resolve('a'))));
    got.push(await outcome(fail()), await outcome(fail()), await outcome(b.run(() => Promise.reject(statementFailure()))));
    got.push(await outcome(fail()), await outcome(fail()));
    expect({ state: b.state(), states }).toEqual({ state: 'closed', states: [] });
    got.push(await outcome(fail()));
    expect({ state: b.state(), states }).toEqual({ state: 'open', states: ['open'] });
    let ran = false;
    got.push(await outcome(b.run(() => ((ran = true), Promise.resolve('b')))));
    expect({ ran, codes: got.map((g) => (g as { code?: string; ok?: string }).code ?? (g as { ok: string }).ok) }).toEqual({
      ran: false,
      codes: ['execution_failed', 'execution_failed', 'a', 'execution_failed', 'execution_failed', 'execution_failed', 'execution_failed', 'execution_failed', 'execution_failed', 'circuit_open'],
    });
    }));

  it('half-open lets one probe through, refuses the others while it runs, and closes when it succeeds', () =>
    withBreaker(2, 40, async (b, states) => {
    for (let i = 0; i < 2; i++) await outcome(b.run(() => Promise.reject(healthFailure())));
    expect(b.state()).toBe('open');
    await until(b, 'half_open');
    const probe = deferred<string>();
    let probes = 0;
    const first = b.run(() => (probes++, probe.promise));
    const second = await outcome(b.run(() => (probes++, Promise.resolve('second'))));
    expect({ probes, second, state: b.state() }).toEqual({ probes: 1, second: { code: 'circuit_open', message: expect.any(String), sourceFailure: expect.anything() }, state: 'half_open' });
    probe.resolve('probe');
    expect(await outcome(first)).toEqual({ ok: 'probe' });
    expect({ state: b.state(), states }).toEqual({ state: 'closed', states: ['open', 'half_open', 'closed'] });
    expect(await outcome(b.run(() => Promise.resolve('after')))).toEqual({ ok: 'after' });
    }));

  it('a probe that fails on the source opens the circuit again; a probe the statement failed closes it', () =>
    withBreaker(1, 40, async (b, states) => {
    await outcome(b.run(() => Promise.reject(healthFailure())));
    await until(b, 'half_open');
    expect(await outcome(b.run(() => Promise.reject(healthFailure())))).toMatchObject({ code: 'execution_failed', sourceFailure: true });
    expect(b.state()).toBe('open');
    await until(b, 'half_open');
    expect(await outcome(b.run(() => Promise.reject(statementFailure())))).toMatchObject({ code: 'execution_failed', sourceFailure: false });
    expect({ state: b.state(), states }).toEqual({ state: 'closed', states: ['open', 'half_open', 'open', 'half_open', 'closed'] });
    }));

  it('a call begun while closed settles the half-open circuit as a probe would: success closes it, a source failure opens it', () =>
    withBreaker(1, 40, async (b, states) => {
    const early = deferred<string>();
    const late = b.run(() => early.promise);
    await outcome(b.run(() => Promise.reject(healthFailure())));
    await until(b, 'half_open');
    early.resolve('early');
    expect(await outcome(late)).toEqual({ ok: 'early' });
    expect({ state: b.state(), states }).toEqual({ state: 'closed', states: ['open', 'half_open', 'closed'] });

    const early2 = deferred<string>();
    const late2 = b.run(() => early2.promise);
    const whileOpen = deferred<string>();
    const late3 = b.run(() => whileOpen.promise);
    await outcome(b.run(() => Promise.reject(healthFailure())));
    expect(b.state()).toBe('open');
    whileOpen.resolve('while open'); // a success while open changes nothing
    expect(await outcome(late3)).toEqual({ ok: 'while open' });
    expect(b.state()).toBe('open');
    await until(b, 'half_open');
    early2.reject(healthFailure());
    expect(await outcome(late2)).toMatchObject({ code: 'execution_failed', sourceFailure: true });
    expect({ state: b.state(), states }).toEqual({ state: 'open', states: ['open', 'half_open', 'closed', 'open', 'half_open', 'open'] });
    }));

  it('a failure that is not a SourceError is mapped and never counted; a synchronous throw is a rejection; after shutdown nothing runs', async () => {
    const states: string[] = [];
    const b = make(1, 60_000, states);
    const thrown = await outcome(b.run(() => Promise.reject(new Error('raw driver text'))));
    expect({ thrown, state: b.state() }).toEqual({ thrown: { code: 'execution_failed', message: 'mapped', sourceFailure: true }, state: 'closed' });
    let sync: unknown;
    const p = (() => {
      try {
        return b.run(() => {
          throw healthFailure();
        });
      } catch (err) {
        sync = err;
        return null;
      }
    })();
    expect({ sync, rejected: p && (await outcome(p)), state: b.state(), states }).toEqual({ sync: undefined, rejected: { code: 'execution_failed', message: expect.any(String), sourceFailure: true }, state: 'open', states: ['open'] });
    b.shutdown();
    let ran = false;
    expect(await outcome(b.run(() => ((ran = true), Promise.resolve(1))))).toMatchObject({ code: 'execution_failed', sourceFailure: false });
    expect(ran).toBe(false);
  });
});
