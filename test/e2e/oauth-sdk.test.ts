/**
 * Issue 26 "Real parts": a real OpenID provider (oidc-provider, in a child process) issues JWT
 * access tokens with resource indicators, and the official MCP SDK v1 client completes the whole
 * flow with its own OAuth support: its unauthenticated tools/call gets HTTP 401 with the
 * resource_metadata challenge (auth.handshake_challenge), it discovers the protected resource
 * metadata and the provider from it, gets a token (client_credentials, the headless grant, with
 * resource=<the gateway's /mcp>), and its governed calls then succeed under a provisioned identity
 * whose claim grants the demo role. The audit records the provider's issuer, the subject and jti.
 */
import net from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { startGovernedEnv, type GovernedEnv } from '../helpers/governed';
import { startOidcProvider, type RunningProvider } from '../helpers/oidc-provider';
import { DEMO_ROLE } from '../../src/demo/provision';

jest.setTimeout(120_000);

let op: RunningProvider;
let env: GovernedEnv;

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

beforeAll(async () => {
  op = await startOidcProvider('reporting-agent', 'reporting-agent-secret-0123456789');
  const port = await freePort();
  env = await startGovernedEnv({
    port,
    config: {
      auth: {
        resource: `http://127.0.0.1:${port}/mcp`,
        scopes_supported: ['interlock'],
        handshake_challenge: true,
        issuers: [{ issuer: op.issuer, required_scopes: ['interlock'], unknown_subjects: 'provision', role_grants: [{ claim: 'client_id', value: 'reporting-agent', role: DEMO_ROLE.name, source: 'chinook' }] }],
      },
    },
  });
});
afterAll(async () => {
  await env?.close();
  await op?.close();
});

test('the official SDK v1 client: 401 challenge → metadata → token from the provider → governed calls', async () => {
  const provider = new ClientCredentialsProvider({ clientId: op.clientId, clientSecret: op.clientSecret, scope: 'interlock', expectedIssuer: op.issuer });
  const seen: Array<{ url: string; status: number; challenge: string | null }> = [];
  const recordingFetch: typeof fetch = async (input, init) => {
    const r = await fetch(input, init);
    seen.push({ url: String(input instanceof Request ? input.url : input), status: r.status, challenge: r.headers.get('www-authenticate') });
    return r;
  };
  const transport = new StreamableHTTPClientTransport(new URL(env.url), { authProvider: provider, fetch: recordingFetch });
  const client = new Client({ name: 'interlock-oauth-e2e', version: '1.0.0' }, { capabilities: {} });
  await client.connect(transport);
  try {
    // The SDK answers the challenge by authorizing and retrying the call itself: one callTool.
    const listed = await client.callTool({ name: 'interlock_list_sources', arguments: {} });
    expect(listed.isError).toBeUndefined();
    expect(Object.keys(JSON.parse((listed.content as Array<{ text: string }>)[0].text))).toEqual(['chinook']);
    const rows = await client.callTool({ name: 'interlock_query', arguments: { source_id: 'chinook', sql: 'SELECT count(*) AS n FROM artist' } });
    expect(rows.isError).toBeUndefined();
    expect(JSON.parse((rows.content as Array<{ text: string }>)[0].text)).toEqual([{ n: expect.anything() }]);

    const challenge = seen.find((x) => x.status === 401);
    expect(challenge?.challenge).toBe(`Bearer resource_metadata="http://127.0.0.1:${new URL(env.url).port}/.well-known/oauth-protected-resource/mcp"`);
    expect(seen.some((x) => x.url.includes('/.well-known/oauth-protected-resource') && x.status === 200)).toBe(true);
    expect(seen.some((x) => x.url.startsWith(op.issuer) && x.url.endsWith('/token') && x.status === 200)).toBe(true);
    expect(provider.tokens()?.access_token).toMatch(/^eyJ/);

    const idn = await env.db.pool.query('SELECT i.name, s.subject FROM identity_subjects s JOIN identities i ON i.id = s.identity_id WHERE s.issuer = $1', [op.issuer]);
    expect(idn.rows).toEqual([{ name: 'reporting-agent', subject: 'reporting-agent' }]);
    const ev = await env.db.pool.query("SELECT details->'oauth' AS oauth FROM audit_events WHERE tool = 'interlock_query' AND details ? 'oauth'");
    expect(ev.rows).toHaveLength(1);
    expect(ev.rows[0].oauth).toEqual({ issuer: op.issuer, subject: 'reporting-agent', jti: expect.any(String) });
  } finally {
    await client.close();
  }
});
