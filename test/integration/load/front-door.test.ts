/**
 * The front door (issue 29 (a), src/transport/front-door.ts): while admission is shedding, a new
 * connection's modern tools/call refused at capacity is answered before node:http's parser, with
 * the same bytes as node:http's early refusal (but request id and Date); every other request is
 * handed over with its connection at a request boundary and answered by node:http exactly as
 * without the front door. Each test checks that the front door answered (its `refused` count), so
 * each fails with admission.front_door off. No timed assertions on speed (bench/11-refusal-cost.ts).
 */
import fc from 'fast-check';
import { createHook, executionAsyncId } from 'node:async_hooks';
import { connect, type Socket } from 'node:net';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { RawClient, type RawAnswer } from '../../helpers/raw-client';
import { shed as shedCapacity } from '../../helpers/capacity-load';
import type { CapacityPermit } from '../../../src/transport/capacity';
import { frontDoorOf, type FrontDoor } from '../../../src/transport/front-door';

const MODERN = '2026-07-28';
const AT_CAPACITY = 'The gateway is at capacity; wait retry_after_ms milliseconds before trying again.';
const POINT = 'SELECT track_id, name FROM track WHERE track_id = $1';
const HEADERS_TIMEOUT_MS = 600;

let env: GovernedEnv;
let port = 0;
let door: FrontDoor;

beforeAll(async () => {
  env = await startGovernedEnv({
    config: {
      listen: { headers_timeout_ms: HEADERS_TIMEOUT_MS, request_timeout_ms: 1200 } as never,
      admission: { enabled: true, initial_limit: 1, min_limit: 1, max_limit: 1, queue_size: 0, queue_timeout_ms: 250, tolerance: 2, max_event_loop_delay_ms: 60_000, max_audit_queue: 1000, pause_refused_connections: false },
    },
  });
  port = Number(new URL(env.url).port);
  door = frontDoorOf(env.gateway.server)!;
  // Warm up: the token's identity is remembered by the limiter (refusals from the headers need it).
  const c = await RawClient.open(port);
  expect((await c.send(call(1))).status).toBe(200);
  c.close();
}, 60_000);
afterAll(async () => {
  await env?.close();
});

/** The head of a modern tools/call of interlock_query with body `body` (headers in the order `extra` then the rest). */
function head(body: string, extra: string[] = [], apiKey = env.apiKey): string {
  return [
    'POST /mcp HTTP/1.1',
    ...extra,
    `Host: 127.0.0.1:${port}`,
    'Content-Type: application/json',
    'Accept: application/json, text/event-stream',
    `Authorization: Bearer ${apiKey}`,
    `Content-Length: ${Buffer.byteLength(body)}`,
    `MCP-Protocol-Version: ${MODERN}`,
    'Mcp-Method: tools/call',
    'Mcp-Name: interlock_query',
  ].join('\r\n') + '\r\n\r\n';
}

function body(rpcId: string | number, track = 1): string {
  return JSON.stringify({ jsonrpc: '2.0', id: rpcId, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: POINT, params: [track] }, _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} } } });
}

function call(rpcId: string | number, extra: string[] = []): string {
  const b = body(rpcId);
  return head(b, extra) + b;
}

function discover(rpcId: string): string {
  const b = JSON.stringify({ jsonrpc: '2.0', id: rpcId, method: 'server/discover', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} } } });
  return `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer ${env.apiKey}\r\nContent-Length: ${Buffer.byteLength(b)}\r\nMCP-Protocol-Version: ${MODERN}\r\nMcp-Method: server/discover\r\n\r\n${b}`;
}

function refusalBody(rpcId: string | number | null, requestId: string): unknown {
  return { jsonrpc: '2.0', id: rpcId, error: { code: -32602, message: AT_CAPACITY, data: { status: 'rate_limited', code: 'rate_limited', message: AT_CAPACITY, retry_after_ms: 1000, request_id: requestId } } };
}

/** Holds the replica's only slot and has the limiter refuse once, so it is shedding (new connections start at the front door). */
const shed = (): CapacityPermit => shedCapacity(env);

/** Resolves once the limiter is no longer shedding (a new connection then goes straight to node:http). */
async function calm(): Promise<void> {
  while (env.gateway.capacity!.shedding()) await new Promise((r) => setTimeout(r, 50));
}

/** An answer's bytes with its request id and Date made constant. */
function same(a: RawAnswer): string {
  return a.raw.split(a.headers['x-request-id']).join('-').replace(/\r\nDate: [^\r]*/, '\r\nDate: -');
}

/** Writes `bytes` on a new connection (opened before `shed` when `early`) and resolves with everything received until the server closes it. */
function exchange(bytes: Array<string | Buffer>): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', async () => {
      for (const b of bytes) {
        s.write(b);
        await new Promise((r) => setImmediate(r));
      }
    });
    let out = '';
    s.on('data', (d) => (out += d.toString('latin1')));
    s.on('error', reject);
    s.on('close', () => resolve(out));
    setTimeout(() => s.end(), 400).unref();
  });
}

test('the same bytes as the early refusal, keep-alive: refusal, refusal, then (the slot freed) the call served on the same connection', async () => {
  // node:http's early refusal, on a connection opened before the limiter sheds (it goes to node:http).
  await calm();
  const adopted0 = door.adopted;
  const before = await RawClient.open(port);
  let slot = shed();
  try {
    const viaNode = await before.send(call('n-1'));
    expect(door.adopted).toBe(adopted0);
    const c = await RawClient.open(port);
    const refused0 = door.refused;
    const a = await c.send(call('f-1'));
    const b = await c.send(call('f-2'));
    expect(door.refused - refused0).toBe(2);
    for (const [x, id] of [[a, 'f-1'], [b, 'f-2']] as const) {
      expect(x.status).toBe(429);
      expect(x.body).toEqual(refusalBody(id, x.headers['x-request-id']));
    }
    // node:http's says Connection: close (a front door is on); otherwise the same bytes.
    const nodeKeepAlive = same(viaNode).replace('Connection: close\r\n', '').replace('Date: -\r\n', 'Date: -\r\nConnection: keep-alive\r\nKeep-Alive: timeout=65\r\n');
    expect(same(a).replace('"f-1"', '"n-1"')).toBe(nodeKeepAlive);
    expect(same(a)).toMatch(/^HTTP\/1\.1 429 Too Many Requests\r\nX-Request-Id: -\r\nRetry-After: 1\r\nContent-Type: application\/json; charset=utf-8\r\nContent-Length: \d+\r\nDate: -\r\nConnection: keep-alive\r\nKeep-Alive: timeout=65\r\n\r\n\{"jsonrpc":"2\.0","id":"f-1","error":/);
    await before.ended;
    // The slot freed: the next call on the same connection is handed to node:http and served.
    slot.release();
    const served = await c.send(call('f-3'));
    expect(served.status).toBe(200);
    expect(served.body.result.structuredContent.rows).toEqual([{ track_id: 1, name: 'For Those About To Rock (We Salute You)' }]);
    expect(door.refused - refused0).toBe(2);
    // node:http owns it now: refused there again (its refusal closes the connection).
    slot = shed();
    const late = await c.send(call('f-4'));
    expect(late.status).toBe(429);
    expect(late.headers.connection).toBe('close');
    await c.ended;
  } finally {
    slot.release();
    before.close();
  }
}, 30_000);

test('pipelined: refusal, refusal, discover, refusal in one write: two refused at the front door, the rest by node:http, in order', async () => {
  const slot = shed();
  try {
    const c = await RawClient.open(port);
    const refused0 = door.refused;
    const got = await c.sendAll([call('p-1') + call('p-2') + discover('d-1') + call('p-3')], 4);
    expect(got.map((a) => a.status)).toEqual([429, 429, 200, 429]);
    expect(got[0].body).toEqual(refusalBody('p-1', got[0].headers['x-request-id']));
    expect(got[1].body).toEqual(refusalBody('p-2', got[1].headers['x-request-id']));
    expect(got[2].body.id).toBe('d-1');
    expect(got[3].body).toEqual(refusalBody('p-3', got[3].headers['x-request-id']));
    expect(got[3].headers.connection).toBe('close');
    expect(door.refused - refused0).toBe(2);
    c.close();
  } finally {
    slot.release();
  }
});

test('a body in pieces, and a request split at every byte boundary of its header block (fast-check)', async () => {
  const slot = shed();
  try {
    const c = await RawClient.open(port);
    const refused0 = door.refused;
    const b = body('pieces');
    const a = await c.sendAll([head(b), b.slice(0, 5), b.slice(5, 40), b.slice(40)], 1);
    expect(a[0].body).toEqual(refusalBody('pieces', a[0].headers['x-request-id']));
    expect(door.refused - refused0).toBe(1);
    c.close();
    const bytes = Buffer.from(call('split'));
    const headerLength = bytes.indexOf('\r\n\r\n') + 4;
    await fc.assert(
      fc.asyncProperty(fc.uniqueArray(fc.integer({ min: 1, max: headerLength }), { minLength: 1, maxLength: 6 }), async (cuts) => {
        const at = [0, ...cuts.sort((x, y) => x - y), bytes.length];
        const parts = at.slice(1).map((end, i) => bytes.subarray(at[i], end)).filter((p) => p.length > 0);
        const before = door.refused;
        const s = await RawClient.open(port);
        const [r] = await s.sendAll(parts, 1);
        s.close();
        expect(r.status).toBe(429);
        expect(r.body).toEqual(refusalBody('split', r.headers['x-request-id']));
        expect(door.refused - before).toBe(1);
      }),
      { numRuns: 40 },
    );
    // Every single boundary too.
    for (let cut = 1; cut < headerLength; cut++) {
      const s = await RawClient.open(port);
      const [r] = await s.sendAll([bytes.subarray(0, cut), bytes.subarray(cut)], 1);
      s.close();
      expect(r.status).toBe(429);
    }
  } finally {
    slot.release();
  }
}, 60_000);

test('oversized, duplicate and odd headers, HTTP/1.0: handed over and answered by node:http exactly as without the front door', async () => {
  const b = body('odd');
  const cases: string[] = [
    call('dup', ['Content-Length: ' + Buffer.byteLength(b)]), // duplicate Content-Length: node's 400
    call('fold', ['X-Folded: a', ' b']), // obs-fold
    call('big', [`X-Big: ${'a'.repeat(17 * 1024)}`]), // over 16 KiB: node's 431
    call('acc', ['Accept: application/json']), // a duplicate header it reads: node joins them
    call('te', ['Transfer-Encoding: chunked']), // Content-Length and Transfer-Encoding: node's 400
    call('q').replace('POST /mcp ', 'POST /mcp?x=1 '),
    call('h10').replace('HTTP/1.1', 'HTTP/1.0'),
    call('lf').replace('Mcp-Method: tools/call\r\n', 'Mcp-Method: tools/call\n'),
    call('utf8', ['X-Name: caf\u00e9']),
  ];
  await calm();
  const adopted0 = door.adopted;
  let held: CapacityPermit | null = null;
  try {
    // Without the front door: each on a connection node:http owns (opened while the limiter was not shedding)…
    const direct: Array<Promise<string>> = [];
    const sockets = await Promise.all(cases.map(() => new Promise<import('node:net').Socket>((resolve) => { const s = connect(port, '127.0.0.1', () => resolve(s)); })));
    // The server has accepted them all (its 'connection' event, where the front door decides) before the limiter sheds.
    while ((await new Promise<number>((r) => env.gateway.server.getConnections((_e, n) => r(n)))) < cases.length) await new Promise((r) => setTimeout(r, 20));
    held = shed();
    for (const [i, s] of sockets.entries()) {
      direct.push(new Promise((resolve) => {
        let out = '';
        s.on('data', (d) => (out += d.toString('latin1')));
        s.on('close', () => resolve(out));
        s.write(Buffer.from(cases[i], 'utf8'));
        setTimeout(() => s.end(), 400).unref();
      }));
    }
    const viaNode = await Promise.all(direct);
    expect(door.adopted).toBe(adopted0);
    // …and through the front door (new connections while shedding).
    const refused0 = door.refused;
    const viaDoor = await Promise.all(cases.map((c) => exchange([Buffer.from(c, 'utf8')])));
    const norm = (s: string) => s.replace(/X-Request-Id: [^\r]*/g, 'X-Request-Id: -').replace(/Date: [^\r]*/g, 'Date: -').replace(/"request_id":"[^"]*"/g, '"request_id":"-"');
    expect(viaDoor.map(norm)).toEqual(viaNode.map(norm));
    expect(viaDoor[0]).toMatch(/^HTTP\/1\.1 400 Bad Request/);
    expect(viaDoor[2]).toMatch(/^HTTP\/1\.1 431 /);
    expect(viaDoor[3]).toMatch(/^HTTP\/1\.1 429 /);
    expect(door.refused - refused0).toBe(0);
    expect(door.adopted - adopted0).toBe(cases.length);
  } finally {
    held?.release();
  }
}, 30_000);

test('counted as now: /metrics and the aggregate audit see every front-door refusal', async () => {
  const metric = async (): Promise<number> => {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const series = 'interlock_mcp_requests_total{method="tools/call",dialect="modern",status="429"}';
    return Number(text.split('\n').find((l) => l.startsWith(`${series} `))?.slice(series.length + 1) ?? 0);
  };
  const auditCount = async (): Promise<number> => {
    await env.gateway.gateway.flushAudit();
    const rows = (await env.db.pool.query<{ details: any }>("SELECT details FROM audit_events WHERE kind = 'tool_call' AND reason_code = 'rate_limited'")).rows;
    return rows.filter((r) => r.details?.aggregated === true).reduce((n, r) => n + Number(r.details.count), 0);
  };
  const m0 = await metric();
  const a0 = await auditCount();
  const refusedBefore = env.gateway.capacity!.refused;
  const slot = shed();
  const c = await RawClient.open(port);
  const door0 = door.refused;
  for (let i = 0; i < 10; i++) expect((await c.send(call(`m-${i}`))).status).toBe(429);
  c.close();
  slot.release();
  expect(door.refused - door0).toBe(10);
  expect((await metric()) - m0).toBe(10);
  // 10 by the front door and the one shed() provoked (not audited: no request).
  expect(env.gateway.capacity!.refused - refusedBefore).toBe(11);
  expect((await auditCount()) - a0).toBe(10);
}, 30_000);

test('slowloris: a front-door connection whose headers do not complete in time gets node:http\'s 408 and is destroyed', async () => {
  const slot = shed();
  const adopted0 = door.adopted;
  try {
    const bytes = call('slow');
    const out = await new Promise<string>((resolve) => {
      const s = connect(port, '127.0.0.1', () => s.write(bytes.slice(0, 60)));
      let got = '';
      s.on('data', (d) => (got += d.toString('latin1')));
      // One more byte now and then, never the end of the header block.
      let i = 60;
      const drip = setInterval(() => (s.writable ? s.write(bytes[i++]) : undefined), 100);
      s.on('close', () => {
        clearInterval(drip);
        resolve(got);
      });
    });
    expect(out).toBe('HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n');
    expect(door.adopted - adopted0).toBe(1);
  } finally {
    slot.release();
  }
}, 20_000);

test('undici (fetch, as the MCP TS SDK uses): refusals at the front door on a reused connection, then (the slot freed) served', async () => {
  const post = (rpcId: string) => {
    const b = body(rpcId);
    return fetch(env.url, { method: 'POST', body: b, headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${env.apiKey}`, 'MCP-Protocol-Version': MODERN, 'Mcp-Method': 'tools/call', 'Mcp-Name': 'interlock_query' } });
  };
  await calm();
  const first = await post('u-0');
  expect(first.status).toBe(200);
  await first.text();
  const slot = shed();
  try {
    const refused0 = door.refused;
    // undici's pool may answer from a connection node:http owns (its refusal then closes it) or open one at the front door.
    for (const id of ['u-1', 'u-2', 'u-3', 'u-4']) {
      const r = await post(id);
      expect(r.status).toBe(429);
      expect(r.headers.get('retry-after')).toBe('1');
      expect(['keep-alive', 'close']).toContain(r.headers.get('connection'));
      expect(await r.json()).toEqual(refusalBody(id, r.headers.get('x-request-id')!));
    }
    expect(door.refused - refused0).toBeGreaterThanOrEqual(3);
    slot.release();
    const served = await post('u-5');
    expect(served.status).toBe(200);
    expect(await served.text()).toContain('For Those About To Rock');
  } finally {
    slot.release();
  }
}, 30_000);

/** Every series of a /metrics scrape but the process's own (CPU, memory, event loop), by its name and labels. */
async function scrapeSeries(): Promise<Map<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const m = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#') || line.startsWith('interlock_process_')) continue;
    const at = line.lastIndexOf(' ');
    m.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return m;
}

/** The series that moved from `a` to `b`, with how much. */
function moved(a: Map<string, number>, b: Map<string, number>): Record<string, number> {
  const d: Record<string, number> = {};
  for (const [k, v] of b) if (v !== (a.get(k) ?? 0)) d[k] = v - (a.get(k) ?? 0);
  return d;
}

test('the scrape after N front-door refusals moves exactly as after N refusals on node:http\'s path: same series, counts, buckets and sums (h29b)', async () => {
  const N = 4;
  await calm();
  const adopted0 = door.adopted;
  // N connections opened while the limiter is not shedding: node:http owns them.
  const viaNode = await Promise.all(Array.from({ length: N }, () => RawClient.open(port)));
  const s0 = await scrapeSeries();
  let slot = shed();
  try {
    const refused0 = door.refused;
    for (let i = 0; i < N; i++) expect((await viaNode[i].send(call(`hn-${i}`))).status).toBe(429);
    expect(door.refused - refused0).toBe(0);
    expect(door.adopted).toBe(adopted0);
    slot.release();
    const s1 = await scrapeSeries();
    slot = shed();
    const c = await RawClient.open(port);
    for (let i = 0; i < N; i++) expect((await c.send(call(`hf-${i}`))).status).toBe(429);
    expect(door.refused - refused0).toBe(N);
    c.close();
    slot.release();
    const s2 = await scrapeSeries();
    const byNode = moved(s0, s1);
    expect(byNode['interlock_tool_calls_total{tool="interlock_query",source="",decision="refused",reason="rate_limited"}']).toBe(N);
    expect(byNode['interlock_tool_call_duration_seconds_bucket{le="0.001",tool="interlock_query",decision="refused"}']).toBe(N);
    expect(byNode['interlock_mcp_requests_total{method="tools/call",dialect="modern",status="429"}']).toBe(N);
    expect(byNode['interlock_mcp_request_duration_seconds_count{method="tools/call"}']).toBe(N);
    expect(moved(s1, s2)).toEqual(byNode);
  } finally {
    slot.release();
    for (const c of viaNode) c.close();
  }
}, 30_000);

test('a connection\'s header blocks are framed once each (h29b): the same block refused again, a block that differs (Origin) handed over to node:http', async () => {
  const slot = shed();
  const c = await RawClient.open(port).catch((err: unknown) => {
    slot.release();
    throw err;
  });
  const refused0 = door.refused;
  const statuses: number[] = [];
  for (let i = 0; i < 3; i++) statuses.push((await c.send(call(`hm-${i}`))).status);
  const byDoor = door.refused - refused0;
  // The same headers with an Origin: not the front door's (its answer would carry CORS headers).
  statuses.push((await c.send(call('hm-o', [`Origin: http://127.0.0.1:${port}`]))).status);
  slot.release();
  c.close();
  expect(statuses).toEqual([429, 429, 429, 429]);
  expect([byDoor, door.refused - refused0]).toEqual([3, 3]);
}, 30_000);

/** Resolves once `cond()` holds (polled every 5 ms; throws after 10 s). */
async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 2000 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  if (!cond()) throw new Error('condition not reached in 10 s');
}

/**
 * What a front-door refusal queues (issue 29 (a), task h29q): counted per refusal with async_hooks
 * (every promise, process.nextTick, queueMicrotask, timer and immediate created), on one keep-alive
 * connection while the limiter sheds. A refusal creates no promise, no microtask, and no async
 * resource from src/ (but crypto's for request ids, a synchronous pool refill); the only tick is
 * node's stream read-ahead (Readable's maybeReadMore, one per chunk read), which the node:net floor's
 * 'data' listener queues too. Deterministic counts, no timing. Returns the refusals answered by the
 * door while counting (`n` after 20 uncounted), the resources by async_hooks type (the client's own
 * read ticks left out) and the stacks of those created from src/.
 */
async function countRefusals(n: number): Promise<{ refused: number; types: Record<string, number>; fromSrc: string[] }> {
  // The client: plain callbacks on one socket, so it creates nothing per request but its own socket's reads.
  const sock: Socket = await new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => resolve(s));
    s.once('error', reject);
    s.setNoDelay(true);
  });
  const clientHandle = (sock as unknown as { _handle: { getAsyncId(): number } })._handle.getAsyncId();
  // The door's end of this connection: what a refusal creates descends from its socket (the data
  // callback runs in that resource's context, and every tick, promise or timer made there names it,
  // or one of its descendants, as trigger). The gateway's background work (periodic reloads, seals,
  // the keyless audit's timer, the control database's replies) descends from timers and other sockets
  // and is left out: counting it made the bounds below depend on how long 200 refusals took (a
  // loaded CI machine counted 10 promises, all background).
  await until(() => [...(door as unknown as { conns: Set<{ socket: Socket }> }).conns].some((c) => c.socket.remotePort === sock.localPort));
  const doorSocket = [...(door as unknown as { conns: Set<{ socket: Socket }> }).conns].find((c) => c.socket.remotePort === sock.localPort)!.socket;
  const doorHandle = (doorSocket as unknown as { _handle: { getAsyncId(): number } })._handle.getAsyncId();
  const fromDoor = new Set<number>([doorHandle]);
  const req = call(7);
  const types: Record<string, number> = {};
  const fromSrc: string[] = [];
  const hook = createHook({
    init(id, type, trigger) {
      if (!fromDoor.has(trigger) && !fromDoor.has(executionAsyncId())) return;
      fromDoor.add(id);
      types[type] = (types[type] ?? 0) + 1;
      const o: { stack?: string } = {};
      Error.captureStackTrace(o);
      const stack = o.stack ?? '';
      if (/[/\\]src[/\\]/.test(stack) && type !== 'RANDOMBYTESREQUEST') fromSrc.push(`${type}: ${stack}`);
    },
  });
  let warm = 20;
  let got = 0;
  let before = 0;
  await new Promise<void>((resolve) => {
    sock.on('data', (d: Buffer) => {
      const answers = d.toString('latin1').split('HTTP/1.1 429 ').length - 1;
      if (warm > 0) {
        warm -= answers;
        if (warm <= 0) {
          before = door.refused;
          hook.enable();
        }
      } else {
        got += answers;
        if (got >= n) {
          hook.disable();
          resolve();
          return;
        }
      }
      sock.write(req);
    });
    sock.write(req);
  });
  const refused = door.refused - before;
  sock.destroy();
  return { refused, types, fromSrc };
}

test('a front-door refusal creates no promise or microtask, and nothing from src/ but request ids; one stream read-ahead tick per read, as the node:net floor', async () => {
  const permit = shed();
  try {
    const { refused, types, fromSrc } = await countRefusals(200);
    expect(refused).toBe(200);
    // The process's own background work (periodic reloads, jest) may create a few resources while
    // counting (the clean-clone CI at e060500 saw 2 promises in 200 refusals): per refusal means at
    // least `refused` of them, so fewer than one per twenty refusals is none per refusal.
    expect(types.PROMISE ?? 0).toBeLessThan(refused / 20);
    expect(types.Microtask ?? 0).toBeLessThan(refused / 20);
    // Node's Readable read-ahead (maybeReadMore): at most one per chunk the gateway reads, one request per chunk here.
    expect(types.TickObject ?? 0).toBeLessThan(refused + refused / 20);
    // Nothing is created from the front door's own code path (synchronously under its handler): a
    // frame in src/transport/front-door.ts, not this test file's name (the keyless audit's timer
    // flushing an ended window while counting has frames in this file and in src/, none in the door).
    expect(fromSrc.filter((x) => x.split('\n').some((frame) => /[/\\]src[/\\]transport[/\\]front-door\.[jt]s/.test(frame)))).toEqual([]);
  } finally {
    permit.release();
  }
}, 60_000);

test('graceful close with front-door connections open: idle ones end, close() does not hang', async () => {
  const slot = shed();
  const c = await RawClient.open(port);
  expect((await c.send(call('g-1'))).status).toBe(429);
  const silent = connect(port, '127.0.0.1');
  await new Promise((r) => silent.once('connect', r));
  silent.on('error', () => undefined);
  silent.resume();
  const silentClosed = new Promise((r) => silent.once('close', r));
  expect(door.size).toBeGreaterThanOrEqual(2);
  slot.release();
  await env.gateway.close(1000);
  await c.ended;
  await silentClosed;
  expect(door.size).toBe(0);
}, 30_000);
