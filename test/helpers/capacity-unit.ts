/**
 * Helpers of the admission-by-capacity unit tests (issue 29; test/unit/transport/capacity*.test.ts):
 * limiters made in a test are closed after it (their timers), and a permit expected at once.
 */
import { isCapacityRefusal, type CapacityLimiter, type CapacityPermit } from '../../src/transport/capacity';

/** Limiters made by the current test; closed and forgotten after each test (registered on import). */
export const limiters: CapacityLimiter[] = [];
afterEach(() => {
  for (const l of limiters.splice(0)) l.close();
});

/** `x` (acquire's answer) as a permit given at once; throws on a refusal or a wait. */
export function permit(x: unknown): CapacityPermit {
  if (x instanceof Promise || isCapacityRefusal(x as CapacityPermit)) throw new Error(`expected a permit at once, got ${JSON.stringify(x)}`);
  return x as CapacityPermit;
}
