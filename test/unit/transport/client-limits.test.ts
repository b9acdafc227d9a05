/** Issue 10, Build 6: the pure deciders and in-memory state of the client limits and the keyless audit aggregator. */
import { bodyReservation, ClientLimits, clientAddressKey, DEFAULT_CLIENT_LIMITS, limitMessage, SMALL_BODY_BYTES, takeToken } from '../../../src/transport/client-limits';
import { serverTimeouts } from '../../../src/server';
import { KeylessAuditAggregator } from '../../../src/transport/keyless-audit';
import { MemoryAuditSink } from '../../../src/audit/types';

test('takeToken: a full bucket grants `points` tokens, then refuses with the time to the next token; refills continuously', () => {
  let b;
  for (let i = 0; i < 3; i++) {
    const r = takeToken(b, 0, 3, 3000);
    expect(r.ok).toBe(true);
    b = r.bucket;
  }
  const denied = takeToken(b, 0, 3, 3000);
  expect([denied.ok, denied.retryAfterMs]).toEqual([false, 1000]);
  expect(takeToken(denied.bucket, 400, 3, 3000)).toMatchObject({ ok: false, retryAfterMs: 600 });
  expect(takeToken(denied.bucket, 1000, 3, 3000).ok).toBe(true);
  // Never more than `points` after a long pause.
  let long = takeToken(denied.bucket, 1_000_000, 3, 3000).bucket;
  expect(long.tokens).toBe(2);
  long = takeToken(long, 1_000_000, 3, 3000).bucket;
  long = takeToken(long, 1_000_000, 3, 3000).bucket;
  expect(takeToken(long, 1_000_000, 3, 3000).ok).toBe(false);
});

test('clientAddressKey: IPv4 as is, IPv4-mapped as IPv4, IPv6 by /64, missing as unknown', () => {
  expect(clientAddressKey('127.0.0.1')).toBe('127.0.0.1');
  expect(clientAddressKey('::ffff:10.1.2.3')).toBe('10.1.2.3');
  expect(clientAddressKey('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
  expect(clientAddressKey('2001:db8:1:2:bbbb:cccc:dddd:eeee')).toBe('2001:db8:1:2::/64');
  expect(clientAddressKey('2001:db8::1')).toBe('2001:db8:0:0::/64');
  expect(clientAddressKey('::1')).toBe('0:0:0:0::/64');
  expect(clientAddressKey(undefined)).toBe('unknown');
});

test('ClientLimits: keyless tokens per address; stream slots per address and per identity, released once', () => {
  let now = 0;
  const l = new ClientLimits({ keyless: { points: 2, windowSeconds: 60 }, streamsPerAddress: 3, streamsPerIdentity: 2 }, { now: () => now });
  expect([l.takeKeyless('a').ok, l.takeKeyless('a').ok]).toEqual([true, true]);
  expect(l.takeKeyless('a')).toEqual({ ok: false, retryAfterMs: 30_000, scope: 'keyless' });
  expect(l.takeKeyless('b').ok).toBe(true);
  now = 30_000;
  expect(l.takeKeyless('a').ok).toBe(true);

  const s1 = l.openStream('a', 'idn1');
  const s2 = l.openStream('a', 'idn1');
  expect([s1.ok, s2.ok]).toEqual([true, true]);
  expect(l.openStream('a', 'idn1')).toMatchObject({ ok: false, scope: 'identity' });
  const s3 = l.openStream('a', null);
  expect(s3.ok).toBe(true);
  expect(l.openStream('a', 'idn2')).toMatchObject({ ok: false, scope: 'address' });
  expect(l.openStream('b', 'idn2').ok).toBe(true);
  if (s1.ok) {
    s1.release();
    s1.release();
  }
  expect(l.openStreams()).toEqual({ addresses: 2, identities: 2, total: 3 });
  expect(l.openStream('a', 'idn1').ok).toBe(true);
  expect(l.openStream('a', 'idn1')).toMatchObject({ ok: false });
});

test('ClientLimits keeps at most maxAddresses buckets', () => {
  const l = new ClientLimits({ keyless: { points: 1, windowSeconds: 60 }, streamsPerAddress: 1, streamsPerIdentity: 1 }, { maxAddresses: 10, now: () => 0 });
  for (let i = 0; i < 1000; i++) l.takeKeyless(`10.0.${i >> 8}.${i & 255}`);
  expect((l as unknown as { buckets: { size: number } }).buckets.size).toBe(10);
});

test('KeylessAuditAggregator: one event per address per window with counts; ended windows only; bounded addresses', async () => {
  let now = 60_000 * 1000 + 5;
  const sink = new MemoryAuditSink();
  const agg = new KeylessAuditAggregator(sink, { now: () => now, flushEveryMs: 0, maxAddresses: 2 });
  for (let i = 0; i < 500; i++) agg.note('1.1.1.1', { reason: i % 5 === 0 ? 'invalid_api_key' : 'missing_api_key', tool: 'interlock_query', route: 'mcp', dialect: 'handshake', protocolVersion: '2025-11-25', requestId: `req_${i}` });
  agg.note('2.2.2.2', { reason: 'rate_limited', tool: '-', route: 'v1' });
  agg.note('3.3.3.3', { reason: 'rate_limited', tool: '-', route: 'v1' });
  agg.note('4.4.4.4', { reason: 'rate_limited', tool: '-', route: 'v1' });
  await agg.flushEnded();
  expect(sink.events).toHaveLength(0);
  now += 60_000;
  agg.note('1.1.1.1', { reason: 'missing_api_key', tool: 'interlock_query', route: 'mcp' });
  await agg.flushEnded();
  expect(sink.events).toHaveLength(3);
  const first = sink.events.find((e) => e.details.client_address === '1.1.1.1')!;
  expect(first).toMatchObject({ identityId: null, keyId: null, tool: '*', decision: 'refused', reasonCode: 'missing_api_key', dialect: 'handshake', protocolVersion: '2025-11-25', time: new Date(60_000 * 1000).toISOString() });
  expect(first.details).toEqual({ aggregated: true, client_address: '1.1.1.1', window_start: new Date(60_000 * 1000).toISOString(), window_seconds: 60, count: 500, reasons: { missing_api_key: 400, invalid_api_key: 100 }, tools: { interlock_query: 500 }, routes: { mcp: 500 }, first_request_id: 'req_0', last_request_id: 'req_499' });
  // The third and fourth addresses of that window were counted together as "other".
  expect(sink.events.find((e) => e.details.client_address === 'other')!.details.count).toBe(2);
  expect(agg.open).toBe(1);
  await agg.flush();
  expect(sink.events).toHaveLength(4);
  expect(agg.open).toBe(0);
});

test('bodyReservation: no body → null; the declared length up to the limit; the limit when undeclared, malformed or compressed', () => {
  const L = 1024 * 1024;
  expect(bodyReservation({}, L)).toBeNull();
  expect(bodyReservation({ 'content-length': '0' }, L)).toBeNull();
  expect(bodyReservation({ 'content-length': '300' }, L)).toBe(300);
  expect(bodyReservation({ 'content-length': String(L) }, L)).toBe(L);
  expect(bodyReservation({ 'content-length': String(50 * L) }, L)).toBe(L);
  expect(bodyReservation({ 'transfer-encoding': 'chunked' }, L)).toBe(L);
  expect(bodyReservation({ 'content-length': '12abc' }, L)).toBe(L);
  expect(bodyReservation({ 'content-length': '300', 'content-encoding': 'gzip' }, L)).toBe(L);
  expect(bodyReservation({ 'content-length': '300', 'content-encoding': 'identity' }, L)).toBe(300);
});

test('openBodyRead: per-address count and total bytes, refused before reading; release is idempotent', () => {
  const MiB = 1024 * 1024;
  const limits = new ClientLimits({ ...DEFAULT_CLIENT_LIMITS, bodyReadsPerAddress: 2, bodyBytesInFlight: 8 * MiB });
  const a1 = limits.openBodyRead('1.1.1.1', 100);
  const a2 = limits.openBodyRead('1.1.1.1', 100);
  const a3 = limits.openBodyRead('1.1.1.1', 100);
  expect([a1.ok, a2.ok, a3]).toEqual([true, true, { ok: false, retryAfterMs: 1000, scope: 'body-address' }]);
  expect(limitMessage(a3 as Extract<typeof a3, { ok: false }>)).toBe('Too many request bodies being received from this client address; wait 1000 ms before trying again.');
  // Small bodies (≤ 64 KiB) count only against their address's number of reads.
  expect(limits.bodyReads()).toEqual({ addresses: 1, reads: 2, bytes: 0 });
  // One address may hold at most an eighth of the total in large bodies (its first is always admitted).
  const b1 = limits.openBodyRead('2.2.2.2', MiB);
  expect(b1.ok).toBe(true);
  expect(limits.openBodyRead('2.2.2.2', SMALL_BODY_BYTES + 1)).toEqual({ ok: false, retryAfterMs: 1000, scope: 'body-address' });
  // Filling the total takes eight addresses; then a ninth's large body is refused, its small one is not.
  const held = ['3', '4', '5', '6', '7', '8', '9'].map((n) => limits.openBodyRead(`${n}.${n}.${n}.${n}`, MiB));
  expect(held.every((r) => r.ok)).toBe(true);
  expect(limits.bodyReads().bytes).toBe(8 * MiB);
  expect(limits.openBodyRead('10.0.0.1', MiB)).toEqual({ ok: false, retryAfterMs: 1000, scope: 'body-total' });
  const small = limits.openBodyRead('10.0.0.1', SMALL_BODY_BYTES);
  expect(small.ok).toBe(true);
  for (const r of [a1, a2, b1, small, ...held]) if (r.ok) r.release(), r.release();
  expect(limits.bodyReads()).toEqual({ addresses: 0, reads: 0, bytes: 0 });
  // One body is always admitted when none is in flight, even over the total.
  expect(limits.openBodyRead('3.3.3.3', 20 * MiB).ok).toBe(true);
  // Settings without the body fields (older callers) fall back to the defaults: 64 per address.
  const old = new ClientLimits({ keyless: { points: 1, windowSeconds: 1 }, streamsPerAddress: 1, streamsPerIdentity: 1 });
  const got = Array.from({ length: 65 }, () => old.openBodyRead('4.4.4.4', 1).ok);
  expect(got.filter(Boolean)).toHaveLength(64);
});

test('serverTimeouts: defaults 30 s / 20 s; headersTimeout never above requestTimeout; checked at least every 5 s', () => {
  expect(serverTimeouts({})).toEqual({ requestTimeout: 30_000, headersTimeout: 20_000, connectionsCheckingInterval: 5000 });
  expect(serverTimeouts({ requestTimeoutMs: 2000, headersTimeoutMs: 20_000 })).toEqual({ requestTimeout: 2000, headersTimeout: 2000, connectionsCheckingInterval: 500 });
  expect(serverTimeouts({ requestTimeoutMs: 1000, headersTimeoutMs: 200 })).toEqual({ requestTimeout: 1000, headersTimeout: 200, connectionsCheckingInterval: 100 });
});

test('clientAddressKey keeps the last address\'s key: the same answers asked again, in turn and after another address', () => {
  const inputs = ['::ffff:10.1.2.3', '::ffff:10.1.2.3', '2001:DB8:1:2:aaaa::1', '2001:db8:1:2:aaaa::1', '::ffff:10.1.2.3', '', '127.0.0.1', '127.0.0.1'];
  const expected = ['10.1.2.3', '10.1.2.3', '2001:db8:1:2::/64', '2001:db8:1:2::/64', '10.1.2.3', 'unknown', '127.0.0.1', '127.0.0.1'];
  expect(inputs.map((a) => clientAddressKey(a))).toEqual(expected);
  expect(clientAddressKey(undefined)).toBe('unknown');
});
