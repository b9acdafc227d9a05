/**
 * Bench environments on this machine's PostgreSQL (INTERLOCK_TEST_PG_URL, default
 * postgres://root@127.0.0.1:5432/postgres): a fresh control database with Chinook provisioned by
 * the demo provisioner under unique names, gateway child processes (`node bin/interlock.js serve`
 * or the bench harness), and /proc readings of a child's memory. Everything is loopback and is
 * removed by `close()`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { ADMIN_URL, createTempDatabase, urlFor } from '../../test/helpers/pg';
import { openControlDb, type ControlDb } from '../../src/control/db';
import { getSource, putSource } from '../../src/control/sources';
import { provisionDemo, type ProvisionedDemo } from '../../src/demo/provision';
import { createLogger } from '../../src/observability/logger';

/** Repository root (bench/lib/../..). */
export const ROOT = path.resolve(__dirname, '..', '..');

/** The provisioned control database and Chinook source. */
export interface BenchEnv {
  controlUrl: string;
  apiKey: string;
  demo: ProvisionedDemo;
  /** An open handle on the control database (the bench's own; gateways open theirs). */
  db: ControlDb;
  /** Connection settings of the source's reader role: what the direct-`pg` baselines use. */
  reader: pg.ClientConfig;
  /** Superuser URL of the Chinook copy. */
  sourceUrl: string;
  close(): Promise<void>;
}

/**
 * Creates the control database, provisions Chinook as source `chinook` with identity
 * `demo-agent`, and applies `sourceSettings` over the provisioned source settings (e.g. max_rows).
 */
export async function provisionBenchEnv(opts: { sourceSettings?: Record<string, unknown> } = {}): Promise<BenchEnv> {
  const tag = randomBytes(4).toString('hex');
  const control = await createTempDatabase('bench_control');
  const databaseName = `il_bench_chinook_${tag}`;
  const rolePrefix = `il_bench_${tag}`;
  const logger = createLogger('silent');
  let db: ControlDb | null = null;
  let demo: ProvisionedDemo | null = null;
  const drop = async () => {
    await db?.close().catch(() => undefined);
    await control.drop().catch(() => undefined);
    const admin = new pg.Client({ connectionString: ADMIN_URL });
    await admin.connect();
    try {
      await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [databaseName]);
      await admin.query(`DROP DATABASE IF EXISTS "${databaseName}"`);
      for (const r of [`${rolePrefix}_reader`, `${rolePrefix}_writer`]) await admin.query(`DROP ROLE IF EXISTS "${r}"`).catch(() => undefined);
    } finally {
      await admin.end();
    }
  };
  try {
    db = await openControlDb(control.url, { logger });
    demo = await provisionDemo({ adminUrl: ADMIN_URL, controlDb: db, databaseName, rolePrefix, sourceId: 'chinook', identityName: 'demo-agent', logger });
    const src = await getSource(db, 'chinook');
    if (!src || src.type !== 'postgres') throw new Error('provisioned source chinook not found');
    const settings = { ...(src.settings as unknown as Record<string, unknown>), ...(opts.sourceSettings ?? {}) };
    if (opts.sourceSettings) await putSource(db, { id: src.id, type: src.type, name: src.name, description: src.description ?? '', enabled: src.enabled, settings });
    const s = settings as { host: string; port: number; database: string; reader: { user: string; password?: string } };
    const reader: pg.ClientConfig = { host: s.host, port: s.port, database: s.database, user: s.reader.user, password: s.reader.password ?? '' };
    const closeDb = db;
    return {
      controlUrl: control.url,
      apiKey: demo.apiKey,
      demo,
      db: closeDb,
      reader,
      sourceUrl: urlFor(databaseName),
      close: drop,
    };
  } catch (err) {
    await drop().catch(() => undefined);
    throw err;
  }
}

/** A gateway running in a child process. */
export interface GatewayChild {
  /** MCP endpoint URL. */
  url: string;
  pid: number;
  proc: ChildProcess;
  /** GET /metrics parsed to name → value (unlabelled series only). */
  metrics(): Promise<Record<string, number>>;
  /** Sends an IPC message and waits for the child's reply (harness children only). */
  ask(msg: Record<string, unknown>): Promise<Record<string, unknown>>;
  /** SIGTERM, then SIGKILL after 10 s. */
  stop(): Promise<void>;
}

/** The environment of a gateway child: the caller's minus INTERLOCK_* (a stray variable would fail config loading), plus `vars`. */
function childEnv(vars: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('INTERLOCK_') || k === 'INTERLOCK_TEST_PG_URL') env[k] = v;
  return { ...env, ...vars };
}

/**
 * Gateway configuration for a bench child through INTERLOCK_* variables: the control database,
 * rate limits high enough never to refuse (the limiter still runs on every call), log level warn
 * and the cache time to live.
 */
export function gatewayVars(controlUrl: string, opts: { cacheTtlMs?: number; poolSize?: number } = {}): Record<string, string> {
  return {
    INTERLOCK_DATABASE_URL: controlUrl,
    INTERLOCK_RATE_LIMIT_IDENTITY_POINTS: '1000000',
    INTERLOCK_RATE_LIMIT_SOURCE_POINTS: '1000000',
    INTERLOCK_LOG_LEVEL: 'warn',
    INTERLOCK_CACHE_TTL_MS: String(opts.cacheTtlMs ?? 30_000),
    ...(opts.poolSize ? { INTERLOCK_DATABASE_POOL_SIZE: String(opts.poolSize) } : {}),
  };
}

/** A child that declined to run (printed "SKIP <reason>"), e.g. an optional package is missing. */
export class SkipError extends Error {}

/** Children still running; killed when the bench process exits, whatever the reason. */
const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});

function startChild(args: string[], env: NodeJS.ProcessEnv, ready: RegExp, label: string, ipc = false): Promise<GatewayChild> {
  const proc = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ipc ? ['ignore', 'pipe', 'pipe', 'ipc'] : ['ignore', 'pipe', 'pipe'] });
  live.add(proc);
  proc.once('exit', () => live.delete(proc));
  let stderr = '';
  proc.stderr!.on('data', (c: Buffer) => {
    stderr = (stderr + c.toString()).slice(-4000);
  });
  return new Promise<GatewayChild>((resolve, reject) => {
    let out = '';
    let done = false;
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`${label} did not start within 60 s; stderr: ${stderr}`));
    }, 60_000);
    const onExit = (code: number | null) => {
      clearTimeout(timer);
      const skip = /^SKIP (.*)$/m.exec(out);
      reject(skip ? new SkipError(skip[1]) : new Error(`${label} exited (${code}) before it was ready; stdout: ${out.slice(-1000)} stderr: ${stderr}`));
    };
    proc.once('close', onExit);
    proc.stdout!.on('data', (c: Buffer) => {
      if (done) return;
      out += c.toString();
      const m = ready.exec(out);
      if (!m) return;
      done = true;
      clearTimeout(timer);
      proc.removeListener('close', onExit);
      const url = m[1];
      const base = new URL(url);
      let seq = 0;
      resolve({
        url,
        pid: proc.pid!,
        proc,
        async metrics() {
          const r = await fetch(`${base.protocol}//${base.host}/metrics`);
          const out: Record<string, number> = {};
          for (const line of (await r.text()).split('\n')) {
            const mm = /^([a-z_:]+) ([0-9.eE+-]+)$/.exec(line);
            if (mm) out[mm[1]] = Number(mm[2]);
          }
          return out;
        },
        ask(msg) {
          const id = ++seq;
          return new Promise((res, rej) => {
            const onMsg = (m: Record<string, unknown>) => {
              if (m.id !== id) return;
              proc.removeListener('message', onMsg);
              if (typeof m.error === 'string') rej(new Error(m.error));
              else res(m);
            };
            proc.on('message', onMsg);
            proc.send({ ...msg, id });
          });
        },
        stop() {
          return new Promise<void>((res) => {
            if (proc.exitCode !== null || proc.signalCode !== null) return res();
            const k = setTimeout(() => proc.kill('SIGKILL'), 10_000);
            proc.once('exit', () => {
              clearTimeout(k);
              res();
            });
            proc.kill('SIGTERM');
          });
        },
      });
    });
  });
}

/**
 * Starts `node bin/interlock.js serve` on 127.0.0.1 with a free port and the given INTERLOCK_*
 * variables. `nodeFlags` (default: BENCH_GATEWAY_NODE_FLAGS split on spaces, e.g. "--cpu-prof
 * --cpu-prof-dir=/tmp/prof" to profile the gateway under load) go before the script. `root` is the
 * checkout whose bin/interlock.js runs (default this one; another one for before/after runs).
 */
export function startServe(vars: Record<string, string>, nodeFlags: string[] = (process.env.BENCH_GATEWAY_NODE_FLAGS ?? '').split(' ').filter(Boolean), root: string = ROOT): Promise<GatewayChild> {
  return startChild([...nodeFlags, path.join(root, 'bin', 'interlock.js'), 'serve', '--host', '127.0.0.1', '--port', '0'], childEnv(vars), /listening on (http:\/\/\S+\/mcp)/, 'interlock serve');
}

/** Starts a TypeScript child under tsx (`node -r tsx/cjs FILE`) with extra node flags; it must print "READY <url>". */
export function startTsChild(file: string, vars: Record<string, string>, nodeFlags: string[] = []): Promise<GatewayChild> {
  return startChild([...nodeFlags, '-r', 'tsx/cjs', path.join(ROOT, file)], childEnv(vars), /READY (\S+)/, file, true);
}

/** Resident set size and its high-water mark of a process, in KiB (from /proc/PID/status). */
export function procMemory(pid: number): { rssKiB: number; hwmKiB: number } {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  const get = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(s)?.[1] ?? NaN);
  return { rssKiB: get('VmRSS'), hwmKiB: get('VmHWM') };
}

/** Resets a process's RSS high-water mark to its current RSS (Linux: write 5 to /proc/PID/clear_refs). Returns false when not permitted. */
export function resetPeakRss(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

/** Runs `fn` with a provisioned environment and always removes it (also on SIGINT/SIGTERM). */
export async function withBenchEnv<T>(opts: Parameters<typeof provisionBenchEnv>[0], fn: (env: BenchEnv) => Promise<T>): Promise<T> {
  const env = await provisionBenchEnv(opts);
  const onSignal = () => {
    void env.close().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    return await fn(env);
  } finally {
    process.removeListener('SIGINT', onSignal);
    process.removeListener('SIGTERM', onSignal);
    await env.close();
  }
}

/** Waits `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
