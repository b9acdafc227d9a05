/**
 * Rows are serialised once (issue 13): the wire text of a query result, with the rows spliced in
 * from the text item's serialisation, is byte-for-byte JSON.stringify of the message.
 */
import fc from 'fast-check';
import { serializeMessage, serializeMessageForWire, renderOutcome } from '../../../src/protocol/tool-results';
import { queryResult } from '../../../src/pipeline/query';
import { rowsText, serializedRows } from '../../../src/pipeline/rows-json';
import { toolsListResult } from '../../../src/protocol/envelopes';
import { hitOutcome, isStoredOutcome, type CachedResult } from '../../../src/pipeline/cache';

const value = fc.oneof(fc.string(), fc.string({ unit: 'grapheme' }), fc.integer(), fc.double({ noNaN: true }), fc.boolean(), fc.constant(null), fc.constant('"rows":"x"'), fc.constant('\u0000interlock-rows-'));
const rows = fc.array(fc.dictionary(fc.string({ maxLength: 8 }), value, { maxKeys: 5 }), { maxLength: 8 });

test('serializeMessage of a query result is exactly JSON.stringify of the message', () => {
  fc.assert(
    fc.property(rows, fc.boolean(), fc.boolean(), fc.array(fc.string(), { maxLength: 3 }), (rs, truncated, cached, masked) => {
      const out = renderOutcome(queryResult(rs, truncated, cached, masked), 'handshake', '2025-11-25', 'req-1');
      const msg = { jsonrpc: '2.0', id: 7, result: out.kind === 'result' ? out.result : null };
      expect(serializedRows(rs)).toBe(JSON.stringify(rs));
      expect(serializeMessage(msg)).toBe(JSON.stringify(msg));
    }),
    { numRuns: 300 },
  );
});

test('the rows of one result are stringified once, however often the message is serialised', () => {
  const rs = [{ a: 1, b: 'x' }];
  const spy = jest.spyOn(JSON, 'stringify');
  try {
    const r = queryResult(rs, false, false, []);
    const msg = { jsonrpc: '2.0', id: 1, result: { content: r.kind === 'result' ? r.content : [], structuredContent: r.kind === 'result' ? r.structuredContent : {} } };
    serializeMessage(msg);
    serializeMessage(msg);
    expect(spy.mock.calls.filter((c) => c[0] === rs)).toHaveLength(1);
  } finally {
    spy.mockRestore();
  }
  expect(rowsText(rs)).toBe('[{"a":1,"b":"x"}]');
});

test('messages without remembered rows are plain JSON.stringify', () => {
  const msg = { jsonrpc: '2.0', id: 1, result: { structuredContent: { rows: [{ a: 1 }] } } };
  expect(serializeMessage(msg)).toBe(JSON.stringify(msg));
  expect(serializeMessage({ jsonrpc: '2.0', id: 1, error: { code: -1, message: 'x' } })).toBe('{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}}');
});

test('tools/list: the result is built and serialised once per registry; the wire text equals JSON.stringify', () => {
  const tools = { list: jest.fn(() => [{ name: 'a', description: 'd', inputSchema: { type: 'object' } }]) };
  const r1 = toolsListResult(tools);
  const r2 = toolsListResult(tools);
  expect(r2).toBe(r1);
  expect(tools.list).toHaveBeenCalledTimes(1);
  expect(r1).toMatchObject({ tools: [{ name: 'a' }], resultType: 'complete' });
  for (const id of [1, 'x"y', 0]) {
    const msg = { jsonrpc: '2.0', id, result: r1 };
    expect(serializeMessage(msg)).toBe(JSON.stringify(msg));
  }
  // Anything else around the result is serialised in full.
  const odd = { jsonrpc: '2.0', id: 1, result: r1, extra: true };
  expect(serializeMessage(odd)).toBe(JSON.stringify(odd));
});

test('the wire form is the UTF-8 of serializeMessage: the string when short, the bytes when long, tools/list as the id text then precomputed bytes', () => {
  const bytes = (w: string | Buffer | readonly [string, Buffer]) => (typeof w === 'string' ? Buffer.from(w, 'utf8') : Buffer.isBuffer(w) ? w : Buffer.concat([Buffer.from(w[0], 'utf8'), w[1]]));
  const tools = { list: () => Array.from({ length: 20 }, (_, i) => ({ name: `t${i}`, description: 'déjà vu ✓ "quoted"', inputSchema: { type: 'object' } })) };
  const list = toolsListResult(tools);
  for (const id of [1, 'x"y', 'ünï', 0, -5]) {
    const msg = { jsonrpc: '2.0', id, result: list };
    const wire = serializeMessageForWire(msg);
    expect(Array.isArray(wire)).toBe(true);
    expect(bytes(wire).equals(Buffer.from(JSON.stringify(msg), 'utf8'))).toBe(true);
  }
  const short = { jsonrpc: '2.0', id: 1, result: {} };
  expect(serializeMessageForWire(short)).toBe('{"jsonrpc":"2.0","id":1,"result":{}}');
  fc.assert(
    fc.property(rows, fc.integer(), (rs, id) => {
      const out = renderOutcome(queryResult(rs, false, false, []), 'handshake', '2025-11-25', 'req-1');
      const msg = { jsonrpc: '2.0', id, result: out.kind === 'result' ? out.result : null };
      const wire = serializeMessageForWire(msg);
      const expected = JSON.stringify(msg);
      expect(typeof wire === 'string').toBe(expected.length < 1000);
      expect(bytes(wire).equals(Buffer.from(expected, 'utf8'))).toBe(true);
    }),
    { numRuns: 200 },
  );
});
describe('a cached read\'s stored answer (issue 28): rendered and serialised on its first hit only', () => {
  const wireText = (w: ReturnType<typeof serializeMessageForWire>): string => (typeof w === 'string' ? w : Buffer.isBuffer(w) ? w.toString('utf8') : w[0] + w[1].toString('utf8'));

  test('every hit on an entry gets the same outcome and envelope; the wire text is JSON.stringify of each message', () => {
    fc.assert(
      fc.property(rows, fc.boolean(), fc.array(fc.string(), { maxLength: 3 }), (rs, truncated, masked) => {
        const entry: CachedResult = { rows: rs, truncated, truncatedBy: truncated ? 'max_rows' : null, maskedColumns: masked };
        const build = jest.fn(() => queryResult(entry.rows, entry.truncated, true, entry.maskedColumns, entry.truncatedBy));
        const o1 = hitOutcome(entry, build);
        const o2 = hitOutcome(entry, build);
        expect(o2).toBe(o1);
        expect(build).toHaveBeenCalledTimes(1);
        expect(isStoredOutcome(o1)).toBe(true);
        const a = renderOutcome(o1, 'handshake', '2025-11-25', 'req-1');
        const b = renderOutcome(o2, 'modern', '2026-07-28', 'req-2');
        expect(a.kind === 'result' && b.kind === 'result' && a.result === b.result).toBe(true);
        // The same text as an answer rendered afresh, for any id.
        const fresh = renderOutcome(queryResult(rs, truncated, true, masked, entry.truncatedBy), 'handshake', '2025-11-25', 'req-3');
        for (const id of [1, 'x"y\u2028', 0]) {
          const msg = { jsonrpc: '2.0', id, result: a.kind === 'result' ? a.result : null };
          expect(serializeMessage(msg)).toBe(JSON.stringify(msg));
          expect(wireText(serializeMessageForWire(msg))).toBe(JSON.stringify(msg));
          expect(JSON.stringify(msg)).toBe(JSON.stringify({ ...msg, result: fresh.kind === 'result' ? fresh.result : null }));
        }
      }),
      { numRuns: 200 },
    );
  });

  test('a stored answer is serialised once, however many hits; an ordinary result is not kept', () => {
    const entry: CachedResult = { rows: [{ a: 1, b: 'x' }], truncated: false, maskedColumns: [] };
    const o = hitOutcome(entry, () => queryResult(entry.rows, false, true, []));
    const spy = jest.spyOn(JSON, 'stringify');
    try {
      for (let id = 0; id < 5; id++) {
        const r = renderOutcome(o, 'handshake', '2025-11-25', `req-${id}`);
        serializeMessageForWire({ jsonrpc: '2.0', id, result: r.kind === 'result' ? r.result : null });
      }
      // Once for the envelope on the first hit; after that only each id.
      expect(spy.mock.calls.filter((c) => typeof c[0] === 'object' && c[0] !== null && 'content' in (c[0] as object))).toHaveLength(1);
    } finally {
      spy.mockRestore();
    }
    const plain = queryResult(entry.rows, false, true, []);
    expect(isStoredOutcome(plain)).toBe(false);
    const r1 = renderOutcome(plain, 'handshake', '2025-11-25', 'req-1');
    const r2 = renderOutcome(plain, 'handshake', '2025-11-25', 'req-1');
    expect(r1.kind === 'result' && r2.kind === 'result' && r1.result !== r2.result).toBe(true);
  });
});

describe('remembered rows in any other shape (h28l)', () => {
  test('every other shape around remembered rows is still exactly JSON.stringify', () => {
    const rs = [{ a: 1, b: 'x"y' }];
    const r = queryResult(rs, true, false, ['b'], 'max_bytes');
    const result = r.kind === 'result' ? { content: r.content, structuredContent: r.structuredContent } : {};
    const sc = (result as { structuredContent: Record<string, unknown> }).structuredContent;
    const shapes: unknown[] = [
      { jsonrpc: '2.0', id: 'x"y\u2028', result: { ...result, isError: false, resultType: 'complete' } },
      { jsonrpc: '2.0', id: null, result },
      { jsonrpc: '2.0', id: -0, result },
      { jsonrpc: '2.0', id: Number.NaN, result },
      { jsonrpc: '2.0', id: undefined, result },
      { id: 1, jsonrpc: '2.0', result },
      { jsonrpc: '2.0', id: 1, result, extra: 1 },
      { jsonrpc: '2.0', id: 1, result: { ...result, skipped: undefined, fn: () => 1, when: new Date(0) } },
      { jsonrpc: '2.0', id: 1, result: { ...result, structuredContent: { ...sc, gone: undefined, n: 2, list: ['a', null] } } },
      { jsonrpc: '2.0', id: 1, result: { ...result, structuredContent: { ...sc, toJSON: () => ({ other: true }) } } },
      { jsonrpc: '2.0', id: 1, result: { ...result, toJSON: () => 'replaced' } },
      { jsonrpc: '2.0', id: 1, result: { structuredContent: sc, content: (result as { content: unknown }).content } },
    ];
    for (const msg of shapes) expect(serializeMessage(msg)).toBe(JSON.stringify(msg));
  });
});
