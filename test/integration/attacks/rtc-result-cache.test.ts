/**
 * Red team rtc against issue 28's result cache (commits 15b8347, 2da805d): a hit is served before, and
 * without, the live hierarchy check. The key binds the caller's role statements, its restrictions'
 * fingerprint (row cap, masks), row-rule values, the catalogue snapshot and the active policies by
 * content — but not which policies apply to the caller, and only callers with a deny, mask or row rule
 * are checked (hierarchySensitive). So an unchecked caller stored answers read on a tree the catalogue
 * does not know, under the key a checked caller with the same roles computes too.
 *
 * Setup: `rtc_parent` range-partitioned with one partition; `rtc_priv` and `rtc_sec` plain tables,
 * attached under `rtc_parent` only after the scan. Identities rtc-a and rtc-b hold the same role
 * (read public.*); policies deny rtc-b reads of `rtc_priv` and mask rtc-b's `rtc_sec.note`.
 *
 * RTC-1 (finding, high): rtc-a (no deny/mask: unchecked) reads the parent after `rtc_priv` was attached
 * and the answer is stored; rtc-b's identical call was served that entry — rows of a relation a
 * policy denies it — where without the cache it is refused `policy_denied`. RTC-2 the same with a mask:
 * rtc-b was served `rtc_sec.note` in clear. Both passed once the key bound the applicable policies.
 */
import { startAttackEnv, query, type AttackEnv, type Answer } from './harness';
import { upsertRole } from '../../../src/control/roles';
import { grantRole } from '../../../src/control/grants';
import { scanSource } from '../../../src/control/scan';
import { addPolicy, listPolicies } from '../../../src/control/policies';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';

let a: AttackEnv;
let keyA = '';
let keyB = '';

beforeAll(async () => {
  a = await startAttackEnv();
  await a.admin.query(`
    CREATE TABLE rtc_parent (id int NOT NULL, note text) PARTITION BY RANGE (id);
    CREATE TABLE rtc_p1 PARTITION OF rtc_parent FOR VALUES FROM (0) TO (100);
    CREATE TABLE rtc_priv (id int NOT NULL, note text);
    CREATE TABLE rtc_sec (id int NOT NULL, note text);
    INSERT INTO rtc_parent VALUES (1, 'OPEN-1');
    INSERT INTO rtc_priv VALUES (150, 'PRIV-150');
    INSERT INTO rtc_sec VALUES (250, 'SEC-250');`);
  await a.admin.query(`GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${a.admin.escapeIdentifier(a.env.demo.readerRole)}`);
  await upsertRole(a.env.db, { name: 'rtc-role', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }] });
  for (const name of ['rtc-a', 'rtc-b']) {
    const id = await createIdentity(a.env.db, name);
    await grantRole(a.env.db, { identityId: id.id, roleName: 'rtc-role', sourceId: 'chinook' });
    const key = (await createApiKey(a.env.db, id.id)).secret;
    if (name === 'rtc-a') keyA = key;
    else keyB = key;
  }
  // The demo's masks apply to every identity on the source; scoped to demo-agent here (as an
  // operator scopes policies), so rtc-a has no deny or mask and is not hierarchy-checked.
  for (const p of await listPolicies(a.env.db)) {
    await addPolicy(a.env.db, { name: p.name, description: p.description ?? 'demo', applies_to: { ...p.applies_to, identities: ['demo-agent'] }, rule: p.rule }, { replace: true });
  }
  await addPolicy(a.env.db, { name: 'rtc-deny-b', description: 'rtc', applies_to: { identities: ['rtc-b'] }, rule: { type: 'deny_relations', relations: ['public.rtc_priv'] } });
  await addPolicy(a.env.db, { name: 'rtc-mask-b', description: 'rtc', applies_to: { identities: ['rtc-b'] }, rule: { type: 'mask_columns', columns: ['public.rtc_sec.note'], method: 'full' } });
  await scanSource(a.env.db, 'chinook');
  a.env.gateway.store.invalidate('*');
}, 180_000);
afterAll(async () => a?.close());

test('controls: rtc-b is refused rtc_priv and gets rtc_sec.note masked; both read the parent alike', async () => {
  const denied = await query(a, 'SELECT id, note FROM rtc_priv', {}, keyB);
  expect([denied.kind, denied.code]).toEqual(['refused', 'policy_denied']);
  const masked = await query(a, 'SELECT id, note FROM rtc_sec', {}, keyB);
  expect(masked.kind).toBe('rows');
  expect(masked.rows).toHaveLength(1);
  expect(masked.rows[0].note).not.toBe('SEC-250');
  for (const key of [keyA, keyB]) expect((await query(a, 'SELECT id, note FROM rtc_parent /* control */ ORDER BY id', {}, key)).rows).toEqual([{ id: 1, note: 'OPEN-1' }]);
});

/**
 * Attaches `table` under rtc_parent for `range` (after the scan), has rtc-a read the parent with `sql`
 * (it sees `row`, which it may read, and the answer is stored), then answers rtc-b's identical call;
 * detaches again. Returns rtc-b's answer.
 */
async function afterUncheckedRead(table: string, range: string, row: { id: number; note: string }, sql: string): Promise<Answer> {
  await a.admin.query(`ALTER TABLE rtc_parent ATTACH PARTITION ${table} FOR VALUES ${range}`);
  try {
    expect((await query(a, sql, {}, keyA)).rows).toEqual([{ id: 1, note: 'OPEN-1' }, row]);
    // Still a hit for rtc-a itself: the fix separates the two callers, it does not stop caching.
    expect((await query(a, sql, {}, keyA)).sc.cached).toBe(true);
    return await query(a, sql, {}, keyB);
  } finally {
    await a.admin.query(`ALTER TABLE rtc_parent DETACH PARTITION ${table}`);
  }
}

test('RTC-1 an answer rtc-a read after a denied table was attached is not served to rtc-b, whom a policy denies that table', async () => {
  const second = await afterUncheckedRead('rtc_priv', 'FROM (100) TO (200)', { id: 150, note: 'PRIV-150' }, 'SELECT id, note FROM rtc_parent /* rtc-1 */ ORDER BY id');
  expect([second.kind, second.code, second.rows]).toEqual(['refused', 'policy_denied', []]);
  expect(second.raw).not.toContain('PRIV-150');
});

test('RTC-2 an answer rtc-a read after a masked table was attached is not served in clear to rtc-b, for whom the column is masked', async () => {
  const second = await afterUncheckedRead('rtc_sec', 'FROM (200) TO (300)', { id: 250, note: 'SEC-250' }, 'SELECT id, note FROM rtc_parent /* rtc-2 */ ORDER BY id');
  expect([second.kind, second.sc.cached, second.rows.length]).toEqual(['rows', false, 2]);
  expect(second.raw).not.toContain('SEC-250');
});
