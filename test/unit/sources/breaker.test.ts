/**
 * The source breaker opens only on consecutive source-health failures (issue 10 Build 4), never on
 * an error-rate rule (the opossum breaker it replaced had one, disabled): a long call that started before the rolling window and failed in it
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

  it('half-open: one probe at a time; a counted failure re-opens, any other outcome closes; shut down, it refuses locally', async () => {
    const states: string[] = [];
    const b = new SourceBreaker('t', 1, 30, (e) => (e instanceof SourceError ? e : healthFailure()), undefined, (s) => states.push(s));
    try {
      await expect(b.run(() => Promise.reject(healthFailure()))).rejects.toMatchObject({ sourceFailure: true });
      expect(b.state()).toBe('open');
      await sleep(60);
      expect(b.state()).toBe('half_open');
      let finishProbe!: (v: number) => void;
      const probe = b.run(() => new Promise<number>((r) => (finishProbe = r)));
      await expect(b.run(() => Promise.resolve(2))).rejects.toMatchObject({ code: 'circuit_open' });
      finishProbe(1);
      await expect(probe).resolves.toBe(1);
      expect(b.state()).toBe('closed');
      await expect(b.run(() => Promise.reject(healthFailure()))).rejects.toMatchObject({ sourceFailure: true });
      await sleep(60);
      await expect(b.run(() => Promise.reject(healthFailure()))).rejects.toMatchObject({ sourceFailure: true });
      expect(b.state()).toBe('open');
      await sleep(60);
      await expect(b.run(() => Promise.reject(new SourceError('execution_failed', { sourceFailure: false, sqlState: '22012' })))).rejects.toMatchObject({ sqlState: '22012' });
      expect(b.state()).toBe('closed');
      // Anything but a SourceError is mapped for the caller, and counted only as what it was (not a source failure).
      await expect(b.run(() => Promise.reject(new Error('raw driver text')))).rejects.toMatchObject({ code: 'execution_failed', sourceFailure: true });
      expect(b.state()).toBe('closed');
      expect(states).toEqual(['open', 'half_open', 'closed', 'open', 'half_open', 'open', 'half_open', 'closed']);
    } finally {
      b.shutdown();
    }
    await expect(b.run(() => Promise.resolve(1))).rejects.toMatchObject({ code: 'execution_failed', sourceFailure: false, message: 'tool execution failed: the source connector is closed' });
  });
});
