/**
 * Throwaway PostgreSQL clusters for connector tests: initdb + pg_ctl from Debian's binaries, run
 * as the `postgres` user in a temp dir on a free loopback port, optionally with ssl=on and a test
 * CA and server certificate generated here with openssl. Always `destroy()` in afterAll.
 */
import { execFile } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync, appendFileSync, readFileSync, chmodSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Directory of the newest installed PostgreSQL's binaries. */
export function pgBinDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  if (!versions.length) throw new Error('no PostgreSQL binaries under /usr/lib/postgresql');
  return join(root, versions[0], 'bin');
}

/** A free TCP port on 127.0.0.1 (closed again before returning). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

/** A test CA and server certificate (PEM). */
export interface TestPki {
  caCert: string;
  /** A second, unrelated CA (for "wrong CA" tests). */
  otherCaCert: string;
  serverCertFile: string;
  serverKeyFile: string;
  /** DNS name in the server certificate's subjectAltName. */
  serverName: string;
}

async function openssl(args: string[], cwd: string): Promise<void> {
  await run('openssl', args, { cwd });
}

/** Generates a CA, a server certificate for `serverName` signed by it, and an unrelated CA, in `dir`. */
export async function makePki(dir: string, serverName: string): Promise<TestPki> {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  await openssl(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '2', '-subj', '/CN=InterLock Test CA',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign'], dir);
  await openssl(['req', '-x509', ...ec, '-keyout', 'other.key', '-out', 'other.crt', '-days', '2', '-subj', '/CN=Unrelated Test CA',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign'], dir);
  await openssl(['req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', `/CN=${serverName}`], dir);
  writeFileSync(join(dir, 'server.ext'), `subjectAltName=DNS:${serverName}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n`);
  await openssl(['x509', '-req', '-in', 'server.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.crt', '-days', '2', '-extfile', 'server.ext'], dir);
  return {
    caCert: readFileSync(join(dir, 'ca.crt'), 'utf8'),
    otherCaCert: readFileSync(join(dir, 'other.crt'), 'utf8'),
    serverCertFile: join(dir, 'server.crt'),
    serverKeyFile: join(dir, 'server.key'),
    serverName,
  };
}

/** A running throwaway cluster. The superuser `postgres` may connect over TCP (trust unless `hba` says otherwise). */
export interface Cluster {
  host: '127.0.0.1';
  port: number;
  baseDir: string;
  pki?: TestPki;
  /** Connection URL as the superuser (trust). */
  url(database?: string): string;
  start(): Promise<void>;
  stop(): Promise<void>;
  destroy(): Promise<void>;
}

/**
 * Creates and starts a cluster.
 * @param opts.ssl enable ssl=on with a generated PKI (server name `db.interlock.test`)
 * @param opts.hba extra pg_hba.conf lines placed BEFORE the default trust lines for postgres
 */
export async function startCluster(opts: { ssl?: boolean; hba?: string[] } = {}): Promise<Cluster> {
  const bin = pgBinDir();
  const baseDir = mkdtempSync('/tmp/il-pgc-');
  const { stdout } = await run('id', ['-u', 'postgres']);
  const { stdout: gid } = await run('id', ['-g', 'postgres']);
  chownSync(baseDir, Number(stdout.trim()), Number(gid.trim()));
  chmodSync(baseDir, 0o700);
  const data = join(baseDir, 'data');
  const asPg = (cmd: string, args: string[]) => run('runuser', ['-u', 'postgres', '--', join(bin, cmd), ...args], { cwd: baseDir });
  await asPg('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync', '--no-instructions']);
  const port = await freePort();
  let pki: TestPki | undefined;
  const conf = [
    `listen_addresses = '127.0.0.1'`,
    `port = ${port}`,
    `unix_socket_directories = '${baseDir}'`,
    `fsync = off`,
    `synchronous_commit = off`,
    `full_page_writes = off`,
    `max_connections = 40`,
    `shared_buffers = 16MB`,
    `password_encryption = 'scram-sha-256'`,
    `log_min_messages = warning`,
  ];
  if (opts.ssl) {
    pki = await makePki(baseDir, 'db.interlock.test');
    conf.push(`ssl = on`, `ssl_cert_file = '${pki.serverCertFile}'`, `ssl_key_file = '${pki.serverKeyFile}'`);
  }
  appendFileSync(join(data, 'postgresql.conf'), '\n' + conf.join('\n') + '\n');
  const hba = [...(opts.hba ?? []), 'local all all trust', 'host all all 127.0.0.1/32 trust'];
  writeFileSync(join(data, 'pg_hba.conf'), hba.join('\n') + '\n');
  await run('chown', ['-R', 'postgres:postgres', baseDir]);
  await run('chmod', ['600', ...(pki ? [pki.serverKeyFile] : []), join(data, 'pg_hba.conf')]);
  let running = false;
  const cluster: Cluster = {
    host: '127.0.0.1',
    port,
    baseDir,
    pki,
    url: (database = 'postgres') => `postgres://postgres@127.0.0.1:${port}/${database}`,
    async start() {
      await asPg('pg_ctl', ['-D', data, '-l', join(baseDir, 'server.log'), '-w', '-t', '30', 'start']);
      running = true;
    },
    async stop() {
      if (!running) return;
      await asPg('pg_ctl', ['-D', data, '-w', '-t', '30', '-m', 'fast', 'stop']);
      running = false;
    },
    async destroy() {
      try {
        await cluster.stop();
      } catch {
        await asPg('pg_ctl', ['-D', data, '-m', 'immediate', 'stop']).catch(() => undefined);
      }
      rmSync(baseDir, { recursive: true, force: true });
    },
  };
  try {
    await cluster.start();
  } catch (err) {
    rmSync(baseDir, { recursive: true, force: true });
    throw err;
  }
  return cluster;
}
