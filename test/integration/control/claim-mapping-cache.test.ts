/**
 * ClaimMappingCache and control-change invalidation (task hrr: red team rt40's race, a load that
 * read the control database before a change and answered after its notification).
 */
import { freshControlDb, type TestControlDb } from './control-db';
import { openHeldControlDb } from '../../helpers/held-control-db';
import { ClaimMappingCache, pairKey } from '../../../src/control/claim-mappings';
import { addSource } from '../../../src/control/sources';
import { upsertRole } from '../../../src/control/roles';

jest.setTimeout(60_000);

let t: TestControlDb;
beforeAll(async () => {
  t = await freshControlDb('hrr_cmc');
});
afterAll(async () => t?.cleanup());

// Before: a call made after invalidate() while a load that began before it was in flight joined
// that load and was answered with the rows from before the change (here: a claim rule removed, its
// pair still allowed). Now it waits for that load and reads again.
test('a call after invalidate() does not take the answer of a load that began before the change', async () => {
  const ISSUER = 'https://idp.hrr-cmc.example';
  await addSource(t.db, { id: 'docshrr', type: 'documents', name: 'docshrr', settings: { path: '/tmp' } });
  await upsertRole(t.db, { name: 'readerhrr', statements: [{ effect: 'allow', action: 'read', resource: '*' }] });
  await t.db.pool.query("INSERT INTO configured_claim_grants (issuer, role_name, source_id) VALUES ($1, 'readerhrr', 'docshrr')", [ISSUER]);
  // A control database whose answers reach the cache late: held until released, after the query ran.
  let slow = false;
  const { db, release } = await openHeldControlDb(t.temp.url, () => slow);
  try {
    const cache = new ClaimMappingCache(db);
    slow = true;
    const before = cache.allowedPairs(ISSUER);
    await new Promise((r) => setTimeout(r, 200));
    slow = false;
    // The rule is removed (its notification invalidates the cache), then a sign-in asks.
    await t.db.pool.query('DELETE FROM configured_claim_grants WHERE issuer = $1', [ISSUER]);
    cache.invalidate();
    const after = cache.allowedPairs(ISSUER);
    await new Promise((r) => setTimeout(r, 50));
    release();
    const pair = pairKey('readerhrr', 'docshrr');
    expect({ before: (await before).has(pair), after: (await after).has(pair), next: (await cache.allowedPairs(ISSUER)).has(pair) }).toEqual({ before: true, after: false, next: false });
  } finally {
    release();
    await db.close();
  }
});
