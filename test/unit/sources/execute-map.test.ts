/**
 * Pipeline step 7's mapping of connector failures to contract outcomes (issue 10): the new
 * refusals carry their retry hints; a temp_file_limit failure names its SQLSTATE; XX000 stays opaque.
 */
import { mapConnectorError } from '../../../src/pipeline/07-execute';
import { SourceError } from '../../../src/sources/postgres/errors';
import { renderOutcome } from '../../../src/protocol/tool-results';
import { httpOutcome } from '../../../src/http/common';

describe('mapConnectorError', () => {
  test('source_busy and concurrency_limited are refusals with retry_after_ms; result_too_large has none', () => {
    expect(mapConnectorError(new SourceError('source_busy', { retryAfterMs: 1000 }))).toEqual({ kind: 'refusal', code: 'source_busy', extra: { retry_after_ms: 1000 } });
    expect(mapConnectorError(new SourceError('concurrency_limited', { retryAfterMs: 1000 }))).toEqual({ kind: 'refusal', code: 'concurrency_limited', extra: { retry_after_ms: 1000 } });
    expect(mapConnectorError(new SourceError('result_too_large'))).toEqual({ kind: 'refusal', code: 'result_too_large' });
  });

  test('program limits the statement passed (class 54, red-team F7) are statement_failed naming the class, not the opaque failure', () => {
    expect(mapConnectorError(new SourceError('execution_failed', { sqlState: '54000' }))).toEqual({
      kind: 'tool_error',
      code: 'statement_failed',
      message: 'The statement failed in the source database: program limit exceeded, program_limit_exceeded (SQLSTATE 54000). Correct the statement before trying again.',
      details: { sqlstate: '54000', condition: 'program_limit_exceeded' },
    });
    expect(mapConnectorError(new SourceError('execution_failed', { sqlState: '54023' }))).toMatchObject({ kind: 'tool_error', code: 'statement_failed' });
  });

  test('53400 (temp_file_limit) is statement_failed naming the SQLSTATE; XX000 is the opaque failure', () => {
    const temp = mapConnectorError(new SourceError('execution_failed', { sqlState: '53400' }));
    expect(temp).toMatchObject({ kind: 'tool_error', code: 'statement_failed' });
    expect((temp as { message: string }).message).toContain('SQLSTATE 53400');
    expect(mapConnectorError(new SourceError('execution_failed', { sqlState: 'XX000' }))).toEqual({ kind: 'tool_error', code: 'tool_execution_failed' });
  });

  test('the new codes have messages in spec/errors-v1.json', () => {
    for (const code of ['source_busy', 'concurrency_limited', 'result_too_large'] as const) expect(new SourceError(code).message.length).toBeGreaterThan(10);
    expect(new SourceError('concurrency_limited').contractCode).toBe('concurrency_limited');
  });
});

describe('lock_timeout (issue 22 item 6)', () => {
  test('55P03 answers statement_failed with reason lock_timeout and the spec message, not the opaque failure', () => {
    expect(mapConnectorError(new SourceError('execution_failed', { sqlState: '55P03' }))).toEqual({
      kind: 'tool_error',
      code: 'statement_failed',
      reason: 'lock_timeout',
      message: "The statement waited longer than the source's lock_timeout for a lock held by another session and was cancelled; nothing was changed. Retry later.",
    });
    // Other class-55 states stay opaque.
    expect(mapConnectorError(new SourceError('execution_failed', { sqlState: '55006' }))).toEqual({ kind: 'tool_error', code: 'tool_execution_failed' });
  });

  test('the reason reaches the agent in both dialects and on /v1, beside the code', () => {
    const o = mapConnectorError(new SourceError('execution_failed', { sqlState: '55P03' }));
    const handshake = renderOutcome(o, 'handshake', '2025-11-25', 'req_1');
    expect(handshake).toMatchObject({ kind: 'result', result: { isError: true, structuredContent: { code: 'statement_failed', reason: 'lock_timeout' } } });
    const old = renderOutcome(o, 'handshake', '2025-06-18', 'req_1');
    expect(old).toMatchObject({ kind: 'error', status: 200, error: { code: -32602, data: { code: 'statement_failed', reason: 'lock_timeout' } } });
    expect(httpOutcome(o, 'req_1')).toMatchObject({ status: 400, error: { error: 'invalid_request', code: 'statement_failed', reason: 'lock_timeout', request_id: 'req_1' } });
  });

  test('session_settings_mismatch is the unavailable refusal', () => {
    expect(mapConnectorError(new SourceError('session_settings_mismatch'))).toEqual({ kind: 'refusal', code: 'session_settings_mismatch' });
    const r = renderOutcome({ kind: 'refusal', code: 'session_settings_mismatch' }, 'modern', '2026-07-28', 'req_2');
    expect(r).toMatchObject({ kind: 'error', status: 503, error: { code: -32603, data: { status: 'unavailable', code: 'session_settings_mismatch', request_id: 'req_2' } } });
  });
});
