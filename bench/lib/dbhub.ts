/**
 * DBHub (`@bytebase/dbhub` 1.4.0, a devDependency) as a bench peer (issue 28's target "≥ 3× DBHub at
 * c=8"): one PostgreSQL source for the reader role and DBHub's `execute_sql` tool in read-only mode,
 * over its stateless Streamable HTTP transport on loopback. Its package asks for Node 22.5; it runs
 * on this Node 20 (test/conformance/other-servers.ts starts it the same way).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type pg from 'pg';
import { McpHttpClient } from './http';
import { SkipError } from './env';

/** A running DBHub: its MCP URL, its process id (for /proc CPU) and how to stop it. */
export interface DbHubChild {
  url: string;
  pid: number;
  stop(): Promise<void>;
}

/** DBHub's tool name in the config below. */
export const DBHUB_SQL_TOOL = 'execute_sql';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
}

/** Starts DBHub for `reader` (host, port, user, password, database); resolves once tools/list answers (≤ 30 s). SkipError when not installed. */
export async function startDbHub(reader: pg.ClientConfig): Promise<DbHubChild> {
  const bin = path.join(__dirname, '..', '..', 'node_modules', '@bytebase', 'dbhub', 'dist', 'index.js');
  if (!existsSync(bin)) throw new SkipError('@bytebase/dbhub is not installed (npm ci)');
  const dir = mkdtempSync(path.join(os.tmpdir(), 'il-bench-dbhub-'));
  const enc = (v: unknown) => encodeURIComponent(String(v ?? ''));
  const dsn = `postgres://${enc(reader.user)}:${enc(reader.password)}@${reader.host ?? '127.0.0.1'}:${reader.port ?? 5432}/${enc(reader.database)}?sslmode=disable`;
  const config = path.join(dir, 'dbhub.toml');
  writeFileSync(config, ['[[sources]]', 'id = "chinook"', `dsn = ${JSON.stringify(dsn)}`, '', '[[tools]]', `name = "${DBHUB_SQL_TOOL}"`, 'source = "chinook"', 'readonly = true', ''].join('\n'), { mode: 0o600 });
  const port = await freePort();
  const proc: ChildProcess = spawn(process.execPath, [bin, '--transport', 'http', '--host', '127.0.0.1', '--port', String(port), '--config', config], { stdio: ['ignore', 'ignore', 'pipe'] });
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
      if (proc.exitCode !== null) throw new Error(`dbhub exited (${proc.exitCode}): ${stderr}`);
      const ok = await client.rpc('tools/list').then((r) => r.status === 200, () => false);
      if (ok) break;
      if (Date.now() > until) throw new Error(`dbhub did not answer within 30 s: ${stderr}`);
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
