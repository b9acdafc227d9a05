/**
 * Issue 26 "Real parts", the authorization-code flow: the official MCP SDK v1 client, with its own
 * OAuth support (an OAuthClientProvider given to StreamableHTTPClientTransport as authProvider),
 * against a real OpenID provider (oidc-provider in a child process):
 *
 *   tools/call without a token → HTTP 401 with the resource_metadata challenge (auth.handshake_challenge)
 *   → the SDK reads the protected resource metadata (RFC 9728) and the provider's metadata
 *   → registers itself (RFC 7591) → sends the user to the authorization endpoint with PKCE and
 *     resource=<the gateway's /mcp> (RFC 8707)
 *   → [the browser step, headless here: the test follows the redirects and the provider's test
 *      interaction signs in "alice" and consents; the code comes back on the redirect URI]
 *   → transport.finishAuth(code) exchanges it at the token endpoint → governed calls succeed as the
 *     identity provisioned from the token (named by its email claim, granted the demo role by its
 *     groups claim), audited with issuer, subject and jti.
 *
 * The SDK's own code makes every OAuth request; the test supplies only what a host application
 * supplies (storage of client information, tokens and the PKCE verifier, and the browser).
 */
import net from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError, type OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import { decodeJwt } from 'jose';
import { startGovernedEnv, type GovernedEnv } from '../helpers/governed';
import { startOidcProvider, type RunningProvider } from '../helpers/oidc-provider';
import { DEMO_ROLE } from '../../src/demo/provision';

jest.setTimeout(120_000);

/** Never contacted: the headless browser stops at the redirect to it and reads the code. */
const REDIRECT = 'http://127.0.0.1:9/oauth/callback';

let op: RunningProvider;
let env: GovernedEnv;

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/**
 * The browser step without a browser: follows the provider's redirects (keeping its cookies) from
 * the authorization URL through its interaction until it redirects to REDIRECT, and returns the
 * code. Checks the state the SDK sent comes back unchanged. At most 10 hops.
 */
async function browse(start: URL): Promise<string> {
  const cookies = new Map<string, string>();
  let url = start;
  for (let hop = 0; hop < 10; hop++) {
    const r = await fetch(url, { redirect: 'manual', headers: { cookie: [...cookies].map(([k, v]) => `${k}=${v}`).join('; ') } });
    for (const c of r.headers.getSetCookie()) {
      const [pair] = c.split(';');
      const i = pair.indexOf('=');
      cookies.set(pair.slice(0, i), pair.slice(i + 1));
    }
    await r.arrayBuffer();
    const location = r.headers.get('location');
    if (r.status < 300 || r.status >= 400 || !location) throw new Error(`the authorization step stopped at ${url.pathname} with HTTP ${r.status}: ${op.stderr()}`);
    const next = new URL(location, url);
    if (next.href.startsWith(REDIRECT)) {
      const error = next.searchParams.get('error');
      if (error) throw new Error(`authorization refused: ${error} ${next.searchParams.get('error_description')}`);
      expect(next.searchParams.get('state')).toBe(start.searchParams.get('state'));
      return next.searchParams.get('code')!;
    }
    url = next;
  }
  throw new Error('too many redirects in the authorization step');
}

/** What a host application gives the SDK: storage and the browser. */
class HeadlessOAuthClient implements OAuthClientProvider {
  info?: OAuthClientInformationMixed;
  saved?: OAuthTokens;
  verifier = '';
  code?: string;
  authorizationUrl?: URL;
  readonly stateValue = `st-${Math.random().toString(36).slice(2)}`;
  get redirectUrl(): string {
    return REDIRECT;
  }
  get clientMetadata(): OAuthClientMetadata {
    return { client_name: 'InterLock e2e (authorization code)', redirect_uris: [REDIRECT], grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], token_endpoint_auth_method: 'none' };
  }
  state(): string {
    return this.stateValue;
  }
  clientInformation(): OAuthClientInformationMixed | undefined {
    return this.info;
  }
  saveClientInformation(info: OAuthClientInformationMixed): void {
    this.info = info;
  }
  tokens(): OAuthTokens | undefined {
    return this.saved;
  }
  saveTokens(tokens: OAuthTokens): void {
    this.saved = tokens;
  }
  saveCodeVerifier(v: string): void {
    this.verifier = v;
  }
  codeVerifier(): string {
    return this.verifier;
  }
  async redirectToAuthorization(url: URL): Promise<void> {
    this.authorizationUrl = url;
    this.code = await browse(url);
  }
}

beforeAll(async () => {
  op = await startOidcProvider('unused-cc-client', 'unused-cc-client-secret-0123456789', 'alice');
  const port = await freePort();
  env = await startGovernedEnv({
    port,
    config: {
      auth: {
        resource: `http://127.0.0.1:${port}/mcp`,
        scopes_supported: ['interlock'],
        handshake_challenge: true,
        issuers: [{ issuer: op.issuer, required_scopes: ['interlock'], unknown_subjects: 'provision', identity_claim: 'email', role_grants: [{ claim: 'groups', value: 'analysts', role: DEMO_ROLE.name, source: 'chinook' }] }],
      },
    },
  });
});
afterAll(async () => {
  await env?.close();
  await op?.close();
});

test('the official SDK v1 client, authorization code + PKCE: 401 challenge → metadata → registration → consent → token → governed calls', async () => {
  const resource = `${new URL(env.url).origin}/mcp`;
  const oauth = new HeadlessOAuthClient();
  const seen: Array<{ method: string; url: string; status: number; challenge: string | null }> = [];
  const recordingFetch: typeof fetch = async (input, init) => {
    const r = await fetch(input, init);
    seen.push({ method: init?.method ?? 'GET', url: String(input instanceof Request ? input.url : input), status: r.status, challenge: r.headers.get('www-authenticate') });
    return r;
  };
  const transport = new StreamableHTTPClientTransport(new URL(env.url), { authProvider: oauth, fetch: recordingFetch });
  const client = new Client({ name: 'interlock-oauth-authcode-e2e', version: '1.0.0' }, { capabilities: {} });
  await client.connect(transport);
  try {
    // 1. The first call is challenged; the SDK discovers, registers and sends the user to consent.
    await expect(client.callTool({ name: 'interlock_list_sources', arguments: {} })).rejects.toBeInstanceOf(UnauthorizedError);
    const challenge = seen.find((x) => x.status === 401);
    expect(challenge).toMatchObject({ method: 'POST', url: env.url, challenge: `Bearer resource_metadata="${new URL(env.url).origin}/.well-known/oauth-protected-resource/mcp"` });
    expect(seen.some((x) => x.url === `${new URL(env.url).origin}/.well-known/oauth-protected-resource/mcp` && x.status === 200)).toBe(true);
    expect(seen.some((x) => x.url.startsWith(op.issuer) && /\/\.well-known\/(openid-configuration|oauth-authorization-server)$/.test(x.url) && x.status === 200)).toBe(true);
    expect(seen.some((x) => x.method === 'POST' && x.url === `${op.issuer}/reg` && x.status === 201)).toBe(true);
    expect(oauth.info?.client_id).toEqual(expect.any(String));
    const authz = oauth.authorizationUrl!;
    expect(authz.origin).toBe(op.issuer);
    expect(Object.fromEntries(['response_type', 'client_id', 'code_challenge_method', 'redirect_uri', 'resource', 'scope'].map((k) => [k, authz.searchParams.get(k)]))).toEqual({
      response_type: 'code',
      client_id: oauth.info!.client_id,
      code_challenge_method: 'S256',
      redirect_uri: REDIRECT,
      resource,
      scope: 'interlock',
    });
    expect(oauth.code).toEqual(expect.any(String));

    // 2. The host hands the code back; the SDK exchanges it (with the PKCE verifier and the resource).
    await transport.finishAuth(oauth.code!);
    expect(seen.some((x) => x.method === 'POST' && x.url === `${op.issuer}/token` && x.status === 200)).toBe(true);
    const claims = decodeJwt(oauth.saved!.access_token);
    expect(claims).toMatchObject({ iss: op.issuer, sub: 'alice', aud: resource, scope: 'interlock', email: 'alice@example.com', groups: ['analysts'] });

    // 3. Governed calls as the provisioned identity.
    const listed = await client.callTool({ name: 'interlock_list_sources', arguments: {} });
    expect(listed.isError).toBeUndefined();
    expect(Object.keys(JSON.parse((listed.content as Array<{ text: string }>)[0].text))).toEqual(['chinook']);
    const rows = await client.callTool({ name: 'interlock_query', arguments: { source_id: 'chinook', sql: 'SELECT count(*) AS n FROM artist' } });
    expect(rows.isError).toBeUndefined();
    expect(JSON.parse((rows.content as Array<{ text: string }>)[0].text)).toEqual([{ n: 275 }]);
    // A query the role does not allow is still refused: the token gives the identity, governance decides.
    const denied = await client.callTool({ name: 'interlock_query', arguments: { source_id: 'chinook', sql: 'DROP TABLE artist' } });
    expect(denied.isError).toBe(true);

    const idn = await env.db.pool.query('SELECT i.name, s.subject FROM identity_subjects s JOIN identities i ON i.id = s.identity_id WHERE s.issuer = $1', [op.issuer]);
    expect(idn.rows).toEqual([{ name: 'alice@example.com', subject: 'alice' }]);
    const ev = await env.db.pool.query("SELECT details->'oauth' AS oauth FROM audit_events WHERE tool = 'interlock_query' AND details ? 'oauth' ORDER BY time");
    expect(ev.rows.map((r) => r.oauth)).toEqual([
      { issuer: op.issuer, subject: 'alice', jti: claims.jti },
      { issuer: op.issuer, subject: 'alice', jti: claims.jti },
    ]);
  } finally {
    await client.close();
  }
});
