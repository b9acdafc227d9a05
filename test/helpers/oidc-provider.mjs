// A real OpenID provider for issue 26's end-to-end tests: oidc-provider (OpenID-certified, ESM-only,
// so it runs in this child process, not in jest). Listens on 127.0.0.1:<random port> and prints
// {"issuer": "..."} on its first stdout line. Exits when stdin closes.
//
// - One confidential client (argv[2] = client id, argv[3] = secret) may use client_credentials.
// - Dynamic client registration (RFC 7591) is open, so a client such as the MCP SDK registers
//   itself and uses the authorization-code flow with PKCE.
// - The interaction (login and consent) is headless: /interaction/<uid> signs in the account named
//   by argv[4] (default "alice") and grants the requested scopes and resource at once, as a test
//   user clicking through would. Tokens of that account carry email <account>@example.com and
//   groups ["analysts"].
// - Access tokens are JWTs (RS256) for the requested resource indicator (RFC 8707) with scope
//   "interlock".
import { generateKeyPairSync } from 'node:crypto';
import http from 'node:http';
import Provider from 'oidc-provider';

const [clientId = 'agent', clientSecret = 'agent-secret', account = 'alice'] = process.argv.slice(2);
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: 'jwk' }), kid: 'op-1', alg: 'RS256', use: 'sig' };

const server = http.createServer();
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const issuer = `http://127.0.0.1:${server.address().port}`;
const provider = new Provider(issuer, {
  clients: [{ client_id: clientId, client_secret: clientSecret, grant_types: ['client_credentials'], redirect_uris: [], response_types: [], token_endpoint_auth_method: 'client_secret_basic', scope: 'interlock' }],
  jwks: { keys: [jwk] },
  scopes: ['interlock', 'openid', 'offline_access'],
  findAccount: (_ctx, id) => ({ accountId: id, claims: () => ({ sub: id, email: `${id}@example.com` }) }),
  extraTokenClaims: (_ctx, token) => (token.accountId ? { email: `${token.accountId}@example.com`, groups: ['analysts'] } : undefined),
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    registration: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, resource) => ({ scope: 'interlock', audience: resource, accessTokenFormat: 'jwt', accessTokenTTL: 300, jwt: { sign: { alg: 'RS256' } } }),
    },
  },
});
provider.on('server_error', (_ctx, err) => process.stderr.write(`oidc-provider server_error: ${err.message}\n`));

/** The headless interaction: login as `account`, then consent to everything requested. */
async function interaction(req, res) {
  try {
    const details = await provider.interactionDetails(req, res);
    if (details.prompt.name === 'login') {
      await provider.interactionFinished(req, res, { login: { accountId: account } }, { mergeWithLastSubmission: false });
      return;
    }
    const grant = details.grantId ? await provider.Grant.find(details.grantId) : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
    const missing = details.prompt.details;
    if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
    for (const [resource, scopes] of Object.entries(missing.missingResourceScopes ?? {})) grant.addResourceScope(resource, scopes.join(' '));
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
  } catch (err) {
    process.stderr.write(`interaction failed: ${err.message}\n`);
    res.statusCode = 500;
    res.end('interaction failed');
  }
}

const callback = provider.callback();
server.on('request', (req, res) => (req.url.startsWith('/interaction/') ? void interaction(req, res) : callback(req, res)));
process.stdout.write(JSON.stringify({ issuer }) + '\n');
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
