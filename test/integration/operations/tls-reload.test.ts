/**
 * Issue 24, item 3: `interlock serve` with listen.tls (INTERLOCK_TLS_CERT_FILE, INTERLOCK_TLS_KEY_FILE)
 * as a real process: it serves HTTPS, a real SIGHUP makes it serve the renewed certificate to new
 * connections without a restart, a SIGHUP with unreadable files keeps the current certificate and
 * the process, and SIGTERM still stops it cleanly.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { copyFileSync, writeFileSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { dirname, join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { freshControlDb, type TestControlDb } from '../control/control-db';
import { makeTestCert } from '../../helpers/tls-cert';
import { freePort } from '../sources/cluster';

jest.setTimeout(120_000);
const BIN = join(__dirname, '..', '..', '..', 'bin', 'interlock.js');

let t: TestControlDb;
let child: ChildProcess | null = null;
beforeAll(async () => {
  t = await freshControlDb('ctl_tls');
});
afterAll(async () => {
  if (child && child.exitCode === null) child.kill('SIGKILL');
  await t?.cleanup();
});

/** The fingerprint of the certificate served on a new connection, and the /healthz status. */
function served(port: number, ca: string[]): Promise<{ status: number; fingerprint: string }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest({ host: '127.0.0.1', port, path: '/healthz', ca, agent: false }, (res) => {
      const fingerprint = new X509Certificate((res.socket as TLSSocket).getPeerCertificate(false).raw).fingerprint256;
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, fingerprint }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function until(what: string, check: () => Promise<boolean> | boolean, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test('serve over TLS; SIGHUP reloads the certificate; a bad reload keeps it; SIGTERM stops', async () => {
  const first = makeTestCert('serve');
  const port = await freePort();
  let stdout = '';
  let stderr = '';
  child = spawn(process.execPath, [BIN, '--database-url', t.db.url, 'serve', '--port', String(port)], {
    env: { ...process.env, INTERLOCK_LOG_LEVEL: 'info', INTERLOCK_TLS_CERT_FILE: first.certFile, INTERLOCK_TLS_KEY_FILE: first.keyFile },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  await until('the gateway to listen', () => stdout.includes(`InterLock listening on https://127.0.0.1:${port}/mcp`) || child!.exitCode !== null, 60_000);
  expect(child.exitCode).toBeNull();
  expect(await served(port, [first.cert])).toEqual({ status: 200, fingerprint: first.fingerprint });

  const second = makeTestCert('renewed', dirname(first.certFile));
  copyFileSync(second.certFile, first.certFile);
  copyFileSync(second.keyFile, first.keyFile);
  child.kill('SIGHUP');
  await until('the renewed certificate', async () => (await served(port, [first.cert, second.cert])).fingerprint === second.fingerprint);
  expect(child.exitCode).toBeNull();
  await until('the reload log line', () => stdout.includes('TLS certificate reloaded'));

  writeFileSync(first.keyFile, 'not a key');
  child.kill('SIGHUP');
  await until('the failed reload log line', () => stdout.includes('TLS certificate reload failed; the current certificate stays'));
  expect(child.exitCode).toBeNull();
  expect(await served(port, [second.cert])).toEqual({ status: 200, fingerprint: second.fingerprint });

  const exited = new Promise<number | null>((resolve) => child!.once('exit', (code) => resolve(code)));
  child.kill('SIGTERM');
  expect(await exited).toBe(0);
  expect(stderr).not.toMatch(/uncaught|unhandled/i);
});
