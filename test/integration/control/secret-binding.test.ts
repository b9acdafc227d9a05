/**
 * Issue 24, item 1: a stored source password is bound to its endpoint. Against a real gateway, a
 * source points at a fake PostgreSQL server that records every password it is sent; changing the
 * host, port, database, TLS settings or user without giving the password again is refused
 * (400 password_required) through PATCH /admin/v1/sources/{id}, POST /admin/v1/apply and the CLI,
 * and the old password never reaches another server. Giving it again works.
 */
import YAML from 'yaml';
import { startGovernedEnv, type GovernedEnv } from '../../helpers/governed';
import { startRecordingPg, type RecordingPg } from '../../helpers/recording-pg';
import { createOperatorToken } from '../../../src/admin/tokens';
import { runCli } from '../../../src/cli/main';
import { requireSource } from '../../../src/control/sources';
import { checkedFetch, type CheckedResponse } from '../http/openapi';

jest.setTimeout(120_000);

let env: GovernedEnv;
let base: string;
let token: string;
let home: RecordingPg;
let elsewhere: RecordingPg;
const problems: string[] = [];
const OLD = 'old-secret-7f3a';

async function admin(method: string, path: string, body?: unknown): Promise<CheckedResponse> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const r = await checkedFetch(`${base}/admin/v1${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  problems.push(...r.problems);
  return r;
}

const sent = (fake: RecordingPg) => fake.logins.map((l) => `${l.user}@${l.database}:${l.password}`);

beforeAll(async () => {
  env = await startGovernedEnv();
  base = env.url.replace(/\/mcp$/, '');
  token = (await createOperatorToken(env.db, 'ops-bind')).secret;
  home = await startRecordingPg();
  elsewhere = await startRecordingPg();
  const added = await admin('POST', '/sources?scan=false', {
    id: 'bound',
    type: 'postgres',
    name: 'Bound',
    settings: { host: '127.0.0.1', port: home.port, database: 'app', reader: { user: 'app_reader', password: OLD }, writer: { user: 'app_writer', password: 'writer-secret' }, tls: { mode: 'off' } },
  });
  expect(added.status).toBe(201);
});
afterAll(async () => {
  await home?.close();
  await elsewhere?.close();
  await env?.close();
});
afterEach(() => {
  expect(problems.splice(0)).toEqual([]);
});

test('the fake records what a scan sends: the stored reader password, to its own endpoint', async () => {
  const scan = await admin('POST', '/sources/bound/scan');
  expect(scan.status).toBe(503);
  expect(scan.text).not.toContain(OLD);
  expect(sent(home)).toEqual([`app_reader@app:${OLD}`]);
  home.logins.length = 0;
});

test('PATCH: a new host, port, database, TLS setting or user without the password is 400 password_required; nothing moves and nothing is sent elsewhere', async () => {
  const patches: Array<[unknown, string[]]> = [
    [{ settings: { port: elsewhere.port } }, ['port']],
    [{ settings: { host: 'localhost' } }, ['host']],
    [{ settings: { database: 'other' } }, ['database']],
    [{ settings: { tls: { mode: 'require' } } }, ['tls.mode']],
    [{ settings: { tls: { servername: 'db.example' } } }, ['tls.servername']],
  ];
  for (const [patch, moved] of patches) {
    const r = await admin('PATCH', '/sources/bound', patch);
    expect(r.status).toBe(400);
    expect(r.json).toEqual({
      error: 'invalid_request',
      code: 'password_required',
      message: 'source "bound": a stored password is kept only while host, port, database, user and TLS settings are unchanged',
      details: ['reader', 'writer'].map((who) => `settings.${who}.password: the stored ${who} password is bound to its endpoint; ${moved.join(', ')} changed, so give the ${who} password again`),
    });
  }
  // A new user keeps nothing either; only that role is named.
  const user = await admin('PATCH', '/sources/bound', { settings: { reader: { user: 'someone_else' } } });
  expect(user.json).toMatchObject({ code: 'password_required', details: ['settings.reader.password: the stored reader password is bound to its endpoint; user changed, so give the reader password again'] });
  // The reader's password given again is not enough while the writer's would follow.
  const half = await admin('PATCH', '/sources/bound', { settings: { port: elsewhere.port, reader: { password: 'new-reader' } } });
  expect(half.json).toMatchObject({ code: 'password_required', details: ['settings.writer.password: the stored writer password is bound to its endpoint; port changed, so give the writer password again'] });

  const stored = await requireSource(env.db, 'bound');
  expect(stored.settings).toMatchObject({ host: '127.0.0.1', port: home.port, database: 'app', reader: { user: 'app_reader', password: OLD }, tls: { mode: 'off' } });
  expect((await admin('POST', '/sources/bound/scan')).status).toBe(503);
  expect(sent(home)).toEqual([`app_reader@app:${OLD}`]);
  expect(sent(elsewhere)).toEqual([]);
  home.logins.length = 0;
  // Changes that leave the endpoint alone keep the passwords.
  expect((await admin('PATCH', '/sources/bound?scan=false', { description: 'still here', settings: { max_rows: 50 } })).json).toMatchObject({ changed: ['description', 'settings.max_rows'] });
});

test('the CLI refuses the same change with exit code 2 and the reasons', async () => {
  let stdout = '';
  let stderr = '';
  const io = { out: (t: string) => (stdout += t), err: (t: string) => (stderr += t) };
  const code = await runCli(['--server', base, '--token', token, 'source', 'update', 'bound', '--port', String(elsewhere.port)], io);
  expect(code).toBe(2);
  expect(stdout).toBe('');
  expect(stderr).toContain('source "bound": a stored password is kept only while host, port, database, user and TLS settings are unchanged');
  expect(stderr).toContain('settings.reader.password: the stored reader password is bound to its endpoint; port changed, so give the reader password again');
  expect(stderr).not.toContain(OLD);
  expect(sent(elsewhere)).toEqual([]);
});

test('apply: an exported file moved to another port without the variables set is refused; with them set it applies and only the new passwords are sent', async () => {
  delete process.env.BOUND_READER_PASSWORD;
  delete process.env.BOUND_WRITER_PASSWORD;
  const doc = (await admin('GET', '/export')).json;
  const bound = doc.sources.find((s: { id: string }) => s.id === 'bound');
  expect(bound.settings.reader).toEqual({ user: 'app_reader', password_env: 'BOUND_READER_PASSWORD' });
  // Unchanged, the unset variables keep the stored passwords (an exported file plans with no variables set).
  expect((await admin('POST', '/apply?plan=true', { document: doc })).json).toMatchObject({ plan: { changes: [] } });
  bound.settings.port = elsewhere.port;
  const text = YAML.stringify(doc);
  for (const q of ['?plan=true', '']) {
    const r = await admin('POST', `/apply${q}`, { text });
    expect(r.status).toBe(400);
    expect(r.json).toMatchObject({ code: 'password_required', details: ['settings.reader.password: the stored reader password is bound to its endpoint; port changed, so give the reader password again', 'settings.writer.password: the stored writer password is bound to its endpoint; port changed, so give the writer password again'] });
  }
  expect((await requireSource(env.db, 'bound')).settings).toMatchObject({ port: home.port });
  expect(sent(elsewhere)).toEqual([]);

  process.env.BOUND_READER_PASSWORD = 'moved-reader';
  process.env.BOUND_WRITER_PASSWORD = 'moved-writer';
  try {
    const r = await admin('POST', '/apply', { text });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ applied: true, scans: [{ sourceId: 'bound', error: expect.any(String) }] });
  } finally {
    delete process.env.BOUND_READER_PASSWORD;
    delete process.env.BOUND_WRITER_PASSWORD;
  }
  expect(sent(elsewhere)).toEqual(['app_reader@app:moved-reader']);
  expect(sent(home)).toEqual([]);
  elsewhere.logins.length = 0;
});

test('PATCH with the passwords given again moves the source; the scan sends only the new password', async () => {
  const r = await admin('PATCH', '/sources/bound', { settings: { port: home.port, reader: { password: 'back-reader' }, writer: { password: 'back-writer' } } });
  expect(r.status).toBe(200);
  expect(r.json).toMatchObject({ changed: ['settings.port', 'settings.reader.password', 'settings.writer.password'], scan: null, scanError: expect.any(String) });
  expect(r.text).not.toContain('back-reader');
  expect(sent(home)).toEqual(['app_reader@app:back-reader']);
  expect(sent(elsewhere)).toEqual([]);
});
