/**
 * A source's circuit breaker (issue 5; issue 10 Build 4): opens after `failureThreshold`
 * consecutive source failures and refuses at once (`circuit_open`) until `resetTimeout` has passed,
 * then lets one half-open probe through. Only SourceErrors with `sourceFailure` set count, and
 * errors.ts sets it only for failures health.ts says are the source's (never the statement's own).
 */
import CircuitBreaker from 'opossum';
import type { Logger } from 'pino';
import { SourceError, localFailure } from './errors';

/** Circuit state of a source. */
export type BreakerState = 'closed' | 'open' | 'half_open';

/** One source's breaker. */
export class SourceBreaker {
  private readonly breaker: CircuitBreaker<[() => Promise<unknown>], unknown>;
  private consecutiveFailures = 0;

  /**
   * @param name breaker name (logs)
   * @param failureThreshold consecutive source failures that open the circuit (≥ 1)
   * @param resetTimeout time the circuit stays open before a half-open probe (ms)
   * @param onChange observer of state changes (errors it throws are logged)
   * @param toSourceError maps anything else the breaker rejects with to a SourceError
   * @param rollingWindowMs opossum's rolling statistics window (ms, default 10000; its error-rate rule is disabled)
   */
  constructor(
    name: string,
    private readonly failureThreshold: number,
    resetTimeout: number,
    private readonly toSourceError: (err: unknown) => SourceError,
    private readonly logger?: Logger,
    onChange?: (state: BreakerState) => void,
    rollingWindowMs = 10_000,
  ) {
    this.breaker = new CircuitBreaker((fn: () => Promise<unknown>) => fn(), {
      name,
      timeout: false, // the server's statement_timeout and the client watchdog bound each call
      resetTimeout,
      // Never opens on opossum's error rate: we open it on consecutive failures below. The rate rule
      // is disabled by an unreachable volume threshold; with 0, one failure of a call that started
      // before the rolling window (failures/fires = 1/0) would open the circuit for everyone.
      errorThresholdPercentage: 100,
      volumeThreshold: Number.MAX_SAFE_INTEGER,
      rollingCountTimeout: rollingWindowMs,
      rollingPercentilesEnabled: false,
      errorFilter: (err: unknown) => !(err instanceof SourceError && err.sourceFailure),
    });
    this.breaker.on('failure', () => {
      this.consecutiveFailures++;
      if (this.consecutiveFailures >= this.failureThreshold && this.breaker.closed) this.breaker.open();
    });
    this.breaker.on('success', () => {
      this.consecutiveFailures = 0;
    });
    const notify = (state: BreakerState) => {
      if (state === 'open') this.logger?.warn({ breaker: state, consecutive_failures: this.consecutiveFailures }, 'source circuit opened');
      else this.logger?.info({ breaker: state }, `source circuit ${state === 'closed' ? 'closed' : 'half-open'}`);
      if (state !== 'half_open') this.consecutiveFailures = 0;
      try {
        onChange?.(state);
      } catch (err) {
        this.logger?.error({ err }, 'onBreakerChange threw');
      }
    };
    this.breaker.on('open', () => notify('open'));
    this.breaker.on('halfOpen', () => notify('half_open'));
    this.breaker.on('close', () => notify('closed'));
  }

  /** The circuit's state: 'closed' (normal), 'open' (refusing at once), 'half_open' (next call is the probe). */
  state(): BreakerState {
    if (this.breaker.opened) return 'open';
    if (this.breaker.halfOpen) return 'half_open';
    return 'closed';
  }

  /** Runs `fn` through the breaker; rejects only with SourceErrors ('circuit_open' when open). */
  run<T>(fn: () => Promise<T>): Promise<T> {
    return (this.breaker.fire(fn) as Promise<T>).catch((err: unknown) => {
      if (err instanceof SourceError) throw err;
      const code = (err as { code?: unknown })?.code;
      if (code === 'EOPENBREAKER') throw new SourceError('circuit_open');
      if (code === 'ESHUTDOWN') throw localFailure('the source connector is closed');
      throw this.toSourceError(err);
    });
  }

  /** Stops the breaker (later calls reject with a local failure). */
  shutdown(): void {
    this.breaker.shutdown();
  }
}
