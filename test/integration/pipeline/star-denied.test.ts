/**
 * `SELECT *` over a table with one denied column (issue 24 item 6): the refusal tells the agent to
 * name its columns and points at interlock_describe_access. It is the one refusal text, the same for
 * a denied column, a missing column and an unreadable table, so it reveals nothing that exists.
 * A write refused on a table the caller may read names the table instead (task hnu4b item d),
 * unless it sets a column the caller may not read (red team rtn4 item 5).
 */
import { startGovernedEnv, callTool, type GovernedEnv } from '../../helpers/governed';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { grantRole } from '../../../src/control/grants';
import { upsertRole } from '../../../src/control/roles';
import { DENIED_MESSAGE, DENIED_MESSAGE_NO_STAR, namedDenyMessage } from '../../../src/pipeline/03-authorize';

let env: GovernedEnv;
let key: string;
beforeAll(async () => {
  env = await startGovernedEnv();
  await upsertRole(env.db, { name: 'no-email', statements: [{ effect: 'allow', action: 'read', resource: 'public.customer' }, { effect: 'deny', action: 'read', resource: 'public.customer.email' }] });
  const who = await createIdentity(env.db, 'star-agent');
  await grantRole(env.db, { identityId: who.id, roleName: 'no-email', sourceId: 'chinook' });
  key = (await createApiKey(env.db, who.id)).secret;
}, 90_000);
afterAll(async () => env?.close());

const refusal = async (sql: string) => (await callTool(env, 'interlock_query', { source_id: 'chinook', sql }, key)).body.result.structuredContent;

/** A new identity `<role>-agent` holding role `role` (statements as [effect, action, resource]) on chinook: its interlock_query structuredContent per statement. */
async function refuserFor(role: string, statements: Array<[string, string, string]>) {
  await upsertRole(env.db, { name: role, statements: statements.map(([effect, action, resource]) => ({ effect, action, resource })) as never });
  const who = await createIdentity(env.db, `${role}-agent`);
  await grantRole(env.db, { identityId: who.id, roleName: role, sourceId: 'chinook' });
  const secret = (await createApiKey(env.db, who.id)).secret;
  return async (sql: string) => (await callTool(env, 'interlock_query', { source_id: 'chinook', sql }, secret)).body.result.structuredContent;
}

test('SELECT * over a table with a denied column: the deny named, name your columns, see describe_access', async () => {
  // The role's own deny statement (listed by describe_access under `deny`) is named (task hnu41 item 2).
  expect(await refusal('SELECT * FROM customer')).toEqual({ status: 'forbidden', code: 'source_role_denied', message: namedDenyMessage(['public.customer.email'], false, true), request_id: expect.any(String) });
  expect(namedDenyMessage(['public.customer.email'], false, true)).toBe(
    'The source roles granted to this identity deny reading public.customer.email, which this statement uses (in its select list, WHERE, JOIN, ORDER BY or elsewhere): remove it from the statement. SELECT * (and table.*) reads every column, denied ones included: name the columns you need instead. Call interlock_describe_access for the tables and columns you may use.',
  );
  expect(DENIED_MESSAGE).toContain('SELECT * (and table.*) reads every column, denied ones included: name the columns you need instead. Call interlock_describe_access');
  // Without a star the star advice is left out; a missing column gets the common text, as before.
  expect((await refusal('SELECT email FROM customer')).message).toBe(namedDenyMessage(['public.customer.email'], false, false));
  expect((await refusal('SELECT no_such_column FROM customer')).message).toBe(DENIED_MESSAGE_NO_STAR);
  expect((await refusal('SELECT * FROM no_such_table')).message).toBe(DENIED_MESSAGE);
  const ok = await callTool(env, 'interlock_query', { source_id: 'chinook', sql: 'SELECT first_name FROM customer ORDER BY customer_id LIMIT 1' }, key);
  expect(ok.body.result.isError).toBeUndefined();
  expect(Object.keys(JSON.parse(ok.body.result.content[0].text)[0])).toEqual(['first_name']);
});

test('a table the caller may not read at all gets the same text', async () => {
  expect(await refusal('SELECT * FROM employee')).toEqual({ status: 'forbidden', code: 'source_role_denied', message: DENIED_MESSAGE, request_id: expect.any(String) });
});

test('task hnu4b (d): a write to a table the caller may read names the table and the missing write grant; an unreadable table keeps the one text', async () => {
  const { writeDeniedMessage } = await import('../../../src/pipeline/03-authorize');
  const tableText = writeDeniedMessage('public.customer');
  expect(tableText).toBe('No source role granted to this identity allows writing public.customer (its roles let it read that table, not make this write). Ask an operator for a role that allows the write; interlock_describe_access lists what your roles allow and deny.');
  for (const sql of ['DELETE FROM customer', "UPDATE customer SET first_name = 'x' WHERE customer_id = 1", "INSERT INTO customer (customer_id, first_name, last_name) VALUES (999, 'a', 'b')"]) {
    expect({ sql, r: await refusal(sql) }).toEqual({ sql, r: { status: 'forbidden', code: 'source_role_denied', message: tableText, request_id: expect.any(String) } });
  }
  // A write setting a column it may not read keeps the one text, as a missing column does (red team rtn4 item 5).
  for (const sql of ['UPDATE customer SET email = NULL', "INSERT INTO customer (customer_id, first_name, last_name, email) VALUES (999, 'a', 'b', 'c')", 'UPDATE customer SET no_such_column = NULL']) {
    expect({ sql, m: (await refusal(sql)).message }).toEqual({ sql, m: DENIED_MESSAGE_NO_STAR });
  }
  expect((await refusal('DELETE FROM employee')).message).toBe(DENIED_MESSAGE_NO_STAR);
  expect((await refusal('DELETE FROM no_such_table')).message).toBe(DENIED_MESSAGE_NO_STAR);
  expect((await refusal('DELETE FROM employee RETURNING *')).message).toBe(DENIED_MESSAGE);
  expect((await refusal('DELETE FROM no_such_table RETURNING *')).message).toBe(DENIED_MESSAGE);

  // A table write allowed with one column's write denied: a readable column is named, an unreadable one is not.
  const writerRefusal = await refuserFor('customer-writer', [
    ['allow', 'read', 'public.customer'],
    ['deny', 'read', 'public.customer.email'],
    ['allow', 'write', 'public.customer'],
    ['deny', 'write', 'public.customer.first_name'],
    ['deny', 'write', 'public.customer.email'],
  ]);
  expect((await writerRefusal("UPDATE customer SET first_name = 'x' WHERE customer_id = 1")).message).toBe(writeDeniedMessage('public.customer', 'first_name'));
  expect((await writerRefusal('UPDATE customer SET email = NULL WHERE customer_id = 1')).message).toBe(DENIED_MESSAGE_NO_STAR);
});

// Task hnu41 item 2 (a new user's finding): `SELECT emp_id FROM employee WHERE ssn LIKE '1%'` was
// refused with the star advice though it has no star, and never said which column to drop.
test('a read its roles deny by name names the deny statement; a wildcard or missing grant stays unnamed; the star advice only with a star', async () => {
  const refuse = await refuserFor('hr-reader', [
    ['allow', 'read', 'public.employee'],
    ['allow', 'read', 'public.customer'],
    ['deny', 'read', 'public.employee.title'],
    ['deny', 'read', 'public.employee.birth_date'],
    ['deny', 'read', 'public.*.email'],
  ]);
  const hr = async (sql: string) => (await refuse(sql)).message;
  expect(await hr("SELECT employee_id FROM employee WHERE title LIKE 'S%'")).toBe(
    'The source roles granted to this identity deny reading public.employee.title, which this statement uses (in its select list, WHERE, JOIN, ORDER BY or elsewhere): remove it from the statement. Call interlock_describe_access for the tables and columns you may use.',
  );
  expect(await hr('SELECT employee_id FROM employee ORDER BY birth_date, title')).toBe(namedDenyMessage(['public.employee.birth_date', 'public.employee.title'], false, false));
  expect(namedDenyMessage(['public.employee.birth_date', 'public.employee.title'], false, false)).toContain('deny reading public.employee.birth_date and public.employee.title, which');
  // A wildcard deny is not named (naming the column would tell an existing column from a missing one).
  expect(await hr('SELECT email FROM employee')).toBe(DENIED_MESSAGE_NO_STAR);
  expect(await hr('SELECT no_such_column FROM employee')).toBe(DENIED_MESSAGE_NO_STAR);
  expect(await hr('SELECT title, email FROM employee')).toBe(namedDenyMessage(['public.employee.title'], true, false));
  expect(await hr('SELECT e.* FROM employee e')).toBe(namedDenyMessage(['public.employee.birth_date', 'public.employee.title'], true, true));
  // Not granted at all: unnamed.
  expect(await hr('SELECT name FROM artist')).toBe(DENIED_MESSAGE_NO_STAR);
});

test("a caller whose roles deny no read: a typo'd table with SELECT * gets the unknown-relation text, no star advice (fx45 item 4)", async () => {
  const asDemo = async (sql: string) => (await callTool(env, 'interlock_query', { source_id: 'chinook', sql }, env.apiKey)).body.result.structuredContent;
  // demo-agent (the demo role: allows only) — a missing and an ungranted relation answer alike.
  expect(await asDemo('SELECT * FROM artists')).toEqual({ status: 'forbidden', code: 'source_role_denied', message: DENIED_MESSAGE_NO_STAR, request_id: expect.any(String) });
  expect((await asDemo('SELECT * FROM employee')).message).toBe(DENIED_MESSAGE_NO_STAR);
  expect((await asDemo('SELECT a.* FROM artist a JOIN no_such_table n ON true')).message).toBe(DENIED_MESSAGE_NO_STAR);
  // A caller with a read deny keeps the star advice for both, alike (the text never tells them apart).
  expect((await refusal('SELECT * FROM artists')).message).toBe(DENIED_MESSAGE);
  expect((await refusal('SELECT * FROM employee')).message).toBe(DENIED_MESSAGE);
});
