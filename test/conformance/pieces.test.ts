/**
 * The conformance package's own pieces: rate-limit handling (429 Retry-After, in-band rate_limited), profiles (every rule in exactly
 * one), tool maps, and the JUnit report.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createClient, inBandRateLimitMs, retryAfterMs } from '../../conformance/http';
import { knownRules, parseProfiles, profileOf, PROFILES } from '../../conformance/profiles';
import { loadSpec } from '../../conformance/spec';
import { mapArguments, parseToolMap } from '../../conformance/toolmap';
import { toJUnit } from '../../conformance/report';

describe('429 handling', () => {
  it('reads Retry-After as seconds or an HTTP date', () => {
    expect(retryAfterMs('3')).toBe(3000);
    expect(retryAfterMs(' 0 ')).toBe(0);
    expect(retryAfterMs('Wed, 21 Oct 2015 07:28:10 GMT', Date.parse('Wed, 21 Oct 2015 07:28:00 GMT'))).toBe(10_000);
    expect(retryAfterMs(undefined)).toBeUndefined();
    expect(retryAfterMs('soon')).toBeUndefined();
  });

  it('waits for Retry-After and sends the same request again; returns the last 429 when attempts run out', async () => {
    let calls = 0;
    const bodies: string[] = [];
    const server = http.createServer((req, res) => {
      let b = '';
      req.on('data', (c: Buffer) => (b += c.toString()));
      req.on('end', () => {
        bodies.push(b);
        calls++;
        if (calls <= 2) res.writeHead(429, { 'Retry-After': '2' }).end();
        else res.writeHead(200, { 'Content-Type': 'application/json' }).end('{"ok":true}');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
    const waits: number[] = [];
    try {
      const c = createClient(url, 5000, { attempts: 5, maxWaitMs: 60_000, defaultWaitMs: 1000, onWait: (ms) => waits.push(ms), sleep: async () => undefined });
      const res = await c.send({ method: 'POST', headers: [['Content-Type', 'application/json']], body: '{"n":1}' });
      expect({ status: res.status, body: res.body, waits, bodies }).toEqual({ status: 200, body: '{"ok":true}', waits: [2000, 2000], bodies: ['{"n":1}', '{"n":1}', '{"n":1}'] });
      c.close();
      calls = -10;
      const limited = createClient(url, 5000, { attempts: 2, maxWaitMs: 500, defaultWaitMs: 1000, onWait: (ms) => waits.push(ms), sleep: async () => undefined });
      const last = await limited.send({ method: 'POST', headers: [], body: '{}' });
      expect({ status: last.status, waits: waits.slice(2) }).toEqual({ status: 429, waits: [500, 500] });
      limited.close();
    } finally {
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});

describe('in-band rate limits (the rate_limited tool result)', () => {
  const sse = (msg: unknown) => ({ status: 200, headers: { 'content-type': 'text/event-stream' }, body: `event: message\ndata: ${JSON.stringify(msg)}\n\n` });
  const limitedResult = (ms?: number) => ({ jsonrpc: '2.0', id: 1, result: { isError: true, content: [{ type: 'text', text: 'Too many requests' }], structuredContent: { status: 'rate_limited', code: 'rate_limited', message: 'x', ...(ms === undefined ? {} : { retry_after_ms: ms }) } } });
  it('reads retry_after_ms from a rate_limited tool result, in JSON or SSE; anything else is not a rate limit', () => {
    expect(inBandRateLimitMs(sse(limitedResult(4321)))).toBe(4321);
    expect(inBandRateLimitMs({ status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify(limitedResult(0)) })).toBe(0);
    expect(inBandRateLimitMs(sse(limitedResult()))).toBe(1000);
    expect(inBandRateLimitMs(sse({ jsonrpc: '2.0', id: 1, result: { isError: true, content: [], structuredContent: { status: 'forbidden', code: 'rate_limited_words' } } }))).toBeUndefined();
    expect(inBandRateLimitMs(sse({ jsonrpc: '2.0', id: 1, result: { content: [{ type: 'text', text: '[{"status":"rate_limited"}]' }] } }))).toBeUndefined();
    expect(inBandRateLimitMs({ status: 400, headers: {}, body: JSON.stringify(limitedResult(5)) })).toBeUndefined();
  });

  it('waits retry_after_ms and sends the same request again', async () => {
    let calls = 0;
    const server = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        calls++;
        if (calls === 1) res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(limitedResult(1500)));
        else res.writeHead(200, { 'Content-Type': 'application/json' }).end('{"ok":true}');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const waits: number[] = [];
    try {
      const c = createClient(`http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, 5000, { attempts: 3, maxWaitMs: 60_000, defaultWaitMs: 1000, onWait: (ms) => waits.push(ms), sleep: async () => undefined });
      const res = await c.send({ method: 'POST', headers: [], body: '{}' });
      expect({ body: res.body, waits, calls }).toEqual({ body: '{"ok":true}', waits: [1500], calls: 2 });
      c.close();
    } finally {
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});

describe('profiles', () => {
  it('puts every rule of the spec in exactly one profile', () => {
    const spec = loadSpec();
    const ids = [...spec.checkIds, ...Object.keys(spec.protocol.results).map((k) => `results.${k}`)];
    expect(ids.filter((r) => { try { profileOf(r); return false; } catch { return true; } })).toEqual([]);
    expect(new Set(knownRules()).size).toBe(knownRules().length);
    expect(profileOf('sql.stacked')).toBe('sql-gateway');
    expect(() => profileOf('NO-SUCH-RULE')).toThrow('belongs to no profile');
  });
  it('parses --profile values, repeated or comma-separated; unknown names are errors', () => {
    expect(parseProfiles(undefined)).toEqual(['mcp-stateless', 'interlock-v1']);
    expect(parseProfiles(['sql-gateway,mcp-stateless', 'sql-gateway'])).toEqual(['sql-gateway', 'mcp-stateless']);
    expect(() => parseProfiles(['mcp'])).toThrow(`unknown profile "mcp" (profiles: ${PROFILES.join(', ')})`);
  });
});

describe('tool maps', () => {
  it('renames, drops and adds arguments per role', () => {
    const m = parseToolMap({ tools: { query: 'execute_sql', list: 'list_tables' }, arguments: { query: { sql: 'statement', source_id: null } }, fixed: { query: { database: 'main' } } });
    expect(mapArguments(m, 'query', { sql: 'SELECT 1', source_id: 'x', params: undefined })).toEqual({ statement: 'SELECT 1', database: 'main' });
    expect(() => parseToolMap({ tools: { run: 'x' } })).toThrow('tool map: unknown role "run" (roles: list, query, describe)');
    expect(() => parseToolMap({ tool: {} })).toThrow('tool map: unknown member "tool"');
    expect(() => parseToolMap({ arguments: { query: { sql: 1 } } })).toThrow('tool map: arguments.query.sql must be a string or null');
  });
});

describe('JUnit report', () => {
  it('has one testsuite per profile and one testcase per rule, failures carrying escaped text', () => {
    const xml = toJUnit([
      { rule: 'HOST', profile: 'mcp-stateless', passed: true },
      { rule: 'AUTH', profile: 'interlock-v1', passed: false, failure: 'expected <401> & "Bearer"\u0001' },
      { rule: 'TOOL-ARGUMENTS', profile: 'mcp-stateless', passed: true, skipped: 'needs --api-key' },
    ]);
    expect(xml).toBe(
      [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<testsuites name="interlock-conformance" tests="3" failures="1" skipped="1">',
        '  <testsuite name="mcp-stateless" tests="2" failures="0" skipped="1">',
        '    <testcase classname="mcp-stateless" name="HOST"/>',
        '    <testcase classname="mcp-stateless" name="TOOL-ARGUMENTS"><skipped message="needs --api-key"/></testcase>',
        '  </testsuite>',
        '  <testsuite name="interlock-v1" tests="1" failures="1" skipped="0">',
        '    <testcase classname="interlock-v1" name="AUTH"><failure message="rule AUTH failed">expected &lt;401&gt; &amp; &quot;Bearer&quot;</failure></testcase>',
        '  </testsuite>',
        '</testsuites>',
        '',
      ].join('\n'),
    );
  });
});
