/**
 * Output of the operator CLI: human tables by default, JSON with --json. Everything for people goes
 * to stdout; errors and warnings go to stderr.
 */

/** Where the CLI writes. Tests and the bin script pass process streams. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  /**
   * Asks `question` and resolves to the line answered; null when there is no terminal to ask on.
   * Absent: never asks (as without a terminal).
   */
  ask?(question: string): Promise<string | null>;
}

/**
 * One line from the terminal: the question on stderr (stdout stays for output), the answer from
 * stdin; null when stdin is not a TTY (a pipe, a script, CI) or closes before a line.
 */
export async function askTerminal(question: string): Promise<string | null> {
  if (!process.stdin.isTTY) return null;
  const { createInterface } = await import('node:readline');
  const rl = createInterface({ input: process.stdin, output: process.stderr, terminal: true });
  try {
    return await new Promise<string | null>((resolve) => {
      rl.once('close', () => resolve(null));
      rl.question(question, (line) => resolve(line));
    });
  } finally {
    rl.close();
  }
}

/** The process's stdout/stderr, and the terminal for questions. */
export const processIo: CliIo = {
  out: (t) => process.stdout.write(t.endsWith('\n') ? t : t + '\n'),
  err: (t) => process.stderr.write(t.endsWith('\n') ? t : t + '\n'),
  ask: askTerminal,
};

/** "2026-11-29 21:03:00Z" from an ISO time, or "-" for null. */
export function shortTime(iso: string | null | undefined): string {
  if (!iso) return '-';
  return iso.replace('T', ' ').replace(/\.\d{3}Z$/, 'Z');
}

/** Renders rows as an aligned text table with upper-case headers; "(none)" when empty. */
export function table(columns: string[], rows: Array<Array<string | number | boolean | null | undefined>>): string {
  if (rows.length === 0) return '(none)';
  const cells = rows.map((r) => r.map((c) => (c === null || c === undefined || c === '' ? '-' : String(c))));
  const widths = columns.map((h, i) => Math.max(h.length, ...cells.map((r) => r[i].length)));
  const line = (r: string[]) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]))).join('  ');
  return [line(columns.map((c) => c.toUpperCase())), ...cells.map(line)].join('\n');
}

/** Pretty JSON with a trailing newline. */
export function json(value: unknown): string {
  return JSON.stringify(value, null, 2);
}
