/**
 * The complete envelope (contract: every successful result has resultType "complete" and
 * _meta io.modelcontextprotocol/serverInfo): the same JSON as before, with the serverInfo and a
 * result's default `_meta` made once and shared, frozen (issue 28 item 3).
 */
import { complete, serverInfo } from '../../../src/protocol/envelopes';
import protocol from '../../../spec/protocol-v1.json';

const KEY = protocol.meta.serverInfo;

test('a result without _meta gets the one shared, frozen _meta; its JSON is unchanged', () => {
  const a = complete({ content: [] });
  const b = complete({ content: [{ type: 'text', text: 'x' }], structuredContent: { n: 1 } });
  expect(a._meta).toBe(b._meta);
  expect(Object.isFrozen(a._meta)).toBe(true);
  expect(JSON.parse(JSON.stringify(a))).toEqual({ content: [], resultType: 'complete', _meta: { [KEY]: serverInfo() } });
  expect(JSON.stringify(b)).toBe(`{"content":[{"type":"text","text":"x"}],"structuredContent":{"n":1},"resultType":"complete","_meta":${JSON.stringify({ [KEY]: serverInfo() })}}`);
});

test('a result with its own _meta keeps it and gains serverInfo last; the input is not edited', () => {
  const own = { trace: 't1', [KEY]: { name: 'spoof' } };
  const r = complete({ content: [], _meta: own });
  expect(r._meta).toEqual({ trace: 't1', [KEY]: serverInfo() });
  expect(Object.keys(r._meta as object)).toEqual(['trace', KEY]);
  expect(own).toEqual({ trace: 't1', [KEY]: { name: 'spoof' } });
});
