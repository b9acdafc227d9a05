/** Argument parsers shared by the CLI's command modules. They throw ValidationError (exit code 2). */
import { ValidationError } from '../control/errors';

/** A whole number from 1 to `max`, from a command-line string. */
export function parsePositiveInt(text: string, what: string, max: number): number {
  if (!/^[0-9]{1,9}$/.test(text) || Number(text) < 1 || Number(text) > max) throw new ValidationError(`${what} must be a whole number from 1 to ${max}, got ${JSON.stringify(text)}`);
  return Number(text);
}
