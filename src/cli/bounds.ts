/**
 * The bounds of the operator CLI's connection to the control database (docs/operators.md "The
 * operator CLI"): opening a connection waits at most CONTROL_CONNECT_TIMEOUT_MS (5 s), and a
 * statement waits for one lock at most INTERLOCK_LOCK_TIMEOUT_MS (default OPERATOR_LOCK_TIMEOUT_MS,
 * 10 s: the same bounds as the gateway's operator connection, src/admin/governance-db.ts). Without
 * them one hung transaction holding a lock on a governance table made a CLI write wait forever.
 *
 * Not bounded: statement time (an `audit verify` or a migration may legitimately take long), the
 * migration connection's lock waits (it queues on node-pg-migrate's advisory lock behind a concurrent
 * migrator by design), and `serve` / `demo`, whose pool is the gateway's (its calls queue for it).
 */
import { CONTROL_CONNECT_TIMEOUT_MS } from '../control/db';
import { ValidationError } from '../control/errors';
import { OPERATOR_LOCK_TIMEOUT_MS } from '../admin/governance-db';

/** Environment variable overriding the CLI's lock_timeout (ms). */
export const LOCK_TIMEOUT_ENV = 'INTERLOCK_LOCK_TIMEOUT_MS';
/** Largest INTERLOCK_LOCK_TIMEOUT_MS accepted (one hour, in ms). */
export const MAX_LOCK_TIMEOUT_MS = 3_600_000;

/** The CLI's control-connection bounds, in ms (openControlDb's connectTimeoutMs and lockTimeoutMs). */
export interface CliControlBounds {
  connectTimeoutMs: number;
  lockTimeoutMs: number;
}

/**
 * The bounds for a CLI run under environment `env`: connect CONTROL_CONNECT_TIMEOUT_MS; lock_timeout
 * from INTERLOCK_LOCK_TIMEOUT_MS when set (a whole number of ms, 1 to MAX_LOCK_TIMEOUT_MS; 0, which
 * PostgreSQL reads as "wait forever", is refused), else OPERATOR_LOCK_TIMEOUT_MS. Throws
 * ValidationError (CLI exit code 2) for any other value.
 */
export function cliControlBounds(env: NodeJS.ProcessEnv): CliControlBounds {
  const raw = env[LOCK_TIMEOUT_ENV];
  let lockTimeoutMs = OPERATOR_LOCK_TIMEOUT_MS;
  if (raw !== undefined && raw !== '') {
    if (!/^[0-9]{1,7}$/.test(raw) || Number(raw) < 1 || Number(raw) > MAX_LOCK_TIMEOUT_MS) {
      throw new ValidationError(`${LOCK_TIMEOUT_ENV} must be a whole number of milliseconds from 1 to ${MAX_LOCK_TIMEOUT_MS}, got ${JSON.stringify(raw.slice(0, 40))}`);
    }
    lockTimeoutMs = Number(raw);
  }
  return { connectTimeoutMs: CONTROL_CONNECT_TIMEOUT_MS, lockTimeoutMs };
}

/** True for a command path (`serve`, `demo`, `role create` …) whose control connection gets the CLI's bounds: every one but serve and demo, which run the gateway on it. */
export function boundedCommand(path: string): boolean {
  return !/^(serve|demo)$/.test(path);
}
