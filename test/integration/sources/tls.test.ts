/**
 * Upstream TLS per source (issue 5 item 3) against a throwaway cluster with ssl=on and a CA and
 * server certificate made here (SAN DNS:db.interlock.test only). Modes off / require / verify-ca /
 * verify-full; a refused or failed handshake is upstream_tls_refused; never a plaintext fall-back.
 */
import { PostgresSourceConnector, SourceError, type PostgresSourceSettings } from '../../../src/sources/postgres/connector';
import { ADMIN_URL } from '../../helpers/pg';
import { startCluster, type Cluster } from './cluster';
import { startFakePg } from './fakes';
import { sleep, waitFor } from './source-db';
import { Client } from 'pg';

const BIG = { maxRows: 100, maxBytes: 1e6 };
const SSL_SQL = 'SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()';
let cluster: Cluster;
const open: PostgresSourceConnector[] = [];

beforeAll(async () => {
  cluster = await startCluster({ ssl: true });
}, 60_000);
afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
});
afterAll(async () => {
  await cluster?.destroy();
});

function make(tls: PostgresSourceSettings['tls'], extra: Partial<PostgresSourceSettings> = {}): PostgresSourceConnector {
  const c = new PostgresSourceConnector('tls', {
    host: '127.0.0.1',
    port: cluster.port,
    database: 'postgres',
    reader: { user: 'postgres' },
    tls,
    breaker: { failure_threshold: 100 },
    ...extra,
  });
  open.push(c);
  return c;
}
async function refusal(c: PostgresSourceConnector): Promise<SourceError> {
  const err = await c.read(SSL_SQL, [], BIG).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(SourceError);
  return err as SourceError;
}
function expectSafe(err: SourceError, port: number) {
  const text = `${err.message} ${JSON.stringify(err)}`;
  for (const s of ['127.0.0.1', 'localhost', 'db.interlock.test', String(port), 'postgres', 'certificate', 'altnames', 'SSL']) {
    expect(text).not.toContain(s);
  }
}

test('verify-full with the CA and the certificate name: encrypted and verified', async () => {
  const c = make({ mode: 'verify-full', ca: cluster.pki!.caCert, servername: 'db.interlock.test' });
  const r = await c.read(SSL_SQL, [], BIG);
  expect(r.rows[0].ssl).toBe(true);
  expect(String(r.rows[0].version)).toMatch(/^TLSv1\.[23]$/);
});

test('verify-full: host name mismatch (no servername, IP not in the certificate; or a wrong name) is upstream_tls_refused', async () => {
  for (const tls of [
    { mode: 'verify-full' as const, ca: cluster.pki!.caCert },
    { mode: 'verify-full' as const, ca: cluster.pki!.caCert, servername: 'other.interlock.test' },
  ]) {
    const err = await refusal(make(tls));
    expect(err.code).toBe('upstream_tls_refused');
    expect(err.message).toBe("The source's upstream TLS was refused.");
    expect(err.sourceFailure).toBe(true);
    expectSafe(err, cluster.port);
  }
});

test('verify-ca: the chain is verified but not the host name', async () => {
  const ok = make({ mode: 'verify-ca', ca: cluster.pki!.caCert });
  expect((await ok.read(SSL_SQL, [], BIG)).rows[0].ssl).toBe(true);
  const wrongCa = await refusal(make({ mode: 'verify-ca', ca: cluster.pki!.otherCaCert }));
  expect(wrongCa.code).toBe('upstream_tls_refused');
  expectSafe(wrongCa, cluster.port);
  const systemStore = await refusal(make({ mode: 'verify-ca' }));
  expect(systemStore.code).toBe('upstream_tls_refused');
  const fullWrongCa = await refusal(make({ mode: 'verify-full', ca: cluster.pki!.otherCaCert, servername: 'db.interlock.test' }));
  expect(fullWrongCa.code).toBe('upstream_tls_refused');
});

test('require: encrypted without verification; off: plaintext', async () => {
  expect((await make({ mode: 'require' }).read(SSL_SQL, [], BIG)).rows[0].ssl).toBe(true);
  expect((await make({ mode: 'off' }).read(SSL_SQL, [], BIG)).rows[0].ssl).toBe(false);
  expect((await make(undefined).read(SSL_SQL, [], BIG)).rows[0].ssl).toBe(false);
});

test('a server without TLS: every TLS mode is refused, never a plaintext fall-back', async () => {
  // The machine's PostgreSQL runs with ssl=off; a fake server answers the SSLRequest with 'N' too.
  const admin = new URL(ADMIN_URL);
  const plainHost = admin.hostname;
  const plainPort = Number(admin.port || 5432);
  const probe = new Client({ connectionString: ADMIN_URL });
  await probe.connect();
  const sslOff = (await probe.query('SHOW ssl')).rows[0].ssl === 'off';
  const before = Number((await probe.query(`SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'interlock:tls:reader'`)).rows[0].n);
  const fake = await startFakePg({ kind: 'query_error', fields: { S: 'ERROR', V: 'ERROR', C: 'XX000', M: 'plaintext reached' } });
  try {
    for (const mode of ['require', 'verify-ca', 'verify-full'] as const) {
      if (sslOff) {
        const err = await refusal(make({ mode, ca: cluster.pki!.caCert }, { host: plainHost, port: plainPort, database: admin.pathname.slice(1) || 'postgres', reader: { user: decodeURIComponent(admin.username) } }));
        expect(err.code).toBe('upstream_tls_refused');
        expectSafe(err, plainPort);
      }
      const viaFake = await refusal(make({ mode, ca: cluster.pki!.caCert }, { port: fake.port }));
      expect(viaFake.code).toBe('upstream_tls_refused');
    }
    const after = Number((await probe.query(`SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'interlock:tls:reader'`)).rows[0].n);
    expect(after).toBe(before); // no plaintext session was opened
  } finally {
    await fake.close();
    await probe.end();
  }
});

test('TLS refusals count toward the breaker', async () => {
  const c = make({ mode: 'verify-ca', ca: cluster.pki!.otherCaCert }, { breaker: { failure_threshold: 2, reset_timeout_ms: 60_000 } });
  expect((await refusal(c)).code).toBe('upstream_tls_refused');
  expect((await refusal(c)).code).toBe('upstream_tls_refused');
  expect(c.breakerState()).toBe('open');
  expect((await refusal(c)).code).toBe('circuit_open');
});

test('cancellation works over TLS (the CancelRequest goes through TLS too) within 1 s', async () => {
  const c = make({ mode: 'verify-full', ca: cluster.pki!.caCert, servername: 'db.interlock.test' });
  const admin = new Client({ connectionString: cluster.url() });
  await admin.connect();
  try {
    const ac = new AbortController();
    const p = c.read('SELECT pg_sleep(30)', [], { ...BIG, signal: ac.signal });
    p.catch(() => undefined);
    let pid = 0;
    await waitFor(async () => {
      const r = await admin.query(`SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' AND state = 'active'`);
      pid = r.rows[0]?.pid ?? 0;
      return pid !== 0;
    }, 3000);
    expect(pid).not.toBe(0);
    await sleep(300);
    const t0 = Date.now();
    ac.abort();
    await expect(p).rejects.toMatchObject({ code: 'cancelled' });
    const gone = await waitFor(async () => {
      const r = await admin.query(`SELECT state FROM pg_stat_activity WHERE pid = $1`, [pid]);
      return r.rows.length === 0 || r.rows[0].state !== 'active';
    }, 1000);
    expect(gone).toBeGreaterThanOrEqual(0);
    expect(Date.now() - t0).toBeLessThan(1000);
    expect((await c.read(SSL_SQL, [], BIG)).rows[0].ssl).toBe(true);
  } finally {
    await admin.end();
  }
});

test('the wire budget reads the decrypted protocol: over TLS a row past the budget is result_too_large, earlier rows are truncated', async () => {
  const c = make({ mode: 'require' });
  await expect(c.read("SELECT repeat('x', 20000000) AS v", [], BIG)).rejects.toMatchObject({ code: 'result_too_large', sourceFailure: false });
  const r = await c.read("SELECT g, CASE WHEN g < 3 THEN 'small' ELSE repeat('x', 20000000) END AS v FROM generate_series(1, 4) AS g", [], BIG);
  expect(r).toMatchObject({ truncated: true, rows: [{ g: 1, v: 'small' }, { g: 2, v: 'small' }] });
  expect((await c.read(SSL_SQL, [], BIG)).rows[0].ssl).toBe(true);
});
