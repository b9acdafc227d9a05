/**
 * Task hnu43 item 6: a webhook signing secret shorter than 32 bytes (WEBHOOK_SECRET_MIN_BYTES) is
 * refused when the configuration loads, naming the variable and its length, never its value; an
 * unset variable still only skips the webhook at start. The dispatcher skips a weak one too.
 */
import { loadConfig, WEBHOOK_SECRET_MIN_BYTES } from '../../../src/control/config';
import { ValidationError } from '../../../src/control/errors';
import { startWebhookDispatcher } from '../../../src/approvals/webhooks';

const hooks = (secret_env: string) => ({ notifications: { webhooks: [{ url: 'https://hooks.example.com/x', events: ['approval.queued'], secret_env }] } }) as never;

function problems(fn: () => unknown): string[] {
  try {
    fn();
  } catch (err) {
    if (err instanceof ValidationError) return (err as ValidationError & { details?: string[] }).details ?? [err.message];
    throw err;
  }
  return [];
}

test('a 1-byte and a 31-byte secret are refused at load; 32 bytes and an unset variable load', () => {
  expect(WEBHOOK_SECRET_MIN_BYTES).toBe(32);
  // Before: NU43_SECRET=a loaded and signed every delivery with a one-byte key.
  expect(() => loadConfig({ env: { NU43_SECRET: 'a' }, overrides: hooks('NU43_SECRET') })).toThrow(ValidationError);
  const p = problems(() => loadConfig({ env: { NU43_SECRET: 'x'.repeat(31) }, overrides: hooks('NU43_SECRET') }));
  expect(p).toEqual(['/notifications/webhooks/0/secret_env: NU43_SECRET holds a 31-byte webhook signing secret; at least 32 bytes are required (random, e.g. openssl rand -hex 32)']);
  expect(p.join('\n')).not.toContain('x'.repeat(31));
  // Multi-byte characters count as their UTF-8 bytes: 11 × 3 bytes = 33.
  expect(loadConfig({ env: { NU43_SECRET: '€'.repeat(11) }, overrides: hooks('NU43_SECRET') }).notifications.webhooks).toHaveLength(1);
  expect(loadConfig({ env: { NU43_SECRET: 'y'.repeat(32) }, overrides: hooks('NU43_SECRET') }).notifications.webhooks).toHaveLength(1);
  expect(loadConfig({ env: {}, overrides: hooks('NU43_SECRET') }).notifications.webhooks).toHaveLength(1);
});

test('the dispatcher never signs with a weak secret (a configuration not built by loadConfig): skipped, logged', async () => {
  const logged: string[] = [];
  const logger = { warn: () => undefined, error: (_o: unknown, msg: string) => void logged.push(msg) } as never;
  // With no usable webhook it returns at once, before touching the database.
  const d = await startWebhookDispatcher({ db: null as never, webhooks: [{ url: 'https://hooks.example.com/x', events: ['approval.queued'], secret_env: 'NU43_SECRET' }], env: { NU43_SECRET: 'a' }, logger });
  await d.close();
  expect(logged).toEqual(['webhook skipped: NU43_SECRET holds a 1-byte webhook signing secret; at least 32 bytes are required (random, e.g. openssl rand -hex 32)']);
});
