import { admit, type HttpRequestView } from '../../../src/transport/admission';
import { defaultOriginPolicy } from '../../../src/transport/http-headers';

const policy = defaultOriginPolicy();
const ENV = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
const base = { host: '127.0.0.1:8787', 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

function req(body: unknown, headers: Record<string, string | undefined> = {}, method = 'POST'): HttpRequestView {
  return { method, headers: { ...base, ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body), scheme: 'http' };
}
function modern(method: string, params: Record<string, unknown> = {}, extra: Record<string, string | undefined> = {}, id: unknown = 1) {
  return admit(req({ jsonrpc: '2.0', id, method, params: { _meta: ENV, ...params } }, { 'mcp-protocol-version': '2026-07-28', 'mcp-method': method, ...extra }), policy);
}
function errOf(r: ReturnType<typeof admit>) {
  if (r.kind !== 'reply') throw new Error('admitted');
  return { status: r.status, code: (r.body?.error as { code: number } | undefined)?.code, id: r.body?.id, rule: r.rule };
}

describe('admission: transport checks in order', () => {
  test('foreign Host → 403 before anything else', () => {
    expect(errOf(admit(req('not json', { host: 'evil.example.com' }, 'GET'), policy))).toEqual({ status: 403, code: -32600, id: null, rule: 'HOST' });
  });
  test('foreign Origin → 403; own origin and absent origin pass', () => {
    expect(errOf(admit(req({ jsonrpc: '2.0', id: 1, method: 'ping' }, { origin: 'http://evil.example.com' }), policy)).rule).toBe('ORIGIN');
    expect(admit(req({ jsonrpc: '2.0', id: 1, method: 'ping' }, { origin: 'http://127.0.0.1:8787' }), policy).kind).toBe('admitted');
    expect(admit(req({ jsonrpc: '2.0', id: 1, method: 'ping' }), policy).kind).toBe('admitted');
  });
  test('GET and DELETE → 405 with Allow: POST', () => {
    for (const m of ['GET', 'DELETE']) {
      const r = admit(req(undefined, {}, m), policy);
      expect(errOf(r)).toEqual({ status: 405, code: -32600, id: null, rule: 'HTTP-METHOD' });
      expect(r.kind === 'reply' && r.headers).toEqual({ Allow: 'POST' });
    }
  });
  test('CORS preflight (issue 24 item 7): 204 with the http.cors headers only for an allow-listed Origin', () => {
    const allowing = { ...policy, allowedOrigins: ['https://app.example.com'] };
    const pre = (origin: string | undefined, acrm: string | null = 'POST', p = allowing) => admit(req(undefined, { origin, 'access-control-request-method': acrm ?? undefined, 'access-control-request-headers': 'authorization,content-type,mcp-protocol-version' }, 'OPTIONS'), p);
    expect(pre('https://app.example.com')).toEqual({
      kind: 'reply',
      status: 204,
      rule: 'HTTP-METHOD',
      headers: {
        'Access-Control-Allow-Origin': 'https://app.example.com',
        Vary: 'Origin',
        'Access-Control-Expose-Headers': 'MCP-Protocol-Version, Mcp-Session-Id, WWW-Authenticate, Retry-After, X-Request-Id',
        'Access-Control-Allow-Methods': 'POST',
        'Access-Control-Allow-Headers': 'Authorization, Content-Type, Accept, MCP-Protocol-Version, Mcp-Method, Mcp-Name, Last-Event-ID',
        'Access-Control-Max-Age': '600',
      },
    });
    // Another origin is refused by ORIGIN; the same page without the allowlist entry too.
    expect(errOf(pre('https://evil.example.com'))).toEqual({ status: 403, code: -32600, id: null, rule: 'ORIGIN' });
    expect(errOf(pre('https://app.example.com', 'POST', policy))).toEqual({ status: 403, code: -32600, id: null, rule: 'ORIGIN' });
    // Not a preflight (no Access-Control-Request-Method), or the request's own origin (needs no CORS): 405.
    expect(errOf(pre('https://app.example.com', null))).toEqual({ status: 405, code: -32600, id: null, rule: 'HTTP-METHOD' });
    expect(errOf(pre('http://127.0.0.1:8787'))).toEqual({ status: 405, code: -32600, id: null, rule: 'HTTP-METHOD' });
    expect(errOf(pre(undefined))).toEqual({ status: 405, code: -32600, id: null, rule: 'HTTP-METHOD' });
  });
  test('Content-Type: parameters and case ignored; other types → 415', () => {
    expect(admit(req({ jsonrpc: '2.0', id: 1, method: 'ping' }, { 'content-type': 'Application/JSON; charset=utf-8' }), policy).kind).toBe('admitted');
    expect(errOf(admit(req({}, { 'content-type': 'text/plain' }), policy)).status).toBe(415);
    expect(errOf(admit(req({}, { 'content-type': undefined }), policy)).status).toBe(415);
  });
  test('Accept must cover both media types (wildcards count, q=0 excludes)', () => {
    const ok = (accept: string) => admit(req({ jsonrpc: '2.0', id: 1, method: 'ping' }, { accept }), policy).kind;
    expect(ok('*/*')).toBe('admitted');
    expect(ok('application/*, text/*')).toBe('admitted');
    expect(ok('application/json, text/event-stream;q=0.5')).toBe('admitted');
    expect(errOf(admit(req({}, { accept: 'application/json' }), policy)).status).toBe(406);
    expect(errOf(admit(req({}, { accept: '*/*, text/event-stream;q=0' }), policy)).status).toBe(406);
  });
  test('bad JSON → 400 -32700 id null; batches → 400 -32600 id null', () => {
    expect(errOf(admit(req('{"jsonrpc":'), policy))).toEqual({ status: 400, code: -32700, id: null, rule: 'JSON' });
    expect(errOf(admit(req([{ jsonrpc: '2.0', id: 1, method: 'ping' }], { 'mcp-protocol-version': '2025-03-26' }), policy))).toEqual({ status: 400, code: -32600, id: null, rule: 'NO-BATCH' });
    expect(errOf(admit(req([]), policy)).code).toBe(-32600);
  });
  test.each([
    [{ jsonrpc: '2.0', id: null, method: 'ping' }, null],
    [{ jsonrpc: '2.0', id: 1.5, method: 'ping' }, null],
    [{ jsonrpc: '2.0', id: true, method: 'ping' }, null],
    [{ jsonrpc: '2.0', id: {}, method: 'ping' }, null],
    [{ jsonrpc: '1.0', id: 7, method: 'ping' }, 7],
    [{ id: 'x', method: 'ping' }, 'x'],
    [{ jsonrpc: '2.0', id: 3, method: 5 }, 3],
    [{ jsonrpc: '2.0', id: 3, method: 'ping', params: [1] }, 3],
    [42, null],
  ])('invalid JSON-RPC shape %j → 400 -32600 with id %j', (body, id) => {
    expect(errOf(admit(req(body), policy))).toEqual({ status: 400, code: -32600, id, rule: 'JSONRPC-SHAPE' });
  });
  test('id 0, negative and string ids are admitted with their exact type', () => {
    for (const id of [0, -5, '0', 'abc']) {
      const r = admit(req({ jsonrpc: '2.0', id, method: 'ping' }), policy);
      expect(r.kind === 'admitted' && r.message.type === 'request' && r.message.id).toBe(id);
    }
  });
});

describe('admission: dialects and versions', () => {
  test('absent header → handshake 2025-03-26; handshake header → its version', () => {
    const a = admit(req({ jsonrpc: '2.0', id: 1, method: 'tools/list' }), policy);
    expect(a.kind === 'admitted' && [a.dialect, a.version]).toEqual(['handshake', '2025-03-26']);
    const b = admit(req({ jsonrpc: '2.0', id: 1, method: 'tools/list' }, { 'mcp-protocol-version': '2025-11-25' }), policy);
    expect(b.kind === 'admitted' && [b.dialect, b.version]).toEqual(['handshake', '2025-11-25']);
  });
  test('unsupported header → 400 -32022 with supported and requested', () => {
    const r = admit(req({ jsonrpc: '2.0', id: 9, method: 'tools/list' }, { 'mcp-protocol-version': '2099-01-01' }), policy);
    expect(errOf(r)).toEqual({ status: 400, code: -32022, id: 9, rule: 'VERSION-HEADER' });
    expect(r.kind === 'reply' && (r.body!.error as { data: unknown }).data).toEqual({ supported: ['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26'], requested: '2099-01-01' });
  });
  test('initialize with a header equal to its body version is accepted; negotiation uses the body', () => {
    const r = admit(req({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2024-11-05', capabilities: {}, clientInfo: { name: 'c', version: '1' } } }, { 'mcp-protocol-version': '2024-11-05' }), policy);
    expect(r.kind === 'admitted' && r.dialect).toBe('handshake');
  });
  test('modern: -32020 (header vs _meta) wins over -32022 (unsupported)', () => {
    const r = modern('tools/list', { _meta: { ...ENV, 'io.modelcontextprotocol/protocolVersion': 'v999.0.0' } });
    expect(errOf(r)).toEqual({ status: 400, code: -32020, id: 1, rule: 'VERSION-MATCH' });
    const both = req({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: { _meta: { ...ENV, 'io.modelcontextprotocol/protocolVersion': 'v999.0.0' } } }, { 'mcp-protocol-version': 'v999.0.0', 'mcp-method': 'tools/list' });
    expect(errOf(admit(both, policy))).toEqual({ status: 400, code: -32022, id: 2, rule: 'VERSION-HEADER' });
  });
  test('modern: missing envelope fields → 400 -32602', () => {
    const noMeta = req({ jsonrpc: '2.0', id: 'x', method: 'tools/list', params: {} }, { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/list' });
    expect(errOf(admit(noMeta, policy))).toEqual({ status: 400, code: -32602, id: 'x', rule: 'ENVELOPE' });
    const noCaps = modern('tools/list', { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } });
    expect(errOf(noCaps).code).toBe(-32602);
  });
  test('modern: Mcp-Method missing, mismatched or differently cased → -32020; padded is fine', () => {
    expect(errOf(modern('tools/list', {}, { 'mcp-method': undefined })).rule).toBe('MCP-METHOD');
    expect(errOf(modern('tools/list', {}, { 'mcp-method': 'prompts/list' })).rule).toBe('MCP-METHOD');
    expect(errOf(modern('tools/list', {}, { 'mcp-method': 'TOOLS/LIST' })).rule).toBe('MCP-METHOD');
    expect(modern('tools/list', {}, { 'mcp-method': '  tools/list ' }).kind).toBe('admitted');
  });
  test('modern: Mcp-Name rules (missing, mismatch, padded, base64, bad base64, uppercase marker)', () => {
    const call = (name: string | undefined) => modern('tools/call', { name: 'interlock_query', arguments: {} }, { 'mcp-name': name });
    expect(errOf(call(undefined)).rule).toBe('MCP-NAME');
    expect(errOf(call('other')).rule).toBe('MCP-NAME');
    expect(call('  interlock_query  ').kind).toBe('admitted');
    expect(call(`=?base64?${Buffer.from('interlock_query').toString('base64')}?=`).kind).toBe('admitted');
    expect(errOf(call('=?base64?SGVs!!!?=')).code).toBe(-32020);
    expect(errOf(call(`=?BASE64?${Buffer.from('interlock_query').toString('base64')}?=`)).code).toBe(-32020);
  });
  test('modern: removed and unknown methods → 404 -32601; handshake unknown → 200 -32601', () => {
    for (const m of ['initialize', 'ping', 'logging/setLevel', 'resources/list', 'prompts/list', 'foo/bar']) {
      expect(errOf(modern(m))).toEqual({ status: 404, code: -32601, id: 1, rule: 'METHOD-KNOWN' });
    }
    expect(errOf(admit(req({ jsonrpc: '2.0', id: 4, method: 'foo/bar' }), policy))).toEqual({ status: 200, code: -32601, id: 4, rule: 'METHOD-KNOWN-HANDSHAKE' });
  });
  test('notifications are admitted (202 later); posted responses: handshake 202, modern 400', () => {
    expect(admit(req({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1 } }), policy).kind).toBe('admitted');
    const resp = admit(req({ jsonrpc: '2.0', id: 1, result: {} }), policy);
    expect(resp.kind === 'reply' && [resp.status, resp.body]).toEqual([202, undefined]);
    expect(errOf(admit(req({ jsonrpc: '2.0', id: 1, result: {} }, { 'mcp-protocol-version': '2026-07-28' }), policy))).toEqual({ status: 400, code: -32600, id: 1, rule: 'POSTED-RESPONSE' });
  });
  test('MCP-Protocol-Version 2026-07-28 without an envelope → -32602 even for initialize', () => {
    const r = req({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2026-07-28', capabilities: {}, clientInfo: { name: 'c', version: '1' } } }, { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'initialize' });
    expect(errOf(admit(r, policy)).code).toBe(-32602);
  });
});
