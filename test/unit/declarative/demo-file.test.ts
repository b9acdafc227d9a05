/**
 * The demo's desired state shipped as examples/demo.interlock.yaml (issue 16, Build 5): valid
 * against spec/interlock-file-v1.schema.json, secrets only as references, consistent with the
 * privileges the demo grants its login roles, and instantiated per run by demoFileFor.
 */
import { readFileSync } from 'node:fs';
import { DEMO_FILE, DEMO_READ_TABLES, DEMO_WRITE_TABLES, DEMO_PASSWORD_ENV, demoFileFor, readDemoFile } from '../../../src/demo/provision';
import { HANDBOOK_PATH, HANDBOOK_ROLE } from '../../../src/discovery/handbook';
import { desiredStateOf, keepStoredSecrets } from '../../../src/declarative/schema';
import type { PostgresSourceSettings } from '../../../src/control/sources';

const params = { host: 'db.test', port: 6543, databaseName: 'chinook_x', readerRole: 'x_reader', writerRole: 'x_writer', sourceId: 'music', identityName: 'load-agent', handbook: true };

test('the shipped file validates and holds no password, only references', () => {
  const doc = readDemoFile();
  expect(readFileSync(DEMO_FILE, 'utf8')).not.toMatch(/\bpassword\s*:/);
  expect(doc.sources!.map((s) => [s.id, s.type])).toEqual([['chinook', 'postgres'], ['handbook', 'documents']]);
  expect(doc.sources![0].settings.reader).toEqual({ user: 'interlock_chinook_reader', password_env: DEMO_PASSWORD_ENV.reader });
  expect(doc.sources![0].settings.writer).toEqual({ user: 'interlock_chinook_writer', password_env: DEMO_PASSWORD_ENV.writer });
  expect(doc.identities).toEqual([{ name: 'demo-agent', grants: [{ role: 'demo-analyst', source: 'chinook' }, { role: 'handbook-reader', source: 'handbook' }] }]);
  expect(doc.policies!.map((p) => p.name)).toEqual(['demo-mask-contact', 'demo-mask-contact-phone']);
});

test("the role's tables are the ones the demo's login roles are granted", () => {
  const role = readDemoFile().roles!.find((r) => r.name === 'demo-analyst')!;
  expect(role.statements.filter((s) => s.action === 'read').map((s) => s.resource)).toEqual(DEMO_READ_TABLES.map((t) => `public.${t}`));
  expect(role.statements.filter((s) => s.action === 'write').map((s) => s.resource)).toEqual(DEMO_WRITE_TABLES.map((t) => `public.${t}`));
  expect(readDemoFile().roles!.find((r) => r.name === 'handbook-reader')).toEqual(HANDBOOK_ROLE);
});

test('demoFileFor fills in the connection and names of one run; secrets resolve from the process environment', () => {
  const doc = demoFileFor(params);
  expect(doc.sources![0]).toMatchObject({ id: 'music', settings: { host: 'db.test', port: 6543, database: 'chinook_x', reader: { user: 'x_reader', password_env: DEMO_PASSWORD_ENV.reader }, writer: { user: 'x_writer', password_env: DEMO_PASSWORD_ENV.writer } } });
  expect(doc.sources![1].settings).toEqual({ path: HANDBOOK_PATH });
  expect(doc.identities).toEqual([{ name: 'load-agent', grants: [{ role: 'demo-analyst', source: 'music' }, { role: 'handbook-reader', source: 'handbook' }] }]);
  expect(doc.policies!.map((p) => p.applies_to)).toEqual([{ sources: ['music'] }, { sources: ['music'] }]);
  const state = desiredStateOf(doc, { env: (n) => ({ [DEMO_PASSWORD_ENV.reader]: 'r-pw', [DEMO_PASSWORD_ENV.writer]: 'w-pw' })[n], file: () => undefined });
  const music = state.sources.get('music')!;
  expect(music.type).toBe('postgres');
  const creds = music.settings as PostgresSourceSettings;
  expect([creds.reader.password, creds.writer?.password]).toEqual(['r-pw', 'w-pw']);
  // An unset reference keeps a stored password; with nothing stored (a new source) it is refused.
  const unset = desiredStateOf(doc, { env: () => undefined, file: () => undefined });
  expect(() => keepStoredSecrets(unset, { sources: new Map() })).toThrow('/sources/0/settings/reader/password_env: environment variable CHINOOK_READER_PASSWORD is not set (needed: no stored password to keep for reader');
  const kept = desiredStateOf(doc, { env: () => undefined, file: () => undefined });
  keepStoredSecrets(kept, { sources: new Map([['music', state.sources.get('music')!]]) });
  expect([(kept.sources.get('music')!.settings as PostgresSourceSettings).reader.password, (kept.sources.get('music')!.settings as PostgresSourceSettings).writer?.password]).toEqual(['r-pw', 'w-pw']);
});

test('without the handbook: no handbook source, role or grant', () => {
  const doc = demoFileFor({ ...params, handbook: false });
  expect(doc.sources!.map((s) => s.id)).toEqual(['music']);
  expect(doc.roles!.map((r) => r.name)).toEqual(['demo-analyst']);
  expect(doc.identities![0].grants).toEqual([{ role: 'demo-analyst', source: 'music' }]);
});
