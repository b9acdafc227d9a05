/**
 * modernOverCapacityAnswer (src/protocol/dispatch.ts, issue 29): the refusal at capacity of the
 * modern dialect filled into a template must be, for any JSON-RPC id, request id and wait, exactly
 * what the normal path writes: renderOutcome of the rate_limited refusal, errorResponse, then
 * serializeMessageForWire; status and Retry-After as renderOutcome gives them.
 */
import fc from 'fast-check';
import { modernOverCapacityAnswer, newRequestId } from '../../../src/protocol/dispatch';
import { renderOutcome, serializeMessageForWire } from '../../../src/protocol/tool-results';
import { errorResponse } from '../../../src/transport/jsonrpc';

const MESSAGE = 'The gateway is at capacity; wait retry_after_ms milliseconds before trying again.';
const MODERN = '2026-07-28';

/** The normal path's answer (dispatch.ts answerCall) for the same refusal. */
function normal(id: string | number, requestId: string, retryAfterMs: number) {
  const r = renderOutcome({ kind: 'refusal', code: 'rate_limited', message: MESSAGE, extra: { retry_after_ms: retryAfterMs } }, 'modern', MODERN, requestId);
  if (r.kind !== 'error') throw new Error('not an error');
  return { status: r.status, text: serializeMessageForWire(errorResponse(id, r.error)), headers: r.headers };
}

test('the template gives the normal path’s status, headers and bytes for any id, request id and wait', () => {
  fc.assert(
    fc.property(fc.oneof(fc.string(), fc.string({ unit: 'grapheme' }), fc.integer(), fc.constantFrom('"', '\\', '\u2028', 'il_id_slot_5d1c', '987654321012')), fc.integer({ min: 1, max: 3_600_000 }), (id, ms) => {
      const requestId = newRequestId();
      expect(modernOverCapacityAnswer(MODERN, id, requestId, ms)).toEqual(normal(id, requestId, ms));
    }),
    { numRuns: 300 },
  );
});

test('a concrete refusal, spelled out', () => {
  expect(modernOverCapacityAnswer(MODERN, 'm-1', 'req_abc', 1000)).toEqual({
    status: 429,
    text: `{"jsonrpc":"2.0","id":"m-1","error":{"code":-32602,"message":"${MESSAGE}","data":{"status":"rate_limited","code":"rate_limited","message":"${MESSAGE}","retry_after_ms":1000,"request_id":"req_abc"}}}`,
    headers: { 'Retry-After': '1' },
  });
});
