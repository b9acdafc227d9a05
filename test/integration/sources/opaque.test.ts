/**
 * Opaque failures (issue 5 item 4), property-based: real failures are injected — refused
 * connections, DNS failures, authentication failures on a throwaway role, unknown databases,
 * TLS refused, connect timeouts, and server / driver error text stuffed with host names,
 * addresses, ports and user names by a fake server — and no SourceError message or JSON may
 * contain any of them. The operator's log, on the other hand, keeps the raw cause.
 */
import fc from 'fast-check';
import pino from 'pino';
import { Writable } from 'node:stream';
import { Client } from 'pg';
import { PostgresSourceConnector, SourceError, type PostgresSourceSettings } from '../../../src/sources/postgres/connector';
import { freePort, startCluster, type Cluster } from './cluster';
import { startFakePg, type FakeBehaviour } from './fakes';
import { refusalInfo } from '../../../src/errors/vocabulary';

const BIG = { maxRows: 10, maxBytes: 1e6 };
const PW_ROLE = 'il_pw_role';
const PW = 'correct horse battery staple';
let cluster: Cluster;

beforeAll(async () => {
  cluster = await startCluster({ hba: ['host all postgres 127.0.0.1/32 trust', 'host all all 127.0.0.1/32 scram-sha-256'] });
  const c = new Client({ connectionString: cluster.url() });
  await c.connect();
  await c.query(`CREATE ROLE ${PW_ROLE} LOGIN PASSWORD '${PW}'`);
  await c.end();
}, 60_000);
afterAll(async () => {
  await cluster?.destroy();
});

const hex = (min: number, max: number) => fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), minLength: min, maxLength: max });
const secretUser = hex(6, 12).map((h) => `usr_${h}`);
const secretDb = hex(6, 12).map((h) => `db_${h}`);
const secretHost = hex(4, 10).map((h) => `h${h}.corp.internal`);
const secretIp = fc.tuple(fc.integer({ min: 0, max: 255 }), fc.integer({ min: 0, max: 255 }), fc.integer({ min: 1, max: 254 })).map(([a, b, c]) => `10.${a}.${b}.${c}`);
const secretPort = fc.integer({ min: 1024, max: 65535 });

type Case =
  | { kind: 'refused'; user: string; db: string }
  | { kind: 'dns'; host: string; user: string; db: string }
  | { kind: 'bad_password'; password: string }
  | { kind: 'unknown_user'; user: string; db: string }
  | { kind: 'unknown_db'; db: string }
  | { kind: 'fake'; phase: 'startup_error' | 'query_error'; sqlState: string; host: string; ip: string; port: number; user: string; db: string }
  | { kind: 'fake_cut'; user: string; db: string }
  | { kind: 'tls_refused'; user: string; db: string }
  | { kind: 'silent'; user: string; db: string };

const caseArb: fc.Arbitrary<Case> = fc.oneof(
  fc.record({ kind: fc.constant('refused' as const), user: secretUser, db: secretDb }),
  fc.record({ kind: fc.constant('dns' as const), host: hex(4, 10).map((h) => `h${h}.no-such-host.invalid`), user: secretUser, db: secretDb }),
  fc.record({ kind: fc.constant('bad_password' as const), password: hex(8, 16).map((h) => `pw_${h}`) }),
  fc.record({ kind: fc.constant('unknown_user' as const), user: secretUser, db: fc.constant('postgres') }),
  fc.record({ kind: fc.constant('unknown_db' as const), db: secretDb }),
  fc.record({
    kind: fc.constant('fake' as const),
    phase: fc.constantFrom('startup_error' as const, 'query_error' as const),
    sqlState: fc.constantFrom('08006', '28P01', '3D000', '53300', '57P01', 'XX000', '42P01', '42501', '22012', '23505'),
    host: secretHost,
    ip: secretIp,
    port: secretPort,
    user: secretUser,
    db: secretDb,
  }),
  fc.record({ kind: fc.constant('fake_cut' as const), user: secretUser, db: secretDb }),
  fc.record({ kind: fc.constant('tls_refused' as const), user: secretUser, db: secretDb }),
  fc.record({ kind: fc.constant('silent' as const), user: secretUser, db: secretDb }),
);

/** Runs one injected failure; returns the error and the strings it must not contain. */
async function inject(c: Case): Promise<{ err: unknown; forbidden: string[]; expected: string[] }> {
  const base = { reader: { user: 'x' }, connect_timeout_ms: 300, breaker: { failure_threshold: 1000 } };
  let settings: PostgresSourceSettings;
  let forbidden: string[] = ['127.0.0.1', 'localhost'];
  let expected = ['execution_failed'];
  let fake: Awaited<ReturnType<typeof startFakePg>> | null = null;
  const fakeSettings = async (behaviour: FakeBehaviour, user: string, db: string) => {
    fake = await startFakePg(behaviour);
    forbidden.push(String(fake.port), user, db);
    return { ...base, host: '127.0.0.1', port: fake.port, database: db, reader: { user } };
  };
  switch (c.kind) {
    case 'refused': {
      const port = await freePort();
      settings = { ...base, host: '127.0.0.1', port, database: c.db, reader: { user: c.user } };
      forbidden.push(String(port), c.user, c.db, 'ECONNREFUSED');
      expected = ['source_unavailable']; // the server cannot be used (connect phase)
      break;
    }
    case 'dns':
      settings = { ...base, host: c.host, port: 5432, database: c.db, reader: { user: c.user } };
      forbidden.push(c.host, '5432', c.user, c.db, 'ENOTFOUND', 'getaddrinfo');
      expected = ['source_unavailable']; // the server cannot be used (connect phase)
      break;
    case 'bad_password':
      settings = { ...base, host: '127.0.0.1', port: cluster.port, database: 'postgres', reader: { user: PW_ROLE, password: c.password } };
      forbidden.push(String(cluster.port), PW_ROLE, c.password, 'postgres', 'password');
      expected = ['source_unavailable']; // the server cannot be used (connect phase)
      break;
    case 'unknown_user':
      settings = { ...base, host: '127.0.0.1', port: cluster.port, database: c.db, reader: { user: c.user, password: 'whatever' } };
      forbidden.push(String(cluster.port), c.user, 'password');
      expected = ['source_unavailable']; // the server cannot be used (connect phase)
      break;
    case 'unknown_db':
      settings = { ...base, host: '127.0.0.1', port: cluster.port, database: c.db, reader: { user: 'postgres' } };
      forbidden.push(String(cluster.port), c.db, 'does not exist');
      expected = ['source_unavailable']; // the server cannot be used (connect phase)
      break;
    case 'fake': {
      const text = `could not reach ${c.host} (${c.ip}:${c.port}) as ${c.user} for ${c.db}`;
      settings = await fakeSettings(
        { kind: c.phase, fields: { S: c.phase === 'startup_error' ? 'FATAL' : 'ERROR', V: 'ERROR', C: c.sqlState, M: text, D: `detail ${c.ip}`, H: `hint ${c.host}` } },
        c.user,
        c.db,
      );
      forbidden.push(c.host, c.ip, String(c.port), c.user, c.db, 'could not reach', 'detail', 'hint');
      expected = ['execution_failed', 'source_unavailable']; // connect phase: source_unavailable for a connection-class SQLSTATE or timeout; else opaque
      break;
    }
    case 'fake_cut':
      settings = await fakeSettings({ kind: 'query_cut' }, c.user, c.db);
      forbidden.push('terminated', 'Connection');
      break;
    case 'tls_refused':
      settings = { ...(await fakeSettings({ kind: 'query_error', fields: { S: 'ERROR', C: 'XX000', M: 'plaintext' } }, c.user, c.db)), tls: { mode: 'require' } };
      forbidden.push('SSL', 'ssl');
      expected = ['upstream_tls_refused'];
      break;
    case 'silent':
      settings = await fakeSettings({ kind: 'silent' }, c.user, c.db);
      forbidden.push('timeout', 'terminated');
      expected = ['execution_failed', 'source_unavailable']; // connect phase: source_unavailable for a connection-class SQLSTATE or timeout; else opaque
      break;
  }
  const conn = new PostgresSourceConnector('opaque', settings);
  try {
    const err = await conn.read('SELECT 1', [], BIG).then(
      () => new Error('unexpected success'),
      (e: unknown) => e,
    );
    return { err, forbidden, expected };
  } finally {
    await conn.close();
    await (fake as { close(): Promise<void> } | null)?.close();
  }
}

test('no injected failure leaks a host, address, port, user, database or driver text into SourceError', async () => {
  const seen = new Set<string>();
  await fc.assert(
    fc.asyncProperty(caseArb, async (c) => {
      const { err, forbidden, expected } = await inject(c);
      expect(err).toBeInstanceOf(SourceError);
      const se = err as SourceError;
      expect(expected).toContain(se.code);
      seen.add(c.kind);
      const surfaces = [se.message, JSON.stringify(se), String(se), JSON.stringify({ error: se })];
      for (const s of surfaces) for (const f of forbidden) expect(s).not.toContain(f);
      expect(Object.keys(JSON.parse(JSON.stringify(se))).sort()).toEqual(['code', 'message', 'name']);
    }),
    { numRuns: 90 },
  );
  expect(seen.size).toBeGreaterThanOrEqual(8);
}, 120_000);

test('the operator log keeps the raw cause and the source id', async () => {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      lines.push(String(chunk));
      cb();
    },
  });
  const logger = pino({ level: 'debug' }, sink);
  const port = await freePort();
  const conn = new PostgresSourceConnector('orders-db', { host: '127.0.0.1', port, database: 'orders', reader: { user: 'app' } }, { logger });
  const err = await conn.read('SELECT 1', [], BIG).catch((e: unknown) => e);
  await conn.close();
  expect((err as SourceError).code).toBe('source_unavailable');
  expect((err as SourceError).message).toBe(refusalInfo('source_unavailable').message);
  const entry = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'source failure');
  expect(entry).toMatchObject({ source_id: 'orders-db', code: 'source_unavailable', phase: 'connect' });
  expect(JSON.stringify(entry.err)).toContain('ECONNREFUSED');
});

test('the right password connects (SCRAM); PGPASSWORD and ~/.pgpass are never used for a source', async () => {
  const ok = new PostgresSourceConnector('pw', { host: '127.0.0.1', port: cluster.port, database: 'postgres', reader: { user: PW_ROLE, password: PW } });
  try {
    expect((await ok.read('SELECT current_user AS u', [], BIG)).rows).toEqual([{ u: PW_ROLE }]);
  } finally {
    await ok.close();
  }
  const saved = process.env.PGPASSWORD;
  process.env.PGPASSWORD = PW;
  const noPw = new PostgresSourceConnector('nopw', { host: '127.0.0.1', port: cluster.port, database: 'postgres', reader: { user: PW_ROLE } });
  try {
    await expect(noPw.read('SELECT 1', [], BIG)).rejects.toMatchObject({ code: 'execution_failed', message: 'tool execution failed' });
  } finally {
    if (saved === undefined) delete process.env.PGPASSWORD;
    else process.env.PGPASSWORD = saved;
    await noPw.close();
  }
});
