/**
 * The operator CLI's control-connection bounds (src/cli/bounds.ts): a governance write whose lock
 * another session holds (a hung transaction on a governance table) ends with exit code 1 and one line
 * naming what to check, after INTERLOCK_LOCK_TIMEOUT_MS, instead of waiting forever; nothing is
 * changed. A server that accepts the connection and never answers ends the CLI after 5 s. The CLI runs
 * as a child process (`node bin/interlock.js …`) against a temporary control database; each run is
 * killed after RUN_LIMIT_MS, and a killed run fails the test (it would have hung).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import pg from 'pg';
import { createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { redactUrl } from '../../../src/control/db';

const BIN = join(__dirname, '..', '..', '..', 'bin', 'interlock.js');
/** A run still going after this long is killed (far above the 300 ms lock bound the runs use). */
const RUN_LIMIT_MS = 30_000;

interface Run {
  /** The exit code, or 'killed' when the run was stopped at RUN_LIMIT_MS. */
  code: number | 'killed';
  stdout: string;
  stderr: string;
}

/** Runs the CLI with only the InterLock variables in `env` (none of the caller's). */
function run(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const clean: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('INTERLOCK_')) clean[k] = v;
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { env: { ...clean, ...env }, timeout: RUN_LIMIT_MS }, (err, stdout, stderr) => {
      const e = err as (Error & { code?: unknown; killed?: boolean }) | null;
      const code = !e ? 0 : e.killed ? 'killed' : typeof e.code === 'number' ? e.code : 1;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

let temp: TempDatabase;
let dir: string;
let holder: pg.Client;
let cli: (env: Record<string, string>, ...args: string[]) => Promise<Run>;

beforeAll(async () => {
  temp = await createTempDatabase('ctl_cli_lock');
  dir = mkdtempSync(join(tmpdir(), 'il-cli-lock-'));
  cli = (env, ...args) => run(['--database-url', temp.url, ...args], env);
  expect((await cli({}, 'db', 'migrate')).code).toBe(0);
  expect((await cli({}, 'identity', 'create', 'held-agent')).code).toBe(0);
  holder = new pg.Client({ connectionString: temp.url, application_name: 'lock-holder' });
  await holder.connect();
}, 60_000);
afterAll(async () => {
  await holder?.query('ROLLBACK').catch(() => undefined);
  await holder?.end().catch(() => undefined);
  await temp?.drop();
  rmSync(dir, { recursive: true, force: true });
});

/** The one line the CLI prints for a lock not granted within `ms`. */
const lockLine = (ms: number) =>
  `error: a lock on the control database ${redactUrl(temp.url)} was not granted within ${ms} ms (INTERLOCK_LOCK_TIMEOUT_MS): another session holds a lock on the governance tables (a long or idle-in-transaction session: look in pg_stat_activity for its pid, state, xact_start and query; pg_locks shows what it holds); the statement was rolled back, try again once that session ends\n`;

const BOUND = { INTERLOCK_LOCK_TIMEOUT_MS: '300' };

test('role create while another session holds an ACCESS EXCLUSIVE lock on roles: exit 1, one line naming the lock and pg_stat_activity, nothing created', async () => {
  const role = join(dir, 'held.yaml');
  writeFileSync(role, 'name: held-role\nstatements:\n  - { effect: allow, action: read, resource: public.album }\n');
  await holder.query('BEGIN');
  await holder.query('LOCK TABLE roles IN ACCESS EXCLUSIVE MODE');
  let r: Run;
  try {
    r = await cli(BOUND, 'role', 'create', role);
  } finally {
    await holder.query('ROLLBACK');
  }
  expect(r).toEqual({ code: 1, stdout: '', stderr: lockLine(300) });
  // Nothing was changed: no role and no config event for it.
  const check = new pg.Client(temp.url);
  await check.connect();
  try {
    expect((await check.query("SELECT 1 FROM roles WHERE name = 'held-role'")).rowCount).toBe(0);
    expect((await check.query("SELECT 1 FROM audit_events WHERE kind = 'config' AND details::text LIKE '%held-role%'")).rowCount).toBe(0);
  } finally {
    await check.end();
  }
  // Once the lock is gone the same command succeeds.
  expect(await cli(BOUND, 'role', 'create', role)).toEqual({ code: 0, stdout: 'created role held-role (1 statement(s))\n', stderr: '' });
});

test("identity disable while another session holds the identity's row (SELECT … FOR UPDATE): exit 1 with the same line; the identity stays enabled", async () => {
  await holder.query('BEGIN');
  await holder.query("SELECT id FROM identities WHERE name = 'held-agent' FOR UPDATE");
  let r: Run;
  try {
    r = await cli(BOUND, 'identity', 'disable', 'held-agent');
  } finally {
    await holder.query('ROLLBACK');
  }
  expect(r).toEqual({ code: 1, stdout: '', stderr: lockLine(300) });
  const listed = JSON.parse((await cli({}, 'identity', 'list', '--json')).stdout) as Array<{ name: string; disabled: boolean }>;
  expect(listed.filter((i) => i.name === 'held-agent').map((i) => i.disabled)).toEqual([false]);
});

test('INTERLOCK_LOCK_TIMEOUT_MS must be a whole number of ms from 1 to 3600000: anything else is exit 2 before the database is touched', async () => {
  for (const bad of ['0', 'abc', '1.5', '3600001', '-1']) {
    expect(await cli({ INTERLOCK_LOCK_TIMEOUT_MS: bad }, 'identity', 'create', 'never-made')).toEqual({
      code: 2,
      stdout: '',
      stderr: `error: INTERLOCK_LOCK_TIMEOUT_MS must be a whole number of milliseconds from 1 to 3600000, got ${JSON.stringify(bad)}\n`,
    });
  }
  const listed = JSON.parse((await cli({}, 'identity', 'list', '--json')).stdout) as Array<{ name: string }>;
  expect(listed.map((i) => i.name)).not.toContain('never-made');
});

/** Runs `fn` with the URL of a loopback server that accepts connections, reads and never answers; closes it after. */
async function withSilentServer(fn: (url: string, port: number) => Promise<void>): Promise<void> {
  const sockets: Socket[] = [];
  const server: Server = createServer((sock) => void sockets.push(sock));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  try {
    await fn(`postgres://root:secret@127.0.0.1:${port}/interlock`, port);
  } finally {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  }
}

/** The one line of a run whose control database at `port` never answered. */
const noAnswer = (port: number): Run => ({ code: 1, stdout: '', stderr: 'error: cannot reach the control database at postgres://root:***@127.0.0.1:' + port + '/interlock: no answer within 5000 ms\n' });

test('a control database that accepts the connection and never answers: exit 1 after the 5 s connect bound, one line without driver text', () =>
  withSilentServer(async (url, port) => expect(await run(['--database-url', url, 'identity', 'create', 'never-made'])).toEqual(noAnswer(port))));

// Task hsm2 item 3: `db status` opened its own pool without the CLI's bounds and waited forever on
// such a server (the run was killed at RUN_LIMIT_MS); now it gets the same 5 s connect bound.
test('db status on a control database that accepts the connection and never answers: exit 1 after the 5 s connect bound, one error line', () =>
  withSilentServer(async (url, port) => expect(await run(['--database-url', url, 'db', 'status'])).toEqual(noAnswer(port))));
