/**
 * MCP Toolbox (Go; npm `@toolbox-sdk/server`, a devDependency) as a same-run baseline (issue 13):
 * the bench writes a tools.yaml for its own Chinook copy and reader role — one parameterised
 * point-read tool (`postgres-sql`, `$1`) and the free-SQL tool (`postgres-execute-sql`) — and runs
 * `toolbox --config tools.yaml --port P --disable-version-check` on loopback (hardening.md, "Speed
 * baselines"). Throws SkipError when the package's binary is not installed.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type pg from 'pg';
import { McpHttpClient } from './http';
import { ROOT, SkipError, sleep } from './env';

/** Name of the parameterised point-read tool in the generated tools.yaml. */
export const TOOLBOX_POINT_TOOL = 'point_read';
/** Name of the free-SQL tool. */
export const TOOLBOX_SQL_TOOL = 'execute_sql';

/** A running Toolbox. */
export interface ToolboxChild {
  /** MCP endpoint URL (http://127.0.0.1:P/mcp). */
  url: string;
  pid: number;
  stop(): Promise<void>;
}

/** Path of the toolbox binary shipped by @toolbox-sdk/server-linux-x64 (null when absent). */
export function toolboxBinary(): string | null {
  const p = path.join(ROOT, 'node_modules', '@toolbox-sdk', `server-${process.platform}-${process.arch}`, 'bin', 'toolbox');
  return existsSync(p) ? p : null;
}

/** The tools.yaml for the reader role's connection settings and the point-read statement (which must use $1 for the track id). */
export function toolsYaml(reader: pg.ClientConfig, pointSql: string): string {
  const q = (s: unknown) => JSON.stringify(String(s ?? ''));
  return [
    'sources:',
    '  chinook:',
    '    kind: postgres',
    `    host: ${q(reader.host)}`,
    `    port: ${q(reader.port)}`,
    `    database: ${q(reader.database)}`,
    `    user: ${q(reader.user)}`,
    `    password: ${q(reader.password)}`,
    'tools:',
    `  ${TOOLBOX_POINT_TOOL}:`,
    '    kind: postgres-sql',
    '    source: chinook',
    '    description: One track by its primary key.',
    `    statement: ${q(pointSql)}`,
    '    parameters:',
    '      - name: track_id',
    '        type: integer',
    '        description: The track id.',
    `  ${TOOLBOX_SQL_TOOL}:`,
    '    kind: postgres-execute-sql',
    '    source: chinook',
    '    description: Runs any SQL statement.',
    '',
  ].join('\n');
}

/** A free TCP port on loopback (the OS's choice). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
}

/**
 * Spawns a peer MCP server (`bin` with `args`, listening on `port`; `dir` its temporary folder, removed
 * on stop) and resolves once tools/list answers 200 on `http://127.0.0.1:<port>/mcp` (≤ 30 s; else it is
 * stopped and the promise rejects with its last stderr). `label` names it in errors.
 */
export async function startMcpChild(label: string, bin: string, args: string[], port: number, dir: string): Promise<ToolboxChild> {
  const proc: ChildProcess = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr!.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-2000)));
  const kill = () => proc.kill('SIGKILL');
  process.once('exit', kill);
  const url = `http://127.0.0.1:${port}/mcp`;
  const stop = () =>
    new Promise<void>((res) => {
      process.removeListener('exit', kill);
      rmSync(dir, { recursive: true, force: true });
      if (proc.exitCode !== null || proc.signalCode !== null) return res();
      const k = setTimeout(kill, 5000);
      proc.once('exit', () => {
        clearTimeout(k);
        res();
      });
      proc.kill('SIGTERM');
    });
  const client = new McpHttpClient(url, { maxSockets: 1 });
  try {
    for (const until = Date.now() + 30_000; ; ) {
      if (proc.exitCode !== null) throw new Error(`${label} exited (${proc.exitCode}): ${stderr}`);
      const ok = await client.rpc('tools/list').then((r) => r.status === 200, () => false);
      if (ok) break;
      if (Date.now() > until) throw new Error(`${label} did not answer within 30 s: ${stderr}`);
      await sleep(100);
    }
  } catch (err) {
    await stop();
    throw err;
  } finally {
    client.close();
  }
  return { url, pid: proc.pid!, stop };
}

/** Starts Toolbox for the reader role; resolves once tools/list answers (≤ 30 s). */
export async function startToolbox(reader: pg.ClientConfig, pointSql: string): Promise<ToolboxChild> {
  const bin = toolboxBinary();
  if (!bin) throw new SkipError('@toolbox-sdk/server is not installed (npm install)');
  const dir = mkdtempSync(path.join(os.tmpdir(), 'il-bench-toolbox-'));
  const config = path.join(dir, 'tools.yaml');
  writeFileSync(config, toolsYaml(reader, pointSql), { mode: 0o600 });
  const port = await freePort();
  return startMcpChild('toolbox', bin, ['--config', config, '--port', String(port), '--address', '127.0.0.1', '--disable-version-check', '--log-level', 'WARN'], port, dir);
}

/** Parses a Toolbox tools/call answer and returns its text items, throwing on a JSON-RPC error or a tool error. */
export function toolboxText(r: { status: number; text: string }): string {
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${r.text.slice(0, 300)}`);
  const msg = JSON.parse(r.text) as { result?: { isError?: boolean; content?: Array<{ text?: string }> }; error?: unknown };
  if (msg.error || !msg.result) throw new Error(`JSON-RPC error: ${r.text.slice(0, 300)}`);
  if (msg.result.isError) throw new Error(`tool error: ${r.text.slice(0, 300)}`);
  return (msg.result.content ?? []).map((c) => c.text ?? '').join('\n');
}
