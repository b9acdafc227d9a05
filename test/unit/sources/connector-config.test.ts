/**
 * Connector configuration without a database: settings defaults and validation, the startup
 * `options` string (layer 4), TLS option objects per mode, and the connector registry's caching
 * by settings hash.
 */
import tls from 'node:tls';
import {
  DEFAULT_SETTINGS,
  PostgresSourceConnector,
  SourceError,
  resolveSettings,
  startupOptions,
  tlsOptions,
  type PostgresSourceSettings,
} from '../../../src/sources/postgres/connector';
import { SourceConnectorRegistry, canonicalJson, settingsHash } from '../../../src/sources/registry';

const base: PostgresSourceSettings = { host: 'db.internal', port: 5432, database: 'sales', reader: { user: 'agent_reader', password: 'pw' } };

describe('settings', () => {
  test('defaults', () => {
    const r = resolveSettings(base);
    expect(r).toMatchObject({
      statementTimeout: DEFAULT_SETTINGS.statement_timeout_ms,
      lockTimeout: 2000,
      idleInTxTimeout: 10000,
      poolSize: 5,
      connectTimeout: 5000,
      failureThreshold: 5,
      resetTimeout: 10000,
      tls: { mode: 'off' },
    });
    expect(r.writer).toBeUndefined();
  });

  test.each([
    [{ host: '' }, 'host'],
    [{ port: 0 }, 'port'],
    [{ port: 70000 }, 'port'],
    [{ database: '' }, 'database'],
    [{ reader: { user: '' } }, 'reader.user'],
    [{ writer: { user: 'w', password: 5 as unknown as string } }, 'writer.password'],
    [{ statement_timeout_ms: -1 }, 'statement_timeout_ms'],
    [{ lock_timeout_ms: 1.5 }, 'lock_timeout_ms'],
    [{ pool_size: 0 }, 'pool_size'],
    [{ breaker: { failure_threshold: 0 } }, 'breaker.failure_threshold'],
    [{ tls: { mode: 'prefer' as 'require' } }, 'tls.mode'],
  ])('invalid %j names only the field (%s), never the values', (patch, field) => {
    const s = { ...base, ...patch } as PostgresSourceSettings;
    let err: unknown;
    try {
      new PostgresSourceConnector('x', s);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SourceError);
    expect((err as SourceError).message).toBe(`tool execution failed: invalid source settings (${field})`);
    expect((err as SourceError).message).not.toMatch(/db\.internal|agent_reader|sales|5432/);
  });

  test('startup options: the pinned session settings first, read-only for the reader only, and the three timeouts', () => {
    // DateStyle is set by the connection's first statement (setOnConnect), so a database or role default keeps its field order.
    const PINNED = '-c standard_conforming_strings=on -c backslash_quote=safe_encoding -c client_encoding=UTF8 -c IntervalStyle=postgres -c TimeZone=UTC -c extra_float_digits=1 -c bytea_output=hex';
    const r = resolveSettings({ ...base, statement_timeout_ms: 1234, lock_timeout_ms: 56, idle_in_transaction_timeout_ms: 789 });
    expect(startupOptions(r, true)).toBe(PINNED + ' -c default_transaction_read_only=on -c statement_timeout=1234 -c lock_timeout=56 -c idle_in_transaction_session_timeout=789');
    expect(startupOptions(r, false)).toBe(PINNED + ' -c default_transaction_read_only=off -c statement_timeout=1234 -c lock_timeout=56 -c idle_in_transaction_session_timeout=789');
  });
});

describe('TLS options (explicit objects, never sslmode strings)', () => {
  const cert = { subject: { CN: 'db.interlock.test' }, subjectaltname: 'DNS:db.interlock.test' } as unknown as tls.PeerCertificate;

  test('off → false (plaintext); require → encrypted, unverified', () => {
    expect(tlsOptions({ mode: 'off' }, 'h')).toBe(false);
    expect(tlsOptions({ mode: 'require', ca: 'PEM' }, 'h')).toEqual({ rejectUnauthorized: false });
  });

  test('verify-ca: chain verified against the CA, any host name accepted', () => {
    const o = tlsOptions({ mode: 'verify-ca', ca: 'PEM' }, '10.0.0.5') as tls.ConnectionOptions;
    expect(o).toMatchObject({ rejectUnauthorized: true, ca: 'PEM' });
    expect(o.checkServerIdentity!('10.0.0.5', cert)).toBeUndefined();
  });

  test('verify-full: the certificate must name servername (or the host)', () => {
    const byName = tlsOptions({ mode: 'verify-full', ca: 'PEM', servername: 'db.interlock.test' }, '127.0.0.1') as tls.ConnectionOptions;
    expect(byName).toMatchObject({ rejectUnauthorized: true, ca: 'PEM', servername: 'db.interlock.test' });
    expect(byName.checkServerIdentity!('127.0.0.1', cert)).toBeUndefined();
    const byHost = tlsOptions({ mode: 'verify-full', ca: 'PEM' }, '127.0.0.1') as tls.ConnectionOptions;
    expect(byHost.checkServerIdentity!('127.0.0.1', cert)).toMatchObject({ code: 'ERR_TLS_CERT_ALTNAME_INVALID' });
    const hostName = tlsOptions({ mode: 'verify-full' }, 'db.interlock.test') as tls.ConnectionOptions;
    expect(hostName.servername).toBeUndefined(); // pg sets SNI from a host name itself
    expect(hostName.checkServerIdentity!('db.interlock.test', cert)).toBeUndefined();
    const wrong = tlsOptions({ mode: 'verify-full', servername: 'other.test' }, 'db.interlock.test') as tls.ConnectionOptions;
    expect(wrong.checkServerIdentity!('db.interlock.test', cert)).toMatchObject({ code: 'ERR_TLS_CERT_ALTNAME_INVALID' });
  });
});

describe('SourceConnectorRegistry', () => {
  test('canonical JSON ignores key order and undefined members', () => {
    expect(canonicalJson({ b: 1, a: { d: [1, { y: 2, x: 1 }], c: undefined } })).toBe('{"a":{"d":[1,{"x":1,"y":2}]},"b":1}');
    expect(settingsHash({ ...base })).toBe(settingsHash({ reader: { password: 'pw', user: 'agent_reader' }, database: 'sales', port: 5432, host: 'db.internal' }));
  });

  test('cached per source id; recreated (old one closed) when settings change; states; closeAll', async () => {
    const reg = new SourceConnectorRegistry();
    const a1 = reg.get('a', base);
    expect(reg.get('a', { ...base })).toBe(a1);
    const b = reg.get('b', base);
    expect(b).not.toBe(a1);
    const a2 = reg.get('a', { ...base, pool_size: 3 });
    expect(a2).not.toBe(a1);
    expect(reg.get('a', { ...base, pool_size: 3 })).toBe(a2);
    const a3 = reg.get('a', { ...base, pool_size: 3, reader: { user: 'agent_reader', password: 'rotated' } });
    expect(a3).not.toBe(a2);
    expect(reg.states()).toEqual({ a: 'closed', b: 'closed' });
    await reg.closeAll();
    // A retired or closed connector refuses new work without touching the network.
    await expect(a1.read('SELECT 1', [], { maxRows: 1, maxBytes: 100 })).rejects.toMatchObject({ code: 'execution_failed' });
    await expect(a3.read('SELECT 1', [], { maxRows: 1, maxBytes: 100 })).rejects.toMatchObject({ code: 'execution_failed' });
    expect(reg.states()).toEqual({});
  });

  test('invalid settings throw and keep the cached connector', () => {
    const reg = new SourceConnectorRegistry();
    const a = reg.get('a', base);
    expect(() => reg.get('a', { ...base, port: -1 })).toThrow(SourceError);
    expect(reg.get('a', base)).toBe(a);
  });

  test('breaker changes are reported with the source id', async () => {
    const seen: string[] = [];
    const reg = new SourceConnectorRegistry({ onBreakerChange: (id, s) => seen.push(`${id}:${s}`) });
    const c = reg.get('s1', { ...base, breaker: { failure_threshold: 1, reset_timeout_ms: 10 } });
    // Driven through the connector's own breaker (no network): a source failure opens it, the probe after the reset closes it.
    const breaker = (c as unknown as { breaker: { run<T>(fn: () => Promise<T>): Promise<T> } }).breaker;
    await expect(breaker.run(() => Promise.reject(new SourceError('execution_failed', { sourceFailure: true })))).rejects.toMatchObject({ sourceFailure: true });
    await new Promise((r) => setTimeout(r, 40));
    await expect(breaker.run(() => Promise.resolve(1))).resolves.toBe(1);
    expect(seen).toEqual(['s1:open', 's1:half_open', 's1:closed']);
    return reg.closeAll();
  });
});

describe('argument checks (no network)', () => {
  const c = new PostgresSourceConnector('args', base);
  afterAll(() => c.close());
  test.each([
    [{ maxRows: -1, maxBytes: 10 }],
    [{ maxRows: 1.5, maxBytes: 10 }],
    [{ maxRows: 1, maxBytes: Number.NaN }],
  ])('read rejects bad caps %j', async (opts) => {
    await expect(c.read('SELECT 1', [], opts)).rejects.toMatchObject({ code: 'execution_failed', sourceFailure: false });
  });
  test('unencodable parameters are the caller\u2019s error', async () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    await expect(c.read('SELECT $1', [cyclic], { maxRows: 1, maxBytes: 10 })).rejects.toMatchObject({ code: 'execution_failed', sourceFailure: false });
    expect(c.breakerState()).toBe('closed');
  });
});
