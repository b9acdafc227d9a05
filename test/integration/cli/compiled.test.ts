/**
 * Issue 13, "Ship compiled JavaScript for serve and demo": `npm run build` (scripts/build.js) makes a
 * compiled tree that bin/interlock.js runs while it is up to date (bin/runtime.js), and `serve` from
 * that tree finds its migrations, spec files, validators and console assets (src/install-root.ts).
 * A tree older than the sources is not run: the CLI falls back to tsx, and INTERLOCK_RUNTIME=compiled
 * refuses with exit code 2. The tree is built into a temporary folder (INTERLOCK_DIST_DIR), so the
 * checkout's own dist/ is never touched while other suites run.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { freePort } from '../sources/cluster';

const ROOT = join(__dirname, '..', '..', '..');
const BIN = join(ROOT, 'bin', 'interlock.js');
const VERSION = (require(join(ROOT, 'package.json')) as { version: string }).version;

let out: string;
let env: GovernedEnv;
let child: ChildProcess | undefined;

function run(args: string[], extraEnv: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { env: { ...process.env, ...extraEnv }, timeout: 60_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

beforeAll(async () => {
  // Inside the checkout (.cache/ is ignored), so the compiled modules resolve node_modules as dist/ does.
  mkdirSync(join(ROOT, '.cache'), { recursive: true });
  out = join(mkdtempSync(join(ROOT, '.cache', 'dist-test-')), 'dist');
  const built = await new Promise<{ code: number; stdout: string }>((resolve) =>
    execFile(process.execPath, [join(ROOT, 'scripts', 'build.js'), '--out', out], { cwd: ROOT, timeout: 180_000 }, (err, stdout) => resolve({ code: err ? 1 : 0, stdout })),
  );
  expect(built.code).toBe(0);
  expect(built.stdout).toMatch(/^interlock build: compiled JavaScript in .+ \(\d+\.\d s\)\n$/);
  env = await startGovernedEnv();
}, 240_000);

afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await env?.close();
  rmSync(join(out, '..'), { recursive: true, force: true });
});

test('an up-to-date compiled tree is what the CLI runs', async () => {
  const r = await run(['--version'], { INTERLOCK_DIST_DIR: out, INTERLOCK_RUNTIME_REPORT: '1' });
  expect(r.code).toBe(0);
  expect(r.stdout.trim()).toBe(VERSION);
  expect(r.stderr).toBe(`interlock runtime: compiled ${out}\n`);
});

test('prepare (--if-stale) leaves an up-to-date tree as it is: npm exec -- interlock after npm ci does not rebuild (task hnu42b item 6)', async () => {
  const stamp = readFileSync(join(out, '.built-at'), 'utf8');
  const r = await new Promise<{ code: number; stdout: string }>((resolve) =>
    execFile(process.execPath, [join(ROOT, 'scripts', 'build.js'), '--out', out, '--if-possible', '--if-stale'], { cwd: ROOT, timeout: 180_000 }, (err, stdout) => resolve({ code: err ? 1 : 0, stdout })),
  );
  expect(r.code).toBe(0);
  expect(r.stdout).toBe(`interlock build: ${relative(ROOT, out)} is up to date with the sources; not rebuilt (npm run build forces it)\n`);
  expect(readFileSync(join(out, '.built-at'), 'utf8')).toBe(stamp);
  expect((require(join(ROOT, 'package.json')) as { scripts: Record<string, string> }).scripts.prepare).toBe('node scripts/build.js --if-possible --if-stale');
}, 200_000);

test('serve from the compiled tree finds its migrations, serves every catalogue tool, a governed read and the console page', async () => {
  const port = await freePort();
  let stdout = '';
  let stderr = '';
  child = spawn(process.execPath, [BIN, '--database-url', env.db.url, 'serve', '--port', String(port)], {
    env: { ...process.env, INTERLOCK_DIST_DIR: out, INTERLOCK_RUNTIME_REPORT: '1', INTERLOCK_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  child.stderr!.setEncoding('utf8').on('data', (s: string) => (stderr += s));
  const until = Date.now() + 60_000;
  while (!stdout.includes(`listening on http://127.0.0.1:${port}/mcp`)) {
    if (child.exitCode !== null || Date.now() > until) throw new Error(`serve did not start: ${stdout.slice(-300)} ${stderr.slice(-300)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  expect(stderr.split('\n')[0]).toBe(`interlock runtime: compiled ${out}`);
  const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', authorization: `Bearer ${env.apiKey}` };
  const list = await fetch(`http://127.0.0.1:${port}/mcp`, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }) });
  expect(list.status).toBe(200);
  const tools = ((await list.json()) as { result: { tools: Array<{ name: string }> } }).result.tools;
  const catalogue = require(join(ROOT, 'generated', 'tool-catalogue.json')) as { tools: Array<{ name: string }> };
  expect(tools.map((t) => t.name)).toEqual(catalogue.tools.map((t) => t.name));
  const call = await fetch(`http://127.0.0.1:${port}/mcp`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: 'SELECT album_id, title FROM album WHERE album_id = $1', params: [1] } } }),
  });
  expect(call.status).toBe(200);
  const text = await call.text();
  const answer = JSON.parse(text.split('\n').find((l) => l.startsWith('data: '))!.slice(6)) as { result: { structuredContent: { rows: unknown[]; row_count: number } } };
  expect(answer.result.structuredContent.row_count).toBe(1);
  expect(answer.result.structuredContent.rows).toEqual([{ album_id: 1, title: 'For Those About To Rock We Salute You' }]);
  const page = await fetch(`http://127.0.0.1:${port}/console`);
  expect(page.status).toBe(200);
  expect(page.headers.get('content-type')).toMatch(/^text\/html/);
  child.kill('SIGTERM');
  await new Promise<void>((r) => (child!.exitCode !== null ? r() : child!.once('exit', () => r())));
}, 90_000);

test('a tree older than the sources is not run: tsx runs the sources, and INTERLOCK_RUNTIME=compiled refuses', async () => {
  writeFileSync(join(out, '.built-at'), '1');
  const fallback = await run(['--version'], { INTERLOCK_DIST_DIR: out, INTERLOCK_RUNTIME_REPORT: '1' });
  expect(fallback.code).toBe(0);
  expect(fallback.stdout.trim()).toBe(VERSION);
  expect(fallback.stderr).toBe(`interlock runtime: source (${out} is older than the sources (npm run build refreshes it))\n`);
  const forced = await run(['--version'], { INTERLOCK_DIST_DIR: out, INTERLOCK_RUNTIME: 'compiled' });
  expect(forced.code).toBe(2);
  expect(forced.stderr).toBe(`error: INTERLOCK_RUNTIME=compiled: ${out} is older than the sources (npm run build refreshes it)\n`);
  expect(forced.stdout).toBe('');
  // prepare (--if-stale) rebuilds such a tree (task hnu42b item 6).
  const rebuilt = await new Promise<{ code: number; stdout: string }>((resolve) =>
    execFile(process.execPath, [join(ROOT, 'scripts', 'build.js'), '--out', out, '--if-possible', '--if-stale'], { cwd: ROOT, timeout: 180_000 }, (err, stdout) => resolve({ code: err ? 1 : 0, stdout })),
  );
  expect(rebuilt.code).toBe(0);
  expect(rebuilt.stdout).toMatch(/^interlock build: compiled JavaScript in .+ \(\d+\.\d s\)\n$/);
  expect(Number(readFileSync(join(out, '.built-at'), 'utf8'))).toBeGreaterThan(1);
}, 240_000);
