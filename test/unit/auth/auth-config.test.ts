/**
 * Issue 26: the `auth` configuration (spec/config-v1.schema.json) refuses symmetric and `none`
 * algorithms and unknown keys; issuers without auth.resource refuse to start; and a verification
 * failure spends the client address's keyless budget like a bad key (availability).
 */
import { loadConfig } from '../../../src/control/config';
import { ValidationError } from '../../../src/control/errors';
import { federatedIdentity } from '../../../src/auth';
import { StaticIdentityResolver } from '../../../src/pipeline/01-identity';
import { admitCall } from '../../../src/protocol/call-limits';
import { ClientLimits } from '../../../src/transport/client-limits';
import type { ControlDb } from '../../../src/control/db';

const ISSUER = 'https://login.example.com/';

function problems(auth: unknown): string[] {
  try {
    loadConfig({ env: {}, overrides: { auth } as never });
    return [];
  } catch (err) {
    return (err as ValidationError).details ?? [String(err)];
  }
}

test('a valid auth section loads', () => {
  const c = loadConfig({ env: {}, overrides: { auth: { resource: 'https://gw.example.com/mcp', issuers: [{ issuer: ISSUER, algorithms: ['RS256', 'EdDSA'], unknown_subjects: 'provision' }] } } });
  expect(c.auth?.issuers?.[0]).toEqual({ issuer: ISSUER, algorithms: ['RS256', 'EdDSA'], unknown_subjects: 'provision' });
});

test.each([['HS256'], ['none']])('algorithm %s is refused by the schema', (alg) => {
  expect(problems({ resource: 'https://gw.example.com/mcp', issuers: [{ issuer: ISSUER, algorithms: [alg] }] })).toEqual([expect.stringContaining('/auth/issuers/0/algorithms/0')]);
});

test('unknown keys and non-http issuers are refused', () => {
  expect(problems({ issuers: [{ issuer: ISSUER, jwks_url: 'x' }] }).join('\n')).toContain('jwks_url');
  expect(problems({ issuers: [{ issuer: 'file:///etc/passwd' }] }).join('\n')).toContain('/auth/issuers/0/issuer');
});

test('issuers without auth.resource refuse to start; without issuers the key resolver is used as is', () => {
  const keys = Object.assign(new StaticIdentityResolver({}), { invalidate() {}, async close() {} });
  expect(() => federatedIdentity({ issuers: [{ issuer: ISSUER }] }, keys, {} as ControlDb)).toThrow(ValidationError);
  expect(federatedIdentity(undefined, keys, {} as ControlDb)).toEqual({ resolver: keys });
});

test('an invalid_token refusal spends the keyless budget; past it the answer is rate_limited', () => {
  const limits = new ClientLimits({ keyless: { points: 2, windowSeconds: 60 }, streamsPerAddress: 10, streamsPerIdentity: 10 });
  const refused = { kind: 'refusal' as const, code: 'invalid_token' };
  expect(admitCall(limits, '10.0.0.1', refused, null).outcome).toEqual(refused);
  expect(admitCall(limits, '10.0.0.1', refused, null).outcome).toEqual(refused);
  expect(admitCall(limits, '10.0.0.1', refused, null).outcome).toMatchObject({ kind: 'refusal', code: 'rate_limited' });
  // Charged up front at the edge (a junk token): not charged twice.
  const fresh = new ClientLimits({ keyless: { points: 1, windowSeconds: 60 }, streamsPerAddress: 10, streamsPerIdentity: 10 });
  expect(admitCall(fresh, '10.0.0.2', refused, null, true).outcome).toEqual(refused);
  expect(admitCall(fresh, '10.0.0.2', refused, null, false).outcome).toEqual(refused);
});
