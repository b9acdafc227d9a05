/**
 * Task hnu3: what a new user following README.md and docs/operators.md met, each checked the way the
 * user ran it (the CLI in process, real PostgreSQL roles, a real token issuer):
 * 1. `db sync-claim-rules` with the operator role's URL records the rules (exit 0, one config event);
 *    what that role may not do is refused with a line that does not call it the runtime role.
 * 2. `identity link|unlink` links a token subject to an identity (one config event each, a subject of
 *    another identity refused, exit codes per docs), and a linked subject signs in under the default
 *    `unknown_subjects: refuse`.
 * 3. `db migrate` as a role that may not create in schema public: one `error:` line naming the fix
 *    (`createdb -O`), no stack trace; after the fix it migrates.
 * 5. `serve` on a taken port exits non-zero and leaves the recorded claim rules and their events as they were.
 */
import { createServer, type Server } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { ADMIN_URL, createTempDatabase, execSql } from '../../helpers/pg';
import { callTool } from '../../helpers/governed';
import { startTestIssuer, type TestIssuer } from '../../helpers/jwks-server';
import { createLoginRole, dropLoginRole, freshControlDb, type TestControlDb } from '../control/control-db';
import { grantOperatorRole, migrationNames, redactUrl } from '../../../src/control/db';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from '../../../src/control/config';
import { startGovernedGateway } from '../../../src/gateway';
import { createLogger } from '../../../src/observability/logger';
import { addSource } from '../../../src/control/sources';
import { upsertRole } from '../../../src/control/roles';
import { createIdentity } from '../../../src/control/identities';
import { grantRole } from '../../../src/control/grants';
import { runCli } from '../../../src/cli/main';

jest.setTimeout(180_000);

const RESOURCE = 'https://gateway.hnu3.example/mcp';
let t: TestControlDb;
let iss: TestIssuer;
let dir: string;
let operatorRole: string;
let opUrl: string;
const roles: string[] = [];

async function cli(...args: string[]): Promise<{ code: number; out: string[]; err: string[] }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(args, { out: (x) => void out.push(x), err: (x) => void err.push(x) });
  return { code, out, err };
}

async function lastEventId(): Promise<string> {
  return (await t.db.pool.query<{ id: string }>('SELECT coalesce(max(id), 0)::text AS id FROM audit_events')).rows[0].id;
}

async function configEventsAfter(id: string, like: string): Promise<Array<{ decision: string; operator: string; details: unknown }>> {
  return (await t.db.pool.query("SELECT decision, operator, details FROM audit_events WHERE kind = 'config' AND decision LIKE $2 AND id > $1 ORDER BY id", [id, like])).rows;
}

async function recordedRules(): Promise<Array<{ issuer: string; role_name: string; source_id: string }>> {
  return (await t.db.pool.query('SELECT issuer, role_name, source_id FROM configured_claim_grants ORDER BY 1, 2, 3')).rows;
}

function configFile(name: string, sources: string[]): string {
  const file = join(dir, name);
  writeFileSync(file, JSON.stringify({ auth: { resource: RESOURCE, issuers: [{ issuer: iss.issuer, jwks_uri: iss.jwksUri, role_grants: sources.map((s) => ({ claim: 'groups', value: s, role: 'reader', source: s })) }] } }));
  return file;
}

beforeAll(async () => {
  t = await freshControlDb('hnu3');
  iss = await startTestIssuer(RESOURCE);
  dir = mkdtempSync(join(tmpdir(), 'il-hnu3-'));
  for (const id of ['docs-a', 'docs-b']) await addSource(t.db, { id, type: 'documents', name: id, settings: { path: dir } });
  await upsertRole(t.db, { name: 'reader', statements: [{ effect: 'allow', action: 'read', resource: '*' }] });
  operatorRole = `il_op_${randomBytes(4).toString('hex')}`;
  roles.push(operatorRole);
  opUrl = await createLoginRole(t, operatorRole);
  await grantOperatorRole(t.db, operatorRole);
});

afterAll(async () => {
  for (const r of roles) await dropLoginRole(t, r);
  await iss?.close();
  await t?.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

test('item 1: `db sync-claim-rules` with the operator role\'s URL records the rules (exit 0) and its config event; a key is refused naming what each role may do', async () => {
  const before = await lastEventId();
  const file = configFile('op.json', ['docs-a']);
  expect(await cli('--database-url', opUrl, '--config', file, 'db', 'sync-claim-rules', '--operator', 'ops-hnu3')).toEqual({
    code: 0,
    out: [`recorded the configuration's claim rules: 1 added, 0 removed\n  + ${iss.issuer} reader on docs-a`],
    err: [],
  });
  expect(await recordedRules()).toEqual([{ issuer: iss.issuer, role_name: 'reader', source_id: 'docs-a' }]);
  expect(await configEventsAfter(before, 'claim_rules_synced')).toEqual([{ decision: 'claim_rules_synced', operator: 'ops-hnu3', details: { added: [{ issuer: iss.issuer, role: 'reader', source: 'docs-a' }], removed: [] } }]);
  // The operator role cannot read the key pepper: creating a key is refused in one line (exit 2), not as "the runtime role".
  await createIdentity(t.db, 'hnu3-keyless');
  expect(await cli('--database-url', opUrl, 'key', 'create', 'hnu3-keyless')).toEqual({
    code: 2,
    out: [],
    err: [
      `error: the database role of ${redactUrl(opUrl)} may not do this (permission denied): run the interlock CLI with the URL of the role that owns the control tables (the one that runs \`interlock db migrate\`); a role given \`interlock db grant-runtime-role\` may only read, one given \`interlock db grant-operator-role\` may make governance changes and \`db sync-claim-rules\` but not create API keys or operator tokens nor read the audit trail`,
    ],
  });
  expect((await t.db.pool.query("SELECT 1 FROM api_keys k JOIN identities i ON i.id = k.identity_id WHERE i.name = 'hnu3-keyless'")).rowCount).toBe(0);
});

test('item 2: `identity link|unlink` (exit 0, 2 for a subject of another identity, 3 for one not linked), `identity show` lists the link, and a linked subject signs in under unknown_subjects: refuse', async () => {
  const ana = await createIdentity(t.db, 'hnu3-ana');
  await createIdentity(t.db, 'hnu3-ben');
  await grantRole(t.db, { identityId: ana.id, roleName: 'reader', sourceId: 'docs-b' });
  const config = structuredClone(DEFAULT_CONFIG as ResolvedGatewayConfig);
  config.auth = { resource: RESOURCE, issuers: [{ issuer: iss.issuer, jwks_uri: iss.jwksUri }] };
  const gw = await startGovernedGateway({ db: t.db, config, host: '127.0.0.1', port: 0, logger: createLogger('silent'), catalogRescanMs: 0 });
  const signIn = async () => (await callTool({ url: gw.url }, 'interlock_list_sources', {}, await iss.mint({ sub: 'idp|ana-1' }))).body.result;
  try {
    // Unknown subject, default refuse: refused.
    expect((await signIn()).structuredContent).toMatchObject({ status: 'unauthorized', code: 'invalid_token' });
    const before = await lastEventId();
    // Through the operator role's URL, as the docs' "Identity providers" shows.
    expect(await cli('--database-url', opUrl, 'identity', 'link', 'hnu3-ana', '--issuer', iss.issuer, '--subject', 'idp|ana-1', '--operator', 'x').then((r) => r.code)).toBe(2); // no --operator on link
    expect(await cli('--database-url', opUrl, 'identity', 'link', 'hnu3-ana', '--issuer', iss.issuer, '--subject', 'idp|ana-1')).toEqual({ code: 0, out: [`linked token subject idp|ana-1 of ${iss.issuer} to identity hnu3-ana`], err: [] });
    expect(await cli('--database-url', opUrl, 'identity', 'link', 'hnu3-ana', '--issuer', iss.issuer, '--subject', 'idp|ana-1')).toEqual({ code: 0, out: [`token subject idp|ana-1 of ${iss.issuer} is already linked to identity hnu3-ana`], err: [] });
    expect(await cli('--database-url', opUrl, 'identity', 'link', 'hnu3-ben', '--issuer', iss.issuer, '--subject', 'idp|ana-1')).toEqual({
      code: 2,
      out: [],
      err: [`error: the token subject "idp|ana-1" of ${iss.issuer} is linked to identity "hnu3-ana": unlink it there first (interlock identity unlink hnu3-ana --issuer ${iss.issuer} --subject …)`],
    });
    expect(await cli('--database-url', opUrl, 'identity', 'link', 'hnu3-ben', '--issuer', 'login.example.com', '--subject', 'x')).toEqual({
      code: 2,
      out: [],
      err: ['error: invalid token subject', '  issuer: an http(s) URL of at most 2048 characters, exactly as the tokens\' "iss" (e.g. https://login.example.com/)'],
    });
    expect((await cli('--database-url', opUrl, 'identity', 'link', 'hnu3-ghost', '--issuer', iss.issuer, '--subject', 'x')).code).toBe(3);
    const shown = await cli('--database-url', t.temp.url, '--json', 'identity', 'show', 'hnu3-ana');
    expect(JSON.parse(shown.out[0]).subjects).toEqual([{ issuer: iss.issuer, subject: 'idp|ana-1', createdAt: expect.any(String), lastUsedAt: null }]);

    // Linked: the token signs in as hnu3-ana and sees its grant.
    const ok = await signIn();
    expect(ok.isError).toBeUndefined();
    expect(Object.keys(JSON.parse(ok.content[0].text))).toEqual(['docs-b']);

    expect(await cli('--database-url', opUrl, 'identity', 'unlink', 'hnu3-ben', '--issuer', iss.issuer, '--subject', 'idp|ana-1')).toEqual({
      code: 3,
      out: [],
      err: [`error: identity "hnu3-ben" has no token subject "idp|ana-1" of ${iss.issuer} (interlock identity show hnu3-ben lists its subjects)`],
    });
    expect(await cli('--database-url', opUrl, 'identity', 'unlink', 'hnu3-ana', '--issuer', iss.issuer, '--subject', 'idp|ana-1')).toEqual({ code: 0, out: [`unlinked token subject idp|ana-1 of ${iss.issuer} from identity hnu3-ana`], err: [] });
    const details = { identityId: ana.id, identity: 'hnu3-ana', issuer: iss.issuer, subject: 'idp|ana-1' };
    const osUser = (await import('node:os')).userInfo().username;
    expect(await configEventsAfter(before, 'identity_subject_%')).toEqual([
      { decision: 'identity_subject_linked', operator: osUser, details },
      { decision: 'identity_subject_unlinked', operator: osUser, details },
    ]);
    // Unlinked: refused again once the resolver's cache (at most 2 s) has passed.
    let refused: unknown = null;
    for (let i = 0; i < 60 && !refused; i++) {
      const r = await signIn();
      if (r.isError) refused = r.structuredContent;
      else await new Promise((res) => setTimeout(res, 100));
    }
    expect(refused).toMatchObject({ status: 'unauthorized', code: 'invalid_token' });
  } finally {
    await gw.close(1000);
  }
});

test('item 3: `db migrate` as a role that may not create in schema public prints one error line naming createdb -O (exit 2, no stack trace); as the database owner it migrates', async () => {
  const owner = `il_own_${randomBytes(4).toString('hex')}`;
  const temp = await createTempDatabase('hnu3_own');
  try {
    await execSql(ADMIN_URL, `CREATE ROLE ${owner} LOGIN PASSWORD 'pw-${owner}'`);
    const u = new URL(temp.url);
    u.username = owner;
    u.password = `pw-${owner}`;
    const url = u.toString();
    await execSql(temp.url, 'REVOKE CREATE ON SCHEMA public FROM PUBLIC'); // PostgreSQL 15's default, also on older servers
    expect(await cli('--database-url', url, 'db', 'migrate')).toEqual({
      code: 2,
      out: [],
      err: [
        `error: the database role of ${redactUrl(url)} may not create the control tables (permission denied for schema public): make role ${owner} the database's owner (createdb -O ${owner} ${temp.name} for a new database, or as a superuser ALTER DATABASE "${temp.name}" OWNER TO "${owner}"; on PostgreSQL 15 and later only the owner may create in schema public) and run \`interlock db migrate\` again`,
      ],
    });
    await execSql(ADMIN_URL, `ALTER DATABASE "${temp.name}" OWNER TO ${owner}`);
    await execSql(temp.url, `ALTER SCHEMA public OWNER TO ${owner}`); // PostgreSQL 14 and older: public belongs to the bootstrap superuser
    const ok = await cli('--database-url', url, 'db', 'migrate');
    expect({ code: ok.code, err: ok.err, out: ok.out }).toEqual({ code: 0, err: [], out: [`applied ${migrationNames().length} migration(s): ${migrationNames().join(', ')}`] });
  } finally {
    await temp.drop();
    await execSql(ADMIN_URL, `DROP ROLE IF EXISTS ${owner}`);
  }
});

test('item 5: `serve` on a taken port exits 1 and changes no recorded claim rule and records no claim_rules_synced event', async () => {
  const busy: Server = createServer();
  await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', () => resolve()));
  const port = (busy.address() as { port: number }).port;
  try {
    const rulesBefore = await recordedRules();
    const before = await lastEventId();
    const file = configFile('serve.json', ['docs-a', 'docs-b']);
    const r = await cli('--database-url', t.temp.url, '--config', file, 'serve', '--host', '127.0.0.1', '--port', String(port));
    expect(r.code).toBe(1);
    expect(r.err[r.err.length - 1]).toBe('  the port is taken (another gateway running?): choose another with --port N or INTERLOCK_PORT=N');
    expect(await recordedRules()).toEqual(rulesBefore);
    expect(await configEventsAfter(before, 'claim_rules_synced')).toEqual([]);
  } finally {
    await new Promise<void>((resolve) => busy.close(() => resolve()));
  }
});
