/**
 * Red team rtfk finding 1: a foreign key with a writing referential action created after the source
 * was scanned. The write was queued when no key reached the referencing table; at approval
 * src/approvals/execute.ts reads the keys live (src/sources/postgres/referential-keys.ts), so the
 * cascade into a table the requester may not write is refused `source_role_denied` with nothing
 * changed, and runs once the requester may write that table too.
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
let identityId: string;
beforeAll(async () => {
  env = await startGovernedEnv();
  const reader = `"${env.demo.readerRole}"`;
  const writer = `"${env.demo.writerRole}"`;
  await sourceQuery(env, `CREATE TABLE rtfk_parent (id int PRIMARY KEY); CREATE TABLE rtfk_child (id int PRIMARY KEY, parent_id int);
    INSERT INTO rtfk_parent VALUES (1), (2), (3); INSERT INTO rtfk_child VALUES (1, 1), (2, 2), (3, 3);
    GRANT SELECT ON rtfk_parent, rtfk_child TO ${reader}; GRANT SELECT, DELETE ON rtfk_parent, rtfk_child TO ${writer};`);
  await scanSource(env.db, env.demo.sourceId);
  env.gateway.store.invalidate('*');
  await upsertRole(env.db, {
    name: 'rtfk-parent-writer',
    statements: [
      { effect: 'allow', action: 'read', resource: 'public.*' },
      { effect: 'allow', action: 'write', resource: 'public.rtfk_parent' },
    ],
  });
  await upsertRole(env.db, { name: 'rtfk-child-writer', statements: [{ effect: 'allow', action: 'write', resource: 'public.rtfk_child' }] });
  const who = await createIdentity(env.db, 'rtfk-agent');
  identityId = who.id;
  await grantRole(env.db, { identityId, roleName: 'rtfk-parent-writer', sourceId: env.demo.sourceId });
  key = (await createApiKey(env.db, who.id)).secret;
});
afterAll(async () => env?.close());

const queue = async (sql: string): Promise<string> => {
  const r = await callTool(env, 'interlock_query', { source_id: env.demo.sourceId, sql, params: [] }, key);
  expect(r.body.result.structuredContent).toMatchObject({ status: 'queued', approval_state: 'pending' });
  return r.body.result.structuredContent.approval_id;
};
const children = async () => (await sourceQuery(env, 'SELECT id FROM rtfk_child ORDER BY id')).map((r) => r.id as number);

test('a cascade created after the scan: the approved write is refused source_role_denied, nothing changed', async () => {
  const id = await queue('DELETE FROM rtfk_parent WHERE id = 2');
  await sourceQuery(env, 'ALTER TABLE rtfk_child ADD CONSTRAINT rtfk_child_fk FOREIGN KEY (parent_id) REFERENCES rtfk_parent ON DELETE CASCADE');
  const done = await approveAndExecute(env.db, id, { operator: 'ops-rtfk' });
  expect(done).toMatchObject({ approvalId: id, state: 'failed', errorCode: 'source_role_denied' });
  expect(await children()).toEqual([1, 2, 3]);
  expect(await sourceQuery(env, 'SELECT count(*)::int AS n FROM rtfk_parent')).toEqual([{ n: 3 }]);
});

/**
 * Red team rtfk3 finding V3: an UPDATE through a view is followed to the base columns its written
 * view columns pass through in the scan's definition; CREATE OR REPLACE VIEW can keep every column's
 * name and type and pass another base column through. At approval the views on the write's path are
 * read live; one redefined since the scan drops the mapping (every base column counts).
 */
describe('an UPDATE through a view redefined after the scan (rtfk3 V3)', () => {
  const codes = async () => (await sourceQuery(env, 'SELECT code FROM rtfk_tag ORDER BY id')).map((r) => r.code as string);
  beforeAll(async () => {
    const writer = `"${env.demo.writerRole}"`;
    await sourceQuery(env, `CREATE TABLE rtfk_acct (id int PRIMARY KEY, code text UNIQUE NOT NULL, name text);
      CREATE TABLE rtfk_tag (id int PRIMARY KEY, code text REFERENCES rtfk_acct (code) ON UPDATE CASCADE);
      CREATE VIEW rtfk_sw AS SELECT id, code, name FROM rtfk_acct;
      INSERT INTO rtfk_acct VALUES (1, 'a1', 'n1'), (2, 'a2', 'n2'); INSERT INTO rtfk_tag VALUES (1, 'a1'), (2, 'a2');
      GRANT SELECT ON rtfk_acct, rtfk_tag, rtfk_sw TO "${env.demo.readerRole}"; GRANT SELECT, UPDATE ON rtfk_acct, rtfk_tag, rtfk_sw TO ${writer};`);
    await scanSource(env.db, env.demo.sourceId);
    await upsertRole(env.db, {
      name: 'rtfk-acct-writer',
      statements: [
        { effect: 'allow', action: 'write', resource: 'public.rtfk_acct' },
        { effect: 'allow', action: 'write', resource: 'public.rtfk_sw' },
      ],
    });
    await grantRole(env.db, { identityId, roleName: 'rtfk-acct-writer', sourceId: env.demo.sourceId });
    env.gateway.store.invalidate('*');
  });

  test('unchanged view: the update of a column no key references runs', async () => {
    const id = await queue("UPDATE rtfk_sw SET name = 'x' WHERE id = 1");
    expect(await approveAndExecute(env.db, id, { operator: 'ops-rtfk' })).toEqual({ approvalId: id, state: 'executed', rowCount: 1 });
    expect(await sourceQuery(env, 'SELECT code, name FROM rtfk_acct WHERE id = 1')).toEqual([{ code: 'a1', name: 'x' }]);
  });

  test('the view redefined to pass the referenced column under the written name: refused source_role_denied, nothing changed', async () => {
    const id = await queue("UPDATE rtfk_sw SET name = 'zz' WHERE id = 2");
    await sourceQuery(env, 'CREATE OR REPLACE VIEW rtfk_sw AS SELECT id, name AS code, code AS name FROM rtfk_acct');
    const done = await approveAndExecute(env.db, id, { operator: 'ops-rtfk' });
    expect(done).toMatchObject({ approvalId: id, state: 'failed', errorCode: 'source_role_denied' });
    expect(await codes()).toEqual(['a1', 'a2']);
    expect(await sourceQuery(env, 'SELECT code, name FROM rtfk_acct WHERE id = 2')).toEqual([{ code: 'a2', name: 'n2' }]);
  });
});

test('the same write, queued again, runs (and cascades) once the requester may write the referencing table', async () => {
  await grantRole(env.db, { identityId, roleName: 'rtfk-child-writer', sourceId: env.demo.sourceId });
  env.gateway.store.invalidate('*');
  const id = await queue('DELETE FROM rtfk_parent WHERE id = 2');
  expect(await approveAndExecute(env.db, id, { operator: 'ops-rtfk' })).toEqual({ approvalId: id, state: 'executed', rowCount: 1 });
  expect(await children()).toEqual([1, 3]);
});
