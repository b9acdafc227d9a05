/** Argument parsers shared by the CLI's command modules. They throw ValidationError (exit code 2). */
import { ValidationError } from '../control/errors';

/** A whole number from 1 to `max`, from a command-line string. */
export function parsePositiveInt(text: string, what: string, max: number): number {
  if (!/^[0-9]{1,9}$/.test(text) || Number(text) < 1 || Number(text) > max) throw new ValidationError(`${what} must be a whole number from 1 to ${max}, got ${JSON.stringify(text)}`);
  return Number(text);
}

/** "30d", "12h", "45m", "90s" → milliseconds. Throws ValidationError naming `what`. */
export function parseDuration(text: string, what: string): number {
  const m = /^([0-9]{1,9})([smhd])$/.exec(text.trim());
  if (!m) throw new ValidationError(`${what}: expected a duration such as 90s, 45m, 12h or 30d, got ${JSON.stringify(text)}`);
  return Number(m[1]) * { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] as 's' | 'm' | 'h' | 'd'];
}

/** An ISO-8601 time or a duration before now ("2h" = two hours ago). Throws ValidationError naming `what`. */
export function parseTime(text: string, what: string): Date {
  if (/^[0-9]+[smhd]$/.test(text.trim())) return new Date(Date.now() - parseDuration(text, what));
  const d = new Date(text);
  if (Number.isNaN(d.getTime())) throw new ValidationError(`${what}: expected an ISO-8601 time (2026-11-29T12:00:00Z) or a duration (2h), got ${JSON.stringify(text)}`);
  return d;
}
