/**
 * A refusal by admission by capacity (issue 29 item 2), exactly: with the replica's only slot held
 * (limit 1, no queue), a governed call is answered at once with the contract's rate_limited, in both
 * dialects (modern: HTTP 429, JSON-RPC error -32602 with data, Retry-After; handshake: HTTP 200,
 * tool result isError), retry_after_ms derived from the queue (whole seconds), audited only in
 * aggregate, not charged to the identity's rate limit (the same identity is served right after,
 * though its refusals alone would have spent its budget), refused before identity resolution once
 * the token was seen (no control-database work). What a refusal costs in CPU against a served call
 * is measured in bench/11-overload.ts (a ratio in the same run), never asserted here: a timed
 * assertion in a test fails on a busy machine without anything being wrong.
 */
import { RawClient, type RawAnswer } from '../../helpers/raw-client';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import type { CapacityPermit } from '../../../src/transport/capacity';
import { createApiKey } from '../../../src/control/keys';
import { createIdentity } from '../../../src/control/identities';
import pkg from '../../../package.json';

/** Served calls between the refusals (and a fifth more in a first round); the identity's budget is SERVED × 1.2 + 20, so charged refusals would spend it. */
const SERVED = 150;
const REFUSED = 300;
const POINT = 'SELECT track_id, name FROM track WHERE track_id = $1';
const MODERN = '2026-07-28';
const AT_CAPACITY = 'The gateway is at capacity; wait retry_after_ms milliseconds before trying again.';
/** An allow-listed Origin: its answers carry the CORS headers, refusals too. */
const ORIGIN = 'http://app.example.test';

let env: GovernedEnv;
let port = 0;

beforeAll(async () => {
  env = await startGovernedEnv({
    config: {
      // One connection sends every call: it is not paused after a refusal (pause_refused_connections is tested on its own).
      allowed_origins: [ORIGIN],
      admission: { enabled: true, initial_limit: 1, min_limit: 1, max_limit: 1, queue_size: 0, queue_timeout_ms: 250, tolerance: 2, max_event_loop_delay_ms: 60_000, max_audit_queue: 1000, pause_refused_connections: false, front_door: false },
      rate_limits: { per_identity: { points: SERVED * 1.2 + 20, window_seconds: 600 }, per_source: { points: 100_000, window_seconds: 60 } },
      cache: { ttl_ms: 0, max_bytes: 0 },
    },
  });
  port = Number(new URL(env.url).port);
}, 60_000);
afterAll(async () => {
  await env?.close();
});


/** The bytes of one tools/call of interlock_query (a point read of track `id`), in the modern or handshake dialect. */
function request(id: number, dialect: 'modern' | 'handshake' | 'discover', rpcId: number | string = 7, apiKey = env.apiKey, origin?: string): string {
  if (dialect === 'discover') {
    const b = JSON.stringify({ jsonrpc: '2.0', id: rpcId, method: 'server/discover', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} } } });
    return `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer ${apiKey}\r\nContent-Length: ${Buffer.byteLength(b)}\r\nMCP-Protocol-Version: ${MODERN}\r\nMcp-Method: server/discover\r\n\r\n${b}`;
  }
  const params: Record<string, unknown> = { name: 'interlock_query', arguments: { source_id: 'chinook', sql: POINT, params: [id] } };
  if (dialect === 'modern') params._meta = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} };
  const body = JSON.stringify({ jsonrpc: '2.0', id: rpcId, method: 'tools/call', params });
  const headers = [
    'POST /mcp HTTP/1.1',
    `Host: 127.0.0.1:${port}`,
    'Content-Type: application/json',
    'Accept: application/json, text/event-stream',
    `Authorization: Bearer ${apiKey}`,
    `Content-Length: ${Buffer.byteLength(body)}`,
  ];
  if (origin) headers.push(`Origin: ${origin}`);
  headers.push(dialect === 'modern' ? `MCP-Protocol-Version: ${MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: interlock_query` : 'MCP-Protocol-Version: 2025-11-25');
  return `${headers.join('\r\n')}\r\n\r\n${body}`;
}

/** The bytes of one modern tools/call of interlock_list_sources (governed, needs no grant). */
function listSources(rpcId: string, apiKey: string): string {
  const body = JSON.stringify({ jsonrpc: '2.0', id: rpcId, method: 'tools/call', params: { name: 'interlock_list_sources', arguments: {}, _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} } } });
  return `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer ${apiKey}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nMCP-Protocol-Version: ${MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: interlock_list_sources\r\n\r\n${body}`;
}

/** Holds the replica's only slot (as a call in flight would) until released. */
function holdTheSlot(): CapacityPermit {
  const got = env.gateway.capacity!.acquire(undefined, 'someone-else');
  if (got instanceof Promise || 'retryAfterMs' in got) throw new Error('the slot was not free');
  return got;
}

/** Sends `n` sequential calls of one kind on one connection; every answer is kept in `into`. */
async function sendMany(c: RawClient, n: number, dialect: 'modern' | 'handshake' | 'discover', into: RawAnswer[]): Promise<void> {
  for (let i = 0; i < n; i++) into.push(await c.send(request(1 + ((into.length * 7) % 3000), dialect, i)));
}

test('the refusal at capacity: exact answers in both dialects, Retry-After, aggregated audit, no rate-limit charge', async () => {
  const c = await RawClient.open(port);
  try {
    // Warm up: pools, analysis, the token's identity (the limiter remembers it).
    const warm = await c.send(request(1, 'modern'));
    expect(warm.body.result.structuredContent.rows).toEqual([{ track_id: 1, name: 'For Those About To Rock (We Salute You)' }]);

    let slot = holdTheSlot();
    // Modern dialect: HTTP 429, the JSON-RPC error with the contract's refusal as data, Retry-After.
    const modern = await c.send(request(2, 'modern', 'm-1'));
    expect(modern.status).toBe(429);
    expect(modern.headers['retry-after']).toBe('1');
    expect(modern.body).toEqual({
      jsonrpc: '2.0',
      id: 'm-1',
      error: { code: -32602, message: AT_CAPACITY, data: { status: 'rate_limited', code: 'rate_limited', message: AT_CAPACITY, retry_after_ms: 1000, request_id: modern.headers['x-request-id'] } },
    });
    // Handshake dialect: HTTP 200, a tool result with isError and the same structured refusal.
    const handshake = await c.send(request(2, 'handshake', 9));
    expect(handshake.status).toBe(200);
    expect(handshake.body).toEqual({
      jsonrpc: '2.0',
      id: 9,
      result: {
        _meta: { 'io.modelcontextprotocol/serverInfo': { name: 'interlock', title: 'InterLock governed data gateway', version: pkg.version } },
        resultType: 'complete',
        content: [{ type: 'text', text: `Refused (rate_limited, rate_limited): ${AT_CAPACITY}` }],
        structuredContent: { status: 'rate_limited', code: 'rate_limited', message: AT_CAPACITY, retry_after_ms: 1000, request_id: handshake.headers['x-request-id'] },
        isError: true,
      },
    });

    // Many refusals (the slot held), each at once and none charged, interleaved with served calls
    // (the slot free) and with server/discover, which admission never refuses.
    const refusedBefore = env.gateway.capacity!.refused;
    const refusals: RawAnswer[] = [];
    const served: RawAnswer[] = [];
    const floor: RawAnswer[] = [];
    for (let round = 0; round < 6; round++) {
      await sendMany(c, REFUSED / 5, 'modern', refusals);
      await sendMany(c, REFUSED / 5, 'discover', floor);
      slot.release();
      await sendMany(c, SERVED / 5, 'modern', served);
      slot = holdTheSlot();
    }
    slot.release();
    expect(refusals.filter((a) => a.status !== 429 || a.headers['retry-after'] !== '1' || a.body.error.message !== AT_CAPACITY)).toEqual([]);
    expect(env.gateway.capacity!.refused - refusedBefore).toBe(REFUSED * 1.2);
    // The same identity is served between and after: its budget (SERVED × 1.2 + 20) was not spent by the refusals.
    expect(served.filter((a) => a.status !== 200 || a.body.result.structuredContent.rows.length !== 1)).toEqual([]);
    expect(floor.filter((a) => a.status !== 200)).toEqual([]);

    // Audit: the refusals only in aggregate (reason rate_limited), no per-call event for any of them.
    await env.gateway.gateway.flushAudit();
    const rows = (await env.db.pool.query<{ request_id: string | null; decision: string; reason_code: string | null; details: any }>("SELECT request_id, decision, reason_code, details FROM audit_events WHERE kind = 'tool_call' ORDER BY id")).rows;
    expect(rows.filter((r) => r.request_id === modern.headers['x-request-id'] || r.request_id === handshake.headers['x-request-id'])).toEqual([]);
    const agg = rows.filter((r) => r.details?.aggregated === true && r.reason_code === 'rate_limited');
    expect(agg.reduce((n, r) => n + Number(r.details.count), 0)).toBe(REFUSED * 1.2 + 2);
    expect(rows.filter((r) => r.decision === 'allowed')).toHaveLength(SERVED * 1.2 + 1);

    // The budget is real: past it the same identity is refused by the rate limit (not by capacity).
    let limited: RawAnswer | null = null;
    for (let i = 0; i < 40 && !limited; i++) {
      const a = await c.send(request(5, 'modern'));
      if (a.status === 429) limited = a;
    }
    expect(limited?.body.error.data.code).toBe('rate_limited');
    expect(limited?.body.error.message).not.toBe(AT_CAPACITY);
  } finally {
    c.close();
  }
}, 120_000);

test('a token not seen before is refused after its identity is resolved, the same way; then before, byte for byte', async () => {
  const c = await RawClient.open(port);
  const slot = holdTheSlot();
  try {
    for (const origin of [undefined, ORIGIN]) {
      const key = await createApiKey(env.db, env.demo.identityId);
      const refusedBefore = env.gateway.capacity!.refused;
      const answers: RawAnswer[] = [];
      for (const rpcId of ['first', 'again']) {
        const a = await c.send(request(3, 'modern', rpcId, key.secret, origin));
        expect(a.status).toBe(429);
        expect(a.headers['retry-after']).toBe('1');
        expect(a.headers['access-control-allow-origin']).toBe(origin);
        expect(a.body).toEqual({ jsonrpc: '2.0', id: rpcId, error: { code: -32602, message: AT_CAPACITY, data: { status: 'rate_limited', code: 'rate_limited', message: AT_CAPACITY, retry_after_ms: 1000, request_id: a.headers['x-request-id'] } } });
        answers.push(a);
      }
      expect(env.gateway.capacity!.refused - refusedBefore).toBe(2);
      // The first went through identity resolution (answerCall renders and serialises the outcome),
      // the second was decided right after the body parse (answerKnownOverCapacity, from its
      // template): the same status line, header lines in the same order, and body bytes, but for
      // the request id and the date (the JSON-RPC ids are as long).
      const same = (a: RawAnswer) => a.raw.split(a.headers['x-request-id']).join('-').replace(/\r\nDate: [^\r]*/, '\r\nDate: -').replace(/"id":"(first|again)"/, '"id":"-"');
      expect(same(answers[1])).toBe(same(answers[0]));
      expect(same(answers[1])).toContain('\r\nRetry-After: 1\r\n');
    }
    // A made-up token is never remembered: it gets its 401, not a capacity refusal.
    const bogus = await c.send(request(3, 'modern', 'bogus', `ilk_${'A'.repeat(43)}`));
    expect(bogus.status).toBe(401);
    expect(bogus.body.error.data.code).toBe('invalid_api_key');
  } finally {
    slot.release();
    c.close();
  }
}, 60_000);

test('pause_refused_connections: after a refusal at capacity its connection is not read before the Retry-After; other connections are', async () => {
  const settings = env.gateway.capacity!.settings as { pauseRefusedConnections: boolean };
  settings.pauseRefusedConnections = true;
  // A fresh identity: the first test spent the demo identity's rate-limit budget on purpose.
  const who = await createIdentity(env.db, 'pause-agent');
  const key = (await createApiKey(env.db, who.id)).secret;
  const c = await RawClient.open(port);
  const other = await RawClient.open(port);
  let slot = holdTheSlot();
  try {
    const first = await c.send(listSources('p-1', key));
    expect(first.status).toBe(429);
    expect(first.headers['retry-after']).toBe('1');
    expect(first.body.error.message).toBe(AT_CAPACITY);
    // The next request on the same connection is sent at once but read only after ~1 s: by then the slot is free.
    const sent = Date.now();
    const next = c.send(listSources('p-2', key));
    // Meanwhile another connection is read and answered at once (refused: the slot is still held).
    const meanwhile = await other.send(listSources('p-3', key));
    expect(meanwhile.status).toBe(429);
    expect(Date.now() - sent).toBeLessThan(900);
    slot.release();
    slot = { release: () => undefined };
    const late = await next;
    expect(Date.now() - sent).toBeGreaterThanOrEqual(950);
    expect(late.status).toBe(200);
    expect(late.body.id).toBe('p-2');
    expect(late.body.result.isError).toBeUndefined();
  } finally {
    slot.release();
    settings.pauseRefusedConnections = false;
    c.close();
    other.close();
  }
}, 30_000);

/** The head of a modern tools/call of interlock_query with `extra` header lines and a body of `length` bytes (the body not included). */
function callHead(apiKey: string, length: number | null, extra: string[] = [], version = 'HTTP/1.1'): string {
  const lines = [`POST /mcp ${version}`, `Host: 127.0.0.1:${port}`, 'Content-Type: application/json', 'Accept: application/json, text/event-stream', `Authorization: Bearer ${apiKey}`, `MCP-Protocol-Version: ${MODERN}`, 'Mcp-Method: tools/call', 'Mcp-Name: interlock_query', ...extra];
  if (length !== null) lines.push(`Content-Length: ${length}`);
  return `${lines.join('\r\n')}\r\n\r\n`;
}

/** A modern server/discover (never refused at capacity) with JSON-RPC id `rpcId`. */
function discover(rpcId: string, apiKey: string): string {
  return request(0, 'discover', rpcId, apiKey);
}

/** The modern refusal at capacity for `rpcId` (null: the id could not be read) and the answer's own request id. */
function refusalBody(rpcId: string | number | null, requestId: string): unknown {
  return { jsonrpc: '2.0', id: rpcId, error: { code: -32602, message: AT_CAPACITY, data: { status: 'rate_limited', code: 'rate_limited', message: AT_CAPACITY, retry_after_ms: 1000, request_id: requestId } } };
}

/** The refusals at capacity /metrics shows: tool calls refused rate_limited without a source, and modern tools/call requests answered 429. */
async function refusalsOnMetrics(): Promise<{ toolCalls: number; requests: number }> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const value = (series: string) => Number(text.split('\n').find((l) => l.startsWith(`${series} `))?.slice(series.length + 1) ?? 0);
  return {
    toolCalls: value('interlock_tool_calls_total{tool="interlock_query",source="",decision="refused",reason="rate_limited"}'),
    requests: value('interlock_mcp_requests_total{method="tools/call",dialect="modern",status="429"}'),
  };
}

test('decided from the headers, before the body is parsed: same bytes, the body read to its end, keep-alive and pipelining intact, every refusal counted', async () => {
  const who = await createIdentity(env.db, 'early-agent');
  const key = (await createApiKey(env.db, who.id)).secret;
  const c = await RawClient.open(port);
  const slot = holdTheSlot();
  try {
    // The token's first call is refused after its identity is resolved; the limiter then knows it.
    const resolved = await c.send(request(4, 'modern', 'r-0', key));
    expect(resolved.status).toBe(429);
    const refusedBefore = env.gateway.capacity!.refused;
    const scrapedBefore = await refusalsOnMetrics();
    let refusals = 0;

    // A body over the early path's limit (and over a socket's high-water mark) is refused after the
    // body parse (answerKnownOverCapacity); one within it from the headers: the same bytes but for
    // the request id, the date and the JSON-RPC id.
    const big = JSON.stringify({ jsonrpc: '2.0', id: 'big-1', method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: `${POINT} -- ${'x'.repeat(200_000)}`, params: [1] }, _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} } } });
    const late = await c.send(callHead(key, Buffer.byteLength(big)) + big);
    const early = await c.send(request(4, 'modern', 'big-2', key));
    refusals += 2;
    for (const [a, id] of [[late, 'big-1'], [early, 'big-2']] as const) {
      expect(a.status).toBe(429);
      expect(a.headers['retry-after']).toBe('1');
      expect(a.body).toEqual(refusalBody(id, a.headers['x-request-id']));
    }
    const same = (a: RawAnswer) => a.raw.split(a.headers['x-request-id']).join('-').replace(/\r\nDate: [^\r]*/, '\r\nDate: -').replace(/"id":"big-[12]"/, '"id":"-"');
    expect(same(early)).toBe(same(late));
    expect(same(early)).toMatch(/^HTTP\/1\.1 429 Too Many Requests\r\nX-Request-Id: -\r\nRetry-After: 1\r\nContent-Type: application\/json; charset=utf-8\r\nContent-Length: \d+\r\nDate: -\r\nConnection: keep-alive\r\nKeep-Alive: timeout=\d+\r\n\r\n\{"jsonrpc":"2\.0","id":"-","error":/);

    // The body is not validated first: not JSON, or no body at all, is refused with id null (the
    // normal path would answer 400 -32700); the connection serves its next request.
    const notJson = await c.send(`${callHead(key, 9)}{not json`);
    const empty = await c.send(callHead(key, 0));
    refusals += 2;
    for (const a of [notJson, empty]) {
      expect(a.status).toBe(429);
      expect(a.body).toEqual(refusalBody(null, a.headers['x-request-id']));
    }
    const after = await c.send(discover('d-1', key));
    expect([after.status, after.body.id]).toEqual([200, 'd-1']);

    // Pipelined in one write: refusal, discover, refusal, answered in order on the one connection.
    const one = (rpcId: string) => request(5, 'modern', rpcId, key);
    const piped = await c.sendAll([one('p-1') + discover('p-2', key) + one('p-3')], 3);
    refusals += 2;
    expect(piped.map((a) => [a.status, a.body.id])).toEqual([
      [429, 'p-1'],
      [200, 'p-2'],
      [429, 'p-3'],
    ]);

    // A body that arrives in pieces after its headers is read to its end before the answer.
    const body = JSON.stringify({ jsonrpc: '2.0', id: 42, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: POINT, params: [1] }, _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} } } });
    const pending = c.sendAll([callHead(key, Buffer.byteLength(body))], 2);
    await new Promise((r) => setTimeout(r, 50));
    c.sendAll([body.slice(0, 20)], 0);
    await new Promise((r) => setTimeout(r, 50));
    c.sendAll([body.slice(20) + discover('d-2', key)], 0);
    const [split, next] = await pending;
    refusals += 1;
    expect(split.status).toBe(429);
    expect(split.body).toEqual(refusalBody(42, split.headers['x-request-id']));
    expect([next.status, next.body.id]).toEqual([200, 'd-2']);

    // HEAD is never refused at capacity: 405 with Allow, no body, and the connection goes on.
    const [head] = await c.sendAll([`HEAD /mcp HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${key}\r\nMCP-Protocol-Version: ${MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: interlock_query\r\n\r\n`], 1, true);
    expect([head.status, head.headers.allow]).toEqual([405, 'POST']);
    const afterHead = await c.send(one('p-4'));
    refusals += 1;
    expect([afterHead.status, afterHead.body.id]).toEqual([429, 'p-4']);

    expect(env.gateway.capacity!.refused - refusedBefore).toBe(refusals);
    // And on /metrics, each once: as a refused tool call (rate_limited, no source) and as a 429 of the modern dialect.
    const scraped = await refusalsOnMetrics();
    expect([scraped.toolCalls - scrapedBefore.toolCalls, scraped.requests - scrapedBefore.requests]).toEqual([refusals, refusals]);
    // Every refusal is in the aggregate audit (its count), none has an event of its own.
    await env.gateway.gateway.flushAudit();
    const ids = [late, early, notJson, empty, ...piped, split, afterHead].filter((a) => a.status === 429).map((a) => a.headers['x-request-id']);
    const own = await env.db.pool.query("SELECT count(*)::int AS n FROM audit_events WHERE kind = 'tool_call' AND request_id = ANY($1)", [ids]);
    expect(own.rows[0].n).toBe(0);
  } finally {
    slot.release();
    c.close();
  }
}, 60_000);

test('an HTTP/1.0 client refused from the headers gets Connection: close and the connection ends', async () => {
  const who = await createIdentity(env.db, 'early-http10');
  const key = (await createApiKey(env.db, who.id)).secret;
  const slot = holdTheSlot();
  try {
    const warm = await RawClient.open(port);
    expect((await warm.send(request(4, 'modern', 'w', key))).status).toBe(429);
    warm.close();
    const c = await RawClient.open(port);
    const body = JSON.stringify({ jsonrpc: '2.0', id: 'old', method: 'tools/call', params: { name: 'interlock_query', arguments: {}, _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} } } });
    const a = await c.send(callHead(key, Buffer.byteLength(body), [], 'HTTP/1.0') + body);
    expect(a.raw.startsWith('HTTP/1.1 429 Too Many Requests\r\n')).toBe(true);
    expect(a.headers.connection).toBe('close');
    expect(a.body).toEqual(refusalBody('old', a.headers['x-request-id']));
    await c.ended;
  } finally {
    slot.release();
  }
}, 30_000);
