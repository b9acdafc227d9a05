/**
 * Pipeline step 7's mapping of connector failures to contract outcomes (issue 10): the new
 * refusals carry their retry hints; a temp_file_limit failure names its SQLSTATE; XX000 stays opaque.
 */
import { mapConnectorError } from '../../../src/pipeline/07-execute';
import { SourceError } from '../../../src/sources/postgres/errors';

describe('mapConnectorError', () => {
  test('source_busy and concurrency_limited are refusals with retry_after_ms; result_too_large has none', () => {
    expect(mapConnectorError(new SourceError('source_busy', { retryAfterMs: 1000 }))).toEqual({ kind: 'refusal', code: 'source_busy', extra: { retry_after_ms: 1000 } });
    expect(mapConnectorError(new SourceError('concurrency_limited', { retryAfterMs: 1000 }))).toEqual({ kind: 'refusal', code: 'concurrency_limited', extra: { retry_after_ms: 1000 } });
    expect(mapConnectorError(new SourceError('result_too_large'))).toEqual({ kind: 'refusal', code: 'result_too_large' });
  });

  test('program limits the statement passed (class 54, red-team F7) are statement_failed naming the class, not the opaque failure', () => {
    expect(mapConnectorError(new SourceError('execution_failed', { sqlState: '54000' }))).toEqual({ kind: 'tool_error', code: 'statement_failed', message: 'The statement failed in the source database: program limit exceeded (SQLSTATE class 54).' });
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
