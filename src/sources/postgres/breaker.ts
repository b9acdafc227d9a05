/**
 * A source's circuit breaker (issue 5; issue 10 Build 4): opens after `failureThreshold`
 * consecutive source failures and refuses at once (`circuit_open`) until `resetTimeout` has passed,
 * then lets one half-open probe through. Only SourceErrors with `sourceFailure` set count, and
 * errors.ts sets it only for failures health.ts says are the source's (never the statement's own).
 *
 * Its own small state machine (issue 28 item 3): it replaced an opossum CircuitBreaker whose
 * rolling statistics, events and extra promise per call cost every read ~2–3 µs of CPU for rules
 * this breaker never used (its error-rate rule was disabled). The transitions are opossum's as this
 * breaker configured them: any settled call that is not a counted failure resets the count (and, when
 * half-open, closes the circuit); a counted failure while half-open re-opens it; the reset timer is
 * unref'd; after `shutdown` every call rejects with a local failure.
 */
import type { Logger } from 'pino';
import { SourceError, localFailure } from './errors';

/** Circuit state of a source. */
export type BreakerState = 'closed' | 'open' | 'half_open';

/** A failure the breaker counts: a SourceError the health rules marked as the source's own. */
const counted = (err: unknown): boolean => err instanceof SourceError && err.sourceFailure;

/** One source's breaker. */
export class SourceBreaker {
  private st: BreakerState = 'closed';
  /** Half-open and its one probe not yet let through. */
  private probeFree = false;
  private shut = false;
  private consecutiveFailures = 0;
  private resetTimer: NodeJS.Timeout | null = null;

  /**
   * @param name breaker name (logs)
   * @param failureThreshold consecutive source failures that open the circuit (≥ 1)
   * @param resetTimeout time the circuit stays open before a half-open probe (ms)
   * @param toSourceError maps anything else a call rejects with to a SourceError
   * @param logger operational logger (state changes)
   * @param onChange observer of state changes (errors it throws are logged)
   * @param _rollingWindowMs kept for callers of the opossum-based breaker; no rolling statistics are kept
   *   (a long call that fails after any window never counts more than once: the rule is consecutive failures)
   */
  constructor(
    readonly name: string,
    private readonly failureThreshold: number,
    private readonly resetTimeout: number,
    private readonly toSourceError: (err: unknown) => SourceError,
    private readonly logger?: Logger,
    private readonly onChange?: (state: BreakerState) => void,
    _rollingWindowMs = 10_000,
  ) {}

  /** The circuit's state: 'closed' (normal), 'open' (refusing at once), 'half_open' (next call is the probe). */
  state(): BreakerState {
    return this.st;
  }

  /**
   * Runs `fn` through the breaker; rejects only with SourceErrors: 'circuit_open' at once while open
   * (or half-open with its probe already running), a local failure after `shutdown`, `fn`'s own
   * SourceError, or `toSourceError` of anything else it threw or rejected with.
   */
  run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.shut) return Promise.reject(localFailure('the source connector is closed'));
    if (this.st !== 'closed') {
      if (!this.probeFree) return Promise.reject(new SourceError('circuit_open'));
      this.probeFree = false;
    }
    let p: Promise<T>;
    try {
      p = fn();
    } catch (err) {
      p = Promise.reject(err);
    }
    return p.then(
      (v) => {
        this.settled(null);
        return v;
      },
      (err: unknown) => {
        this.settled(err);
        throw err instanceof SourceError ? err : this.toSourceError(err);
      },
    );
  }

  /** Stops the breaker (later calls reject with a local failure; calls still running change nothing). */
  shutdown(): void {
    this.shut = true;
    if (this.resetTimer) clearTimeout(this.resetTimer);
    this.resetTimer = null;
  }

  /** A call ended: `err` null for success. */
  private settled(err: unknown): void {
    if (this.shut) return;
    if (err === null || !counted(err)) {
      this.consecutiveFailures = 0;
      if (this.st === 'half_open') this.close();
      return;
    }
    this.consecutiveFailures++;
    if ((this.consecutiveFailures >= this.failureThreshold && this.st === 'closed') || this.st === 'half_open') this.open();
  }

  private open(): void {
    if (this.st === 'open') return;
    this.st = 'open';
    this.probeFree = false;
    this.notify('open');
    this.resetTimer = setTimeout(() => {
      this.resetTimer = null;
      if (this.shut) return;
      this.st = 'half_open';
      this.probeFree = true;
      this.notify('half_open');
    }, this.resetTimeout);
    this.resetTimer.unref?.();
  }

  private close(): void {
    if (this.resetTimer) clearTimeout(this.resetTimer);
    this.resetTimer = null;
    this.st = 'closed';
    this.probeFree = false;
    this.notify('closed');
  }

  private notify(state: BreakerState): void {
    if (state === 'open') this.logger?.warn({ breaker: state, consecutive_failures: this.consecutiveFailures }, 'source circuit opened');
    else this.logger?.info({ breaker: state }, `source circuit ${state === 'closed' ? 'closed' : 'half-open'}`);
    if (state !== 'half_open') this.consecutiveFailures = 0;
    try {
      this.onChange?.(state);
    } catch (err) {
      this.logger?.error({ err }, 'onBreakerChange threw');
    }
  }
}
