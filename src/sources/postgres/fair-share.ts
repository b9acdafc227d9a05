/**
 * Fair sharing of a source (issue 10, Build 5): a per-identity cap on concurrent statements, with a
 * bounded wait beyond it and then a `concurrency_limited` refusal carrying a retry hint. One agent
 * can then hold at most its cap of the source's pooled connections; the others stay for everyone else.
 */
import { SourceError } from './errors';

/** Retry hint of a `concurrency_limited` refusal (ms). */
export const CONCURRENCY_RETRY_MS = 1_000;
/**
 * Waiters allowed per identity for each slot of its cap (beyond them a call is refused at once).
 * Generous: the wait itself is bounded in time, and each waiter is an HTTP request the rate limit
 * already admitted; this only bounds the queue's memory.
 */
export const WAITERS_PER_SLOT = 64;

/** What to do with a call: run it now, queue it for a bounded time, or refuse it at once. Pure. */
export function decideSlot(running: number, waiting: number, cap: number): 'run' | 'wait' | 'refuse' {
  if (running < cap) return 'run';
  if (waiting < cap * WAITERS_PER_SLOT) return 'wait';
  return 'refuse';
}

interface Waiter {
  grant(): void;
}

/** Per-identity slots of one source. */
export class IdentitySlots {
  private readonly running = new Map<string, number>();
  private readonly queues = new Map<string, Waiter[]>();

  /**
   * @param cap statements one identity may run at once (≥ 1)
   * @param waitMs longest wait for a slot (ms) before the call is refused
   */
  constructor(
    private readonly cap: number,
    private readonly waitMs: number,
  ) {}

  /**
   * Takes one of `identityId`'s slots. Resolves with the function that gives it back (call it once
   * the statement ended); rejects with SourceError `concurrency_limited` (retryAfterMs set) when no
   * slot freed within waitMs, or `cancelled` when `signal` aborts while waiting.
   */
  acquire(identityId: string, signal?: AbortSignal): Promise<() => void> {
    const now = this.tryAcquire(identityId);
    if (now) return Promise.resolve(now);
    const running = this.running.get(identityId) ?? 0;
    const queue = this.queues.get(identityId) ?? [];
    const decision = decideSlot(running, queue.length, this.cap);
    if (decision === 'run') {
      this.running.set(identityId, running + 1);
      return Promise.resolve(this.releaser(identityId));
    }
    if (decision === 'refuse' || this.waitMs === 0) return Promise.reject(limited());
    return new Promise<() => void>((resolve, reject) => {
      const leave = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        const q = this.queues.get(identityId);
        if (!q) return;
        const at = q.indexOf(waiter);
        if (at >= 0) q.splice(at, 1);
        if (q.length === 0) this.queues.delete(identityId);
      };
      const waiter: Waiter = {
        grant: () => {
          leave();
          resolve(this.releaser(identityId));
        },
      };
      const onAbort = () => {
        leave();
        reject(new SourceError('cancelled'));
      };
      const timer = setTimeout(() => {
        leave();
        reject(limited());
      }, this.waitMs);
      timer.unref?.();
      signal?.addEventListener('abort', onAbort, { once: true });
      queue.push(waiter);
      this.queues.set(identityId, queue);
    });
  }

  /**
   * Takes one of `identityId`'s slots when one is free now (acquire's 'run' decision, without a
   * promise: issue 28 item 3): the function that gives it back, or null when acquire must decide.
   */
  tryAcquire(identityId: string): (() => void) | null {
    const running = this.running.get(identityId) ?? 0;
    if (decideSlot(running, this.queues.get(identityId)?.length ?? 0, this.cap) !== 'run') return null;
    this.running.set(identityId, running + 1);
    return this.releaser(identityId);
  }

  /** Identities waiting for a slot, summed over identities. */
  waiting(): number {
    let n = 0;
    for (const q of this.queues.values()) n += q.length;
    return n;
  }

  private releaser(identityId: string): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.queues.get(identityId)?.[0];
      if (next) {
        next.grant(); // the slot passes to the next waiter: `running` is unchanged
        return;
      }
      const n = (this.running.get(identityId) ?? 1) - 1;
      if (n <= 0) this.running.delete(identityId);
      else this.running.set(identityId, n);
    };
  }
}

function limited(): SourceError {
  return new SourceError('concurrency_limited', { retryAfterMs: CONCURRENCY_RETRY_MS, sourceFailure: false });
}
