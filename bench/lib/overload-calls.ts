/**
 * The calls of the overload benches (issue 29: bench/11-overload-ab.ts, bench/11-refusal-cost.ts):
 * uncached point reads by one identity in the modern dialect (so a refusal is an HTTP 429), and a
 * slow read that keeps a limit of 1 full.
 */
import { POINT_SQL, TRACKS } from './point-read';

/** The modern dialect's protocol version. */
export const MODERN = '2026-07-28';
const META = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} };

/** The headers of every call (modern dialect: the mirrored method and name). */
export function callHeaders(apiKey: string): Record<string, string> {
  return { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${apiKey}`, 'MCP-Protocol-Version': MODERN, 'Mcp-Method': 'tools/call', 'Mcp-Name': 'interlock_query' };
}

/** 500 point-read bodies over the track table (wrk cycles them). */
export const POINT_BODIES = Array.from({ length: 500 }, (_, i) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: POINT_SQL, params: [1 + ((i * 7919) % TRACKS)] }, _meta: META } }));

/** A ~1 s read (a cross join counted in the source) that keeps a limit of 1 full. */
export const SLOW_BODY = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: { source_id: 'chinook', sql: 'SELECT count(*) AS n FROM track a, track b' }, _meta: META } });
