/**
 * The MCP-mode oracle (the `mcp-stateless` profile run without `interlock-v1`) on the points issue 30 left
 * open: an Origin is the server's own in any letter case of its scheme and host (RFC 6454 §4, RFC 3986
 * §6.2.2.1), so refusing it is not credited as an Origin refusal. Pure: no server.
 */
import { wire } from '../../conformance/examples';
import type { WireResponse } from '../../conformance/http';
import { createOracle, isOwnOrigin, type OracleContext } from '../../conformance/oracle';
import { loadSpec, withServerCatalogue } from '../../conformance/spec';
import { profileOf } from '../../conformance/profiles';
import { judge } from '../../conformance/verdict';
import type { GenContext } from '../../conformance/arbitraries';

const spec = loadSpec();
const mcp = createOracle(spec, { mcp: true });
const url = new URL('http://127.0.0.1:8080/mcp');
const g: GenContext = { spec, oracle: mcp, url };
/** The server refuses this Host/Origin on a plain tools/list too (what run.ts's probe would find for a guard). */
const ctx: OracleContext = { url, hostOriginRefused: true, handshakeOnly: false };
const list = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
const refused403: WireResponse = { status: 403, headers: { 'content-type': 'text/plain' }, body: 'Forbidden' };

describe('isOwnOrigin (RFC 6454 §4: scheme, host and port; scheme and host case-insensitive)', () => {
  it('reads the own origin in any letter case and with the default port spelled out', () => {
    expect(isOwnOrigin('http://127.0.0.1:8080', url)).toBe(true);
    expect(isOwnOrigin('HTTP://127.0.0.1:8080', url)).toBe(true);
    expect(isOwnOrigin('http://LOCALHOST:8787', new URL('http://localhost:8787/mcp'))).toBe(true);
    expect(isOwnOrigin('HtTp://LocalHost', new URL('http://localhost/mcp'))).toBe(true);
    expect(isOwnOrigin('http://localhost:80', new URL('http://localhost/mcp'))).toBe(true);
    expect(isOwnOrigin('https://EXAMPLE.org:443', new URL('https://example.org/mcp'))).toBe(true);
  });
  it('reads anything else as another origin: host, port, scheme, null, a path or a trailing slash', () => {
    for (const o of ['http://evil.example.com', 'null', 'http://127.0.0.1:8081', 'https://127.0.0.1:8080', 'http://localhost:8080', 'http://127.0.0.1:8080/', 'http://127.0.0.1:8080//', 'http://127.0.0.1:8080/mcp', 'http://u@127.0.0.1:8080', '']) {
      expect([o, isOwnOrigin(o, url)]).toEqual([o, false]);
    }
  });
});

describe('MCP mode: Origin refusals', () => {
  const judgeOrigin = (origin: string, res: WireResponse) => judge(spec, mcp.expect(wire(g, { headers: { Origin: origin }, body: list }), ctx), res);
  it('credits a 403 with any body for a foreign Origin', () => {
    expect(judgeOrigin('http://evil.example.com', refused403).passed).toBe(true);
    expect(judgeOrigin('null', refused403).passed).toBe(true);
  });
  it('does not credit a refusal of the own origin in another letter case: it must be served', () => {
    const own = judgeOrigin('HTTP://127.0.0.1:8080', refused403);
    expect({ passed: own.passed, rules: [...new Set(own.violations.map((v) => v.rule))] }).toEqual({ passed: false, rules: ['results.complete'] });
    const lower = judgeOrigin('http://127.0.0.1:8080', refused403);
    expect(lower.passed).toBe(false);
  });
});

/** One JSON-RPC answer as a wire response. */
const json = (status: number, body: unknown, headers: Record<string, string> = {}): WireResponse => ({ status, headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
const judgeRaw = (raw: string, res: WireResponse, mpv?: string) => judge(spec, mcp.expect(wire(g, { raw, mpv }), ctx), res);
const summary = (j: ReturnType<typeof judge>) => ({ passed: j.passed, failing: [...new Set(j.violations.map((v) => v.rule))], warned: j.warnings.map((w) => w.rule) });

describe('MCP mode: what no MUST forbids passes with a warning (issue 30 item 3)', () => {
  it('malformed JSON answered 400 with an HTML page (DBHub): MCP names the status, the body MAY be a JSON-RPC error', () => {
    const html: WireResponse = { status: 400, headers: { 'content-type': 'text/html' }, body: '<!DOCTYPE html><pre>SyntaxError</pre>' };
    expect(summary(judgeRaw('{"jsonrpc":"2.0","id":1,', html))).toEqual({ passed: true, failing: [], warned: ['JSON'] });
    expect(summary(judgeRaw('42', html))).toEqual({ passed: true, failing: [], warned: ['JSONRPC-SHAPE'] });
    // A 200 with no JSON-RPC error is no refusal at all.
    expect(judgeRaw('{"jsonrpc":"2.0","id":1,', { status: 200, headers: {}, body: 'ok' }).passed).toBe(false);
  });

  it('a JSON object that is no valid Request answered -32700 instead of -32600 (SDK v1): a code definition, a warning', () => {
    const parseError = json(400, { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } });
    for (const raw of ['{"foo":1}', '{"jsonrpc":"1.0","id":1,"method":"tools/list"}', '{"jsonrpc":"2.0","id":null,"method":"tools/list"}']) {
      expect([raw, summary(judgeRaw(raw, parseError))]).toEqual([raw, { passed: true, failing: [], warned: ['JSONRPC-SHAPE'] }]);
    }
  });

  it('an empty batch [] answered 202 (SDK v1) still fails: JSON-RPC 2.0 §6 MUST answer it with a single Response object', () => {
    for (const mpv of [undefined, '2025-03-26', '2025-06-18', '2025-11-25']) {
      expect([mpv, summary(judgeRaw('[]', { status: 202, headers: {}, body: '' }, mpv))]).toEqual([mpv, { passed: false, failing: ['NO-BATCH'], warned: [] }]);
      expect([mpv, summary(judgeRaw('[]', json(200, { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Invalid Request' } }), mpv))]).toEqual([mpv, { passed: true, failing: [], warned: ['NO-BATCH'] }]);
    }
  });

  it('a 405 needs only an Allow header listing POST (RFC 9110 §15.5.6 MUST), any body', () => {
    const get = mcp.expect(wire(g, { method: 'GET' }), ctx);
    expect(summary(judge(spec, get, { status: 405, headers: { allow: 'GET, POST, DELETE' }, body: '' }))).toEqual({ passed: true, failing: [], warned: ['HTTP-METHOD'] });
    expect(summary(judge(spec, get, { status: 405, headers: { 'content-type': 'application/json' }, body: '{"status":"Method Not Allowed"}' }))).toEqual({ passed: false, failing: ['HTTP-METHOD'], warned: [] });
  });

  it('a handshake-era initialize answer may assign Mcp-Session-Id (MAY): a warning, not a failure', () => {
    const init = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'c', version: '1' } } };
    const res = json(200, { jsonrpc: '2.0', id: 1, result: { protocolVersion: '2025-03-26', capabilities: { tools: {} }, serverInfo: { name: 's', version: '1' } } }, { 'mcp-session-id': 'abc' });
    const j = judge(spec, mcp.expect(wire(g, { body: init }), ctx), res, (r) => r !== 'capabilities');
    expect(summary(j)).toEqual({ passed: true, failing: [], warned: ['results.noSession'] });
  });

  it('two MUSTs of 2026-07-28 at once: a header naming an unsupported version against a 2026-07-28 envelope may get -32022', () => {
    const body = { jsonrpc: '2.0', id: 2, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } } };
    const exp = mcp.expect(wire(g, { mpv: '2099-01-01', body, mirror: true }), ctx);
    const res = json(400, { jsonrpc: '2.0', id: 2, error: { code: -32022, message: 'unsupported', data: { supported: ['2026-07-28'], requested: '2099-01-01' } } });
    expect(summary(judge(spec, exp, res))).toEqual({ passed: true, failing: [], warned: [] });
  });
});

describe('one finding, one owning rule: a complete envelope refused as malformed is an ENVELOPE finding', () => {
  it('a tools/call whose complete 2026-07-28 envelope lacks only the optional clientInfo, refused 400 -32602 (Toolbox), is charged to ENVELOPE', () => {
    const body = { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'nope', arguments: {}, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } } };
    const exp = mcp.expect(wire(g, { mpv: '2026-07-28', body }), ctx);
    const j = judge(spec, exp, json(400, { jsonrpc: '2.0', id: 7, error: { code: -32602, message: '_meta error: missing field from io.modelcontextprotocol/clientInfo' } }));
    expect({ aimed: exp.rule, ...summary(j) }).toEqual({ aimed: 'TOOL-KNOWN', passed: false, failing: ['ENVELOPE'], warned: [] });
  });
});

describe('one finding, one owning rule: headers that match the body refused -32020 are a header finding', () => {
  it('a Base64-encoded Mcp-Name the server does not decode (Toolbox) is charged to MCP-NAME, not to the tool rule the request aimed at', () => {
    const body = { jsonrpc: '2.0', id: 8, method: 'tools/call', params: { name: 'get_weather', _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } } };
    const req = wire(g, { mpv: '2026-07-28', body, headers: { 'Mcp-Name': `=?base64?${Buffer.from('get_weather').toString('base64')}?=` } });
    const exp = mcp.expect(req, ctx);
    const j = judge(spec, exp, json(400, { jsonrpc: '2.0', id: 8, error: { code: -32020, message: 'Mcp-Name header value does not match body value' } }));
    expect({ aimed: exp.rule, ...summary(j) }).toEqual({ aimed: 'TOOL-KNOWN', passed: false, failing: ['MCP-NAME'], warned: [] });
  });
  it('non-object arguments reported as a tool result with isError true pass with a warning (MCP 2025-11-25: input validation errors are tool execution errors)', () => {
    const body = { jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'interlock_query', arguments: null } };
    const exp = mcp.expect(wire(g, { mpv: '2025-11-25', body }), ctx);
    const j = judge(spec, exp, json(200, { jsonrpc: '2.0', id: 9, result: { content: [{ type: 'text', text: 'invalid parameters' }], isError: true } }), (r) => r !== 'results.complete');
    expect(summary(j)).toEqual({ passed: true, failing: [], warned: ['TOOL-KNOWN'] });
  });
});

describe('trial nuc: MCP mode accepts what no MUST forbids, and says why it fails', () => {
  // A server catalogue like the SDK's: one tool whose input schema needs a string `text`.
  const echoSpec = withServerCatalogue(spec, [{ name: 'echo', inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } }]);
  const echoOracle = createOracle(echoSpec, { mcp: true });
  const eg: GenContext = { spec: echoSpec, oracle: echoOracle, url };
  const judgeEcho = (body: unknown, mpv: string | undefined, res: WireResponse, c: OracleContext = ctx) => judge(echoSpec, echoOracle.expect(wire(eg, { body, mpv }), c), res, (r) => profileOf(r) === 'mcp-stateless');
  const toolResult = (id: number, isError: boolean) => json(200, { jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: isError ? 'invalid arguments' : 'hi' }], ...(isError ? { isError: true } : {}) } });

  it('item 4: invalid arguments reported as a tool result with isError true pass in every revision (2025-03-26/06-18 name -32602 only as an example)', () => {
    const call = { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'echo', arguments: { text: 42 } } };
    for (const mpv of [undefined, '2025-03-26', '2025-06-18', '2025-11-25']) {
      expect([mpv, summary(judgeEcho(call, mpv, toolResult(3, true)))]).toEqual([mpv, { passed: true, failing: [], warned: [] }]);
    }
    // 2025-11-25: input validation errors SHOULD be tool execution errors, so a JSON-RPC error is a warning.
    expect(summary(judgeEcho(call, '2025-11-25', json(200, { jsonrpc: '2.0', id: 3, error: { code: -32602, message: 'Invalid params' } })))).toEqual({ passed: true, failing: [], warned: ['TOOL-ARGUMENTS'] });
  });

  it('item 5: tools/call with arguments null served normally (Toolbox) passes with a TOOL-KNOWN warning', () => {
    const call = { jsonrpc: '2.0', id: 4, method: 'tools/call', params: { name: 'echo', arguments: null } };
    for (const mpv of [undefined, '2025-06-18', '2025-11-25']) {
      expect([mpv, summary(judgeEcho(call, mpv, toolResult(4, false)))]).toEqual([mpv, { passed: true, failing: [], warned: ['TOOL-KNOWN'] }]);
    }
    // A 200 that is no tool result still fails.
    expect(judgeEcho(call, '2025-06-18', json(200, { jsonrpc: '2.0', id: 4, result: {} })).passed).toBe(false);
  });

  it('item 6: a batch holding only initialize is served whatever MCP-Protocol-Version rides along (initialize may ignore it)', () => {
    const init = { jsonrpc: '2.0', id: 5, method: 'initialize', params: { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'c', version: '1' } } };
    const served = json(200, [{ jsonrpc: '2.0', id: 5, result: { protocolVersion: '2025-03-26', capabilities: { tools: {} }, serverInfo: { name: 's', version: '1' } } }]);
    for (const handshakeOnly of [true, false]) {
      for (const mpv of [undefined, '2025-03-26', '2099-01-01', '2026-07-28']) {
        const j = judge(echoSpec, echoOracle.expect(wire(eg, { raw: JSON.stringify([init]), mpv }), { ...ctx, handshakeOnly }), served, (r) => profileOf(r) === 'mcp-stateless');
        expect([handshakeOnly, mpv, summary(j)]).toEqual([handshakeOnly, mpv, { passed: true, failing: [], warned: [] }]);
      }
    }
  });

  const listed = json(200, { jsonrpc: '2.0', id: 1, result: { tools: [] } });
  it('item 7: a foreign Host served on a loopback URL passes with a HOST warning naming its basis (no MCP MUST)', () => {
    const j = judge(spec, mcp.expect(wire(g, { headers: { Host: 'evil.example.com' }, body: list }), { ...ctx, hostOriginRefused: false }), listed, (r) => profileOf(r) === 'mcp-stateless');
    expect(summary(j)).toEqual({ passed: true, failing: [], warned: ['HOST'] });
    expect(j.warnings[0]!.message).toMatch(/no MCP MUST requires refusing it \(basis: the official MCP conformance suite's dns-rebinding-protection scenario/);
    // Refusing it stays correct, with no warning; so does one 403 for a foreign Host and a foreign Origin.
    expect(summary(judge(spec, mcp.expect(wire(g, { headers: { Host: 'evil.example.com' }, body: list }), ctx), refused403))).toEqual({ passed: true, failing: [], warned: [] });
    expect(summary(judge(spec, mcp.expect(wire(g, { headers: { Host: 'evil.example.com', Origin: 'http://evil.example.com' }, body: list }), ctx), refused403))).toEqual({ passed: true, failing: [], warned: [] });
  });

  it('item 8: a foreign Origin served fails ORIGIN with the MUST it breaks and what came back, not the contract\'s status, code and id', () => {
    const j = judge(spec, mcp.expect(wire(g, { headers: { Origin: 'http://evil.example.com' }, body: list }), { ...ctx, hostOriginRefused: false }), listed, (r) => profileOf(r) === 'mcp-stateless');
    expect(summary(j)).toEqual({ passed: false, failing: ['ORIGIN'], warned: [] });
    expect(j.violations.map((v) => v.message)).toEqual([
      'Origin "http://evil.example.com" is not the server\'s own origin http://127.0.0.1:8080: MCP 2025-11-25 Transports, "If the Origin header is present and invalid, servers MUST respond with HTTP 403 Forbidden" (any 4xx and any body are accepted as the refusal); the server serves a plain tools/list carrying this Origin, so it does not refuse it; got HTTP 200 with a result (the request was served)',
    ]);
  });
});

describe('trial nuc: MCP mode alone judges the outcome of a request expected to succeed', () => {
  it('a tools/list refused 403 with the own Host respelled fails, though its outcome rule (results.complete) is an interlock-v1 key', () => {
    const u = new URL('http://localhost:8080/mcp');
    const req = wire({ ...g, url: u }, { headers: { Host: 'LOCALHOST:8080' }, body: list });
    const j = judge(spec, mcp.expect(req, { url: u, handshakeOnly: false }), refused403, (r) => profileOf(r) === 'mcp-stateless');
    expect(summary(j)).toEqual({ passed: false, failing: ['results.complete'], warned: [] });
  });
});
