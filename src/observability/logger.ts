/**
 * Operational logs: pino JSON lines with request ids; the Authorization header and API keys are
 * redacted. (The audit trail is a database table, not this log.)
 */
import pino, { type Logger } from 'pino';

/**
 * `value` when it is a level pino knows (fatal … trace, or silent), else `fallback`. The loggers made
 * before the configuration is validated (bin/interlock.js's last-resort handlers, the CLI's own) read
 * INTERLOCK_LOG_LEVEL through it, so an unknown level (`verbose`) reaches loadConfig, which refuses it
 * as any invalid setting (exit 2, the allowed values listed), instead of pino throwing (task hnu41 item 3).
 */
export function knownLogLevel(value: string | undefined, fallback: string): string {
  return value !== undefined && (value === 'silent' || Object.prototype.hasOwnProperty.call(pino.levels.values, value)) ? value : fallback;
}

/**
 * Creates the gateway logger. `level` "silent" disables output (tests); by default INTERLOCK_LOG_LEVEL
 * when it names a level, else info (knownLogLevel); `destination` defaults to standard output (the
 * last-resort handlers write to standard error).
 */
export function createLogger(level: string = knownLogLevel(process.env.INTERLOCK_LOG_LEVEL, 'info'), destination?: pino.DestinationStream): Logger {
  const options = {
    level,
    base: { service: 'interlock' },
    redact: {
      paths: ['req.headers.authorization', 'headers.authorization', 'apiKey', '*.apiKey', 'api_key', '*.api_key', 'password', '*.password'],
      censor: '[REDACTED]',
    },
  };
  return destination ? pino(options, destination) : pino(options);
}
