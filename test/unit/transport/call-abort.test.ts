/**
 * CallAbort (src/transport/call-abort.ts, issue 28 item 3) behaves as AbortController does for what
 * the pipeline uses: `aborted`, listeners called once in order with an `abort` event, duplicates held
 * once, removal, nothing after the abort and the default reason. (A throwing listener's error is
 * re-thrown on a later tick, which jest reports as the test's failure, so it is not exercised here.)
 */
import { CallAbort } from '../../../src/transport/call-abort';

type Side = { name: string; make: () => { signal: AbortSignal; abort(reason?: unknown): void } };
const sides: Side[] = [
  { name: 'AbortController', make: () => new AbortController() },
  { name: 'CallAbort', make: () => new CallAbort() },
];

describe.each(sides)('$name', ({ make }) => {
  test('listeners run once, in order, with an abort event; duplicates once; removed ones never; later abort() does nothing', () => {
    const c = make();
    const seen: string[] = [];
    const a = (ev: Event) => seen.push(`a:${ev.type}:${ev.target === c.signal}`);
    const b = () => seen.push('b');
    const gone = () => seen.push('gone');
    c.signal.addEventListener('abort', a, { once: true });
    c.signal.addEventListener('abort', b);
    c.signal.addEventListener('abort', b);
    c.signal.addEventListener('abort', gone, { once: true });
    c.signal.removeEventListener('abort', gone);
    expect(c.signal.aborted).toBe(false);
    c.abort('client closed the stream');
    c.abort('again');
    expect({ aborted: c.signal.aborted, reason: c.signal.reason, seen }).toEqual({ aborted: true, reason: 'client closed the stream', seen: ['a:abort:true', 'b'] });
    c.signal.addEventListener('abort', () => seen.push('late'));
    expect(seen).toHaveLength(2);
    expect(() => c.signal.throwIfAborted()).toThrow();
  });

  test('the default reason is an AbortError', () => {
    const c = make();
    c.abort();
    expect((c.signal.reason as Error).name).toBe('AbortError');
  });
});
