/**
 * A source's circuit breaker (issue 5; issue 10 Build 4): opens after `failureThreshold`
 * consecutive source failures and refuses at once (`circuit_open`) until `resetTimeout` has passed,
 * then lets one half-open probe through. Only SourceErrors with `sourceFailure` set count, and
 * errors.ts sets it only for failures health.ts says are the source's (never the statement's own).
 *
 * opossum keeps the state machine (open, half-open after `resetTimeout`, the one probe, close). A
 * call while the circuit is closed — every call of a healthy source — runs without opossum's
 * fire() (issue 28, h28s): fire() adds per call a promise of its own, a semaphore promise, a
 * then/catch pair, the 'fire' and 'success' events, two clock reads and rolling statistics that
 * nothing here reads (its error-rate rule is disabled). Such a call settles the breaker exactly as
 * fire() would: a success, or a failure the error filter passes over (but local saturation, which
 * settles nothing: isSaturation), resets the count and closes a circuit that went half-open meanwhile; a source failure counts, and opens a half-open circuit
 * (test/unit/sources/breaker.test.ts pins both paths). While the circuit is open or half-open every
 * call goes through fire(), which refuses it or lets it be the probe.
 */
import CircuitBreaker from 'opossum';
import type { Logger } from 'pino';
import { SourceError, localFailure } from './errors';

/** Whether a failure counts against the source's health (errors.ts sets `sourceFailure` only for those). */
function isSourceFailure(err: unknown): boolean {
  return err instanceof SourceError && err.sourceFailure;
}

/**
 * Whether a failure says nothing about the source either way: `source_busy`, pg-pool's wait for a
 * free connection of this process (local saturation). It neither counts nor resets the count (red
 * team rt41a): a source that stops answering under more calls than the pool holds gave, per connect
 * timeout, pool_size counted failures and then the waiters' source_busy, which reset the count, so
 * with pool_size below the threshold the circuit never opened and every caller waited its timeout.
 */
function isSaturation(err: unknown): boolean {
  return err instanceof SourceError && err.code === 'source_busy';
}

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
      // No 'snapshot' listener: without this, each breaker adds the rolling totals every bucket (a timer per source).
      enableSnapshots: false,
      errorFilter: (err: unknown) => !isSourceFailure(err),
    });
    this.breaker.on('failure', () => this.countFailure());
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

  /**
   * Runs `fn` through the breaker; rejects only with SourceErrors ('circuit_open' when open, without
   * calling `fn`). A synchronous throw of `fn` is a rejection. Closed: `fn` runs at once and its
   * outcome settles the breaker (see the module comment); otherwise opossum's fire() decides.
   */
  run<T>(fn: () => Promise<T>): Promise<T> {
    if (!this.breaker.closed) return (this.breaker.fire(fn) as Promise<T>).catch(this.rejected);
    let p: Promise<T>;
    try {
      p = fn();
    } catch (err) {
      p = Promise.reject(err);
    }
    return p.then(this.succeeded as (v: T) => T, this.failed);
  }

  /** A closed-circuit call's success: as opossum's 'success' (count reset; a half-open circuit closes). */
  private readonly succeeded = (value: unknown): unknown => {
    this.settledWell();
    return value;
  };

  /**
   * A closed-circuit call's failure: as opossum's error filter, then 'failure' and its half-open
   * rule; except that local saturation (isSaturation) settles nothing. (A half-open probe goes
   * through fire(), where a source_busy still passes the error filter and closes the circuit: the
   * probe is the only call then, so the pool has no waiters to be refused.)
   */
  private readonly failed = (err: unknown): never => {
    if (isSaturation(err)) return this.rejected(err);
    if (!isSourceFailure(err)) this.settledWell();
    else if (!this.breaker.isShutdown) {
      this.countFailure();
      if (this.breaker.halfOpen) this.breaker.open(); // opossum's fail(): a failure while half-open reopens
    }
    return this.rejected(err);
  };

  private settledWell(): void {
    if (this.breaker.isShutdown) return; // opossum's listeners are gone after shutdown
    this.consecutiveFailures = 0;
    if (this.breaker.halfOpen) this.breaker.close();
  }

  /** One more consecutive source failure; the threshold opens a closed circuit. */
  private countFailure(): void {
    this.consecutiveFailures++;
    if (this.consecutiveFailures >= this.failureThreshold && this.breaker.closed) this.breaker.open();
  }

  /** Maps a rejection to the SourceError the caller sees (opossum's own codes, else `toSourceError`). */
  private readonly rejected = (err: unknown): never => {
    if (err instanceof SourceError) throw err;
    const code = (err as { code?: unknown })?.code;
    if (code === 'EOPENBREAKER') throw new SourceError('circuit_open');
    if (code === 'ESHUTDOWN') throw localFailure('the source connector is closed');
    throw this.toSourceError(err);
  };

  /** Stops the breaker (later calls reject with a local failure). */
  shutdown(): void {
    this.breaker.shutdown();
  }
}
