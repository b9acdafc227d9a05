import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { jsonNestsDeeperThan, MAX_JSON_DEPTH } from '../../../src/transport/json-depth';
import { admit } from '../../../src/transport/admission';
import { defaultOriginPolicy } from '../../../src/transport/http-headers';
import { jsonBody } from '../../../src/http/common';

const nest = (n: number, open = '[', close = ']') => open.repeat(n) + close.repeat(n);
const objects = (n: number) => '{"a":'.repeat(n) + '1' + '}'.repeat(n);
const HEADERS = { host: '127.0.0.1:8787', 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
const callWithMeta = (x: string) => `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"interlock_list_sources","_meta":{"x":${x}},"arguments":{}}}`;

describe('jsonNestsDeeperThan', () => {
  test('counts arrays and objects; the limit itself is accepted, one more level refused', () => {
    expect(jsonNestsDeeperThan(nest(MAX_JSON_DEPTH))).toBe(false);
    expect(jsonNestsDeeperThan(nest(MAX_JSON_DEPTH + 1))).toBe(true);
    expect(jsonNestsDeeperThan(objects(MAX_JSON_DEPTH))).toBe(false);
    expect(jsonNestsDeeperThan(objects(MAX_JSON_DEPTH + 1))).toBe(true);
    expect(jsonNestsDeeperThan('[{"a":[{}]}]', 3)).toBe(true);
    expect(jsonNestsDeeperThan('[{"a":[{}]}]', 4)).toBe(false);
  });
  test('brackets inside strings do not count, escaped quotes and backslashes are handled', () => {
    expect(jsonNestsDeeperThan(`["${'['.repeat(1000)}"]`, 1)).toBe(false);
    expect(jsonNestsDeeperThan(`["\\"${'{'.repeat(10)}"]`, 1)).toBe(false);
    // "\\" ends with an escaped backslash: the quote after it closes the string, so the brackets count.
    expect(jsonNestsDeeperThan(`["\\\\", [[]]]`, 2)).toBe(true);
    expect(jsonNestsDeeperThan(`["\\\\\\"[[[["]`, 1)).toBe(false);
  });
  test('sibling containers do not add up; a stray closer stops the scan (JSON.parse rejects it there)', () => {
    expect(jsonNestsDeeperThan('[' + '[],'.repeat(10_000) + '[]]', 2)).toBe(false);
    expect(jsonNestsDeeperThan(']' + nest(100), 10)).toBe(false);
    expect(() => JSON.parse(']' + nest(100))).toThrow();
  });
  test('agrees with a parse of the value for random nestings', () => {
    const depthOf = (v: unknown): number => (v && typeof v === 'object' ? 1 + Math.max(0, ...Object.values(v as object).map(depthOf)) : 0);
    let seed = 7;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
    const gen = (d: number): unknown => {
      if (d === 0 || rnd() < 0.2) return rnd() < 0.5 ? 'a"[{\\' : 1;
      return rnd() < 0.5 ? [gen(d - 1), gen(d - 1)] : { '[k': gen(d - 1), '}': gen(d - 1) };
    };
    for (let i = 0; i < 200; i++) {
      const text = JSON.stringify(gen(12));
      const d = depthOf(JSON.parse(text));
      expect(jsonNestsDeeperThan(text, d)).toBe(false);
      if (d > 0) expect(jsonNestsDeeperThan(text, d - 1)).toBe(true);
    }
  });
});

describe('POST /mcp admission: a body nested deeper than the limit is rule JSON (400, -32700, id null)', () => {
  test('524 000 levels in _meta under a 1 MiB body: refused quickly, without JSON.parse', () => {
    const body = callWithMeta(nest(524_000));
    expect(Buffer.byteLength(body)).toBeLessThan(1024 * 1024);
    const t0 = process.hrtime.bigint();
    const r = admit({ method: 'POST', headers: HEADERS, body, scheme: 'http' }, defaultOriginPolicy());
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    expect(r.kind).toBe('reply');
    if (r.kind !== 'reply') return;
    expect({ status: r.status, rule: r.rule, body: r.body }).toEqual({
      status: 400,
      rule: 'JSON',
      body: { jsonrpc: '2.0', id: null, error: { code: -32700, message: `Parse error: the body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels` } },
    });
    // JSON.parse of this body took ~1.1 s; the scan stops after 64 + ~100 characters.
    expect(ms).toBeLessThan(50);
  });
  test('the deepest accepted _meta value is still admitted', () => {
    // message { params { _meta { x … : four levels of envelope around x.
    const r = admit({ method: 'POST', headers: HEADERS, body: callWithMeta(nest(MAX_JSON_DEPTH - 3)), scheme: 'http' }, defaultOriginPolicy());
    expect(r.kind).toBe('admitted');
    const over = admit({ method: 'POST', headers: HEADERS, body: callWithMeta(nest(MAX_JSON_DEPTH - 2)), scheme: 'http' }, defaultOriginPolicy());
    expect(over.kind === 'reply' && [over.status, over.rule]).toEqual([400, 'JSON']);
  });
});

describe('jsonBody (the /v1, legacy, admin and console routes)', () => {
  let server: http.Server;
  let url: string;
  beforeAll(async () => {
    const app = express();
    app.post('/x', ...jsonBody(), (req, res) => res.json({ ok: true }));
    server = http.createServer(app);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/x`;
  });
  afterAll(async () => new Promise<void>((r) => server.close(() => r())));

  test('a deep body → 400 invalid_json; the limit → 200', async () => {
    const deep = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: `{"a":${nest(524_000)}}`, signal: AbortSignal.timeout(5000) });
    expect(deep.status).toBe(400);
    expect(await deep.json()).toEqual({ error: 'invalid_request', code: 'invalid_json', message: `The body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels` });
    const ok = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: `{"a":${nest(MAX_JSON_DEPTH - 1)}}`, signal: AbortSignal.timeout(5000) });
    expect(ok.status).toBe(200);
  });
});
