/**
 * Per-source circuit breaker (issue 5 item 1): consecutive connection failures or timeouts open
 * it; while open, calls are refused at once as circuit_open without touching the network; after
 * reset_timeout_ms one half-open probe is let through, and its success closes the circuit.
 * Against a closed port, a counting fake server, and a throwaway cluster stopped and restarted.
 */
import { createServer } from 'node:net';
import { PostgresSourceConnector, SourceError, type BreakerState } from '../../../src/sources/postgres/connector';
import { SourceConnectorRegistry } from '../../../src/sources/registry';
import { freePort, startCluster, type Cluster } from './cluster';
import { startFakePg, startProxy } from './fakes';
import { sleep } from './source-db';
import { ADMIN_URL } from '../../helpers/pg';

const BIG = { maxRows: 100, maxBytes: 1e6 };
const open: PostgresSourceConnector[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
});

function make(port: number, breaker: { failure_threshold?: number; reset_timeout_ms?: number }, changes?: BreakerState[], extra = {}) {
  const c = new PostgresSourceConnector(
    'b',
    { host: '127.0.0.1', port, database: 'postgres', reader: { user: 'postgres' }, connect_timeout_ms: 2000, breaker, ...extra },
    { onBreakerChange: (s) => changes?.push(s) },
  );
  open.push(c);
  return c;
}

test('closed port: failures are opaque; the threshold opens the circuit; open calls fail at once', async () => {
  const port = await freePort();
  const changes: BreakerState[] = [];
  const c = make(port, { failure_threshold: 3, reset_timeout_ms: 60_000 }, changes);
  for (let i = 0; i < 3; i++) {
    expect(c.breakerState()).toBe('closed');
    const err = await c.read('SELECT 1', [], BIG).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SourceError);
    expect(err).toMatchObject({ code: 'source_unavailable', sourceFailure: true });
  }
  expect(c.breakerState()).toBe('open');
  expect(changes).toEqual(['open']);
  // "At once": without touching the network. Something now listens on the port and counts every
  // connection; the open circuit must refuse without opening one (no timing involved).
  let connections = 0;
  const listener = createServer((sock) => {
    connections++;
    sock.destroy();
  });
  await new Promise<void>((resolve) => listener.listen(port, '127.0.0.1', resolve));
  try {
    const err = await c.read('SELECT 1', [], BIG).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'circuit_open', message: "The source's circuit is open after repeated failures; try again later." });
    await expect(c.write('INSERT INTO t VALUES (1)', [])).rejects.toMatchObject({ code: 'execution_failed' }); // no writer role
    await expect(c.withReader(async () => 1)).rejects.toMatchObject({ code: 'circuit_open' });
    expect(connections).toBe(0);
  } finally {
    await new Promise((resolve) => listener.close(resolve));
  }
});

test('statement errors do not count; a success between failures resets the count (consecutive failures only)', async () => {
  const fake = await startFakePg({ kind: 'query_error', fields: { S: 'ERROR', V: 'ERROR', C: '42601', M: 'syntax error' } });
  try {
    // A reachable source that answers every statement with a syntax error.
    const c = make(fake.port, { failure_threshold: 1, reset_timeout_ms: 60_000 });
    for (let i = 0; i < 3; i++) await expect(c.read('SELECT 1', [], BIG)).rejects.toMatchObject({ code: 'execution_failed', sourceFailure: false });
    expect(c.breakerState()).toBe('closed');
  } finally {
    await fake.close();
  }
  const admin = new URL(ADMIN_URL);
  const proxy = await startProxy({ host: admin.hostname, port: Number(admin.port || 5432) });
  try {
    const c = new PostgresSourceConnector('flaky', {
      host: '127.0.0.1', port: proxy.port, database: admin.pathname.slice(1) || 'postgres', reader: { user: decodeURIComponent(admin.username) }, breaker: { failure_threshold: 2, reset_timeout_ms: 60_000 },
    });
    open.push(c);
    const step = () => c.read('SELECT 1 AS x', [], BIG).then(() => 'ok', (e: SourceError) => e.code);
    proxy.setDown(true);
    expect(await step()).toBe('source_unavailable');
    proxy.setDown(false);
    expect(await step()).toBe('ok');
    proxy.setDown(true);
    expect(await step()).toBe('execution_failed');
    expect(c.breakerState()).toBe('closed');
    expect(await step()).toBe('source_unavailable');
    expect(c.breakerState()).toBe('open');
    expect(await step()).toBe('circuit_open');
  } finally {
    await proxy.close();
  }
});

test('while open no connection is attempted; after reset_timeout_ms a single half-open probe runs; a failed probe re-opens', async () => {
  const fake = await startFakePg({ kind: 'startup_error', fields: { S: 'FATAL', V: 'FATAL', C: '57P03', M: 'the database system is starting up' } });
  try {
    const changes: BreakerState[] = [];
    const c = make(fake.port, { failure_threshold: 2, reset_timeout_ms: 300 }, changes);
    await c.read('SELECT 1', [], BIG).catch(() => undefined);
    await c.read('SELECT 1', [], BIG).catch(() => undefined);
    expect(c.breakerState()).toBe('open');
    const seen = fake.connections;
    expect(seen).toBe(2);
    const during = await Promise.all(Array.from({ length: 10 }, () => c.read('SELECT 1', [], BIG).catch((e: SourceError) => e.code)));
    expect(during).toEqual(Array(10).fill('circuit_open'));
    expect(fake.connections).toBe(seen);
    await sleep(400);
    expect(c.breakerState()).toBe('half_open');
    // Two concurrent calls: one probe goes to the network, the other is refused at once.
    const [a, b] = await Promise.all([c.read('SELECT 1', [], BIG).catch((e: SourceError) => e.code), c.read('SELECT 1', [], BIG).catch((e: SourceError) => e.code)]);
    expect([a, b].sort()).toEqual(['circuit_open', 'source_unavailable']);
    expect(fake.connections).toBe(seen + 1);
    expect(c.breakerState()).toBe('open');
    expect(changes).toEqual(['open', 'half_open', 'open']);
  } finally {
    await fake.close();
  }
});

test('a source that stops answering: the client-side watchdog reports statement_timeout, cancels, drops the connection, and counts (a fresh connection gets no answer either)', async () => {
  const fake = await startFakePg({ kind: 'query_silent' });
  try {
    const c = make(fake.port, { failure_threshold: 1, reset_timeout_ms: 60_000 }, undefined, { statement_timeout_ms: 100 });
    const t0 = Date.now();
    const err = await c.read('SELECT 1', [], BIG).catch((e: unknown) => e);
    // statement_timeout (100 ms) + the watchdog's grace (2 s) + the health probe (at most 1.5 s)
    expect(Date.now() - t0).toBeGreaterThanOrEqual(2000);
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(err).toMatchObject({ code: 'statement_timeout', sourceFailure: true });
    expect(c.breakerState()).toBe('open');
    const t1 = Date.now();
    await c.close(); // the dropped connection is released within the bounded cancel attempts
    expect(Date.now() - t1).toBeLessThan(2500);
    expect(fake.cancels).toBeGreaterThanOrEqual(1);
  } finally {
    await fake.close();
  }
}, 20_000);

test('a write on a source that stops answering: the watchdog counts it too (a fresh connection gets no answer either)', async () => {
  const fake = await startFakePg({ kind: 'query_silent' });
  try {
    const c = make(fake.port, { failure_threshold: 1, reset_timeout_ms: 60_000 }, undefined, { statement_timeout_ms: 100, writer: { user: 'postgres' } });
    const err = await c.write('INSERT INTO t VALUES (1)', []).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'statement_timeout', sourceFailure: true });
    expect(c.breakerState()).toBe('open');
    await c.close();
  } finally {
    await fake.close();
  }
}, 20_000);

test('a statement that outlives its cancel on a source that still answers: statement_timeout, not counted, the circuit stays closed (red-team F2)', async () => {
  const fake = await startFakePg({ kind: 'query_silent_first' });
  try {
    const c = make(fake.port, { failure_threshold: 1, reset_timeout_ms: 60_000 }, undefined, { statement_timeout_ms: 100 });
    const err = await c.read('SELECT 1', [], BIG).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'statement_timeout', sourceFailure: false });
    expect(c.breakerState()).toBe('closed');
    await c.close();
  } finally {
    await fake.close();
  }
}, 20_000);

describe('a throwaway cluster stopped and restarted', () => {
  let cluster: Cluster;
  beforeAll(async () => {
    cluster = await startCluster();
  }, 60_000);
  afterAll(async () => {
    await cluster?.destroy();
  });

  test('the circuit opens while the server is down and closes after a successful probe once it is back', async () => {
    const changes: string[] = [];
    const reg = new SourceConnectorRegistry({ onBreakerChange: (id, s) => changes.push(`${id}:${s}`) });
    try {
      const c = reg.get('restartable', {
        host: '127.0.0.1',
        port: cluster.port,
        database: 'postgres',
        reader: { user: 'postgres' },
        pool_size: 2,
        connect_timeout_ms: 1000,
        breaker: { failure_threshold: 3, reset_timeout_ms: 500 },
      });
      expect((await c.read('SELECT 1 AS up', [], BIG)).rows).toEqual([{ up: 1 }]);
      await cluster.stop();
      const codes: string[] = [];
      for (let i = 0; i < 5; i++) codes.push(await c.read('SELECT 1', [], BIG).then(() => 'ok', (e: SourceError) => e.code));
      expect(codes).toEqual(['source_unavailable', 'source_unavailable', 'source_unavailable', 'circuit_open', 'circuit_open']);
      expect(reg.states()).toEqual({ restartable: 'open' });
      // Still down when the first probe runs: it fails and the circuit re-opens.
      await sleep(600);
      expect(reg.states()).toEqual({ restartable: 'half_open' });
      await expect(c.read('SELECT 1', [], BIG)).rejects.toMatchObject({ code: 'source_unavailable' });
      expect(c.breakerState()).toBe('open');
      await cluster.start();
      await sleep(600);
      expect(c.breakerState()).toBe('half_open');
      expect((await c.read('SELECT 2 AS back', [], BIG)).rows).toEqual([{ back: 2 }]);
      expect(c.breakerState()).toBe('closed');
      const many = await Promise.all(Array.from({ length: 6 }, (_, i) => c.read('SELECT $1::int AS i', [i], BIG)));
      expect(many.map((r) => r.rows[0].i)).toEqual([0, 1, 2, 3, 4, 5]);
      expect(changes).toEqual(['restartable:open', 'restartable:half_open', 'restartable:open', 'restartable:half_open', 'restartable:closed']);
    } finally {
      await reg.closeAll();
    }
  }, 30_000);
});
