/**
 * `SELECT *` over a table with one denied column (issue 24 item 6): the refusal tells the agent to
 * name its columns and points at interlock_describe_access. It is the one refusal text, the same for
 * a denied column, a missing column and an unreadable table, so it reveals nothing that exists.
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
