/**
 * The shape of the operator CLI (issue 16, Build 4): every command of the commander tree has a help
 * line, and `index status` renders a table for people.
 */
import type { Command } from 'commander';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cliProgram, curlExample, runCli } from '../../../src/cli/main';
import { indexStatusTable } from '../../../src/cli/discovery-index';
import { loadConfig } from '../../../src/control/config';

/** Every command below `c`, as "parent child" paths. */
function allCommands(c: Command, path: string[] = []): Array<{ path: string; cmd: Command }> {
  return c.commands.flatMap((sub) => [{ path: [...path, sub.name()].join(' '), cmd: sub }, ...allCommands(sub, [...path, sub.name()])]);
}

const silent = { out: () => undefined, err: () => undefined };

describe('interlock command tree', () => {
  const commands = allCommands(cliProgram(silent));

  test('walks the whole tree (nested commands included)', () => {
    const paths = commands.map((c) => c.path);
    for (const p of ['serve', 'demo', 'apply', 'export', 'source update', 'index status', 'audit verify', 'approval requeue', 'operator-token list', 'db grant-runtime-role', 'db grant-operator-role', 'db sync-claim-rules']) expect(paths).toContain(p);
    expect(paths.length).toBeGreaterThanOrEqual(45);
  });

  test('every command has a help line', () => {
    expect(commands.filter((c) => !c.cmd.description().trim()).map((c) => c.path)).toEqual([]);
  });

  // Shown failing before task low47 item 3: `audit verify --help` listed only its own options, not --json.
  test('every command\'s help lists the global options, --json among them', () => {
    const missing = commands.filter((c) => !/\nGlobal Options:\n(?:.*\n)*  --json  +machine-readable JSON output/.test(c.cmd.helpInformation())).map((c) => c.path);
    expect(missing).toEqual([]);
    const verify = commands.find((c) => c.path === 'audit verify')!.cmd.helpInformation();
    expect(verify).toContain('Usage: interlock audit verify [options]');
    expect(verify.slice(verify.indexOf('Global Options:')).split('\n').filter((l) => /^  -/.test(l)).map((l) => l.trim().split(/\s+/)[0])).toEqual(['--config', '--database-url', '--json', '--server', '--token', '--token-env', '-V,']);
  });

  test('the program help lists every top-level command with its help line', () => {
    const out: string[] = [];
    const program = cliProgram({ out: (t) => out.push(t), err: () => undefined });
    const help = program.helpInformation();
    for (const c of program.commands) expect(help).toMatch(new RegExp(`\\n  ${c.name()}\\b[^\\n]*  ${c.description().slice(0, 20).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
    expect(out).toEqual([]);
  });
});

describe('index status table', () => {
  test('one aligned row per source, problems counted', () => {
    const rows = [
      { sourceId: 'handbook', indexedAt: '2026-11-29T21:03:00.123Z', durationMs: 42, assets: 12, added: 12, updated: 0, unchanged: 0, removed: 0, skipped: 1, problems: [{ path: 'x.bin', reason: 'binary' }] },
      { sourceId: 'chinook', indexedAt: '2026-11-30T08:00:00.000Z', durationMs: 310, assets: 11, added: 0, updated: 1, unchanged: 10, removed: 0, skipped: 0, problems: [] },
    ] as unknown as Parameters<typeof indexStatusTable>[0];
    expect(indexStatusTable(rows).split('\n')).toEqual([
      'SOURCE    INDEXED               MS   ASSETS  ADDED  UPDATED  UNCHANGED  REMOVED  SKIPPED  PROBLEMS',
      'handbook  2026-11-29 21:03:00Z  42   12      12     0        0          0        1        1',
      'chinook   2026-11-30 08:00:00Z  310  11      0      1        10         0        0        0',
    ]);
  });
  test('no rows: (none)', () => {
    expect(indexStatusTable([])).toBe('(none)');
  });
});

describe('the startup banner\'s curl line (hgov item 3)', () => {
  /** The -H headers of a curl command line, as "Name: value" with the name lower-cased. */
  const headers = (line: string) => [...line.matchAll(/-H ["']([^"']+)["']/g)].map((m) => m[1].replace(/^[^:]+/, (n) => n.toLowerCase())).sort();

  test('sends the same headers as README\'s example, MCP-Protocol-Version included', () => {
    const readme = readFileSync(join(__dirname, '..', '..', '..', 'README.md'), 'utf8');
    const example = /\ncurl -s http:\/\/127\.0\.0\.1:8787\/mcp[^\n]*\\\n[^\n]*\\\n[^\n]*/.exec(readme)![0];
    const banner = curlExample('http://127.0.0.1:8787/mcp', '<key>', 'chinook');
    expect(headers(banner)).toEqual(headers(example));
    expect(headers(banner)).toEqual(['accept: application/json, text/event-stream', 'authorization: Bearer <key>', 'content-type: application/json', 'mcp-protocol-version: 2025-11-25']);
  });
});

// Red team rt48a L1: `--token T` puts the operator token where `ps` and /proc/PID/cmdline show it to
// every local user. It keeps working (scripts use it) with one warning line on stderr naming
// --token-env; --token-env prints none. Shown failing before the fix: stderr held only the error line.
describe('--token on the command line (rt48a L1)', () => {
  const WARNING = 'warning: --token puts the operator token on the command line, where ps shows it to every local user; put it in an environment variable and pass its name instead: --token-env INTERLOCK_TOKEN';
  const UNREACHABLE = expect.stringMatching(/^error: cannot reach the admin API at http:\/\/127\.0\.0\.1:1\/admin\/v1 \(/);
  async function run(argv: string[]): Promise<{ code: number; out: string[]; err: string[] }> {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runCli(argv, { out: (t) => void out.push(t), err: (t) => void err.push(t) });
    return { code, out, err };
  }

  test('--token still works and warns once on stderr, first', async () => {
    expect(await run(['--server', 'http://127.0.0.1:1', '--token', 'ilo_' + 'x'.repeat(43), 'identity', 'list'])).toEqual({ code: 1, out: [], err: [WARNING, UNREACHABLE] });
  });

  test('--token-env: no warning', async () => {
    process.env.IL_TEST_L1_OPERATOR_TOKEN = 'ilo_' + 'x'.repeat(43);
    try {
      expect(await run(['--server', 'http://127.0.0.1:1', '--token-env', 'IL_TEST_L1_OPERATOR_TOKEN', 'identity', 'list'])).toEqual({ code: 1, out: [], err: [UNREACHABLE] });
    } finally {
      delete process.env.IL_TEST_L1_OPERATOR_TOKEN;
    }
  });

  test('INTERLOCK_TOKEN, the variable the warning and docs name, is a known variable: exported, it does not fail the configuration', () => {
    expect(loadConfig({ env: { INTERLOCK_TOKEN: 'ilo_' + 'x'.repeat(43) } }).listen.port).toBe(8787);
  });

  test('--help marks --token unsafe and names --token-env', () => {
    // Whitespace collapsed: commander wraps the description to the terminal's width.
    const help = cliProgram(silent).helpInformation().replace(/\s+/g, ' ');
    expect(help).toMatch(/--token <token> +remote mode: operator token \(ilo_…\); unsafe: the command line is visible to every local user \(ps\), prefer --token-env/);
    expect(help).toMatch(/--token-env <var> +remote mode: environment variable holding the operator token \(e\.g\. INTERLOCK_TOKEN; not shown by ps\)/);
  });
});
