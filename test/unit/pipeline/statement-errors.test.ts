/**
 * What an agent learns from a statement the source refused (new-user pass, spec/errors-v1.json
 * statementSqlstates): the SQLSTATE, its condition name and, for class 42, the column, relation,
 * function or operator the error names only when the agent's own statement wrote that name. Never
 * PostgreSQL's text: values from the data, names from a view or rewrite, hosts.
 */
import { initSqlParser } from '../../../src/sql/parser';
import { mapConnectorError } from '../../../src/pipeline/07-execute';
import { statementErrorObject } from '../../../src/pipeline/statement-errors';
import { SourceError } from '../../../src/sources/postgres/errors';
import { renderOutcome } from '../../../src/protocol/tool-results';

beforeAll(async () => initSqlParser());

/** A connector failure as the PostgreSQL connector throws it: SourceError with the server error as its hidden cause. */
const failure = (sqlState: string, message: string) => new SourceError('execution_failed', { sqlState, cause: { code: sqlState, message, severity: 'ERROR' } });

const MSG = (what: string) => `The statement failed in the source database: ${what}. Correct the statement before trying again.`;

test('22P02 gives the SQLSTATE and condition name, never the value PostgreSQL quotes', () => {
  const o = mapConnectorError(failure('22P02', 'invalid input syntax for type integer: "4111-1111-secret"'), "SELECT 1 FROM t WHERE id = 'abc'");
  expect(o).toEqual({ kind: 'tool_error', code: 'statement_failed', message: MSG('data exception, invalid_text_representation (SQLSTATE 22P02)'), details: { sqlstate: '22P02', condition: 'invalid_text_representation' } });
  expect(JSON.stringify(o)).not.toContain('secret');
});

test('23505 on a statement: SQLSTATE and condition, no constraint or key text', () => {
  const o = mapConnectorError(failure('23505', 'duplicate key value violates unique constraint "hidden_idx"'), 'INSERT INTO t VALUES (1)');
  expect(o).toEqual({ kind: 'tool_error', code: 'statement_failed', message: MSG('integrity constraint violation, unique_violation (SQLSTATE 23505)'), details: { sqlstate: '23505', condition: 'unique_violation' } });
});

test('class 42: the column, relation, function or operator the agent wrote is named', () => {
  const cases: Array<[string, string, string, { kind: string; name: string }]> = [
    ['42703', 'column "nosuch" does not exist', 'SELECT nosuch FROM t', { kind: 'column', name: 'nosuch' }],
    ['42703', 'column a.nosuch does not exist', 'SELECT a.NoSuch FROM t a', { kind: 'column', name: 'a.nosuch' }],
    ['42703', 'column "MixedCase" does not exist', 'SELECT "MixedCase" FROM t', { kind: 'column', name: 'MixedCase' }],
    ['42702', 'column reference "id" is ambiguous', 'SELECT id FROM a, b', { kind: 'column', name: 'id' }],
    ['42803', 'column "artist.name" must appear in the GROUP BY clause or be used in an aggregate function', 'SELECT name, count(*) FROM artist', { kind: 'column', name: 'artist.name' }],
    ['42P01', 'relation "gone" does not exist', 'SELECT 1 FROM gone', { kind: 'relation', name: 'gone' }],
    ['42P01', 'missing FROM-clause entry for table "x"', 'SELECT x.a FROM t', { kind: 'relation', name: 'x' }],
    ['42883', 'function lower(integer) does not exist', 'SELECT lower(1)', { kind: 'function', name: 'lower' }],
    ['42883', 'operator does not exist: character varying = integer', 'SELECT 1 FROM artist WHERE name = 1', { kind: 'operator', name: '=' }],
  ];
  for (const [code, message, sql, object] of cases) {
    const o = mapConnectorError(failure(code, message), sql) as { details: { object?: unknown; sqlstate: string } };
    expect([code, sql, o.details]).toEqual([code, sql, expect.objectContaining({ sqlstate: code, object })]);
  }
  expect(mapConnectorError(failure('42883', 'function lower(integer) does not exist'), 'SELECT lower(1)')).toEqual({
    kind: 'tool_error',
    code: 'statement_failed',
    message: MSG('syntax error or access rule violation, undefined_function (SQLSTATE 42883); function "lower"'),
    details: { sqlstate: '42883', condition: 'undefined_function', object: { kind: 'function', name: 'lower' } },
  });
});

test('class 42: a name the agent did not write (a view definition, a rewrite, a string constant) is not given', () => {
  const cases: Array<[string, string, string]> = [
    // A hidden base column or relation from a view's definition or a row-rule view.
    ['42703', 'column "ssn" does not exist', 'SELECT name FROM v'],
    ['42P01', 'relation "interlock_rows.r_0123abcd" does not exist', 'SELECT name FROM customer'],
    // Qualified: every part must be the agent's.
    ['42703', 'column secret_schema.name does not exist', 'SELECT name FROM t'],
    // In a string constant only: not an identifier the agent wrote.
    ['42703', 'column "ssn" does not exist', "SELECT name FROM t WHERE note = 'ssn'"],
    // Quoted and case: "SSN" is not ssn.
    ['42703', 'column "SSN" does not exist', 'SELECT ssn FROM t'],
    // An operator the agent did not write.
    ['42883', 'operator does not exist: text ~~* integer', 'SELECT 1 FROM t WHERE a = 1'],
    // A message in another language names nothing.
    ['42703', 'la columna «nosuch» no existe', 'SELECT nosuch FROM t'],
  ];
  for (const [code, message, sql] of cases) {
    const o = mapConnectorError(failure(code, message), sql) as unknown as { message: string; details: Record<string, unknown> };
    expect([code, message, o.details.object]).toEqual([code, message, undefined]);
    expect(o.details.sqlstate).toBe(code);
    for (const w of ['ssn', 'SSN', 'interlock_rows', 'secret_schema', '~~*', 'customer', 'columna']) expect([sql, o.message.includes(w) && !sql.includes(w)]).toEqual([sql, false]);
  }
  // 42501 is not the statement's fault (task hnu4a item 2): the refusal source_permission_denied, naming nothing, even the agent's own relation.
  expect(mapConnectorError(failure('42501', 'permission denied for table customer'), 'SELECT name FROM customer')).toEqual({ kind: 'refusal', code: 'source_permission_denied' });
  // Without the agent's text (other callers) nothing is named.
  expect((mapConnectorError(failure("42703", "column \"nosuch\" does not exist")) as unknown as { details: Record<string, unknown> }).details).toEqual({ sqlstate: '42703', condition: 'undefined_column' });
});

test('a class the agent is not told stays opaque; a SQLSTATE without a listed condition keeps its class', () => {
  expect(mapConnectorError(failure('XX000', 'internal at host 10.0.0.1'), 'SELECT 1')).toEqual({ kind: 'tool_error', code: 'tool_execution_failed' });
  expect(mapConnectorError(failure('08006', 'connection failure'), 'SELECT 1')).toEqual({ kind: 'tool_error', code: 'tool_execution_failed' });
  expect(mapConnectorError(failure('22ZZZ', 'x'), 'SELECT 1')).toEqual({ kind: 'tool_error', code: 'statement_failed', message: MSG('data exception (SQLSTATE 22ZZZ)'), details: { sqlstate: '22ZZZ' } });
});

test('statementErrorObject: an unscannable statement or a kind with no shape names nothing', () => {
  expect(statementErrorObject(['column'], 'column "a" does not exist', "SELECT 'unterminated")).toBeUndefined();
  expect(statementErrorObject([], 'column "a" does not exist', 'SELECT a')).toBeUndefined();
  expect(statementErrorObject(['column'], 42, 'SELECT a')).toBeUndefined();
});

test('rendered: structuredContent (2025-11-25), error.data (2025-06-18), tool result in the modern dialect', () => {
  const o = mapConnectorError(failure('42703', 'column "nosuch" does not exist'), 'SELECT nosuch FROM t');
  const data = { code: 'statement_failed', message: MSG('syntax error or access rule violation, undefined_column (SQLSTATE 42703); column "nosuch"'), sqlstate: '42703', condition: 'undefined_column', object: { kind: 'column', name: 'nosuch' }, request_id: 'req_1' };
  expect(renderOutcome(o, 'handshake', '2025-11-25', 'req_1')).toEqual({ kind: 'result', result: expect.objectContaining({ isError: true, structuredContent: data, content: [{ type: 'text', text: `Invalid call (statement_failed): ${data.message}` }] }) });
  expect(renderOutcome(o, 'handshake', '2025-06-18', 'req_1')).toEqual({ kind: 'error', status: 200, error: { code: -32602, message: `Invalid params: ${data.message}`, data } });
  expect(renderOutcome(o, 'modern', '2026-07-28', 'req_1')).toEqual({ kind: 'result', result: expect.objectContaining({ isError: true, structuredContent: data }) });
});
