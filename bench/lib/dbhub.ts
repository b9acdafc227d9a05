/**
 * DBHub (`@bytebase/dbhub` 1.4.0, a devDependency) as a bench peer (issue 28's target "≥ 3× DBHub at
 * c=8"): one PostgreSQL source for the reader role and DBHub's `execute_sql` tool in read-only mode,
 * over its stateless Streamable HTTP transport on loopback. Its package asks for Node 22.5; it runs
 * on this Node 20 (test/conformance/other-servers.ts starts it the same way).
 */
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type pg from 'pg';
import { SkipError } from './env';
import { freePort, startMcpChild, type ToolboxChild } from './toolbox';

/** A running DBHub: its MCP URL, its process id (for /proc CPU) and how to stop it. */
export type DbHubChild = ToolboxChild;

/** DBHub's tool name in the config below. */
export const DBHUB_SQL_TOOL = 'execute_sql';

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
  return startMcpChild('dbhub', process.execPath, [bin, '--transport', 'http', '--host', '127.0.0.1', '--port', String(port), '--config', config], port, dir);
}
