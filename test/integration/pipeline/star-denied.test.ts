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
import { DENIED_MESSAGE } from '../../../src/pipeline/03-authorize';

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

test('SELECT * over a table with a denied column: name your columns, see describe_access', async () => {
  expect(await refusal('SELECT * FROM customer')).toEqual({ status: 'forbidden', code: 'source_role_denied', message: DENIED_MESSAGE, request_id: expect.any(String) });
  expect(DENIED_MESSAGE).toContain('SELECT * (and table.*) reads every column, denied ones included: name the columns you need instead. Call interlock_describe_access');
  // The same text for a denied and a missing column of that table; the named columns work.
  expect((await refusal('SELECT email FROM customer')).message).toBe(DENIED_MESSAGE);
  expect((await refusal('SELECT no_such_column FROM customer')).message).toBe(DENIED_MESSAGE);
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
    expect({ sql, m: (await refusal(sql)).message }).toEqual({ sql, m: DENIED_MESSAGE });
  }
  expect((await refusal('DELETE FROM employee')).message).toBe(DENIED_MESSAGE);
  expect((await refusal('DELETE FROM no_such_table')).message).toBe(DENIED_MESSAGE);

  // A table write allowed with one column's write denied: a readable column is named, an unreadable one is not.
  await upsertRole(env.db, {
    name: 'customer-writer',
    statements: [
      { effect: 'allow', action: 'read', resource: 'public.customer' },
      { effect: 'deny', action: 'read', resource: 'public.customer.email' },
      { effect: 'allow', action: 'write', resource: 'public.customer' },
      { effect: 'deny', action: 'write', resource: 'public.customer.first_name' },
      { effect: 'deny', action: 'write', resource: 'public.customer.email' },
    ],
  });
  const who = await createIdentity(env.db, 'customer-writer-agent');
  await grantRole(env.db, { identityId: who.id, roleName: 'customer-writer', sourceId: 'chinook' });
  const writerKey = (await createApiKey(env.db, who.id)).secret;
  const writerRefusal = async (sql: string) => (await callTool(env, 'interlock_query', { source_id: 'chinook', sql }, writerKey)).body.result.structuredContent;
  expect((await writerRefusal("UPDATE customer SET first_name = 'x' WHERE customer_id = 1")).message).toBe(writeDeniedMessage('public.customer', 'first_name'));
  expect((await writerRefusal('UPDATE customer SET email = NULL WHERE customer_id = 1')).message).toBe(DENIED_MESSAGE);
});
