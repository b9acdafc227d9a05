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
 * rtc-b was served `rtc_sec.note` in clear. RTC-1 (row rule): rtc-c, whose role differs from rtc-d's
 * only by a row rule on `rtc_own` (role statements as keyed carry no rule text), was served rtc-d's
 * rows of `rtc_own` attached since the scan, the other owner's included. All three failed at 2da805d
 * and pass since the key binds whether the caller is hierarchy-checked (accessFingerprintOf).
 * Defended: a non-finite number parameter (which the key's JSON would write as null) is refused.
 */
import { startAttackEnv, query, classify, type AttackEnv, type Answer } from './harness';
import { upsertRole as upsertRoleChecked } from '../../../src/control/roles';
import { grantRole } from '../../../src/control/grants';
import { scanSource } from '../../../src/control/scan';
import { addPolicy as addPolicyChecked, listPolicies } from '../../../src/control/policies';
import { createIdentity, setIdentityAttributes } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import type { ControlDb } from '../../../src/control/db';

// Task hnu4a: these roles and policies name tables created on the source after its last scan (the cases under test),
// which the catalogue check refuses unless intended.
const upsertRole = (db: ControlDb, role: unknown) => upsertRoleChecked(db, role, {}, { allowUnknownNames: true });
const addPolicy = (db: ControlDb, policy: unknown, o: { replace?: boolean } = {}) => addPolicyChecked(db, policy, { ...o, allowUnknownNames: true });

let a: AttackEnv;
let keyA = '';
let keyB = '';
/** rtc-c holds a row rule on rtc_own; rtc-d the same statements without it. */
let keyC = '';
let keyD = '';

beforeAll(async () => {
  a = await startAttackEnv();
  await a.admin.query(`
    CREATE TABLE rtc_parent (id int NOT NULL, note text) PARTITION BY RANGE (id);
    CREATE TABLE rtc_p1 PARTITION OF rtc_parent FOR VALUES FROM (0) TO (100);
    CREATE TABLE rtc_priv (id int NOT NULL, note text);
    CREATE TABLE rtc_sec (id int NOT NULL, note text);
    CREATE TABLE rtc_own (id int NOT NULL, note text);
    INSERT INTO rtc_parent VALUES (1, 'OPEN-1');
    INSERT INTO rtc_priv VALUES (150, 'PRIV-150');
    INSERT INTO rtc_sec VALUES (250, 'SEC-250');
    INSERT INTO rtc_own VALUES (350, 'OWN-350'), (351, 'OWN-351');`);
  await a.admin.query(`GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${a.admin.escapeIdentifier(a.env.demo.readerRole)}`);
  await upsertRole(a.env.db, { name: 'rtc-role', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }] });
  for (const name of ['rtc-a', 'rtc-b']) {
    const id = await createIdentity(a.env.db, name);
    await grantRole(a.env.db, { identityId: id.id, roleName: 'rtc-role', sourceId: 'chinook' });
    const key = (await createApiKey(a.env.db, id.id)).secret;
    if (name === 'rtc-a') keyA = key;
    else keyB = key;
  }
  await upsertRole(a.env.db, { name: 'rtc-role-ruled', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'allow', action: 'read', resource: 'public.rtc_own', rows: 'note = identity.owner' }] });
  await upsertRole(a.env.db, { name: 'rtc-role-plain', statements: [{ effect: 'allow', action: 'read', resource: 'public.*' }, { effect: 'allow', action: 'read', resource: 'public.rtc_own' }] });
  for (const [name, role] of [['rtc-c', 'rtc-role-ruled'], ['rtc-d', 'rtc-role-plain']]) {
    const id = await createIdentity(a.env.db, name);
    await grantRole(a.env.db, { identityId: id.id, roleName: role, sourceId: 'chinook' });
    if (name === 'rtc-c') await setIdentityAttributes(a.env.db, name, { owner: 'OWN-350' });
    const key = (await createApiKey(a.env.db, id.id)).secret;
    if (name === 'rtc-c') keyC = key;
    else keyD = key;
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
async function afterUncheckedRead(table: string, range: string, rows: Array<{ id: number; note: string }>, sql: string, keys = [keyA, keyB]): Promise<Answer> {
  await a.admin.query(`ALTER TABLE rtc_parent ATTACH PARTITION ${table} FOR VALUES ${range}`);
  try {
    expect((await query(a, sql, {}, keys[0])).rows).toEqual([{ id: 1, note: 'OPEN-1' }, ...rows]);
    // Still a hit for the unchecked caller itself: the fix separates the two callers, it does not stop caching.
    expect((await query(a, sql, {}, keys[0])).sc.cached).toBe(true);
    return await query(a, sql, {}, keys[1]);
  } finally {
    await a.admin.query(`ALTER TABLE rtc_parent DETACH PARTITION ${table}`);
  }
}

test('RTC-1 an answer rtc-a read after a denied table was attached is not served to rtc-b, whom a policy denies that table', async () => {
  const second = await afterUncheckedRead('rtc_priv', 'FROM (100) TO (200)', [{ id: 150, note: 'PRIV-150' }], 'SELECT id, note FROM rtc_parent /* rtc-1 */ ORDER BY id');
  expect([second.kind, second.code, second.rows]).toEqual(['refused', 'policy_denied', []]);
  expect(second.raw).not.toContain('PRIV-150');
});

test('RTC-2 an answer rtc-a read after a masked table was attached is not served in clear to rtc-b, for whom the column is masked', async () => {
  const second = await afterUncheckedRead('rtc_sec', 'FROM (200) TO (300)', [{ id: 250, note: 'SEC-250' }], 'SELECT id, note FROM rtc_parent /* rtc-2 */ ORDER BY id');
  expect([second.kind, second.sc.cached, second.rows.length]).toEqual(['rows', false, 2]);
  expect(second.raw).not.toContain('SEC-250');
});

test('RTC-1 (row rule): an answer rtc-d read after a ruled table was attached is not served to rtc-c, whose role statements differ only by the rule', async () => {
  const second = await afterUncheckedRead('rtc_own', 'FROM (300) TO (400)', [{ id: 350, note: 'OWN-350' }, { id: 351, note: 'OWN-351' }], 'SELECT id, note FROM rtc_parent /* rtc-1r */ ORDER BY id', [keyD, keyC]);
  // Planned on the catalogue's tree, the rule cannot be enforced on the server's: refused until a rescan.
  expect([second.kind, second.code, second.rows]).toEqual(['refused', 'row_rule_unenforceable', []]);
  expect(second.raw).not.toContain('OWN-351');
});

/** interlock_query with `params` written as raw JSON text (1e400 parses to Infinity, which JSON.stringify writes as null). */
async function rawParamsQuery(sql: string, paramsJson: string, apiKey: string): Promise<Answer> {
  const body = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"interlock_query","arguments":{"source_id":"chinook","sql":${JSON.stringify(sql)},"params":${paramsJson}}}}`;
  const r = await fetch(a.env.url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', authorization: `Bearer ${apiKey}` }, body });
  const text = await r.text();
  return classify({ status: r.status, body: JSON.parse(text.split('\n').filter((l) => l.startsWith('data: ')).at(-1)!.slice(6)) });
}

// Defended: the key writes params as JSON, where Infinity and null are both `null`, but arguments
// validation refuses a non-finite number before any key is built.
test('defended: a parameter that overflows to Infinity is refused, so it never shares a cached answer with null', async () => {
  const sql = 'SELECT $1::float8 AS v /* rtc-4 */';
  const inf = await rawParamsQuery(sql, '[1e400]', keyA);
  expect([inf.kind, inf.code]).toEqual(['invalid', 'invalid_arguments']);
  const nul = await rawParamsQuery(sql, '[null]', keyA);
  expect([nul.kind, nul.rows]).toEqual(['rows', [{ v: null }]]);
});
