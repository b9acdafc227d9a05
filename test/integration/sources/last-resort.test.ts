/**
 * Last-resort handlers (issue 10, Build 2): in a child process that installed them, an exception
 * thrown from an event handler outside any call and an unhandled promise rejection are logged, and
 * the process keeps answering HTTP requests. Without them the same process exits (control case).
 * Bounded: each child is killed after 20 s at most.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';

jest.setTimeout(60_000);

const ROOT = path.resolve(__dirname, '../../..');

/** Runs a child that serves HTTP, then throws and rejects outside any request; reports what it saw. */
function runChild(install: boolean): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const script = `
    const http = require('node:http');
    const pino = require('pino');
    const { installLastResortHandlers } = require('./src/server.ts');
    if (${install}) installLastResortHandlers(pino({ base: undefined }, pino.destination(2)));
    const server = http.createServer((req, res) => res.end('alive'));
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      setTimeout(() => { throw Object.assign(new Error('Cannot create a string longer than 0x1fffffe8 characters'), { code: 'ERR_STRING_TOO_LONG' }); }, 10);
      setTimeout(() => { Promise.reject(new Error('nobody handles this')); }, 20);
      setTimeout(async () => {
        const body = await (await fetch('http://127.0.0.1:' + port + '/')).text();
        process.stdout.write('answered:' + body + '\\n');
        server.close();
        process.exit(0);
      }, 200);
    });
  `;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['-r', 'tsx/cjs', '-e', script], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    const killer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.on('exit', (code) => {
      clearTimeout(killer);
      resolve({ code, stdout, stderr });
    });
  });
}

test('with the handlers, an escaped exception and an unhandled rejection are logged and the process keeps serving', async () => {
  const r = await runChild(true);
  expect(r.code).toBe(0);
  expect(r.stdout).toBe('answered:alive\n');
  const logged = r.stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { level: number; last_resort?: string; err?: { code?: string } });
  expect(logged.map((l) => [l.level, l.last_resort])).toEqual([
    [50, 'uncaughtException'],
    [50, 'unhandledRejection'],
  ]);
  expect(logged[0].err?.code).toBe('ERR_STRING_TOO_LONG');
});

test('without them the same process dies (control case)', async () => {
  const r = await runChild(false);
  expect(r.code).not.toBe(0);
  expect(r.stdout).toBe('');
});
