/**
 * Operational logs: pino JSON lines with request ids; the Authorization header and API keys are
 * redacted. (The audit trail is a database table, not this log.)
 */
import pino, { type Logger } from 'pino';

/**
 * Creates the gateway logger. `level` "silent" disables output (tests); `destination` defaults to
 * standard output (the last-resort handlers write to standard error).
 */
export function createLogger(level: string = process.env.INTERLOCK_LOG_LEVEL ?? 'info', destination?: pino.DestinationStream): Logger {
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
