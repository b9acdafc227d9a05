/**
 * Task hrt42 (red team rt42 G3/G4, writer side): an approved write was analysed on the catalogue's
 * scanned lookup path (the reader's `current_schemas(false)`); the writer role's own default path
 * (`"$user", public`) may resolve the same unqualified name elsewhere. Writer connections start with
 * the scanned path pinned, so the write changes the relation the analysis decided on.
 */
import { startGovernedEnv, callTool, sourceQuery, type GovernedEnv } from '../../helpers/governed';
import { createApiKey } from '../../../src/control/keys';
import { createIdentity } from '../../../src/control/identities';
import { grantRole } from '../../../src/control/grants';
import { upsertRole } from '../../../src/control/roles';
import { approveAndExecute } from '../../../src/approvals/execute';
import { scanSource } from '../../../src/control/scan';

jest.setTimeout(120_000);

let env: GovernedEnv;
let key: string;
beforeAll(async () => {
  env = await startGovernedEnv();
  const reader = `"${env.demo.readerRole}"`;
  const writer = `"${env.demo.writerRole}"`;
  // A schema named as the writer role: first on the writer's default path, absent from the reader's.
  await sourceQuery(env, `CREATE TABLE wsp_t (id int PRIMARY KEY, v text); INSERT INTO wsp_t VALUES (1, 'public-1'), (2, 'public-2');
    CREATE SCHEMA ${writer}; CREATE TABLE ${writer}.wsp_t (id int PRIMARY KEY, v text); INSERT INTO ${writer}.wsp_t VALUES (1, 'hidden-1'), (2, 'hidden-2');
    GRANT USAGE ON SCHEMA ${writer} TO ${writer}; GRANT SELECT, DELETE ON ${writer}.wsp_t TO ${writer};
    GRANT SELECT ON wsp_t TO ${reader}; GRANT SELECT, DELETE ON wsp_t TO ${writer};`);
  await scanSource(env.db, env.demo.sourceId);
  env.gateway.store.invalidate('*');
  await upsertRole(env.db, { name: 'wsp-writer', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'allow', action: 'write', resource: 'public.wsp_t' }] });
  const who = await createIdentity(env.db, 'wsp-agent');
  await grantRole(env.db, { identityId: who.id, roleName: 'wsp-writer', sourceId: env.demo.sourceId });
  key = (await createApiKey(env.db, who.id)).secret;
});
afterAll(async () => env?.close());

test('an approved DELETE on an unqualified name changes the scanned schema\'s table, not the writer\'s "$user" one', async () => {
  const r = await callTool(env, 'interlock_query', { source_id: env.demo.sourceId, sql: 'DELETE FROM wsp_t WHERE id = 1', params: [] }, key);
  expect(r.body.result.structuredContent).toMatchObject({ status: 'queued', approval_state: 'pending' });
  const done = await approveAndExecute(env.db, r.body.result.structuredContent.approval_id, { operator: 'ops-wsp' });
  expect(done).toMatchObject({ state: 'executed', rowCount: 1 });
  // Before the fix: the writer's own schema lost row 1 and public.wsp_t kept both.
  expect(await sourceQuery(env, 'SELECT v FROM public.wsp_t ORDER BY id')).toEqual([{ v: 'public-2' }]);
  expect(await sourceQuery(env, `SELECT v FROM "${env.demo.writerRole}".wsp_t ORDER BY id`)).toEqual([{ v: 'hidden-1' }, { v: 'hidden-2' }]);
});
