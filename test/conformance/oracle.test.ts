/**
 * The oracle against the literal rows of the test matrix (mcp-protocol.md §7) as spec/ settles them,
 * plus the helpers it rests on (Accept, Host, Mcp-Name decoding), the open points it must leave open,
 * and the verdict's ability to notice broken answers. Pure: no server.
 */
import fc from 'fast-check';
import { argumentsArb, draftArb, render, type GenContext } from '../../conformance/arbitraries';
import { examples, envelope, wire } from '../../conformance/examples';
import type { WireResponse } from '../../conformance/http';
import { acceptVerdicts, createOracle, decodeMcpName, hostName, parseAccept, type Expectation } from '../../conformance/oracle';
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
  it('parses Accept and reads q=0 three ways', () => {
    expect(parseAccept('Application/JSON; charset=utf-8;q=0.5, */*')).toEqual([
      { type: 'application', subtype: 'json', q: 0.5 },
      { type: '*', subtype: '*', q: 1 },
    ]);
    expect(acceptVerdicts(parseAccept('*/*'), 'text/event-stream')).toEqual({ rfc: true, any: true, strict: true });
    expect(acceptVerdicts(parseAccept('text/*;q=0, text/event-stream'), 'text/event-stream')).toEqual({ rfc: true, any: true, strict: false });
    expect(acceptVerdicts(parseAccept('application/json;q=0, */*'), 'application/json')).toEqual({ rfc: false, any: true, strict: false });
    expect(acceptVerdicts(parseAccept(undefined), 'application/json')).toEqual({ rfc: false, any: false, strict: false });
    expect(acceptVerdicts(parseAccept('application/*'), 'text/event-stream').rfc).toBe(false);
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
    expect(spec.tools).toHaveLength(11);
  });
  it.each(spec.tools.map((t) => t.name))('generates valid and broken arguments for %s', (name) => {
    fc.assert(fc.property(argumentsArb(g, name, 'valid'), (a) => oracle.argumentsValid(name, a.present ? a.value : undefined)), { numRuns: 100 });
    fc.assert(fc.property(argumentsArb(g, name, 'invalid'), (a) => !oracle.argumentsValid(name, a.value)), { numRuns: 100 });
  });
});

describe('oracle: order and open points', () => {
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
  it('accepts both readings when q=0 readings disagree', () => {
    const x = expectOf({ headers: { Accept: 'application/json;q=0, */*' }, body: { jsonrpc: '2.0', id: 1, method: 'tools/list' } });
    expect(x.rule).toBe('ACCEPT');
    expect(x.alternatives?.map((a) => a.rule)).toEqual(['results.complete']);
  });
  it('checks a complete envelope before an unsupported header, for requests', () => {
    const x = expectOf({ mpv: 'v999.0.0', body: { jsonrpc: '2.0', id: 3, method: 'tools/list', params: { _meta: envelope(g, '2026-07-28') } } });
    expect([x.rule, x.code, x.alternatives]).toEqual(['VERSION-MATCH', -32020, undefined]);
  });
  it('leaves a partial envelope next to an unsupported header open: -32022, or ENVELOPE -32602', () => {
    const x = expectOf({ mpv: '2099-01-01', body: { jsonrpc: '2.0', id: 3, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2099-01-01' } } } });
    expect([x.rule, x.code]).toEqual(['VERSION-HEADER', -32022]);
    expect(x.errorData).toEqual({ supported: ['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26'], requested: '2099-01-01' });
    expect(x.alternatives?.map((a) => [a.rule, a.code])).toEqual([['ENVELOPE', -32602]]);
  });
  it('answers a notification with an unsupported header -32022 with id null (its envelope check is open)', () => {
    const x = expectOf({ mpv: '2099-01-01', body: { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1, _meta: envelope(g) } } });
    expect([x.rule, x.http, x.code, x.id]).toEqual(['VERSION-HEADER', 400, -32022, null]);
    expect(x.alternatives?.map((a) => [a.rule, a.code, a.id])).toEqual([['VERSION-MATCH', -32020, null]]);
  });
  it('leaves initialize with a header equal to params.protocolVersion and an envelope open', () => {
    const x = expectOf({ mpv: 'v999.0.0', body: { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: 'v999.0.0', capabilities: {}, clientInfo: { name: 'c', version: '1' }, _meta: envelope(g, 'v999.0.0') } } });
    expect([x.rule, x.code]).toEqual(['VERSION-HEADER', -32022]);
    expect(x.alternatives?.map((a) => [a.rule, a.result?.kind])).toEqual([['results.plain', 'initialize']]);
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
  it('lists the other permitted outcome for each open point of the spec', () => {
    const alts = (x: Expectation) => [x.rule, ...(x.alternatives ?? []).map((a) => a.rule)];
    const list = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
    // A leading byte order mark: parse error, or ignored (RFC 8259 §8.1).
    expect(alts(expectOf({ raw: '\ufeff' + JSON.stringify(list) }))).toEqual(['JSON', 'results.complete']);
    // An integer id beyond 2^53: echoed, or refused like an invalid id.
    expect(alts(expectOf({ mpv: '2025-06-18', body: { jsonrpc: '2.0', id: 2 ** 53, method: 'ping' } }))).toEqual(['results.plain', 'JSONRPC-SHAPE']);
    // An empty method name: unknown method, or no method.
    expect(alts(expectOf({ mpv: '2025-06-18', body: { jsonrpc: '2.0', id: 1, method: '' } }))).toEqual(['METHOD-KNOWN-HANDSHAKE', 'JSONRPC-SHAPE']);
    // An own origin in upper case with a trailing slash: refused, or read as the own origin.
    expect(alts(expectOf({ headers: { Origin: `HTTP://${url.host}/` }, body: list }))).toEqual(['ORIGIN', 'results.complete']);
    // A malformed q value.
    expect(alts(expectOf({ headers: { Accept: 'application/json;q=abc, text/event-stream' }, body: list }))).toEqual(['results.complete', 'ACCEPT']);
    // Authorization with another scheme: missing_api_key, or invalid_api_key.
    const basic = expectOf({ mpv: '2025-11-25', headers: { Authorization: 'Basic eDp5' }, body: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'interlock_list_sources' } } });
    expect([basic.result, basic.alternatives?.map((a) => a.result)]).toEqual([
      { kind: 'tool-refusal', status: 'unauthorized', code: 'missing_api_key' },
      [{ kind: 'tool-refusal', status: 'unauthorized', code: 'invalid_api_key' }],
    ]);
    // initialize without capabilities: the spec names no outcome.
    expect(expectOf({ body: { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', clientInfo: { name: 'c', version: '1' } } } }).body).toBe('unspecified');
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
  it('accepts an alternative outcome only where the oracle lists one', () => {
    const open = exp({ mpv: '2099-01-01', body: { jsonrpc: '2.0', id: 3, method: 'tools/list', params: { _meta: {} } } });
    const envelopeError = json(400, { jsonrpc: '2.0', id: 3, error: { code: -32602, message: 'm' } });
    expect(judge(spec, open, envelopeError).passed).toBe(true);
    const closed = exp({ mpv: '2099-01-01', body: { jsonrpc: '2.0', id: 3, method: 'tools/list' } });
    // wrong code, and no data.supported / data.requested
    expect(rules(closed, envelopeError)).toEqual(['VERSION-HEADER', 'VERSION-HEADER', 'VERSION-HEADER']);
  });
});
