/**
 * A gateway whose database role does not own the control tables never runs node-pg-migrate
 * (docs/operators.md "Migrations: who applies them"). On the runtime role (`interlock db
 * grant-runtime-role`), alone or with the operator role's connection (`grant-operator-role`,
 * INTERLOCK_OPERATOR_DATABASE_URL, never migrated), right after `interlock db migrate` as the owner, the gateway starts as `interlock serve` does (openControlDb with its default
 * options): /readyz 200 and a governed tools/call answers. With a migration pending it does not
 * touch the migrations table: it stands by, /readyz 503 `migrations_pending`, and its one-line
 * reason names `interlock db migrate` (no driver text), then becomes ready once the owner migrates.
 * Before the fix the start failed with "must be owner of table interlock_migrations".
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { ADMIN_URL, createTempDatabase, execSql } from '../../helpers/pg';
import { callTool } from '../../helpers/governed';
import { createLoginRole, freshControlDb, type TestControlDb } from './control-db';
import { grantOperatorRole, grantRuntimeRole, MigrationsPendingError, migrationNames, openControlDb, redactUrl, runMigrations, type ControlDb } from '../../../src/control/db';
import { DEFAULT_CONFIG, type ResolvedGatewayConfig } from '../../../src/control/config';
import { serveGovernedGateway, type ServingGateway } from '../../../src/gateway';
import { createIdentity } from '../../../src/control/identities';
import { createApiKey } from '../../../src/control/keys';
import { createLogger } from '../../../src/observability/logger';
import { runCli } from '../../../src/cli/main';


jest.setTimeout(120_000);

let t: TestControlDb;
const roles: string[] = [];
let apiKey: string;
const urls: Record<'runtime' | 'operator', string> = { runtime: '', operator: '' };

/** A new login role il_<kind>_<random>, dropped after the file; its URL on the test database. */
async function createRole(kind: 'rt' | 'op' | 'own'): Promise<{ role: string; url: string }> {
  const role = `il_${kind}_${randomBytes(4).toString('hex')}`;
  roles.push(role);
  return { role, url: await createLoginRole(t, role) };
}

beforeAll(async () => {
  t = await freshControlDb('nonowner');
  const rt = await createRole('rt');
  await grantRuntimeRole(t.db, rt.role);
  urls.runtime = rt.url;
  const op = await createRole('op');
  await grantOperatorRole(t.db, op.role);
  urls.operator = op.url;
  const who = await createIdentity(t.db, 'agent-nonowner');
  apiKey = (await createApiKey(t.db, who.id)).secret;
});

afterAll(async () => {
  for (const role of roles) {
    for (const sql of [`REVOKE ALL ON ALL TABLES IN SCHEMA public FROM ${role}`, `REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM ${role}`, `REVOKE ALL ON ALL FUNCTIONS IN SCHEMA public FROM ${role}`, `REVOKE ALL ON SCHEMA public FROM ${role}`, `REVOKE ALL ON DATABASE "${t.temp.name}" FROM ${role}`]) {
      await t.db.pool.query(sql).catch(() => undefined);
    }
  }
  await t?.cleanup();
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  try {
    for (const role of roles) await admin.query(`DROP ROLE IF EXISTS ${role}`);
  } finally {
    await admin.end();
  }
});

/** Starts the gateway as `interlock serve` does: openControlDb with its default options, retried. */
async function serve(url: string, opened: ControlDb[], operatorUrl?: string, logLines: Array<{ msg: string; reason?: string }> = []): Promise<ServingGateway> {
  const config = structuredClone(DEFAULT_CONFIG) as unknown as ResolvedGatewayConfig;
  if (operatorUrl) config.database = { ...config.database, operator_url: operatorUrl };
  return serveGovernedGateway({
    openDb: async () => {
      const db = await openControlDb(url, { logger: createLogger('silent') });
      opened.push(db);
      return db;
    },
    config,
    host: '127.0.0.1',
    port: 0,
    logger: createLogger('info', { write: (line: string) => void logLines.push(JSON.parse(line) as { msg: string; reason?: string }) }),
    retryMs: 100,
    retryMaxMs: 200,
  });
}

async function appliedNames(): Promise<string[]> {
  return (await t.db.pool.query<{ name: string }>('SELECT name FROM interlock_migrations ORDER BY run_on, id')).rows.map((r) => r.name);
}

// "runtime": INTERLOCK_DATABASE_URL is the runtime role's; "operator": the same plus INTERLOCK_OPERATOR_DATABASE_URL (the operator role's).
describe.each(['runtime', 'operator'] as const)('the runtime role (with %s connection for governance)', (kind) => {
  const start = (opened: ControlDb[], logLines?: Array<{ msg: string; reason?: string }>) => serve(urls.runtime, opened, kind === 'operator' ? urls.operator : undefined, logLines);
  test('starts without migrating: /readyz 200 and a governed tools/call answers', async () => {
    const opened: ControlDb[] = [];
    const serving = await start(opened);
    try {
      expect(serving.notReadyReason()).toBeNull();
      expect(serving.current()).not.toBeNull();
      const base = new URL(serving.url).origin;
      const ready = await fetch(`${base}/readyz`);
      expect(ready.status).toBe(200);
      expect(await ready.json()).toEqual({ status: 'ready' });
      const call = await callTool({ url: serving.url }, 'interlock_list_sources', {}, apiKey);
      expect(call.status).toBe(200);
      expect(call.body.result.isError).toBeFalsy();
      expect(call.body.result.structuredContent).toEqual({});
    } finally {
      await serving.close(500);
      for (const db of opened) await db.close();
    }
  });

  test('with a migration pending it stands by (migrations_pending, naming `interlock db migrate`), never migrates, and is ready once the owner migrates', async () => {
    const last = migrationNames().at(-1)!;
    const before = await appliedNames();
    // The last migration's record renamed: it reads as pending (its objects stay; the name is put back below).
    expect((await t.db.pool.query("UPDATE interlock_migrations SET name = name || '~hidden' WHERE name = $1", [last])).rowCount).toBe(1);
    const err = await openControlDb(urls.runtime).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(MigrationsPendingError);
    expect((err as Error).message).toBe(`the control database needs 1 migration(s) (${last}): run \`interlock db migrate\` with the URL of the role that owns the control tables (this role does not migrate)`);
    const opened: ControlDb[] = [];
    const logLines: Array<{ msg: string; reason?: string }> = [];
    const serving = await start(opened, logLines);
    try {
      expect(serving.current()).toBeNull();
      expect(logLines.filter((l) => l.msg.startsWith('the control database')).slice(0, 1)).toEqual([
        expect.objectContaining({ msg: 'the control database needs migrations this role does not apply: serving not ready (governed calls refused audit_unavailable) and retrying', reason: (err as Error).message }),
      ]);
      expect(serving.notReadyReason()).toBe((err as Error).message);
      const base = new URL(serving.url).origin;
      const notReady = await fetch(`${base}/readyz`);
      expect(notReady.status).toBe(503);
      expect(await notReady.json()).toEqual({ status: 'not_ready', reason: 'migrations_pending' });
      // Nothing was applied or recorded by the non-owner (node-pg-migrate never ran on it).
      expect(await appliedNames()).toEqual(before.map((n) => (n === last ? `${n}~hidden` : n)));
      // The owner "migrates" (the record put back as `interlock db migrate` would leave it): ready.
      await t.db.pool.query("UPDATE interlock_migrations SET name = $1 WHERE name = $1 || '~hidden'", [last]);
      expect(await runMigrations(t.temp.url)).toEqual([]);
      await serving.ready;
      const ready = await fetch(`${base}/readyz`);
      expect(ready.status).toBe(200);
      const call = await callTool({ url: serving.url }, 'interlock_list_sources', {}, apiKey);
      expect(call.status).toBe(200);
      expect(call.body.result.isError).toBeFalsy();
    } finally {
      await serving.close(500);
      for (const db of opened) await db.close();
    }
  });
});

test('a non-superuser owner of the database still migrates by default: the first open creates every table, the next finds nothing to do', async () => {
  const owner = (await createRole('own')).role;
  const temp = await createTempDatabase('nonowner_own');
  try {
    await execSql(ADMIN_URL, `ALTER DATABASE "${temp.name}" OWNER TO ${owner}`);
    const u = new URL(temp.url);
    u.username = owner;
    u.password = `pw-${owner}`;
    for (let i = 0; i < 2; i++) {
      const db = await openControlDb(u.toString());
      try {
        expect((await db.pool.query<{ name: string }>('SELECT name FROM interlock_migrations ORDER BY run_on, id')).rows.map((r) => r.name)).toEqual(migrationNames());
        expect((await db.pool.query<{ o: string }>("SELECT pg_get_userbyid(relowner) AS o FROM pg_class WHERE oid = 'interlock_migrations'::regclass")).rows[0].o).toBe(owner);
      } finally {
        await db.close();
      }
    }
  } finally {
    await temp.drop();
  }
});

/** Runs the CLI in process; stdout and stderr lines collected. */
async function cli(args: string[]): Promise<{ code: number; out: string[]; err: string[] }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(args, { out: (x) => void out.push(x), err: (x) => void err.push(x) });
  return { code, out, err };
}

const forbidden = (url: string) =>
  `error: the database role of ${redactUrl(url)} may not do this (permission denied): run the interlock CLI with the URL of the role that owns the control tables (the one that runs \`interlock db migrate\`); a role given \`interlock db grant-runtime-role\` may only read, one given \`interlock db grant-operator-role\` may make governance changes and \`db sync-claim-rules\` but not create API keys or operator tokens nor read the audit trail`;

test('the CLI on the runtime role: a write is refused with one line naming the fix and exit code 2 (forbidden), nothing made; reads work', async () => {
  expect(await cli(['--database-url', urls.runtime, 'identity', 'create', 'made-by-runtime'])).toEqual({ code: 2, out: [], err: [forbidden(urls.runtime)] });
  expect((await t.db.pool.query("SELECT 1 FROM identities WHERE name = 'made-by-runtime'")).rowCount).toBe(0);
  const list = await cli(['--database-url', urls.runtime, '--json', 'identity', 'list']);
  expect(list.code).toBe(0);
  expect(list.err).toEqual([]);
});

test('the CLI on the operator role opens (it reads the applied migrations, not the key pepper): a governance change works, a key or the audit trail is refused the same way (task hnu3 item 1)', async () => {
  const made = await cli(['--database-url', urls.operator, 'identity', 'create', 'made-by-operator']);
  expect({ code: made.code, err: made.err }).toEqual({ code: 0, err: [] });
  expect(await cli(['--database-url', urls.operator, 'key', 'create', 'made-by-operator'])).toEqual({ code: 2, out: [], err: [forbidden(urls.operator)] });
  expect(await cli(['--database-url', urls.operator, 'audit', 'tail'])).toEqual({ code: 2, out: [], err: [forbidden(urls.operator)] });
  expect((await t.db.pool.query("SELECT 1 FROM api_keys k JOIN identities i ON i.id = k.identity_id WHERE i.name = 'made-by-operator'")).rowCount).toBe(0);
});
