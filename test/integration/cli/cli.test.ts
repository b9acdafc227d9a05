/**
 * The operator CLI as a child process (`node bin/interlock.js …`) against a temporary control
 * database: identity/key/source/role/grant/policy/approval/audit flows, exit codes and messages.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTempDatabase, type TempDatabase } from '../../helpers/pg';
import { migrationNames, openControlDb, type ControlDb } from '../../../src/control/db';
import { DbIdentityResolver } from '../../../src/control/keys';
import { createApproval, getApproval } from '../../../src/control/approvals';

const BIN = join(__dirname, '..', '..', '..', 'bin', 'interlock.js');

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Environment without InterLock settings, so only what a test passes applies. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('INTERLOCK_')) env[k] = v;
  return { ...env, ...extra };
}

function run(args: string[], extraEnv: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { env: cleanEnv(extraEnv), timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

let temp: TempDatabase;
let db: ControlDb;
let dir: string;
let cli: (...args: string[]) => Promise<Run>;

beforeAll(async () => {
  temp = await createTempDatabase('ctl_cli');
  dir = mkdtempSync(join(tmpdir(), 'il-cli-'));
  cli = (...args: string[]) => run(['--database-url', temp.url, ...args]);
  // The first run migrates the database.
  const first = await cli('db', 'migrate');
  expect(first).toMatchObject({ code: 0, stderr: '' });
  expect(first.stdout).toBe(`applied ${migrationNames().length} migration(s): ${migrationNames().join(', ')}\n`);
  db = await openControlDb(temp.url, { migrate: false });
});
afterAll(async () => {
  await db?.close();
  await temp?.drop();
  rmSync(dir, { recursive: true, force: true });
});

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

describe('interlock CLI', () => {
  test('usage: no arguments, unknown commands and options exit 2; --help exits 0', async () => {
    expect((await run([])).code).toBe(2);
    const unknown = await run(['idntity', 'list']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("error: unknown command 'idntity'");
    const missing = await cli('identity', 'create');
    expect(missing).toMatchObject({ code: 2, stdout: '' });
    expect(missing.stderr).toContain("error: missing required argument 'name'");
    const badOpt = await cli('identity', 'list', '--colour');
    expect(badOpt.code).toBe(2);
    expect(badOpt.stderr).toContain("error: unknown option '--colour'");
    const help = await run(['--help']);
    expect(help.code).toBe(0);
    for (const c of ['serve', 'demo', 'identity', 'key', 'source', 'role', 'grant', 'revoke', 'policy', 'approval', 'audit', 'db']) expect(help.stdout).toContain(c);
  });

  test('db migrate and status', async () => {
    expect(await cli('db', 'migrate')).toEqual({ code: 0, stdout: 'the control database is up to date\n', stderr: '' });
    const st = await cli('--json', 'db', 'status');
    expect(JSON.parse(st.stdout)).toEqual({ applied: migrationNames(), pending: [], upToDate: true });
  });

  test('identities: create, duplicate, bad name, list, disable, unknown', async () => {
    const c = await cli('identity', 'create', 'cli-agent');
    expect(c.code).toBe(0);
    expect(c.stdout).toMatch(/^created identity cli-agent \(idn_[0-9a-f]{20}\); next: interlock key create cli-agent\n$/);
    expect(await cli('identity', 'create', 'cli-agent')).toEqual({ code: 2, stdout: '', stderr: 'error: identity "cli-agent" already exists\n' });
    const bad = await cli('identity', 'create', 'Not OK');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toBe('error: invalid identity name "Not OK": use 1-128 lower-case letters, digits, \'.\', \'_\', \'@\' or \'-\', starting with a letter or digit\n');
    const list = JSON.parse((await cli('identity', 'list', '--json')).stdout) as Array<{ name: string; disabled: boolean }>;
    expect(list.map((i) => [i.name, i.disabled])).toContainEqual(['cli-agent', false]);
    expect(await cli('identity', 'disable', 'ghost')).toEqual({ code: 3, stdout: '', stderr: 'error: identity "ghost" not found (interlock identity list shows the identities)\n' });
    await cli('identity', 'create', 'cli-disabled');
    const d = await cli('identity', 'disable', 'cli-disabled');
    expect(d.code).toBe(0);
    expect(d.stdout).toContain('disabled identity cli-disabled');
    const human = await cli('identity', 'list');
    expect(human.stdout).toMatch(/^NAME +ID +STATUS +CREATED +TOKEN \(LAST USE\)\n/);
    expect(human.stdout).toMatch(/cli-agent +idn_[0-9a-f]{20} +enabled +\S+ \S+ +-\n/);
    expect(human.stdout).toMatch(/cli-disabled +idn_[0-9a-f]{20} +disabled/);
  });

  test('keys: create prints the secret once with a warning; list never shows it; revoke; bad input', async () => {
    await cli('identity', 'create', 'key-agent');
    const human = await cli('key', 'create', 'key-agent');
    expect(human.code).toBe(0);
    const secret = /\n {2}(ilk_[A-Za-z0-9_-]{43})\n/.exec(human.stdout)![1];
    expect(human.stdout).toContain('Store this key now: it is shown only once and cannot be recovered.');
    const resolver = new DbIdentityResolver(db, { cacheTtlMs: 0 });
    expect(await resolver.resolve(secret)).toMatchObject({ name: 'key-agent' });

    const made = JSON.parse((await cli('--json', 'key', 'create', 'key-agent', '--expires-in', '7d')).stdout) as { keyId: string; secret: string; expiresAt: string; warning: string };
    expect(made.secret).toMatch(/^ilk_[A-Za-z0-9_-]{43}$/);
    expect(Date.parse(made.expiresAt) - Date.now()).toBeGreaterThan(7 * 86_400_000 - 120_000);

    const listed = await cli('key', 'list', '--identity', 'key-agent');
    expect(listed.code).toBe(0);
    expect(listed.stdout).not.toContain(secret.slice(10));
    expect(listed.stdout).not.toContain(made.secret.slice(10));
    expect(listed.stdout).toContain(made.secret.slice(0, 10) + '…');

    const rv = await cli('key', 'revoke', made.keyId);
    expect(rv).toEqual({ code: 0, stdout: `revoked ${made.keyId} (key-agent); running gateways refuse it within 2 s\n`, stderr: '' });
    expect(await resolver.resolve(made.secret)).toBeNull();
    // Task hnu4b (h): a second revoke says so, with the first revocation's time, and exits 0.
    const revokedAt = (await db.pool.query<{ t: Date }>('SELECT revoked_at AS t FROM api_keys WHERE id = $1', [made.keyId])).rows[0].t.toISOString();
    expect(await cli('key', 'revoke', made.keyId)).toEqual({ code: 0, stdout: `${made.keyId} (key-agent) was already revoked (at ${revokedAt.replace('T', ' ').replace(/\.\d{3}Z$/, 'Z')}): nothing changed\n`, stderr: '' });
    expect(await cli('key', 'revoke', 'key_00000000000000000000')).toEqual({ code: 3, stdout: '', stderr: 'error: API key key_00000000000000000000 not found\n' });
    expect(await cli('key', 'create', 'nobody')).toEqual({ code: 3, stdout: '', stderr: 'error: identity "nobody" not found (interlock identity list shows the identities)\n' });
    const badDur = await cli('key', 'create', 'key-agent', '--expires-in', 'soon');
    expect(badDur).toEqual({ code: 2, stdout: '', stderr: 'error: --expires-in: expected a duration such as 90s, 45m, 12h or 30d, got "soon"\n' });
    const past = await cli('key', 'create', 'key-agent', '--expires-at', '2001-01-01T00:00:00Z');
    expect(past.code).toBe(2);
    expect(past.stderr).toBe('error: the expiry must be in the future (got 2001-01-01T00:00:00.000Z)\n');
  });

  test('roles: create from YAML and JSON, update, show, list; invalid files list schema paths', async () => {
    const yaml = file('analyst.yaml', 'name: analyst\ndescription: reads albums\nstatements:\n  - { effect: allow, action: read, resource: public.album }\n  - { effect: deny, action: read, resource: public.album.secret }\n');
    expect(await cli('role', 'create', yaml)).toEqual({ code: 0, stdout: 'created role analyst (2 statement(s))\n', stderr: '' });
    expect((await cli('role', 'create', yaml)).stdout).toBe('updated role analyst (2 statement(s))\n');
    const bad = file('bad-role.json', JSON.stringify({ name: 'Bad Role', statements: [{ effect: 'perhaps', action: 'read', resource: 'x' }], colour: 'red' }));
    const r = await cli('role', 'create', bad);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(
      [
        'error: invalid role',
        '  /: unknown key "colour" (not allowed here)',
        '  /name: must match pattern "^[a-z0-9][a-z0-9_.-]{0,62}$"',
        '  /statements/0/effect: must be equal to one of the allowed values (allow, deny)',
        '',
      ].join('\n'),
    );
    expect(await cli('role', 'create', join(dir, 'absent.yaml'))).toEqual({ code: 2, stdout: '', stderr: `error: file not found: ${join(dir, 'absent.yaml')}\n` });
    const broken = await cli('role', 'create', file('broken.json', '{"name": '));
    expect(broken.code).toBe(2);
    expect(broken.stderr).toMatch(/^error: .*broken\.json is not valid JSON\n/);
    const show = await cli('role', 'show', 'analyst');
    expect(show.stdout).toBe(
      ['role analyst: reads albums', '', 'EFFECT  ACTION  RESOURCE', 'allow   read    public.album', 'deny    read    public.album.secret', ''].join('\n'),
    );
    expect(JSON.parse((await cli('--json', 'role', 'show', 'analyst')).stdout)).toMatchObject({ name: 'analyst', statements: [{ effect: 'allow' }, { effect: 'deny' }] });
    expect(await cli('role', 'show', 'ghost')).toEqual({ code: 3, stdout: '', stderr: 'error: role "ghost" not found (interlock role list shows the roles)\n' });
    expect((await cli('role', 'list')).stdout).toContain('analyst  2           reads albums');
  });

  test('sources: add from a file with a catalog scan, list, show (redacted), disable/enable, scan; bad definitions', async () => {
    const u = new URL(temp.url);
    const def = { id: 'local', type: 'postgres', name: 'Local', settings: { host: u.hostname, port: Number(u.port || 5432), database: temp.name, reader: { user: decodeURIComponent(u.username), password: 'not-shown' }, tls: { mode: 'off' } } };
    const add = await cli('source', 'add', file('local.json', JSON.stringify(def)));
    expect(add.stderr).toBe('');
    expect(add.code).toBe(0);
    expect(add.stdout).toMatch(/^added source local \(postgres\); catalog: \d+ relation\(s\)\n$/);
    expect(await cli('source', 'add', join(dir, 'local.json'))).toEqual({ code: 2, stdout: '', stderr: 'error: source "local" already exists\n' });
    const show = await cli('source', 'show', 'local');
    expect(show.stdout).toContain('password: "***"');
    expect(show.stdout).not.toContain('not-shown');
    expect((await cli('source', 'list')).stdout).toMatch(/local +postgres +Local +yes +\d+ relations, /);
    expect((await cli('source', 'disable', 'local')).stdout).toBe('disabled source local: calls to it are refused as unavailable\n');
    expect((await cli('source', 'enable', 'local')).stdout).toBe('enabled source local\n');
    expect((await cli('source', 'scan', 'local')).stdout).toMatch(/^scanned local: \d+ relation\(s\) at \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\n$/);
    expect(await cli('source', 'scan', 'ghost')).toEqual({ code: 3, stdout: '', stderr: 'error: source "ghost" not found (interlock source list shows the sources)\n' });
    // Flags form: the schema names what is missing.
    const flags = await cli('source', 'add', '--id', 'half', '--host', 'db.internal', '--tls-mode', 'off');
    expect(flags.code).toBe(2);
    expect(flags.stderr).toBe(["error: invalid source definition", "  /settings: must have required property 'database'", "  /settings: must have required property 'reader'", ''].join('\n'));
    // An unreachable source is added, with a warning about the scan.
    const unreachable = await cli('source', 'add', '--id', 'far', '--host', '127.0.0.1', '--port', '1', '--database', 'x', '--reader-user', 'r', '--tls-mode', 'off');
    expect(unreachable.code).toBe(0);
    expect(unreachable.stdout).toBe('added source far (postgres)\n');
    expect(unreachable.stderr).toMatch(/^warning: source far was added but its catalog scan failed: cannot connect to source "far" as its reader: connection refused/);
  });

  test('grants: grant, already granted, list, revoke, missing parts', async () => {
    await cli('identity', 'create', 'grant-agent');
    expect(await cli('grant', 'grant-agent', 'analyst', 'local')).toEqual({ code: 0, stdout: 'granted role analyst on local to grant-agent\n', stderr: '' });
    expect((await cli('grant', 'grant-agent', 'analyst', 'local')).stdout).toBe('grant-agent already holds role analyst on local\n');
    expect(await cli('grant', 'grant-agent', 'ghost-role', 'local')).toEqual({ code: 3, stdout: '', stderr: 'error: role "ghost-role" not found (interlock role list shows the roles)\n' });
    expect(await cli('grant', 'grant-agent', 'analyst', 'ghost-source')).toEqual({ code: 3, stdout: '', stderr: 'error: source "ghost-source" not found (interlock source list shows the sources)\n' });
    expect(await cli('grant', 'ghost', 'analyst', 'local')).toEqual({ code: 3, stdout: '', stderr: 'error: identity "ghost" not found (interlock identity list shows the identities)\n' });
    const listed = JSON.parse((await cli('--json', 'grants', '--identity', 'grant-agent')).stdout) as Array<{ roleName: string; sourceId: string }>;
    expect(listed.map((g) => [g.roleName, g.sourceId])).toEqual([['analyst', 'local']]);
    expect((await cli('revoke', 'grant-agent', 'analyst', 'local')).stdout).toBe('revoked role analyst on local from grant-agent\n');
    expect(await cli('revoke', 'grant-agent', 'analyst', 'local')).toEqual({ code: 3, stdout: '', stderr: 'error: grant-agent holds no role analyst on local\n' });
  });

  test('policies: add a list, conflict, replace, invalid, list, show, remove', async () => {
    const pols = file(
      'policies.yaml',
      '- name: mask-email\n  rule: { type: mask_columns, columns: [public.customer.email], method: partial }\n- name: need-where\n  applies_to: { sources: [local] }\n  rule: { type: require_where }\n',
    );
    // The control database is the scanned source here: it has no customer table (task hnu4a: names are checked unless intended).
    expect(await cli('policy', 'add', pols, '--allow-unknown-names')).toEqual({ code: 0, stdout: 'added policy mask-email (mask_columns)\nadded policy need-where (require_where)\n', stderr: '' });
    expect(await cli('policy', 'add', pols, '--allow-unknown-names')).toEqual({ code: 2, stdout: '', stderr: 'error: policy "mask-email" already exists (use --replace to replace it)\n' });
    expect((await cli('policy', 'add', pols, '--replace', '--allow-unknown-names')).stdout).toBe('replaced policy mask-email (mask_columns)\nreplaced policy need-where (require_where)\n');
    const bad = await cli('policy', 'add', file('bad-policy.yaml', 'name: cap\nrule: { type: max_rows, max_rows: 0, extra: 1 }\n'));
    expect(bad).toEqual({ code: 2, stdout: '', stderr: 'error: invalid policy\n  /rule: unknown key "extra" (not allowed here)\n  /rule/max_rows: must be >= 1\n' });
    const unknownType = await cli('policy', 'add', file('bad-type.yaml', 'name: x\nrule: { type: allow_everything }\n'));
    expect(unknownType.stderr).toBe('error: invalid policy\n  /rule/type: must be one of deny_relations, require_where, max_rows, time_window, mask_columns, hide_documents, restrict_rows\n');
    // issue 27: a restrict_rows predicate is checked when written, in the grammar of a role's rows.
    const badRows = await cli('policy', 'add', file('bad-rows.yaml', 'name: rr\nrule: { type: restrict_rows, relations: [public.customer], rows: "id IN (SELECT 1)" }\n'));
    expect(badRows).toEqual({ code: 2, stdout: '', stderr: 'error: invalid policy: a row restriction is not valid\n  rr/rule/rows: a sub-select is not allowed in a row predicate\n' });
    expect((await cli('policy', 'add', '--allow-unknown-names', file('rows.yaml', 'name: rr\nrule: { type: restrict_rows, relations: [public.customer], rows: "country = identity.country" }\n'))).stdout).toBe('added policy rr (restrict_rows)\n');
    expect((await cli('policy', 'list')).stdout).toMatch(/need-where +require_where +yes +\{"sources":\["local"\]\}/);
    expect((await cli('policy', 'show', 'mask-email')).stdout).toContain('method: partial');
    expect(await cli('policy', 'remove', 'need-where')).toEqual({ code: 0, stdout: 'removed policy need-where\n', stderr: '' });
    expect(await cli('policy', 'remove', 'need-where')).toEqual({ code: 3, stdout: '', stderr: 'error: policy "need-where" not found\n' });
  });

  test('approvals: list, show, self-approval refused, reject, state checks', async () => {
    const idn = JSON.parse((await cli('--json', 'identity', 'create', 'apr-agent')).stdout) as { id: string };
    const a = await createApproval(db, { sourceId: 'local', identityId: idn.id, keyId: null, requestId: 'req_cli', sql: 'DELETE FROM t WHERE id = $1', params: [1], classification: { fingerprint: 'f' } });
    const list = await cli('approval', 'list', '--state', 'pending');
    expect(list.stdout).toContain(`${a.id}  pending  apr-agent  local`);
    expect((await cli('approval', 'show', a.id)).stdout).toContain('sql: DELETE FROM t WHERE id = $1');
    expect(await cli('approval', 'show', 'apr_000000000000000000000000')).toEqual({ code: 3, stdout: '', stderr: 'error: approval apr_000000000000000000000000 not found (interlock approval list shows the approvals)\n' });
    const self = await cli('approval', 'approve', a.id, '--operator', 'apr-agent');
    expect(self).toEqual({ code: 2, stdout: '', stderr: 'error: self_approval_forbidden: apr-agent requested this write and cannot approve it\n' });
    expect((await getApproval(db, a.id))!.state).toBe('pending');
    const badState = await cli('approval', 'list', '--state', 'done');
    expect(badState.code).toBe(2);
    expect(badState.stderr).toContain("error: option '--state <state>' argument 'done' is invalid. Allowed choices are pending, approved, executed, failed, rejected, expired.");
    expect(await cli('approval', 'reject', a.id, '--operator', 'ops-anna', '--reason', 'not today')).toEqual({ code: 0, stdout: `rejected ${a.id}\n`, stderr: '' });
    expect((await getApproval(db, a.id))!).toMatchObject({ state: 'rejected', decidedBy: 'ops-anna' });
    expect(await cli('approval', 'approve', a.id, '--operator', 'ops-anna')).toEqual({ code: 2, stdout: '', stderr: `error: approval ${a.id} is rejected, not pending\n` });
    const trail = JSON.parse((await cli('--json', 'audit', 'search', '--approval', a.id)).stdout) as { events: Array<{ decision: string; operator: string }> };
    expect(trail.events.map((e) => [e.decision, e.operator])).toEqual([['rejected', 'ops-anna']]);
  });

  test('audit: tail and search, bad filters', async () => {
    const tail = JSON.parse((await cli('--json', 'audit', 'tail', '-n', '5')).stdout) as unknown[];
    expect(Array.isArray(tail)).toBe(true);
    expect((await cli('audit', 'search', '--since', 'last week')).stderr).toBe('error: --since: expected an ISO-8601 time (2026-11-29T12:00:00Z) or a duration (2h), got "last week"\n');
    // Task hnu4b (c): a decision the trail never records is refused, naming the allowed values.
    const typo = await cli('audit', 'search', '--decision', 'refuzed');
    expect(typo.code).toBe(2);
    expect(typo.stdout).toBe('');
    expect(typo.stderr).toMatch(/^error: --decision: unknown decision "refuzed" \(did you mean refused\?\)\n  tool calls: allowed, refused, queued, invalid, failed, cancelled\n  approvals: queued, approved, rejected, executed, failed, expired, refused, requeued\n  configuration changes: applied, source_added, .*claim_rules_synced, claim_mapping_updated, audit_key_registered, audit_key_retired\n$/);
    expect((await cli('audit', 'tail', '-n', '0')).code).toBe(2);
    const page = JSON.parse((await cli('--json', 'audit', 'search', '--since', '1h', '--kind', 'approval', '--limit', '1')).stdout) as { events: unknown[]; nextCursor: string | null };
    expect(page.events.length).toBeLessThanOrEqual(1);
  });

  test('configuration errors exit 2 before touching the database', async () => {
    const env = await run(['--database-url', temp.url, 'identity', 'list'], { INTERLOCK_PROT: '9000' });
    expect(env).toEqual({ code: 2, stdout: '', stderr: 'error: invalid configuration\n  INTERLOCK_PROT: unknown InterLock environment variable (did you mean INTERLOCK_PORT?)\n' });
    const cfg = file('gw.yaml', 'listen:\n  port: 8787\nrequire_approvals: false\n');
    const bad = await cli('--config', cfg, 'identity', 'list');
    expect(bad).toEqual({ code: 2, stdout: '', stderr: `error: invalid configuration\n  ${cfg} /: unknown key "require_approvals" (not allowed here)\n` });
  });

  // Task hnu41 item 3 (a new user's finding): an unknown INTERLOCK_LOG_LEVEL made pino throw (a stack
  // trace, exit 1) before the configuration was read; it is the configuration error `log_level: loud` is.
  test('an unknown INTERLOCK_LOG_LEVEL is a configuration error (exit 2, the allowed values listed), for serve and the CLI', async () => {
    const stderr = 'error: invalid configuration\n  INTERLOCK_LOG_LEVEL: must be equal to one of the allowed values (fatal, error, warn, info, debug, trace, silent)\n';
    expect(await run(['--database-url', temp.url, 'serve', '--port', '0'], { INTERLOCK_LOG_LEVEL: 'verbose' })).toEqual({ code: 2, stdout: '', stderr });
    expect(await run(['--database-url', temp.url, 'identity', 'list'], { INTERLOCK_LOG_LEVEL: 'verbose' })).toEqual({ code: 2, stdout: '', stderr });
  });

  test('an unreachable control database exits 1 with a clear message and no password', async () => {
    const r = await run(['--database-url', 'postgres://op:hunter2@127.0.0.1:1/interlock', 'identity', 'list']);
    expect(r).toEqual({ code: 1, stdout: '', stderr: 'error: cannot reach the control database at postgres://op:***@127.0.0.1:1/interlock (ECONNREFUSED)\n' });
  });
});
