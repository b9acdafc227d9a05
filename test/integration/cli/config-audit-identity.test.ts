/**
 * Config events about one identity are found by `audit search --kind config --identity NAME` (CLI,
 * direct and remote mode) and GET /admin/v1/audit?kind=config&identity=NAME (hnu2 item 3): the
 * event's identity_id is set when it is appended (src/control/change-audit.ts recordChange; for the
 * gateway's own claim-provisioned identities and grants, migration
 * 20261208280000000_config-event-identity_hnu2.sql), and `audit verify` still passes.
 */
import { randomBytes } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { createOperatorToken } from '../../../src/admin/tokens';
import { runCli } from '../../../src/cli/main';
import { syncClaimGrants } from '../../../src/auth/token-identities';
import { DEMO_ROLE } from '../../../src/demo/provision';
import { replaceConfiguredClaimGrants } from '../../../src/control/claim-rules';
import type { TokenIssuer } from '../../../generated/config-v1';

jest.setTimeout(180_000);

let env: GovernedEnv;
let base: string;
let token: string;

beforeAll(async () => {
  env = await startGovernedEnv();
  base = env.url.replace(/\/mcp$/, '');
  token = (await createOperatorToken(env.db, 'ops-anna')).secret;
  // The remote CLI reads it with --token-env (--token would warn on stderr: rt48a L1).
  process.env.IL_TEST_CLI_OPERATOR_TOKEN = token;
});
afterAll(async () => {
  delete process.env.IL_TEST_CLI_OPERATOR_TOKEN;
  await env?.close();
});

/** Runs the CLI in direct mode (`remote` false) or against the gateway's admin API. */
async function cli(remote: boolean, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const conn = remote ? ['--server', base, '--token-env', 'IL_TEST_CLI_OPERATOR_TOKEN'] : ['--database-url', env.db.url];
  const code = await runCli([...conn, ...args], { out: (t) => (stdout += t.endsWith('\n') ? t : t + '\n'), err: (t) => (stderr += t.endsWith('\n') ? t : t + '\n') });
  return { code, stdout, stderr };
}

/** [decision, operator, identityId] of the config events the CLI finds for `name`, oldest first. */
async function cliSearch(remote: boolean, name: string): Promise<unknown[]> {
  const r = await cli(remote, '--json', 'audit', 'search', '--kind', 'config', '--identity', name);
  expect([r.code, r.stderr]).toEqual([0, '']);
  const events = JSON.parse(r.stdout).events as { decision: string; operator: string; identityId: string }[];
  return events.map((e) => [e.decision, e.operator, e.identityId]).reverse();
}

test('identity_created, grant_added, key_created, key_revoked, identity_disabled are found by --identity (CLI direct, CLI remote, admin API)', async () => {
  const created = await cli(true, '--json', 'identity', 'create', 'etl-agent');
  expect(created.code).toBe(0);
  const id = JSON.parse(created.stdout).id as string;
  expect((await cli(true, 'grant', 'etl-agent', DEMO_ROLE.name, 'chinook')).code).toBe(0);
  const key = await cli(false, '--json', 'key', 'create', 'etl-agent');
  expect(key.code).toBe(0);
  expect((await cli(false, 'key', 'revoke', JSON.parse(key.stdout).keyId)).code).toBe(0);
  expect((await cli(true, 'identity', 'disable', 'etl-agent')).code).toBe(0);

  const os = (await cliSearch(false, 'etl-agent'))[2] as unknown[];
  const expected = [
    ['identity_created', 'ops-anna', id],
    ['grant_added', 'ops-anna', id],
    ['key_created', os[1], id],
    ['key_revoked', os[1], id],
    ['identity_disabled', 'ops-anna', id],
  ];
  expect(await cliSearch(false, 'etl-agent')).toEqual(expected);
  expect(await cliSearch(true, 'etl-agent')).toEqual(expected);
  const api = await fetch(`${base}/admin/v1/audit?kind=config&identity=etl-agent`, { headers: { authorization: `Bearer ${token}` } });
  expect(api.status).toBe(200);
  const body = (await api.json()) as { events: { decision: string; identityId: string; details: Record<string, unknown> }[] };
  expect(body.events.map((e) => [e.decision, e.identityId]).reverse()).toEqual(expected.map(([d, , i]) => [d, i]));
  expect(body.events.every((e) => e.details.identityId === id)).toBe(true);
  // Another identity's changes are not in this identity's search.
  expect((await cli(false, 'identity', 'create', 'other-agent')).code).toBe(0);
  expect(await cliSearch(false, 'etl-agent')).toEqual(expected);
  const v = await cli(false, 'audit', 'verify');
  expect([v.code, v.stderr]).toEqual([0, '']);
});

test("the gateway's own claim-provisioned identity and grants (SECURITY DEFINER functions) carry identity_id too; verify passes", async () => {
  const id = `idn_${randomBytes(10).toString('hex')}`;
  const issuer = 'https://issuer.example';
  await env.db.pool.query('SELECT interlock_provision_token_identity($1, $2, $3, $4)', [id, 'tok-user', issuer, 'sub-1']);
  // The issuer's rule recorded first, as an owner gateway's start does (task hcg: the function takes no pair no rule names).
  await replaceConfiguredClaimGrants(env.db, [{ issuer, role_grants: [{ claim: 'groups', value: 'analysts', role: DEMO_ROLE.name, source: 'chinook' }] } as TokenIssuer]);
  await syncClaimGrants(env.db, issuer, 'sub-1', [{ role: DEMO_ROLE.name, source: 'chinook' }]);
  await syncClaimGrants(env.db, issuer, 'sub-1', []);
  expect(await cliSearch(false, 'tok-user')).toEqual([
    ['identity_created', 'system', id],
    ['grant_added', 'system', id],
    ['grant_revoked', 'system', id],
  ]);
  const v = await cli(false, 'audit', 'verify');
  expect([v.code, v.stderr]).toEqual([0, '']);
});

test('grants made by apply (the demo provisioning\'s too) are found by --identity: their rows carry the identity (fx45 item 2)', async () => {
  const demo = (await cliSearch(false, 'demo-agent')).filter((e) => (e as unknown[])[0] === 'grant_added');
  // The demo file grants demo-agent its role on the Chinook source and on the handbook source, as operator interlock-demo.
  expect(demo.length).toBeGreaterThanOrEqual(1);
  expect(demo.every((e) => (e as unknown[])[1] === 'interlock-demo' && (e as unknown[])[2] === env.demo.identityId)).toBe(true);

  const file = `/tmp/fx45-apply-${randomBytes(4).toString('hex')}.json`;
  writeFileSync(file, JSON.stringify({ version: 1, identities: [{ name: 'apply-agent', grants: [{ role: DEMO_ROLE.name, source: 'chinook' }] }] }));
  try {
    const r = await cli(false, 'apply', '-f', file, '--operator', 'ops-bo');
    expect([r.code, r.stderr]).toEqual([0, '']);
  } finally {
    rmSync(file, { force: true });
  }
  const id = (await env.db.pool.query<{ id: string }>("SELECT id FROM identities WHERE name = 'apply-agent'")).rows[0].id;
  // The identity's creation and its grant, both by this apply.
  expect(await cliSearch(false, 'apply-agent')).toEqual([['identity_created', 'ops-bo', id], ['grant_added', 'ops-bo', id]]);
  const v = await cli(false, 'audit', 'verify');
  expect([v.code, v.stderr]).toEqual([0, '']);
});
