/**
 * Output of the operator CLI: human tables by default, JSON with --json. Everything for people goes
 * to stdout; errors and warnings go to stderr.
 */

/** Where the CLI writes. Tests and the bin script pass process streams. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
}

/** The process's stdout/stderr. */
export const processIo: CliIo = {
  out: (t) => process.stdout.write(t.endsWith('\n') ? t : t + '\n'),
  err: (t) => process.stderr.write(t.endsWith('\n') ? t : t + '\n'),
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
