/** The operator CLI's control-connection bounds (src/cli/bounds.ts). */
import { boundedCommand, cliControlBounds, MAX_LOCK_TIMEOUT_MS } from '../../../src/cli/bounds';
import { CONTROL_CONNECT_TIMEOUT_MS } from '../../../src/control/db';
import { OPERATOR_LOCK_TIMEOUT_MS } from '../../../src/admin/governance-db';
import { ValidationError } from '../../../src/control/errors';

test('defaults are the operator connection’s: connect 5000 ms, lock_timeout 10000 ms', () => {
  expect(CONTROL_CONNECT_TIMEOUT_MS).toBe(5000);
  expect(OPERATOR_LOCK_TIMEOUT_MS).toBe(10_000);
  expect(cliControlBounds({})).toEqual({ connectTimeoutMs: 5000, lockTimeoutMs: 10_000 });
  expect(cliControlBounds({ INTERLOCK_LOCK_TIMEOUT_MS: '' })).toEqual({ connectTimeoutMs: 5000, lockTimeoutMs: 10_000 });
});

test('INTERLOCK_LOCK_TIMEOUT_MS sets lock_timeout: 1 to 3600000 ms', () => {
  expect(cliControlBounds({ INTERLOCK_LOCK_TIMEOUT_MS: '300' })).toEqual({ connectTimeoutMs: 5000, lockTimeoutMs: 300 });
  expect(cliControlBounds({ INTERLOCK_LOCK_TIMEOUT_MS: '1' }).lockTimeoutMs).toBe(1);
  expect(cliControlBounds({ INTERLOCK_LOCK_TIMEOUT_MS: String(MAX_LOCK_TIMEOUT_MS) }).lockTimeoutMs).toBe(3_600_000);
  for (const bad of ['0', '-5', '2.5', '1e3', ' 300', '3600001', '99999999', 'ten']) {
    expect(() => cliControlBounds({ INTERLOCK_LOCK_TIMEOUT_MS: bad })).toThrow(new ValidationError(`INTERLOCK_LOCK_TIMEOUT_MS must be a whole number of milliseconds from 1 to 3600000, got ${JSON.stringify(bad)}`));
  }
});

test('every command but serve and demo (the gateway’s pool) is bounded', () => {
  expect(boundedCommand('serve')).toBe(false);
  expect(boundedCommand('demo')).toBe(false);
  for (const p of ['role create', 'grant', 'revoke', 'identity disable', 'key create', 'policy create', 'source add', 'approval approve', 'db migrate', 'db grant-runtime-role', 'apply', 'operator-token create']) expect(boundedCommand(p)).toBe(true);
});
