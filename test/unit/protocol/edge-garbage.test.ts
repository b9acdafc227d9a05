/**
 * h28e (issue 28 item 3): per-call objects cut from the answer and the dispatcher, each pinned to
 * the output of what it replaced.
 *  - completeResult builds a tool result's complete envelope in one literal: the same JSON, key
 *    order included, as complete() of the result resultOf built before (every shape: with and
 *    without structuredContent, isError true, false or absent), and the answer's bytes through
 *    renderOutcome + serializeMessage (rows spliced) are those of the former path;
 *  - InflightRegistry keeps one map per credential keyed by the JSON-RPC id (no key string, no
 *    closure per call): a caller cancels only its own ids, 1 and '1' stay apart, a later call
 *    reusing an id is not removed by the earlier one's removal, and the registry forgets a
 *    credential whose calls all ended.
 */
import fc from 'fast-check';
import { complete, completeResult } from '../../../src/protocol/envelopes';
import { renderOutcome, serializeMessage } from '../../../src/protocol/tool-results';
import { resultResponse } from '../../../src/transport/jsonrpc';
import { InflightRegistry } from '../../../src/protocol/dispatch';
import { queryResult } from '../../../src/pipeline/query';
import { jsonText } from '../../../src/sources/postgres/raw-json';
import type { ToolOutcome } from '../../../src/pipeline/types';

/** resultOf as it was before h28e: a result object, then complete()'s copy of it. */
function formerResultOf(o: Extract<ToolOutcome, { kind: 'result' }>): Record<string, unknown> {
  const r: Record<string, unknown> = { content: o.content };
  if (o.structuredContent !== undefined) r.structuredContent = o.structuredContent;
  if (o.isError) r.isError = true;
  return complete(r);
}

test('completeResult serialises as complete() of the former result, in every shape', () => {
  const content = [{ type: 'text' as const, text: 'x "y"' }];
  for (const structuredContent of [undefined, { a: 1, rows: [{ b: null }] }])
    for (const isError of [undefined, false, true]) {
      const o = { kind: 'result' as const, content, structuredContent, isError };
      const now = completeResult(content, structuredContent, isError);
      expect(JSON.stringify(now)).toBe(JSON.stringify(formerResultOf(o)));
      expect(Object.keys(now)).toEqual(Object.keys(formerResultOf(o)));
    }
});

test('property: a result outcome renders to the same bytes as before, rows spliced or not', () => {
  const value = fc.oneof(fc.string(), fc.integer(), fc.double({ noNaN: true }), fc.constant(null), fc.boolean());
  fc.assert(
    fc.property(fc.array(fc.dictionary(fc.string({ maxLength: 6 }), value, { maxKeys: 4 }), { maxLength: 4 }), fc.boolean(), fc.boolean(), fc.oneof(fc.integer(), fc.string({ maxLength: 8 })), (rows, truncated, masked, id) => {
      const o = queryResult(rows, truncated, false, masked ? ['customer.email'] : []) as Extract<ToolOutcome, { kind: 'result' }>;
      const rendered = renderOutcome(o, 'handshake', '2025-11-25', 'req_x');
      expect(rendered.kind).toBe('result');
      const now = serializeMessage(resultResponse(id, (rendered as { result: Record<string, unknown> }).result));
      expect(now).toBe(jsonText(resultResponse(id, formerResultOf(o))));
    }),
    { numRuns: 300 },
  );
});

test('InflightRegistry: a caller cancels only its own ids; 1 and "1" are apart; a reused id survives the earlier removal', () => {
  const r = new InflightRegistry();
  const seen: string[] = [];
  const a1 = (why: string) => seen.push(`a1:${why}`);
  const aS = (why: string) => seen.push(`a'1':${why}`);
  const b1 = (why: string) => seen.push(`b1:${why}`);
  const n1 = (why: string) => seen.push(`null1:${why}`);
  r.add('key-a', 1, a1);
  r.add('key-a', '1', aS);
  r.add('key-b', 1, b1);
  r.add(null, 1, n1);
  expect(r.size).toBe(4);
  expect(r.cancel('key-b', '1', 'x')).toBe(false);
  expect(r.cancel('key-a', '1', 'c1')).toBe(true);
  expect(r.cancel('', 1, 'c2')).toBe(true); // no credential and '' are one caller, as before
  expect(seen).toEqual(["a'1':c1", 'null1:c2']);
  // A second call reusing id 1 of key-a replaces the first; the first's removal leaves it.
  const a1Again = (why: string) => seen.push(`a1again:${why}`);
  r.add('key-a', 1, a1Again);
  expect(r.size).toBe(4);
  r.remove('key-a', 1, a1);
  expect(r.cancel('key-a', 1, 'c3')).toBe(true);
  expect(seen.at(-1)).toBe('a1again:c3');
  for (const [k, id, f] of [['key-a', 1, a1Again], ['key-a', '1', aS], ['key-b', 1, b1], [null, 1, n1]] as const) r.remove(k, id, f);
  expect(r.size).toBe(0);
  expect((r as unknown as { map: Map<string, unknown> }).map.size).toBe(0);
  expect(r.cancel('key-a', 1, 'c4')).toBe(false);
});
