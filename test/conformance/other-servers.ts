/**
 * Third-party MCP SQL servers for the conformance self-test (issue 30 item 5), each started as its users
 * start it, on loopback, against a test database:
 *  - DBHub (`@bytebase/dbhub` 1.4.0, a devDependency): `dbhub --transport http --host 127.0.0.1 --port P
 *    --config dbhub.toml`, one PostgreSQL source and its `execute_sql` tool with `readonly = true`
 *    (DBHub's read-only mode). Its package asks for Node 22.5 (engines); it runs on this Node 20.
 *  - MCP Toolbox (`@toolbox-sdk/server` 1.12.0, a devDependency; its Go binary): `toolbox --config
 *    tools.yaml --port P --address 127.0.0.1`, one `postgres-execute-sql` tool named `execute_sql`
 *    (hardening.md, "Speed baselines"; bench/lib/toolbox.ts starts the same binary).
 * Both resolve once a tools/list answers (at most 60 s) and are stopped with SIGTERM (SIGKILL after 5 s).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { ReferenceServer } from './sdk-reference';

const ROOT = path.resolve(__dirname, '../..');

/** A free loopback port. */
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

/** Spawns `bin args` and resolves once POST tools/list at `url` answers 200 (≤ 60 s); `dir` is removed on close. */
async function startChild(bin: string, args: string[], url: string, dir: string): Promise<ReferenceServer> {
  const proc = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'], cwd: dir });
  let stderr = '';
  proc.stderr!.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-3000)));
  const close = () =>
    new Promise<void>((res) => {
      const done = () => {
        rmSync(dir, { recursive: true, force: true });
        res();
      };
      if (proc.exitCode !== null || proc.signalCode !== null) return done();
      const k = setTimeout(() => proc.kill('SIGKILL'), 5000);
      proc.once('exit', () => {
        clearTimeout(k);
        done();
      });
      proc.kill('SIGTERM');
    });
  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
  for (const until = Date.now() + 60_000; ; ) {
    if (proc.exitCode !== null) {
      await close();
      throw new Error(`${path.basename(bin)} exited (${proc.exitCode}): ${stderr}`);
    }
    const ok = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' }, body }).then((r) => r.status === 200, () => false);
    if (ok) break;
    if (Date.now() > until) {
      await close();
      throw new Error(`${path.basename(bin)} did not answer within 60 s: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return { url, close };
}

/** A PostgreSQL connection for the servers under test (a login role of the test database). */
export interface PgLogin {
  host: string;
  port: number;
  database: string;
  user: string;
  password: string;
}

/** Starts DBHub on loopback with one source (`icf`) and `execute_sql` in read-only mode. */
export async function startDbHub(login: PgLogin): Promise<ReferenceServer> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'il-conf-dbhub-'));
  const dsn = `postgres://${encodeURIComponent(login.user)}:${encodeURIComponent(login.password)}@${login.host}:${login.port}/${encodeURIComponent(login.database)}?sslmode=disable`;
  const config = path.join(dir, 'dbhub.toml');
  writeFileSync(config, ['[[sources]]', 'id = "icf"', `dsn = ${JSON.stringify(dsn)}`, '', '[[tools]]', 'name = "execute_sql"', 'source = "icf"', 'readonly = true', ''].join('\n'), { mode: 0o600 });
  const port = await freePort();
  const bin = path.join(ROOT, 'node_modules', '@bytebase', 'dbhub', 'dist', 'index.js');
  return startChild(process.execPath, [bin, '--transport', 'http', '--host', '127.0.0.1', '--port', String(port), '--config', config], `http://127.0.0.1:${port}/mcp`, dir);
}

/** Path of the Toolbox binary shipped by @toolbox-sdk/server-<platform>-<arch>, or null when absent. */
export function toolboxBinary(): string | null {
  const p = path.join(ROOT, 'node_modules', '@toolbox-sdk', `server-${process.platform}-${process.arch}`, 'bin', 'toolbox');
  return existsSync(p) ? p : null;
}

/** Starts MCP Toolbox on loopback with one `postgres-execute-sql` tool named `execute_sql`. */
export async function startToolboxExecuteSql(login: PgLogin): Promise<ReferenceServer> {
  const bin = toolboxBinary();
  if (!bin) throw new Error('@toolbox-sdk/server is not installed (npm ci)');
  const dir = mkdtempSync(path.join(os.tmpdir(), 'il-conf-toolbox-'));
  const q = (s: unknown) => JSON.stringify(String(s));
  const yaml = ['sources:', '  icf:', '    kind: postgres', `    host: ${q(login.host)}`, `    port: ${q(login.port)}`, `    database: ${q(login.database)}`, `    user: ${q(login.user)}`, `    password: ${q(login.password)}`, 'tools:', '  execute_sql:', '    kind: postgres-execute-sql', '    source: icf', '    description: Runs any SQL statement.', ''].join('\n');
  const config = path.join(dir, 'tools.yaml');
  writeFileSync(config, yaml, { mode: 0o600 });
  const port = await freePort();
  return startChild(bin, ['--config', config, '--port', String(port), '--address', '127.0.0.1', '--disable-version-check', '--log-level', 'WARN'], `http://127.0.0.1:${port}/mcp`, dir);
}
