/**
 * Interlock files and row rules (issue 27): a role's `rows` and an identity's `attributes` survive
 * export → apply unchanged (a second apply changes nothing), attributes the file leaves out are
 * kept, given ones become exactly those, and a role with an invalid row rule is refused before
 * anything changes. Likewise a policy's `restrict_rows` (its predicate checked when written).
 */
import { freshControlDb, type TestControlDb } from './control-db';
import { applyInterlockFile } from '../../../src/declarative/apply';
import { exportInterlockFile } from '../../../src/declarative/export';
import { getIdentityByName, setIdentityAttributes } from '../../../src/control/identities';
import { getRole } from '../../../src/control/roles';
import { ValidationError } from '../../../src/control/errors';
import { addPolicies, getPolicy } from '../../../src/control/policies';

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

describe('restrict_rows policies (issue 27: policies add restricting predicates)', () => {
  const POLICY = { name: 'own-country', description: '', enabled: true, applies_to: { roles: ['rep'] }, rule: { type: 'restrict_rows', relations: ['public.customer', 'sales.*'], rows: 'country = identity.country', actions: ['read'] } };

  test('round-trip through apply and export (a second apply changes nothing)', async () => {
    const first = await applyInterlockFile(t.db, { document: { version: 1, policies: [POLICY] } }, op);
    expect(first.plan.changes.map((c) => `${c.action} ${c.kind} ${c.name}`)).toEqual(['create policy own-country']);
    expect(await getPolicy(t.db, 'own-country')).toMatchObject({ rule: POLICY.rule, applies_to: POLICY.applies_to });
    const file = await exportInterlockFile(t.db);
    expect(file.policies?.find((p) => p.name === 'own-country')?.rule).toEqual(POLICY.rule);
    expect((await applyInterlockFile(t.db, { document: file }, op)).plan.changes).toEqual([]);
  });

  test('an invalid predicate or relation refuses the file, the admin API and the CLI path (addPolicies) with details', async () => {
    const bad = { ...POLICY, name: 'bad-rows', rule: { ...POLICY.rule, rows: 'country = current_user', relations: ['public.customer.email'] } };
    const err = await applyInterlockFile(t.db, { document: { version: 1, policies: [bad] } }, op).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).details).toEqual([
      'bad-rows/rule/relations/0: a row restriction names schema.table relations (got public.customer.email)',
      expect.stringMatching(/^bad-rows\/rule\/rows: .*not allowed in a row predicate/),
    ]);
    expect(await getPolicy(t.db, 'bad-rows')).toBeNull();
    await expect(addPolicies(t.db, { ...bad, rule: { ...bad.rule, relations: ['public.customer'] } })).rejects.toThrow(ValidationError);
    expect(await getPolicy(t.db, 'bad-rows')).toBeNull();
    await expect(addPolicies(t.db, { name: 'no-rows', rule: { type: 'restrict_rows', relations: ['public.customer'] } })).rejects.toThrow(ValidationError);
    expect((await addPolicies(t.db, { name: 'good-rows', rule: { type: 'restrict_rows', relations: ['*'], rows: "region IN ('eu', 'us')" } }))[0].created).toBe(true);
  });
});
