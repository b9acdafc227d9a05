/**
 * Deterministic example requests: the rows of the test matrix (docs: mcp-protocol.md §7) as the contract
 * settles them, named by rule id and row number. The runner judges each with the oracle, exactly like the
 * generated requests; test/conformance/oracle.test.ts pins the oracle's answer for every one.
 */
import type { GenContext } from './arbitraries';
import type { WireRequest } from './http';

/** One fixed request of the suite. */
export interface ExampleDef {
  rule: string;
  /** Test-matrix row (mcp-protocol.md §7), when the example is one. */
  row?: string;
  title: string;
  needsApiKey?: boolean;
  build(g: GenContext): WireRequest;
}

/** Options of `wire`: headers to add or (with null) remove, the MCP-Protocol-Version, the body. */
export interface WireOptions {
  mpv?: string;
  /** Header overrides; null removes a default header. */
  headers?: Record<string, string | null>;
  /** Mcp-Method/Mcp-Name are derived from the body in the modern dialect unless overridden here. */
  mirror?: boolean;
  body?: unknown;
  /** A raw body text instead of JSON. */
  raw?: string;
  method?: string;
  auth?: 'valid' | 'invalid';
}

/** Builds a request with good transport headers (Content-Type, Accept) and the modern mirrors when MPV is modern. */
export function wire(g: GenContext, o: WireOptions = {}): WireRequest {
  const P = g.spec.protocol;
  const h = new Map<string, string>([
    ['Content-Type', 'application/json'],
    ['Accept', 'application/json, text/event-stream'],
  ]);
  if (o.mpv !== undefined) h.set(P.headers.protocolVersion!, o.mpv);
  const body = o.body as { method?: unknown; params?: { name?: unknown } } | undefined;
  const mirror = o.mirror ?? (o.mpv !== undefined && P.versions.modern.includes(o.mpv));
  if (mirror && body && typeof body === 'object' && !Array.isArray(body) && typeof body.method === 'string') {
    h.set(P.headers.method!, body.method);
    if (body.method === 'tools/call' && typeof body.params?.name === 'string') h.set(P.headers.name!, body.params.name);
  }
  if (o.auth === 'valid' && g.apiKey) h.set(P.headers.authorization!, `Bearer ${g.apiKey}`);
  if (o.auth === 'invalid') h.set(P.headers.authorization!, 'Bearer ilk_conformance_not_a_valid_key_000000000000');
  const headers: Array<[string, string]> = [...h.entries()];
  for (const [k, v] of Object.entries(o.headers ?? {})) {
    const i = headers.findIndex(([n]) => n.toLowerCase() === k.toLowerCase());
    if (i >= 0) headers.splice(i, 1);
    if (v !== null) headers.push([k, v]);
  }
  const method = o.method ?? 'POST';
  const text = o.raw !== undefined ? o.raw : o.body === undefined ? undefined : JSON.stringify(o.body);
  return { method, headers: method === 'GET' || method === 'DELETE' ? headers.filter(([k]) => k.toLowerCase() !== 'content-type') : headers, body: method === 'GET' || method === 'DELETE' ? undefined : text };
}

/** The modern `_meta` envelope naming `version` (clientInfo optional). */
export function envelope(g: GenContext, version = g.spec.protocol.versions.modern[0]!, clientInfo = true): Record<string, unknown> {
  const M = g.spec.protocol.meta;
  return { [M.protocolVersion]: version, [M.clientCapabilities]: {}, ...(clientInfo ? { [M.clientInfo]: { name: 'interlock-conformance', version: '1.0.0' } } : {}) };
}

const req = (id: unknown, method: string, params?: Record<string, unknown>) => ({ jsonrpc: '2.0', id, method, ...(params ? { params } : {}) });
const note = (method: string, params?: Record<string, unknown>) => ({ jsonrpc: '2.0', method, ...(params ? { params } : {}) });
const init = (pv: string) => ({ protocolVersion: pv, capabilities: {}, clientInfo: { name: 'interlock-conformance', version: '1.0.0' } });

/** Every example, grouped by rule. */
export function examples(): ExampleDef[] {
  const M = '2026-07-28';
  const modern = (g: GenContext, id: unknown, method: string, params: Record<string, unknown> = {}, o: WireOptions = {}) =>
    wire(g, { mpv: g.spec.protocol.versions.modern[0], body: req(id, method, { ...params, _meta: envelope(g) }), ...o });
  const port = (g: GenContext) => g.url.port || (g.url.protocol === 'https:' ? '443' : '80');
  // The tool a header or tools/call example calls: InterLock's interlock_list_sources, or, when the suite
  // tests another server's own catalogue, its probe tool (the tool map's list role) or its first tool, so
  // the example reaches that server too (issue 30 item 4: every finding reached by a fixed example).
  const tool = (g: GenContext) => g.spec.probeTool ?? g.spec.tools[0]?.name ?? 'interlock_list_sources';
  const call = (g: GenContext, extra: Record<string, unknown> = {}) => ({ name: tool(g), arguments: {}, ...extra });
  return [
    { rule: 'HOST', row: '#2', title: 'Host evil.example.com → 403', build: (g) => wire(g, { headers: { Host: 'evil.example.com' }, body: req(1, 'tools/list') }) },
    { rule: 'HOST', title: 'Host localhost:<port> is a loopback name → served', build: (g) => wire(g, { headers: { Host: `localhost:${port(g)}` }, body: req(1, 'tools/list') }) },
    { rule: 'HOST', title: 'Host LOCALHOST:1 (upper case, another port) → served', build: (g) => wire(g, { headers: { Host: 'LOCALHOST:1' }, body: req(1, 'tools/list') }) },
    // RFC 9110 §4.2.3 / RFC 3986 §6.2.2.1: host names are case-insensitive, so this is the URL's own Host
    // (issue 30 item 4: refusing it is a HOST finding in every profile, not a credited refusal).
    { rule: 'HOST', title: 'Host = the URL’s own host and port in upper case → served', build: (g) => wire(g, { headers: { Host: g.url.host.toUpperCase() }, body: req(1, 'tools/list') }) },
    { rule: 'HOST', title: 'Host EVIL.EXAMPLE.COM → 403', build: (g) => wire(g, { headers: { Host: 'EVIL.EXAMPLE.COM' }, body: req(1, 'tools/list') }) },
    { rule: 'ORIGIN', row: '#1', title: 'Origin http://evil.example.com → 403', build: (g) => wire(g, { headers: { Origin: 'http://evil.example.com' }, body: req(1, 'tools/list') }) },
    { rule: 'ORIGIN', row: '#3', title: 'no Origin → served', build: (g) => wire(g, { body: req(1, 'tools/list') }) },
    { rule: 'ORIGIN', title: 'Origin equal to the request origin → served', build: (g) => wire(g, { headers: { Origin: `${g.url.protocol}//${g.url.host}` }, body: req(1, 'tools/list') }) },
    { rule: 'ORIGIN', title: 'Origin = own origin in upper case with one trailing slash → served', build: (g) => wire(g, { headers: { Origin: `${g.url.protocol}//${g.url.host}/`.toUpperCase() }, body: req(1, 'tools/list') }) },
    { rule: 'ORIGIN', title: 'Origin http://LOCALHOST:<port> with Host localhost:<port> → served', build: (g) => wire(g, { headers: { Host: `localhost:${port(g)}`, Origin: `${g.url.protocol}//LOCALHOST:${port(g)}` }, body: req(1, 'tools/list') }) },
    { rule: 'ORIGIN', title: 'Origin = own origin with two trailing slashes → 403', build: (g) => wire(g, { headers: { Origin: `${g.url.protocol}//${g.url.host}//` }, body: req(1, 'tools/list') }) },
    { rule: 'ORIGIN', title: 'Origin null → 403', build: (g) => wire(g, { headers: { Origin: 'null' }, body: req(1, 'tools/list') }) },
    { rule: 'HTTP-METHOD', row: '#4', title: 'GET → 405 with Allow: POST', build: (g) => wire(g, { method: 'GET', headers: { Accept: 'text/event-stream' } }) },
    { rule: 'HTTP-METHOD', row: '#5', title: 'GET with MCP-Protocol-Version 2026-07-28 → 405', build: (g) => wire(g, { method: 'GET', mpv: M }) },
    { rule: 'HTTP-METHOD', row: '#6', title: 'DELETE → 405 with Allow: POST', build: (g) => wire(g, { method: 'DELETE' }) },
    { rule: 'CONTENT-TYPE', row: '#7', title: 'Content-Type text/plain → 415', build: (g) => wire(g, { headers: { 'Content-Type': 'text/plain' }, body: req(1, 'tools/list') }) },
    { rule: 'CONTENT-TYPE', title: 'Content-Type Application/JSON; charset=utf-8 → served', build: (g) => wire(g, { headers: { 'Content-Type': 'Application/JSON; charset=utf-8' }, body: req(1, 'tools/list') }) },
    { rule: 'ACCEPT', row: '#8', title: 'Accept application/json only → 406', build: (g) => wire(g, { headers: { Accept: 'application/json' }, body: req(1, 'tools/list') }) },
    { rule: 'ACCEPT', title: 'Accept */* → served', build: (g) => wire(g, { headers: { Accept: '*/*' }, body: req(1, 'tools/list') }) },
    { rule: 'ACCEPT', title: 'Accept application/json, text/event-stream;q=0 → 406', build: (g) => wire(g, { headers: { Accept: 'application/json, text/event-stream;q=0' }, body: req(1, 'tools/list') }) },
    { rule: 'ACCEPT', title: 'Accept application/json;q=0, */* → 406 (the most specific range decides)', build: (g) => wire(g, { headers: { Accept: 'application/json;q=0, */*' }, body: req(1, 'tools/list') }) },
    { rule: 'ACCEPT', title: 'Accept text/*;q=0, text/event-stream, application/json → served (the exact range decides)', build: (g) => wire(g, { headers: { Accept: 'text/*;q=0, text/event-stream, application/json' }, body: req(1, 'tools/list') }) },
    { rule: 'ACCEPT', title: 'Accept application/json;q=abc, text/event-stream → 406 (a non-numeric q excludes)', build: (g) => wire(g, { headers: { Accept: 'application/json;q=abc, text/event-stream' }, body: req(1, 'tools/list') }) },
    { rule: 'JSON', row: '#9', title: 'body is not JSON → 400 -32700 id null', build: (g) => wire(g, { raw: '{"jsonrpc":"2.0","id":1,' }) },
    { rule: 'JSON', title: 'request behind a UTF-8 byte order mark → the mark is ignored, served', build: (g) => wire(g, { mpv: '2025-06-18', raw: '\ufeff' + JSON.stringify(req(1, 'ping')) }) },
    { rule: 'JSON', title: 'notification behind a UTF-8 byte order mark → 202', build: (g) => wire(g, { raw: '\ufeff' + JSON.stringify(note('notifications/initialized')) }) },
    { rule: 'JSON', title: 'two byte order marks → 400 -32700 id null', build: (g) => wire(g, { raw: '\ufeff\ufeff' + JSON.stringify(req(1, 'tools/list')) }) },
    { rule: 'NO-BATCH', row: '#16', title: 'empty batch [] → 400 -32600 id null', build: (g) => wire(g, { body: [] }) },
    { rule: 'NO-BATCH', row: '#17', title: 'batch of requests, no MPV (2025-03-26) → 400 (DEV-BATCH-2025-03-26)', build: (g) => wire(g, { body: [req(1, 'tools/list'), req(2, 'ping')] }) },
    { rule: 'NO-BATCH', row: '#18', title: 'batch of notifications, MPV 2025-03-26 → 400', build: (g) => wire(g, { mpv: '2025-03-26', body: [note('notifications/initialized'), note('notifications/cancelled', { requestId: 1 })] }) },
    { rule: 'NO-BATCH', row: '#19', title: 'batch containing initialize → 400', build: (g) => wire(g, { body: [req(1, 'initialize', init('2025-03-26'))] }) },
    { rule: 'NO-BATCH', row: '#20', title: 'batch with MPV 2025-06-18 → 400', build: (g) => wire(g, { mpv: '2025-06-18', body: [req(1, 'tools/list')] }) },
    { rule: 'NO-BATCH', row: '#21', title: 'modern batch with an envelope element → 400', build: (g) => wire(g, { mpv: M, headers: { 'Mcp-Method': 'tools/list' }, body: [req(1, 'tools/list', { _meta: envelope(g) })] }) },
    { rule: 'JSONRPC-SHAPE', row: '#10', title: '{"foo":1} → 400 -32600 id null', build: (g) => wire(g, { body: { foo: 1 } }) },
    { rule: 'JSONRPC-SHAPE', row: '#10', title: '42 → 400 -32600 id null', build: (g) => wire(g, { body: 42 }) },
    { rule: 'JSONRPC-SHAPE', row: '#11', title: 'jsonrpc missing → 400 -32600, id echoed', build: (g) => wire(g, { body: { id: 7, method: 'tools/list' } }) },
    { rule: 'JSONRPC-SHAPE', row: '#11', title: 'jsonrpc "1.0" → 400 -32600', build: (g) => wire(g, { body: { jsonrpc: '1.0', id: 'a', method: 'tools/list' } }) },
    { rule: 'JSONRPC-SHAPE', row: '#12', title: 'id null → 400 -32600 id null', build: (g) => wire(g, { body: req(null, 'tools/list') }) },
    { rule: 'JSONRPC-SHAPE', row: '#13', title: 'id 1.5 → 400 -32600', build: (g) => wire(g, { body: req(1.5, 'tools/list') }) },
    { rule: 'JSONRPC-SHAPE', row: '#13', title: 'id true → 400 -32600', build: (g) => wire(g, { body: req(true, 'tools/list') }) },
    { rule: 'JSONRPC-SHAPE', row: '#13', title: 'id {} → 400 -32600', build: (g) => wire(g, { body: req({}, 'tools/list') }) },
    { rule: 'JSONRPC-SHAPE', row: '#14', title: 'id 0 → 200, id 0 echoed', build: (g) => wire(g, { mpv: '2025-11-25', body: req(0, 'ping') }) },
    { rule: 'JSONRPC-SHAPE', row: '#14', title: 'id "0" → 200, id "0" echoed', build: (g) => wire(g, { mpv: '2025-11-25', body: req('0', 'ping') }) },
    { rule: 'JSONRPC-SHAPE', row: '#15', title: 'method missing (and no result/error) → 400 -32600', build: (g) => wire(g, { body: { jsonrpc: '2.0', id: 3 } }) },
    { rule: 'JSONRPC-SHAPE', row: '#15', title: 'method 42 → 400 -32600', build: (g) => wire(g, { body: { jsonrpc: '2.0', id: 3, method: 42 } }) },
    { rule: 'JSONRPC-SHAPE', title: 'id 2^53-1 → 200, echoed exactly', build: (g) => wire(g, { mpv: '2025-06-18', body: req(Number.MAX_SAFE_INTEGER, 'ping') }) },
    { rule: 'JSONRPC-SHAPE', title: 'id -(2^53-1) → 200, echoed exactly', build: (g) => wire(g, { mpv: '2025-06-18', body: req(Number.MIN_SAFE_INTEGER, 'ping') }) },
    { rule: 'JSONRPC-SHAPE', title: 'id 2^31 on a modern request → 200, echoed', build: (g) => modern(g, 2 ** 31, 'tools/list') },
    { rule: 'JSONRPC-SHAPE', title: 'id 2^53 → 400 -32600 id null', build: (g) => wire(g, { mpv: '2025-06-18', body: req(2 ** 53, 'ping') }) },
    { rule: 'JSONRPC-SHAPE', title: 'id 1e+21 → 400 -32600 id null', build: (g) => wire(g, { mpv: '2025-06-18', raw: '{"jsonrpc":"2.0","id":1e+21,"method":"ping"}' }) },
    { rule: 'JSONRPC-SHAPE', title: 'posted response with id 2^53 → 400 -32600 id null', build: (g) => wire(g, { mpv: '2025-06-18', body: { jsonrpc: '2.0', id: 2 ** 53, result: {} } }) },
    { rule: 'JSONRPC-SHAPE', title: 'empty method "" → 400 -32600, id echoed', build: (g) => wire(g, { mpv: '2025-06-18', body: req(3, '') }) },
    { rule: 'JSONRPC-SHAPE', title: 'modern request with empty method "" → 400 -32600, id echoed', build: (g) => modern(g, 'e', '') },
    { rule: 'JSONRPC-SHAPE', title: 'notification with empty method "" → 400 -32600 id null', build: (g) => wire(g, { mpv: '2025-06-18', body: note('') }) },
    { rule: 'VERSION-HEADER', row: '#37', title: 'MPV 2099-01-01 on tools/list → 400 -32022 {supported, requested}', build: (g) => wire(g, { mpv: '2099-01-01', body: req(5, 'tools/list') }) },
    { rule: 'VERSION-HEADER', row: '#37', title: 'MPV garbage on ping → 400 -32022', build: (g) => wire(g, { mpv: 'garbage', body: req('p', 'ping') }) },
    { rule: 'VERSION-HEADER', row: '#52', title: 'MPV = _meta = v999.0.0 → 400 -32022', build: (g) => wire(g, { mpv: 'v999.0.0', headers: { 'Mcp-Method': 'server/discover' }, body: req(1, 'server/discover', { _meta: envelope(g, 'v999.0.0') }) }) },
    { rule: 'VERSION-HEADER', row: '#30', title: 'initialize with MPV 2025-06-18 → 200, body version negotiated', build: (g) => wire(g, { mpv: '2025-06-18', body: req(0, 'initialize', init('2025-03-26')) }) },
    { rule: 'VERSION-HEADER', title: 'initialize with MPV equal to an unknown params.protocolVersion → accepted, answered 2025-11-25', build: (g) => wire(g, { mpv: '2099-01-01', body: req(0, 'initialize', init('2099-01-01')) }) },
    { rule: 'VERSION-HEADER', row: '#36', title: 'tools/list with no MPV → served as 2025-03-26', build: (g) => wire(g, { body: req(1, 'tools/list') }) },
    { rule: 'VERSION-HEADER', row: '#50', title: 'no MPV but a valid modern envelope → handshake, served (DEV-MODERN-MISSING-HEADER)', build: (g) => wire(g, { body: req(1, 'tools/list', { _meta: envelope(g) }) }) },
    { rule: 'VERSION-HEADER', row: '#53', title: 'MPV = _meta = 2025-11-25 → handshake dialect, served', build: (g) => wire(g, { mpv: '2025-11-25', body: req(1, 'tools/list', { _meta: envelope(g, '2025-11-25') }) }) },
    { rule: 'VERSION-HEADER', title: 'unsupported MPV, _meta with protocolVersion but no clientCapabilities → 400 -32602 (ENVELOPE first)', build: (g) => wire(g, { mpv: '2099-01-01', body: req(3, 'tools/list', { _meta: { [g.spec.protocol.meta.protocolVersion]: '2099-01-01' } }) }) },
    { rule: 'VERSION-HEADER', title: 'unsupported MPV, _meta without protocolVersion → 400 -32022 (no envelope claimed)', build: (g) => wire(g, { mpv: '2099-01-01', body: req(3, 'tools/list', { _meta: { [g.spec.protocol.meta.clientCapabilities]: {} } }) }) },
    { rule: 'VERSION-HEADER', title: 'notification, unsupported MPV, envelope naming 2026-07-28 → 400 -32022 id null (header alone)', build: (g) => wire(g, { mpv: '2099-01-01', body: note('notifications/cancelled', { requestId: 1, _meta: envelope(g) }) }) },
    { rule: 'VERSION-HEADER', title: 'notification, unsupported MPV, partial envelope → 400 -32022 id null (header alone)', build: (g) => wire(g, { mpv: 'garbage', body: note('notifications/initialized', { _meta: { [g.spec.protocol.meta.protocolVersion]: 'garbage' } }) }) },
    { rule: 'VERSION-HEADER', title: 'posted response, unsupported MPV → 400 -32022 id null (header alone)', build: (g) => wire(g, { mpv: '2099-01-01', body: { jsonrpc: '2.0', id: 4, result: {} } }) },
    { rule: 'POSTED-RESPONSE', row: '#22', title: 'handshake: posted response → 202, no body', build: (g) => wire(g, { mpv: '2025-06-18', body: { jsonrpc: '2.0', id: 4, result: {} } }) },
    { rule: 'POSTED-RESPONSE', row: '#23', title: 'modern: posted response → 400 -32600, id echoed', build: (g) => wire(g, { mpv: M, body: { jsonrpc: '2.0', id: 4, result: {} } }) },
    { rule: 'ENVELOPE', row: '#47', title: 'modern params {} (no _meta) → 400 -32602', build: (g) => wire(g, { mpv: M, body: req(9, 'server/discover', {}) }) },
    { rule: 'ENVELOPE', row: '#48', title: 'modern _meta without protocolVersion → 400 -32602', build: (g) => wire(g, { mpv: M, body: req(9, 'tools/list', { _meta: { [g.spec.protocol.meta.clientCapabilities]: {} } }) }) },
    { rule: 'ENVELOPE', row: '#49', title: 'modern _meta without clientCapabilities → 400 -32602', build: (g) => wire(g, { mpv: M, body: req(9, 'tools/list', { _meta: { [g.spec.protocol.meta.protocolVersion]: M } }) }) },
    { rule: 'ENVELOPE', row: '#38', title: 'MPV 2026-07-28 on a bare tools/list → 400 -32602', build: (g) => wire(g, { mpv: M, body: req(9, 'tools/list') }) },
    { rule: 'ENVELOPE', row: '#31', title: 'initialize with MPV 2026-07-28 and no envelope → 400 -32602 (the matrix row says -32020; spec order puts ENVELOPE first)', build: (g) => wire(g, { mpv: M, body: req(0, 'initialize', init('2025-11-25')) }) },
    { rule: 'ENVELOPE', row: '#46', title: 'envelope without clientInfo → served', build: (g) => wire(g, { mpv: M, body: req(9, 'server/discover', { _meta: envelope(g, M, false) }) }) },
    { rule: 'VERSION-MATCH', row: '#51', title: 'MPV 2026-07-28, _meta v999.0.0 → 400 -32020', build: (g) => wire(g, { mpv: M, body: req(2, 'server/discover', { _meta: envelope(g, 'v999.0.0') }) }) },
    { rule: 'VERSION-MATCH', title: 'MPV v999.0.0, _meta 2026-07-28 → 400 -32020 (envelope checked before the version)', build: (g) => wire(g, { mpv: 'v999.0.0', headers: { 'Mcp-Method': 'tools/list' }, body: req(2, 'tools/list', { _meta: envelope(g) }) }) },
    // As the MCP-METHOD example below: the header MUST decides before the non-object arguments are read.
    { rule: 'VERSION-MATCH', title: 'MPV 2026-07-28, _meta 2025-06-18 on a tools/call with arguments [] → 400 -32020 (before the arguments are read)', build: (g) => wire(g, { mpv: M, body: req(2, 'tools/call', { ...call(g, { arguments: [] }), _meta: envelope(g, '2025-06-18') }) }) },
    { rule: 'MCP-METHOD', row: '#54', title: 'Mcp-Method missing → 400 -32020', build: (g) => modern(g, 3, 'tools/list', {}, { mirror: false }) },
    { rule: 'MCP-METHOD', row: '#55', title: 'Mcp-Method prompts/list for tools/list → 400 -32020', build: (g) => modern(g, 3, 'tools/list', {}, { headers: { 'Mcp-Method': 'prompts/list' } }) },
    { rule: 'MCP-METHOD', row: '#56', title: 'Mcp-Method TOOLS/LIST → 400 -32020', build: (g) => modern(g, 3, 'tools/list', {}, { headers: { 'Mcp-Method': 'TOOLS/LIST' } }) },
    { rule: 'MCP-METHOD', row: '#57', title: 'header names mcp-method / MCP-PROTOCOL-VERSION → served', build: (g) => wire(g, { headers: { 'MCP-PROTOCOL-VERSION': M, 'mcp-method': 'tools/list' }, body: req(3, 'tools/list', { _meta: envelope(g) }) }) },
    // Two faults at once: the header mismatch (a 2026-07-28 MUST: 400 -32020) and non-object arguments
    // (no MUST names their answer), so the mismatch decides (MCP-METHOD comes before TOOL-KNOWN in `checks`).
    { rule: 'MCP-METHOD', title: 'Mcp-Method tools/list on a tools/call with arguments true → 400 -32020 (before the arguments are read)', build: (g) => modern(g, 3, 'tools/call', call(g, { arguments: true }), { headers: { 'Mcp-Method': 'tools/list' } }) },
    { rule: 'MCP-NAME', row: '#58', title: 'tools/call without Mcp-Name → 400 -32020', build: (g) => modern(g, 4, 'tools/call', call(g), { headers: { 'Mcp-Name': null } }) },
    { rule: 'MCP-NAME', row: '#59', title: 'Mcp-Name wrong → 400 -32020', build: (g) => modern(g, 4, 'tools/call', call(g), { headers: { 'Mcp-Name': 'wrong' } }) },
    { rule: 'MCP-NAME', row: '#60', title: 'Mcp-Name with surrounding whitespace → passes the mirror check', build: (g) => modern(g, 4, 'tools/call', call(g), { headers: { 'Mcp-Name': `   ${tool(g)}  ` } }) },
    { rule: 'MCP-NAME', row: '#61', title: 'Mcp-Name =?base64?…?= → decoded, passes', build: (g) => modern(g, 4, 'tools/call', call(g), { headers: { 'Mcp-Name': `=?base64?${Buffer.from(tool(g)).toString('base64')}?=` } }) },
    { rule: 'MCP-NAME', row: '#62', title: 'Mcp-Name =?base64?SGVs!!!?= → 400 -32020', build: (g) => modern(g, 4, 'tools/call', call(g), { headers: { 'Mcp-Name': '=?base64?SGVs!!!?=' } }) },
    { rule: 'MCP-NAME', row: '#63', title: 'Mcp-Name =?BASE64?…?= (upper-case marker) → 400 -32020', build: (g) => modern(g, 4, 'tools/call', call(g), { headers: { 'Mcp-Name': `=?BASE64?${Buffer.from(tool(g)).toString('base64')}?=` } }) },
    { rule: 'METHOD-KNOWN', row: '#66', title: 'modern foo/bar → 404 -32601', build: (g) => modern(g, 5, 'foo/bar') },
    { rule: 'METHOD-KNOWN', row: '#67', title: 'modern initialize → 404 -32601', build: (g) => modern(g, 5, 'initialize', init('2025-11-25')) },
    { rule: 'METHOD-KNOWN', row: '#67', title: 'modern ping → 404 -32601', build: (g) => modern(g, 5, 'ping') },
    { rule: 'METHOD-KNOWN', row: '#67', title: 'modern logging/setLevel → 404 -32601', build: (g) => modern(g, 5, 'logging/setLevel', { level: 'info' }) },
    { rule: 'METHOD-KNOWN', row: '#67', title: 'modern resources/subscribe → 404 -32601', build: (g) => modern(g, 5, 'resources/subscribe', { uri: 'file:///x' }) },
    { rule: 'METHOD-KNOWN', row: '#68', title: 'modern prompts/list → 404 -32601', build: (g) => modern(g, 5, 'prompts/list') },
    { rule: 'METHOD-KNOWN', row: '#69', title: 'modern subscriptions/listen → 404 -32601', build: (g) => modern(g, 5, 'subscriptions/listen') },
    { rule: 'METHOD-KNOWN-HANDSHAKE', row: '#39', title: 'handshake foo/bar → 200 -32601, id echoed (#44)', build: (g) => wire(g, { mpv: '2025-06-18', body: req(6, 'foo/bar') }) },
    { rule: 'METHOD-KNOWN-HANDSHAKE', title: 'handshake resources/list → 200 -32601', build: (g) => wire(g, { mpv: '2025-11-25', body: req('r', 'resources/list') }) },
    { rule: 'METHOD-KNOWN-HANDSHAKE', row: '#40', title: 'handshake server/discover without envelope → served (DEV-DISCOVER-HANDSHAKE)', build: (g) => wire(g, { mpv: '2025-11-25', body: req(6, 'server/discover') }) },
    { rule: 'TOOL-KNOWN', row: '#41', title: 'handshake tools/call of an unknown tool → 200 -32602', build: (g) => wire(g, { mpv: '2025-06-18', body: req(7, 'tools/call', { name: 'get_weather', arguments: {} }) }) },
    { rule: 'TOOL-KNOWN', row: '#72', title: 'modern tools/call of an unknown tool → 200 -32602', build: (g) => modern(g, 7, 'tools/call', { name: 'get_weather', arguments: {} }) },
    { rule: 'TOOL-KNOWN', title: 'handshake tools/call with arguments [] and no key → 200 -32602 (before AUTH)', build: (g) => wire(g, { mpv: '2025-11-25', body: req(7, 'tools/call', call(g, { arguments: [] })) }) },
    { rule: 'TOOL-KNOWN', title: 'modern tools/call with arguments null and an invalid key → 200 -32602 (before AUTH)', build: (g) => modern(g, 7, 'tools/call', call(g, { arguments: null }), { auth: 'invalid' }) },
    { rule: 'TOOL-KNOWN', needsApiKey: true, title: 'tools/call with arguments "x" and a valid key → 200 -32602', build: (g) => wire(g, { mpv: '2025-06-18', auth: 'valid', body: req(7, 'tools/call', { name: 'interlock_list_sources', arguments: 'x' }) }) },
    { rule: 'CLIENT-CAPABILITY', title: 'modern tools/call of a tool that declares no required capability, with clientCapabilities {} → not refused -32021', build: (g) => modern(g, 8, 'tools/call', call(g), { auth: 'invalid' }) },
    { rule: 'AUTH', title: 'handshake governed tool without a key → tool result isError, unauthorized/missing_api_key', build: (g) => wire(g, { mpv: '2025-11-25', body: req(8, 'tools/call', { name: 'interlock_list_sources', arguments: {} }) }) },
    { rule: 'AUTH', title: 'handshake governed tool with an invalid key → unauthorized/invalid_api_key', build: (g) => wire(g, { auth: 'invalid', body: req(8, 'tools/call', { name: 'interlock_query', arguments: { source_id: 'demo', sql: 'SELECT 1' } }) }) },
    { rule: 'AUTH', title: 'modern governed tool without a key → 401 -32602 with WWW-Authenticate: Bearer', build: (g) => modern(g, 8, 'tools/call', { name: 'interlock_list_sources', arguments: {} }) },
    { rule: 'AUTH', title: 'modern governed tool with an invalid key → 401 -32602 invalid_api_key', build: (g) => modern(g, 8, 'tools/call', { name: 'agentgate_list_sources', arguments: {} }, { auth: 'invalid' }) },
    { rule: 'AUTH', title: 'handshake Authorization: Basic … → missing_api_key', build: (g) => wire(g, { mpv: '2025-11-25', headers: { Authorization: 'Basic eDp5' }, body: req(8, 'tools/call', { name: 'interlock_list_sources', arguments: {} }) }) },
    { rule: 'AUTH', title: 'modern Authorization: Basic … → 401 missing_api_key', build: (g) => modern(g, 8, 'tools/call', { name: 'interlock_list_sources', arguments: {} }, { headers: { Authorization: 'Basic eDp5' } }) },
    { rule: 'AUTH', title: 'modern Authorization: Bearer with an empty token → 401 missing_api_key', build: (g) => modern(g, 8, 'tools/call', { name: 'interlock_list_sources', arguments: {} }, { headers: { Authorization: 'Bearer' } }) },
    { rule: 'INITIALIZE-PARAMS', title: 'initialize without capabilities → 200 -32602', build: (g) => wire(g, { mpv: '2025-06-18', body: req(0, 'initialize', { protocolVersion: '2025-06-18', clientInfo: { name: 'interlock-conformance', version: '1.0.0' } }) }) },
    { rule: 'INITIALIZE-PARAMS', title: 'initialize without clientInfo → 200 -32602', build: (g) => wire(g, { body: req(0, 'initialize', { protocolVersion: '2025-11-25', capabilities: {} }) }) },
    { rule: 'INITIALIZE-PARAMS', title: 'initialize without params → 200 -32602', build: (g) => wire(g, { mpv: '2025-11-25', body: req(0, 'initialize') }) },
    { rule: 'INITIALIZE-PARAMS', title: 'initialize with capabilities null → 200 -32602', build: (g) => wire(g, { body: req('i', 'initialize', { protocolVersion: '2025-03-26', capabilities: null, clientInfo: { name: 'c', version: '1' } }) }) },
    { rule: 'TOOL-ARGUMENTS', row: '#42', needsApiKey: true, title: '2025-11-25 invalid arguments → tool result isError true', build: (g) => wire(g, { mpv: '2025-11-25', auth: 'valid', body: req(9, 'tools/call', { name: 'interlock_query', arguments: { source_id: 'demo', sql: 'SELECT 1', bogus: 1 } }) }) },
    { rule: 'TOOL-ARGUMENTS', needsApiKey: true, title: '2025-06-18 invalid arguments → 200 -32602', build: (g) => wire(g, { mpv: '2025-06-18', auth: 'valid', body: req(9, 'tools/call', { name: 'interlock_list_sources', arguments: { bogus: 1 } }) }) },
    { rule: 'TOOL-ARGUMENTS', needsApiKey: true, title: 'no MPV (2025-03-26) missing required argument → 200 -32602', build: (g) => wire(g, { auth: 'valid', body: req(9, 'tools/call', { name: 'interlock_describe_source', arguments: {} }) }) },
    { rule: 'TOOL-ARGUMENTS', needsApiKey: true, title: 'modern invalid arguments → tool result isError true', build: (g) => modern(g, 9, 'tools/call', { name: 'interlock_discover', arguments: { source_id: 'demo', query: 'x', limit: 500 } }, { auth: 'valid' }) },
    { rule: 'results.plain', row: '#28', title: 'initialize 2025-03-26 without MPV → answers 2025-03-26, plain shape', build: (g) => wire(g, { body: req(0, 'initialize', init('2025-03-26')) }) },
    { rule: 'results.plain', row: '#28', title: 'initialize 2025-06-18 → answers 2025-06-18', build: (g) => wire(g, { body: req(0, 'initialize', init('2025-06-18')) }) },
    { rule: 'results.plain', row: '#28', title: 'initialize 2025-11-25 → answers 2025-11-25', build: (g) => wire(g, { body: req(0, 'initialize', init('2025-11-25')) }) },
    { rule: 'results.plain', row: '#29', title: 'initialize 2024-11-05 → answers 2025-11-25', build: (g) => wire(g, { body: req(0, 'initialize', init('2024-11-05')) }) },
    { rule: 'results.plain', row: '#29', title: 'initialize 2026-07-28 without envelope → answers 2025-11-25', build: (g) => wire(g, { body: req(0, 'initialize', init(M)) }) },
    { rule: 'results.plain', row: '#34', title: 'ping with MPV 2025-06-18 → exactly {}', build: (g) => wire(g, { mpv: '2025-06-18', body: req(2, 'ping') }) },
    { rule: 'results.complete', row: '#45', title: 'modern server/discover → complete, supportedVersions, capabilities, ttlMs, cacheScope', build: (g) => modern(g, 'discover-1', 'server/discover') },
    { rule: 'results.complete', row: '#70', title: 'modern tools/list → complete, ttlMs, cacheScope, catalogue', build: (g) => modern(g, 1, 'tools/list') },
    { rule: 'results.complete', row: '#35', title: 'handshake tools/list → complete envelope (DEV-HANDSHAKE-RESULT-ENVELOPE)', build: (g) => wire(g, { mpv: '2025-06-18', body: req(1, 'tools/list') }) },
    { rule: 'results.complete', row: '#71', needsApiKey: true, title: 'modern tools/call interlock_list_sources with a valid key → success', build: (g) => modern(g, 11, 'tools/call', { name: 'interlock_list_sources', arguments: {} }, { auth: 'valid' }) },
    { rule: 'results.complete', needsApiKey: true, title: 'handshake tools/call agentgate_list_sources (alias) with a valid key → success', build: (g) => wire(g, { mpv: '2025-03-26', auth: 'valid', body: req(11, 'tools/call', { name: 'agentgate_list_sources' }) }) },
    { rule: 'results.notification', row: '#33', title: 'notifications/initialized → 202, no body', build: (g) => wire(g, { mpv: '2025-11-25', body: note('notifications/initialized') }) },
    { rule: 'results.notification', row: '#24', title: 'notifications/cancelled without MPV → 202', build: (g) => wire(g, { body: note('notifications/cancelled', { requestId: 1 }) }) },
    { rule: 'results.notification', row: '#75', title: 'modern notification without Mcp-Method → 202', build: (g) => wire(g, { mpv: M, body: note('notifications/cancelled', { requestId: 1 }) }) },
    // MCP Transports: a notification is answered 202 with no body, or, when the server cannot accept it, an
    // HTTP error status; never 200 with a body.
    { rule: 'results.notification', title: 'modern notification whose _meta is an array → 202 (MCP: or an HTTP error status)', build: (g) => wire(g, { mpv: M, body: note('notifications/cancelled', { requestId: 1, _meta: [M] }) }) },
    { rule: 'results.notification', row: '#24', title: 'unknown notification → 202', build: (g) => wire(g, { mpv: '2025-06-18', body: note('foo/bar') }) },
    { rule: 'results.noSession', row: '#26', title: 'Mcp-Session-Id on a request is ignored; none issued', build: (g) => wire(g, { headers: { 'Mcp-Session-Id': 'abc' }, body: req(0, 'initialize', init('2025-11-25')) }) },
    { rule: 'results.noSession', row: '#27', title: 'Last-Event-ID on a request is ignored', build: (g) => wire(g, { mpv: '2025-06-18', headers: { 'Last-Event-ID': '5' }, body: req(1, 'tools/list') }) },
  ];
}
