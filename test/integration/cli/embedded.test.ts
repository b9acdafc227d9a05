/**
 * The zero-setup path: no database URL, so `interlock` starts an embedded PostgreSQL in a fresh
 * data folder (child processes, bounded time), keeps data across restarts, and `interlock demo`
 * serves Chinook with a working key and the exact `claude mcp add` line; Ctrl-C stops everything.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { auditKey } from '../../../src/audit/key';

const BIN = join(__dirname, '..', '..', '..', 'bin', 'interlock.js');
let dir: string;
let env: NodeJS.ProcessEnv;

function run(args: string[], extraEnv: NodeJS.ProcessEnv = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { env: { ...env, ...extraEnv }, timeout: 120_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

function postmasterAlive(): boolean {
  const pidFile = join(dir, 'pg', 'data', 'postmaster.pid');
  if (!existsSync(pidFile)) return false;
  const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'il-embedded-'));
  chmodSync(dir, 0o755); // the server runs as the OS user postgres when tests run as root
  env = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('INTERLOCK_')) env[k] = v;
  env.INTERLOCK_EMBEDDED_DATA_DIR = join(dir, 'pg');
});

afterAll(async () => {
  // Should already be stopped; make sure no server outlives the test.
  const pidFile = join(dir, 'pg', 'data', 'postmaster.pid');
  if (existsSync(pidFile)) {
    try {
      process.kill(Number(readFileSync(pidFile, 'utf8').split('\n')[0]), 'SIGINT');
    } catch {
      /* gone */
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  rmSync(dir, { recursive: true, force: true });
});

describe('embedded PostgreSQL (zero setup)', () => {
  test('a CLI command other than serve/demo does not create it: exit 3, the folder stays empty (fx45 item 1b)', async () => {
    const created = await run(['identity', 'create', 'zero-agent']);
    expect([created.code, created.stdout]).toEqual([3, '']);
    expect(created.stderr).toContain(`error: no InterLock control database found (looked for ${join(dir, 'pg')}); nothing was created.`);
    expect(existsSync(join(dir, 'pg'))).toBe(false);
  }, 150_000);

  test('interlock demo: serves Chinook with the printed key and claude line; Ctrl-C stops gateway and database', async () => {
    const child = spawn(process.execPath, [BIN, 'demo', '--port', '0'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      const deadline = Date.now() + 120_000;
      while (!out.includes('Press Ctrl-C to stop.')) {
        if (Date.now() > deadline || child.exitCode !== null) throw new Error(`demo did not start:\n${out}\n${err}`);
        await new Promise((r) => setTimeout(r, 200));
      }
      const url = /MCP endpoint: +(http:\/\/127\.0\.0\.1:\d+\/mcp)/.exec(out)![1];
      const key = /\n {4}(ilk_[A-Za-z0-9_-]{43})\n/.exec(out)![1];
      expect(existsSync(join(dir, 'pg', 'data', 'PG_VERSION'))).toBe(true);
      expect(existsSync(join(dir, 'pg', 'credentials.json'))).toBe(true);
      // The demo's audit key (task f1): generated into the data folder, readable by its owner only.
      expect(statSync(join(dir, 'pg', 'audit-key')).mode & 0o777).toBe(0o600);
      // The CLI lines carry the configured folder: pasted as printed, they reach this database (fx45 item 1a).
      const cli = `INTERLOCK_EMBEDDED_DATA_DIR=${join(dir, 'pg')} npm exec -- interlock`;
      expect(out).toContain(`(sign in with a token from: ${cli} operator-token create YOUR_NAME),\n`);
      expect(out).toContain(`\nor from another terminal, in any folder of this clone: ${cli} approval list, then ${cli} approval approve <id>\n`);
      expect(out).toContain(`\nclaude mcp add --transport http interlock "${url}" --header "Authorization: Bearer ${key}"\n`);
      expect(out).toContain(`curl -s "${url}" -H "Authorization: Bearer ${key}" -H "Content-Type: application/json" -H "Accept: application/json, text/event-stream" -H "MCP-Protocol-Version: 2025-11-25" -d '`);

      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${key}` },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {} } }),
      });
      expect(res.status).toBe(200);
      const text = await res.text();
      expect(text).toContain('chinook');

      // The CLI attaches to the running server (it does not start a second one).
      const approvals = await run(['--json', 'approval', 'list']);
      expect(approvals.code).toBe(0);
      expect(JSON.parse(approvals.stdout)).toEqual([]);
      expect(postmasterAlive()).toBe(true);
    } finally {
      child.kill('SIGINT');
    }
    expect(await exited).toBe(0);
    expect(err).toContain('SIGINT: shutting down');
    // Pools close before the embedded server stops: no idle-connection warning; one final line (hgov item 5).
    expect(err).not.toContain('idle audit connection failed');
    expect(err).not.toContain('57P01');
    expect(err.trimEnd().split('\n').pop()).toBe('InterLock stopped.');
    expect(postmasterAlive()).toBe(false);
  }, 180_000);

  test('after the demo stopped, CLI commands start it on demand, data persists across restarts, nothing is left running', async () => {
    const created = await run(['identity', 'create', 'zero-agent']);
    expect(created.stderr).toBe('');
    expect(created.code).toBe(0);
    expect(postmasterAlive()).toBe(false);
    const listed = await run(['--json', 'identity', 'list']);
    expect(listed.code).toBe(0);
    expect((JSON.parse(listed.stdout) as Array<{ name: string }>).map((i) => i.name).sort()).toEqual(['demo-agent', 'zero-agent']);
    expect(postmasterAlive()).toBe(false);
    // The demo's call was audited in keyed batches (format 5), which verify authenticates with the folder's key (task f1).
    const verified = await run(['--json', 'audit', 'verify']);
    expect(verified.code).toBe(0);
    expect(JSON.parse(verified.stdout)).toMatchObject({ ok: true, keyed: { unauthenticated: 0, fault: null } });
    expect((JSON.parse(verified.stdout) as { keyed: { authenticated: number } }).keyed.authenticated).toBeGreaterThan(0);
    // The demo's gateway owns the trail: it keyed it at start with its key's id (red team rt46b G2), no step needed.
    const id = auditKey(readFileSync(join(dir, 'pg', 'audit-key'), 'utf8').trim()).id;
    const keyed = await run(['--json', 'audit', 'require-key']);
    expect(keyed.code).toBe(0);
    expect(JSON.parse(keyed.stdout)).toEqual({ already: true, sinceBatch: expect.stringMatching(/^[0-9]+$/), setBy: 'gateway_start', keyIds: [id], added: [] });
    // A new key given to the CLI (a rotation begun): the folder's key still verifies what it tagged (nu46),
    // and a key given with a trailing newline is the same key.
    const rotated = await run(['--json', 'audit', 'verify'], { INTERLOCK_AUDIT_KEY: `${randomBytes(48).toString('base64')}\n` });
    expect(rotated.code).toBe(0);
    expect(JSON.parse(rotated.stdout)).toMatchObject({ ok: true, keyed: { unauthenticated: 0, fault: null } });
  }, 150_000);

  test('a second `interlock demo` on a taken port exits 1 with the port line and changes nothing: no `applied` event, no key revoked or made (nu48fix item 1)', async () => {
    const state = async () => {
      const events = await run(['--json', 'audit', 'search', '--kind', 'config']);
      const keys = await run(['--json', 'key', 'list']);
      expect([events.code, keys.code]).toEqual([0, 0]);
      return { events: (JSON.parse(events.stdout) as { events: unknown[] }).events, keys: JSON.parse(keys.stdout) as unknown[] };
    };
    const before = await state();
    expect(before.events).toContainEqual(expect.objectContaining({ decision: 'applied' }));
    const busy: Server = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', () => resolve()));
    try {
      const port = (busy.address() as { port: number }).port;
      const r = await run(['demo', '--port', String(port)]);
      // One comparison, so a failure shows every difference: the exit, the two lines, and the control data unchanged.
      expect({ code: r.code, stdout: r.stdout, stderr: r.stderr.trimEnd().split('\n'), after: await state() }).toEqual({
        code: 1,
        stdout: '',
        stderr: [`error: listen EADDRINUSE: address already in use 127.0.0.1:${port}`, '  the port is taken (another gateway running?): choose another with --port N or INTERLOCK_PORT=N'],
        after: before,
      });
    } finally {
      await new Promise<void>((resolve) => busy.close(() => resolve()));
    }
    expect(postmasterAlive()).toBe(false);
  }, 150_000);
});
