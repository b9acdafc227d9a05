/**
 * Issue 26: which tokens are cheap refusals (charged to the keyless budget before the body is read)
 * and that API keys still go to the key resolver.
 */
import { base64url } from 'jose';
import { FederatedIdentityResolver } from '../../../src/auth/federated-resolver';
import { TokenVerifier } from '../../../src/auth/token-verifier';
import type { TokenIdentityStore } from '../../../src/auth/token-identities';
import { StaticIdentityResolver } from '../../../src/pipeline/01-identity';
import { isJwtShaped } from '../../../src/auth/jwt-form';

const ISSUER = 'https://idp.example.com';
const KEY = 'ilk_' + 'a'.repeat(43);
const keys = Object.assign(new StaticIdentityResolver({ [KEY]: { id: 'idn_1', name: 'bot' } }), { rejectsByFormat: (k: string) => !/^ilk_[A-Za-z0-9_-]{43}$/.test(k) });
const noStore = { identityFor: () => Promise.reject(new Error('not reached')) } as unknown as TokenIdentityStore;
const outcomes: string[] = [];
const r = new FederatedIdentityResolver(keys, new TokenVerifier([{ issuer: ISSUER, jwks_uri: 'http://127.0.0.1:9/jwks' }], 'https://gw.example.com/mcp'), noStore, { onValidation: (o) => outcomes.push(o) });
const jwt = (payload: object) => `${base64url.encode(JSON.stringify({ alg: 'RS256' }))}.${base64url.encode(JSON.stringify(payload))}.c2ln`;

test('JWT-shaped tokens of an unknown issuer, malformed or oversized are rejected by form; a known issuer is not', () => {
  expect(isJwtShaped('a.b.c')).toBe(true);
  expect(isJwtShaped('a.b')).toBe(false);
  expect(r.rejectsByFormat(jwt({ iss: ISSUER }))).toBe(false);
  expect(r.rejectsByFormat(jwt({ iss: 'https://evil.example' }))).toBe(true);
  expect(r.rejectsByFormat(jwt({ iss: ISSUER, pad: 'x'.repeat(9000) }))).toBe(true);
  expect(r.rejectsByFormat('e30.%%%.x')).toBe(true);
  expect(r.rejectsByFormat(KEY)).toBe(false);
  expect(r.rejectsByFormat('junk')).toBe(true);
});

test('API keys resolve through the key resolver; bad tokens are refused with the contract code and counted', async () => {
  expect(await r.resolveDetailed(KEY)).toEqual({ identity: { id: 'idn_1', name: 'bot', keyId: 'static:idn_1' } });
  expect(await r.resolveDetailed('ilk_nope')).toEqual({ refusal: 'invalid_api_key', reason: 'unknown_key' });
  expect(await r.resolveDetailed(jwt({ iss: 'https://evil.example' }))).toEqual({ refusal: 'invalid_token', reason: 'unknown_issuer' });
  expect(await r.resolveDetailed('e30.e30x.c2ln')).toEqual({ refusal: 'invalid_token', reason: 'malformed' });
  // The JWKS at 127.0.0.1:9 refuses connections: fail closed.
  expect(await r.resolveDetailed(jwt({ iss: ISSUER, sub: 'a', exp: 9e9 }))).toEqual({ refusal: 'identity_provider_unavailable', reason: 'keys_unavailable' });
  expect(outcomes).toEqual(['unknown_issuer', 'malformed', 'keys_unavailable']);
});
