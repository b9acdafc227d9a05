/**
 * Private PostgreSQL 15 clusters for fault tests (issue 29): a primary and a streaming replica in a
 * temporary folder, on free loopback ports, run as the `postgres` OS user (initdb refuses root),
 * superuser `root`, trust authentication on 127.0.0.1 only. `destroy()` stops both (immediate) and
 * removes the folder; call it in afterAll whatever happened.
 */
import { execFile } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync, writeFileSync, appendFileSync, readFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
/** Where PostgreSQL 15's programs are. */
export const PG_BIN = process.env.INTERLOCK_TEST_PG_BIN ?? '/usr/lib/postgresql/15/bin';

/** One cluster of a ClusterPair. */
export interface Cluster {
  dir: string;
  port: number;
  /** URL of database `db` as root. */
  url(db: string): string;
  /** Process id of the postmaster (from postmaster.pid), or null when not running. */
  pid(): number | null;
}

/** A primary and its streaming replica. */
export interface ClusterPair {
  primary: Cluster;
  replica: Cluster;
  /** Runs pg_ctl `args` on `c` as the postgres user (e.g. ['stop', '-m', 'fast']), waiting. */
  ctl(c: Cluster, ...args: string[]): Promise<void>;
  /** Stops both (immediate) and deletes the folder. Never throws. */
  destroy(): Promise<void>;
}

async function asPostgres(cmd: string, args: string[], timeoutMs = 30_000): Promise<string> {
  const r = await run('runuser', ['-u', 'postgres', '--', join(PG_BIN, cmd), ...args], { timeout: timeoutMs });
  return r.stdout;
}

/** A free loopback port (bound, read, released). */
export async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

function cluster(dir: string, port: number): Cluster {
  return {
    dir,
    port,
    url: (db) => `postgresql://root@127.0.0.1:${port}/${db}`,
    pid() {
      try {
        return Number(readFileSync(join(dir, 'postmaster.pid'), 'utf8').split('\n')[0]) || null;
      } catch {
        return null;
      }
    },
  };
}

/**
 * Creates and starts a primary, then a replica from pg_basebackup -R (streaming, hot standby).
 * Bounded by the child processes' timeouts (30 s each). On failure everything made is removed.
 */
export async function startClusterPair(): Promise<ClusterPair> {
  const base = mkdtempSync(join(tmpdir(), 'il-cluster-'));
  const [pPort, rPort] = [await freePort(), await freePort()];
  const primary = cluster(join(base, 'primary'), pPort);
  const replica = cluster(join(base, 'replica'), rPort);
  const ctl = async (c: Cluster, ...args: string[]) => {
    await asPostgres('pg_ctl', ['-D', c.dir, '-w', '-t', '20', '-l', join(base, `${c.port}.log`), ...args]);
  };
  const destroy = async () => {
    for (const c of [replica, primary]) {
      const pid = c.pid();
      if (pid) {
        try {
          process.kill(pid, 'SIGCONT');
        } catch {
          // not running
        }
      }
      await asPostgres('pg_ctl', ['-D', c.dir, '-m', 'immediate', '-w', '-t', '10', 'stop'], 15_000).catch(() => undefined);
    }
    rmSync(base, { recursive: true, force: true });
  };
  try {
    // The postgres user needs the parent folder's name resolved: ids come from the machine's passwd.
    const { uid, gid } = await run('id', ['-u', 'postgres']).then(async (u) => ({ uid: Number(u.stdout), gid: Number((await run('id', ['-g', 'postgres'])).stdout) }));
    chownSync(base, uid, gid);
    await asPostgres('initdb', ['-D', primary.dir, '-U', 'root', '-A', 'trust', '--no-sync', '-E', 'UTF8', '--locale', 'C']);
    appendFileSync(
      join(primary.dir, 'postgresql.conf'),
      [`port = ${pPort}`, "listen_addresses = '127.0.0.1'", `unix_socket_directories = '${base}'`, 'wal_level = replica', 'max_wal_senders = 4', 'hot_standby = on', 'fsync = off', 'shared_buffers = 16MB', 'max_connections = 60', 'wal_sender_timeout = 5s'].join('\n') + '\n',
    );
    writeFileSync(join(primary.dir, 'pg_hba.conf'), 'local all all trust\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n');
    await ctl(primary, 'start');
    await asPostgres('pg_basebackup', ['-h', '127.0.0.1', '-p', String(pPort), '-U', 'root', '-D', replica.dir, '-R', '-X', 'stream', '--no-sync']);
    appendFileSync(join(replica.dir, 'postgresql.conf'), `port = ${rPort}\n`);
    await ctl(replica, 'start');
  } catch (err) {
    await destroy();
    throw err;
  }
  return { primary, replica, ctl, destroy };
}
