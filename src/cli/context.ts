/**
 * What the CLI modules registered from main.ts (source.ts, apply.ts, export.ts; issue 16) need of
 * a CLI run: the operator backend (direct or remote), output, and file reading. main.ts's Session
 * satisfies it.
 */
import { readFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { InvalidArgumentError, Option, type Command } from 'commander';
import type { OperatorBackend } from '../admin/backend';
import { SYSTEM_OPERATOR } from '../control/change-audit';
import type { ControlDb } from '../control/db';
import type { CliIo } from './output';
import { installPath } from '../install-root';

/** One CLI run, as the command modules see it. */
export interface CommandSession {
  readonly io: CliIo;
  readonly remote: boolean;
  readonly opts: { json?: boolean };
  backend(): Promise<OperatorBackend>;
  /** The control database (direct mode only; commands that need it call assertDirect first). */
  db(): Promise<ControlDb>;
  /** Throws ValidationError in remote mode: `what` works on the control database directly. */
  assertDirect(what: string): void;
  /** Prints `human`, or `machine` as JSON with --json. */
  print(human: string, machine: unknown): void;
}

/** The session of the command being run, and the CLI's JSON/YAML file reader. */
export interface CommandContext {
  session(cmd: Command): CommandSession;
  readDataFile(file: string): unknown;
}

/**
 * Checks an --operator value: 1-128 characters, no control characters (a newline would forge a
 * second line in `audit tail`), and not "system", the trail's name for the gateway's own changes
 * (red team rtgov). Returns the name; throws commander's InvalidArgumentError (a usage error, as
 * any bad option value).
 */
export function parseOperatorName(value: string): string {
  // eslint-disable-next-line no-control-regex
  if (value.length === 0 || value.length > 128 || /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/.test(value)) {
    throw new InvalidArgumentError('an operator name is 1-128 characters without control characters');
  }
  if (value === SYSTEM_OPERATOR) throw new InvalidArgumentError(`"${SYSTEM_OPERATOR}" is reserved for the gateway's own changes`);
  return value;
}

/** --operator NAME (default: the OS user name): who makes a configuration change; in remote mode the operator token names the operator. */
export function operatorOption(): Option {
  return new Option('--operator <name>', 'who makes the change (recorded in the audit; default: your OS user name; remote: the token\'s operator)').default(userInfo().username).argParser(parseOperatorName);
}

/** The version in package.json (`interlock --version`). */
export function packageVersion(): string {
  return (JSON.parse(readFileSync(installPath('package.json'), 'utf8')) as { version: string }).version;
}
