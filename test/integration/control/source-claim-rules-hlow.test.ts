/**
 * Task hlow item 4: the claim rules naming a source no longer survive its removal. A claim
 * mapping's role_grants rule naming a removed source outlived it and gave its role to a source
 * added later under the same id. Now `source remove` (CLI, direct), the control API it shares with
 * DELETE /admin/v1/sources/{id} (test/integration/http/admin.test.ts), and `apply --prune` refuse
 * while a claim mapping rule names the source, unless --force, which takes those rules out of their
 * mappings (each audited, claim_mapping_updated; src/control/claim-mappings.ts untieClaimRules).
 * The gateway configuration's own rules are left to it (red team rt39 finding 4 guards a re-add).
 */
import { freshControlDb, type TestControlDb } from './control-db';
import { runCli } from '../../../src/cli/main';
import { upsertRole } from '../../../src/control/roles';
import { upsertClaimMapping } from '../../../src/control/claim-mappings';
import { applyInterlockFile } from '../../../src/declarative/apply';

jest.setTimeout(120_000);

const STATEMENTS = [{ effect: 'allow', action: 'read', resource: 'public.*' }];
const IDP = 'https://idp.hlow.example';
const OTHER = 'https://other.hlow.example';
const rule = (value: string, role: string, source: string) => ({ claim: 'groups', value, role, source });

let t: TestControlDb;
beforeEach(async () => {
  t = await freshControlDb('hlow');
  for (const id of ['s1', 's2']) await t.db.pool.query(`INSERT INTO sources (id, type, name, description, enabled, settings) VALUES ($1, 'postgres', $1, '', true, '{}')`, [id]);
  await upsertRole(t.db, { name: 'r', statements: STATEMENTS }, {}, { allowUnknownNames: true });
  await upsertClaimMapping(t.db, { issuer: IDP, identity_claim: 'email', role_grants: [rule('a', 'r', 's1'), rule('b', 'r', 's2'), rule('c', 'r', 's1')] });
  await upsertClaimMapping(t.db, { issuer: OTHER, role_grants: [rule('d', 'r', 's2')] });
});
afterEach(async () => {
  await t.cleanup();
});

/** The stored mappings as issuer → [identity_claim, role_grants]. */
async function mappings(): Promise<Record<string, unknown>> {
  const r = await t.db.pool.query<{ issuer: string; identity_claim: string | null; role_grants: unknown }>('SELECT issuer, identity_claim, role_grants FROM claim_mappings ORDER BY issuer');
  return Object.fromEntries(r.rows.map((x) => [x.issuer, [x.identity_claim, x.role_grants]]));
}
const sources = async () => (await t.db.pool.query<{ id: string }>('SELECT id FROM sources ORDER BY id')).rows.map((x) => x.id);
/** The config events: [decision, operator, source_id, details without digest]. */
async function events(): Promise<unknown[]> {
  const r = await t.db.pool.query<{ decision: string; operator: string; source_id: string | null; details: Record<string, unknown> }>(
    "SELECT decision, operator, source_id, details - 'digest' AS details FROM audit_events WHERE kind = 'config' AND decision IN ('claim_mapping_updated', 'source_removed') ORDER BY id",
  );
  return r.rows.map((x) => [x.decision, x.operator, x.source_id, x.details]);
}
async function cli(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(['--database-url', t.temp.url, ...args], { out: (x) => void out.push(x), err: (x) => void err.push(x) });
  return { code, out: out.join(''), err: err.join('') };
}
const UNTOUCHED = { [IDP]: ['email', [rule('a', 'r', 's1'), rule('b', 'r', 's2'), rule('c', 'r', 's1')]], [OTHER]: [null, [rule('d', 'r', 's2')]] };

test('source remove (CLI): refused while a claim mapping rule names the source, nothing changed or audited', async () => {
  const r = await cli('source', 'remove', 's1', '--operator', 'ops-h');
  expect({ code: r.code, err: r.err.trim() }).toEqual({
    code: 2,
    err: `error: source "s1" is named by the claim mapping rules (role_grants) of 1 issuer(s): ${IDP}; change them first, or force the removal (the rules naming it are then taken out of those mappings)  ${IDP}`,
  });
  expect(await sources()).toEqual(['s1', 's2']);
  expect(await mappings()).toEqual(UNTOUCHED);
  expect(await events()).toEqual([]);
});

test('source remove --force (CLI): the rules naming it are taken out, the mapping and its other rules stay, each mapping audited', async () => {
  const r = await cli('source', 'remove', 's1', '--force', '--operator', 'ops-h');
  expect({ code: r.code, out: r.out.trim() }).toEqual({ code: 0, out: `removed source s1; claim mapping rule(s) naming it taken out for issuer(s): ${IDP}` });
  expect(await sources()).toEqual(['s2']);
  expect(await mappings()).toEqual({ [IDP]: ['email', [rule('b', 'r', 's2')]], [OTHER]: [null, [rule('d', 'r', 's2')]] });
  expect(await events()).toEqual([
    ['claim_mapping_updated', 'ops-h', 's1', { issuer: IDP, reason: 'source_removed', removed: [rule('a', 'r', 's1'), rule('c', 'r', 's1')] }],
    ['source_removed', 'ops-h', 's1', { rejectedApprovals: [], grantsRemoved: 0, policiesRemoved: [], policiesDetached: [], claimRulesUntied: [IDP] }],
  ]);
});

test('apply --prune removing sources named by stored claim mapping rules: noted on --plan, refused without --force, untied with it', async () => {
  const doc = { version: 1, sources: [] };
  const run = (opts: { force: boolean; plan?: boolean }) =>
    applyInterlockFile(t.db, { document: doc as never }, { operator: 'ops-a', prune: true, scan: false, ...opts }).then(
      (o) => ['applied', o.plan.changes.filter((c) => c.kind === 'source').map((c) => `${c.action} ${c.name}: ${c.note ?? ''}`)],
      (e: Error & { details?: unknown }) => [e.constructor.name, e.message, e.details],
    );
  expect(await run({ force: false, plan: true })).toEqual([
    'applied',
    [`delete s1: named by the claim mapping rules of issuer(s) ${IDP}: refused unless --force`, `delete s2: named by the claim mapping rules of issuer(s) ${IDP}, ${OTHER}: refused unless --force`],
  ]);
  expect(await run({ force: false })).toEqual([
    'ConflictError',
    `source "s1" is named by the claim mapping rules (role_grants) of 1 issuer(s): ${IDP}; change them first, or apply with --force (the rules naming it are then taken out of those mappings)`,
    [IDP],
  ]);
  expect(await sources()).toEqual(['s1', 's2']);
  expect(await mappings()).toEqual(UNTOUCHED);
  expect(await events()).toEqual([]);
  expect((await run({ force: true }))[0]).toBe('applied');
  expect(await sources()).toEqual([]);
  // The mappings stay (their identity_claim too), with no rule left naming a removed source.
  expect(await mappings()).toEqual({ [IDP]: ['email', []], [OTHER]: [null, []] });
  expect(((await events()) as string[][]).map((e) => e.slice(0, 3))).toEqual([
    ['claim_mapping_updated', 'ops-a', 's1'],
    ['source_removed', 'ops-a', 's1'],
    ['claim_mapping_updated', 'ops-a', 's2'],
    ['claim_mapping_updated', 'ops-a', 's2'],
    ['source_removed', 'ops-a', 's2'],
  ]);
});

// With a claim_mappings section the file says what every mapping becomes: one that keeps naming the
// removed source is refused before anything changes (computePlan, older than hlow).
test('apply --prune whose file keeps a claim mapping rule naming the removed source is refused', async () => {
  const doc = { version: 1, sources: [], claim_mappings: [{ issuer: IDP, role_grants: [rule('a', 'r', 's1')] }] };
  const r = await applyInterlockFile(t.db, { document: doc as never }, { operator: 'ops-a', prune: true, force: true, scan: false }).then(
    () => ['applied'],
    (e: Error) => [e.constructor.name, e.message],
  );
  expect(r).toEqual(['ValidationError', `claim mapping ${IDP}: rule groups=a → role r on s1: no source "s1" in the file or the control plane`]);
  expect(await sources()).toEqual(['s1', 's2']);
});
