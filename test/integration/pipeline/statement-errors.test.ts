/**
 * What an agent gets through POST /mcp when its SQL fails on the source (new-user pass, with the
 * demo-like Chinook source): statement_failed with the SQLSTATE, PostgreSQL's condition name and,
 * for class 42, the function, operator or column it names when the agent wrote that name; for an
 * approved write that fails on a constraint, interlock_approval_status gives the SQLSTATE and
 * condition. Never PostgreSQL's message, values, constraint names, host, port or role.
 */
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { approveAndExecute } from '../../../src/approvals/execute';

let env: GovernedEnv;
beforeAll(async () => {
  env = await startGovernedEnv();
}, 120_000);
afterAll(async () => env?.close());

const query = (sql: string, params: unknown[] = [], headers: Record<string, string> = {}) => callTool(env, 'interlock_query', { source_id: 'chinook', sql, params }, env.apiKey, headers);
const MSG = (what: string) => `The statement failed in the source database: ${what}. Correct the statement before trying again.`;

/** The request id every statement_failed names (like every refusal). */
const RID = expect.stringMatching(/^req_[A-Za-z0-9_-]+$/);

/** The exact tool result of a statement_failed in 2025-11-25. */
const failedResult = (sc: Record<string, unknown>) => ({
  jsonrpc: '2.0',
  id: 1,
  result: { content: [{ type: 'text', text: `Invalid call (statement_failed): ${sc.message as string}` }], structuredContent: { ...sc, request_id: RID }, isError: true, resultType: 'complete', _meta: { 'io.modelcontextprotocol/serverInfo': expect.any(Object) } },
});

test('22P02 invalid_text_representation and 22012 division_by_zero: SQLSTATE and condition, not the value', async () => {
  const r = await query("SELECT title FROM album WHERE album_id = 'abc-secret-value'");
  expect([r.status, r.body]).toEqual([200, failedResult({ code: 'statement_failed', message: MSG('data exception, invalid_text_representation (SQLSTATE 22P02)'), sqlstate: '22P02', condition: 'invalid_text_representation' })]);
  expect(JSON.stringify(r.body)).not.toContain('abc-secret-value');
  const p = await query('SELECT title FROM album WHERE album_id = $1', ['not-a-number']);
  expect(p.body.result.structuredContent).toEqual({ code: 'statement_failed', request_id: RID, message: MSG('data exception, invalid_text_representation (SQLSTATE 22P02)'), sqlstate: '22P02', condition: 'invalid_text_representation' });
  const z = await query('SELECT album_id / 0 AS x FROM album');
  expect(z.body).toEqual(failedResult({ code: 'statement_failed', message: MSG('data exception, division_by_zero (SQLSTATE 22012)'), sqlstate: '22012', condition: 'division_by_zero' }));
});

test('class 42: the function, operator or column the agent wrote is named, with the condition', async () => {
  const fn = await query('SELECT lower(album_id) FROM album');
  expect(fn.body).toEqual(failedResult({ code: 'statement_failed', message: MSG('syntax error or access rule violation, undefined_function (SQLSTATE 42883); function "lower"'), sqlstate: '42883', condition: 'undefined_function', object: { kind: 'function', name: 'lower' } }));
  const op = await query('SELECT title FROM album WHERE title = 1');
  expect(op.body.result.structuredContent).toEqual({ code: 'statement_failed', request_id: RID, message: MSG('syntax error or access rule violation, undefined_function (SQLSTATE 42883); operator "="'), sqlstate: '42883', condition: 'undefined_function', object: { kind: 'operator', name: '=' } });
  const grp = await query('SELECT title, count(*) FROM album');
  expect(grp.body.result.structuredContent).toEqual({ code: 'statement_failed', request_id: RID, message: MSG('syntax error or access rule violation, grouping_error (SQLSTATE 42803); column "album.title"'), sqlstate: '42803', condition: 'grouping_error', object: { kind: 'column', name: 'album.title' } });
  // The types PostgreSQL names (character varying = integer) are not passed on.
  expect(JSON.stringify(op.body)).not.toMatch(/character varying|integer/);
});

test('older handshake versions: the same data in JSON-RPC -32602 error.data', async () => {
  const r = await query('SELECT lower(album_id) FROM album', [], { 'mcp-protocol-version': '2025-06-18' });
  const data = { code: 'statement_failed', message: MSG('syntax error or access rule violation, undefined_function (SQLSTATE 42883); function "lower"'), sqlstate: '42883', condition: 'undefined_function', object: { kind: 'function', name: 'lower' } };
  expect([r.status, r.body]).toEqual([200, { jsonrpc: '2.0', id: 1, error: { code: -32602, message: `Invalid params: ${data.message}`, data: { ...data, request_id: RID } } }]);
});

test('no host, port, role or database name in any of these answers', async () => {
  const port = new URL(env.sourceUrl).port || '5432';
  for (const sql of ["SELECT title FROM album WHERE album_id = 'x'", 'SELECT lower(album_id) FROM album', 'SELECT title, count(*) FROM album']) {
    const text = JSON.stringify((await query(sql)).body);
    expect(text).not.toContain(env.demo.readerRole);
    expect(text).not.toContain(env.demo.databaseName);
    expect(text).not.toMatch(/127\.0\.0\.1|localhost/);
    expect(text).not.toMatch(new RegExp(`[^0-9]${port}[^0-9]`));
  }
});

test('an approved write that breaks a unique constraint: interlock_approval_status gives 23505 unique_violation, not the key or constraint', async () => {
  const q = await query('INSERT INTO playlist (playlist_id, name) VALUES ($1, $2)', [1, 'Duplicate of playlist 1']);
  const id = q.body.result.structuredContent.approval_id as string;
  await approveAndExecute(env.db, id, { operator: 'ops-alice' });
  const s = await callTool(env, 'interlock_approval_status', { approval_id: id }, env.apiKey);
  expect(s.body.result.structuredContent.outcome).toEqual({
    error_code: 'statement_failed',
    message: "The source database refused the statement when it ran (for example a constraint or a missing privilege). Nothing was changed; an operator can see the database's reason.",
    sqlstate: '23505',
    condition: 'unique_violation',
  });
  const text = JSON.stringify(s.body);
  for (const leak of ['playlist_pkey', 'Key (', 'already exists', 'duplicate key']) expect(text).not.toContain(leak);
});
