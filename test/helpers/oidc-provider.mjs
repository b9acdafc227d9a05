// A real OpenID provider for issue 26's end-to-end test: oidc-provider (OpenID-certified, ESM-only,
// so it runs in this child process, not in jest). Listens on 127.0.0.1:<random port> and prints
// {"issuer": "..."} on its first stdout line. One confidential client (argv[2] = client id, argv[3] =
// secret) may use client_credentials; access tokens are JWTs (RS256) for the requested resource
// indicator (RFC 8707) with scope "interlock". Exits when stdin closes.
import { generateKeyPairSync } from 'node:crypto';
import http from 'node:http';
import Provider from 'oidc-provider';

const [clientId = 'agent', clientSecret = 'agent-secret'] = process.argv.slice(2);
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: 'jwk' }), kid: 'op-1', alg: 'RS256', use: 'sig' };

const server = http.createServer();
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const issuer = `http://127.0.0.1:${server.address().port}`;
const provider = new Provider(issuer, {
  clients: [{ client_id: clientId, client_secret: clientSecret, grant_types: ['client_credentials'], redirect_uris: [], response_types: [], token_endpoint_auth_method: 'client_secret_basic', scope: 'interlock' }],
  jwks: { keys: [jwk] },
  scopes: ['interlock'],
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, resource) => ({ scope: 'interlock', audience: resource, accessTokenFormat: 'jwt', accessTokenTTL: 300, jwt: { sign: { alg: 'RS256' } } }),
    },
  },
});
provider.on('server_error', (_ctx, err) => process.stderr.write(`oidc-provider server_error: ${err.message}\n`));
server.on('request', provider.callback());
process.stdout.write(JSON.stringify({ issuer }) + '\n');
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
