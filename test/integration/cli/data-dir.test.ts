/**
 * Issue 14 items 8 and 9: the CLI finds the same embedded control database from any folder and a
 * read command never creates one; the demo's key for a start revokes the earlier demo keys.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cliCommandPrefix, missingDatabaseMessage, resolveEmbeddedDataDir, userDataDir } from '../../../src/cli/data-dir';
import { freshControlDb, type TestControlDb } from '../control/control-db';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey, DbIdentityResolver, listApiKeys } from '../../../src/control/keys';
import { issueDemoKey } from '../../../src/demo/provision';

const BIN = join(__dirname, '..', '..', '..', 'bin', 'interlock.js');

describe('resolveEmbeddedDataDir (pure)', () => {
  const clusters = new Set(['/work/clone/.interlock/pg/data/PG_VERSION']);
  const ctx = (cwd: string, env: NodeJS.ProcessEnv = {}) => ({ cwd, home: '/home/ana', env, exists: (p: string) => clusters.has(p) });

  test("a clone's database is found from any subfolder", () => {
    expect(resolveEmbeddedDataDir('.interlock/pg', ctx('/work/clone/src/cli'))).toEqual({
      dir: '/work/clone/.interlock/pg', source: 'found',
      looked: ['/work/clone/src/cli/.interlock/pg', '/work/clone/src/.interlock/pg', '/work/clone/.interlock/pg'],
    });
  });
  test('elsewhere: the per-user data folder (XDG_DATA_HOME when absolute)', () => {
    expect(resolveEmbeddedDataDir('.interlock/pg', ctx('/tmp/x'))).toMatchObject({ dir: '/home/ana/.local/share/interlock/pg', source: 'user' });
    expect(resolveEmbeddedDataDir('.interlock/pg', ctx('/tmp/x', { XDG_DATA_HOME: '/data' })).dir).toBe('/data/interlock/pg');
    expect(userDataDir({ home: '/home/ana', env: { XDG_DATA_HOME: 'relative' } })).toBe('/home/ana/.local/share/interlock/pg');
  });
  test("as root (the home is private to the embedded server's system user): the installation's own .interlock/pg", () => {
    const root = { ...ctx('/tmp/x'), installRoot: '/srv/interlock', privateHome: true };
    expect(resolveEmbeddedDataDir('.interlock/pg', root)).toEqual({
      dir: '/srv/interlock/.interlock/pg',
      source: 'user',
      looked: ['/tmp/x/.interlock/pg', '/tmp/.interlock/pg', '/.interlock/pg', '/srv/interlock/.interlock/pg'],
    });
    // a clone's database under the current folder still wins
    expect(resolveEmbeddedDataDir('.interlock/pg', { ...root, cwd: '/work/clone/src' }).dir).toBe('/work/clone/.interlock/pg');
  });
  test('as root inside the installation with no database: the message names the installation\'s folder last, not /.interlock/pg (fx45 item 3)', () => {
    const r = resolveEmbeddedDataDir('.interlock/pg', { ...ctx('/srv/interlock/src'), installRoot: '/srv/interlock', privateHome: true });
    expect(r).toMatchObject({ dir: '/srv/interlock/.interlock/pg', source: 'user' });
    expect(missingDatabaseMessage(r)).toMatch(/^no InterLock control database found \(looked for \.interlock\/pg in \/srv\/interlock\/src and every parent folder, and \/srv\/interlock\/\.interlock\/pg\); nothing was created\. /);
  });

  test('a configured folder is used as given', () => {
    expect(resolveEmbeddedDataDir('db/pg', ctx('/srv'))).toEqual({ dir: '/srv/db/pg', source: 'configured', looked: ['/srv/db/pg'] });
  });
  test('the message says where it looked and how to point elsewhere', () => {
    const r = resolveEmbeddedDataDir('.interlock/pg', ctx('/tmp/x'));
    expect(missingDatabaseMessage(r)).toBe(
      'no InterLock control database found (looked for .interlock/pg in /tmp/x and every parent folder, and /home/ana/.local/share/interlock/pg); nothing was created. Start one with npm start (or interlock demo / serve), or point the CLI at yours with INTERLOCK_EMBEDDED_DATA_DIR=FOLDER (the gateway\'s "Control data:" folder), --database-url URL, INTERLOCK_DATABASE_URL, or database.embedded_data_dir in --config FILE',
    );
  });
  test("the demo banner's CLI prefix: the configured folder, shell-quoted when needed; none for the default search (fx45 item 1a)", () => {
    expect(cliCommandPrefix(resolveEmbeddedDataDir('/data/my pg', ctx('/srv')))).toBe("INTERLOCK_EMBEDDED_DATA_DIR='/data/my pg' ");
    expect(cliCommandPrefix(resolveEmbeddedDataDir("/data/it's", ctx('/srv')))).toBe("INTERLOCK_EMBEDDED_DATA_DIR='/data/it'\\''s' ");
    expect(cliCommandPrefix(resolveEmbeddedDataDir('db/pg', ctx('/srv')))).toBe('INTERLOCK_EMBEDDED_DATA_DIR=/srv/db/pg ');
    expect(cliCommandPrefix(resolveEmbeddedDataDir('.interlock/pg', ctx('/work/clone/src')))).toBe('');
    expect(cliCommandPrefix(resolveEmbeddedDataDir('.interlock/pg', ctx('/tmp/x')))).toBe('');
  });
});

/** Runs the CLI with a fresh HOME and folder and no INTERLOCK_* variables except `extra`; returns its exit code and output. */
async function runIsolated(args: string[], extra: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string; home: string; cwd: string }> {
  const home = mkdtempSync(join(tmpdir(), 'il-home-'));
  const cwd = join(home, 'some', 'folder');
  mkdirSync(cwd, { recursive: true });
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('INTERLOCK_') && k !== 'XDG_DATA_HOME') env[k] = v;
  Object.assign(env, { HOME: home }, extra);
  const r = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(process.execPath, [BIN, ...args], { cwd, env, timeout: 60_000 }, (err, stdout, stderr) => resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, stdout: String(stdout), stderr: String(stderr) }));
  });
  return { ...r, home, cwd };
}

const READ_ONLY = [[['approval', 'list']], [['export']], [['audit', 'verify']]];
// fx45 item 1b: a writing command refuses the same way; only serve and demo create a database.
const WRITING = [[['operator-token', 'create', 'dave']], [['approval', 'approve', 'apr_0000', '--yes']], [['identity', 'create', 'x']], [['db', 'migrate']]];

test.each([...READ_ONLY, ...WRITING])('a command (%j) with no control database in the configured folder exits 3 and creates nothing', async (args) => {
  const empty = mkdtempSync(join(tmpdir(), 'il-empty-'));
  const r = await runIsolated(args, { INTERLOCK_EMBEDDED_DATA_DIR: join(empty, 'pg') });
  try {
    expect([r.code, r.stdout]).toEqual([3, '']);
    expect(r.stderr).toContain(`error: no InterLock control database found (looked for ${join(empty, 'pg')}); nothing was created.`);
    expect(readdirSync(empty)).toEqual([]);
    expect(readdirSync(r.cwd)).toEqual([]);
  } finally {
    rmSync(r.home, { recursive: true, force: true });
    rmSync(empty, { recursive: true, force: true });
  }
}, 60_000);

// As root the installation's own .interlock/pg replaces the per-user folder (the embedded server cannot
// enter /root): once `npm start` has run as root in this clone, the default search rightly finds that
// database, and only the configured-folder test above can show "nothing found". CI runs on a fresh clone.
const rootFallback = join(__dirname, '..', '..', '..', '.interlock', 'pg');
const defaultSearchFindsNothing = !(process.getuid?.() === 0 && existsSync(join(rootFallback, 'data', 'PG_VERSION')));
(defaultSearchFindsNothing ? test.each([...READ_ONLY, ...WRITING]) : test.skip.each([...READ_ONLY, ...WRITING]))('a command (%j) with no control database anywhere (default search) exits 3 and creates nothing', async (args) => {
  const r = await runIsolated(args);
  try {
    expect([r.code, r.stdout]).toEqual([3, '']);
    const fallback = process.getuid?.() === 0 ? rootFallback : join(r.home, '.local', 'share', 'interlock', 'pg');
    expect(r.stderr).toContain(`error: no InterLock control database found (looked for .interlock/pg in ${r.cwd} and every parent folder, and ${fallback}); nothing was created.`);
    expect(existsSync(join(r.home, '.local'))).toBe(false);
    expect(readdirSync(r.cwd)).toEqual([]);
  } finally {
    rmSync(r.home, { recursive: true, force: true });
  }
}, 60_000);

describe('issueDemoKey', () => {
  let t: TestControlDb;
  beforeAll(async () => {
    t = await freshControlDb('ctl_demokey');
  });
  afterAll(async () => t?.cleanup());

  test('each start issues one key and revokes the earlier ones, so only the newest works', async () => {
    const idn = await createIdentity(t.db, 'demo-agent');
    const old = await createApiKey(t.db, idn.id);
    const first = await issueDemoKey(t.db, idn.id);
    expect(first.revoked).toEqual([old.keyId]);
    const second = await issueDemoKey(t.db, idn.id);
    expect(second.revoked).toEqual([first.keyId]);
    const resolver = new DbIdentityResolver(t.db, { cacheTtlMs: 0 });
    expect(await resolver.resolve(old.secret)).toBeNull();
    expect(await resolver.resolve(first.apiKey)).toBeNull();
    expect(await resolver.resolve(second.apiKey)).toMatchObject({ name: 'demo-agent', keyId: second.keyId });
    expect((await listApiKeys(t.db, { identityId: idn.id })).filter((k) => k.status === 'active').map((k) => k.id)).toEqual([second.keyId]);
  });
});
