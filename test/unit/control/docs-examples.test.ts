/**
 * The configuration examples of docs/operators.md work as written (issue 24 item 6): every ```yaml
 * block that configures the gateway is loaded by loadConfig with the environment the text tells the
 * reader to set. The webhook example names INTERLOCK_WEBHOOK_SECRET as its secret_env; the gateway
 * used to stop at start on it ("unknown InterLock environment variable").
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import YAML from 'yaml';
import { loadConfig } from '../../../src/control/config';
import { ValidationError } from '../../../src/control/errors';

const DOC = readFileSync(join(__dirname, '..', '..', '..', 'docs', 'operators.md'), 'utf8');
/** The YAML code blocks of the operators' guide whose top-level keys are gateway settings. */
const CONFIG_KEYS = ['listen', 'database', 'allowed_hosts', 'allowed_origins', 'rate_limits', 'approvals', 'notifications', 'cache', 'audit', 'log_level', 'ops_listen', 'client_limits'];
const blocks = [...DOC.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]).filter((text) => {
  const v = YAML.parse(text) as unknown;
  return v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).every((k) => CONFIG_KEYS.includes(k));
});

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'il-docs-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

test('the guide has the webhook example', () => {
  expect(blocks.some((b) => b.includes('secret_env: INTERLOCK_WEBHOOK_SECRET'))).toBe(true);
});

test.each(blocks.map((b, i) => [i, b]))('config example %i loads as written', (i, text) => {
  const file = join(dir, `example-${i}.yaml`);
  writeFileSync(file, text as string);
  // The environment the guide asks for: each secret_env variable the example names holds a secret.
  const env = Object.fromEntries([...(text as string).matchAll(/secret_env: ([A-Z0-9_]+)/g)].map((m) => [m[1], 'whsec-from-the-docs-0123456789abcdef']));
  const cfg = loadConfig({ file, env });
  expect(cfg).toMatchObject(YAML.parse(text as string));
});

test('a secret_env variable is known only when a webhook names it', () => {
  const file = join(dir, 'hook.yaml');
  writeFileSync(file, 'notifications:\n  webhooks:\n    - { url: "https://hooks.example.com/x", events: [approval.queued], secret_env: INTERLOCK_WEBHOOK_SECRET }\n');
  expect(loadConfig({ file, env: { INTERLOCK_WEBHOOK_SECRET: 'whsec-0123456789abcdef0123456789abcdef' } }).notifications.webhooks[0].secret_env).toBe('INTERLOCK_WEBHOOK_SECRET');
  let err: unknown;
  try {
    loadConfig({ env: { INTERLOCK_WEBHOOK_SECRET: 'whsec-0123456789abcdef0123456789abcdef' } });
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(ValidationError);
  expect((err as ValidationError).details).toEqual(['INTERLOCK_WEBHOOK_SECRET: unknown InterLock environment variable']);
});
