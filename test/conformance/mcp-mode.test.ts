/**
 * The MCP-mode oracle (the `mcp-stateless` profile run without `interlock-v1`) on the points issue 30 left
 * open: an Origin is the server's own in any letter case of its scheme and host (RFC 6454 §4, RFC 3986
 * §6.2.2.1), so refusing it is not credited as an Origin refusal. Pure: no server.
 */
import { wire } from '../../conformance/examples';
import type { WireResponse } from '../../conformance/http';
import { createOracle, isOwnOrigin, type OracleContext } from '../../conformance/oracle';
import { loadSpec } from '../../conformance/spec';
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
