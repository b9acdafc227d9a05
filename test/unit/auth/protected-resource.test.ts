/** Issue 26 item 3: the metadata URL, the challenge header, and where the challenge applies per dialect and route. */
import { challengeHeader, metadataUrl, protectedResourceMetadata, withChallenge, type AuthSurface } from '../../../src/auth/protected-resource';
import { renderOutcome } from '../../../src/protocol/tool-results';
import { httpOutcome } from '../../../src/http/common';
import type { ToolOutcome } from '../../../src/tools/types';

const S: AuthSurface = { resource: 'https://gw.example.com/mcp', authorizationServers: ['https://idp.example.com'], scopesSupported: [], requiredScopes: ['interlock:query'], handshakeChallenge: false };
const META = 'https://gw.example.com/.well-known/oauth-protected-resource/mcp';

function answer(o: ToolOutcome, dialect: 'modern' | 'handshake', s: AuthSurface | null = S) {
  const version = dialect === 'modern' ? '2026-07-28' : '2025-11-25';
  return withChallenge(s ?? undefined, o, dialect, version, 'req_1', renderOutcome(o, dialect, version, 'req_1'));
}

test('metadata URL inserts the well-known path before the resource path (RFC 9728 3.1)', () => {
  expect(metadataUrl('https://gw.example.com/mcp')).toBe(META);
  expect(metadataUrl('https://gw.example.com/')).toBe('https://gw.example.com/.well-known/oauth-protected-resource');
  expect(protectedResourceMetadata(S)).toEqual({ resource: 'https://gw.example.com/mcp', authorization_servers: ['https://idp.example.com'], bearer_methods_supported: ['header'] });
});

test('challenge header per refusal code', () => {
  expect(challengeHeader(S, 'missing_api_key')).toBe(`Bearer resource_metadata="${META}"`);
  expect(challengeHeader(S, 'invalid_token')).toBe(`Bearer resource_metadata="${META}", error="invalid_token"`);
  expect(challengeHeader(S, 'insufficient_scope')).toBe(`Bearer resource_metadata="${META}", error="insufficient_scope", scope="interlock:query"`);
});

test('modern dialect: 401 and insufficient_scope 403 carry the challenge; other refusals do not', () => {
  expect(answer({ kind: 'refusal', code: 'missing_api_key' }, 'modern')).toMatchObject({ kind: 'error', status: 401, headers: { 'WWW-Authenticate': `Bearer resource_metadata="${META}"` } });
  expect(answer({ kind: 'refusal', code: 'insufficient_scope' }, 'modern')).toMatchObject({ kind: 'error', status: 403, headers: { 'WWW-Authenticate': challengeHeader(S, 'insufficient_scope') } });
  const denied = answer({ kind: 'refusal', code: 'source_role_denied' }, 'modern');
  expect(denied).toMatchObject({ kind: 'error', status: 403 });
  expect(denied.kind === 'error' ? denied.headers?.['WWW-Authenticate'] : 'not an error').toBeUndefined();
});

test('handshake dialect: the contract tool-result refusal by default; HTTP 401 with the challenge only on opt-in', () => {
  const o: ToolOutcome = { kind: 'refusal', code: 'missing_api_key' };
  const byDefault = answer(o, 'handshake');
  expect(byDefault.kind).toBe('result');
  expect(byDefault.kind === 'result' && byDefault.result.isError).toBe(true);
  const optIn = answer(o, 'handshake', { ...S, handshakeChallenge: true });
  expect(optIn).toEqual({ kind: 'error', status: 401, error: { code: -32602, message: expect.any(String), data: expect.objectContaining({ status: 'unauthorized', code: 'missing_api_key', request_id: 'req_1' }) }, headers: { 'WWW-Authenticate': `Bearer resource_metadata="${META}"` } });
  // A 403 stays a tool result in the handshake dialect even on opt-in.
  expect(answer({ kind: 'refusal', code: 'insufficient_scope' }, 'handshake', { ...S, handshakeChallenge: true }).kind).toBe('result');
  // Without a surface nothing changes.
  expect(answer(o, 'modern', null)).toMatchObject({ headers: { 'WWW-Authenticate': 'Bearer realm="interlock"' } });
});

// httpOutcome: the HTTP mapping shared by /v1 and the deprecated /mcp/tools/call.
describe('the deprecated routes and /v1 (httpOutcome, issue 26)', () => {
  test('without auth configured a 401 keeps the plain realm challenge and a 403 has none', () => {
    expect(httpOutcome({ kind: 'refusal', code: 'missing_api_key' }, 'req_1').headers).toEqual({ 'WWW-Authenticate': 'Bearer realm="interlock"' });
    expect(httpOutcome({ kind: 'refusal', code: 'insufficient_scope' }, 'req_1').headers).toEqual({});
  });

  test('with auth configured: the realm, resource_metadata, and the error of a refused token or a missing scope', () => {
    expect(httpOutcome({ kind: 'refusal', code: 'missing_api_key' }, 'req_1', S)).toMatchObject({ status: 401, headers: { 'WWW-Authenticate': `Bearer realm="interlock", resource_metadata="${META}"` } });
    expect(httpOutcome({ kind: 'refusal', code: 'invalid_api_key' }, 'req_1', S).headers).toEqual({ 'WWW-Authenticate': `Bearer realm="interlock", resource_metadata="${META}"` });
    expect(httpOutcome({ kind: 'refusal', code: 'invalid_token' }, 'req_1', S).headers).toEqual({ 'WWW-Authenticate': `Bearer realm="interlock", resource_metadata="${META}", error="invalid_token"` });
    expect(httpOutcome({ kind: 'refusal', code: 'insufficient_scope' }, 'req_1', S)).toMatchObject({ status: 403, headers: { 'WWW-Authenticate': `Bearer realm="interlock", resource_metadata="${META}", error="insufficient_scope", scope="interlock:query"` } });
    // Other refusals carry no challenge.
    expect(httpOutcome({ kind: 'refusal', code: 'source_role_denied' }, 'req_1', S).headers).toEqual({});
  });
});
