/**
 * Operational logs: pino JSON lines with request ids; the Authorization header and API keys are
 * redacted. (The audit trail is a database table, not this log.)
 */
import pino, { type Logger } from 'pino';

/** Creates the gateway logger. `level` "silent" disables output (tests). */
export function createLogger(level: string = process.env.INTERLOCK_LOG_LEVEL ?? 'info'): Logger {
  return pino({
    level,
    base: { service: 'interlock' },
    redact: {
      paths: ['req.headers.authorization', 'headers.authorization', 'apiKey', '*.apiKey', 'api_key', '*.api_key', 'password', '*.password'],
      censor: '[REDACTED]',
    },
  });
}
