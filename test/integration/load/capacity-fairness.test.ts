/**
 * Per-identity fair share inside admission by capacity (issue 29 item 3), on loopback: identity A
 * floods point reads over 512 connections at once with wrk (a separate process, so the flood's
 * client does not starve the gateway's event loop in this one; the stream caps per identity and
 * per address lifted, so capacity is what admits or refuses), while identity B makes one call at a
 * time. A's excess is refused at once (HTTP 429 with Retry-After, counted by wrk's Lua script);
 * every call of B is admitted and answered with its result, because B, under its share, takes the
 * place of A's newest waiter and the next freed slot. Bounded: the flood lasts FLOOD_S seconds.
 */
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { runWrkOverload } from '../../../bench/lib/wrk';

const CONNECTIONS = 512;
const FLOOD_S = 6;
const MODERN = '2026-07-28';

let env: GovernedEnv;
let keyB = '';

beforeAll(async () => {
  env = await startGovernedEnv({
    config: {
      // The defaults of admission (limit from 16, floor 4, queue 32 for 250 ms); the per-address and
      // per-identity caps lifted so that they do not refuse first.
      client_limits: { streams_per_address: 100_000, streams_per_identity: 100_000, body_reads_per_address: 100_000 },
      rate_limits: { per_identity: { points: 1_000_000, window_seconds: 60 }, per_source: { points: 1_000_000, window_seconds: 60 } },
      cache: { ttl_ms: 0, max_bytes: 0 },
    },
  });
  const b = await createIdentity(env.db, 'fair-b');
  keyB = (await createApiKey(env.db, b.id)).secret;
}, 60_000);
afterAll(async () => {
  await env?.close();
});

/** One tools/call in the modern dialect: HTTP status, Retry-After and the JSON-RPC body. */
async function call(apiKey: string, name: string, args: Record<string, unknown>): Promise<{ status: number; retryAfter: string | null; body: any }> {
  // Node's fetch keeps no cap on connections per origin: 512 calls at once are 512 connections.
  const r = await fetch(env.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${apiKey}`, 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': name },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: args, _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} } } }),
  });
  const text = await r.text();
  const json = (r.headers.get('content-type') ?? '').startsWith('text/event-stream') ? text.split('\n').filter((l) => l.startsWith('data: ')).at(-1)!.slice(6) : text;
  return { status: r.status, retryAfter: r.headers.get('retry-after'), body: JSON.parse(json) };
}

test('one identity on 512 connections does not starve another: A is refused past its share, every call of B is answered', async () => {
  const point = (id: number) => ({ source_id: 'chinook', sql: 'SELECT track_id FROM track WHERE track_id = $1', params: [id] });
  expect((await call(env.apiKey, 'interlock_query', point(1))).body.result.structuredContent.rows).toEqual([{ track_id: 1 }]);
  expect((await call(keyB, 'interlock_list_sources', {})).status).toBe(200);

  // wrk: A's point reads over 512 connections; its Lua script sorts the answers (served, 429, 429 with Retry-After, other).
  const bodies = Array.from({ length: 200 }, (_, i) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: point(1 + ((i * 17) % 3000)), _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} } } }));
  const headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${env.apiKey}`, 'MCP-Protocol-Version': MODERN, 'Mcp-Method': 'tools/call', 'Mcp-Name': 'interlock_query' };
  const flood = runWrkOverload({ url: env.url, connections: CONNECTIONS, seconds: FLOOD_S, bodies, headers, expect: '"track_id"' });
  // B, one call at a time, while the flood runs (after it has filled the replica).
  await new Promise((r) => setTimeout(r, 1000));
  const end = Date.now() + (FLOOD_S - 1.5) * 1000;
  const b: Array<{ status: number; ok: boolean; ms: number; body: string }> = [];
  while (Date.now() < end) {
    const t0 = Date.now();
    const r = await call(keyB, 'interlock_list_sources', {});
    b.push({ status: r.status, ok: r.status === 200 && !!r.body.result && !r.body.result.isError, ms: Date.now() - t0, body: JSON.stringify(r.body).slice(0, 300) });
  }
  const { served, refused, refusedWithRetryAfter: withRetryAfter, other } = await flood;
  // eslint-disable-next-line no-console
  console.log(`A (wrk, ${CONNECTIONS} connections, ${FLOOD_S} s): ${served} served, ${refused} refused (${withRetryAfter} with Retry-After), ${other} other; B: ${b.filter((x) => x.ok).length}/${b.length} answered, slowest ${Math.max(...b.map((x) => x.ms))} ms`);

  // The flood was really past capacity: A was refused, every refusal with Retry-After, nothing else went wrong.
  expect(refused).toBeGreaterThan(0);
  expect(withRetryAfter).toBe(refused);
  expect(served).toBeGreaterThan(0);
  expect(other).toBe(0);
  // B was never starved: every one of its calls admitted and answered.
  expect(b.length).toBeGreaterThanOrEqual(3);
  expect(b.filter((x) => !x.ok)).toEqual([]);
}, 90_000);
