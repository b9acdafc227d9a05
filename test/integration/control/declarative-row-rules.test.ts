/**
 * Interlock files and row rules (issue 27): a role's `rows` and an identity's `attributes` survive
 * export → apply unchanged (a second apply changes nothing), attributes the file leaves out are
 * kept, given ones become exactly those, and a role with an invalid row rule is refused before
 * anything changes.
 */
import { freshControlDb, type TestControlDb } from './control-db';
import { applyInterlockFile } from '../../../src/declarative/apply';
import { exportInterlockFile } from '../../../src/declarative/export';
import { getIdentityByName, setIdentityAttributes } from '../../../src/control/identities';
import { getRole } from '../../../src/control/roles';
import { ValidationError } from '../../../src/control/errors';

jest.setTimeout(60_000);

let t: TestControlDb;
const op = { operator: 'ops-anna', scan: false };
const REP = { name: 'rep', statements: [{ effect: 'allow', action: 'read', resource: 'public.customer', rows: 'support_rep_id = identity.employee_id' }] };

beforeAll(async () => {
  t = await freshControlDb('ctl_rows');
});
afterAll(async () => t?.cleanup());

test('rows and attributes round-trip through export and apply', async () => {
  const first = await applyInterlockFile(t.db, { document: { version: 1, roles: [REP], identities: [{ name: 'rep-a', attributes: { employee_id: 3, regions: ['eu', 'us'] } }] } }, op);
  expect(first.plan.changes.map((c) => `${c.action} ${c.kind} ${c.name}`)).toEqual(['create role rep', 'create identity rep-a']);
  expect((await getRole(t.db, 'rep'))?.statements).toEqual(REP.statements);
  expect((await getIdentityByName(t.db, 'rep-a'))?.attributes).toEqual({ employee_id: 3, regions: ['eu', 'us'] });
  const file = await exportInterlockFile(t.db);
  expect(file.roles?.find((r) => r.name === 'rep')?.statements).toEqual(REP.statements);
  expect(file.identities?.find((i) => i.name === 'rep-a')?.attributes).toEqual({ employee_id: 3, regions: ['eu', 'us'] });
  const again = await applyInterlockFile(t.db, { document: file }, op);
  expect(again.plan.changes).toEqual([]);
});

test('attributes left out of the file are kept; given ones become exactly those', async () => {
  await setIdentityAttributes(t.db, 'rep-a', { extra: 'x' });
  const kept = await applyInterlockFile(t.db, { document: { version: 1, identities: [{ name: 'rep-a' }] } }, op);
  expect(kept.plan.changes).toEqual([]);
  expect((await getIdentityByName(t.db, 'rep-a'))?.attributes).toEqual({ employee_id: 3, regions: ['eu', 'us'], extra: 'x' });
  const set = await applyInterlockFile(t.db, { document: { version: 1, identities: [{ name: 'rep-a', attributes: { employee_id: 4 } }] } }, op);
  expect(set.plan.changes.map((c) => `${c.action} ${c.kind} ${c.name}`)).toEqual(['update identity rep-a']);
  expect((await getIdentityByName(t.db, 'rep-a'))?.attributes).toEqual({ employee_id: 4 });
});

test('an invalid row rule or attribute refuses the whole file', async () => {
  const bad = { version: 1, roles: [{ name: 'bad', statements: [{ effect: 'allow', action: 'read', resource: 'public.t', rows: 'a = (SELECT 1)' }] }] };
  await expect(applyInterlockFile(t.db, { document: bad }, op)).rejects.toThrow(ValidationError);
  expect(await getRole(t.db, 'bad')).toBeNull();
  await expect(applyInterlockFile(t.db, { document: { version: 1, identities: [{ name: 'rep-b', attributes: { 'Bad-Name': 1 } }] } }, op)).rejects.toThrow(ValidationError);
  expect(await getIdentityByName(t.db, 'rep-b')).toBeNull();
});
