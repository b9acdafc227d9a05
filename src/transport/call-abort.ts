/**
 * The cancellation of one POST /mcp tools/call (issue 28 item 3): what AbortController gives, at a
 * fraction of its cost. A Node AbortController is an EventTarget built per call (3–5 µs of CPU with
 * its collection, measured in a loop on the reference machine), and every call made one. The
 * pipeline's consumers (capacity queue, fair share, pool checkout, reader, audit wait) only read
 * `aborted` and add and remove `abort` listeners, which this class provides with the same
 * semantics:
 * - `abort(reason)` sets `aborted` and `reason` (default: an `AbortError` DOMException, as Node's)
 *   and calls each listener once, in the order added, with an event `{type: 'abort', target}`;
 *   later calls do nothing;
 * - a listener added twice is held once; `{once: true}` removes it when called (every listener is
 *   called at most once anyway: a signal aborts once); a listener added after the abort is never called;
 * - a listener that throws does not stop the others; its error is re-thrown on a later tick, where
 *   it reaches the process's uncaught-exception handling, as an EventTarget listener's error does.
 * Its `signal` is typed AbortSignal for the consumers' signatures; nothing on this path hands it to
 * a Node API that checks the class.
 */

/** The abort event handed to listeners. */
interface CallAbortEvent {
  type: 'abort';
  target: CallAbort;
}

type Listener = ((ev: CallAbortEvent) => void) | { handleEvent(ev: CallAbortEvent): void };

/** One call's cancellation: `signal` for the pipeline, `abort` for the transport (client gone, shutdown). */
export class CallAbort {
  aborted = false;
  reason: unknown = undefined;
  private listeners: Listener[] | null = null;

  /** This object as the AbortSignal the pipeline's signatures take (see the module doc for what it supports). */
  get signal(): AbortSignal {
    return this as unknown as AbortSignal;
  }

  /** Adds an `abort` listener (other event types are ignored: nothing else is ever dispatched). */
  addEventListener(type: string, listener: Listener | null, _opts?: unknown): void {
    if (type !== 'abort' || !listener || this.aborted) return;
    const ls = (this.listeners ??= []);
    if (!ls.includes(listener)) ls.push(listener);
  }

  /** Removes an `abort` listener added before. */
  removeEventListener(type: string, listener: Listener | null, _opts?: unknown): void {
    const ls = this.listeners;
    if (type !== 'abort' || !ls || !listener) return;
    const i = ls.indexOf(listener);
    if (i >= 0) ls.splice(i, 1);
  }

  /** Throws `reason` when aborted (AbortSignal.throwIfAborted). */
  throwIfAborted(): void {
    if (this.aborted) throw this.reason;
  }

  /** Aborts once with `reason` and calls the listeners (see the module doc); later calls do nothing. */
  abort(reason?: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason === undefined ? new DOMException('This operation was aborted', 'AbortError') : reason;
    const ls = this.listeners;
    this.listeners = null;
    if (!ls) return;
    const ev: CallAbortEvent = { type: 'abort', target: this };
    for (const l of ls) {
      try {
        if (typeof l === 'function') l.call(this, ev);
        else l.handleEvent(ev);
      } catch (err) {
        process.nextTick(() => {
          throw err;
        });
      }
    }
  }
}
