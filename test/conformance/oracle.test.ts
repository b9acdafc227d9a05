/**
 * The oracle against the literal rows of the test matrix (mcp-protocol.md §7) as spec/ settles them,
 * plus the helpers it rests on (Accept, Host, Origin, Mcp-Name decoding), the single answer it gives at
 * each former open point now that spec/ settles it, and the
 * verdict's ability to notice broken answers. Pure: no server.
 */
import fc from 'fast-check';
import { argumentsArb, draftArb, render, type GenContext } from '../../conformance/arbitraries';
import { examples, envelope, wire } from '../../conformance/examples';
import type { WireResponse } from '../../conformance/http';
import { acceptsMedia, createOracle, decodeMcpName, hostName, normalizeOrigin, parseAccept, type Expectation } from '../../conformance/oracle';
import { loadSpec } from '../../conformance/spec';
import { judge, parseSse } from '../../conformance/verdict';

const spec = loadSpec();
const oracle = createOracle(spec);
const url = new URL('http://127.0.0.1:8080/mcp');
const apiKey = 'test-key';
const g: GenContext = { spec, oracle, url, apiKey };
const ctx = { url, apiKey };

/** The expectation reduced to what the matrix states: rule, status, code or result kind, id. */
function summary(x: Expectation): Record<string, unknown> {
  const r: Record<string, unknown> = { rule: x.rule, http: x.http };
  if (x.body === 'error') {
    r.code = x.code;
    r.id = x.id;
  } else if (x.body === 'result') {
    r.result = x.result!.kind;
    r.id = x.id;
    if (x.result!.kind === 'initialize') r.protocolVersion = x.result!.protocolVersion;
    if (x.result!.kind === 'tool-refusal') r.refusal = x.result!.code;
  } else r.body = x.body;
  if (x.errorData?.refusal) r.refusal = x.errorData.refusal.code;
  if (x.alternatives) r.alts = x.alternatives.length;
  return r;
}

// Literal expectations, written from spec/ and decisions.md (title → outcome). Rows that differ from the
// matrix on purpose say so in their title (e.g. #17 batches, #31 initialize with a modern header).
const TABLE: Array<[string, Record<string, unknown>]> = [
  ["Host evil.example.com → 403", { rule: "HOST", http: 403, code: -32600, id: null }],
  ["Host localhost:<port> is a loopback name → served", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  ["Origin http://evil.example.com → 403", { rule: "ORIGIN", http: 403, code: -32600, id: null }],
  ["no Origin → served", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  ["Origin equal to the request origin → served", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  ["GET → 405 with Allow: POST", { rule: "HTTP-METHOD", http: 405, code: -32600, id: null }],
  ["GET with MCP-Protocol-Version 2026-07-28 → 405", { rule: "HTTP-METHOD", http: 405, code: -32600, id: null }],
  ["DELETE → 405 with Allow: POST", { rule: "HTTP-METHOD", http: 405, code: -32600, id: null }],
  ["Content-Type text/plain → 415", { rule: "CONTENT-TYPE", http: 415, code: -32600, id: null }],
  ["Content-Type Application/JSON; charset=utf-8 → served", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  ["Accept application/json only → 406", { rule: "ACCEPT", http: 406, code: -32600, id: null }],
  ["Accept */* → served", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  ["Accept application/json, text/event-stream;q=0 → 406", { rule: "ACCEPT", http: 406, code: -32600, id: null }],
  ["body is not JSON → 400 -32700 id null", { rule: "JSON", http: 400, code: -32700, id: null }],
  ["empty batch [] → 400 -32600 id null", { rule: "NO-BATCH", http: 400, code: -32600, id: null }],
  ["batch of requests, no MPV (2025-03-26) → 400 (DEV-BATCH-2025-03-26)", { rule: "NO-BATCH", http: 400, code: -32600, id: null }],
  ["batch of notifications, MPV 2025-03-26 → 400", { rule: "NO-BATCH", http: 400, code: -32600, id: null }],
  ["batch containing initialize → 400", { rule: "NO-BATCH", http: 400, code: -32600, id: null }],
  ["batch with MPV 2025-06-18 → 400", { rule: "NO-BATCH", http: 400, code: -32600, id: null }],
  ["modern batch with an envelope element → 400", { rule: "NO-BATCH", http: 400, code: -32600, id: null }],
  ["{\"foo\":1} → 400 -32600 id null", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: null }],
  ["42 → 400 -32600 id null", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: null }],
  ["jsonrpc missing → 400 -32600, id echoed", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: 7 }],
  ["jsonrpc \"1.0\" → 400 -32600", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: "a" }],
  ["id null → 400 -32600 id null", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: null }],
  ["id 1.5 → 400 -32600", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: null }],
  ["id true → 400 -32600", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: null }],
  ["id {} → 400 -32600", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: null }],
  ["id 0 → 200, id 0 echoed", { rule: "results.plain", http: 200, result: "empty", id: 0 }],
  ["id \"0\" → 200, id \"0\" echoed", { rule: "results.plain", http: 200, result: "empty", id: "0" }],
  ["method missing (and no result/error) → 400 -32600", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: 3 }],
  ["method 42 → 400 -32600", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: 3 }],
  ["MPV 2099-01-01 on tools/list → 400 -32022 {supported, requested}", { rule: "VERSION-HEADER", http: 400, code: -32022, id: 5 }],
  ["MPV garbage on ping → 400 -32022", { rule: "VERSION-HEADER", http: 400, code: -32022, id: "p" }],
  ["MPV = _meta = v999.0.0 → 400 -32022", { rule: "VERSION-HEADER", http: 400, code: -32022, id: 1 }],
  ["initialize with MPV 2025-06-18 → 200, body version negotiated", { rule: "results.plain", http: 200, result: "initialize", id: 0, protocolVersion: "2025-03-26" }],
  ["initialize with MPV equal to an unknown params.protocolVersion → accepted, answered 2025-11-25", { rule: "results.plain", http: 200, result: "initialize", id: 0, protocolVersion: "2025-11-25" }],
  ["tools/list with no MPV → served as 2025-03-26", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  ["no MPV but a valid modern envelope → handshake, served (DEV-MODERN-MISSING-HEADER)", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  ["MPV = _meta = 2025-11-25 → handshake dialect, served", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  ["handshake: posted response → 202, no body", { rule: "results.notification", http: 202, body: "empty" }],
  ["modern: posted response → 400 -32600, id echoed", { rule: "POSTED-RESPONSE", http: 400, code: -32600, id: 4 }],
  ["modern params {} (no _meta) → 400 -32602", { rule: "ENVELOPE", http: 400, code: -32602, id: 9 }],
  ["modern _meta without protocolVersion → 400 -32602", { rule: "ENVELOPE", http: 400, code: -32602, id: 9 }],
  ["modern _meta without clientCapabilities → 400 -32602", { rule: "ENVELOPE", http: 400, code: -32602, id: 9 }],
  ["MPV 2026-07-28 on a bare tools/list → 400 -32602", { rule: "ENVELOPE", http: 400, code: -32602, id: 9 }],
  ["initialize with MPV 2026-07-28 and no envelope → 400 -32602 (the matrix row says -32020; spec order puts ENVELOPE first)", { rule: "ENVELOPE", http: 400, code: -32602, id: 0 }],
  ["envelope without clientInfo → served", { rule: "results.complete", http: 200, result: "discover", id: 9 }],
  ["MPV 2026-07-28, _meta v999.0.0 → 400 -32020", { rule: "VERSION-MATCH", http: 400, code: -32020, id: 2 }],
  ["MPV v999.0.0, _meta 2026-07-28 → 400 -32020 (envelope checked before the version)", { rule: "VERSION-MATCH", http: 400, code: -32020, id: 2 }],
  ["Mcp-Method missing → 400 -32020", { rule: "MCP-METHOD", http: 400, code: -32020, id: 3 }],
  ["Mcp-Method prompts/list for tools/list → 400 -32020", { rule: "MCP-METHOD", http: 400, code: -32020, id: 3 }],
  ["Mcp-Method TOOLS/LIST → 400 -32020", { rule: "MCP-METHOD", http: 400, code: -32020, id: 3 }],
  ["header names mcp-method / MCP-PROTOCOL-VERSION → served", { rule: "results.complete", http: 200, result: "tools", id: 3 }],
  ["tools/call without Mcp-Name → 400 -32020", { rule: "MCP-NAME", http: 400, code: -32020, id: 4 }],
  ["Mcp-Name wrong → 400 -32020", { rule: "MCP-NAME", http: 400, code: -32020, id: 4 }],
  ["Mcp-Name with surrounding whitespace → passes the mirror check", { rule: "AUTH", http: 401, code: -32602, id: 4, refusal: "missing_api_key" }],
  ["Mcp-Name =?base64?…?= → decoded, passes", { rule: "AUTH", http: 401, code: -32602, id: 4, refusal: "missing_api_key" }],
  ["Mcp-Name =?base64?SGVs!!!?= → 400 -32020", { rule: "MCP-NAME", http: 400, code: -32020, id: 4 }],
  ["Mcp-Name =?BASE64?…?= (upper-case marker) → 400 -32020", { rule: "MCP-NAME", http: 400, code: -32020, id: 4 }],
  ["modern foo/bar → 404 -32601", { rule: "METHOD-KNOWN", http: 404, code: -32601, id: 5 }],
  ["modern initialize → 404 -32601", { rule: "METHOD-KNOWN", http: 404, code: -32601, id: 5 }],
  ["modern ping → 404 -32601", { rule: "METHOD-KNOWN", http: 404, code: -32601, id: 5 }],
  ["modern logging/setLevel → 404 -32601", { rule: "METHOD-KNOWN", http: 404, code: -32601, id: 5 }],
  ["modern resources/subscribe → 404 -32601", { rule: "METHOD-KNOWN", http: 404, code: -32601, id: 5 }],
  ["modern prompts/list → 404 -32601", { rule: "METHOD-KNOWN", http: 404, code: -32601, id: 5 }],
  ["modern subscriptions/listen → 404 -32601", { rule: "METHOD-KNOWN", http: 404, code: -32601, id: 5 }],
  ["handshake foo/bar → 200 -32601, id echoed (#44)", { rule: "METHOD-KNOWN-HANDSHAKE", http: 200, code: -32601, id: 6 }],
  ["handshake resources/list → 200 -32601", { rule: "METHOD-KNOWN-HANDSHAKE", http: 200, code: -32601, id: "r" }],
  ["handshake server/discover without envelope → served (DEV-DISCOVER-HANDSHAKE)", { rule: "results.complete", http: 200, result: "discover", id: 6 }],
  ["handshake tools/call of an unknown tool → 200 -32602", { rule: "TOOL-KNOWN", http: 200, code: -32602, id: 7 }],
  ["modern tools/call of an unknown tool → 200 -32602", { rule: "TOOL-KNOWN", http: 200, code: -32602, id: 7 }],
  ["modern tools/call of a tool that declares no required capability, with clientCapabilities {} → not refused -32021", { rule: "AUTH", http: 401, code: -32602, id: 8, refusal: "invalid_api_key" }],
  ["handshake governed tool without a key → tool result isError, unauthorized/missing_api_key", { rule: "AUTH", http: 200, result: "tool-refusal", id: 8, refusal: "missing_api_key" }],
  ["handshake governed tool with an invalid key → unauthorized/invalid_api_key", { rule: "AUTH", http: 200, result: "tool-refusal", id: 8, refusal: "invalid_api_key" }],
  ["modern governed tool without a key → 401 -32602 with WWW-Authenticate: Bearer", { rule: "AUTH", http: 401, code: -32602, id: 8, refusal: "missing_api_key" }],
  ["modern governed tool with an invalid key → 401 -32602 invalid_api_key", { rule: "AUTH", http: 401, code: -32602, id: 8, refusal: "invalid_api_key" }],
  ["2025-11-25 invalid arguments → tool result isError true", { rule: "TOOL-ARGUMENTS", http: 200, result: "tool-error", id: 9 }],
  ["2025-06-18 invalid arguments → 200 -32602", { rule: "TOOL-ARGUMENTS", http: 200, code: -32602, id: 9 }],
  ["no MPV (2025-03-26) missing required argument → 200 -32602", { rule: "TOOL-ARGUMENTS", http: 200, code: -32602, id: 9 }],
  ["modern invalid arguments → tool result isError true", { rule: "TOOL-ARGUMENTS", http: 200, result: "tool-error", id: 9 }],
  ["initialize 2025-03-26 without MPV → answers 2025-03-26, plain shape", { rule: "results.plain", http: 200, result: "initialize", id: 0, protocolVersion: "2025-03-26" }],
  ["initialize 2025-06-18 → answers 2025-06-18", { rule: "results.plain", http: 200, result: "initialize", id: 0, protocolVersion: "2025-06-18" }],
  ["initialize 2025-11-25 → answers 2025-11-25", { rule: "results.plain", http: 200, result: "initialize", id: 0, protocolVersion: "2025-11-25" }],
  ["initialize 2024-11-05 → answers 2025-11-25", { rule: "results.plain", http: 200, result: "initialize", id: 0, protocolVersion: "2025-11-25" }],
  ["initialize 2026-07-28 without envelope → answers 2025-11-25", { rule: "results.plain", http: 200, result: "initialize", id: 0, protocolVersion: "2025-11-25" }],
  ["ping with MPV 2025-06-18 → exactly {}", { rule: "results.plain", http: 200, result: "empty", id: 2 }],
  ["modern server/discover → complete, supportedVersions, capabilities, ttlMs, cacheScope", { rule: "results.complete", http: 200, result: "discover", id: "discover-1" }],
  ["modern tools/list → complete, ttlMs, cacheScope, catalogue", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  ["handshake tools/list → complete envelope (DEV-HANDSHAKE-RESULT-ENVELOPE)", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  ["modern tools/call interlock_list_sources with a valid key → success", { rule: "results.complete", http: 200, result: "tool-success", id: 11 }],
  ["handshake tools/call agentgate_list_sources (alias) with a valid key → success", { rule: "results.complete", http: 200, result: "tool-success", id: 11 }],
  ["notifications/initialized → 202, no body", { rule: "results.notification", http: 202, body: "empty" }],
  ["notifications/cancelled without MPV → 202", { rule: "results.notification", http: 202, body: "empty" }],
  ["modern notification without Mcp-Method → 202", { rule: "results.notification", http: 202, body: "empty" }],
  ["unknown notification → 202", { rule: "results.notification", http: 202, body: "empty" }],
  ["Mcp-Session-Id on a request is ignored; none issued", { rule: "results.plain", http: 200, result: "initialize", id: 0, protocolVersion: "2025-11-25" }],
  ["Last-Event-ID on a request is ignored", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  // Settled former open points (HOST, ORIGIN, ACCEPT, JSON byte order mark, JSONRPC-SHAPE ids and empty
  // method, VERSION-HEADER for notifications and responses, TOOL-KNOWN arguments, AUTH schemes, INITIALIZE-PARAMS).
  ["Host LOCALHOST:1 (upper case, another port) → served", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  ["Host = the URL’s own host and port in upper case → served", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  ["Host EVIL.EXAMPLE.COM → 403", { rule: "HOST", http: 403, code: -32600, id: null }],
  ["Origin = own origin in upper case with one trailing slash → served", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  ["Origin http://LOCALHOST:<port> with Host localhost:<port> → served", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  ["Origin = own origin with two trailing slashes → 403", { rule: "ORIGIN", http: 403, code: -32600, id: null }],
  ["Origin null → 403", { rule: "ORIGIN", http: 403, code: -32600, id: null }],
  ["Accept application/json;q=0, */* → 406 (the most specific range decides)", { rule: "ACCEPT", http: 406, code: -32600, id: null }],
  ["Accept text/*;q=0, text/event-stream, application/json → served (the exact range decides)", { rule: "results.complete", http: 200, result: "tools", id: 1 }],
  ["Accept application/json;q=abc, text/event-stream → 406 (a non-numeric q excludes)", { rule: "ACCEPT", http: 406, code: -32600, id: null }],
  ["request behind a UTF-8 byte order mark → the mark is ignored, served", { rule: "results.plain", http: 200, result: "empty", id: 1 }],
  ["notification behind a UTF-8 byte order mark → 202", { rule: "results.notification", http: 202, body: "empty" }],
  ["two byte order marks → 400 -32700 id null", { rule: "JSON", http: 400, code: -32700, id: null }],
  ["id 2^53-1 → 200, echoed exactly", { rule: "results.plain", http: 200, result: "empty", id: 9007199254740991 }],
  ["id -(2^53-1) → 200, echoed exactly", { rule: "results.plain", http: 200, result: "empty", id: -9007199254740991 }],
  ["id 2^31 on a modern request → 200, echoed", { rule: "results.complete", http: 200, result: "tools", id: 2147483648 }],
  ["id 2^53 → 400 -32600 id null", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: null }],
  ["id 1e+21 → 400 -32600 id null", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: null }],
  ["posted response with id 2^53 → 400 -32600 id null", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: null }],
  ["empty method \"\" → 400 -32600, id echoed", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: 3 }],
  ["modern request with empty method \"\" → 400 -32600, id echoed", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: "e" }],
  ["notification with empty method \"\" → 400 -32600 id null", { rule: "JSONRPC-SHAPE", http: 400, code: -32600, id: null }],
  ["unsupported MPV, _meta with protocolVersion but no clientCapabilities → 400 -32602 (ENVELOPE first)", { rule: "ENVELOPE", http: 400, code: -32602, id: 3 }],
  ["unsupported MPV, _meta without protocolVersion → 400 -32022 (no envelope claimed)", { rule: "VERSION-HEADER", http: 400, code: -32022, id: 3 }],
  ["notification, unsupported MPV, envelope naming 2026-07-28 → 400 -32022 id null (header alone)", { rule: "VERSION-HEADER", http: 400, code: -32022, id: null }],
  ["notification, unsupported MPV, partial envelope → 400 -32022 id null (header alone)", { rule: "VERSION-HEADER", http: 400, code: -32022, id: null }],
  ["posted response, unsupported MPV → 400 -32022 id null (header alone)", { rule: "VERSION-HEADER", http: 400, code: -32022, id: null }],
  ["handshake tools/call with arguments [] and no key → 200 -32602 (before AUTH)", { rule: "TOOL-KNOWN", http: 200, code: -32602, id: 7 }],
  ["modern tools/call with arguments null and an invalid key → 200 -32602 (before AUTH)", { rule: "TOOL-KNOWN", http: 200, code: -32602, id: 7 }],
  ["tools/call with arguments \"x\" and a valid key → 200 -32602", { rule: "TOOL-KNOWN", http: 200, code: -32602, id: 7 }],
  ["handshake Authorization: Basic … → missing_api_key", { rule: "AUTH", http: 200, result: "tool-refusal", id: 8, refusal: "missing_api_key" }],
  ["modern Authorization: Basic … → 401 missing_api_key", { rule: "AUTH", http: 401, code: -32602, id: 8, refusal: "missing_api_key" }],
  ["modern Authorization: Bearer with an empty token → 401 missing_api_key", { rule: "AUTH", http: 401, code: -32602, id: 8, refusal: "missing_api_key" }],
  ["initialize without capabilities → 200 -32602", { rule: "INITIALIZE-PARAMS", http: 200, code: -32602, id: 0 }],
  ["initialize without clientInfo → 200 -32602", { rule: "INITIALIZE-PARAMS", http: 200, code: -32602, id: 0 }],
  ["initialize without params → 200 -32602", { rule: "INITIALIZE-PARAMS", http: 200, code: -32602, id: 0 }],
  ["initialize with capabilities null → 200 -32602", { rule: "INITIALIZE-PARAMS", http: 200, code: -32602, id: "i" }],
  // Issue 30 item 4: the fixed examples that make each finding of another server seed-independent.
  ["Mcp-Method tools/list on a tools/call with arguments true → 400 -32020 (before the arguments are read)", { rule: "MCP-METHOD", http: 400, code: -32020, id: 3 }],
  ["MPV 2026-07-28, _meta 2025-06-18 on a tools/call with arguments [] → 400 -32020 (before the arguments are read)", { rule: "VERSION-MATCH", http: 400, code: -32020, id: 2 }],
  ["modern notification whose _meta is an array → 202 (MCP: or an HTTP error status)", { rule: "results.notification", http: 202, body: "empty" }],
];

describe('oracle: test-matrix rows', () => {
  const byTitle = new Map(examples().map((e) => [e.title, e]));
  it('covers every example exactly once', () => {
    expect(TABLE.map(([t]) => t).sort()).toEqual([...byTitle.keys()].sort());
  });
  it.each(TABLE)('%s', (title, want) => {
    const e = byTitle.get(title)!;
    expect(summary(oracle.expect(e.build(g), ctx))).toEqual(want);
  });
});

describe('oracle: helpers', () => {
  it('parses Accept (a non-numeric q reads as 0) and lets the most specific matching range decide', () => {
    expect(parseAccept('Application/JSON; charset=utf-8;q=0.5, */*')).toEqual([
      { type: 'application', subtype: 'json', q: 0.5 },
      { type: '*', subtype: '*', q: 1 },
    ]);
    expect(parseAccept('a/b;q=abc, c/d;Q=, e/f;q=0.25, g/h;q=1.000').map((r) => r.q)).toEqual([0, 0, 0.25, 1]);
    expect(acceptsMedia(parseAccept('*/*'), 'text/event-stream')).toBe(true);
    expect(acceptsMedia(parseAccept('text/*;q=0, text/event-stream'), 'text/event-stream')).toBe(true);
    expect(acceptsMedia(parseAccept('text/event-stream;q=0, text/*'), 'text/event-stream')).toBe(false);
    expect(acceptsMedia(parseAccept('application/json;q=0, */*'), 'application/json')).toBe(false);
    expect(acceptsMedia(parseAccept('application/json;q=0, */*'), 'text/event-stream')).toBe(true);
    expect(acceptsMedia(parseAccept('application/json;q=abc, */*'), 'application/json')).toBe(false);
    expect(acceptsMedia(parseAccept(undefined), 'application/json')).toBe(false);
    expect(acceptsMedia(parseAccept('application/*'), 'text/event-stream')).toBe(false);
  });
  it('normalizes origins: case-insensitive, one trailing slash ignored', () => {
    expect(normalizeOrigin(' HTTP://LocalHost:80/ ')).toBe('http://localhost:80');
    expect(normalizeOrigin('http://localhost:80//')).toBe('http://localhost:80/');
    expect(normalizeOrigin('null')).toBe('null');
  });
  it('reads host names from Host values', () => {
    expect(hostName('[::1]:8080')).toBe('[::1]');
    expect(hostName('LocalHost:1')).toBe('localhost');
    expect(hostName('127.0.0.1')).toBe('127.0.0.1');
    expect(hostName('localhost:abc')).toBeUndefined();
    expect(hostName('[::1')).toBeUndefined();
  });
  it('decodes Mcp-Name values', () => {
    const b64 = Buffer.from('interlock_query').toString('base64');
    expect(decodeMcpName('  interlock_query \t')).toBe('interlock_query');
    expect(decodeMcpName(`=?base64?${b64}?=`)).toBe('interlock_query');
    expect(decodeMcpName(`  =?base64?${b64}?=  `)).toBe('interlock_query');
    expect(decodeMcpName('=?base64?SGVs!!!?=')).toBeUndefined();
    expect(decodeMcpName('=?base64?SGVsbA?=')).toBeUndefined();
    expect(decodeMcpName(`=?BASE64?${b64}?=`)).toBe(`=?BASE64?${b64}?=`);
  });
  it('validates tool arguments against the catalogue schemas (aliases use their successor’s)', () => {
    expect(oracle.argumentsValid('interlock_list_sources', undefined)).toBe(true);
    expect(oracle.argumentsValid('interlock_list_sources', { x: 1 })).toBe(false);
    expect(oracle.argumentsValid('interlock_query', { source_id: 'demo', sql: 'SELECT 1' })).toBe(true);
    expect(oracle.argumentsValid('agentgate_query', { source_id: 'Demo!' })).toBe(false);
    expect(oracle.argumentsValid('interlock_discover', { source_id: 'demo', query: 'x', limit: 51 })).toBe(false);
    expect(oracle.argumentsValid('interlock_discover', { source_id: 'demo', query: 'x', time_range: { from: 'yesterday' } })).toBe(false);
    expect(oracle.argumentsValid('no_such_tool', {})).toBe(false);
    expect(spec.tools).toHaveLength(12);
  });
  it.each(spec.tools.map((t) => t.name))('generates valid and broken arguments for %s', (name) => {
    fc.assert(fc.property(argumentsArb(g, name, 'valid'), (a) => oracle.argumentsValid(name, a.present ? a.value : undefined)), { numRuns: 100 });
    fc.assert(fc.property(argumentsArb(g, name, 'invalid'), (a) => !oracle.argumentsValid(name, a.value)), { numRuns: 100 });
  });
});

describe('oracle: order and settled points', () => {
  const expectOf = (o: Parameters<typeof wire>[1]) => oracle.expect(wire(g, o), ctx);
  it('takes the first failing check in spec order', () => {
    const x = expectOf({ method: 'PUT', headers: { Host: 'evil.example.com', 'Content-Type': 'text/plain', Accept: 'text/html' }, raw: '{' });
    expect(x.rule).toBe('HOST');
    expect(expectOf({ method: 'PUT', headers: { 'Content-Type': 'text/plain' }, raw: '{' }).rule).toBe('HTTP-METHOD');
    expect(expectOf({ headers: { 'Content-Type': 'text/plain', Accept: 'text/html' }, raw: '{' }).rule).toBe('CONTENT-TYPE');
    expect(expectOf({ headers: { Accept: 'text/html' }, raw: '{' }).rule).toBe('ACCEPT');
    expect(expectOf({ mpv: 'garbage', body: [] }).rule).toBe('NO-BATCH');
    expect(expectOf({ mpv: 'garbage', body: { jsonrpc: '2.0', id: null, method: 'ping' } }).rule).toBe('JSONRPC-SHAPE');
  });
  it('puts GET behind Host and Origin, with Allow: POST', () => {
    expect(expectOf({ method: 'GET', headers: { Origin: 'http://evil.example.com' } }).rule).toBe('ORIGIN');
    expect(expectOf({ method: 'DELETE' }).headers).toEqual({ allow: ['POST'] });
  });
  it('checks a complete envelope before an unsupported header, for requests', () => {
    const x = expectOf({ mpv: 'v999.0.0', body: { jsonrpc: '2.0', id: 3, method: 'tools/list', params: { _meta: envelope(g, '2026-07-28') } } });
    expect([x.rule, x.code, x.alternatives]).toEqual(['VERSION-MATCH', -32020, undefined]);
  });
  it('checks a partial envelope (protocolVersion present) before an unsupported header: ENVELOPE -32602 only', () => {
    const x = expectOf({ mpv: '2099-01-01', body: { jsonrpc: '2.0', id: 3, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2099-01-01' } } } });
    expect([x.rule, x.code, x.id, x.alternatives]).toEqual(['ENVELOPE', -32602, 3, undefined]);
    const wrongType = expectOf({ mpv: '2099-01-01', body: { jsonrpc: '2.0', id: 3, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': 20990101, 'io.modelcontextprotocol/clientCapabilities': {} } } } });
    expect([wrongType.rule, wrongType.alternatives]).toEqual(['ENVELOPE', undefined]);
  });
  it('reads a _meta without the protocolVersion key as no envelope: -32022 with data only', () => {
    for (const meta of [{}, { 'io.modelcontextprotocol/clientCapabilities': {} }, 'meta', ['2099-01-01']]) {
      const x = expectOf({ mpv: '2099-01-01', body: { jsonrpc: '2.0', id: 3, method: 'tools/list', params: { _meta: meta } } });
      expect([x.rule, x.code, x.id, x.alternatives]).toEqual(['VERSION-HEADER', -32022, 3, undefined]);
      expect(x.errorData).toEqual({ supported: ['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26'], requested: '2099-01-01' });
    }
  });
  it('checks notifications and responses with an unsupported header against the header alone, id null', () => {
    const n = expectOf({ mpv: '2099-01-01', body: { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1, _meta: envelope(g) } } });
    expect([n.rule, n.http, n.code, n.id, n.alternatives]).toEqual(['VERSION-HEADER', 400, -32022, null, undefined]);
    const partial = expectOf({ mpv: '2099-01-01', body: { jsonrpc: '2.0', method: 'notifications/initialized', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': 7 } } } });
    expect([partial.rule, partial.id, partial.alternatives]).toEqual(['VERSION-HEADER', null, undefined]);
    const r = expectOf({ mpv: 'garbage', body: { jsonrpc: '2.0', id: 4, error: { code: -32601, message: 'm' } } });
    expect([r.rule, r.http, r.code, r.id, r.errorData?.requested]).toEqual(['VERSION-HEADER', 400, -32022, null, 'garbage']);
  });
  it('answers initialize with a header equal to params.protocolVersion next to a matching complete envelope -32022', () => {
    const x = expectOf({ mpv: 'v999.0.0', body: { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: 'v999.0.0', capabilities: {}, clientInfo: { name: 'c', version: '1' }, _meta: envelope(g, 'v999.0.0') } } });
    expect([x.rule, x.code]).toEqual(['VERSION-HEADER', -32022]);
    expect(x.alternatives).toBeUndefined();
    // …but not when the envelope check or the version match fails first.
    const partial = expectOf({ mpv: 'v999.0.0', body: { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: 'v999.0.0', capabilities: {}, clientInfo: { name: 'c', version: '1' }, _meta: { 'io.modelcontextprotocol/protocolVersion': 'v999.0.0' } } } });
    expect([partial.rule, partial.alternatives]).toEqual(['ENVELOPE', undefined]);
    const mismatch = expectOf({ mpv: 'v999.0.0', body: { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: 'v999.0.0', capabilities: {}, clientInfo: { name: 'c', version: '1' }, _meta: envelope(g) } } });
    expect([mismatch.rule, mismatch.alternatives]).toEqual(['VERSION-MATCH', undefined]);
    // Without an envelope the exception applies alone.
    const plain = expectOf({ mpv: 'v999.0.0', body: { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: 'v999.0.0', capabilities: {}, clientInfo: { name: 'c', version: '1' } } } });
    expect(summary(plain)).toEqual({ rule: 'results.plain', http: 200, result: 'initialize', id: 0, protocolVersion: '2025-11-25' });
  });
  it('serves a modern notification without envelope or Mcp-Method', () => {
    expect(summary(expectOf({ mpv: '2026-07-28', mirror: false, body: { jsonrpc: '2.0', method: 'foo/bar' } }))).toEqual({ rule: 'results.notification', http: 202, body: 'empty' });
  });
  it('treats a notification-kind method sent with an id as an unknown request method', () => {
    expect(summary(expectOf({ mpv: '2025-06-18', body: { jsonrpc: '2.0', id: 1, method: 'notifications/initialized' } }))).toEqual({ rule: 'METHOD-KNOWN-HANDSHAKE', http: 200, code: -32601, id: 1 });
  });
  it('reads tools/call without a name as naming no catalogue tool', () => {
    expect(summary(expectOf({ body: { jsonrpc: '2.0', id: 1, method: 'tools/call' } }))).toEqual({ rule: 'TOOL-KNOWN', http: 200, code: -32602, id: 1 });
  });
  it('refuses a tool that declares a client capability the modern request lacks (CLIENT-CAPABILITY, before AUTH)', () => {
    const declaring = { ...spec, tools: spec.tools.map((t) => (t.name === 'interlock_discover' ? { ...t, requiredClientCapabilities: { elicitation: {} } } : t)) };
    const o = createOracle(declaring);
    const call = (caps: Record<string, unknown>, mpv = '2026-07-28') =>
      o.expect(
        wire(g, { mpv, body: { jsonrpc: '2.0', id: 4, method: 'tools/call', params: { name: 'interlock_discover', arguments: {}, _meta: { ...envelope(g, mpv), 'io.modelcontextprotocol/clientCapabilities': caps } } } }),
        ctx,
      );
    const refused = call({ sampling: {} });
    expect([refused.rule, refused.http, refused.code, refused.id, refused.errorData]).toEqual(['CLIENT-CAPABILITY', 400, -32021, 4, { requiredCapabilities: { elicitation: {} } }]);
    expect(call({ elicitation: {} }).rule).toBe('AUTH');
    expect(call({}, '2025-11-25').rule).toBe('AUTH');
  });
  it('gives exactly one answer at each former open point of the spec', () => {
    const one = (x: Expectation) => {
      expect(x.alternatives).toBeUndefined();
      return summary(x);
    };
    const list = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
    const served = { rule: 'results.complete', http: 200, result: 'tools', id: 1 };
    // HOST: any port, names case-insensitive.
    expect(one(expectOf({ headers: { Host: 'LocalHost:9' }, body: list }))).toEqual(served);
    expect(one(expectOf({ headers: { Host: '[::1]' }, body: list }))).toEqual(served);
    // ORIGIN: case-insensitive, one trailing slash ignored, 'null' foreign.
    expect(one(expectOf({ headers: { Origin: `HTTP://${url.host}/` }, body: list }))).toEqual(served);
    expect(one(expectOf({ headers: { Host: 'localhost:8080', Origin: 'http://LOCALHOST:8080' }, body: list }))).toEqual(served);
    expect(one(expectOf({ headers: { Origin: `http://${url.host}//` }, body: list })).rule).toBe('ORIGIN');
    expect(one(expectOf({ headers: { Origin: `http://${url.host}/mcp` }, body: list })).rule).toBe('ORIGIN');
    expect(one(expectOf({ headers: { Origin: 'null' }, body: list })).rule).toBe('ORIGIN');
    // ACCEPT: the most specific range decides; q=0 or a non-numeric q excludes.
    expect(one(expectOf({ headers: { Accept: 'application/json;q=0, */*' }, body: list })).rule).toBe('ACCEPT');
    expect(one(expectOf({ headers: { Accept: 'application/json;q=abc, text/event-stream' }, body: list })).rule).toBe('ACCEPT');
    expect(one(expectOf({ headers: { Accept: '*/*;q=0, application/json, text/event-stream' }, body: list }))).toEqual(served);
    // JSON: a leading byte order mark is ignored.
    expect(one(expectOf({ raw: '\ufeff' + JSON.stringify(list) }))).toEqual(served);
    expect(one(expectOf({ raw: '\ufeff{' }))).toEqual({ rule: 'JSON', http: 400, code: -32700, id: null });
    // JSONRPC-SHAPE: ids beyond 2^53-1 are invalid (id null); an empty method is -32600 with the id echoed.
    expect(one(expectOf({ mpv: '2025-06-18', body: { jsonrpc: '2.0', id: 2 ** 53, method: 'ping' } }))).toEqual({ rule: 'JSONRPC-SHAPE', http: 400, code: -32600, id: null });
    expect(one(expectOf({ mpv: '2025-06-18', body: { jsonrpc: '2.0', id: 2 ** 53 - 1, method: 'ping' } }))).toEqual({ rule: 'results.plain', http: 200, result: 'empty', id: 2 ** 53 - 1 });
    expect(one(expectOf({ mpv: '2025-06-18', body: { jsonrpc: '2.0', id: 1, method: '' } }))).toEqual({ rule: 'JSONRPC-SHAPE', http: 400, code: -32600, id: 1 });
    expect(one(expectOf({ mpv: '2025-06-18', body: { jsonrpc: '2.0', id: 1.5, method: '' } }))).toEqual({ rule: 'JSONRPC-SHAPE', http: 400, code: -32600, id: null });
    // AUTH: another scheme or an empty token is missing_api_key; a token that is no key is invalid_api_key.
    const call = (auth: string) => one(expectOf({ mpv: '2025-11-25', headers: { Authorization: auth }, body: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_list_sources' } } })).refusal;
    expect([call('Basic eDp5'), call('Bearer'), call('Bearer   '), call('Token abc'), call('Bearer nope')]).toEqual(['missing_api_key', 'missing_api_key', 'missing_api_key', 'missing_api_key', 'invalid_api_key']);
    // INITIALIZE-PARAMS: -32602 in-band.
    expect(one(expectOf({ body: { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', clientInfo: { name: 'c', version: '1' } } } }))).toEqual({ rule: 'INITIALIZE-PARAMS', http: 200, code: -32602, id: 0 });
    expect(one(expectOf({ body: { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: 20250618, capabilities: {}, clientInfo: { name: 'c', version: '1' } } } })).rule).toBe('INITIALIZE-PARAMS');
    // TOOL-KNOWN: non-object arguments are -32602 in-band, before AUTH (and before CLIENT-CAPABILITY).
    expect(one(expectOf({ mpv: '2025-11-25', body: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_query', arguments: [] } } }))).toEqual({ rule: 'TOOL-KNOWN', http: 200, code: -32602, id: 1 });
    const declaring = createOracle({ ...spec, tools: spec.tools.map((t) => (t.name === 'interlock_discover' ? { ...t, requiredClientCapabilities: { elicitation: {} } } : t)) });
    const beforeCaps = declaring.expect(wire(g, { mpv: '2026-07-28', body: { jsonrpc: '2.0', id: 4, method: 'tools/call', params: { name: 'interlock_discover', arguments: null, _meta: envelope(g) } } }), ctx);
    expect([beforeCaps.rule, beforeCaps.http, beforeCaps.code]).toEqual(['TOOL-KNOWN', 200, -32602]);
  });
  it('lists alternatives for no generated request (the spec settles every point)', () => {
    fc.assert(
      fc.property(draftArb(g, { noise: 2 }), (d) => {
        const req = render(g, d);
        const x = oracle.expect(req, ctx);
        expect(x.alternatives).toBeUndefined();
      }),
      { numRuns: 1000 },
    );
  });
  it('reads the Bearer scheme case-insensitively', () => {
    const call = (auth: string) => expectOf({ mpv: '2025-11-25', headers: { Authorization: auth }, body: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_list_sources' } } }).result?.kind;
    expect(call(`bearer ${apiKey}`)).toBe('tool-success');
    expect(call(`Bearer ${apiKey}`)).toBe('tool-success');
    expect(call(`Bearer ${apiKey}x`)).toBe('tool-refusal');
  });
  it('does not depend on header-name casing', () => {
    fc.assert(
      fc.property(draftArb(g), (d) => {
        const a = oracle.expect(render(g, d), ctx);
        const b = oracle.expect(render(g, { ...d, headerCase: 'canonical' }), ctx);
        expect(summary(a)).toEqual(summary(b));
      }),
      { numRuns: 300 },
    );
  });
  it('is total: every generated request gets a status from the spec', () => {
    const statuses = new Set([0, 200, 202, 400, 401, 403, 404, 405, 406, 415]);
    fc.assert(
      fc.property(draftArb(g, { noise: 2 }), (d) => {
        const x = oracle.expect(render(g, d), ctx);
        expect(statuses.has(x.http)).toBe(true);
        expect(x.why.length).toBeGreaterThan(0);
      }),
      { numRuns: 500 },
    );
  });
});

describe('verdict: broken answers are noticed', () => {
  const json = (status: number, body: unknown, headers: Record<string, string> = {}): WireResponse => ({
    status,
    headers: { 'content-type': 'application/json; charset=utf-8', ...headers },
    body: JSON.stringify(body),
  });
  const info = { 'io.modelcontextprotocol/serverInfo': { name: 's', version: '1' } };
  const exp = (o: Parameters<typeof wire>[1]) => oracle.expect(wire(g, o), ctx);
  const rules = (e: Expectation, r: WireResponse) => judge(spec, e, r).violations.map((v) => v.rule);
  const ping = exp({ mpv: '2025-06-18', body: { jsonrpc: '2.0', id: 2, method: 'ping' } });
  const list = exp({ mpv: '2026-07-28', body: { jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: envelope(g) } } });
  const tools = spec.tools.map((t) => ({ name: t.name, inputSchema: { type: 'object' } }));
  const goodList = { resultType: 'complete', tools, ttlMs: 5, cacheScope: 'public', _meta: info };

  it('passes correct answers', () => {
    expect(judge(spec, ping, json(200, { jsonrpc: '2.0', id: 2, result: {} })).passed).toBe(true);
    expect(judge(spec, list, json(200, { jsonrpc: '2.0', id: 1, result: goodList })).passed).toBe(true);
  });
  it('flags ping with resultType, a string id for an integer one, and nextCursor: null', () => {
    expect(rules(ping, json(200, { jsonrpc: '2.0', id: 2, result: { resultType: 'complete' } }))).toEqual(['results.plain']);
    expect(rules(ping, json(200, { jsonrpc: '2.0', id: '2', result: {} }))).toEqual(['results.plain']);
    expect(rules(list, json(200, { jsonrpc: '2.0', id: 1, result: { ...goodList, nextCursor: null } }))).toEqual(['results.noNextCursorNull']);
    expect(rules(list, json(200, { jsonrpc: '2.0', id: 1, result: { ...goodList, ttlMs: undefined } }))).toEqual(['results.cacheable']);
    expect(rules(list, json(200, { jsonrpc: '2.0', id: 1, result: { ...goodList, tools: tools.slice(1) } }))).toEqual(['tools']);
  });
  it('flags a 202 with a body, a session id, a missing Allow and a missing WWW-Authenticate', () => {
    const note = exp({ body: { jsonrpc: '2.0', method: 'notifications/initialized' } });
    expect(rules(note, { status: 202, headers: {}, body: '{}' })).toEqual(['results.notification']);
    expect(rules(note, { status: 202, headers: { 'mcp-session-id': 'x' }, body: '' })).toEqual(['results.noSession']);
    const get = exp({ method: 'GET' });
    expect(rules(get, json(405, { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'no' } }))).toEqual(['HTTP-METHOD']);
    const auth = exp({ mpv: '2026-07-28', body: { jsonrpc: '2.0', id: 8, method: 'tools/call', params: { name: 'interlock_list_sources', _meta: envelope(g) } } });
    const refusal = { jsonrpc: '2.0', id: 8, error: { code: -32602, message: 'no', data: { status: 'unauthorized', code: 'missing_api_key', message: 'm' } } };
    expect(judge(spec, auth, json(401, refusal, { 'www-authenticate': 'Bearer realm="mcp"' })).passed).toBe(true);
    expect(rules(auth, json(401, refusal))).toEqual(['AUTH']);
  });
  it('flags -32022 without the full supported list', () => {
    const x = exp({ mpv: 'garbage', body: { jsonrpc: '2.0', id: 5, method: 'tools/list' } });
    const ok = { jsonrpc: '2.0', id: 5, error: { code: -32022, message: 'm', data: { supported: [...spec.protocol.versions.supported], requested: 'garbage' } } };
    expect(judge(spec, x, json(400, ok)).passed).toBe(true);
    expect(rules(x, json(400, { ...ok, error: { ...ok.error, data: { supported: ['2026-07-28'], requested: 'garbage' } } }))).toEqual(['VERSION-HEADER']);
  });
  it('reads tools/call event streams and flags event ids', () => {
    const call = exp({ mpv: '2026-07-28', auth: 'valid', body: { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'interlock_list_sources', _meta: envelope(g) } } });
    const msg = JSON.stringify({ jsonrpc: '2.0', id: 3, result: { resultType: 'complete', content: [{ type: 'text', text: '{}' }], _meta: info } });
    const sse = (body: string): WireResponse => ({ status: 200, headers: { 'content-type': 'text/event-stream', 'x-accel-buffering': 'no' }, body });
    expect(parseSse(`event: message\ndata: ${msg}\n\n`)).toEqual([{ event: 'message', data: msg, id: undefined }]);
    expect(judge(spec, call, sse(`event: message\ndata: ${msg}\n\n`)).passed).toBe(true);
    expect(rules(call, sse(`id: 1\nevent: message\ndata: ${msg}\n\n`))).toEqual(['results.toolCallStream']);
    expect(rules(ping, sse(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: 2, result: {} })}\n\n`))).toEqual(['results.toolCallStream']);
  });
  it('answers an initialize with an unsupported header and a modern envelope -32022 (the exception does not apply)', () => {
    const envelopeV999 = envelope(g, 'v999.0.0');
    const settled = exp({ mpv: 'v999.0.0', body: { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: 'v999.0.0', capabilities: {}, clientInfo: { name: 'c', version: '1' }, _meta: envelopeV999 } } });
    const unsupported = json(400, { jsonrpc: '2.0', id: 0, error: { code: -32022, message: 'm', data: { supported: [...spec.protocol.versions.supported], requested: 'v999.0.0' } } });
    const initialized = json(200, { jsonrpc: '2.0', id: 0, result: { protocolVersion: '2025-11-25', capabilities: spec.protocol.capabilities, serverInfo: { name: 's', version: '1' } } });
    expect([judge(spec, settled, unsupported).passed, judge(spec, settled, initialized).passed]).toEqual([true, false]);
    // _meta {} claims no envelope: ENVELOPE -32602 (accepted before the spec settled it) now fails.
    const closed = exp({ mpv: '2099-01-01', body: { jsonrpc: '2.0', id: 3, method: 'tools/list', params: { _meta: {} } } });
    const envelopeError = json(400, { jsonrpc: '2.0', id: 3, error: { code: -32602, message: 'm' } });
    // wrong code, and no data.supported / data.requested
    expect(rules(closed, envelopeError)).toEqual(['VERSION-HEADER', 'VERSION-HEADER', 'VERSION-HEADER']);
  });
  it('fails the answers the settled rules no longer accept', () => {
    const list = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
    const parseError = json(400, { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } });
    expect(rules(exp({ raw: '\ufeff' + JSON.stringify(list) }), parseError)).toContain('results.complete');
    const unknownMethod = json(200, { jsonrpc: '2.0', id: 1, error: { code: -32601, message: 'Method not found' } });
    expect(rules(exp({ mpv: '2025-06-18', body: { jsonrpc: '2.0', id: 1, method: '' } }), unknownMethod)).toEqual(['JSONRPC-SHAPE', 'JSONRPC-SHAPE']);
    const echoedUnsafe = json(200, { jsonrpc: '2.0', id: 2 ** 53, result: {} });
    expect(rules(exp({ mpv: '2025-06-18', body: { jsonrpc: '2.0', id: 2 ** 53, method: 'ping' } }), echoedUnsafe)).toContain('JSONRPC-SHAPE');
    const refusedSafe = json(400, { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Invalid request' } });
    expect(rules(exp({ mpv: '2025-06-18', body: { jsonrpc: '2.0', id: 2 ** 53 - 1, method: 'ping' } }), refusedSafe)).toContain('results.plain');
    const forbidden = json(403, { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Forbidden' } });
    expect(rules(exp({ headers: { Origin: `HTTP://${url.host}/` }, body: list }), forbidden)).toContain('results.complete');
    const echoedResponseId = json(400, { jsonrpc: '2.0', id: 4, error: { code: -32022, message: 'm', data: { supported: [...spec.protocol.versions.supported], requested: 'garbage' } } });
    expect(rules(exp({ mpv: 'garbage', body: { jsonrpc: '2.0', id: 4, result: {} } }), echoedResponseId)).toEqual(['VERSION-HEADER']);
  });
});
