/**
 * Rows are serialised once (issue 13): the wire text of a query result, with the rows spliced in
 * from the text item's serialisation, is byte-for-byte JSON.stringify of the message.
 */
import fc from 'fast-check';
import { serializeMessage, serializeMessageForWire, renderOutcome } from '../../../src/protocol/tool-results';
import { queryResult } from '../../../src/pipeline/query';
import { rowsText, serializedRows } from '../../../src/pipeline/rows-json';
import { toolsListResult } from '../../../src/protocol/envelopes';

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